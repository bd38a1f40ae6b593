package txn

import (
	"path/filepath"
	"testing"

	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/keys"
)

// newTestWriter makes a repository in a temporary folder, with writer
// test-writer whose key is published (as bernstein init leaves it), and
// returns its writer; the repository closes when the test ends.
func newTestWriter(t testing.TB) *Writer {
	t.Helper()
	root := t.TempDir()
	repo, home := filepath.Join(root, "repo"), filepath.Join(root, "home")
	if err := git.Init(repo); err != nil {
		t.Fatal(err)
	}
	c, err := core.Open(repo, core.Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := keys.Create(home, "test-writer")
	if err != nil {
		t.Fatal(err)
	}
	c.SetIdentity(id)
	p, h := proof.NewProver(c), heads.NewKeeper(c)
	w := NewWriter(c, p, fold.NewFolder(c, p, h), h)
	t.Cleanup(func() { w.Wait(); c.Close() })
	if _, err := w.Submit(func(t *Tx) (any, error) { return t.PublishKey() }); err != nil {
		t.Fatal(err)
	}
	return w
}
