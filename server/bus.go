package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The bus turns what lands in the repository's refs into server-sent
// events. It watches the refs (loose files and packed-refs, with a slow poll
// as a safety net), so writes by any process appear: a CLI post, an MCP
// stdio server, a git fetch. Each change is read through Store.TaskFeed
// (one consistent view per task, every row proven), numbered, kept in memory
// and in a log under <git dir>/bernstein/events, so that a client resuming
// with Last-Event-ID gets every event it missed, once and in order, also
// across a restart. The log is derived data: it says which row an event
// was, never what the row says; replayed events are read again from the
// chains, and an entry whose row a chain no longer holds is dropped.

// Event types (docs/http.md).
const (
	EventArtifact   = "task.artifact"   // an artifact version was posted
	EventWork       = "task.work"       // a checkpoint, diff, gate or evidence row
	EventTransition = "task.transition" // a ledger row: created, claimed, started, ...
	EventProgress   = "task.progress"   // the progress vector changed (vector_hash)
	EventReset      = "task.reset"      // a chain was rewritten: reload the task
	EventStreamGap  = "stream.reset"    // the events a client asked for are gone: reload
)

// Event is one numbered event.
type Event struct {
	ID   int64           `json:"id"`
	Type string          `json:"type"`
	Task string          `json:"task"`
	Data json.RawMessage `json:"data"`
}

// logEntry is one line of the event log: which row (or which vector) an
// event was, and after each batch the heads it reached.
type logEntry struct {
	ID     int64                      `json:"id,omitempty"`
	Type   string                     `json:"type,omitempty"`
	Task   string                     `json:"task,omitempty"`
	Chain  string                     `json:"chain,omitempty"`
	Index  int64                      `json:"index,omitempty"`
	Commit string                     `json:"commit,omitempty"`
	Vector string                     `json:"vector,omitempty"`
	Heads  map[string]bernstein.Heads `json:"heads,omitempty"`
	Last   int64                      `json:"last,omitempty"`
}

// ringSize is how many recent events the bus keeps in memory; older ones
// are read back from the log.
const ringSize = 4096

// Bus is the event bus of one store.
type Bus struct {
	store  *bernstein.Store
	logger *slog.Logger
	dir    string

	scanMu sync.Mutex // one scan at a time

	mu      sync.Mutex
	ring    []Event // the latest events, oldest first
	next    int64   // the id the next event takes
	heads   map[string]bernstein.Heads
	vectors map[string]string // last progress hash sent, per task
	wake    chan struct{}     // closed and replaced on every publish
	log     *os.File
	logged  []logEntry // entries of the current batch, written at its end
	// fresh is set until the first scan of a bus that has no log: that scan
	// takes the repository as it is as the starting point (a page renders
	// what is there; the stream carries what happens next), so a first start
	// over a long history publishes nothing.
	fresh bool
}

// NewBus opens the bus of store, reading its log back. It does not watch
// yet: see Run.
func NewBus(store *bernstein.Store, logger *slog.Logger) (*Bus, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Bus{store: store, logger: logger, dir: filepath.Join(store.GitDir(), "bernstein", "events"),
		next: 1, heads: map[string]bernstein.Heads{}, vectors: map[string]string{}, wake: make(chan struct{})}
	if err := b.load(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Bus) logPath() string { return filepath.Join(b.dir, "log") }

// load reads the log: the next id and the heads after the last complete
// batch. A log that does not parse is set aside and the bus starts afresh
// (clients resuming from it get stream.reset).
func (b *Bus) load() error {
	f, err := os.Open(b.logPath())
	if errors.Is(err, fs.ErrNotExist) {
		b.fresh = true
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var e logEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // a line cut short by a crash
		}
		if e.Heads != nil {
			for t, h := range e.Heads {
				b.heads[t] = h
			}
			if e.Last >= b.next {
				b.next = e.Last + 1
			}
			continue
		}
		if e.ID >= b.next {
			b.next = e.ID + 1
		}
		if e.Type == EventProgress {
			b.vectors[e.Task] = e.Vector
		}
	}
	return sc.Err()
}

// LastID is the id of the latest event: a page rendered now is current up
// to it, and its client resumes the stream from there.
func (b *Bus) LastID() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.next - 1
}

// Subscription is one client's view of the bus.
type Subscription struct {
	b    *Bus
	task string // "" for every task
	last int64  // the id of the last event delivered
}

// Subscribe starts a subscription after event lastID; a negative lastID
// means from now on (0 means every event, from the first).
func (b *Bus) Subscribe(task string, lastID int64) *Subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	if lastID < 0 || lastID >= b.next {
		lastID = b.next - 1
	}
	return &Subscription{b: b, task: task, last: lastID}
}

// Next returns the events after the last one delivered (waiting until
// there are some or ctx ends); a subscription that asked for events the bus
// no longer has gets one stream.reset event first.
func (s *Subscription) Next(ctx context.Context) ([]Event, error) {
	for {
		evs, last, wake, err := s.b.since(s.last, s.task)
		if err != nil {
			return nil, err
		}
		s.last = last
		if len(evs) > 0 {
			return evs, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		}
	}
}

// since returns the events after id for task ("" all), from memory or, for
// older ones, from the log; the id it read up to; and the channel the next
// publish closes.
func (b *Bus) since(id int64, task string) ([]Event, int64, chan struct{}, error) {
	b.mu.Lock()
	wake := b.wake
	first := b.next
	if len(b.ring) > 0 {
		first = b.ring[0].ID
	}
	if id+1 >= first {
		var out []Event
		for _, e := range b.ring {
			if e.ID > id && (task == "" || e.Task == task) {
				out = append(out, e)
			}
		}
		last := b.next - 1
		b.mu.Unlock()
		return out, max(last, id), wake, nil
	}
	b.mu.Unlock()
	// Older than memory: read back from the log and re-derive each event.
	evs, err := b.replay(id, first, task)
	if err != nil {
		return nil, id, nil, err
	}
	return evs, first - 1, wake, nil
}

// replay reads the log entries after id and before upto and derives their
// events again from the chains; gap events stand for what is gone.
func (b *Bus) replay(id, upto int64, task string) ([]Event, error) {
	f, err := os.Open(b.logPath())
	if errors.Is(err, fs.ErrNotExist) {
		return []Event{b.gap(upto-1, "the server no longer has the events after "+fmt.Sprint(id))}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var out []Event
	found := false
	for sc.Scan() {
		var e logEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.ID == 0 {
			continue
		}
		if e.ID <= id {
			found = found || e.ID == id
			continue
		}
		if e.ID >= upto {
			break
		}
		if task != "" && e.Task != task {
			continue
		}
		if ev, ok := b.rederive(e); ok {
			out = append(out, ev)
		}
	}
	if !found && id > 0 {
		// The id the client resumes from is not in the log (a log started
		// afresh, or compacted): it cannot know what it missed.
		return []Event{b.gap(upto-1, fmt.Sprintf("event %d is no longer in the server's log", id))}, nil
	}
	return out, sc.Err()
}

// gap is the stream.reset event a client gets when its events are gone.
func (b *Bus) gap(id int64, reason string) Event {
	data, _ := json.Marshal(map[string]string{"reason": reason})
	return Event{ID: id, Type: EventStreamGap, Data: data}
}

// rederive builds a logged event's data again from the chains. An entry
// whose row the chain no longer holds at that index is dropped; a progress
// entry is sent as the vector now.
func (b *Bus) rederive(e logEntry) (Event, bool) {
	if e.Type == EventProgress {
		w, err := b.store.Progress(e.Task)
		if err != nil {
			return Event{}, false
		}
		data, _ := json.Marshal(w)
		return Event{ID: e.ID, Type: e.Type, Task: e.Task, Data: data}, true
	}
	if e.Type == EventReset {
		data, _ := json.Marshal(map[string]string{"task_id": e.Task, "reason": "a chain of the task was rewritten"})
		return Event{ID: e.ID, Type: e.Type, Task: e.Task, Data: data}, true
	}
	row, err := b.store.FeedRowAt(e.Task, e.Chain, e.Index)
	if err != nil || row.Commit.String() != e.Commit {
		return Event{}, false
	}
	typ, data := rowEvent(e.Task, row)
	return Event{ID: e.ID, Type: typ, Task: e.Task, Data: data}, true
}

// Run watches the refs and publishes their changes until ctx ends.
func (b *Bus) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.logger.Warn("watching refs failed, polling only", "err", err)
		w = nil
	}
	if w != nil {
		defer w.Close()
		b.watch(w)
	}
	if err := b.Scan(); err != nil {
		b.logger.Warn("scan", "err", err)
	}
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
					w.Add(ev.Name)
				}
			}
			// Let a burst of renames settle into one scan.
			drain(events, 2*time.Millisecond)
		case err := <-errs:
			b.logger.Warn("watching refs", "err", err)
		case <-poll.C:
		}
		if err := b.Scan(); err != nil {
			b.logger.Warn("scan", "err", err)
		}
	}
}

// drain swallows events for as long as they keep coming within quiet.
func drain(events <-chan fsnotify.Event, quiet time.Duration) {
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
			t.Reset(quiet)
		case <-t.C:
			return
		}
	}
}

// watch adds the directories whose entries change when refs move: the git
// directory (packed-refs), refs/, refs/bernstein/ and every directory below.
func (b *Bus) watch(w *fsnotify.Watcher) {
	git := b.store.GitDir()
	w.Add(git)
	w.Add(filepath.Join(git, "refs"))
	root := filepath.Join(git, "refs", "bernstein")
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			w.Add(p)
		}
		return nil
	})
}

// Scan reads every task whose journal or ledger moved since the last scan
// and publishes its events. Tasks are scanned in name order, each task's
// events in chain order.
func (b *Bus) Scan() error {
	b.scanMu.Lock()
	defer b.scanMu.Unlock()
	view, err := b.store.Snapshot(refs.JournalPrefix, refs.LedgerPrefix)
	if err != nil {
		return err
	}
	ledgers, _, err := view.List(refs.LedgerPrefix)
	if err != nil {
		return err
	}
	journals, _, err := view.List(refs.JournalPrefix)
	if err != nil {
		return err
	}
	var tasks []string
	for name, head := range ledgers {
		task, err := refs.UnescapeTask(strings.TrimPrefix(name, refs.LedgerPrefix))
		if err != nil {
			continue
		}
		b.mu.Lock()
		h, known := b.heads[task]
		b.mu.Unlock()
		if !known || h.Ledger != head || h.Journal != journals[refs.Journal(task)] {
			tasks = append(tasks, task)
		}
	}
	sort.Strings(tasks)
	changed := map[string]bernstein.Heads{}
	for _, task := range tasks {
		b.mu.Lock()
		since := b.heads[task]
		b.mu.Unlock()
		feed, err := b.store.TaskFeed(task, since)
		if err != nil {
			b.logger.Warn("feed", "task", task, "err", err)
			continue
		}
		if b.fresh {
			b.mu.Lock()
			b.vectors[task] = feed.Progress.VectorHash
			b.mu.Unlock()
		} else {
			b.publishFeed(feed)
		}
		changed[task] = feed.Heads
	}
	if len(changed) > 0 || b.fresh {
		b.endBatch(changed)
	}
	b.fresh = false
	return nil
}

// publishFeed numbers and publishes the events of one task's feed.
func (b *Bus) publishFeed(f *bernstein.Feed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.Reset {
		data, _ := json.Marshal(map[string]string{"task_id": f.Task, "reason": "a chain of the task was rewritten"})
		b.publishLocked(Event{Type: EventReset, Task: f.Task, Data: data}, logEntry{})
	}
	for _, r := range f.Rows {
		typ, data := rowEvent(f.Task, r)
		b.publishLocked(Event{Type: typ, Task: f.Task, Data: data},
			logEntry{Chain: r.Chain, Index: r.Index, Commit: r.Commit.String()})
	}
	if f.Progress.VectorHash != b.vectors[f.Task] {
		b.vectors[f.Task] = f.Progress.VectorHash
		data, _ := json.Marshal(f.Progress)
		b.publishLocked(Event{Type: EventProgress, Task: f.Task, Data: data}, logEntry{Vector: f.Progress.VectorHash})
	}
}

// publishLocked gives e the next id, keeps it in the ring and queues its
// log entry; b.mu is held.
func (b *Bus) publishLocked(e Event, le logEntry) {
	e.ID = b.next
	b.next++
	b.ring = append(b.ring, e)
	if len(b.ring) > ringSize {
		b.ring = append([]Event(nil), b.ring[len(b.ring)-ringSize:]...)
	}
	le.ID, le.Type, le.Task = e.ID, e.Type, e.Task
	b.logged = append(b.logged, le)
}

// endBatch records the heads reached, writes the batch to the log and
// wakes the subscribers.
func (b *Bus) endBatch(heads map[string]bernstein.Heads) {
	b.mu.Lock()
	for t, h := range heads {
		b.heads[t] = h
	}
	entries := append(b.logged, logEntry{Heads: heads, Last: b.next - 1})
	b.logged = nil
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
	if err := b.append(entries); err != nil {
		b.logger.Warn("event log", "err", err)
	}
}

// append writes entries to the log (best effort: it is derived data).
func (b *Bus) append(entries []logEntry) error {
	if b.log == nil {
		if err := os.MkdirAll(b.dir, 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(b.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		b.log = f
	}
	w := bufio.NewWriter(b.log)
	for _, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		w.Write(line)
		w.WriteByte('\n')
	}
	return w.Flush()
}

// Close closes the log.
func (b *Bus) Close() error {
	if b.log != nil {
		return b.log.Close()
	}
	return nil
}

// rowEvent is the event type and data of one feed row.
func rowEvent(task string, r bernstein.FeedRow) (string, json.RawMessage) {
	base := map[string]any{
		"task_id": task, "kind": r.Row.Kind, "actor": r.Row.Actor, "writer": r.Writer, "proof": r.Proof,
		"row_hash": r.Hash, "commit": r.Commit.String(),
	}
	typ := EventWork
	switch {
	case r.Chain == "ledger":
		typ = EventTransition
		base["ledger_index"] = r.Index
		base["data"] = r.Row.Data
	case r.Row.Kind == record.KindArtifactPosted:
		typ = EventArtifact
		var a record.ArtifactPosted
		if r.Row.DecodeData(&a) == nil {
			base["key"], base["type"], base["link_kind"], base["version"] = a.Key, a.ArtifactType, a.LinkKind, a.Version
			base["content_hash"], base["spine_entry_hash"], base["prev_version_hash"] = a.ContentHash, a.SpineEntryHash, a.PrevVersionHash
		}
		base["journal_index"] = r.Index
		base["run_position"] = r.At
	default:
		base["journal_index"] = r.Index
		base["run_position"] = r.At
		base["data"] = r.Row.Data
	}
	data, _ := json.Marshal(base)
	return typ, data
}
