// Package bernstein is the library every surface (CLI, MCP, HTTP) is a thin
// adapter over: a Store keeps the work of agent tasks in an ordinary git
// repository under refs/bernstein/*, and re-verifies whatever it reads.
//
// This package is the library's face: Open and Init, the Store's methods,
// their request and result types, and the documents every surface prints.
// Each method checks its input and calls the package that owns the concept
// (docs/architecture.md draws them).
package bernstein

import (
	"os"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/feed"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/internal/tokenindex"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/internal/writers"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/remote"
	"github.com/bernstein/bernstein/verify"
)

// Options configure Open and Init.
type Options struct {
	// Repo is a directory inside the repository (or the git directory of a
	// bare one). Empty means BERNSTEIN_REPO, else the current directory.
	Repo string
	// Home holds the writer identity. Empty means keys.Home().
	Home string
	// AllowedSigners is a file in git's allowed_signers format whose keys the
	// reader pins; the local writer's own key is always trusted.
	AllowedSigners string
	// LockWait bounds the wait for a ref lock held by another process.
	LockWait time.Duration
	// Now supplies commit timestamps (display metadata only).
	Now func() time.Time
	// Warn receives problems that arise after a write was committed (the
	// write stands; the next writer finishes what is left). Nil discards them.
	Warn func(msg string)
	// FaultHook, for tests and measurements, is called at each step of a
	// write that a crash could interrupt (gitstore.Repo's and
	// refs.Transactor's steps, and the store's "intent written" and
	// "packed"); a non-nil return stops the write right there, as a killed
	// process would stop it. Nil in use.
	FaultHook func(step string) error
	// PushArgBudget, for tests, bounds the bytes of <commit>:<ref> refspecs
	// a push passes on git's command line (a larger push goes through
	// temporary refs); 0 is the default.
	PushArgBudget int
	// Remote, for Init only, is the remote the repository shares (init
	// --remote): a repository without an identity fetches it from there
	// first, and one that init gives an identity pushes it there at once.
	Remote string
}

// Store is an open bernstein repository.
type Store struct {
	core   *core.Repo
	prover *proof.Prover
	heads  *heads.Keeper // the heads this host's writer wrote (rollback detection)
	folds  *fold.Folder
	w      *txn.Writer // the write transaction
	feeds  *feed.Reader
	tokens *tokenindex.Index // live claim tokens by hash
	sync   *remote.Syncer    // moves refs to and from the remotes
}

func repoDir(o Options) string {
	if o.Repo != "" {
		return o.Repo
	}
	if r := os.Getenv("BERNSTEIN_REPO"); r != "" {
		return r
	}
	return "."
}

// Open opens the repository o names. It creates nothing: reading commands
// never create keys or refs.
func Open(o Options) (*Store, error) {
	c, err := core.Open(repoDir(o), core.Config{Home: o.Home, AllowedSigners: o.AllowedSigners, LockWait: o.LockWait, Now: o.Now, Warn: o.Warn, FaultHook: o.FaultHook})
	if err != nil {
		return nil, err
	}
	prover, keeper := proof.NewProver(c), heads.NewKeeper(c)
	folds := fold.NewFolder(c, prover, keeper)
	s := &Store{
		core: c, prover: prover, heads: keeper, folds: folds,
		w:      txn.NewWriter(c, prover, folds, keeper),
		feeds:  feed.NewReader(c, prover),
		tokens: tokenindex.New(c, prover, folds),
	}
	s.sync = remote.NewSyncer(c, s.w, o.PushArgBudget)
	s.sync.SetWitnesses(&remote.WitnessPolicy{Client: remote.WitnessClient()})
	return s, nil
}

// Close waits for the store's commit loop and releases its mapped packs.
func (s *Store) Close() error {
	s.w.Wait()
	return s.core.Close()
}

// view takes one consistent snapshot of the refs a read needs: those of one
// task with every spine and audit mirror and the keys, or (task "") every
// bernstein ref.
func (s *Store) view(task string) (*refs.Snapshot, error) {
	if task == "" {
		return s.core.Refs.Snapshot(refs.Prefix)
	}
	return s.core.Refs.Snapshot(refs.Journal(task), refs.Ledger(task), refs.SpinePrefix, refs.AuditPrefix, refs.Keys, refs.WritersPrefix, refs.Repository, refs.ForksPrefix, refs.CheckpointsPrefix)
}

// AdoptIdentity is for the remote guard, about to accept the push that
// gives this bare repository its identity id (docs/format.md): the pins
// made before, under the repository's path, go over to the identity, and
// this store keys them by it from now on.
func (s *Store) AdoptIdentity(id string) error { return s.core.AdoptIdentity(id) }

// GitDir returns the repository's (common) git directory.
func (s *Store) GitDir() string { return s.core.GitDir }

// Objects exposes the object database, for verification and tests.
func (s *Store) Objects() *gitstore.Repo { return s.core.Objects }

// Identity returns the local writer identity, loading it once. It never
// creates one.
func (s *Store) Identity() (*keys.Identity, error) { return s.core.Identity() }

// Trust returns the keys this reader trusts: the --allowed-signers file,
// this repository's pin file (keys/pins) and the local writer's own key. A
// pin file changed since the last call (by `bernstein keys pin` in another
// process) is read again.
func (s *Store) Trust() (*keys.TrustSet, error) { return s.core.Trust() }

// VerifyEnv assembles what verification reads: the refs of view (one
// consistent snapshot), the pinned keys, the published keys.
func (s *Store) VerifyEnv(view refs.Source) (*verify.Env, error) {
	env, err := s.prover.Env(view)
	if err != nil {
		return nil, err
	}
	return env.Env, nil
}

// PublishedKeys reads the published keys: writer -> authorized key line.
// These keys are not trusted by themselves; see docs/trust.md.
func (s *Store) PublishedKeys() (map[string][]string, error) {
	view, err := s.core.Refs.Snapshot(refs.KeyScope...)
	if err != nil {
		return nil, err
	}
	return writers.Keys(s.core, view)
}
