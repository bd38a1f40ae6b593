package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

type taskAdoptOptions struct {
	IO     *IO
	Store  openFunc
	Task   string
	Remote string
	JSON   bool
}

const taskAdoptLong = `Resolve a divergence of TASK with REMOTE (default origin): two hosts wrote
to the task before seeing each other's rows, and REMOTE holds the other's.

adopt fetches REMOTE's heads, takes REMOTE's journal and ledger of TASK as
the truth (every row must verify here: pin their writers first), and, in
one transaction:
  - keeps this host's own chains of the task in its fork refs,
    refs/bernstein/forks/<writer>/<journal|ledger>/<task>/<rows shared>,
    so every dropped row stays readable ('git show') and is pushed;
  - records this host's own journal rows the remote lacks again on top of
    the remote's, signed now: artifact versions as new versions of their
    keys, work rows (checkpoints, diffs, gates, evidence) as work again
    where the work still holds (the commits they name are here, the task
    has not ended). Ledger transitions are not made again: the remote's
    ledger holds the task's state;
  - signs, in this host's spine and audit mirror, a supersede entry naming
    the dropped rows and the spine entries that sealed them.

Then 'bernstein push REMOTE' sends it, and 'audit verify' on every host that
fetches reports the resolution ("resolved: N rows of TASK re-recorded after
a divergence with REMOTE"). See docs/remotes.md, Divergence.

Exit status: 0 resolved; 1 error, or nothing to resolve (the task did not
diverge from REMOTE, or REMOTE's chains do not verify here); nothing is
written.`

func newTaskAdoptCmd(f *factory, runF func(*taskAdoptOptions) error) *cobra.Command {
	o := &taskAdoptOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "adopt TASK [REMOTE]",
		Short: "Resolve a divergence: the remote's chains, this host's rows on top",
		Long:  taskAdoptLong,
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			o.Remote = remoteArg(args[1:])
			if runF != nil {
				return runF(o)
			}
			return taskAdoptRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON")
	return cmd
}

func taskAdoptRun(o *taskAdoptOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.Adopt(o.Remote, o.Task)
		if err != nil {
			return fmt.Errorf("task adopt %s %s: %w", o.Task, o.Remote, err)
		}
		if o.JSON {
			return printJSON(o.IO, res)
		}
		for _, r := range res.Rerecorded {
			fmt.Fprintf(o.IO.Out, "re-recorded: %s\n", droppedLine(r))
		}
		for _, r := range res.NotRerecorded {
			fmt.Fprintf(o.IO.Out, "not re-recorded: %s: %s\n", droppedLine(r), r.Why)
		}
		for _, f := range res.Forks {
			fmt.Fprintf(o.IO.Out, "kept: %s\n", f)
		}
		fmt.Fprintf(o.IO.Out, "%s (spine seq %d supersedes %d entries). Next: 'bernstein push %s'\n", res, res.SpineSeq, res.Superseded, o.Remote)
		return nil
	})
}

// droppedLine names a dropped row and where it was recorded again.
func droppedLine(r bernstein.DroppedRow) string {
	s := fmt.Sprintf("%s row %d (%s", r.Chain, r.Index, r.Kind)
	if r.Key != "" {
		s += fmt.Sprintf(" %s v%d", r.Key, r.Version)
	}
	s += ")"
	if r.NewIndex >= 0 {
		s += fmt.Sprintf(" as row %d", r.NewIndex)
	}
	return s
}
