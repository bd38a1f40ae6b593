package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestBusScanPastUnreadableTaskRef: a task whose ledger ref plain git
// pointed at a blob, one whose journal ref names a missing object, and
// two whose ledger or journal loose ref file holds no object id, do not
// stop the bus: its first scan reads every other task, and their
// posts after it are published as events.
func TestBusScanPastUnreadableTaskRef(t *testing.T) {
	s, dir := newInternalStore(t)
	toks := map[string]string{}
	for _, id := range []string{"T-1", "T-2", "T-3", "T-4", "T-5", "T-6"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		tok, err := s.Claim(id, "agent")
		if err != nil {
			t.Fatal(err)
		}
		toks[id] = tok
		if _, err := s.Post(bernstein.PostRequest{Task: id, Key: "k", Agent: "agent", ClaimToken: tok,
			Payload: artifact.Payload{Type: "report", Body: "body of " + id}}); err != nil {
			t.Fatal(err)
		}
	}
	blobFile := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(blobFile, []byte("not a chain"), 0o644); err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(gitOut(t, dir, "hash-object", "-w", blobFile))
	gitOut(t, dir, "update-ref", "refs/bernstein/ledger/T-2", blob)
	if err := os.WriteFile(filepath.Join(dir, ".git", "refs", "bernstein", "journal", "T-3"), []byte(strings.Repeat("7", 40)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"ledger/T-5", "journal/T-6"} {
		if err := os.WriteFile(filepath.Join(dir, ".git", "refs", "bernstein", filepath.FromSlash(ref)), []byte("garbage\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	b, err := NewBus(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Scan(); err != nil {
		t.Fatalf("first scan: %v", err)
	}
	b.mu.Lock()
	_, has1 := b.heads["T-1"]
	_, has4 := b.heads["T-4"]
	b.mu.Unlock()
	if !has1 || !has4 {
		t.Fatalf("the first scan did not read the readable tasks: heads %v", b.heads)
	}
	last := b.LastID()
	for _, id := range []string{"T-1", "T-4"} {
		if _, err := s.Post(bernstein.PostRequest{Task: id, Key: "k", Agent: "agent", ClaimToken: toks[id],
			Payload: artifact.Payload{Type: "report", Body: "again"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Scan(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	got := map[string]bool{}
	evs, _, _, err := b.since(last, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		got[e.Task] = true
	}
	if !got["T-1"] || !got["T-4"] || got["T-2"] || got["T-3"] || got["T-5"] || got["T-6"] {
		t.Fatalf("events after the posts are of %v, want T-1 and T-4", got)
	}
}
