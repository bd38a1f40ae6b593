package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/atomicfile"
)

// The event log is kept in segments, so that what a bus reads as it starts
// and what a replay reads follow the events asked for, not the log's
// history. The leader appends to <events>/log; once it holds segmentBytes,
// the leader seals it, at a batch's end: it writes the next segment's first
// batch, a snapshot (every task's heads and progress hashes, and the last
// id so far), to log.next, renames log to log.<last id, 20 digits>, then
// log.next to log. A bus that starts reads log only: its snapshot is the
// state of every segment before it. A crash between the renames leaves no
// log (or one without a snapshot): the bus then reads the newest sealed
// segment first, and the leader starts log with a snapshot again. Only the
// newest keepSegments sealed segments are kept; an id older than them is
// answered with stream.reset, as one of a removed log is. A follower that
// finds log renamed under it reads the rest of the segment it holds open
// (the leader wrote it whole before the rename), then the new log.

// segmentBytes is the size past which the leader seals the log;
// keepSegments is how many sealed segments it keeps.
const (
	segmentBytes = 4 << 20
	keepSegments = 8
)

// sealedPrefix starts the file name of a sealed segment.
const sealedPrefix = "log."

// sealedSegment is a sealed segment of the log: the id of its last event.
type sealedSegment struct {
	name string
	last int64
}

// segments lists the sealed segments, oldest first.
func (b *Bus) segments() ([]sealedSegment, error) {
	des, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, err
	}
	var out []sealedSegment
	for _, de := range des {
		digits, ok := strings.CutPrefix(de.Name(), sealedPrefix)
		if !ok || len(digits) != 20 {
			continue
		}
		last, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, sealedSegment{de.Name(), last})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].last < out[j].last })
	return out, nil
}

// sealDue reports whether the leader seals the log now: once what was
// appended after the segment's first batch (its snapshot of every task)
// holds segmentBytes, and at least as many bytes as that batch. A
// snapshot grows with the tasks (about 290 bytes a task: 2.9 MB at 10,000
// tasks); were a segment sealed at segmentBytes whatever its snapshot, a
// snapshot past segmentBytes would seal the log after every batch (each
// batch would write every task's heads again, and the kept segments would
// hold a few batches each). So a snapshot costs at most as many bytes
// as the events written after it.
func (b *Bus) sealDue() bool {
	return b.offset-b.base >= max(b.segment, b.base)
}

// noteBase notes where the log's first batch ends when batches were read
// from the log's start.
func (b *Bus) noteBase(from int64, batches []batch) {
	if from == 0 && len(batches) > 0 {
		b.base = batches[0].end
	}
}

// snapshotEntry is the batch a segment starts with.
func (b *Bus) snapshotEntry() logEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return logEntry{Heads: maps.Clone(b.heads), Vectors: maps.Clone(b.vectors), Last: b.last, End: true, Snapshot: true}
}

// sealLocked seals the log and starts the next segment with a snapshot.
// b.scanMu is held, by a leader.
func (b *Bus) sealLocked() error {
	snap := b.snapshotEntry()
	line, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	// The next segment is on the disk before it is named log, and both
	// names are before any batch goes into it: a power loss leaves the old
	// segment as log or the new one, never a log that lost a synced batch.
	next := filepath.Join(b.dir, "log.next")
	if err := atomicfile.Write(next, line, 0o644); err != nil {
		return err
	}
	name := fmt.Sprintf("%s%020d", sealedPrefix, snap.Last)
	if err := os.Rename(b.logPath(), filepath.Join(b.dir, name)); err != nil {
		return err
	}
	if err := os.Rename(next, b.logPath()); err != nil {
		return err
	}
	if err := gitstore.SyncDir(b.dir); err != nil {
		return err
	}
	f, err := os.OpenFile(b.logPath(), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	b.logW.Close()
	b.logW, b.offset, b.base = f, int64(len(line)), int64(len(line))
	b.mu.Lock()
	b.sealedMarks[name], b.marks = b.marks, nil
	b.mu.Unlock()
	return b.trimLocked()
}

// trimLocked removes the sealed segments beyond the newest b.keep.
func (b *Bus) trimLocked() error {
	segs, err := b.segments()
	if err != nil {
		return err
	}
	for len(segs) > b.keep {
		if err := os.Remove(filepath.Join(b.dir, segs[0].name)); err != nil {
			return err
		}
		b.mu.Lock()
		delete(b.sealedMarks, segs[0].name)
		b.mu.Unlock()
		segs = segs[1:]
	}
	return nil
}

// readSealedLocked reads the newest sealed segment whole into the bus's
// state: what a bus knows when the log was sealed and the next segment did
// not begin. b.scanMu is held.
func (b *Bus) readSealedLocked() error {
	segs, err := b.segments()
	if err != nil || len(segs) == 0 {
		return err
	}
	f, err := os.Open(filepath.Join(b.dir, segs[len(segs)-1].name))
	if err != nil {
		return err
	}
	defer f.Close()
	cr := &countReader{r: f}
	batches, _, maxID, err := parseBatches(cr, 0)
	b.opened.Add(cr.n)
	if err != nil {
		return err
	}
	b.mu.Lock()
	for _, bt := range batches {
		b.applyLocked(bt)
	}
	b.marks = nil // offsets of that segment, not of the log
	b.mu.Unlock()
	b.maxID = max(b.maxID, maxID)
	return nil
}

// sealedUnder reports whether the log a follower reads was sealed: log now
// names another file. A log that does not exist is not yet the next one.
func (b *Bus) sealedUnder() bool {
	now, err := os.Stat(b.logPath())
	if err != nil {
		return false
	}
	held, err := b.logR.Stat()
	return err == nil && !os.SameFile(now, held)
}

// replaySealed reads the entries after id and before upto from the sealed
// segments that hold them; from reports whether the log itself must be
// read too (the events run on past the sealed segments), found whether id
// was met.
func (b *Bus) replaySealed(id, upto int64, task string) (entries []logEntry, found, more bool, err error) {
	segs, err := b.segments()
	if err != nil {
		return nil, false, false, err
	}
	more = true
	for _, sg := range segs {
		if sg.last < id {
			continue
		}
		f, err := os.Open(filepath.Join(b.dir, sg.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was listed: its ids are gone
		}
		if err != nil {
			return nil, false, false, err
		}
		from := int64(0)
		b.mu.Lock()
		marks := b.sealedMarks[sg.name]
		b.mu.Unlock()
		if i := sort.Search(len(marks), func(i int) bool { return marks[i].last >= id }); i > 0 {
			from = marks[i-1].end
		}
		if _, err := f.Seek(from, io.SeekStart); err != nil {
			f.Close()
			return nil, false, false, err
		}
		cr := &countReader{r: f}
		batches, _, _, err := parseBatches(cr, from)
		f.Close()
		b.replayed.Add(cr.n)
		if err != nil {
			return nil, false, false, err
		}
		es, fd := entriesAfter(batches, id, upto, task)
		entries, found = append(entries, es...), found || fd
		if sg.last >= upto-1 {
			more = false
			break
		}
	}
	return entries, found, more, nil
}

// entriesAfter picks from batches the entries after id and before upto
// (of task, when one is given), and reports whether id was met.
func entriesAfter(batches []batch, id, upto int64, task string) ([]logEntry, bool) {
	var entries []logEntry
	found := false
	for _, bt := range batches {
		for _, e := range bt.entries {
			switch {
			case e.ID <= id:
				found = found || e.ID == id
			case e.ID < upto && (task == "" || e.Task == task):
				entries = append(entries, e)
			}
		}
		found = found || (bt.last == id && id > 0)
	}
	return entries, found
}
