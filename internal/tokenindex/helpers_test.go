package tokenindex

import (
	"testing"

	"github.com/bernstein/bernstein/internal/storetest"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Store is a repository as these tests use it: its token index, its refs,
// and the task writes the index follows.
type Store struct {
	tokens Index
	refs   refs.Reader
	gitDir string
	repo   *storetest.Repo
}

// TaskSpec names a task to create.
type TaskSpec struct{ ID, Title string }

// Claimant is the live claim a token stands for.
type Claimant struct{ Task, Agent string }

// TokenHash is the ledger's record of a claim token.
func TokenHash(token string) record.Hash { return ledger.TokenHash(token) }

// testOptions say which repository Open opens, for which test.
type testOptions struct {
	t         testing.TB
	dir, home string
}

func storeOf(r *storetest.Repo) *Store {
	s := &Store{refs: r.Core.Refs, gitDir: r.Core.GitDir, repo: r}
	s.tokens = Index{c: r.Core, prover: r.Prover, folder: r.Folds}
	return s
}

// newTestStore initialises a repository with writer test-writer in a
// temporary folder and opens it; it closes when the test ends.
func newTestStore(t testing.TB) (*Store, testOptions) {
	r := storetest.New(t)
	return storeOf(r), testOptions{t, r.Dir, r.Home}
}

// Open opens the repository once more, as another process would.
func Open(o testOptions) (*Store, error) { return storeOf(storetest.Open(o.t, o.dir, o.home)), nil }

// Close is done when the test ends.
func (s *Store) Close() error { return nil }

func (s *Store) ClaimByToken(token string) (*Claimant, error) {
	task, agent, err := s.tokens.Claim(token)
	if err != nil {
		return nil, err
	}
	return &Claimant{Task: task, Agent: agent}, nil
}

func (s *Store) CreateTask(spec TaskSpec) (struct{}, error) {
	return struct{}{}, s.repo.CreateTask(spec.ID, spec.Title)
}

func (s *Store) Claim(task, agent string) (string, error) { return s.repo.Claim(task, agent) }

// Transition applies kind to task (by the writer, with no reason).
func (s *Store) Transition(task, kind, _, _ string) (struct{}, error) {
	return struct{}{}, s.repo.Transition(task, kind)
}

func (s *Store) TaskIDs() ([]string, error) { return refs.TaskIDs(s.refs) }

func (s *Store) ledgerState(task string) (*ledger.State, error) {
	return s.repo.Folds.LedgerState(task)
}

func (s *Store) refsSignal() refsSignal { return s.tokens.refsSignal() }
