// Package storetest makes repositories for the tests of the library's
// internal packages: wired as the root's Open wires them, but without the
// root (which imports those packages), initialised as bernstein init leaves
// a new one (its identity minted, writer test-writer's key published), and
// open.
package storetest

import (
	"path/filepath"
	"testing"

	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/internal/taskops"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
)

// Repo is one open repository and the library's parts on it.
type Repo struct {
	Dir, Home string // the work tree, BERNSTEIN_HOME
	Core      *core.Repo
	Prover    *proof.Prover
	Heads     *heads.Keeper
	Folds     *fold.Folder
	Writer    *txn.Writer
}

// New makes a repository in a temporary folder, with writer test-writer;
// it closes when the test ends.
func New(t testing.TB) *Repo {
	t.Helper()
	root := t.TempDir()
	dir, home := filepath.Join(root, "repo"), filepath.Join(root, "home")
	if err := git.Init(dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.Create(home, "test-writer"); err != nil {
		t.Fatal(err)
	}
	r := Open(t, dir, home)
	// As bernstein init leaves a new repository: its identity minted (the
	// current storage format) and the writer's key published.
	if _, err := r.Writer.Submit(func(t *txn.Tx) (any, error) {
		rid, err := txn.NewRepositoryID()
		if err != nil {
			return nil, err
		}
		if _, err := t.MintRepository(rid); err != nil {
			return nil, err
		}
		return t.PublishKey()
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// Open opens the repository in dir once more, as another process would;
// it closes when the test ends.
func Open(t testing.TB, dir, home string) *Repo {
	t.Helper()
	c, err := core.Open(dir, core.Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	p, h := proof.NewProver(c), heads.NewKeeper(c)
	f := fold.NewFolder(c, p, h)
	r := &Repo{Dir: dir, Home: home, Core: c, Prover: p, Heads: h, Folds: f, Writer: txn.NewWriter(c, p, f, h)}
	t.Cleanup(func() { r.Writer.Wait(); c.Close() })
	return r
}

// CreateTask creates task id, titled title, by the writer.
func (r *Repo) CreateTask(id, title string) error {
	_, err := r.Writer.Submit(func(t *txn.Tx) (any, error) {
		return nil, taskops.Create(t, id, t.Identity().Writer, ledger.Created{Title: title, Evidence: []ledger.Producer{}, Gates: []ledger.Gate{}})
	})
	return err
}

// Claim gives agent task's claim and returns its token.
func (r *Repo) Claim(task, agent string) (string, error) {
	token, claimed, err := taskops.NewClaim(agent)
	if err != nil {
		return "", err
	}
	_, err = r.Writer.Submit(func(t *txn.Tx) (any, error) { return nil, taskops.Claim(t, task, agent, claimed) })
	return token, err
}

// Transition applies transition kind (with no reason) to task, by the
// writer.
func (r *Repo) Transition(task, kind string) error {
	_, err := r.Writer.Submit(func(t *txn.Tx) (any, error) {
		return nil, taskops.Transition(t, task, kind, t.Identity().Writer, "")
	})
	return err
}
