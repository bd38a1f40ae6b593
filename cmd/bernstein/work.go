package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// The commands that record real work: each appends a journal row that moves
// the task's progress vector. Nothing else can move it. And 'task progress',
// which prints it.

// count is n and a noun, plural unless n is 1: "1 file", "2 files".
func count[N int | int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func printWork(io *IO, res *bernstein.WorkResult, what string) {
	fmt.Fprintf(io.Out, "%s: %s row %d of task %s\n", what, res.Kind, res.JournalIndex, res.Task)
	if p := res.Progress; p != nil {
		fmt.Fprintf(io.Out, "progress: %s (%s, vector %s)\n", p.Vector.String(), count(p.EarnedSteps, "earned step"), p.VectorHash[:12])
	}
}

// noteWork says on stderr, whatever the output format, why a recorded row
// earned nothing.
func noteWork(io *IO, res *bernstein.WorkResult) {
	if res.Note != "" {
		fmt.Fprintln(io.Err, "note: "+res.Note)
	}
}

// verdict says how a gate or producer run ended.
func verdict(passed bool, exit int64) string {
	if passed {
		return "passed"
	}
	return fmt.Sprintf("failed (exit %d)", exit)
}

type checkpointOptions struct {
	IO     *IO
	Store  openFunc
	Task   string
	Commit string // the revision; "" is HEAD
	Actor  string
	JSON   bool
}

const checkpointLong = `Record a checkpoint row in the task's journal, with the commit's tree and its
first parent's tree. REV (default HEAD) must resolve to a commit of the
project's history: an unknown revision, or a commit of bernstein's own record
(a commit of a chain under refs/bernstein/, however it is named), is refused
with one line saying why, and nothing is written. A checkpoint earns a step of
progress when its tree is new: different from its first parent's tree and
from every tree counted before. An empty commit, an amend that keeps the
tree, or a revert or cherry-pick back to a counted tree is recorded and earns
nothing (a note on stderr says why).

Exit status: 0 recorded, 1 error (nothing recorded).`

func newCheckpointCmd(f *factory, runF func(*checkpointOptions) error) *cobra.Command {
	o := &checkpointOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "checkpoint <task> [--commit REV]",
		Short: "Record a checkpoint of a task at a real commit",
		Long:  checkpointLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			if runF != nil {
				return runF(o)
			}
			return checkpointRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Commit, "commit", "", "the revision to checkpoint (default HEAD)")
	cmd.Flags().StringVar(&o.Actor, "actor", "", "who records it (default: the writer id)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the receipt as JSON")
	return cmd
}

func checkpointRun(o *checkpointOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.Checkpoint(o.Task, o.Commit, o.Actor)
		if err != nil {
			return err
		}
		noteWork(o.IO, res)
		if o.JSON {
			return printJSON(o.IO, res)
		}
		printWork(o.IO, res, "recorded "+res.Data.(record.Checkpoint).Commit[:12])
		return nil
	})
}

type diffCaptureOptions struct {
	IO    *IO
	Store openFunc
	Task  string
	Base  string
	Head  string // "" is HEAD
	Actor string
	JSON  bool
}

const diffCaptureLong = `Compute the patch from --base to --head (default HEAD), two commits of the
project's history, with git and fixed options that no configuration or
environment changes (docs/format.md, Patches), store it as a blob in the
journal tree (outputs/<index>-diff.patch, capped at 1 MiB and marked truncated
beyond), and record a diff_captured row with both commits' trees and the
number of files, added and removed lines. A commit of bernstein's own record
is refused, and nothing is written. A diff earns a step of progress once per
change: the same two trees, in either order, are one change, a change
implied by changes captured before (a..c after a..b and b..c) is none, and
base and head with the same tree are none (recorded, earning nothing; a note
on stderr says why).

Exit status: 0 recorded, 1 error (nothing recorded).`

func newDiffCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{Use: "diff", Short: "Capture diffs into a task's journal"}
	cmd.AddCommand(newDiffCaptureCmd(f, nil))
	return cmd
}

func newDiffCaptureCmd(f *factory, runF func(*diffCaptureOptions) error) *cobra.Command {
	o := &diffCaptureOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "capture <task> --base REV [--head REV]",
		Short: "Capture the patch between two commits",
		Long:  diffCaptureLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			if o.Base == "" {
				return exitCode(1, errors.New("invalid base: pass --base REV"))
			}
			if runF != nil {
				return runF(o)
			}
			return diffCaptureRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Base, "base", "", "the base revision")
	cmd.Flags().StringVar(&o.Head, "head", "", "the head revision (default HEAD)")
	cmd.Flags().StringVar(&o.Actor, "actor", "", "who records it (default: the writer id)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the receipt as JSON")
	return cmd
}

func diffCaptureRun(o *diffCaptureOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.CaptureDiff(o.Task, o.Base, o.Head, o.Actor)
		if err != nil {
			return err
		}
		noteWork(o.IO, res)
		if o.JSON {
			return printJSON(o.IO, res)
		}
		d := res.Data.(record.DiffCaptured)
		printWork(o.IO, res, fmt.Sprintf("captured %s, +%d -%d", count(d.Files, "file"), d.Added, d.Removed))
		return nil
	})
}

// runFlags are the flags of the commands that run a command and record it.
type runFlags struct {
	Actor   string
	Timeout time.Duration
	Quiet   bool // do not copy the command's output to stderr
	JSON    bool
}

func (r *runFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&r.Actor, "actor", "", "who records it (default: the writer id)")
	cmd.Flags().DurationVar(&r.Timeout, "timeout", 0, "kill the command after this long (0: no limit)")
	cmd.Flags().BoolVar(&r.Quiet, "quiet", false, "do not copy the command's output to stderr")
	cmd.Flags().BoolVar(&r.JSON, "output-json", false, "print the receipt as JSON")
}

func (r *runFlags) options(io *IO) bernstein.RunOptions {
	o := bernstein.RunOptions{Actor: r.Actor, Timeout: r.Timeout}
	if !r.Quiet {
		o.Stream = io.Err
	}
	return o
}

type gateRunOptions struct {
	IO    *IO
	Store openFunc
	runFlags
	Task string
	Gate string
	Argv []string // the command after --, if any
}

const gateRunLong = `Run the gate's declared command (sh -c, in the work tree) or the command after
--, and record a gate_attempt row with its exit code, pass/fail and its output
(stored as a blob, capped at 1 MiB). The command's output is copied to stderr
unless --quiet. A gate declared at task creation (--gate NAME=CMD) earns a
step of progress on its first pass; every attempt is counted. A gate run with
-- CMD that was not declared, or with another command than the declared one,
is recorded and earns nothing. A timed-out or killed command is a failure.

Exit status: 0 the gate passed; 4 it failed (the attempt is recorded); 1 error
(nothing recorded).`

func newGateCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{Use: "gate", Short: "Run a task's gates"}
	cmd.AddCommand(newGateRunCmd(f, nil))
	return cmd
}

func newGateRunCmd(f *factory, runF func(*gateRunOptions) error) *cobra.Command {
	o := &gateRunOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "run <task> <gate> [-- CMD...]",
		Short: "Run a gate and record the attempt",
		Long:  gateRunLong,
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task, o.Gate = args[0], args[1]
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				if dash != 2 {
					return exitCode(1, errors.New("usage: bernstein gate run <task> <gate> [-- CMD...]"))
				}
				o.Argv = args[2:]
			} else if len(args) > 2 {
				return exitCode(1, errors.New("put the command after --: bernstein gate run <task> <gate> -- CMD..."))
			}
			if runF != nil {
				return runF(o)
			}
			return gateRunRun(o)
		},
	}
	o.runFlags.add(cmd)
	return cmd
}

func gateRunRun(o *gateRunOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.RunGate(o.Task, o.Gate, o.Argv, o.options(o.IO))
		if err != nil {
			return err
		}
		d := res.Data.(record.GateAttempt)
		if o.JSON {
			if err := printJSON(o.IO, res); err != nil {
				return err
			}
		} else {
			printWork(o.IO, res, "gate "+d.Gate+" "+verdict(d.Passed, d.ExitCode))
		}
		if !d.Passed {
			return exitCode(4, nil)
		}
		return nil
	})
}

type evidenceRunOptions struct {
	IO    *IO
	Store openFunc
	runFlags
	Task      string
	Producers []string // none: every declared producer
}

const evidenceRunLong = `Run the task's declared evidence producers (all of them, or those named) and
record one evidence_result row each, with exit code, pass/fail and output.
A producer that is not declared is refused before anything runs. Each
declared producer counts once toward progress, while its latest result passes.

Exit status: 0 every producer passed; 4 some failed (results are recorded);
1 error.`

func newEvidenceCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{Use: "evidence", Short: "Run a task's declared evidence producers"}
	cmd.AddCommand(newEvidenceRunCmd(f, nil))
	return cmd
}

func newEvidenceRunCmd(f *factory, runF func(*evidenceRunOptions) error) *cobra.Command {
	o := &evidenceRunOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "run <task> [PRODUCER...]",
		Short: "Run declared evidence producers and record each result",
		Long:  evidenceRunLong,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task, o.Producers = args[0], args[1:]
			if runF != nil {
				return runF(o)
			}
			return evidenceRunRun(o)
		},
	}
	o.runFlags.add(cmd)
	return cmd
}

func evidenceRunRun(o *evidenceRunOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		results, err := s.RunEvidence(o.Task, o.Producers, o.options(o.IO))
		if err != nil {
			return err
		}
		failed := 0
		for _, res := range results {
			if !res.Data.(record.EvidenceResult).Passed {
				failed++
			}
		}
		if o.JSON {
			if err := printJSON(o.IO, map[string]any{"results": results}); err != nil {
				return err
			}
		} else {
			for _, res := range results {
				d := res.Data.(record.EvidenceResult)
				printWork(o.IO, res, "evidence "+d.Producer+" "+verdict(d.Passed, d.ExitCode))
			}
		}
		if failed > 0 {
			return exitCode(4, nil)
		}
		return nil
	})
}

type taskProgressOptions struct {
	IO    *IO
	Store openFunc
	Task  string
	JSON  bool
}

const taskProgressLong = `Print the task's progress vector: a pure projection of its journal and ledger
rows (checkpoints of new trees, changes captured (pairs of trees), gate
attempts, declared gates passed, declared and passed evidence, ledger phase
and attempts; docs/cli.md, Progress vector). It cannot be posted, only
earned; artifacts never move it, and repeating work earns nothing. Only rows
whose commits a trusted writer signed count (your own writer's key, keys
pinned with 'bernstein keys pin' or --allowed-signers); the proof line names
any row that did not count. --output-json prints the wire form, with
earned_steps, phase_ordinal, vector_hash, the heads it was folded at and the
proof.

Exit status: 0 printed (proof verified, or unverifiable where no key is
trusted at all); 1 unknown task or error; 2 rows did not count (forged,
or signed by a writer not pinned here): the vector shown leaves them out.`

func newTaskProgressCmd(f *factory, runF func(*taskProgressOptions) error) *cobra.Command {
	o := &taskProgressOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "progress <task>",
		Short: "Print a task's progress vector",
		Long:  taskProgressLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			if runF != nil {
				return runF(o)
			}
			return taskProgressRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the wire form as JSON")
	return cmd
}

func taskProgressRun(o *taskProgressOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		w, err := s.Progress(o.Task)
		if err != nil {
			return err
		}
		if o.JSON {
			if err := printJSON(o.IO, w); err != nil {
				return err
			}
		} else {
			printProgress(o.IO.Out, w)
		}
		if n := len(w.Proof.RowsAtFault); n > 0 {
			return exitCode(2, fmt.Errorf("%s of %s %s (%s): %s", count(n, "row"), w.TaskID, map[bool]string{true: "does not count", false: "do not count"}[n == 1], w.Proof.State, w.Proof.RowsAtFault[0].Reason))
		}
		return nil
	})
}

func printProgress(w io.Writer, wire *progress.Wire) {
	fmt.Fprintf(w, "task:        %s\n", wire.TaskID)
	fmt.Fprintf(w, "phase:       %s (attempts %d)\n", wire.LedgerPhase, wire.LedgerAttempts)
	fmt.Fprintf(w, "checkpoints: %d\n", wire.Checkpoints)
	fmt.Fprintf(w, "diffs:       %d\n", wire.DiffsCaptured)
	fmt.Fprintf(w, "gates:       %d passed of %d attempts\n", wire.GatesPassed, wire.GateAttempts)
	fmt.Fprintf(w, "evidence:    %d passed of %d declared\n", wire.EvidencePassed, wire.EvidenceDeclared)
	fmt.Fprintf(w, "earned:      %d steps\n", wire.EarnedSteps)
	fmt.Fprintf(w, "vector:      %s\n", wire.VectorHash)
	printProof(w, "proof:       ", wire.Proof)
}

// faultWriter names the writer of a row that did not count, as the row's
// commit names it (the only place a row names its writer; the row did not
// count, so the name is not proven). A row that no commit names a writer
// for (a commit without one, or a row cut from a sealed journal) says so.
func faultWriter(f record.RowFault) string {
	if f.Writer == "" {
		return "writer unknown: no commit names one"
	}
	return "writer " + f.Writer + " as its commit names it"
}

// printProof prints a vector's proof, and each row that did not count.
func printProof(w io.Writer, label string, p progress.Proof) {
	if len(p.RowsAtFault) == 0 {
		fmt.Fprintf(w, "%s%s\n", label, p.State)
		return
	}
	fmt.Fprintf(w, "%s%s: %d rows do not count\n", label, p.State, len(p.RowsAtFault))
	for _, f := range p.RowsAtFault {
		fmt.Fprintf(w, "  %s index %d (%s, %s): %s\n", f.Chain, f.Index, f.State, faultWriter(f), f.Reason)
	}
}
