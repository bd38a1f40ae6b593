package taskops

import (
	"fmt"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/project"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// The rows that move progress are produced by real work on the
// orchestrator side: a checkpoint names a real commit of the project, a
// diff capture stores the patch between two of its trees, a gate or
// evidence run keeps its command's exit code and output. Nothing a worker
// says about itself gets in.

// MaxOutputBytes caps a stored command output or patch; longer ones are cut
// and marked truncated.
const MaxOutputBytes = 1 << 20

// EndedError refuses work on a task that is completed, failed or abandoned.
// The task id is fine: the task's phase is the problem.
type EndedError struct {
	Task, Phase string
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("task %s is %s: reopen it before recording work", e.Task, e.Phase)
}

// Work is what a work row wrote: its position and hash, and the task's
// progress with it.
type Work struct {
	JournalIndex int64
	RowHash      record.Hash
	Data         any
	Progress     progress.Wire
	// Note says why a checkpoint or a diff earned nothing ("" when it
	// earned, and for other kinds).
	Note string
}

// row appends one work row (with its output blobs) to task's journal and
// mirrors it into the audit chain. The task must exist and not be ended.
func row(t *txn.Tx, task, kind, actor string, data any, files map[string][]byte) (*Work, error) {
	lc, err := t.LedgerChain(task)
	if err != nil {
		return nil, err
	}
	if !lc.LedgerProof.Whole() {
		return nil, lc.LedgerProof.Unproven("ledger", task)
	}
	if lc.Ledger == nil {
		return nil, fmt.Errorf("%w: %s", ledger.ErrUnknownTask, task)
	}
	if ledger.Terminal(lc.Ledger.Phase) {
		return nil, &EndedError{Task: task, Phase: lc.Ledger.Phase}
	}
	index, prev, err := t.NextJournalRow(task)
	if err != nil {
		return nil, err
	}
	r, err := record.NewRow(kind, task, index, prev, actor, data)
	if err != nil {
		return nil, err
	}
	jc, err := t.AppendJournal(task, r, fmt.Sprintf("%s #%d", kind, index), files)
	if err != nil {
		return nil, err
	}
	h := r.Hash()
	if err := t.AppendAudit(kind, actor, task, string(h), r.Data); err != nil {
		return nil, err
	}
	v := progress.Project(task, jc.Journal.Progress, lc.Ledger)
	return &Work{JournalIndex: index, RowHash: h, Data: data, Progress: v.ToWire(jc.Journal.Head, jc.Journal.Rows, lc.Ledger.Head, lc.Ledger.Rows)}, nil
}

// earnNote says why a work row about to be appended to task earns nothing
// ("" when it earns), from the journal fold the row extends: the same rule
// the fold applies (progress.Journal).
func earnNote(t *txn.Tx, task string, why func(j *progress.Journal) string) (string, error) {
	c, err := t.JournalChain(task)
	if err != nil {
		return "", err
	}
	if w := why(&c.Journal.Progress); w != "" {
		return "recorded, earns nothing: " + w, nil
	}
	return "", nil
}

// withNote is a work row appended after its earn note was taken.
func withNote(t *txn.Tx, task, kind, actor string, data any, files map[string][]byte, note string) (*Work, error) {
	w, err := row(t, task, kind, actor, data, files)
	if w != nil {
		w.Note = note
	}
	return w, err
}

// newOutput describes the captured output data of the row at index (its
// name and extension in the journal tree at outputs/<index>-<name>.<ext>),
// cut to the cap, and returns what is stored.
func newOutput(index int64, name, ext string, data []byte) (record.Output, []byte) {
	truncated := len(data) > MaxOutputBytes
	if truncated {
		data = data[:MaxOutputBytes]
	}
	path := fmt.Sprintf("outputs/%06d-%s.%s", index, name, ext)
	return record.Output{Path: path, Blob: gitstore.HashObject(gitstore.TypeBlob, data).String(), Hash: record.Sum(data), Size: int64(len(data)), Truncated: truncated}, data
}

// Checkpoint records a checkpoint of task at a commit of the project, with
// its tree and its first parent's tree (data).
func Checkpoint(t *txn.Tx, task, actor string, data record.Checkpoint) (*Work, error) {
	note, err := earnNote(t, task, func(j *progress.Journal) string {
		_, why := j.Checkpoint(data.Tree, data.ParentTree)
		return why
	})
	if err != nil {
		return nil, err
	}
	w, err := withNote(t, task, record.KindCheckpoint, actor, data, nil, note)
	if err != nil {
		return w, err
	}
	return w, anchor(t, task, w.RowHash, data.Commit)
}

// anchor keeps the project commits a work row names reachable from the
// writer's anchors ref (txn.Tx.Anchor).
func anchor(t *txn.Tx, task string, row record.Hash, commits ...string) error {
	var ids []gitstore.Oid
	for _, c := range commits {
		id, err := gitstore.ParseOid(c)
		if err != nil {
			return fmt.Errorf("anchor %s: %w", c, err)
		}
		ids = append(ids, id)
	}
	return t.Anchor(task, row, ids...)
}

// Diff records the patch p between two commits of the project, and the
// trees it compares.
func Diff(t *txn.Tx, task, actor string, p *project.Patch) (*Work, error) {
	index, _, err := t.NextJournalRow(task)
	if err != nil {
		return nil, err
	}
	out, stored := newOutput(index, "diff", "patch", p.Bytes)
	data := record.DiffCaptured{Base: p.Base.ID.String(), Head: p.Head.ID.String(), BaseTree: p.Base.Commit.Tree.String(), HeadTree: p.Head.Commit.Tree.String(),
		Patch: out, Files: p.Files, Added: p.Added, Removed: p.Removed}
	note, err := earnNote(t, task, func(j *progress.Journal) string {
		_, why := j.Diff(data.BaseTree, data.HeadTree, out.Size, out.Hash)
		return why
	})
	if err != nil {
		return nil, err
	}
	w, err := withNote(t, task, record.KindDiffCaptured, actor, data, map[string][]byte{out.Path: stored}, note)
	if err != nil {
		return w, err
	}
	return w, anchor(t, task, w.RowHash, data.Base, data.Head)
}

// OutputRow records a work row whose output (a command's) is stored in the
// journal tree (newOutput); data builds the row's data around the stored
// output's description.
func OutputRow(t *txn.Tx, task, kind, actor, name, ext string, output []byte, data func(record.Output) any) (*Work, error) {
	index, _, err := t.NextJournalRow(task)
	if err != nil {
		return nil, err
	}
	out, stored := newOutput(index, name, ext, output)
	return row(t, task, kind, actor, data(out), map[string][]byte{out.Path: stored})
}
