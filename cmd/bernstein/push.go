package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

type pushOptions struct {
	IO     *IO
	Store  openFunc
	Remote string
	JSON   bool
	Quorum int // --witness-quorum (0: the configured one)
	// ArchiveAge is --archive-ended-before ("": the configured policy);
	// NoArchive is --no-archive.
	ArchiveAge string
	NoArchive  bool
}

const pushLong = `Push refs/bernstein/* to REMOTE (default origin, a configured remote).

First finishes any write a killed bernstein process left half done, then
pushes, in one 'git push --atomic', every local refs/bernstein/* ref this host
moved past the remote's head, exactly as one consistent snapshot saw them (so
the remote never holds half a post), never forced. If the remote cannot do
atomic pushes, the refs are pushed one by one and a warning says so. Refs the
remote has newer (other hosts' chains) are left out: 'bernstein fetch' brings
them.

A ref that both this host and the remote moved is explained, by task or
writer: for a task journal or ledger, two hosts wrote to the same task; each
keeps its rows, nothing is overwritten, and docs/remotes.md ("Divergence")
says what to do. When the remote rejects refs because they moved there since
the last fetch, or because another push moved them while this one was under
way (two hosts pushing at once: the remote's ref transaction fails), push
fetches the remote's heads (remote-tracking refs only), plans again and
retries, three pushes at most: two hosts that wrote to one task then get the
divergence, whichever way the race went. Refs the remote's hooks refuse are
reported with the remote's messages.

The repository's pre-push hook, if it has one ('bernstein hooks install
--pre-push' checks what is about to leave as the remote guard would), runs
before each push with the commits push is about to send and the remote's
heads as last fetched; if it refuses, nothing is sent. Without the hook
nothing is checked here, as with git push: the remote guard and 'audit
verify' on clones are the authority.

A task that diverged blocks only itself: every other ref is pushed (in the
same atomic push), and the rows this host wrote to the task go to its forks,
refs/bernstein/forks/<writer>/<journal|ledger>/<task>/<rows shared>, which
every host reads as a divergence pending until 'bernstein task adopt TASK
REMOTE' resolves it here (docs/remotes.md, Divergence).

The first push of a writer to a remote whose guard trusts no key of it
(docs/remotes.md, Hooks) is refused whole; push then publishes the writer's
key ref there alone (which the guard accepts: a key is a claim, not trust)
and prints the command the remote's operator runs to pin it, with its
fingerprint. Once it is pinned, push again.

Before it pushes, push archives this writer's own ended tasks (docs/archive.md,
Automatic archiving): each task whose last ledger row, a complete, fail or
abandon this writer wrote, is at least 7 days old, as 'bernstein archive
--ended-before 7d' would archive it; the push then deletes the remote's refs
of those tasks with the archive. The age is the git configuration key
bernstein.archive.endedBefore (a duration such as 168h, a number of days such
as 30d, or off), else 7 days; --archive-ended-before AGE and --no-archive set
it for one push. It reads the spine entries this writer wrote since its last
run, not every task. An archive that fails (the writer's archive ref moved
with plain git, another write in the way) is warned of and the push goes on.

A local archive ref that cannot be read as its writer's archive (moved with
plain git: not an archive commit, not signed by its writer, a tree of another
shape) is not pushed: a warning names it, and the rest is pushed (a guarded
remote would refuse it, and with it the whole atomic push).

Exit status: 0 pushed (or nothing to push); 1 error, the pre-push hook
stopped the push, or the remote refused (a hook); 5 a ref diverged (a task:
every other ref was pushed), or the remote kept moving a ref this host moved
too (nothing pushed when atomic): run 'bernstein fetch'; 6 the remote
trusts no key of this writer yet: its key ref was published there and the
pin command is printed; nothing else was pushed.

With witnesses configured ('bernstein witness'), push first signs a
checkpoint of this writer's log (its spine) and has the witnesses cosign it,
each with a consistency proof from the checkpoint it cosigned last; the
cosigned checkpoint goes to refs/bernstein/checkpoints/<writer> and is pushed
with the rest. Fewer cosignatures than the quorum (--witness-quorum N, else
'bernstein witness quorum', else every witness) fail the push with each
witness's reason, and nothing is pushed (exit 1).`

func newPushCmd(f *factory, runF func(*pushOptions) error) *cobra.Command {
	o := &pushOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "push [REMOTE]",
		Short: "Push each refs/bernstein/* ref this host moved, in one atomic push",
		Long:  pushLong,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Remote = remoteArg(args)
			if runF != nil {
				return runF(o)
			}
			return pushRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON (also when the push is rejected)")
	cmd.Flags().StringVar(&o.ArchiveAge, "archive-ended-before", "", "archive first this writer's tasks ended at least this long ago (e.g. 7d, 720h, off; default: git config bernstein.archive.endedBefore, else 7d)")
	cmd.Flags().BoolVar(&o.NoArchive, "no-archive", false, "archive nothing before pushing (the same as --archive-ended-before off)")
	cmd.Flags().IntVar(&o.Quorum, "witness-quorum", 0, "how many configured witnesses must cosign this writer's checkpoint (default: 'bernstein witness quorum', else every witness)")
	return cmd
}

func pushRun(o *pushOptions) error {
	if o.Quorum < 0 {
		return fmt.Errorf("--witness-quorum %d: a number of witnesses, 1 or more", o.Quorum)
	}
	var popts bernstein.PushOptions
	switch {
	case o.NoArchive && o.ArchiveAge != "":
		return errors.New("--no-archive and --archive-ended-before: give one")
	case o.NoArchive:
		popts.Archive = &bernstein.ArchivePolicy{Off: true, From: "--no-archive"}
	case o.ArchiveAge != "":
		p, err := bernstein.ParseArchiveAge(o.ArchiveAge)
		if err != nil {
			return fmt.Errorf("--archive-ended-before %w", err)
		}
		p.From = "--archive-ended-before"
		popts.Archive = &p
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		s.SetPushQuorum(o.Quorum)
		res, err := s.PushWith(o.Remote, popts)
		if res != nil && !o.JSON {
			printAutoArchive(o.IO, res.AutoArchive)
		}
		if res != nil && o.JSON {
			if perr := printJSON(o.IO, res); perr != nil {
				return perr
			}
		}
		if res != nil {
			// Read past, not pushed: said whatever else happened.
			for _, b := range res.ReadPast {
				fmt.Fprintf(o.IO.Err, "warning: %s; not pushed (run 'bernstein audit verify')\n", b)
			}
		}
		if err != nil {
			return o.failed(res, err)
		}
		if !o.JSON {
			printPushed(o.IO, o.Remote, res)
		}
		return nil
	})
}

// exitUntrusted is push's exit status when the remote's guard trusts no key
// of a writer whose rows the push carries: its key ref was published, and
// the operator pins it.
const exitUntrusted = 6

// untrusted explains a push refused for want of a pinned key: the key
// published, and the command the remote's operator runs.
func untrusted(io *IO, remote string, e *bernstein.UntrustedError) error {
	for _, w := range e.Writers {
		switch {
		case w.Published:
			fmt.Fprintf(io.Err, "%s trusts no key of writer %s yet: published its key (%s) there, under refs/bernstein/writers/\n", remote, w.Writer, w.Fingerprint)
		default:
			fmt.Fprintf(io.Err, "%s trusts no key of writer %s yet: its key (%s) is published there\n", remote, w.Writer, w.Fingerprint)
		}
	}
	fmt.Fprintf(io.Err, "The operator of %s runs, inside the remote repository, once each fingerprint is checked with its writer's owner:\n", remote)
	for _, w := range e.Writers {
		fmt.Fprintf(io.Err, "  %s\n", w.Command)
	}
	fmt.Fprintf(io.Err, "then push again. Nothing else was pushed (docs/remotes.md, Hooks).\n")
	return exitCode(exitUntrusted, errors.New(e.Error()))
}

// failed explains on stderr why a push failed, and gives its exit: 5 when
// refs diverged or the remote moved them meanwhile, 6 when the remote
// trusts no key of the writer yet, else 1.
func (o *pushOptions) failed(res *bernstein.PushResult, err error) error {
	var div *bernstein.DivergedError
	var rej *bernstein.RejectedError
	var ref *bernstein.RemoteRefusedError
	var pre *bernstein.PrePushError
	var ut *bernstein.UntrustedError
	switch {
	case errors.As(err, &ut):
		return untrusted(o.IO, o.Remote, ut)
	case errors.As(err, &pre):
		// The hook's words once (git would have shown them as it ran),
		// then one line that does not repeat them.
		for _, m := range pre.Messages {
			fmt.Fprintln(o.IO.Err, m)
		}
		return exitCode(1, errors.New(pre.Summary()))
	case errors.As(err, &div):
		if !o.JSON {
			printDiverged(o.IO, div.Diverged)
			if len(res.Pushed) > 0 {
				printPushed(o.IO, o.Remote, res)
			}
		}
		fmt.Fprintf(o.IO.Err, "%s. 'bernstein fetch %s' reports the same; see docs/remotes.md, Divergence\n", divergedPushed(res, div.Diverged), o.Remote)
		return exitCode(exitDiverged, fmt.Errorf("push to %s: %d ref%s diverged (%s)", o.Remote, len(div.Diverged), plural(len(div.Diverged)), div.Diverged[0].What()))
	case errors.As(err, &rej):
		if !o.JSON {
			for _, r := range rej.Rejected {
				fmt.Fprintf(o.IO.Err, "rejected: %s (%s): %s holds commits this host lacks\n", r.What(), r.Reason, o.Remote)
			}
		}
		fmt.Fprintf(o.IO.Err, "%s. Next: 'bernstein fetch %s' (it fast-forwards, or names the task that diverged), then push again\n", pushedAnyway(res, "were", " (the remote does not support atomic pushes)"), o.Remote)
		return exitCode(exitDiverged, fmt.Errorf("push to %s rejected: %s moved on the remote meanwhile", o.Remote, rej.Rejected[0].What()))
	case errors.As(err, &ref):
		// The remote's words once, then one line that does not repeat
		// them.
		for _, m := range ref.Messages {
			fmt.Fprintf(o.IO.Err, "remote: %s\n", m)
		}
		why := "its reasons are above"
		if len(ref.Messages) == 0 {
			why = "it gave no reason"
		}
		return exitCode(1, fmt.Errorf("%s: %s; %s", ref.Summary(), why, pushedAnyway(res, "were", "")))
	}
	return err
}

// pushedAnyway says what a failed push sent all the same: nothing when it
// was atomic, else the refs pushed one by one before it failed.
// divergedPushed says what a push that found diverged refs sent: nothing
// when a chain only one writer writes diverged, else every other ref (a
// diverged task's rows to this host's forks of it).
func divergedPushed(res *bernstein.PushResult, ds []bernstein.Divergence) string {
	var tasks []string
	for _, d := range ds {
		if d.Task == "" {
			return pushedAnyway(res, "had been", " (the remote does not support atomic pushes)")
		}
		if len(tasks) == 0 || tasks[len(tasks)-1] != d.Task {
			tasks = append(tasks, d.Task)
		}
	}
	what := "nothing else needed pushing"
	if n := len(res.Pushed); n > 0 {
		what = fmt.Sprintf("the %d other ref%s that did not diverge were pushed", n, plural(n))
	}
	return fmt.Sprintf("only task %s is held back: %s, and this host's rows of it went to its forks (refs/bernstein/forks/). Resolve it with 'bernstein task adopt %s %s'",
		strings.Join(tasks, ", "), what, tasks[0], res.Remote)
}

func pushedAnyway(res *bernstein.PushResult, were, why string) string {
	if len(res.Pushed) == 0 {
		return "nothing was pushed"
	}
	return fmt.Sprintf("%d other ref%s %s pushed one by one%s", len(res.Pushed), plural(len(res.Pushed)), were, why)
}

// printPushed says what a push sent.
func printPushed(sio *IO, remote string, res *bernstein.PushResult) {
	how := "atomic"
	if !res.Atomic {
		how = "one by one: the remote does not support atomic pushes"
	}
	switch {
	case len(res.Pushed)+len(res.Deleted) == 0:
		fmt.Fprintf(sio.Out, "nothing to push to %s (%d refs up to date)\n", remote, res.UpToDate)
	case len(res.Deleted) == 0:
		fmt.Fprintf(sio.Out, "pushed to %s (%s): %d ref%s, %d up to date\n", remote, how, len(res.Pushed), plural(len(res.Pushed)), res.UpToDate)
	default:
		fmt.Fprintf(sio.Out, "pushed to %s (%s): %d ref%s, %d up to date, %d ref%s of archived tasks deleted there\n", remote, how,
			len(res.Pushed), plural(len(res.Pushed)), res.UpToDate, len(res.Deleted), plural(len(res.Deleted)))
	}
	printChanges(sio, "pushed", res.Pushed)
	printChanges(sio, "deleted", res.Deleted)
	if res.Replanned > 0 {
		fmt.Fprintf(sio.Out, "%s had moved refs meanwhile (another push): push fetched its heads and planned again\n", remote)
	}
	if n := len(res.RemoteAhead); n > 0 {
		fmt.Fprintf(sio.Out, "%s has %d ref%s newer than this host: bernstein push %s\n", remote, n, plural(n), remote)
	}
}

// printAutoArchive says what the automatic archive did before the push:
// the tasks it archived on stdout, those it passed over on stderr (its
// failure was warned of as it happened).
func printAutoArchive(sio *IO, a *bernstein.AutoArchive) {
	if a == nil {
		return
	}
	for _, p := range a.PassedOver {
		fmt.Fprintf(sio.Err, "note: the automatic archive passed over %s: %s\n", p.Task, p.Reason)
	}
	if n := len(a.Archived); n > 0 {
		fmt.Fprintf(sio.Out, "archived %d task%s ended %s ago or more (%d commit%s): %s\n", n, plural(n), a.EndedBefore, len(a.Commits), plural(len(a.Commits)), strings.Join(a.Archived, " "))
	}
}
