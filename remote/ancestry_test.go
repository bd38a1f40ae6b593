package remote

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/storetest"
	"github.com/bernstein/bernstein/refs"
)

// testStore is a repository as this package's tests use it: its syncer,
// refs and heads, and a way to create tasks.
type testStore struct {
	*Syncer
	refs  refs.Reader
	heads *heads.Keeper
	repo  *storetest.Repo
}

// TaskSpec names a task to create.
type TaskSpec struct{ ID, Title string }

func (s *testStore) CreateTask(spec TaskSpec) (struct{}, error) {
	return struct{}{}, s.repo.CreateTask(spec.ID, spec.Title)
}

// newTestStore initialises a repository with writer test-writer in a
// temporary folder and opens it; it closes when the test ends.
func newTestStore(t testing.TB) (*testStore, struct{ Repo string }) {
	t.Helper()
	r := storetest.New(t)
	return &testStore{Syncer: NewSyncer(r.Core, r.Writer, 0), refs: r.Core.Refs, heads: r.Heads, repo: r}, struct{ Repo string }{r.Dir}
}

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
	if err := s.heads.Forget(audit); err != nil {
		t.Fatal(err)
	}
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
