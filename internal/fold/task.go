package fold

import (
	"fmt"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Task is a task's ledger and journal folded from one consistent view, and
// its progress vector projected from the rows that count.
type Task struct {
	Ledger  *Ledger
	Journal *Journal
	Wire    progress.Wire
}

// Scope is the refs a task's folds read.
func Scope(task string) []string {
	return []string{refs.Ledger(task), refs.Journal(task), refs.Keys, refs.WritersPrefix, refs.Repository, refs.SpinePrefix, refs.ForksPrefix, refs.CheckpointsPrefix}
}

// Task folds task's chains as view has them; ledger.ErrUnknownTask when
// the task has no ledger.
func (f *Folder) Task(view refs.Source, task string) (*Task, error) {
	lh, err := view.ReadOptional(refs.Ledger(task))
	if err != nil {
		return nil, err
	}
	if lh.IsZero() {
		return nil, fmt.Errorf("%w: %s", ledger.ErrUnknownTask, task)
	}
	env, err := f.prover.Env(view)
	if err != nil {
		return nil, err
	}
	l, err := f.LedgerAt(env, task, lh)
	if err != nil {
		return nil, err
	}
	jh, err := view.ReadOptional(refs.Journal(task))
	if err != nil {
		return nil, err
	}
	j := NewJournal(task)
	if !jh.IsZero() {
		if j, err = f.JournalAt(env, task, jh); err != nil {
			return nil, err
		}
	}
	var st *ledger.State
	if l.Exists() {
		st = l.State
	}
	faults := append(append([]verify.RowFault{}, l.Proof.Faults...), j.Proof.Faults...)
	if st != nil && st.Sealed {
		// A task that reached a terminal transition had its journal sealed:
		// a journal cut back behind its seal lost rows, which no proof of
		// the rows it still holds can show.
		fault, err := f.sealFault(env, task, jh)
		if err != nil {
			return nil, err
		}
		if fault != nil {
			faults = append(faults, *fault)
		}
	}
	w := progress.Project(task, j.Progress, st).ToWire(j.Head, j.Rows, l.State.Head, l.State.Rows)
	w.Proof = progress.Proof{State: verify.ProofState(faults, l.Proof.Unverifiable || j.Proof.Unverifiable), RowsAtFault: faults}
	return &Task{Ledger: l, Journal: j, Wire: w}, nil
}

// sealFault compares the journal at head with the task's journal seals and
// returns the fault of a journal that does not match them (nil when it
// does, or is legitimately longer after a reopen).
func (f *Folder) sealFault(env *proof.Env, task string, head gitstore.Oid) (*verify.RowFault, error) {
	commits, _, err := chain.WalkBack(f.c.Objects, head, gitstore.ZeroOid, nil)
	if err != nil {
		return nil, chainErr(refs.Journal(task), head, err)
	}
	hashes := make([]record.Hash, len(commits))
	for i, cc := range commits {
		hashes[i] = record.Sum(cc.Record)
	}
	v, err := proof.Verifier(env.Env) // one spine index for every task of a read view
	if err != nil {
		return nil, err
	}
	if id, reason := v.JournalIdentity(task, hashes); id == verify.IdentityMismatched {
		return &verify.RowFault{Chain: "journal", Index: int64(len(hashes)), State: verify.Tampered,
			Reason: "journal identity mismatched: " + reason}, nil
	}
	return nil, nil
}

// LedgerState reads the current ledger state of task (its ref as it is
// now): the rows that count. A ledger none of whose rows counts is
// unproven, not unknown.
func (f *Folder) LedgerState(task string) (*ledger.State, error) {
	snap, err := f.c.Refs.Snapshot(refs.Ledger(task)) // an archived ledger too
	if err != nil {
		return nil, err
	}
	head, err := snap.ReadOptional(refs.Ledger(task))
	if err != nil {
		return nil, err
	}
	if head.IsZero() {
		return nil, fmt.Errorf("%w: %s", ledger.ErrUnknownTask, task)
	}
	env, err := f.prover.Env(f.c.Refs)
	if err != nil {
		return nil, err
	}
	fold, err := f.LedgerAt(env, task, head)
	if err != nil {
		return nil, err
	}
	if !fold.Exists() {
		return nil, fold.Proof.Unproven("ledger", task)
	}
	return fold.State, nil
}
