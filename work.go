package bernstein

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
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
	lc, err := t.ledgerChain(task)
	if err != nil {
		return nil, err
	}
	if !lc.ledgerProof.whole() {
		return nil, lc.ledgerProof.unproven("ledger", task)
	}
	if lc.ledger == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTask, task)
	}
	if ledger.Terminal(lc.ledger.Phase) {
		return nil, endedError(task, lc.ledger.Phase)
	}
	index, prev, err := t.nextJournalRow(task)
	if err != nil {
		return nil, err
	}
	row, err := record.NewRow(kind, task, index, prev, actor, data)
	if err != nil {
		return nil, err
	}
	jc, err := t.appendJournal(task, row, fmt.Sprintf("%s #%d", kind, index), files)
	if err != nil {
		return nil, err
	}
	h := row.Hash()
	if err := t.appendAudit(kind, actor, task, string(h), row.Data); err != nil {
		return nil, err
	}
	v := progress.Project(task, jc.journal.Progress, lc.ledger)
	w := v.ToWire(jc.journal.Head, jc.journal.Rows, lc.ledger.Head, lc.ledger.Rows)
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
		index, _, err := t.nextJournalRow(task)
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
		index, _, err := t.nextJournalRow(task)
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

// commandRun is the outcome of one command.
type commandRun struct {
	exitCode int64
	output   []byte
}

// runCommand runs a shell command (or argv directly), capturing its combined
// output up to the cap (the rest is drained and counted as truncated).
func (s *Store) runCommand(task string, shell string, argv []string, o RunOptions) (commandRun, error) {
	ctx := context.Background()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	var cmd *exec.Cmd
	if argv != nil {
		cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	} else {
		cmd = exec.CommandContext(ctx, "sh", "-c", shell)
	}
	cmd.Dir = o.Dir
	if cmd.Dir == "" {
		cmd.Dir = s.workDir()
	}
	cmd.Env = append(os.Environ(), "BERNSTEIN_TASK="+task)
	cmd.Stdin = nil
	buf := &capped{limit: MaxOutputBytes + 1}
	var w io.Writer = buf
	if o.Stream != nil {
		w = io.MultiWriter(buf, o.Stream)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	run := commandRun{output: buf.b}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		run.exitCode = int64(ee.ExitCode())
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			run.exitCode = 128 + int64(st.Signal())
		}
	default:
		// The command could not start: that is a failed attempt, with why.
		run.exitCode = 127
		run.output = append(run.output, []byte(err.Error()+"\n")...)
	}
	if ctx.Err() == context.DeadlineExceeded {
		run.output = append(run.output, []byte(fmt.Sprintf("\nbernstein: killed after the %s timeout\n", o.Timeout))...)
	}
	return run, nil
}

// capped keeps the first limit bytes written and discards the rest.
type capped struct {
	b     []byte
	limit int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.limit - len(c.b); room > 0 {
		if len(p) > room {
			c.b = append(c.b, p[:room]...)
		} else {
			c.b = append(c.b, p...)
		}
	}
	return len(p), nil
}

// workDir is where commands run: the work tree, else the current directory.
func (s *Store) workDir() string {
	if s.bare {
		return ""
	}
	top, err := exec.Command("git", "-C", s.dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(top))
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
		command = shellJoin(argv)
	}
	if ledger.Terminal(st.Phase) {
		return nil, endedError(task, st.Phase)
	}
	run, err := s.runCommand(task, shell, argv, o)
	if err != nil {
		return nil, err
	}
	return s.outputRow(task, record.KindGateAttempt, who, "gate-"+gate, "log", run.output, func(out record.Output) any {
		return record.GateAttempt{Gate: gate, Command: command, ExitCode: run.exitCode, Passed: run.exitCode == 0, Output: out}
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
		run, err := s.runCommand(task, p.Command, nil, o)
		if err != nil {
			return out, err
		}
		res, err := s.outputRow(task, record.KindEvidenceResult, who, "evidence-"+p.Name, "log", run.output, func(out record.Output) any {
			return record.EvidenceResult{Producer: p.Name, Kind: p.Kind, Command: p.Command, Required: p.Required,
				ExitCode: run.exitCode, Passed: run.exitCode == 0, Output: out}
		})
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

// shellJoin quotes argv for display as one command line.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// ledgerState reads the current ledger state of task: the rows that count.
// A ledger none of whose rows counts is unproven, not unknown.
func (s *Store) ledgerState(task string) (*ledger.State, error) {
	head, err := s.refs.ReadOptional(refs.Ledger(task))
	if err != nil {
		return nil, err
	}
	if head.IsZero() {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTask, task)
	}
	env, err := s.proofEnv(s.refs)
	if err != nil {
		return nil, err
	}
	fold, err := s.ledgerStateAt(env, task, head)
	if err != nil {
		return nil, err
	}
	if !fold.exists() {
		return nil, fold.Proof.unproven("ledger", task)
	}
	return fold.State, nil
}

// taskFold is a task's ledger and journal folded from one consistent view.
type taskFold struct {
	ledger  *ledgerFold
	journal *journalState
	wire    progress.Wire
}

// current reads task's ledger and journal folds from one consistent view of
// its refs and projects its progress vector from the rows that count.
func (s *Store) current(task string) (*taskFold, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	view, err := s.refs.Snapshot(taskScope(task)...)
	if err != nil {
		return nil, err
	}
	return s.foldTask(view, task)
}

// taskScope is the refs a task's folds read.
func taskScope(task string) []string {
	return []string{refs.Ledger(task), refs.Journal(task), refs.Keys, refs.WritersPrefix, refs.SpinePrefix}
}

// foldTask folds task's chains as view has them.
func (s *Store) foldTask(view refs.Source, task string) (*taskFold, error) {
	lh, err := view.ReadOptional(refs.Ledger(task))
	if err != nil {
		return nil, err
	}
	if lh.IsZero() {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTask, task)
	}
	env, err := s.proofEnv(view)
	if err != nil {
		return nil, err
	}
	l, err := s.ledgerStateAt(env, task, lh)
	if err != nil {
		return nil, err
	}
	jh, err := view.ReadOptional(refs.Journal(task))
	if err != nil {
		return nil, err
	}
	j := newJournalState(task)
	if !jh.IsZero() {
		if j, err = s.journalStateAt(env, task, jh); err != nil {
			return nil, err
		}
	}
	var st *ledger.State
	if l.exists() {
		st = l.State
	}
	faults := append(append([]verify.RowFault{}, l.Proof.Faults...), j.Proof.Faults...)
	if st != nil && st.Sealed {
		// A task that reached a terminal transition had its journal sealed:
		// a journal cut back behind its seal lost rows, which no proof of
		// the rows it still holds can show.
		f, err := s.sealFault(env, task, jh)
		if err != nil {
			return nil, err
		}
		if f != nil {
			faults = append(faults, *f)
		}
	}
	w := progress.Project(task, j.Progress, st).ToWire(j.Head, j.Rows, l.State.Head, l.State.Rows)
	w.Proof = progress.Proof{State: verify.ProofState(faults, l.Proof.Unverifiable || j.Proof.Unverifiable), RowsAtFault: faults}
	return &taskFold{ledger: l, journal: j, wire: w}, nil
}

// sealFault compares the journal at head with the task's journal seals and
// returns the fault of a journal that does not match them (nil when it
// does, or is legitimately longer after a reopen).
func (s *Store) sealFault(env *proofEnv, task string, head gitstore.Oid) (*verify.RowFault, error) {
	commits, _, err := chain.WalkBack(s.objects, head, gitstore.ZeroOid, nil)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", task, err)
	}
	hashes := make([]record.Hash, len(commits))
	for i, cc := range commits {
		hashes[i] = record.Sum(cc.Record)
	}
	v, err := verify.NewVerifier(env.Env)
	if err != nil {
		return nil, err
	}
	if id, reason := v.JournalIdentity(task, hashes); id == verify.IdentityMismatched {
		return &verify.RowFault{Chain: "journal", Index: int64(len(hashes)), State: verify.Tampered,
			Reason: "journal identity mismatched: " + reason}, nil
	}
	return nil, nil
}

// Progress projects task's progress vector from its journal and ledger.
func (s *Store) Progress(task string) (*progress.Wire, error) {
	f, err := s.current(task)
	if err != nil {
		return nil, err
	}
	return &f.wire, nil
}
