package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// segmentedBus opens a bus over a repository with one claimed task whose
// log is sealed after every batch, and keeps keep sealed segments.
func segmentedBus(t *testing.T, keep int) (*bernstein.Store, func() *Bus, string) {
	s, _ := newInternalStore(t)
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "T-1", Title: "t"}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Claim("T-1", "agent")
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Bus {
		b, err := NewBus(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		b.segment, b.keep = 1, keep
		return b
	}
	return s, open, tok
}

// postAndScan posts n versions and lets b publish each.
func postAndScan(t *testing.T, s *bernstein.Store, b *Bus, tok string, n int) {
	for i := 0; i < n; i++ {
		if _, err := s.Post(bernstein.PostRequest{Task: "T-1", Key: "k", Agent: "agent", ClaimToken: tok,
			Payload: artifact.Payload{Type: "report", Body: fmt.Sprintf("body %d", i)}}); err != nil {
			t.Fatal(err)
		}
		if err := b.scanChanged(nil); err != nil {
			t.Fatal(err)
		}
	}
}

func eventIDs(evs []Event) string {
	var ids []string
	for _, e := range evs {
		ids = append(ids, fmt.Sprintf("%d:%s", e.ID, e.Type))
	}
	return strings.Join(ids, " ")
}

// TestEventLogSegments: the log is sealed into segments, the oldest beyond
// the kept ones removed; a replay from an id in a kept sealed segment gives
// every event after it, in order; an id of a removed segment gets
// stream.reset; a bus that starts reads the log being written only, and
// numbers on.
func TestEventLogSegments(t *testing.T) {
	s, open, tok := segmentedBus(t, 3)
	b := open()
	if err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	postAndScan(t, s, b, tok, 8)
	segs, err := b.segments()
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 3 {
		t.Fatalf("%d sealed segments kept, want 3", len(segs))
	}
	b.mu.Lock()
	ring := append([]Event(nil), b.ring...)
	upto := b.last + 1
	b.mu.Unlock()
	// An id in the oldest kept segment: the last event it holds.
	from := segs[0].last
	var want []Event
	for _, e := range ring {
		if e.ID > from {
			want = append(want, e)
		}
	}
	evs, err := b.replay(from, upto, "")
	if err != nil {
		t.Fatal(err)
	}
	if eventIDs(evs) != eventIDs(want) || len(want) == 0 {
		t.Fatalf("replay after %d (a sealed segment's): %s, want %s", from, eventIDs(evs), eventIDs(want))
	}
	// An id in a removed segment: the first event published.
	evs, err = b.replay(ring[0].ID, upto, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != EventStreamGap {
		t.Fatalf("replay from an id of a removed segment: %s", eventIDs(evs))
	}
	last := b.LastID()
	b.Close()
	b2 := open()
	fi, err := os.Stat(b2.logPath())
	if err != nil {
		t.Fatal(err)
	}
	if got := b2.LastID(); got != last {
		t.Fatalf("a restarted bus's last id %d, want %d", got, last)
	}
	if read := b2.opened.Load(); read > fi.Size() {
		t.Fatalf("a start read %d bytes; the log being written holds %d", read, fi.Size())
	}
	postAndScan(t, s, b2, tok, 1)
	if got := b2.LastID(); got <= last {
		t.Fatalf("an event after the restart has id %d, not after %d", got, last)
	}
}

// TestEventLogTornAndUnsealed: a batch cut short by a crash (a torn tail)
// loses none of the events before it and raises no stream.reset; a leader
// that stopped between sealing a segment and starting the next leaves no
// log: the next bus reads the sealed segment, starts the log with its
// snapshot, and replays from ids in the sealed segment.
func TestEventLogTornAndUnsealed(t *testing.T) {
	s, open, tok := segmentedBus(t, 8)
	b := open()
	b.segment = 1 << 30 // one segment while the tail is torn
	if err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	postAndScan(t, s, b, tok, 3)
	b.mu.Lock()
	ring := append([]Event(nil), b.ring...)
	b.mu.Unlock()
	last := b.LastID()
	b.Close()
	f, err := os.OpenFile(b.logPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(fmt.Sprintf(`{"id":%d,"type":"task.artifact","task":"T-1","chain":"jour`, last+1)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b2 := open()
	if got := b2.LastID(); got != last {
		t.Fatalf("after a torn tail the last id is %d, want %d", got, last)
	}
	evs, err := b2.replay(ring[0].ID, last+1, "")
	if err != nil {
		t.Fatal(err)
	}
	if eventIDs(evs) != eventIDs(ring[1:]) {
		t.Fatalf("after a torn tail, replay after %d: %s, want %s", ring[0].ID, eventIDs(evs), eventIDs(ring[1:]))
	}
	postAndScan(t, s, b2, tok, 2)
	b2.mu.Lock()
	ring = append([]Event(nil), b2.ring...)
	b2.mu.Unlock()
	if len(ring) < 2 || ring[0].ID <= last {
		t.Fatalf("events after the torn tail: %s (the last before it %d)", eventIDs(ring), last)
	}
	last = b2.LastID()
	b2.Close()
	// The segment sealed, the next not begun.
	sealed := filepath.Join(b2.dir, fmt.Sprintf("%s%020d", sealedPrefix, last))
	if err := os.Rename(b2.logPath(), sealed); err != nil {
		t.Fatal(err)
	}
	b3 := open()
	if got := b3.LastID(); got != last {
		t.Fatalf("with the segment sealed and no log, the last id is %d, want %d", got, last)
	}
	data, err := os.ReadFile(b3.logPath())
	if err != nil || !strings.Contains(strings.SplitN(string(data), "\n", 2)[0], `"snapshot":true`) {
		t.Fatalf("the log begun after a sealed segment does not start with a snapshot: %v %.200s", err, data)
	}
	postAndScan(t, s, b3, tok, 1)
	evs, err = b3.replay(ring[0].ID, b3.LastID()+1, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].Type == EventStreamGap || evs[len(evs)-1].ID != b3.LastID() {
		t.Fatalf("replay across the sealed segment and the log: %s", eventIDs(evs))
	}
	b3.Close()
	// And a bus started now reads that log only.
	b4 := open()
	if got := b4.LastID(); got != b3.LastID() {
		t.Fatalf("last id %d after a restart, want %d", got, b3.LastID())
	}
	fi, _ := os.Stat(b4.logPath())
	if read := b4.opened.Load(); read > fi.Size() {
		t.Fatalf("a start read %d bytes; the log holds %d", read, fi.Size())
	}
}

// TestEventLogFollowerAcrossSeals: a follower reading the log while the
// leader seals it after every batch publishes every event the leader did,
// under the same ids, in order.
func TestEventLogFollowerAcrossSeals(t *testing.T) {
	s, open, tok := segmentedBus(t, 8)
	leader := open()
	if err := leader.Scan(); err != nil {
		t.Fatal(err)
	}
	follower := open()
	if follower.Leader() {
		t.Fatal("the second bus leads")
	}
	for i := 0; i < 4; i++ {
		postAndScan(t, s, leader, tok, 1)
		if err := follower.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	leader.mu.Lock()
	want := eventIDs(leader.ring)
	leader.mu.Unlock()
	follower.mu.Lock()
	got := eventIDs(follower.ring)
	follower.mu.Unlock()
	if segs, _ := leader.segments(); len(segs) < 4 {
		t.Fatalf("%d segments sealed", len(segs))
	}
	if got != want || want == "" {
		t.Fatalf("the follower published %s, the leader %s", got, want)
	}
}

// TestEventLogSnapshotLargerThanSegment: a snapshot of every task larger
// than a segment does not seal the log after every batch (each batch would
// write every task's heads again): the log is sealed once the events after
// its snapshot hold as many bytes as the snapshot, and a restarted bus
// still reads every task's heads from it.
func TestEventLogSnapshotLargerThanSegment(t *testing.T) {
	s, open, tok := segmentedBus(t, 8)
	for i := 0; i < 30; i++ {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: fmt.Sprintf("U-%d", i), Title: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	b := open() // b.segment is 1 byte: every snapshot is larger
	if err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	snapshot := b.offset // the first batch: every task's heads
	for posts := 1; ; posts++ {
		postAndScan(t, s, b, tok, 1)
		segs, err := b.segments()
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) == 0 {
			if posts > 200 {
				t.Fatalf("%d posts and the log (%d bytes) was never sealed", posts, b.offset)
			}
			continue
		}
		fi, err := os.Stat(filepath.Join(b.dir, segs[0].name))
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) != 1 || fi.Size() < 2*snapshot || posts < 2 {
			t.Fatalf("after %d posts %d segments sealed, the first of %d bytes; the snapshot is %d bytes", posts, len(segs), fi.Size(), snapshot)
		}
		break
	}
	// The next segment starts with a snapshot of the 31 tasks, and is
	// not sealed by the next batch either.
	postAndScan(t, s, b, tok, 1)
	if segs, _ := b.segments(); len(segs) != 1 {
		t.Fatalf("the batch after a seal sealed again: %d segments", len(segs))
	}
	last := b.LastID()
	b.Close()
	b2 := open()
	if b2.LastID() != last || len(b2.heads) != 31 {
		t.Fatalf("a restarted bus: last id %d (want %d), %d tasks' heads (want 31)", b2.LastID(), last, len(b2.heads))
	}
	// It knows where the log's snapshot ends: its next batch does not
	// seal the log either.
	postAndScan(t, s, b2, tok, 1)
	if segs, _ := b2.segments(); len(segs) != 1 {
		t.Fatalf("a restarted bus's first batch sealed the log: %d segments", len(segs))
	}
}
