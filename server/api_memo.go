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
// size (least recently used first out) and in age: an answer is used for
// memoMaxAge after its computation ended, so a stored object that changes
// under refs that do not move (a disk, or someone with write access to the
// object files) is seen within memoMaxAge of the end of the computation
// that read it, as the CLI sees it on its next run. A list is one answer
// made of its tasks' answers (server/api.go, listBody and listEntries): what it shows
// was read at most memoMaxAge before its computation began, or during it.

// memoMaxEntries, memoMaxBytes and memoMaxAge bound what a memo keeps (a
// memo's own fields, which tests lower). A list is kept as one answer (its
// tasks' answers are kept too, as far as the bounds allow, for the pages
// of single tasks), so it does not depend on the memo holding two answers
// for each of its tasks. The bytes bound what the entries hold.
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
	at   time.Time     // when its computation ended (set with done)
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
	return m.getAsOf(name, key, m.now(), compute)
}

// getAsOf is get for a request whose view of the refs was taken at asOf:
// a kept answer is used when it was complete less than maxAge before.
func (m *memo) getAsOf(name, key string, asOf time.Time, compute func() (any, int64, error)) (any, error) {
	m.mu.Lock()
	if el, ok := m.entries[name]; ok {
		e := el.Value.(*memoEntry)
		if e.key == key && m.fresh(e, asOf) {
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
	e := &memoEntry{name: name, key: key, done: make(chan struct{})}
	m.entries[name] = m.order.PushFront(e)
	m.computed[name]++
	m.mu.Unlock()

	val, size, err := compute()
	m.mu.Lock()
	e.val, e.err, e.size, e.at = val, err, size, m.now()
	close(e.done)
	if el, ok := m.entries[name]; ok && el.Value == e {
		if err != nil {
			m.removeLocked(el)
		} else {
			// Used now: a long computation (a list) must not be the least
			// recently used entry, behind the answers it made, as it ends.
			m.order.MoveToFront(el)
			m.bytes += size
			m.trimLocked()
		}
	}
	m.mu.Unlock()
	return val, err
}

// use returns the answer named name as computed at key when one is kept
// complete and fresh (as get would use it now), else compute's, which it
// counts and does not keep: it waits for no other computation.
func (m *memo) use(name, key string, compute func() (any, error)) (any, error) {
	asOf := m.now()
	m.mu.Lock()
	if el, ok := m.entries[name]; ok {
		e := el.Value.(*memoEntry)
		select {
		case <-e.done:
			if e.key == key && e.err == nil && asOf.Sub(e.at) < m.maxAge {
				m.order.MoveToFront(el)
				m.mu.Unlock()
				return e.val, nil
			}
		default:
		}
	}
	m.computed[name]++
	m.mu.Unlock()
	return compute()
}

// fresh reports whether e may be used by a request as of asOf: still
// being computed (the reader waits for it), or complete less than maxAge
// before asOf; m.mu is held.
func (m *memo) fresh(e *memoEntry, asOf time.Time) bool {
	select {
	case <-e.done:
		return asOf.Sub(e.at) < m.maxAge
	default:
		return true
	}
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
