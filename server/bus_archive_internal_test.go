package server

import (
	"reflect"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/archivetest"
	"github.com/bernstein/bernstein/record"
)

// TestBusArchiveIsNoRemoval: moving ended tasks into the archive deletes
// their refs, but the tasks are not gone: the bus publishes nothing for it
// (no event, no reset), whether a watcher named the tasks or a full scan
// ran, and a bus started on the archived repository lists them in its
// first scan at the heads it had.
func TestBusArchiveIsNoRemoval(t *testing.T) {
	s, dir := newInternalStore(t)
	for _, id := range []string{"T-1", "T-2", "T-3"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		tok, err := s.Claim(id, "agent")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Post(bernstein.PostRequest{Task: id, Key: "k", Agent: "agent", ClaimToken: tok,
			Payload: artifact.Payload{Type: "report", Body: "body of " + id}}); err != nil {
			t.Fatal(err)
		}
		if id != "T-3" {
			if _, err := s.Transition(id, record.KindTaskAbandoned, "", "ended"); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := NewBus(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	state := func(b *Bus) (int, map[string]bernstein.Heads) {
		b.mu.Lock()
		defer b.mu.Unlock()
		hs := map[string]bernstein.Heads{}
		for k, v := range b.heads {
			hs[k] = v
		}
		return len(b.ring), hs
	}
	n0, heads0 := state(b)
	if len(heads0) != 3 {
		t.Fatalf("first scan: heads %v", heads0)
	}
	archivetest.Tasks(t, dir, "w", "T-1", "T-2")
	if err := b.scanChanged(map[string]bool{"T-1": true, "T-2": true}); err != nil {
		t.Fatal(err)
	}
	if err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	gitOut(t, dir, "pack-refs", "--all")
	if err := b.scanChanged(nil); err != nil {
		t.Fatal(err)
	}
	n1, heads1 := state(b)
	if n1 != n0 || !reflect.DeepEqual(heads1, heads0) {
		b.mu.Lock()
		t.Errorf("archiving published %d events: %+v", n1-n0, b.ring[n0:])
		b.mu.Unlock()
		t.Fatalf("heads %v, were %v", heads1, heads0)
	}
	b2, err := NewBus(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := b2.Scan(); err != nil {
		t.Fatal(err)
	}
	if _, heads2 := state(b2); !reflect.DeepEqual(heads2, heads0) {
		t.Fatalf("a new bus's first scan: heads %v, want %v", heads2, heads0)
	}
}
