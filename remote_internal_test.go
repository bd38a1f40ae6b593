package bernstein

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// SetPushArgBudget sets the bytes of <commit>:<ref> refspecs s's pushes
// pass on git's command line (pushArgBudget), for the tests of the push
// through temporary refs.
func SetPushArgBudget(s *Store, n int) { s.pushBudget = n }

// PushTempRoot is where a large push keeps its temporary refs.
const PushTempRoot = pushTempRoot

// TestFetchRelate: the walk that compares two heads of a chain.
func TestFetchRelate(t *testing.T) {
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	s, opts := newTestStore(t)
	const audit = "refs/bernstein/audit/test-writer"
	var heads []gitstore.Oid
	task := 0
	grow := func(n int) {
		for range n {
			if _, err := s.CreateTask(TaskSpec{ID: fmt.Sprintf("R-%d", task), Title: "t"}); err != nil {
				t.Fatal(err)
			}
			task++
			h, err := s.refs.Read(audit)
			if err != nil {
				t.Fatal(err)
			}
			heads = append(heads, h)
		}
	}
	grow(5) // heads 0..4
	// Move the mirror back to head 2 by hand and grow it again: heads 5, 6
	// diverge from 3, 4.
	if out, err := exec.Command("git", "-C", opts.Repo, "update-ref", audit, heads[2].String()).CombinedOutput(); err != nil {
		t.Fatalf("git update-ref: %v %s", err, out)
	}
	// On purpose: the head this host wrote is dropped (docs/trust.md,
	// Rollbacks), so the writer extends the mirror from where it now is.
	os.Remove(s.headPath(audit))
	grow(2)
	cases := []struct {
		l, r   int
		rel    relation
		lo, ro int
		base   int
	}{
		{1, 1, relSame, 0, 0, 1},
		{1, 4, relBehind, 0, 3, 1},
		{4, 1, relAhead, 3, 0, 1},
		{0, 4, relBehind, 0, 4, 0},
		{4, 6, relDiverged, 2, 2, 2},
		{3, 5, relDiverged, 1, 1, 2},
		{6, 1, relAhead, 3, 0, 1},
	}
	for _, c := range cases {
		a, err := s.relate(heads[c.l], heads[c.r])
		if err != nil {
			t.Fatal(err)
		}
		if a.rel != c.rel || a.localOnly != c.lo || a.remoteOnly != c.ro || a.base != heads[c.base] {
			t.Fatalf("relate(%d, %d) = %+v, want %+v", c.l, c.r, a, c)
		}
	}
}

// TestApplyLockedPacksAreDistinct: every ref transaction of fetch and push
// keeps its intent in a pack of its own name. Packs of the empty tree alone
// were all one name, so a compaction deleting the last one (an input: its
// keep was gone) deleted the files the next transaction had just renamed in.
func TestApplyLockedPacksAreDistinct(t *testing.T) {
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	s, _ := newTestStore(t)
	head, err := s.refs.Read("refs/bernstein/writers/test-writer")
	if err != nil {
		t.Fatal(err)
	}
	packs := func() map[string]bool {
		names, _ := filepath.Glob(filepath.Join(s.gitDir, "objects", "pack", "pack-*.pack"))
		out := map[string]bool{}
		for _, n := range names {
			out[n] = true
		}
		return out
	}
	before := packs()
	// The same transaction twice, each losing its compare-and-swap (the ref
	// is not at the old value it names), so each leaves its pack behind.
	u := []refs.Update{{Ref: "refs/bernstein/journal/X-1", Old: head, New: head}}
	u[0].Old = gitstore.Oid{1}
	for i := 0; i < 2; i++ {
		if err := s.applyLocked(u); !errors.Is(err, refs.ErrConflict) {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	var added []string
	for n := range packs() {
		if !before[n] {
			added = append(added, n)
		}
	}
	if len(added) != 2 {
		t.Fatalf("two transactions left %d new packs, want 2 of their own names: %v", len(added), added)
	}
}
