// Package feed reads what a task's chains hold beyond what a reader has
// seen: the event stream of `bernstein serve` is made of feeds. The reader
// keeps the Heads of its last feed and asks for the next one; rows come
// with their proof and, for journal rows, the run position they were
// recorded at.
package feed

import (
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Heads is where a reader of a task's chains stands.
type Heads struct {
	Journal     gitstore.Oid `json:"journal"`
	JournalRows int64        `json:"journal_rows"`
	Ledger      gitstore.Oid `json:"ledger"`
	LedgerRows  int64        `json:"ledger_rows"`
	// Checkpoint is the latest checkpoint row among the journal rows seen.
	Checkpoint *RunPosition `json:"checkpoint,omitempty"`
}

// RunPosition is a point of a task's run: a checkpoint row and the commit
// it recorded. A journal row was recorded at the checkpoint before it.
type RunPosition struct {
	JournalIndex int64  `json:"journal_index"`
	Commit       string `json:"commit"`
}

// Row is one row of a feed.
type Row struct {
	Chain  string       `json:"chain"` // journal or ledger
	Index  int64        `json:"index"`
	Hash   record.Hash  `json:"row_hash"`
	Commit gitstore.Oid `json:"commit"`
	Row    record.Row   `json:"row"`
	// Proof is the row commit's proof state (verified, unverifiable,
	// tampered) and Writer the writer its commit names.
	Proof  string `json:"proof"`
	Writer string `json:"writer"`
	// At is, for a journal row, the checkpoint recorded before it (nil
	// before the first).
	At *RunPosition `json:"at"`
}

// Feed is a task's rows beyond some Heads, read from one consistent view.
type Feed struct {
	Task string
	// Rows are the new ledger rows, then the new journal rows, each chain
	// in order.
	Rows []Row
	// Heads is where the reader stands after this feed.
	Heads Heads
	// Progress is the task's progress at Heads.
	Progress progress.Wire
	// Reset is set when a chain no longer descends from the heads the
	// reader gave (it was rewritten or rolled back): Rows then hold the
	// chain from its first row, and the reader should start that task over.
	Reset bool
}

// Reader reads feeds of one repository.
type Reader struct {
	c      *core.Repo
	prover *proof.Prover
}

// NewReader is the feed reader of repository c.
func NewReader(c *core.Repo, p *proof.Prover) *Reader { return &Reader{c: c, prover: p} }

// checkpointAt is the run position a journal row sets, if it is a
// checkpoint row.
func checkpointAt(index int64, row record.Row) (*RunPosition, bool) {
	if row.Kind != record.KindCheckpoint {
		return nil, false
	}
	var cp record.Checkpoint
	if row.DecodeData(&cp) != nil {
		return nil, false
	}
	return &RunPosition{JournalIndex: index, Commit: cp.Commit}, true
}

// rows turns proven commits of task's chain (name) into rows numbered from
// index; a journal row carries the checkpoint before it, at, and the
// checkpoint after the last row is returned.
func rows(name, task string, commits []chain.Commit, index int64, at *RunPosition) ([]Row, *RunPosition, error) {
	out := make([]Row, 0, len(commits))
	for _, cc := range commits {
		row, err := record.ParseRow(cc.Record)
		if err != nil {
			return nil, nil, fmt.Errorf("%s of %s, commit %s: %w", name, task, cc.ID, err)
		}
		r := Row{Chain: name, Index: index, Hash: record.Sum(cc.Record), Commit: cc.ID, Row: row,
			Proof: cc.Proof.State, Writer: cc.Proof.Writer}
		if name == "journal" {
			r.At = at
			if p, ok := checkpointAt(index, row); ok {
				at = p
			}
		}
		out = append(out, r)
		index++
	}
	return out, at, nil
}

// Since returns what task's chains in view hold beyond since (the zero
// Heads: everything); ledger.ErrUnknownTask when task has no ledger. The
// feed's Progress is left to the caller, who folds the task.
func (r *Reader) Since(view refs.Source, task string, since Heads) (*Feed, error) {
	env, err := r.prover.Env(view)
	if err != nil {
		return nil, err
	}
	f := &Feed{Task: task, Heads: since}
	for _, c := range []struct {
		name string
		ref  string
		head *gitstore.Oid
		rows *int64
	}{
		{"ledger", refs.Ledger(task), &f.Heads.Ledger, &f.Heads.LedgerRows},
		{"journal", refs.Journal(task), &f.Heads.Journal, &f.Heads.JournalRows},
	} {
		head, err := view.ReadOptional(c.ref)
		if err != nil {
			return nil, err
		}
		if head == *c.head {
			continue
		}
		commits, met, err := chain.WalkBack(r.c.Objects, head, *c.head, proof.Check(env.Env))
		if errors.Is(err, chain.ErrUnreadable) {
			return nil, refs.Unreadable(c.ref, head, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s of %s: %w", c.name, task, err)
		}
		if !met && !c.head.IsZero() {
			// Not a descendant of what the reader saw: start over.
			f.Reset = true
			*c.rows = 0
			if c.name == "journal" {
				f.Heads.Checkpoint = nil
			}
		}
		rs, at, err := rows(c.name, task, commits, *c.rows, f.Heads.Checkpoint)
		if err != nil {
			return nil, err
		}
		if c.name == "journal" {
			f.Heads.Checkpoint = at
		}
		f.Rows = append(f.Rows, rs...)
		*c.rows += int64(len(rs))
		*c.head = head
	}
	if f.Heads.Ledger.IsZero() {
		return nil, fmt.Errorf("%w: %s", ledger.ErrUnknownTask, task)
	}
	return f, nil
}

// Journal returns every row of task's journal in view, oldest first, each
// with its row hash, commit, proof and run position;
// ledger.ErrUnknownTask when task has no ledger.
func (r *Reader) Journal(view refs.Source, task string) ([]Row, error) {
	lh, err := view.ReadOptional(refs.Ledger(task))
	if err != nil {
		return nil, err
	}
	if lh.IsZero() {
		return nil, fmt.Errorf("%w: %s", ledger.ErrUnknownTask, task)
	}
	head, err := view.ReadOptional(refs.Journal(task))
	if err != nil {
		return nil, err
	}
	env, err := r.prover.Env(view)
	if err != nil {
		return nil, err
	}
	commits, _, err := chain.WalkBack(r.c.Objects, head, gitstore.ZeroOid, proof.Check(env.Env))
	if errors.Is(err, chain.ErrUnreadable) {
		return nil, refs.Unreadable(refs.Journal(task), head, err)
	}
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", task, err)
	}
	out, _, err := rows("journal", task, commits, 0, nil)
	return out, err
}

// RowAt reads the row at index of task's chain ("journal" or "ledger") as
// view holds it, proven, with its run position.
func (r *Reader) RowAt(view refs.Source, task, chainName string, index int64) (Row, error) {
	ref := refs.Journal(task)
	if chainName == "ledger" {
		ref = refs.Ledger(task)
	} else if chainName != "journal" {
		return Row{}, fmt.Errorf("no chain %q", chainName)
	}
	env, err := r.prover.Env(view)
	if err != nil {
		return Row{}, err
	}
	head, err := view.ReadOptional(ref)
	if err != nil {
		return Row{}, err
	}
	commits, _, err := chain.WalkBack(r.c.Objects, head, gitstore.ZeroOid, nil)
	if errors.Is(err, chain.ErrUnreadable) {
		return Row{}, refs.Unreadable(ref, head, err)
	}
	if err != nil {
		return Row{}, err
	}
	if index < 0 || index >= int64(len(commits)) {
		return Row{}, fmt.Errorf("the %s of %s has no row %d", chainName, task, index)
	}
	var at *RunPosition
	for i := int64(0); i < index && chainName == "journal"; i++ {
		if row, err := record.ParseRow(commits[i].Record); err == nil {
			if p, ok := checkpointAt(i, row); ok {
				at = p
			}
		}
	}
	cc, err := chain.Read(r.c.Objects, commits[index].ID)
	if err != nil {
		return Row{}, err
	}
	row, err := record.ParseRow(cc.Record)
	if err != nil {
		return Row{}, err
	}
	p := verify.ProveCommit(env.Env, cc.Commit, cc.Payload)
	return Row{Chain: chainName, Index: index, Hash: record.Sum(cc.Record), Commit: cc.ID, Row: row,
		Proof: p.State, Writer: p.Writer, At: at}, nil
}
