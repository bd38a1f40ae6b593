package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

func newAuditCmd(g *globals, sio *IO) *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Verify the repository offline"}
	var task string
	var asJSON, strict bool
	verifyCmd := &cobra.Command{
		Use:   "verify [--task T]",
		Short: "Recompute and check everything under refs/bernstein",
		Long: `Walk every task journal, ledger, lineage spine and audit mirror: linear chains,
contiguous indexes and sequence numbers, prev links and recomputed hashes;
every payload and output blob re-hashed (sha256 and git object id); every
journal row bound to exactly one spine entry and every spine entry to a row;
the audit mirrors carrying every post and transition; every spine and audit
commit signature checked against the writer's pinned key (the local writer's
own, or --allowed-signers); every HMAC recomputed where the writer's HMAC key
is on this host (elsewhere it is reported as not checked, never as tampered).
Journal seals decide each task's journal_identity.

Each failure names the task, key, version and journal index (or the spine or
audit sequence number) and the check that failed. Nothing is written and no
key is created.

Exit status: 0 everything holds (versions whose writer's key is not pinned are
reported unverifiable; with --strict they make the exit 1); 1 something is
tampered; 2 operational error (no repository, unreadable object store).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open()
			if err != nil {
				return exitCode(2, errors.New(userMessage(err)))
			}
			defer s.Close()
			o := bernstein.AuditOptions{Task: task}
			if sio.ErrTTY {
				o.Progress = progressLine(sio)
			}
			rep, err := s.AuditVerify(o)
			if sio.ErrTTY {
				fmt.Fprint(sio.Err, "\r\033[K")
			}
			if errors.Is(err, bernstein.ErrUnknownTask) {
				return exitCode(2, err)
			}
			if err != nil {
				return exitCode(2, errors.New(userMessage(err)))
			}
			if asJSON {
				if err := printJSON(sio, rep); err != nil {
					return err
				}
			} else {
				w := sio.Out
				for _, f := range rep.Failures {
					fmt.Fprintf(w, "FAIL %-16s %s\n", f.Check, f.Reason)
				}
				c := rep.Counts
				fmt.Fprintf(w, "%d tasks, %d journal rows, %d ledger rows, %d artifact versions (%d verified, %d tampered, %d unverifiable)\n",
					c.Tasks, c.JournalRows, c.LedgerRows, c.Artifacts, c.Verified, c.Tampered, c.Unverifiable)
				fmt.Fprintf(w, "%d spine entries, %d audit entries, %d signatures checked, %d HMACs checked\n",
					c.SpineEntries, c.AuditEntries, c.SignaturesChecked, c.HMACsChecked)
				if rep.HMACNote != "" {
					fmt.Fprintln(w, rep.HMACNote)
				}
				if rep.Note != "" {
					fmt.Fprintln(w, rep.Note)
				}
				switch {
				case rep.Tampered():
					fmt.Fprintf(w, "TAMPERED: %d checks failed\n", len(rep.Failures))
				case rep.Verified:
					fmt.Fprintln(w, "verified: everything holds")
				default:
					fmt.Fprintln(w, "no tampering found")
				}
			}
			if rep.Tampered() {
				return exitCode(1, nil)
			}
			if strict && !rep.Verified {
				return exitCode(1, errors.New(rep.Note))
			}
			return nil
		},
	}
	verifyCmd.Flags().StringVar(&task, "task", "", "verify only this task's journal and ledger (spines and audit mirrors are always walked)")
	verifyCmd.Flags().BoolVar(&asJSON, "output-json", false, "print one JSON document")
	verifyCmd.Flags().BoolVar(&strict, "strict", false, "exit 1 unless every version is verified (unverifiable counts as failure)")
	cmd.AddCommand(verifyCmd)
	return cmd
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
