// Package tokenindex answers "which task's live claim has this token?"
// without folding every task's ledger.
package tokenindex

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The token index answers "which task's live claim has this token?" without
// folding every task's ledger: a map from token hash to task, built from the
// proven ledger folds and kept up to date incrementally. It is derived data
// and never decides alone: a task it names is confirmed by the proven fold of
// that one task's ledger, so an index that is wrong (stale, or poisoned) can
// at worst fail to find a claim; it cannot grant one.
//
// Keeping it current costs O(1) while no ledger moves. Every ledger update
// renames a file into refs/bernstein/ledger/ (or rewrites packed-refs), and a
// key published renames one into refs/bernstein/writers/ (or, in earlier
// versions, refs/bernstein/keys into refs/bernstein/), so the modification
// times and inodes of those directories and of packed-refs (the signal)
// change with them. A pin or unpin changes the trust set, which a lookup
// compares as well. A lookup stats those four paths and compares; only when the signal
// moved does it list the ledger heads, and then it folds only the ledgers
// whose heads differ from the ones it indexed (each fold extending the
// store's cached one). A signal read less than racyWindow after its newest
// modification time is not trusted (a later change within the same clock
// tick of the file system could leave it unchanged): the next lookup lists
// the heads again, until the directories have been quiet for that long.

// racyWindow is how recent a modification time must be for the signal that
// carries it to be re-checked by listing the heads. File systems stamp with
// a coarse clock (a few milliseconds on Linux); one with whole-second stamps
// gets two seconds.
const (
	racyWindow       = 50 * time.Millisecond
	racyWindowCoarse = 2 * time.Second
)

// Index is a repository's index of live claim tokens.
type Index struct {
	c      *core.Repo
	prover *proof.Prover
	folder *fold.Folder

	mu     sync.Mutex
	built  bool
	sig    refsSignal
	clean  bool                    // sig can be trusted to move with the next change
	keys   gitstore.Oid            // the proof version (keys and trust) the folds were proven under
	trust  *keys.TrustSet          // the trust set read at the last refresh
	heads  map[string]gitstore.Oid // task -> the ledger head indexed
	byTask map[string]record.Hash  // task -> its live claim's token hash
	byHash map[record.Hash][]string

	// Counters, for tests: ledger folds the index ran to build or refresh
	// itself, confirmations, and listings of the ledger heads.
	folds, confirms, listings int64
}

// fileSig is what stat says of one path.
type fileSig struct {
	exists bool
	ino    uint64
	size   int64
	mtime  int64 // nanoseconds
}

// refsSignal is the stat of the paths every ledger or keys update changes.
type refsSignal [4]fileSig

func statSig(path string) fileSig {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{}
	}
	s := fileSig{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = uint64(st.Ino)
	}
	return s
}

// New is the token index of repository c (empty until the first lookup).
func New(c *core.Repo, p *proof.Prover, f *fold.Folder) *Index {
	return &Index{c: c, prover: p, folder: f}
}

func (ix *Index) refsSignal() refsSignal {
	dir := ix.c.GitDir
	return refsSignal{
		statSig(filepath.Join(dir, "packed-refs")),
		statSig(filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(refs.LedgerPrefix, "/")))),
		statSig(filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(refs.Prefix, "/")))),
		statSig(filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(refs.WritersPrefix, "/")))),
	}
}

// quietBefore reports whether every modification time of sig is far enough
// before t that a change after t cannot carry the same time.
func (sig refsSignal) quietBefore(t time.Time) bool {
	for _, f := range sig {
		if !f.exists {
			continue
		}
		w := racyWindow
		if f.mtime%int64(time.Second) == 0 {
			w = racyWindowCoarse
		}
		if f.mtime > t.Add(-w).UnixNano() {
			return false
		}
	}
	return true
}

// indexScope is the refs the index reads: the ledgers and what proves them.
var indexScope = []string{refs.LedgerPrefix, refs.Keys, refs.WritersPrefix, refs.Repository, refs.SpinePrefix, refs.ForksPrefix}

// refreshLocked brings the index up to the ledger heads as they are now,
// folding only the ledgers that moved; rebuild folds every one. ix.mu is
// held.
func (ix *Index) refreshLocked(rebuild bool) error {
	at := time.Now()
	sig := ix.refsSignal() // before the heads are read: a change after it moves it
	view, err := ix.c.Refs.Snapshot(indexScope...)
	if err != nil {
		return err
	}
	ix.listings++
	ledgers, _, err := view.List(refs.LedgerPrefix)
	if err != nil {
		return err
	}
	env, err := ix.prover.Env(view)
	if err != nil {
		return err
	}
	if rebuild || !ix.built || env.Version != ix.keys {
		// Proofs depend on the published keys: fold everything again.
		ix.heads, ix.byTask, ix.byHash = map[string]gitstore.Oid{}, map[string]record.Hash{}, map[record.Hash][]string{}
		ix.keys = env.Version
	}
	seen := make(map[string]bool, len(ledgers))
	for name, head := range ledgers {
		task, err := refs.UnescapeTask(strings.TrimPrefix(name, refs.LedgerPrefix))
		if err != nil {
			continue // not a ref bernstein wrote
		}
		seen[task] = true
		if old, ok := ix.heads[task]; ok && old == head {
			continue
		}
		ix.folds++
		fold, err := ix.folder.LedgerAt(env, task, head)
		ix.heads[task] = head
		var h record.Hash
		if err == nil && fold.Exists() && fold.State.Claim != nil {
			h = fold.State.Claim.TokenSHA256
		}
		ix.setLocked(task, h)
	}
	for task := range ix.heads {
		if !seen[task] {
			delete(ix.heads, task)
			ix.setLocked(task, "")
		}
	}
	ix.built, ix.sig, ix.clean, ix.trust = true, sig, sig.quietBefore(at), env.Trust
	return nil
}

// setLocked records h as task's live claim token hash ("" none).
func (ix *Index) setLocked(task string, h record.Hash) {
	if old, ok := ix.byTask[task]; ok {
		if old == h {
			return
		}
		ts := slices.DeleteFunc(ix.byHash[old], func(t string) bool { return t == task })
		if len(ts) == 0 {
			delete(ix.byHash, old)
		} else {
			ix.byHash[old] = ts
		}
		delete(ix.byTask, task)
	}
	if h == "" {
		return
	}
	ix.byTask[task] = h
	ts := append(ix.byHash[h], task)
	slices.Sort(ts)
	ix.byHash[h] = ts
}

// candidates returns the tasks the index has for token hash h, refreshing it
// first when a ledger may have moved (or force).
func (ix *Index) candidates(h record.Hash, force bool) ([]string, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	trust, err := ix.c.Trust()
	if err != nil {
		return nil, err
	}
	// A pin or unpin (a new trust set) changes which claims are proven even
	// when no ref moved.
	if force || !ix.built || !ix.clean || ix.refsSignal() != ix.sig || trust != ix.trust {
		if err := ix.refreshLocked(false); err != nil {
			return nil, err
		}
	}
	return slices.Clone(ix.byHash[h]), nil
}

// headOf returns the ledger head the index folded for task.
func (ix *Index) headOf(task string) gitstore.Oid {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.heads[task]
}

// rebuild folds every ledger again.
func (ix *Index) rebuild() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.refreshLocked(true)
}

// errNoClaim is the answer for a token no live claim has.
var errNoClaim = errors.New("the claim token matches no live claim")

// confirmClaim reads task's ledger through the proven fold of one
// consistent view and returns its live claim if its token hash is h, with
// the head it read.
func (ix *Index) confirmClaim(task string, h record.Hash) (agent string, head gitstore.Oid, err error) {
	ix.mu.Lock()
	ix.confirms++
	ix.mu.Unlock()
	view, err := ix.c.Refs.Snapshot(refs.Ledger(task), refs.Keys, refs.WritersPrefix, refs.Repository, refs.SpinePrefix, refs.ForksPrefix)
	if err != nil {
		return "", gitstore.ZeroOid, err
	}
	head, err = view.ReadOptional(refs.Ledger(task))
	if err != nil || head.IsZero() {
		return "", head, errNoClaim
	}
	env, err := ix.prover.Env(view)
	if err != nil {
		return "", head, err
	}
	fold, err := ix.folder.LedgerAt(env, task, head)
	if err != nil {
		return "", head, err
	}
	if !fold.Exists() || fold.State.Claim == nil ||
		subtle.ConstantTimeCompare([]byte(fold.State.Claim.TokenSHA256), []byte(h)) != 1 {
		return "", head, errNoClaim
	}
	return fold.State.Claim.Agent, head, nil
}

// Claim resolves token through the index to the task whose live claim
// has it, and the agent that holds it. A token the index does not
// have costs a hash, four stats, a read of the pin file and a map lookup while no ledger moves; a
// task it names is confirmed by that task's proven fold. When the
// confirmation disagrees with the index, the index is refreshed (the ledger
// moved since) or, if the ledger did not move, rebuilt from every proven
// fold (the index was wrong), and asked once more.
func (ix *Index) Claim(token string) (task, agent string, err error) {
	if token == "" {
		return "", "", fmt.Errorf("no claim token")
	}
	h := ledger.TokenHash(token)
	tasks, err := ix.candidates(h, false)
	if err != nil {
		return "", "", err
	}
	for attempt := 0; ; attempt++ {
		stale := false
		for _, task := range tasks {
			agent, head, err := ix.confirmClaim(task, h)
			if err == nil {
				return task, agent, nil
			}
			if !errors.Is(err, errNoClaim) {
				return "", "", err
			}
			if head == ix.headOf(task) {
				// The ledger the index folded says otherwise: the index is wrong.
				stale = true
			}
		}
		if len(tasks) == 0 || attempt == 1 {
			return "", "", errNoClaim
		}
		if stale {
			err = ix.rebuild()
		}
		if err != nil {
			return "", "", err
		}
		if tasks, err = ix.candidates(h, !stale); err != nil {
			return "", "", err
		}
	}
}
