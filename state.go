package bernstein

import (
	"fmt"
	"maps"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
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

// chainProof is what a fold knows of its chain beyond the rows it counted.
type chainProof struct {
	// Total is the number of rows the chain holds.
	Total int64
	// Faults are the rows that do not count, oldest first.
	Faults []verify.RowFault
	// Unverifiable is set when counted rows include unverifiable ones (a
	// reader with no trust anchor at all counts them).
	Unverifiable bool
}

// whole reports whether every row of the chain counted.
func (p chainProof) whole() bool { return len(p.Faults) == 0 }

// state sums the proof up: verified, unverifiable or tampered.
func (p chainProof) state() string { return verify.ProofState(p.Faults, p.Unverifiable) }

// unproven is the error the write path returns for a chain it will not
// extend.
func (p chainProof) unproven(what, task string) error {
	f := p.Faults[0]
	return fmt.Errorf("%w: %s: nothing is written on top of it; run 'bernstein audit verify'", ErrUnproven, heads.FaultPhrase(what, task, f))
}

// ErrUnproven reports a chain the write path will not extend because it
// holds rows that are not proven.
var ErrUnproven = fmt.Errorf("unproven rows")

// extend folds commits (oldest first) into p, calling apply on each row
// that counts; a row that is not proven, or that apply refuses, becomes the
// first fault and every row after it a fault too.
func (p *chainProof) extend(chainName string, anchored bool, commits []chain.Commit, apply func(record.Row, record.Hash) error) {
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

// clone copies p so that extending the copy leaves p as it was.
func (p chainProof) clone() chainProof {
	p.Faults = append([]verify.RowFault(nil), p.Faults...)
	return p
}

// journalState is what the write path needs of a journal: the chain's
// position and, per key, the latest version and its spine entry hash, all
// over the counted rows.
type journalState struct {
	Task string
	Rows int64
	Head record.Hash
	Keys map[string]keyState
	// Progress is the journal half of the progress fold.
	Progress progress.Journal
	// LastSpine is the spine entry hash of the latest artifact row.
	LastSpine record.Hash
	// Proof says which rows counted.
	Proof chainProof
}

type keyState struct {
	Version   int64
	SpineHash record.Hash
}

func newJournalState(task string) *journalState {
	return &journalState{Task: task, Keys: map[string]keyState{}}
}

func (j *journalState) clone() *journalState {
	c := *j
	c.Keys = maps.Clone(j.Keys)
	c.Progress = j.Progress.Clone()
	c.Proof = j.Proof.clone()
	return &c
}

// apply folds one row. A row out of chain is an error: bernstein never
// extends a journal it cannot account for.
func (j *journalState) apply(r record.Row, hash record.Hash) error {
	if r.TaskID != j.Task {
		return fmt.Errorf("journal of %s: row %d belongs to task %q", j.Task, r.Index, r.TaskID)
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
		j.Keys[a.Key] = keyState{Version: a.Version, SpineHash: a.SpineEntryHash}
		j.LastSpine = a.SpineEntryHash
	} else if err := j.Progress.Apply(r); err != nil {
		return fmt.Errorf("journal of %s, row %d: %w", j.Task, r.Index, err)
	}
	j.Rows++
	j.Head = hash
	return nil
}

// ledgerFold is a ledger folded over its counted rows.
type ledgerFold struct {
	State *ledger.State
	Proof chainProof
}

// exists reports whether the task's creation counted.
func (l *ledgerFold) exists() bool { return l != nil && l.State != nil && l.State.Phase != "" }

// foldCacheKey is what a cached fold depends on besides its head: the
// published keys (they tell unverifiable from tampered).
type foldCacheKey struct {
	head gitstore.Oid
	keys gitstore.Oid
}

// journalStateAt folds task's journal up to head (foldJournalAt) and checks
// it against the head this host's writer left on it (heads.go): a journal
// rolled back behind that head has a fault where it falls short.
func (s *Store) journalStateAt(env *proofEnv, task string, head gitstore.Oid) (*journalState, error) {
	st, err := s.foldJournalAt(env, task, head)
	if err != nil {
		return nil, err
	}
	f, err := s.heads.Rollback("journal", refs.Journal(task), head, st.Proof.Total-1)
	if err != nil || f == nil {
		return st, err
	}
	st = st.clone()
	st.Proof.Faults = append(st.Proof.Faults, *f)
	return st, nil
}

// ledgerStateAt is journalStateAt for task's ledger.
func (s *Store) ledgerStateAt(env *proofEnv, task string, head gitstore.Oid) (*ledgerFold, error) {
	fold, err := s.foldLedgerAt(env, task, head)
	if err != nil {
		return nil, err
	}
	f, err := s.heads.Rollback("ledger", refs.Ledger(task), head, fold.Proof.Total-1)
	if err != nil || f == nil {
		return fold, err
	}
	st := *fold.State
	fold = &ledgerFold{State: &st, Proof: fold.Proof.clone()}
	fold.Proof.Faults = append(fold.Proof.Faults, *f)
	return fold, nil
}

// foldJournalAt folds task's journal up to head, extending a cached fold
// (in memory, else the authenticated one on disk) when head descends from
// it.
func (s *Store) foldJournalAt(env *proofEnv, task string, head gitstore.Oid) (*journalState, error) {
	s.stateMu.Lock()
	cached, ok := s.journals[task]
	s.stateMu.Unlock()
	if ok && cached.key.keys != env.Version {
		ok = false
	}
	if ok && cached.key.head == head {
		return cached.state, nil
	}
	if !ok {
		if h, st, found := s.loadJournalCache(env, task); found {
			cached, ok = journalCache{foldCacheKey{h, env.Version}, st}, true
			if h == head {
				s.stateMu.Lock()
				s.journals[task] = cached
				s.stateMu.Unlock()
				return st, nil
			}
		}
	}
	stop := gitstore.ZeroOid
	if ok {
		stop = cached.key.head
	}
	check := proof.Check(env.Env)
	commits, met, err := chain.WalkBack(s.objects, head, stop, check)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", task, err)
	}
	st := newJournalState(task)
	if met && ok {
		st = cached.state.clone()
	} else if ok {
		// The cached head is not an ancestor: fold from the root.
		if commits, _, err = chain.WalkBack(s.objects, head, gitstore.ZeroOid, check); err != nil {
			return nil, fmt.Errorf("journal of %s: %w", task, err)
		}
	}
	st.Proof.extend("journal", env.Anchored(), commits, st.apply)
	s.stateMu.Lock()
	s.journals[task] = journalCache{foldCacheKey{head, env.Version}, st}
	s.stateMu.Unlock()
	if len(commits) >= cacheMinRows {
		s.saveJournalCache(env, task, head, st)
	}
	return st, nil
}

// foldLedgerAt folds task's ledger up to head.
func (s *Store) foldLedgerAt(env *proofEnv, task string, head gitstore.Oid) (*ledgerFold, error) {
	s.stateMu.Lock()
	cached, ok := s.ledgers[task]
	s.stateMu.Unlock()
	if ok && cached.key.keys != env.Version {
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
	commits, met, err := chain.WalkBack(s.objects, head, stop, check)
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: %w", task, err)
	}
	fold := &ledgerFold{State: &ledger.State{}}
	if met && ok {
		st := *cached.fold.State
		fold = &ledgerFold{State: &st, Proof: cached.fold.Proof.clone()}
	} else if ok {
		if commits, _, err = chain.WalkBack(s.objects, head, gitstore.ZeroOid, check); err != nil {
			return nil, fmt.Errorf("ledger of %s: %w", task, err)
		}
	}
	fold.Proof.extend("ledger", env.Anchored(), commits, func(row record.Row, h record.Hash) error {
		if row.TaskID != task {
			return fmt.Errorf("ledger of %s: row %d belongs to task %q", task, row.Index, row.TaskID)
		}
		return fold.State.ApplyHashed(row, h)
	})
	s.stateMu.Lock()
	s.ledgers[task] = ledgerCache{foldCacheKey{head, env.Version}, fold}
	s.stateMu.Unlock()
	return fold, nil
}
