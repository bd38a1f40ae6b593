package bernstein

import (
	"fmt"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// A feed is what a task's chains hold beyond what a reader has seen: the
// event stream of `bernstein serve` is made of feeds. The reader keeps the
// Heads of its last feed and asks for the next one; rows come with their
// proof and, for journal rows, the run position they were recorded at.

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

// FeedRow is one row of a feed.
type FeedRow struct {
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
	Rows []FeedRow
	// Heads is where the reader stands after this feed.
	Heads Heads
	// Progress is the task's progress at Heads.
	Progress progress.Wire
	// Reset is set when a chain no longer descends from the heads the
	// reader gave (it was rewritten or rolled back): Rows then hold the
	// chain from its first row, and the reader should start that task over.
	Reset bool
}

// TaskFeed returns what task's chains hold beyond since (the zero Heads:
// everything).
func (s *Store) TaskFeed(task string, since Heads) (*Feed, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	view, err := s.refs.Snapshot(taskScope(task)...)
	if err != nil {
		return nil, err
	}
	env, err := s.proofEnv(view)
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
		check := proof.Check(env.Env)
		commits, met, err := chain.WalkBack(s.objects, head, *c.head, check)
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
		for _, cc := range commits {
			row, err := record.ParseRow(cc.Record)
			if err != nil {
				return nil, fmt.Errorf("%s of %s, commit %s: %w", c.name, task, cc.ID, err)
			}
			fr := FeedRow{Chain: c.name, Index: *c.rows, Hash: record.Sum(cc.Record), Commit: cc.ID, Row: row,
				Proof: cc.Proof.State, Writer: cc.Proof.Writer}
			if c.name == "journal" {
				fr.At = f.Heads.Checkpoint
				if row.Kind == record.KindCheckpoint {
					var cp record.Checkpoint
					if row.DecodeData(&cp) == nil {
						f.Heads.Checkpoint = &RunPosition{JournalIndex: fr.Index, Commit: cp.Commit}
					}
				}
			}
			f.Rows = append(f.Rows, fr)
			*c.rows++
		}
		*c.head = head
	}
	if f.Heads.Ledger.IsZero() {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTask, task)
	}
	tf, err := s.foldTask(view, task)
	if err != nil {
		return nil, err
	}
	f.Progress = tf.wire
	return f, nil
}

// Snapshot takes one consistent view of the refs scope names (a name ending
// in '/' is a prefix).
func (s *Store) Snapshot(scope ...string) (*refs.Snapshot, error) {
	return s.refs.Snapshot(scope...)
}

// FeedRowAt reads the row at index of task's chain ("journal" or
// "ledger") as the chain holds it now, proven, with its run position.
func (s *Store) FeedRowAt(task, chainName string, index int64) (FeedRow, error) {
	ref := refs.Journal(task)
	if chainName == "ledger" {
		ref = refs.Ledger(task)
	} else if chainName != "journal" {
		return FeedRow{}, fmt.Errorf("no chain %q", chainName)
	}
	view, err := s.refs.Snapshot(taskScope(task)...)
	if err != nil {
		return FeedRow{}, err
	}
	env, err := s.proofEnv(view)
	if err != nil {
		return FeedRow{}, err
	}
	head, err := view.ReadOptional(ref)
	if err != nil {
		return FeedRow{}, err
	}
	commits, _, err := chain.WalkBack(s.objects, head, gitstore.ZeroOid, nil)
	if err != nil {
		return FeedRow{}, err
	}
	if index < 0 || index >= int64(len(commits)) {
		return FeedRow{}, fmt.Errorf("the %s of %s has no row %d", chainName, task, index)
	}
	var at *RunPosition
	for i := int64(0); i < index && chainName == "journal"; i++ {
		if row, err := record.ParseRow(commits[i].Record); err == nil && row.Kind == record.KindCheckpoint {
			var cp record.Checkpoint
			if row.DecodeData(&cp) == nil {
				at = &RunPosition{JournalIndex: i, Commit: cp.Commit}
			}
		}
	}
	cc, err := chain.Read(s.objects, commits[index].ID)
	if err != nil {
		return FeedRow{}, err
	}
	row, err := record.ParseRow(cc.Record)
	if err != nil {
		return FeedRow{}, err
	}
	p := verify.ProveCommit(env.Env, cc.Commit, cc.Payload)
	return FeedRow{Chain: chainName, Index: index, Hash: record.Sum(cc.Record), Commit: cc.ID, Row: row,
		Proof: p.State, Writer: p.Writer, At: at}, nil
}
