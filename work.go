package bernstein

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/project"
	"github.com/bernstein/bernstein/internal/runner"
	"github.com/bernstein/bernstein/internal/taskops"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// The rows that move progress are produced by real work on the
// orchestrator side (internal/taskops): a checkpoint names a real commit of
// the project's history (internal/project), a diff capture stores the patch
// between two of its trees, a gate or evidence run executes the command
// (internal/runner) and keeps its exit code and output. Nothing a worker
// says about itself gets in.

// MaxOutputBytes caps a stored command output or patch; longer ones are cut
// and marked truncated.
const MaxOutputBytes = taskops.MaxOutputBytes

// WorkResult is the receipt of a work row.
type WorkResult struct {
	Task         string         `json:"task"`
	Kind         string         `json:"kind"`
	JournalIndex int64          `json:"journal_index"`
	RowHash      record.Hash    `json:"row_hash"`
	Data         any            `json:"data"`
	Progress     *progress.Wire `json:"progress"`
	// Note says why a checkpoint or a diff earned nothing ("" when it
	// earned, and for other kinds).
	Note string `json:"note,omitempty"`
}

// ErrNoProducers refuses 'evidence run' without producer names on a task
// that declares none: there is nothing to run, and nothing was given wrong.
var ErrNoProducers = errors.New("no evidence producers")

// EndedError refuses work on a task that is completed, failed or abandoned.
// The task id is fine: the task's phase is the problem.
type EndedError = taskops.EndedError

// RunOptions control a gate or evidence command.
type RunOptions struct {
	Actor   string
	Dir     string        // working directory (default: the work tree, else the current directory)
	Timeout time.Duration // 0: none
	Stream  io.Writer     // also copy the output here as it comes (optional)
}

// validate refuses a negative timeout (0 is no limit).
func (o RunOptions) validate() error {
	if o.Timeout < 0 {
		return &artifact.InputError{Field: "timeout", Msg: fmt.Sprintf("%s is negative (0 means no limit)", o.Timeout)}
	}
	return nil
}

// submitWork runs a work row's operation and gives its receipt.
func (s *Store) submitWork(task, kind string, op func(t *txn.Tx) (*taskops.Work, error)) (*WorkResult, error) {
	res, err := s.w.Submit(func(t *txn.Tx) (any, error) { return op(t) })
	if err != nil {
		return nil, err
	}
	w := res.(*taskops.Work)
	return &WorkResult{Task: task, Kind: kind, JournalIndex: w.JournalIndex, RowHash: w.RowHash, Data: w.Data, Progress: &w.Progress, Note: w.Note}, nil
}

// Checkpoint records a checkpoint of task at a real commit (rev, default
// HEAD) of the project's history, with its tree and its first parent's
// tree. A commit of bernstein's own record is refused.
func (s *Store) Checkpoint(task, rev, actor string) (*WorkResult, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	if rev == "" {
		rev = "HEAD"
	}
	id, err := project.ResolveCommit(s.core, "commit", rev)
	if err != nil {
		return nil, err
	}
	pc, err := project.Read(s.core, "commit", rev, id)
	if err != nil {
		return nil, err
	}
	parent, err := project.ParentTree(s.core, "commit", pc)
	if err != nil {
		return nil, err
	}
	who, err := s.actor(actor)
	if err != nil {
		return nil, err
	}
	data := record.Checkpoint{Commit: pc.ID.String(), Tree: pc.Commit.Tree.String(), ParentTree: parent.String()}
	return s.submitWork(task, record.KindCheckpoint, func(t *txn.Tx) (*taskops.Work, error) {
		return taskops.Checkpoint(t, task, who, data)
	})
}

// CaptureDiff records the patch from base to head (default HEAD), two
// commits of the project's history, computed with fixed options
// (internal/project), and the trees it compares.
func (s *Store) CaptureDiff(task, base, head, actor string) (*WorkResult, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	if head == "" {
		head = "HEAD"
	}
	b, err := project.ResolveCommit(s.core, "base", base)
	if err != nil {
		return nil, err
	}
	h, err := project.ResolveCommit(s.core, "head", head)
	if err != nil {
		return nil, err
	}
	bc, err := project.Read(s.core, "base", base, b)
	if err != nil {
		return nil, err
	}
	hc, err := project.Read(s.core, "head", head, h)
	if err != nil {
		return nil, err
	}
	who, err := s.actor(actor)
	if err != nil {
		return nil, err
	}
	patch, err := project.Diff(s.core, bc, hc)
	if err != nil {
		return nil, err
	}
	return s.submitWork(task, record.KindDiffCaptured, func(t *txn.Tx) (*taskops.Work, error) {
		return taskops.Diff(t, task, who, patch)
	})
}

// runCommand runs a gate's or a producer's command for task in o.Dir, else
// the work tree, else the current directory (internal/runner), keeping its
// output up to the cap and one byte more (the rest is cut and marked).
func (s *Store) runCommand(task, shell string, argv []string, o RunOptions) runner.Result {
	dir := o.Dir
	if dir == "" {
		dir = s.core.WorkTree()
	}
	return runner.Run(shell, argv, runner.Options{Dir: dir, Env: []string{"BERNSTEIN_TASK=" + task}, Timeout: o.Timeout, Stream: o.Stream, Limit: MaxOutputBytes + 1})
}

// outputRow records a work row whose output is stored in the journal tree;
// data builds the row's data around the stored output's description.
func (s *Store) outputRow(task, kind, who, name, ext string, output []byte, data func(record.Output) any) (*WorkResult, error) {
	return s.submitWork(task, kind, func(t *txn.Tx) (*taskops.Work, error) {
		return taskops.OutputRow(t, task, kind, who, name, ext, output, data)
	})
}

// RunGate runs gate of task (its declared command, or argv when given) and
// records the attempt.
func (s *Store) RunGate(task, gate string, argv []string, o RunOptions) (*WorkResult, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := ledger.ValidateName("gate", gate); err != nil {
		return nil, &artifact.InputError{Field: "gate", Msg: err.Error()}
	}
	who, err := s.actor(o.Actor)
	if err != nil {
		return nil, err
	}
	st, err := s.folds.LedgerState(task)
	if err != nil {
		return nil, err
	}
	shell := ""
	if len(argv) == 0 {
		g, ok := st.Gate(gate)
		if !ok {
			return nil, &artifact.InputError{Field: "gate", Msg: fmt.Sprintf("%q is not declared for task %s: declare it at create (--gate NAME=CMD) or pass -- CMD", gate, task)}
		}
		shell = g.Command
	}
	command := shell
	if argv != nil {
		command = runner.ShellJoin(argv)
	}
	if ledger.Terminal(st.Phase) {
		return nil, &EndedError{Task: task, Phase: st.Phase}
	}
	run := s.runCommand(task, shell, argv, o)
	return s.outputRow(task, record.KindGateAttempt, who, "gate-"+gate, "log", run.Output, func(out record.Output) any {
		return record.GateAttempt{Gate: gate, Command: command, ExitCode: run.ExitCode, Passed: run.ExitCode == 0, Output: out}
	})
}

// RunEvidence runs the named declared producers of task (all when none are
// named) and records one evidence_result row each.
func (s *Store) RunEvidence(task string, producers []string, o RunOptions) ([]*WorkResult, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	who, err := s.actor(o.Actor)
	if err != nil {
		return nil, err
	}
	st, err := s.folds.LedgerState(task)
	if err != nil {
		return nil, err
	}
	if ledger.Terminal(st.Phase) {
		return nil, &EndedError{Task: task, Phase: st.Phase}
	}
	var todo []ledger.Producer
	if len(producers) == 0 {
		todo = st.Evidence
		if len(todo) == 0 {
			return nil, fmt.Errorf("task %s declares %w: declare them at create (--evidence NAME=CMD)", task, ErrNoProducers)
		}
	}
	for _, name := range producers {
		p, ok := st.Producer(name)
		if !ok {
			return nil, &artifact.InputError{Field: "producer", Msg: fmt.Sprintf("%q is not declared for task %s", name, task)}
		}
		todo = append(todo, p)
	}
	var out []*WorkResult
	for _, p := range todo {
		run := s.runCommand(task, p.Command, nil, o)
		res, err := s.outputRow(task, record.KindEvidenceResult, who, "evidence-"+p.Name, "log", run.Output, func(out record.Output) any {
			return record.EvidenceResult{Producer: p.Name, Kind: p.Kind, Command: p.Command, Required: p.Required,
				ExitCode: run.ExitCode, Passed: run.ExitCode == 0, Output: out}
		})
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}
