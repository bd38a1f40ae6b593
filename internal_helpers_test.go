package bernstein

import (
	"path/filepath"
	"testing"
)

// newTestStore initialises a repository with writer test-writer in a
// temporary folder and opens it; the store closes when the test ends.
func newTestStore(t testing.TB) (*Store, Options) {
	t.Helper()
	root := t.TempDir()
	opts := Options{Repo: filepath.Join(root, "repo"), Home: filepath.Join(root, "home")}
	if _, err := Init(opts, "test-writer"); err != nil {
		t.Fatal(err)
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, opts
}
