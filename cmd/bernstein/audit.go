package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/verify"
)

func newAuditCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Verify the repository offline"}
	cmd.AddCommand(newAuditVerifyCmd(f, nil), newAuditAcceptCmd(f, nil))
	return cmd
}

type auditVerifyOptions struct {
	IO         *IO
	Store      openFunc
	Task       string // only this task's journal and ledger
	Since      string // an audit checkpoint: check only what was added after it
	Checkpoint string // record what the walk found whole under this name
	JSON       bool
	Strict     bool
}

const auditVerifyLong = `Walk every task journal, ledger, lineage spine and audit mirror: linear chains,
contiguous indexes and sequence numbers, prev links and recomputed hashes;
every payload and output blob re-hashed (sha256 and git object id); every
journal row bound to exactly one spine entry and every spine entry to a row;
the audit mirrors carrying every post and transition; every spine and audit
commit signature checked against the writer's pinned key (the local writer's
own, one pinned with 'bernstein keys pin', or --allowed-signers); every HMAC
recomputed where the writer's HMAC key is on this host (elsewhere it is
reported as not checked, never as tampered). Journal seals decide each task's
journal_identity.

Each failure is one line that stands alone: FAIL, where (the task, then the
key, version and journal index of an artifact version, the journal index of a
work row, "ledger index N" for a ledger row, or the writer and sequence
number of a spine or audit entry), the check that failed in parentheses, and
why. For example:

  FAIL T-2 summary v2 at journal index 1 (blob): blob 0c1f... is missing
  FAIL T-2 ledger index 3 (row_signature): task.started: ...
  FAIL writer host-a seq 7 (audit_hmac): HMAC does not recompute

The JSON document carries the same fields (task_id, key, version,
journal_index, writer, seq, check, reason). "N signatures checked" counts
every commit signature checked; those by writers whose keys are published
(refs/bernstein/writers/<writer>) but not pinned here are counted apart: they
prove nothing until pinned ('bernstein keys list', 'bernstein keys pin').
Nothing is written to the repository and no key is created.

Chains this host's writer extended are also checked against the heads it
wrote (kept in BERNSTEIN_HOME): one that no longer contains them was rolled
back, which only this host can tell once the audit mirror went back with it
(check "rollback").

Incremental verification: --checkpoint NAME records, when everything holds
and is verified, what this walk found whole (every ref under refs/bernstein/
and the keys trusted) as an audit checkpoint, signed with this host's writer
key and kept outside the repository (BERNSTEIN_HOME/audits). --since NAME
then checks only what was added after that checkpoint: each added row,
entry and blob, its chain links, signature, HMAC, spine binding and seal, and
the audit mirror both ways; a ref that no longer contains its head at the
checkpoint is reported (rolled back or rewritten). Its cost follows what was
added, not the history. What spans the checkpoint is left to the full
verify: a task's journal identity (reported unverifiable) and the link from
a key's last version before the checkpoint to its first one after. Give both
to move a checkpoint forward:
  bernstein audit verify --since nightly --checkpoint nightly
A checkpoint taken under keys this host no longer trusts cannot be used
(exit 2): run a full verify. The full verify stays the default.

Exit status: 0 everything holds (versions whose writer's key is not pinned are
reported unverifiable; with --strict they make the exit 1); 1 something is
tampered; 2 operational error (no repository, unreadable object store), bad
input, or an audit checkpoint that is missing or cannot be used.`

func newAuditVerifyCmd(f *factory, runF func(*auditVerifyOptions) error) *cobra.Command {
	o := &auditVerifyOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "verify [--task T]",
		Short: "Recompute and check everything under refs/bernstein",
		Long:  auditVerifyLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return auditVerifyRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Task, "task", "", "verify only this task's journal and ledger (spines and audit mirrors are always walked)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print one JSON document")
	cmd.Flags().BoolVar(&o.Strict, "strict", false, "exit 1 unless every version is verified (unverifiable counts as failure)")
	cmd.Flags().StringVar(&o.Since, "since", "", "check only what was added after audit checkpoint `NAME`")
	cmd.Flags().StringVar(&o.Checkpoint, "checkpoint", "", "record what this walk found whole as audit checkpoint `NAME`")
	return cmd
}

// auditVerifyRun walks the repository. Its exit status differs from the
// other commands': 2 is an operational error, 1 tampering.
func auditVerifyRun(o *auditVerifyOptions) error {
	var rep *verify.Report
	err := withStore(o.Store, func(s *bernstein.Store) error {
		ao := bernstein.AuditOptions{Task: o.Task, Since: o.Since, Checkpoint: o.Checkpoint}
		if o.IO.ErrTTY {
			ao.Progress = progressLine(o.IO)
		}
		var err error
		rep, err = s.AuditVerify(ao)
		if o.IO.ErrTTY {
			fmt.Fprint(o.IO.Err, "\r\033[K")
		}
		return err
	})
	if err != nil {
		return exitCode(2, errors.New(userMessage(err)))
	}
	if o.JSON {
		if err := printJSON(o.IO, rep); err != nil {
			return err
		}
	} else {
		renderAudit(o.IO.Out, rep, o.Strict)
	}
	if rep.CheckpointNote != "" {
		fmt.Fprintln(o.IO.Err, "note: "+rep.CheckpointNote)
	}
	if rep.Tampered() {
		return exitCode(1, nil)
	}
	if o.Strict && !rep.Verified {
		return exitCode(1, errors.New(rep.Note))
	}
	return nil
}

// renderAudit prints a walk's report: its failures, one a line, what it
// counted, the divergences resolved and pending, what it could not check
// here (all of it with strict) and its verdict.
func renderAudit(w io.Writer, rep *verify.Report, strict bool) {
	for _, f := range rep.Failures {
		fmt.Fprintln(w, failureLine(f))
	}
	c := rep.Counts
	fmt.Fprintf(w, "%d tasks, %d journal rows, %d ledger rows, %d artifact versions (%d verified, %d tampered, %d unverifiable)\n",
		c.Tasks, c.JournalRows, c.LedgerRows, c.Artifacts, c.Verified, c.Tampered, c.Unverifiable)
	fmt.Fprintf(w, "%d spine entries, %d audit entries, %d HMACs checked\n", c.SpineEntries, c.AuditEntries, c.HMACsChecked)
	fmt.Fprintf(w, "%d signatures checked: %d against pinned keys, %d only against published keys (unpinned)\n",
		c.SignaturesChecked, c.SignaturesChecked-c.SignaturesUnpinned, c.SignaturesUnpinned)
	if rep.Since != "" {
		fmt.Fprintf(w, "since audit checkpoint %s: %d chain commits read\n", rep.Since, c.CommitsRead)
	}
	if rep.HMACNote != "" {
		fmt.Fprintln(w, rep.HMACNote)
	}
	if rep.Note != "" {
		fmt.Fprintln(w, rep.Note)
	}
	for _, r := range rep.Resolutions {
		fmt.Fprintln(w, r.String())
	}
	for _, p := range rep.Pending {
		fmt.Fprintln(w, p.String())
	}
	for _, d := range rep.ArchiveDivergences {
		fmt.Fprintln(w, d.String())
	}
	for _, n := range rep.NotChecked {
		if strict || n.Check != "audit_hmac" { // HMACNote says that one already
			fmt.Fprintf(w, "not checked here: %s\n", n)
		}
	}
	if strict {
		if len(rep.NotChecked) == 0 {
			fmt.Fprintln(w, "strict: every check was made here, HMACs included")
		} else {
			fmt.Fprintf(w, "strict: %d kind(s) of check could not be made here (above); everything else was checked against pinned keys\n", len(rep.NotChecked))
		}
	}
	switch {
	case rep.Tampered():
		fmt.Fprintf(w, "TAMPERED: %d checks failed\n", len(rep.Failures))
	case rep.Verified:
		fmt.Fprintln(w, "verified: everything holds")
	default:
		fmt.Fprintln(w, "no tampering found")
	}
	if rep.Checkpoint != "" {
		fmt.Fprintf(w, "audit checkpoint %s taken\n", rep.Checkpoint)
	}
}

// failureLine renders one failure of a walk: where, which check, why.
func failureLine(f verify.Failure) string {
	var where []string
	reason := f.Reason
	if f.TaskID != "" {
		where = append(where, f.TaskID)
	}
	switch {
	case f.Key != "" && f.Version != nil:
		pos := fmt.Sprintf("%s v%d", f.Key, *f.Version)
		if f.JournalIndex != nil {
			pos += fmt.Sprintf(" at journal index %d", *f.JournalIndex)
		}
		where = append(where, pos)
		reason = strings.TrimPrefix(reason, pos+": ")
	case f.JournalIndex != nil:
		where = append(where, fmt.Sprintf("journal index %d", *f.JournalIndex))
	case f.TaskID != "" && strings.HasPrefix(reason, "ledger of "+f.TaskID+" at index "):
		// "ledger of T at index N: why"
		rest := strings.TrimPrefix(reason, "ledger of "+f.TaskID+" at index ")
		if n, why, ok := strings.Cut(rest, ": "); ok {
			where, reason = append(where, "ledger index "+n), why
		} else {
			where = append(where, "ledger")
		}
	case f.TaskID != "" && strings.HasPrefix(f.Check, "ledger"):
		where = append(where, "ledger")
	case f.TaskID != "" && strings.HasPrefix(f.Check, "journal"):
		where = append(where, "journal")
	}
	if f.Writer != "" {
		w := "writer " + f.Writer
		if f.Seq != nil {
			w += fmt.Sprintf(" seq %d", *f.Seq)
			// "audit entry W/N: why" says it again.
			for _, p := range []string{"audit entry ", "spine entry "} {
				reason = strings.TrimPrefix(reason, fmt.Sprintf("%s%s/%d: ", p, f.Writer, *f.Seq))
			}
		}
		if len(where) > 0 {
			where[len(where)-1] += ","
		}
		where = append(where, w)
	}
	if len(where) == 0 {
		where = append(where, "repository")
	}
	return fmt.Sprintf("FAIL %s (%s): %s", strings.Join(where, " "), f.Check, reason)
}

// progressLine shows a walk's progress on stderr, on one rewritten line.
func progressLine(sio *IO) func(stage string, done, total int) {
	return func(stage string, done, total int) {
		if total > 0 && done%16 != 0 && done != total {
			return
		}
		if total > 0 {
			fmt.Fprintf(sio.Err, "\r\033[Kverifying %s %d/%d", stage, done, total)
		} else {
			fmt.Fprintf(sio.Err, "\r\033[Kverifying %s...", stage)
		}
	}
}
