package proof_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bernstein/bernstein/internal/storetest"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// readyCache is the repository's spine cache for one reader, whose first
// load returns what it read only once every reader has read: the readers all
// find the cache as it was before any of them kept an index, as readers
// that start together do.
type readyCache struct {
	verify.SpineCache
	first  *sync.WaitGroup
	loaded bool
}

func (c *readyCache) Load(writer string) ([]byte, io.ReaderAt) {
	h, body := c.SpineCache.Load(writer)
	if !c.loaded {
		c.loaded = true
		c.first.Done()
		c.first.Wait()
	}
	return h, body
}

// TestColdSpineWalkedOnceInAProcess: readers of one process that start
// together where no spine index is kept walk the writer's spine whole one
// at a time, and each after the first reads the index the one before it
// kept: together they walk it once, not once each.
func TestColdSpineWalkedOnceInAProcess(t *testing.T) {
	r := storetest.New(t)
	for i := 0; i < 6; i++ {
		task := fmt.Sprintf("W-%d", i)
		if err := r.CreateTask(task, "walked"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Claim(task, "agent"); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
			if err := r.Transition(task, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := exec.Command("git", "-C", r.Dir, "rev-list", "--count", refs.Spine("test-writer")).Output()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || entries < 6 {
		t.Fatalf("spine of %q entries: %v", out, err)
	}
	if err := os.RemoveAll(filepath.Join(r.Dir, ".git", "bernstein", "cache", "spine")); err != nil {
		t.Fatal(err)
	}
	const readers = 8
	var first sync.WaitGroup
	first.Add(readers)
	walked := make([]int, readers)
	errs := make([]error, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			view, err := r.Core.Refs.Snapshot(refs.Keys, refs.WritersPrefix, refs.Repository, refs.SpinePrefix)
			if err != nil {
				errs[i] = err
				first.Done()
				return
			}
			env, err := r.Prover.Env(view)
			if err != nil {
				errs[i] = err
				first.Done()
				return
			}
			e := env.Env
			c := &readyCache{SpineCache: e.SpineCache, first: &first}
			ix, err := verify.BuildSpineIndex(&verify.Env{Objects: e.Objects, Refs: e.Refs, Trust: e.Trust, Published: e.Published, Binding: e.Binding, SpineCache: c})
			if err != nil {
				errs[i] = err
				return
			}
			if ix.Entries != entries {
				errs[i] = fmt.Errorf("indexed %d entries; git shows %d", ix.Entries, entries)
			}
			walked[i] = ix.Walked
		}()
	}
	wg.Wait()
	total := 0
	for i := range readers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += walked[i]
	}
	if total != entries {
		t.Fatalf("%d readers starting together walked %d spine entries (%v); the spine has %d: walked once in all", readers, total, walked, entries)
	}
}
