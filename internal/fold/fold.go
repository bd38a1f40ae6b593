// Package fold folds a task's ledger and journal over their proven rows
// (a chain is proven as a prefix; the rest are faults, reported and never
// folded), remembers the folds by head and proof version (in memory, and an
// authenticated cache on disk), and projects a task's state and progress
// from one consistent view.
package fold

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Folds count proven rows only. A chain is proven as a prefix: every row up
// to the first one whose commit no trusted writer signed counts, and that
// row and everything after it are faults, reported and never folded. The
// write path builds only on a chain with no fault; readers show the faults.

// Proof is what a fold knows of its chain beyond the rows it counted.
type Proof struct {
	// Total is the number of rows the chain holds.
	Total int64
	// Faults are the rows that do not count, oldest first.
	Faults []verify.RowFault
	// Unverifiable is set when counted rows include unverifiable ones (a
	// reader with no trust anchor at all counts them).
	Unverifiable bool
}

// Whole reports whether every row of the chain counted.
func (p Proof) Whole() bool { return len(p.Faults) == 0 }

// Unproven is the error the write path returns for a chain it will not
// extend.
func (p Proof) Unproven(what, task string) error {
	f := p.Faults[0]
	return fmt.Errorf("%w: %s: nothing is written on top of it; run 'bernstein audit verify'", ErrUnproven, heads.FaultPhrase(what, task, f))
}

// ErrUnproven reports a chain the write path will not extend because it
// holds rows that are not proven.
var ErrUnproven = fmt.Errorf("unproven rows")

// extend folds commits (oldest first) into p, calling apply on each row
// that counts; a row that is not proven, or that apply refuses, becomes the
// first fault and every row after it a fault too.
//
// The chain's first row must be rooted in this repository (env's binding,
// verify.Binding.CheckRoot): a chain copied from another repository is
// foreign, its first row the fault and every row after it too.
func (p *Proof) extend(env *verify.Env, chainName, name string, commits []chain.Commit, apply func(record.Row, record.Hash) error) {
	anchored := env.Anchored()
	for _, cc := range commits {
		index := p.Total
		p.Total++
		if len(p.Faults) > 0 {
			p.Faults = append(p.Faults, verify.FaultFrom(chainName, index, p.Faults[0].Index, cc.Proof))
			continue
		}
		if !verify.RowCounts(cc.Proof.State, anchored) {
			p.Faults = append(p.Faults, verify.Fault(chainName, index, cc.Proof, anchored))
			continue
		}
		row, err := record.ParseRow(cc.Record)
		if err == nil && index == 0 {
			if why := env.Binding.CheckRoot(chainName, name, cc.ID, string(row.Prev)); why != "" {
				p.Faults = append(p.Faults, verify.RowFault{Chain: chainName, Index: index, Writer: cc.Proof.Writer, State: verify.Tampered, Reason: why})
				continue
			}
		}
		if err == nil {
			err = apply(row, record.Sum(cc.Record))
		}
		if err != nil {
			p.Faults = append(p.Faults, verify.RowFault{Chain: chainName, Index: index, Writer: cc.Proof.Writer, State: verify.Tampered, Reason: err.Error()})
			continue
		}
		if cc.Proof.State == verify.Unverifiable {
			p.Unverifiable = true
		}
	}
}

// Clone copies p so that extending the copy leaves p as it was.
func (p Proof) Clone() Proof {
	p.Faults = append([]verify.RowFault(nil), p.Faults...)
	return p
}

// Journal is what the write path needs of a journal: the chain's position
// and, per key, the latest version and its spine entry hash, all over the
// counted rows. Its fields are the disk cache's format.
type Journal struct {
	Task string
	Rows int64
	Head record.Hash
	Keys map[string]KeyState
	// Progress is the journal half of the progress fold.
	Progress progress.Journal
	// LastSpine is the spine entry hash of the latest artifact row.
	LastSpine record.Hash
	// Proof says which rows counted.
	Proof Proof
}

// KeyState is the latest version of one artifact key.
type KeyState struct {
	Version   int64
	SpineHash record.Hash
}

// NewJournal is the fold of task's empty journal.
func NewJournal(task string) *Journal {
	return &Journal{Task: task, Keys: map[string]KeyState{}}
}

// Clone copies j, so that applying rows to the copy leaves j as it was.
func (j *Journal) Clone() *Journal {
	c := *j
	c.Keys = maps.Clone(j.Keys)
	c.Progress = j.Progress.Clone()
	c.Proof = j.Proof.Clone()
	return &c
}

// Apply folds one row. A row out of chain is an error: bernstein never
// extends a journal it cannot account for.
func (j *Journal) Apply(r record.Row, hash record.Hash) error {
	if r.TaskID != j.Task {
		return fmt.Errorf("journal of %s: row %d belongs to task %q", j.Task, r.Index, r.TaskID)
	}
	if r.Index == 0 && j.Rows == 0 {
		// The root was checked against the repository's binding
		// (Proof.extend) or made by the writer from it (txn).
		j.Head = r.Prev
	}
	if r.Index != j.Rows || r.Prev != j.Head {
		return fmt.Errorf("journal of %s is broken at row %d: run 'bernstein audit verify'", j.Task, r.Index)
	}
	if r.Kind == record.KindArtifactPosted {
		var a record.ArtifactPosted
		if err := r.DecodeData(&a); err != nil {
			return err
		}
		if a.Version != j.Keys[a.Key].Version+1 {
			return fmt.Errorf("journal of %s: row %d posts %s version %d after version %d", j.Task, r.Index, a.Key, a.Version, j.Keys[a.Key].Version)
		}
		j.Keys[a.Key] = KeyState{Version: a.Version, SpineHash: a.SpineEntryHash}
		j.LastSpine = a.SpineEntryHash
	} else if err := j.Progress.Apply(r); err != nil {
		return fmt.Errorf("journal of %s, row %d: %w", j.Task, r.Index, err)
	}
	j.Rows++
	j.Head = hash
	return nil
}

// Ledger is a ledger folded over its counted rows.
type Ledger struct {
	State *ledger.State
	Proof Proof
}

// Exists reports whether the task's creation counted.
func (l *Ledger) Exists() bool { return l != nil && l.State != nil && l.State.Phase != "" }

// cacheKey is what a remembered fold depends on besides its head: the
// proof version (the published keys tell unverifiable from tampered; the
// trust set, verified from unverifiable).
type cacheKey struct {
	head    gitstore.Oid
	version gitstore.Oid
}

type ledgerCache struct {
	key  cacheKey
	fold *Ledger
}

type journalCache struct {
	key   cacheKey
	state *Journal
}

// Folder folds the chains of one repository and remembers the folds.
type Folder struct {
	c      *core.Repo
	prover *proof.Prover
	heads  *heads.Keeper

	mu       sync.Mutex
	ledgers  *memo[ledgerCache]
	journals *memo[journalCache]
}

// NewFolder is the folder of repository c.
func NewFolder(c *core.Repo, p *proof.Prover, h *heads.Keeper) *Folder {
	return &Folder{c: c, prover: p, heads: h, ledgers: newMemo[ledgerCache](memoTasks), journals: newMemo[journalCache](memoTasks)}
}

// Remember keeps the folds a committed write left: ledger and journal (nil
// when it did not fold that chain) at their heads, under proof version.
func (f *Folder) Remember(version gitstore.Oid, ledgerHead gitstore.Oid, l *Ledger, journalHead gitstore.Oid, j *Journal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l != nil {
		f.ledgers.put(l.State.TaskID, ledgerCache{cacheKey{ledgerHead, version}, l})
	}
	if j != nil {
		f.journals.put(j.Task, journalCache{cacheKey{journalHead, version}, j})
	}
}

// headsOf is the view of the heads for the reads proven under env: one
// per view (proof.Env.Derived), so that a list of n tasks finds this
// host's writer's heads file and makes it current once, not at each of
// its 2n lookups.
func (f *Folder) headsOf(env *proof.Env) *heads.View {
	return env.Derived(headsViewKey{f}, func() any { return f.heads.View() }).(*heads.View)
}

type headsViewKey struct{ f *Folder }

// JournalAt folds task's journal up to head (foldJournal) and checks it
// against the head this host's writer left on it (internal/heads): a
// journal rolled back behind that head has a fault where it falls short.
func (f *Folder) JournalAt(env *proof.Env, task string, head gitstore.Oid) (*Journal, error) {
	st, err := f.foldJournal(env, task, head)
	if err != nil {
		return nil, err
	}
	fault, err := f.headsOf(env).Rollback("journal", refs.Journal(task), head, st.Proof.Total-1)
	if err != nil || fault == nil {
		return st, err
	}
	st = st.Clone()
	st.Proof.Faults = append(st.Proof.Faults, *fault)
	return st, nil
}

// FoldJournal folds task's journal up to head without checking it against
// the heads this host's writer left: for a chain the writer is about to
// take in place of its own (task adopt), whose heads it supersedes.
func (f *Folder) FoldJournal(env *proof.Env, task string, head gitstore.Oid) (*Journal, error) {
	return f.foldJournal(env, task, head)
}

// FoldLedger is FoldJournal for task's ledger.
func (f *Folder) FoldLedger(env *proof.Env, task string, head gitstore.Oid) (*Ledger, error) {
	return f.foldLedger(env, task, head)
}

// LedgerAt is JournalAt for task's ledger.
func (f *Folder) LedgerAt(env *proof.Env, task string, head gitstore.Oid) (*Ledger, error) {
	fold, err := f.foldLedger(env, task, head)
	if err != nil {
		return nil, err
	}
	fault, err := f.headsOf(env).Rollback("ledger", refs.Ledger(task), head, fold.Proof.Total-1)
	if err != nil || fault == nil {
		return fold, err
	}
	st := *fold.State
	fold = &Ledger{State: &st, Proof: fold.Proof.Clone()}
	fold.Proof.Faults = append(fold.Proof.Faults, *fault)
	return fold, nil
}

// foldJournal folds task's journal up to head, extending a cached fold
// (in memory, else the authenticated one on disk) when head descends from
// it.
func (f *Folder) foldJournal(env *proof.Env, task string, head gitstore.Oid) (*Journal, error) {
	f.mu.Lock()
	cached, ok := f.journals.get(task)
	f.mu.Unlock()
	if ok && cached.key.version != env.Version {
		ok = false
	}
	if ok && cached.key.head == head {
		return cached.state, nil
	}
	if !ok {
		if h, st, found := f.loadJournalCache(env, task); found {
			cached, ok = journalCache{cacheKey{h, env.Version}, st}, true
			if h == head {
				f.mu.Lock()
				f.journals.put(task, cached)
				f.mu.Unlock()
				return st, nil
			}
		}
	}
	stop := gitstore.ZeroOid
	if ok {
		stop = cached.key.head
	}
	check := proof.Check(env.Env)
	commits, met, err := chain.WalkBack(f.c.Objects, head, stop, check)
	if err != nil {
		return nil, chainErr(refs.Journal(task), head, err)
	}
	st := NewJournal(task)
	if met && ok {
		st = cached.state.Clone()
	} else if ok {
		// The cached head is not an ancestor: fold from the root.
		if commits, _, err = chain.WalkBack(f.c.Objects, head, gitstore.ZeroOid, check); err != nil {
			return nil, chainErr(refs.Journal(task), head, err)
		}
	}
	st.Proof.extend(env.Env, record.ChainJournal, task, commits, st.Apply)
	f.mu.Lock()
	f.journals.put(task, journalCache{cacheKey{head, env.Version}, st})
	f.mu.Unlock()
	if len(commits) >= cacheMinRows {
		f.saveJournalCache(env, task, head, st)
	}
	return st, nil
}

// chainErr is the error of a walk of the chain ref names from head: a
// chain that cannot be read as one (chain.ErrUnreadable) is the ref's
// fault, a *refs.BadRefError; any other error is the read's.
func chainErr(ref string, head gitstore.Oid, err error) error {
	if errors.Is(err, chain.ErrUnreadable) {
		return refs.Unreadable(ref, head, err)
	}
	kind := "journal"
	if strings.HasPrefix(ref, refs.LedgerPrefix) {
		kind = "ledger"
	}
	t, _ := refs.TaskOf(ref)
	return fmt.Errorf("%s of %s: %w", kind, t, err)
}

// foldLedger folds task's ledger up to head.
func (f *Folder) foldLedger(env *proof.Env, task string, head gitstore.Oid) (*Ledger, error) {
	f.mu.Lock()
	cached, ok := f.ledgers.get(task)
	f.mu.Unlock()
	if ok && cached.key.version != env.Version {
		ok = false
	}
	if ok && cached.key.head == head {
		return cached.fold, nil
	}
	stop := gitstore.ZeroOid
	if ok {
		stop = cached.key.head
	}
	check := proof.Check(env.Env)
	commits, met, err := chain.WalkBack(f.c.Objects, head, stop, check)
	if err != nil {
		return nil, chainErr(refs.Ledger(task), head, err)
	}
	fold := &Ledger{State: &ledger.State{}}
	if met && ok {
		st := *cached.fold.State
		fold = &Ledger{State: &st, Proof: cached.fold.Proof.Clone()}
	} else if ok {
		if commits, _, err = chain.WalkBack(f.c.Objects, head, gitstore.ZeroOid, check); err != nil {
			return nil, chainErr(refs.Ledger(task), head, err)
		}
	}
	fold.Proof.extend(env.Env, record.ChainLedger, task, commits, func(row record.Row, h record.Hash) error {
		if row.TaskID != task {
			return fmt.Errorf("ledger of %s: row %d belongs to task %q", task, row.Index, row.TaskID)
		}
		return fold.State.ApplyHashed(row, h) // its root was checked by extend
	})
	f.mu.Lock()
	f.ledgers.put(task, ledgerCache{cacheKey{head, env.Version}, fold})
	f.mu.Unlock()
	return fold, nil
}
