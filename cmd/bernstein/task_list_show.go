package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// 'task list' and 'task show': what the repository holds of its tasks.

type taskListOptions struct {
	IO     *IO
	Store  openFunc
	JSON   bool
	Strict bool
	Page   bernstein.Page
}

const taskListLong = `List every task of the repository, integrity first: its integrity (tampered,
unverifiable or verified: the worst of what follows), how many of its
artifact versions are verified, tampered and unverifiable (each re-checked),
the proof of its progress, its journal identity ("open" while the task is
open: nothing seals its journal yet), then its phase, the agent holding its
claim, its number of artifact keys and its title. Piped, the columns are
separated by tabs, without a header. A task whose integrity is not verified
is named on stderr, with why.

--output-json prints the same as GET /api/v1/tasks: each task as 'task show
--output-json' prints it, with "integrity": {"state", "reason", "versions":
{"verified", "tampered", "unverifiable"}, "progress_proof",
"journal_identity", "journal_identity_reason", "journal_open"}. It is
written a task at a time, as each is read: a list that fails part way (exit
1) leaves what it printed short of a whole document.

--limit N lists one page of at most N tasks (1 to 1000), those after
--cursor; a page that is not the last names the next page's cursor, in
"next_cursor" with --output-json, else on stderr. A page reads and verifies
only its own tasks.

A ref that cannot be read as its kind (plain git can point one at a blob,
a tree, a tag or a missing object) is read past and named: a task whose
journal or ledger ref is one is listed as tampered, naming the ref, nothing
else of it shown; an archive ref (refs/bernstein/archive/<writer>) that
cannot be read as an archive is one warning line on stderr, and the tasks
only it holds are not listed. 'bernstein audit verify' reports both as
tampered.

Exit status: 0 listed (also when there are no tasks, and when some are
tampered); 1 error (a --limit or --cursor that is not one: nothing is read);
2 with --strict, some task's integrity is not verified
(a version tampered or unverifiable, progress not proven, a journal identity
mismatched, or unverifiable once the task ended, or a ref of it that cannot
be read), or an archive ref was read past.`

func newTaskListCmd(f *factory, runF func(*taskListOptions) error) *cobra.Command {
	o := &taskListOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, integrity first",
		Long:  taskListLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return taskListRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the tasks as JSON")
	cmd.Flags().BoolVar(&o.Strict, "strict", false, "exit 2 when any task's integrity is not verified (or an archive ref was read past)")
	cmd.Flags().IntVar(&o.Page.Limit, "limit", 0, "list one page of at most this many tasks (1 to 1000)")
	cmd.Flags().StringVar(&o.Page.Cursor, "cursor", "", "list the tasks after this cursor (a page's next_cursor)")
	return cmd
}

func taskListRun(o *taskListOptions) error {
	if err := bernstein.CheckTaskPage(o.Page); err != nil {
		return err
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		var bad []string
		n := 0
		note := func(e bernstein.TaskListEntry) {
			n++
			if !e.Integrity.Verified() {
				bad = append(bad, e.ID)
				if !o.JSON {
					fmt.Fprintf(o.IO.Err, "note: task %s is %s: %s\n", e.ID, e.Integrity.State, e.Integrity.Reason)
				}
			}
		}
		list := printTaskTable
		if o.JSON {
			list = printTaskListJSON
		}
		readPast, err := list(o, s, note)
		if err != nil {
			return err
		}
		// An archive ref that cannot be read as an archive was read past:
		// the tasks only it holds are not listed.
		for _, b := range readPast {
			fmt.Fprintf(o.IO.Err, "warning: %s\n", bernstein.ArchiveReadPastWarning(b))
		}
		if o.Strict && len(readPast) > 0 {
			return exitCode(2, fmt.Errorf("%d archive %s read past (--strict)", len(readPast), map[bool]string{true: "ref was", false: "refs were"}[len(readPast) == 1]))
		}
		if o.Strict && len(bad) > 0 {
			nb := len(bad)
			if nb > 10 {
				bad = append(bad[:10], fmt.Sprintf("and %d more", nb-10))
			}
			return exitCode(2, fmt.Errorf("%d of %d %s not verified (--strict): %s", nb, n, map[bool]string{true: "task is", false: "tasks are"}[n == 1], strings.Join(bad, ", ")))
		}
		return nil
	})
}

// printTaskListJSON prints the list's document a task at a time, each
// task as it is read: no entry is kept, and the document is not held (at
// 100,000 tasks it is about 190 MB). A list that fails part way (a read
// error) stops there with its error: what it printed is not a whole
// document. note is called with each task.
func printTaskListJSON(o *taskListOptions, s *bernstein.Store, note func(bernstein.TaskListEntry)) ([]refs.BadRef, error) {
	out := bufio.NewWriterSize(o.IO.Out, 64<<10)
	tw := bernstein.NewTaskListWriter(out, bernstein.TaskListIndented)
	next, past, err := s.EachTaskListEntry(o.Page, func(e bernstein.TaskListEntry) error {
		note(e)
		return tw.Task(e)
	})
	if err == nil {
		err = tw.Close(next, past)
	}
	if err == nil {
		err = out.Flush()
	}
	return past, err
}

// printTaskTable prints the list as a table (which needs every row to
// size its columns), then the next page's cursor; note is called with
// each task after the table.
func printTaskTable(o *taskListOptions, s *bernstein.Store, note func(bernstein.TaskListEntry)) ([]refs.BadRef, error) {
	tasks, next, past, err := s.TaskListPageReadPast(o.Page)
	if err != nil {
		return nil, err
	}
	if err := renderTaskList(o.IO, tasks); err != nil {
		return nil, err
	}
	if next != "" {
		fmt.Fprintf(o.IO.Err, "note: more tasks follow: --cursor %s\n", next)
	}
	for _, e := range tasks {
		note(e)
	}
	return past, nil
}

// renderTaskList prints the tasks as a table.
func renderTaskList(sio *IO, tasks []bernstein.TaskListEntry) error {
	t := newTable(sio, "TASK", "INTEGRITY", "VERIFIED", "TAMPERED", "UNVERIFIABLE", "PROGRESS", "JOURNAL", "PHASE", "CLAIM", "KEYS", "TITLE")
	for _, e := range tasks {
		in := e.Integrity
		journal := in.JournalIdentity
		if in.JournalOpen {
			journal = "open"
		}
		t.row(e.ID, in.State, fmt.Sprint(in.Versions.Verified), fmt.Sprint(in.Versions.Tampered), fmt.Sprint(in.Versions.Unverifiable),
			dash(in.ProgressProof), journal, e.Phase, dash(e.ClaimAgent), fmt.Sprint(len(e.Artifacts)), e.Title)
	}
	return t.render()
}

type taskShowOptions struct {
	IO    *IO
	Store openFunc
	Task  string
	JSON  bool
}

func newTaskShowCmd(f *factory, runF func(*taskShowOptions) error) *cobra.Command {
	o := &taskShowOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "show <task>",
		Short: "Show a task's ledger state and artifacts",
		Long: `Show a task: its phase, live claim, declared evidence and gates, and its
artifact keys. A task whose journal or ledger ref cannot be read as one
(plain git pointed it at a blob, a tree, a tag, a missing object or a commit
that is no chain's) is tampered: one error line names the ref, nothing of
the task is shown. Exit status: 0 shown, 1 unknown task or error, 2
tampered: a ref of the task cannot be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			if runF != nil {
				return runF(o)
			}
			return taskShowRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the task as JSON")
	return cmd
}

func taskShowRun(o *taskShowOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		info, err := s.Task(o.Task)
		var bad *refs.BadRefError
		if errors.As(err, &bad) {
			return exitCode(2, err) // tampered: never rendered
		}
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, info)
		}
		renderTask(o.IO.Out, info)
		return nil
	})
}

// renderTask prints a task as 'task show' does.
func renderTask(w io.Writer, info *bernstein.TaskInfo) {
	fmt.Fprintf(w, "task:     %s\n", info.ID)
	if info.Title != "" {
		fmt.Fprintf(w, "title:    %s\n", info.Title)
	}
	fmt.Fprintf(w, "phase:    %s\n", info.Phase)
	fmt.Fprintf(w, "claim:    %s\n", dash(info.ClaimAgent))
	fmt.Fprintf(w, "ledger:   %d rows\n", info.LedgerRows)
	fmt.Fprintf(w, "journal:  %d rows\n", info.JournalRows)
	for _, p := range info.Evidence {
		req := "optional"
		if p.Required {
			req = "required"
		}
		fmt.Fprintf(w, "evidence: %s (%s): %s\n", p.Name, req, p.Command)
	}
	for _, gt := range info.Gates {
		fmt.Fprintf(w, "gate:     %s: %s\n", gt.Name, gt.Command)
	}
	for _, k := range sortedKeys(info.Artifacts) {
		fmt.Fprintf(w, "artifact: %s (latest v%d)\n", k, info.Artifacts[k])
	}
	if p := info.Progress; p != nil {
		fmt.Fprintf(w, "progress: %s\n", p.Vector.String())
		fmt.Fprintf(w, "vector:   %s (%s)\n", p.VectorHash, count(p.EarnedSteps, "earned step"))
		printProof(w, "proof:    ", p.Proof)
	}
}
