package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

type archiveOptions struct {
	IO          *IO
	Store       openFunc
	Tasks       []string
	EndedBefore time.Duration
	JSON        bool
}

const archiveLong = `Archive ended tasks (docs/archive.md): move each task's two refs
(refs/bernstein/journal/<task> and refs/bernstein/ledger/<task>) into this
writer's archive, refs/bernstein/archive/<writer>, a chain of signed commits
whose trees hold every archived task's journal and ledger heads (and whose
parents keep those chains reachable). An archived task reads as it did.

A task is archived when its last ledger row is terminal (complete, fail,
abandon), both its chains are proven, its journal has rows and its seal is in
the spine, and its refs are at those heads. With TASK arguments, exactly those
tasks: one that is not archivable (not ended, not sealed, unknown, archived
already) is one error naming it, and nothing is written. Without, every
archivable task; the ended ones passed over are listed with the reason.
--ended-before DURATION (such as 720h) keeps only tasks whose last ledger row
was written at least that long ago.

Each archive commit (at most 256 tasks) is one write transaction: the commit,
the archive ref's compare-and-swap and the deletion of the tasks' refs (each a
compare-and-swap from the archived head), so a crash leaves either the refs or
the archive. The repository must be in storage format 3 ('bernstein upgrade').

Exit status: 0 archived (or nothing to archive); 1 error (a task not
archivable, a repository below format 3, bad input).`

func newArchiveCmd(f *factory, runF func(*archiveOptions) error) *cobra.Command {
	o := &archiveOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "archive [--ended-before DURATION] [TASK...]",
		Short: "Archive ended tasks into this writer's archive ref",
		Long:  archiveLong,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Tasks = args
			if runF != nil {
				return runF(o)
			}
			return archiveRun(o)
		},
	}
	cmd.Flags().DurationVar(&o.EndedBefore, "ended-before", 0, "only tasks whose last ledger row is at least this old (e.g. 720h)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "the same as --output-json")
	return cmd
}

func archiveRun(o *archiveOptions) error {
	if o.EndedBefore < 0 {
		return errors.New("--ended-before: want a duration of zero or more")
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.Archive(bernstein.ArchiveRequest{Tasks: o.Tasks, EndedBefore: o.EndedBefore})
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, res)
		}
		for _, sk := range res.Skipped {
			fmt.Fprintf(o.IO.Out, "passed over %s: %s\n", sk.Task, sk.Reason)
		}
		if len(res.Archived) == 0 {
			fmt.Fprintln(o.IO.Out, "nothing to archive")
			return nil
		}
		fmt.Fprintf(o.IO.Out, "archived %d tasks in %d commits to %s:", len(res.Archived), len(res.Commits), res.Ref)
		for _, task := range res.Archived {
			fmt.Fprintf(o.IO.Out, " %s", task)
		}
		fmt.Fprintf(o.IO.Out, "\nhead %s\n", res.Commits[len(res.Commits)-1])
		return nil
	})
}
