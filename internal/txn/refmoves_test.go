package txn_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/storetest"
	"github.com/bernstein/bernstein/refs"
)

// TestApplyLockedPacksAreDistinct: every ref transaction of fetch and push
// keeps its intent in a pack of its own name. Packs of the empty tree alone
// were all one name, so a compaction deleting the last one (an input: its
// keep was gone) deleted the files the next transaction had just renamed in.
func TestApplyLockedPacksAreDistinct(t *testing.T) {
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	r := storetest.New(t)
	s := r.Writer
	head, err := r.Core.Refs.Read(refs.Repository)
	if err != nil {
		t.Fatal(err)
	}
	packs := func() map[string]bool {
		names, _ := filepath.Glob(filepath.Join(r.Core.GitDir, "objects", "pack", "pack-*.pack"))
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
		if err := s.ApplyLocked(u); !errors.Is(err, refs.ErrConflict) {
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
