// Package bernstein is the library every surface (CLI, MCP, HTTP) is a thin
// adapter over: a Store keeps the work of agent tasks in an ordinary git
// repository under refs/bernstein/*, and re-verifies whatever it reads.
package bernstein

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
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
}

// ErrNotRepository reports a directory that is not in a git repository.
var ErrNotRepository = errors.New("not a git repository")

// Store is an open bernstein repository.
type Store struct {
	gitDir    string // the common git directory: refs and objects live here
	ownDir    string // the worktree's own git directory: its HEAD lives here
	bare      bool
	dir       string // the directory the store was opened from
	objects   *gitstore.Repo
	refs      refs.Reader
	txr       *refs.Transactor
	opts      Options
	home      string
	lockPath  string
	now       func() time.Time
	identOnce sync.Once
	ident     *keys.Identity
	identErr  error
	trustMu   sync.Mutex
	trust     *keys.TrustSet
	trustErr  error
	trustPins pinStamp // the pin file the trust set was read with

	treeMu sync.Mutex
	trees  map[gitstore.Oid][]gitstore.TreeEntry

	stateMu  sync.Mutex
	ledgers  map[string]ledgerCache
	journals map[string]journalCache

	pubMu sync.Mutex
	pub   map[gitstore.Oid]map[string]ssh.PublicKey // published keys by keys commit
	// entryHeads remembers spine and audit heads this store wrote.
	entryHeads map[string]entryHead

	qmu     sync.Mutex
	queue   []*pendingOp
	leading bool           // a commit loop is running
	arrived chan struct{}  // nudges the commit loop when a post arrives
	loops   sync.WaitGroup // the commit loop and a compaction beside it

	compacting atomic.Bool // a compaction of this store's runs (txn.go)

	maintErr atomic.Value // last maintenance failure, for diagnostics

	tokens tokenIndex // live claim tokens by hash (tokenindex.go)

	repoIDOnce sync.Once
	repoIDVal  string
	heads      headMemo // ancestry already proven against the heads this writer wrote (heads.go)
	// pushBudget, when set (by tests), replaces pushArgBudget.
	pushBudget int
}

// entryHead is what a writer needs of a spine or audit head to extend it.
type entryHead struct {
	head gitstore.Oid
	next int64
	last string
	tree gitstore.Oid
}

type ledgerCache struct {
	key  foldCacheKey
	fold *ledgerFold
}

type journalCache struct {
	key   foldCacheKey
	state *journalState
}

// locate finds dir's own git directory, the common one, and whether the
// repository is bare.
func locate(dir string) (string, string, bool, error) {
	if own, c, bare, ok := discover(dir); ok {
		return own, c, bare, nil
	}
	cmd := exec.Command("git", "-C", dir, "rev-parse", "--path-format=absolute", "--git-common-dir", "--is-bare-repository", "--absolute-git-dir")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) < 3 {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "not a git repository") || msg == "" {
			return "", "", false, fmt.Errorf("%w: %s", ErrNotRepository, dir)
		}
		return "", "", false, fmt.Errorf("%s: %s", dir, strings.TrimPrefix(msg, "fatal: "))
	}
	return filepath.Clean(lines[2]), filepath.Clean(lines[0]), lines[1] == "true", nil
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
	dir := repoDir(o)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("repository %s: %w", dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("repository %s is not a directory", dir)
	}
	ownDir, gitDir, bare, err := locate(dir)
	if err != nil {
		return nil, err
	}
	// Before anything reads or writes objects: a sha256 repository would be
	// damaged by SHA-1 packs.
	if err := checkObjectFormat(gitDir); err != nil {
		return nil, err
	}
	objects, err := gitstore.Open(filepath.Join(gitDir, "objects"))
	if err != nil {
		return nil, err
	}
	objects.FaultHook = o.FaultHook
	home := o.Home
	if home == "" {
		if home, err = keys.Home(); err != nil {
			return nil, err
		}
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{
		gitDir: gitDir, ownDir: ownDir, bare: bare, dir: dir, objects: objects,
		refs: refs.Reader{Dir: gitDir},
		txr:  &refs.Transactor{GitDir: gitDir, LockWait: o.LockWait, FaultHook: o.FaultHook},
		opts: o, home: home, now: now,
		lockPath:   filepath.Join(gitDir, "bernstein", "write.lock"),
		trees:      map[gitstore.Oid][]gitstore.TreeEntry{},
		ledgers:    map[string]ledgerCache{},
		journals:   map[string]journalCache{},
		entryHeads: map[string]entryHead{},
		arrived:    make(chan struct{}, 1),
	}
	s.txr.Warn = func(msg string) { s.warn("%s", msg) }
	return s, nil
}

// Close waits for the store's commit loop and releases its mapped packs.
func (s *Store) Close() error {
	s.loops.Wait()
	return s.objects.Close()
}

// warn reports a problem that does not undo a committed write.
func (s *Store) warn(format string, args ...any) {
	if s.opts.Warn != nil {
		s.opts.Warn(fmt.Sprintf(format, args...))
	}
}

// view takes one consistent snapshot of the refs a read needs: those of one
// task with every spine and audit mirror and the keys, or (task "") every
// bernstein ref.
func (s *Store) view(task string) (*refs.Snapshot, error) {
	if task == "" {
		return s.refs.Snapshot(refs.Prefix)
	}
	return s.refs.Snapshot(refs.Journal(task), refs.Ledger(task), refs.SpinePrefix, refs.AuditPrefix, refs.Keys, refs.WritersPrefix)
}

// GitDir returns the repository's (common) git directory.
func (s *Store) GitDir() string { return s.gitDir }

// Objects exposes the object database, for verification and tests.
func (s *Store) Objects() *gitstore.Repo { return s.objects }

// Identity returns the local writer identity, loading it once. It never
// creates one.
func (s *Store) Identity() (*keys.Identity, error) {
	s.identOnce.Do(func() {
		s.ident, s.identErr = keys.Load(s.home)
	})
	return s.ident, s.identErr
}

// Trust returns the keys this reader trusts: the --allowed-signers file,
// this repository's pin file (pins.go) and the local writer's own key. A
// pin file changed since the last call (by `bernstein keys pin` in another
// process) is read again.
func (s *Store) Trust() (*keys.TrustSet, error) {
	s.trustMu.Lock()
	defer s.trustMu.Unlock()
	stamp := s.pinStamp()
	if (s.trust != nil || s.trustErr != nil) && stamp == s.trustPins {
		return s.trust, s.trustErr
	}
	s.trust, s.trustErr = s.loadTrust()
	s.trustPins = stamp
	return s.trust, s.trustErr
}

func (s *Store) loadTrust() (*keys.TrustSet, error) {
	var pinned []keys.AllowedSigner
	if s.opts.AllowedSigners != "" {
		as, err := keys.ReadAllowedSigners(s.opts.AllowedSigners)
		if err != nil {
			return nil, err
		}
		pinned = as
	}
	pins, err := s.readPins()
	if err != nil {
		return nil, err
	}
	pinned = append(pinned, pins...)
	id, err := s.Identity()
	if err != nil && !errors.Is(err, keys.ErrNoIdentity) {
		return nil, err
	}
	return keys.NewTrustSet(pinned, id), nil
}
