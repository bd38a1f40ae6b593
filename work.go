package bernstein

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/runner"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// The rows that move progress are produced here, by real work on the
// orchestrator side: a checkpoint resolves a real commit, a diff capture
// computes the patch, a gate or evidence run executes the command and keeps
// its exit code and output. Nothing a worker says about itself gets in.

// MaxOutputBytes caps a stored command output or patch; longer ones are cut
// and marked truncated.
const MaxOutputBytes = 1 << 20

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

// resolveCommit turns a revision into the id of a real commit.
func (s *Store) resolveCommit(field, rev string) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\x00\n") {
		return "", &artifact.InputError{Field: field, Msg: fmt.Sprintf("%q is not a revision", rev)}
	}
	if id, ok := s.resolvePlainCommit(rev); ok {
		return id, nil
	}
	cmd := exec.Command("git", "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	cmd.Env = append(os.Environ(), "GIT_DIR="+s.ownDir)
	out, err := cmd.Output()
	if err != nil {
		return "", &artifact.InputError{Field: field, Msg: fmt.Sprintf("%q does not name a commit of this repository", rev)}
	}
	return strings.TrimSpace(string(out)), nil
}

// resolvePlainCommit resolves the two commonest revisions, HEAD and a full
// commit id, without starting git; ok is false for anything else (git then
// applies its own rules).
func (s *Store) resolvePlainCommit(rev string) (string, bool) {
	var id gitstore.Oid
	switch {
	case rev == "HEAD":
		b, err := os.ReadFile(filepath.Join(s.ownDir, "HEAD"))
		if err != nil {
			return "", false
		}
		head := strings.TrimSpace(string(b))
		if ref, sym := strings.CutPrefix(head, "ref: "); sym {
			if !strings.HasPrefix(ref, "refs/heads/") {
				return "", false
			}
			if id, err = s.refs.Read(ref); err != nil {
				return "", false
			}
		} else if id, err = gitstore.ParseOid(head); err != nil {
			return "", false
		}
	case len(rev) == 40:
		var err error
		if id, err = gitstore.ParseOid(rev); err != nil || strings.ToLower(rev) != rev {
			return "", false
		}
	default:
		return "", false
	}
	if t, _, err := s.objects.Read(id); err != nil || t != gitstore.TypeCommit {
		return "", false
	}
	return id.String(), true
}

// workRow appends one work row (with its output blobs) to task's journal and
// mirrors it into the audit chain. The task must exist and not be ended.
func (t *tx) workRow(task, kind, actor string, data any, files map[string][]byte) (*WorkResult, error) {
	lc, err := t.LedgerChain(task)
	if err != nil {
		return nil, err
	}
	if !lc.LedgerProof.Whole() {
		return nil, lc.LedgerProof.Unproven("ledger", task)
	}
	if lc.Ledger == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTask, task)
	}
	if ledger.Terminal(lc.Ledger.Phase) {
		return nil, endedError(task, lc.Ledger.Phase)
	}
	index, prev, err := t.NextJournalRow(task)
	if err != nil {
		return nil, err
	}
	row, err := record.NewRow(kind, task, index, prev, actor, data)
	if err != nil {
		return nil, err
	}
	jc, err := t.AppendJournal(task, row, fmt.Sprintf("%s #%d", kind, index), files)
	if err != nil {
		return nil, err
	}
	h := row.Hash()
	if err := t.AppendAudit(kind, actor, task, string(h), row.Data); err != nil {
		return nil, err
	}
	v := progress.Project(task, jc.Journal.Progress, lc.Ledger)
	w := v.ToWire(jc.Journal.Head, jc.Journal.Rows, lc.Ledger.Head, lc.Ledger.Rows)
	return &WorkResult{Task: task, Kind: kind, JournalIndex: index, RowHash: h, Data: data, Progress: &w}, nil
}

// outputPath names a captured output in the journal tree.
func outputPath(index int64, what, ext string) string {
	return fmt.Sprintf("outputs/%06d-%s.%s", index, what, ext)
}

// newOutput describes data stored at path, cut to the cap.
func newOutput(path string, data []byte) (record.Output, []byte) {
	truncated := len(data) > MaxOutputBytes
	if truncated {
		data = data[:MaxOutputBytes]
	}
	return record.Output{Path: path, Blob: gitBlobID(data), Hash: record.Sum(data), Size: int64(len(data)), Truncated: truncated}, data
}

// Checkpoint records a checkpoint of task at a real commit (rev, default
// HEAD) of the project's history, with its tree and its first parent's
// tree. A commit of bernstein's own record is refused (readProjectCommit).
func (s *Store) Checkpoint(task, rev, actor string) (*WorkResult, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	if rev == "" {
		rev = "HEAD"
	}
	commit, err := s.resolveCommit("commit", rev)
	if err != nil {
		return nil, err
	}
	pc, err := s.readProjectCommit("commit", rev, commit)
	if err != nil {
		return nil, err
	}
	parent, err := s.parentTree("commit", rev, pc)
	if err != nil {
		return nil, err
	}
	who, err := s.actor(actor)
	if err != nil {
		return nil, err
	}
	data := record.Checkpoint{Commit: commit, Tree: pc.commit.Tree.String(), ParentTree: parent.String()}
	return s.submitWork(func(t *tx) (*WorkResult, error) {
		note, err := t.earnNote(task, func(j *progress.Journal) string {
			_, why := j.Checkpoint(data.Tree, data.ParentTree)
			return why
		})
		if err != nil {
			return nil, err
		}
		res, err := t.workRow(task, record.KindCheckpoint, who, data, nil)
		if res != nil {
			res.Note = note
		}
		return res, err
	})
}

func (s *Store) submitWork(fn func(t *tx) (*WorkResult, error)) (*WorkResult, error) {
	res, err := s.submit(func(t *tx) (any, error) { return fn(t) })
	if err != nil {
		return nil, err
	}
	return res.(*WorkResult), nil
}

// CaptureDiff records the patch from base to head (default HEAD), two
// commits of the project's history, computed with fixed options
// (fixedDiff), and the trees it compares.
func (s *Store) CaptureDiff(task, base, head, actor string) (*WorkResult, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	if head == "" {
		head = "HEAD"
	}
	b, err := s.resolveCommit("base", base)
	if err != nil {
		return nil, err
	}
	h, err := s.resolveCommit("head", head)
	if err != nil {
		return nil, err
	}
	bc, err := s.readProjectCommit("base", base, b)
	if err != nil {
		return nil, err
	}
	hc, err := s.readProjectCommit("head", head, h)
	if err != nil {
		return nil, err
	}
	who, err := s.actor(actor)
	if err != nil {
		return nil, err
	}
	var patch []byte
	var st diffStat
	if bc.commit.Tree != hc.commit.Tree {
		if patch, st, err = fixedDiff(filepath.Join(s.gitDir, "objects"), bc.commit.Tree, hc.commit.Tree); err != nil {
			return nil, err
		}
	}
	return s.submitWork(func(t *tx) (*WorkResult, error) {
		index, _, err := t.NextJournalRow(task)
		if err != nil {
			return nil, err
		}
		out, stored := newOutput(outputPath(index, "diff", "patch"), patch)
		data := record.DiffCaptured{Base: b, Head: h, BaseTree: bc.commit.Tree.String(), HeadTree: hc.commit.Tree.String(),
			Patch: out, Files: st.files, Added: st.added, Removed: st.removed}
		note, err := t.earnNote(task, func(j *progress.Journal) string {
			_, why := j.Diff(data.BaseTree, data.HeadTree, out.Size, out.Hash)
			return why
		})
		if err != nil {
			return nil, err
		}
		res, err := t.workRow(task, record.KindDiffCaptured, who, data, map[string][]byte{out.Path: stored})
		if res != nil {
			res.Note = note
		}
		return res, err
	})
}

// outputRow records a work row whose output (a patch, a command's output)
// is stored in the journal tree at outputs/<index>-<name>.<ext>; data builds
// the row's data around the stored output's description.
func (s *Store) outputRow(task, kind, who, name, ext string, output []byte, data func(record.Output) any) (*WorkResult, error) {
	return s.submitWork(func(t *tx) (*WorkResult, error) {
		index, _, err := t.NextJournalRow(task)
		if err != nil {
			return nil, err
		}
		out, stored := newOutput(outputPath(index, name, ext), output)
		return t.workRow(task, kind, who, data(out), map[string][]byte{out.Path: stored})
	})
}

// ErrNoProducers refuses 'evidence run' without producer names on a task
// that declares none: there is nothing to run, and nothing was given wrong.
var ErrNoProducers = errors.New("no evidence producers")

// EndedError refuses work on a task that is completed, failed or abandoned.
// The task id is fine: the task's phase is the problem.
type EndedError struct {
	Task, Phase string
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("task %s is %s: reopen it before recording work", e.Task, e.Phase)
}

// endedError refuses work on a task that is completed, failed or abandoned.
func endedError(task, phase string) error {
	return &EndedError{Task: task, Phase: phase}
}

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

// runCommand runs a gate's or a producer's command for task in o.Dir, else
// the work tree, else the current directory (internal/command), keeping
// its output up to the cap and one byte more (the rest is cut and marked).
func (s *Store) runCommand(task, shell string, argv []string, o RunOptions) runner.Result {
	dir := o.Dir
	if dir == "" {
		dir = s.core.WorkTree()
	}
	return runner.Run(shell, argv, runner.Options{Dir: dir, Env: []string{"BERNSTEIN_TASK=" + task}, Timeout: o.Timeout, Stream: o.Stream, Limit: MaxOutputBytes + 1})
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
	st, err := s.ledgerState(task)
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
		return nil, endedError(task, st.Phase)
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
	st, err := s.ledgerState(task)
	if err != nil {
		return nil, err
	}
	if ledger.Terminal(st.Phase) {
		return nil, endedError(task, st.Phase)
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
