package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
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
// across a restart.
//
// Any number of servers may serve one repository, and an event has one id
// whichever of them a client reads it from: exactly one bus, the leader,
// numbers events. It holds an exclusive lock (flock) on
// <git dir>/bernstein/events/lock for as long as it runs and is the only
// writer of the log. Every other bus is a follower: it does not scan the
// refs, it reads the batches the leader appends to the log and derives each
// event again from the chains, under the leader's id. A follower tries the
// lock on every poll; when the leader goes (it stopped, or crashed: the
// kernel drops its lock), one follower takes it, reads the log to its end,
// drops what a crash left of an unfinished batch, and numbers on from there.
//
// The log is derived data: it says which row an event was, never what the
// row says; events are read again from the chains (and proven), and an
// entry whose row a chain no longer holds at that index is dropped. The
// leader writes a batch to the log before any client sees its events, so
// an id a client holds is in the log (unless the log could not be written).

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
// event was, or, closing each batch, the heads it reached and the id of its
// last event.
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
	// Vectors are the progress hashes sent for the tasks of the batch
	// (what the next leader compares new vectors with).
	Vectors map[string]string `json:"vectors,omitempty"`
	End     bool              `json:"end,omitempty"`
	// Snapshot marks the batch a segment of the log starts with: the heads
	// and vectors of every task and the last id of the segments before it
	// (eventlog_segments.go).
	Snapshot bool `json:"snapshot,omitempty"`
}

// batch is the entries of one scan, as the log holds them.
type batch struct {
	entries []logEntry
	heads   map[string]bernstein.Heads
	vectors map[string]string
	last    int64
	end     int64 // the log's offset after the batch
	// snapshot: the batch a segment starts with (every task's heads)
	snapshot bool
}

// logMark indexes the log: the batches up to the one whose last id is
// last end at offset end. Marks are kept every markEvery bytes of log, so
// a replay from an id reads from the mark before it (at most markEvery
// bytes more than the events it asks for), not from the log's start.
type logMark struct{ last, end int64 }

// markEvery is how many bytes of log a mark stands for.
const markEvery = 64 << 10

// ringSize is how many recent events the bus keeps in memory; older ones
// are read back from the log.
const ringSize = 4096

// followerPoll is how often a follower reads the log and tries the lock
// besides when the log's directory changes.
const followerPoll = 500 * time.Millisecond

// Bus is the event bus of one store.
type Bus struct {
	store  *bernstein.Store
	logger *slog.Logger
	dir    string

	// scanMu serializes scans, a follower's reads of the log and the
	// taking of the lead.
	scanMu sync.Mutex
	lock   *os.File    // the lock file; flocked while leading
	leader atomic.Bool // this bus numbers events and writes the log
	logW   *os.File    // the leader's log, appended to
	logR   *os.File    // a follower's log, read from offset
	offset int64       // the log's bytes read, to the end of its last whole batch
	base   int64       // the end of the log's first batch (its snapshot of every task)
	maxID  int64       // the largest id the log names, whole batch or not
	whole  bool        // the log holds at least one whole batch
	// The leader's batch in progress: its events and their log entries.
	pending []Event
	logged  []logEntry

	mu       sync.Mutex
	ringSize int // how many events ring holds at most (ringSize; tests lower it)
	now      func() time.Time
	ring     []Event // the latest events, oldest first
	next     int64   // the id the next event takes
	last     int64   // the id of the latest event published
	heads    map[string]bernstein.Heads
	vectors  map[string]string // last progress hash sent, per task
	wake     chan struct{}     // closed and replaced on every publish
	// What the last scan saw of the hints (leader, under scanMu): the
	// writers' audit heads, the packed-refs file, and the tasks the last
	// audit walk named (read once more: a write moves its audit mirror
	// before the task's own refs).
	audit   bernstein.AuditHeads
	packed  packedStamp
	recheck []string
	scans   atomic.Int64 // scans of every task a leader made (for tests)
	feeds   atomic.Int64 // tasks a leader read from their chains (for tests)
	// marks index the log by event id (under mu; markEvery bytes apart,
	// every tests lowers it); replayed counts the log bytes replays read.
	marks    []logMark
	every    int64
	replayed atomic.Int64
	// segment is the size past which the leader seals the log and starts
	// the next segment, keep how many sealed segments it keeps
	// (eventlog_segments.go; tests lower them); sealedMarks are the marks
	// of the segments this bus sealed, by file name (under mu).
	segment     int64
	keep        int
	sealedMarks map[string][]logMark
	// opened counts the log bytes the bus read to learn its state (for
	// tests: a start reads the log being written, not the sealed ones).
	opened atomic.Int64
	// fresh is set until the first scan of a leader whose log holds no
	// batch: that scan takes the repository as it is as the starting point
	// (a page renders what is there; the stream carries what happens next),
	// so a first start over a long history publishes nothing.
	fresh bool
}

// NewBus opens the bus of store, reading its log back: it leads if no
// other bus of the repository does, else it follows. It does not watch yet:
// see Run.
func NewBus(store *bernstein.Store, logger *slog.Logger) (*Bus, error) {
	return newBus(store, logger, time.Now)
}

// newBus is NewBus with the clock a new log numbers from.
func newBus(store *bernstein.Store, logger *slog.Logger, now func() time.Time) (*Bus, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Bus{store: store, logger: logger, dir: filepath.Join(store.GitDir(), "bernstein", "events"), ringSize: ringSize, now: now, every: markEvery,
		segment: segmentBytes, keep: keepSegments, sealedMarks: map[string][]logMark{},
		heads: map[string]bernstein.Heads{}, vectors: map[string]string{}, wake: make(chan struct{})}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(b.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	b.lock = lock
	b.scanMu.Lock()
	defer b.scanMu.Unlock()
	if err := b.readLogLocked(); err != nil {
		lock.Close()
		return nil, err
	}
	if _, err := b.tryLeadLocked(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Bus) logPath() string { return filepath.Join(b.dir, "log") }

// Leader reports whether this bus numbers the repository's events (else it
// follows the bus that does).
func (b *Bus) Leader() bool { return b.leader.Load() }

// readBatches reads the whole batches of f from offset: only lines ended by
// a newline count, and a batch ends with its end line (heads and last). It
// returns the batches, the offset after the last one, and the largest id
// any line names (an unfinished batch's included).
func readBatches(f *os.File, offset int64) ([]batch, int64, int64, error) {
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, offset, 0, err
	}
	return parseBatches(f, offset)
}

// parseBatches is readBatches of what r holds from offset on.
func parseBatches(r io.Reader, offset int64) ([]batch, int64, int64, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, offset, 0, err
	}
	var out []batch
	var cur []logEntry
	var maxID int64
	pos, end := 0, 0
	for {
		nl := bytes.IndexByte(data[pos:], '\n')
		if nl < 0 {
			break
		}
		line := data[pos : pos+nl]
		pos += nl + 1
		var e logEntry
		if json.Unmarshal(line, &e) != nil {
			continue // a line cut short by a crash
		}
		maxID = max(maxID, e.ID, e.Last)
		switch {
		case e.End || e.Heads != nil:
			out = append(out, batch{entries: cur, heads: e.Heads, vectors: e.Vectors, last: e.Last, end: offset + int64(pos), snapshot: e.Snapshot})
			cur, end = nil, pos
		case e.ID != 0:
			cur = append(cur, e)
		}
	}
	return out, offset + int64(end), maxID, nil
}

// readLogLocked reads the log's whole batches after b.offset into the
// bus's state, without deriving events: what a bus knows when it opens.
func (b *Bus) readLogLocked() error {
	f, err := os.Open(b.logPath())
	if errors.Is(err, fs.ErrNotExist) {
		return b.readSealedLocked()
	}
	if err != nil {
		return err
	}
	if b.logR == nil {
		// A follower goes on reading this file: the leader may seal it
		// (rename it) before the follower reads again.
		b.logR = f
	} else {
		defer f.Close()
	}
	if _, err := f.Seek(b.offset, io.SeekStart); err != nil {
		return err
	}
	cr := &countReader{r: f}
	batches, off, maxID, err := parseBatches(cr, b.offset)
	b.opened.Add(cr.n)
	b.noteBase(b.offset, batches)
	if err != nil {
		return err
	}
	if b.offset == 0 && (len(batches) == 0 || !batches[0].snapshot) {
		// The log does not start with a snapshot: a leader sealed the
		// segment before it and stopped before the next began.
		if err := b.readSealedLocked(); err != nil {
			return err
		}
	}
	b.mu.Lock()
	for _, bt := range batches {
		b.applyLocked(bt)
	}
	b.mu.Unlock()
	b.offset, b.maxID = off, max(b.maxID, maxID)
	return nil
}

// markLocked notes where the batch whose last id is last ends, if the
// last mark is markEvery bytes back; b.mu is held.
func (b *Bus) markLocked(last, end int64) {
	prev := int64(0)
	if n := len(b.marks); n > 0 {
		if b.marks[n-1].end >= end {
			return
		}
		prev = b.marks[n-1].end
	}
	if end-prev >= b.every {
		b.marks = append(b.marks, logMark{last, end})
	}
}

// applyLocked takes a batch's heads, vectors and last id as the bus's own;
// b.mu is held.
func (b *Bus) applyLocked(bt batch) {
	b.markLocked(bt.last, bt.end)
	for _, e := range bt.entries {
		if e.Type == EventProgress {
			b.vectors[e.Task] = e.Vector
		}
		b.last = max(b.last, e.ID)
	}
	for t, h := range bt.heads {
		b.heads[t] = h
	}
	for t, v := range bt.vectors {
		b.vectors[t] = v
	}
	b.last = max(b.last, bt.last)
	b.next = max(b.next, b.last+1)
	b.whole = true
}

// errBusClosed is a scan after Close: the server is shutting down, which is
// no fault to report.
var errBusClosed = errors.New("the event bus is closed")

// tryLeadLocked takes the lead if no other bus holds it: it reads the log
// to its end (the batches the last leader wrote), cuts what a crash left of
// an unfinished batch, and opens the log to append. b.scanMu is held.
func (b *Bus) tryLeadLocked() (bool, error) {
	if b.leader.Load() {
		return true, nil
	}
	if b.lock == nil {
		return false, errBusClosed
	}
	if err := syscall.Flock(int(b.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("event log lock: %w", err)
	}
	// Another bus may have written since this one last read.
	var err error
	if b.logR != nil {
		err = b.followLocked()
		if _, statErr := os.Stat(b.logPath()); err == nil && statErr != nil {
			// The leader sealed the segment this bus read and stopped
			// before the next began: the log starts anew, with a snapshot.
			b.offset = 0
			b.mu.Lock()
			b.marks = nil
			b.mu.Unlock()
		}
		b.logR.Close()
		b.logR = nil
	} else {
		err = b.readLogLocked()
		if b.logR != nil {
			b.logR.Close()
			b.logR = nil
		}
	}
	if err != nil {
		syscall.Flock(int(b.lock.Fd()), syscall.LOCK_UN)
		return false, err
	}
	f, err := os.OpenFile(b.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		// The log's name is on the disk before a batch is synced into it.
		if err = gitstore.SyncDir(b.dir); err != nil {
			f.Close()
		}
	}
	if err != nil {
		syscall.Flock(int(b.lock.Fd()), syscall.LOCK_UN)
		return false, err
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > b.offset {
		// An unfinished batch of a leader that crashed: its events were
		// never published (a batch is logged before it is), so no client
		// holds their ids; they are not reused either.
		if err := f.Truncate(b.offset); err != nil {
			f.Close()
			syscall.Flock(int(b.lock.Fd()), syscall.LOCK_UN)
			return false, err
		}
	}
	b.logW = f
	if b.offset == 0 && b.whole {
		// A log begun after the segment before it was sealed: it starts
		// with the state that segment ended in.
		if err := b.append([]logEntry{b.snapshotEntry()}); err != nil {
			b.logW, b.offset = nil, 0
			f.Close()
			syscall.Flock(int(b.lock.Fd()), syscall.LOCK_UN)
			return false, err
		}
	}
	b.mu.Lock()
	b.next = max(b.next, b.maxID+1, b.last+1)
	if !b.whole {
		// A log that starts now numbers from the clock (milliseconds):
		// an id a client kept from an earlier log that was removed, or from
		// another repository served at the same address, is then older
		// than this log or newer than its last event, and the client is
		// told to reload (stream.reset) instead of being answered with
		// the events of another numbering.
		b.fresh = true
		b.last = max(b.last, b.now().UnixMilli())
		b.next = max(b.next, b.last+1)
	}
	b.mu.Unlock()
	b.leader.Store(true)
	return true, nil
}

// followLocked reads the whole batches the leader appended since the last
// read, derives their events from the chains and publishes them under the
// leader's ids. b.scanMu is held.
func (b *Bus) followLocked() error {
	if b.logR == nil {
		f, err := os.Open(b.logPath())
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the leader has written nothing yet
		}
		if err != nil {
			return err
		}
		b.logR = f
	}
	batches, off, maxID, err := readBatches(b.logR, b.offset)
	if err != nil {
		return err
	}
	b.noteBase(b.offset, batches)
	b.offset, b.maxID = off, max(b.maxID, maxID)
	if err := b.publishFollowed(batches); err != nil {
		return err
	}
	if !b.sealedUnder() {
		return nil
	}
	// The leader sealed the segment this bus was reading (it wrote the
	// segment whole first): read what is left of it, then the next one.
	if batches, off, maxID, err = readBatches(b.logR, b.offset); err != nil {
		return err
	}
	b.offset, b.maxID = off, max(b.maxID, maxID)
	if err := b.publishFollowed(batches); err != nil {
		return err
	}
	b.logR.Close()
	b.logR, b.offset = nil, 0
	b.mu.Lock()
	b.marks = nil
	b.mu.Unlock()
	return b.followLocked()
}

// publishFollowed derives and publishes the events of batches the leader
// wrote. b.scanMu is held.
func (b *Bus) publishFollowed(batches []batch) error {
	for _, bt := range batches {
		b.mu.Lock()
		since := map[string]bernstein.Heads{}
		for _, e := range bt.entries {
			since[e.Task] = b.heads[e.Task]
		}
		b.mu.Unlock()
		evs := b.derive(bt.entries, func(task string) bernstein.Heads { return since[task] })
		b.mu.Lock()
		b.applyLocked(bt)
		b.publishLocked(evs)
		b.mu.Unlock()
	}
	return nil
}

// derive builds the events of log entries again from the chains: each
// entry's task is read once, from the heads since gives it (the zero Heads:
// from the first row). An entry whose row the chain no longer holds at its
// index is dropped; a progress entry carries the vector as it is now.
func (b *Bus) derive(entries []logEntry, since func(task string) bernstein.Heads) []Event {
	type read struct {
		feed *bernstein.Feed
		rows map[string]bernstein.FeedRow // by chain and index
	}
	feeds := map[string]*read{}
	var out []Event
	for _, e := range entries {
		rd, ok := feeds[e.Task]
		if !ok {
			rd = &read{}
			feeds[e.Task] = rd
			if f, err := b.store.TaskFeed(e.Task, since(e.Task)); err == nil {
				rd.feed, rd.rows = f, map[string]bernstein.FeedRow{}
				for _, r := range f.Rows {
					rd.rows[fmt.Sprint(r.Chain, " ", r.Index)] = r
				}
			} else {
				b.logger.Warn("event log", "task", e.Task, "err", err)
			}
		}
		if rd.feed == nil {
			continue
		}
		switch e.Type {
		case EventProgress:
			data, _ := json.Marshal(rd.feed.Progress)
			out = append(out, Event{ID: e.ID, Type: e.Type, Task: e.Task, Data: data})
		case EventReset:
			out = append(out, resetEvent(e.ID, e.Task))
		default:
			row, ok := rd.rows[fmt.Sprint(e.Chain, " ", e.Index)]
			if !ok || row.Commit.String() != e.Commit {
				continue
			}
			typ, data := rowEvent(e.Task, row)
			out = append(out, Event{ID: e.ID, Type: typ, Task: e.Task, Data: data})
		}
	}
	return out
}

func resetEvent(id int64, task string) Event {
	data, _ := json.Marshal(map[string]string{"task_id": task, "reason": "a chain of the task was rewritten"})
	return Event{ID: id, Type: EventReset, Task: task, Data: data}
}

// publishLocked appends events to the ring and wakes the subscribers;
// b.mu is held.
func (b *Bus) publishLocked(evs []Event) {
	b.ring = append(b.ring, evs...)
	if len(b.ring) > b.ringSize {
		b.ring = append([]Event(nil), b.ring[len(b.ring)-b.ringSize:]...)
	}
	for _, e := range evs {
		b.last = max(b.last, e.ID)
	}
	close(b.wake)
	b.wake = make(chan struct{})
}

// LastID is the id of the latest event: a page rendered now is current up
// to it, and its client resumes the stream from there.
func (b *Bus) LastID() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Subscription is one client's view of the bus.
type Subscription struct {
	b     *Bus
	task  string // "" for every task
	last  int64  // the id of the last event delivered
	reset string // why the client must reload before anything else
}

// Subscribe starts a subscription after event lastID; a negative lastID
// means from now on (0 means every event the log holds). A lastID beyond
// the latest event (the client's events came from a log this server does
// not have) gets one stream.reset event first.
func (b *Bus) Subscribe(task string, lastID int64) *Subscription {
	if lastID > b.LastID() && !b.leader.Load() {
		// A follower may be behind the leader the client read from.
		b.scanMu.Lock()
		if err := b.followLocked(); err != nil {
			b.logger.Warn("event log", "err", err)
		}
		b.scanMu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sub := &Subscription{b: b, task: task, last: lastID}
	switch {
	case lastID < 0:
		sub.last = b.last
	case lastID > b.last:
		sub.last = b.last
		sub.reset = fmt.Sprintf("event %d is beyond this server's latest event %d: its log is not the one that event came from", lastID, b.last)
	}
	return sub
}

// Next returns the events after the last one delivered (waiting until
// there are some or ctx ends); a subscription that asked for events the bus
// no longer has gets one stream.reset event first.
func (s *Subscription) Next(ctx context.Context) ([]Event, error) {
	if s.reset != "" {
		ev := s.b.gap(s.last, s.reset)
		s.reset = ""
		return []Event{ev}, nil
	}
	for {
		evs, last, wake, err := s.b.since(s.last, s.task)
		if err != nil {
			return nil, err
		}
		moved := last > s.last
		s.last = last
		if len(evs) > 0 {
			return evs, nil
		}
		if moved {
			continue // read up to the ring from the log: now the ring
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
	first := b.last + 1
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
		last := b.last
		b.mu.Unlock()
		return out, max(last, id), wake, nil
	}
	b.mu.Unlock()
	// Older than memory: read back from the log and derive each event.
	evs, err := b.replay(id, first, task)
	if err != nil {
		return nil, id, nil, err
	}
	return evs, first - 1, wake, nil
}

// replay reads the log's entries after id and before upto and derives their
// events again from the chains (each task's chains read once); a gap event
// stands for what is gone.
func (b *Bus) replay(id, upto int64, task string) ([]Event, error) {
	entries, found, more, err := b.replaySealed(id, upto, task)
	if err != nil {
		return nil, err
	}
	if more {
		es, fd, err := b.replayLog(id, upto, task)
		if err != nil {
			return nil, err
		}
		entries, found = append(entries, es...), found || fd
	}
	if !found && id > 0 {
		// The id the client resumes from is not in the log (a log started
		// afresh, or another repository's): it cannot know what it missed.
		return []Event{b.gap(upto-1, fmt.Sprintf("event %d is no longer in the server's log", id))}, nil
	}
	return b.derive(entries, func(string) bernstein.Heads { return bernstein.Heads{} }), nil
}

// replayLog is replay's reading of the log (the segment being written).
func (b *Bus) replayLog(id, upto int64, task string) ([]logEntry, bool, error) {
	f, err := os.Open(b.logPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	// From the last mark before id to the first at or after upto: the
	// batches that hold the events asked for (and the id itself).
	from, to := int64(0), int64(-1)
	b.mu.Lock()
	if i := sort.Search(len(b.marks), func(i int) bool { return b.marks[i].last >= id }); i > 0 {
		from = b.marks[i-1].end
	}
	if i := sort.Search(len(b.marks), func(i int) bool { return b.marks[i].last >= upto }); i < len(b.marks) {
		to = b.marks[i].end
	}
	b.mu.Unlock()
	var r io.Reader = f
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, false, err
	}
	if to >= 0 {
		r = io.LimitReader(f, to-from)
	}
	cr := &countReader{r: r}
	batches, _, _, err := parseBatches(cr, from)
	b.replayed.Add(cr.n)
	if err != nil {
		return nil, false, err
	}
	es, found := entriesAfter(batches, id, upto, task)
	return es, found, nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// gap is the stream.reset event a client gets when its events are gone.
func (b *Bus) gap(id int64, reason string) Event {
	data, _ := json.Marshal(map[string]string{"reason": reason})
	return Event{ID: id, Type: EventStreamGap, Data: data}
}

// Run watches the refs (a leader) or the log (a follower) and publishes
// what changes until ctx ends.
func (b *Bus) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.logger.Warn("watching refs failed, polling only", "err", err)
		w = nil
	}
	watching := false
	if w != nil {
		defer w.Close()
		w.Add(b.dir)
	}
	watchRefs := func() {
		if w != nil && !watching && b.leader.Load() {
			b.watch(w)
			watching = true
		}
	}
	watchRefs()
	if err := b.Scan(); errors.Is(err, errBusClosed) {
		return nil
	} else if err != nil {
		b.logger.Warn("scan", "err", err)
	}
	watchRefs()
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	follow := time.NewTicker(followerPoll)
	defer follow.Stop()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	gitDir := b.store.GitDir()
	for {
		var names map[string]bool // the tasks whose refs the watcher saw move
		full, seen := false, true
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			names, seen = map[string]bool{}, false
			note := func(ev fsnotify.Event) {
				if filepath.Dir(ev.Name) == b.dir && b.leader.Load() {
					return // the leader's own log
				}
				seen = true
				if ev.Has(fsnotify.Create) {
					if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
						w.Add(ev.Name)
						full = true // a new directory: a ref may have landed before its watch
					}
				}
				if rel, err := filepath.Rel(gitDir, ev.Name); err == nil {
					if t := bernstein.TaskOfRef(filepath.ToSlash(rel)); t != "" {
						names[t] = true
					}
				}
			}
			note(ev)
			// Let a burst of renames settle into one scan.
			drainInto(events, 2*time.Millisecond, note)
			if !seen {
				continue
			}
		case err := <-errs:
			b.logger.Warn("watching refs", "err", err)
			full = true // events may have been lost
		case <-poll.C:
			full = w == nil // without a watcher, only a scan sees a ref move
		case <-follow.C:
			if b.leader.Load() {
				continue
			}
		}
		var err error
		if full || !b.leader.Load() {
			err = b.Scan()
		} else {
			err = b.scanChanged(names)
		}
		if errors.Is(err, errBusClosed) {
			return nil // closed while Run still ran: the server is shutting down
		}
		if err != nil {
			b.logger.Warn("scan", "err", err)
		}
		watchRefs()
	}
}

// drainInto hands f the events for as long as they keep coming within
// quiet.
func drainInto(events <-chan fsnotify.Event, quiet time.Duration, f func(fsnotify.Event)) {
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			f(ev)
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

// Scan brings the bus up to date. A leader reads every task whose journal
// or ledger moved since its last scan and publishes its events (tasks in
// name order, each task's events in chain order). A follower reads what the
// leader logged, and takes the lead if the leader is gone.
func (b *Bus) Scan() error {
	b.scanMu.Lock()
	defer b.scanMu.Unlock()
	if !b.leader.Load() {
		if err := b.followLocked(); err != nil {
			return err
		}
		if ok, err := b.tryLeadLocked(); !ok || err != nil {
			return err
		}
	}
	b.scans.Add(1)
	// The hints first: a write after them is seen again by the next scan.
	audit, err := b.store.ReadAuditHeads()
	if err != nil {
		return err
	}
	stamp := b.packedStamp()
	// One view of every task's chains and of what proving them reads:
	// the tasks it finds moved are read from it, not each from a view of
	// its own (which read the writers' refs once per task).
	view, err := b.store.FeedsView()
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
	b.mu.Lock()
	for name, head := range ledgers {
		task, err := refs.UnescapeTask(strings.TrimPrefix(name, refs.LedgerPrefix))
		if err != nil {
			continue
		}
		h, known := b.heads[task]
		if !known || h.Ledger != head || h.Journal != journals[refs.Journal(task)] {
			tasks = append(tasks, task)
		}
	}
	b.mu.Unlock()
	b.audit, b.packed, b.recheck = audit, stamp, nil
	b.readTasksLocked(tasks, view)
	return nil
}

// scanChanged brings a leader up to date by reading only the tasks that
// may have changed: those the watcher named, those the writers' audit
// mirrors name since the last scan, and those the last walk named. It
// scans every task when the hints cannot be whole: an audit mirror that
// did not walk back to where it was, or packed-refs rewritten (a fetch or
// git pack-refs may move refs no watcher saw move by name). The hints only
// choose what to re-read; every task read is read and proven as a scan
// reads it.
func (b *Bus) scanChanged(named map[string]bool) error {
	b.scanMu.Lock()
	if !b.leader.Load() || b.audit == nil || b.packedStamp() != b.packed {
		b.scanMu.Unlock()
		return b.Scan()
	}
	now, walked, complete, err := b.store.ChangedTasks(b.audit)
	if err != nil || !complete {
		b.scanMu.Unlock()
		if err != nil {
			b.logger.Warn("audit hints", "err", err)
		}
		return b.Scan()
	}
	defer b.scanMu.Unlock()
	set := map[string]bool{}
	for _, t := range walked {
		set[t] = true
	}
	for _, t := range b.recheck {
		set[t] = true
	}
	for t := range named {
		set[t] = true
	}
	tasks := make([]string, 0, len(set))
	for t := range set {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	b.audit, b.recheck = now, walked
	b.readTasksLocked(tasks, nil)
	return nil
}

// readTasksLocked reads tasks (sorted) from the heads the bus last reached
// and publishes what they gained, in one batch; scanMu is held. A task is
// read from view (a FeedsView) when there is one, else from a view of its
// own.
func (b *Bus) readTasksLocked(tasks []string, view *refs.Snapshot) {
	b.mu.Lock()
	fresh := b.fresh
	b.mu.Unlock()
	sort.Strings(tasks)
	changed := map[string]bernstein.Heads{}
	for _, task := range tasks {
		b.mu.Lock()
		since, known := b.heads[task]
		b.mu.Unlock()
		var feed *bernstein.Feed
		var err error
		b.feeds.Add(1)
		if view != nil {
			feed, err = b.store.TaskFeedIn(view, task, since)
		} else {
			feed, err = b.store.TaskFeed(task, since)
		}
		if err != nil {
			if !errors.Is(err, bernstein.ErrUnknownTask) {
				b.logger.Warn("feed", "task", task, "err", err)
			}
			continue
		}
		if known && feed.Heads == since && !feed.Reset && len(feed.Rows) == 0 {
			continue // named by a hint, but nothing moved
		}
		if fresh {
			b.mu.Lock()
			b.vectors[task] = feed.Progress.VectorHash
			b.mu.Unlock()
		} else {
			b.publishFeed(feed)
		}
		changed[task] = feed.Heads
	}
	if len(changed) > 0 || fresh {
		b.endBatch(changed)
	}
	b.mu.Lock()
	b.fresh = false
	b.mu.Unlock()
}

// packedStamp is what says packed-refs was rewritten: its inode, size and
// modification time (zero when there is none).
type packedStamp struct {
	ino, size, mtime int64
}

func (b *Bus) packedStamp() packedStamp {
	fi, err := os.Stat(filepath.Join(b.store.GitDir(), "packed-refs"))
	if err != nil {
		return packedStamp{}
	}
	st := packedStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(sys.Ino)
	}
	return st
}

// publishFeed numbers the events of one task's feed into the batch in
// progress.
func (b *Bus) publishFeed(f *bernstein.Feed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.Reset {
		b.queueLocked(resetEvent(0, f.Task), logEntry{})
	}
	for _, r := range f.Rows {
		typ, data := rowEvent(f.Task, r)
		b.queueLocked(Event{Type: typ, Task: f.Task, Data: data},
			logEntry{Chain: r.Chain, Index: r.Index, Commit: r.Commit.String()})
	}
	if f.Progress.VectorHash != b.vectors[f.Task] {
		b.vectors[f.Task] = f.Progress.VectorHash
		data, _ := json.Marshal(f.Progress)
		b.queueLocked(Event{Type: EventProgress, Task: f.Task, Data: data}, logEntry{Vector: f.Progress.VectorHash})
	}
}

// queueLocked gives e the next id and queues it and its log entry in the
// batch in progress; b.mu is held.
func (b *Bus) queueLocked(e Event, le logEntry) {
	e.ID = b.next
	b.next++
	b.pending = append(b.pending, e)
	le.ID, le.Type, le.Task = e.ID, e.Type, e.Task
	b.logged = append(b.logged, le)
}

// endBatch writes the batch in progress to the log, closed by the heads it
// reached, then publishes its events: no client sees an event the log does
// not hold.
func (b *Bus) endBatch(heads map[string]bernstein.Heads) {
	b.mu.Lock()
	last := b.next - 1
	vectors := map[string]string{}
	for t := range heads {
		vectors[t] = b.vectors[t]
	}
	entries := append(b.logged, logEntry{Heads: heads, Vectors: vectors, Last: last, End: true})
	evs := b.pending
	b.logged, b.pending = nil, nil
	b.mu.Unlock()
	if err := b.append(entries); err != nil {
		b.logger.Warn("event log", "err", err)
	}
	b.mu.Lock()
	for t, h := range heads {
		b.heads[t] = h
	}
	b.last = max(b.last, last)
	b.whole = true
	b.publishLocked(evs)
	b.mu.Unlock()
	if b.sealDue() {
		if err := b.sealLocked(); err != nil {
			b.logger.Warn("event log", "err", err)
		}
	}
}

// append writes entries to the log in one write (best effort: it is
// derived data), so that a follower reads a batch whole or not at all, and
// syncs it.
func (b *Bus) append(entries []logEntry) error {
	var buf bytes.Buffer
	for _, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if b.logW == nil {
		return errors.New("the event log is closed")
	}
	n, err := b.logW.Write(buf.Bytes())
	if err == nil {
		first := b.offset == 0
		b.offset += int64(n)
		if first {
			b.base = b.offset
		}
		if last := entries[len(entries)-1]; last.End {
			b.mu.Lock()
			b.markLocked(last.Last, b.offset)
			b.mu.Unlock()
		}
		// On the disk before its events are published: after a power
		// loss the log still holds every id a client was given, so the
		// next leader numbers on past them and never gives an id a client
		// holds to another event.
		err = b.logW.Sync()
	}
	return err
}

// Close closes the log and lets the lead go.
func (b *Bus) Close() error {
	b.scanMu.Lock()
	defer b.scanMu.Unlock()
	var err error
	for _, f := range []**os.File{&b.logW, &b.logR} {
		if *f != nil {
			if e := (*f).Close(); e != nil && err == nil {
				err = e
			}
			*f = nil
		}
	}
	b.leader.Store(false)
	if b.lock != nil {
		b.lock.Close() // releases the flock
		b.lock = nil
	}
	return err
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
