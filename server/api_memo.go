package server

import (
	"container/list"
	"sync"
	"time"
)

// The API's reads are expensive (re-verifying a task's artifacts builds the
// spine index: about 200 ms at 1,000 versions), and many clients read the
// same task. A memo keeps each answer with the ref values it was computed
// from (bernstein.ReadView's keys: the task's journal and ledger, every
// spine, the published keys). A request takes a fresh snapshot and uses the
// kept answer only when its key is the same, so an answer is discarded as
// soon as any of those refs moves. Concurrent requests for an answer not
// yet kept wait for one computation. Answers are derived by this process
// from verified chains, never read from disk, and bounded in number and
// size (least recently used first out) and in age: a stored object that
// changes under refs that do not move (a disk, or someone with write access
// to the object files) is seen within memoMaxAge, as the CLI sees it on its
// next run.

// memoMaxEntries, memoMaxBytes and memoMaxAge bound what a memo keeps (a
// memo's own fields, which tests lower). A listing keeps two answers a task
// (its state and its report), read in one pass: with fewer entries than
// that, a list of many tasks pushes out its own answers before the next
// list reads them, and every list computes every task again. The bytes
// bound what the entries hold.
const (
	memoMaxEntries = 1 << 16
	memoMaxBytes   = int64(256 << 20)
	memoMaxAge     = 10 * time.Second
)

type memo struct {
	maxEntries int
	maxBytes   int64
	maxAge     time.Duration
	now        func() time.Time
	// waiting, when set (by tests), is called when a reader starts to wait
	// for an answer another reader is computing.
	waiting func()

	mu      sync.Mutex
	entries map[string]*list.Element // by name
	order   *list.List               // of *memoEntry, most recently used first
	bytes   int64
	// computed counts computations, for tests and diagnostics.
	computed map[string]int
}

type memoEntry struct {
	name string
	key  string
	done chan struct{} // closed when val and err are set
	at   time.Time     // when its computation began
	val  any
	err  error
	size int64
}

func newMemo() *memo {
	return &memo{maxEntries: memoMaxEntries, maxBytes: memoMaxBytes, maxAge: memoMaxAge, now: time.Now,
		entries: map[string]*list.Element{}, order: list.New(), computed: map[string]int{}}
}

// get returns the answer named name as computed at key: the kept one when
// its key is key, else compute's (which also returns the answer's size in
// bytes, roughly). Errors are not kept.
func (m *memo) get(name, key string, compute func() (any, int64, error)) (any, error) {
	m.mu.Lock()
	if el, ok := m.entries[name]; ok {
		e := el.Value.(*memoEntry)
		if e.key == key && m.now().Sub(e.at) < m.maxAge {
			m.order.MoveToFront(el)
			m.mu.Unlock()
			if m.waiting != nil {
				select {
				case <-e.done:
				default:
					m.waiting()
				}
			}
			<-e.done
			return e.val, e.err
		}
		m.removeLocked(el)
	}
	e := &memoEntry{name: name, key: key, done: make(chan struct{}), at: m.now()}
	m.entries[name] = m.order.PushFront(e)
	m.computed[name]++
	m.mu.Unlock()

	val, size, err := compute()
	m.mu.Lock()
	e.val, e.err, e.size = val, err, size
	close(e.done)
	if el, ok := m.entries[name]; ok && el.Value == e {
		if err != nil {
			m.removeLocked(el)
		} else {
			m.bytes += size
			m.trimLocked()
		}
	}
	m.mu.Unlock()
	return val, err
}

// removeLocked drops an entry; m.mu is held.
func (m *memo) removeLocked(el *list.Element) {
	e := el.Value.(*memoEntry)
	select {
	case <-e.done:
		m.bytes -= e.size
	default: // still computing: its size was never added
	}
	m.order.Remove(el)
	delete(m.entries, e.name)
}

// trimLocked drops the least recently used answers beyond the bounds,
// never one still being computed; m.mu is held.
func (m *memo) trimLocked() {
	for el := m.order.Back(); el != nil && (m.order.Len() > m.maxEntries || m.bytes > m.maxBytes); {
		prev := el.Prev()
		select {
		case <-el.Value.(*memoEntry).done:
			m.removeLocked(el)
		default:
		}
		el = prev
	}
}

// computations returns how often the answer named name was computed.
func (m *memo) computations(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.computed[name]
}
