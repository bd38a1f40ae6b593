package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

// exitDiverged is the exit status of push and fetch when a ref moved on both
// sides (two hosts wrote to one task) or the remote rejected refs this host
// moved because it holds commits this host lacks.
const exitDiverged = 5

// remoteCommands are the commands that move refs/bernstein/* between this
// repository and its remotes.
func remoteCommands(g *globals, io *IO) []*cobra.Command {
	return []*cobra.Command{newRemoteCmd(g, io), newPushCmd(g, io), newFetchCmd(g, io), newCloneCmd(g, io)}
}

func newRemoteCmd(g *globals, io *IO) *cobra.Command {
	cmd := &cobra.Command{Use: "remote", Short: "Set up git remotes for refs/bernstein/*"}
	var asJSON bool
	setup := &cobra.Command{
		Use:   "setup [REMOTE]",
		Short: "Configure a remote's fetch and push refspecs for refs/bernstein/*",
		Long: `Configure REMOTE (default origin) so that plain git moves refs/bernstein/*
safely, fast-forward only (no refspec carries '+'):

  remote.REMOTE.fetch = refs/bernstein/*:refs/bernstein-remotes/REMOTE/*
  remote.REMOTE.push  = HEAD                    (only when it had no push refspec)
  remote.REMOTE.push  = refs/bernstein/*:refs/bernstein/*

A plain 'git fetch' brings the objects and the remote's heads into the
remote-tracking refs refs/bernstein-remotes/REMOTE/*; 'bernstein fetch' moves
the local refs/bernstein/* refs forward to them, under the writer lock (a
'git fetch --prune' straight into refs/bernstein/* would delete the local refs
the remote lacks). A plain 'git push' pushes the current branch, as before
(git ignores push.default once a remote has a push refspec, hence HEAD), and
every refs/bernstein/* ref, which the remote refuses unless it is a
fast-forward. Existing refspecs are kept; forced ones that touch
refs/bernstein/ are named in a warning. Running it again changes nothing.

Exit status: 0 configured (or already configured); 1 no such remote, or error.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote := remoteArg(args)
			res, err := bernstein.RemoteSetup(g.options(), remote)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(io, res)
			}
			printSetup(io, res)
			return nil
		},
	}
	setup.Flags().BoolVar(&asJSON, "output-json", false, "print the result as JSON")
	cmd.AddCommand(setup)
	return cmd
}

func remoteArg(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return "origin"
}

func printSetup(io *IO, res *bernstein.RemoteSetupResult) {
	for _, a := range res.Added {
		fmt.Fprintf(io.Out, "added:      %s\n", a)
	}
	for _, p := range res.Present {
		fmt.Fprintf(io.Out, "present:    %s\n", p)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(io.Err, "warning: %s\n", w)
	}
}

// listLimit bounds the refs listed one per line; the rest are counted.
const listLimit = 20

func printChanges(io *IO, verb string, cs []bernstein.RefChange) {
	for i, c := range cs {
		if i == listLimit {
			fmt.Fprintf(io.Out, "  ... and %d more\n", len(cs)-listLimit)
			return
		}
		span := short(c.New)
		if c.Old != "" {
			span = short(c.Old) + ".." + short(c.New)
		}
		n := ""
		if c.Commits > 0 {
			n = fmt.Sprintf(" (+%d)", c.Commits)
		}
		fmt.Fprintf(io.Out, "  %-9s %s  %s%s\n", verb, c.What(), span, n)
	}
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// printDiverged explains each divergence on stderr: the ref, both heads, and
// what it means.
func printDiverged(io *IO, ds []bernstein.Divergence) {
	for _, d := range ds {
		fmt.Fprintln(io.Err, d.String())
		fmt.Fprintf(io.Err, "  %s\n", d.Meaning())
		fmt.Fprintf(io.Err, "  this host: %s   the remote: %s\n", d.Local, d.Remote)
	}
}

func newPushCmd(g *globals, io *IO) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "push [REMOTE]",
		Short: "Push every refs/bernstein/* ref this host moved, in one atomic push",
		Long: `Push refs/bernstein/* to REMOTE (default origin, a configured remote).

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

Exit status: 0 pushed (or nothing to push); 1 error, the pre-push hook
stopped the push, or the remote refused (a hook); 5 a ref diverged, or the remote kept moving a ref this host moved
too (nothing pushed when atomic): run 'bernstein fetch'.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote := remoteArg(args)
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			res, err := s.Push(remote)
			if res != nil && asJSON {
				if perr := printJSON(io, res); perr != nil {
					return perr
				}
			}
			var div *bernstein.DivergedError
			var rej *bernstein.RejectedError
			var ref *bernstein.RemoteRefusedError
			var pre *bernstein.PrePushError
			switch {
			case errors.As(err, &pre):
				// The hook's words once (git would have shown them as it
				// ran), then one line that does not repeat them.
				for _, m := range pre.Messages {
					fmt.Fprintln(io.Err, m)
				}
				return exitCode(1, errors.New(pre.Summary()))
			case errors.As(err, &div):
				if !asJSON {
					printDiverged(io, div.Diverged)
				}
				what := "nothing was pushed"
				if len(res.Pushed) > 0 {
					what = fmt.Sprintf("%d other ref%s had been pushed one by one (the remote does not support atomic pushes)", len(res.Pushed), plural(len(res.Pushed)))
				}
				fmt.Fprintf(io.Err, "%s. 'bernstein fetch %s' reports the same; see docs/remotes.md, Divergence\n", what, remote)
				return exitCode(exitDiverged, fmt.Errorf("push to %s: %d ref%s diverged (%s)", remote, len(div.Diverged), plural(len(div.Diverged)), div.Diverged[0].What()))
			case errors.As(err, &rej):
				if !asJSON {
					for _, r := range rej.Rejected {
						fmt.Fprintf(io.Err, "rejected: %s (%s): %s holds commits this host lacks\n", r.What(), r.Reason, remote)
					}
				}
				what := "nothing was pushed"
				if len(res.Pushed) > 0 {
					what = fmt.Sprintf("%d other ref%s were pushed one by one (the remote does not support atomic pushes)", len(res.Pushed), plural(len(res.Pushed)))
				}
				fmt.Fprintf(io.Err, "%s. Next: 'bernstein fetch %s' (it fast-forwards, or names the task that diverged), then push again\n", what, remote)
				return exitCode(exitDiverged, fmt.Errorf("push to %s rejected: %s moved on the remote meanwhile", remote, rej.Rejected[0].What()))
			case errors.As(err, &ref):
				// The remote's words once, then one line that does not
				// repeat them.
				for _, m := range ref.Messages {
					fmt.Fprintf(io.Err, "remote: %s\n", m)
				}
				what := "nothing was pushed"
				if len(res.Pushed) > 0 {
					what = fmt.Sprintf("%d other ref%s were pushed one by one", len(res.Pushed), plural(len(res.Pushed)))
				}
				why := "its reasons are above"
				if len(ref.Messages) == 0 {
					why = "it gave no reason"
				}
				return exitCode(1, fmt.Errorf("%s: %s; %s", ref.Summary(), why, what))
			case err != nil:
				return err
			}
			if asJSON {
				return nil
			}
			how := "atomic"
			if !res.Atomic {
				how = "one by one: the remote does not support atomic pushes"
			}
			if len(res.Pushed) == 0 {
				fmt.Fprintf(io.Out, "nothing to push to %s (%d refs up to date)\n", remote, res.UpToDate)
			} else {
				fmt.Fprintf(io.Out, "pushed to %s (%s): %d ref%s, %d up to date\n", remote, how, len(res.Pushed), plural(len(res.Pushed)), res.UpToDate)
				printChanges(io, "pushed", res.Pushed)
			}
			if res.Replanned > 0 {
				fmt.Fprintf(io.Out, "%s had moved refs meanwhile (another push): push fetched its heads and planned again\n", remote)
			}
			if n := len(res.RemoteAhead); n > 0 {
				fmt.Fprintf(io.Out, "%s has %d ref%s newer than this host: bernstein fetch %s\n", remote, n, plural(n), remote)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the result as JSON (also when the push is rejected)")
	return cmd
}

func newFetchCmd(g *globals, io *IO) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fetch [REMOTE]",
		Short: "Fetch refs/bernstein/* and fast-forward the local refs",
		Long: `Fetch REMOTE's (default origin) refs/bernstein/* into the remote-tracking refs
refs/bernstein-remotes/REMOTE/*, then move the local refs forward to them in
one ref transaction under the writer lock (as a post does: a concurrent post
is never lost, readers never see half of it): a ref this host lacks is
created, one the remote extends is fast-forwarded, one this host has newer is
left as it is (push it).

If any ref diverged, nothing local moves, and each is named with both heads:
a task journal or ledger when two hosts wrote to one task, a writer's spine,
audit mirror or key ref when one writer identity wrote on two hosts (or a
chain was rewritten). The remote's heads stay in the remote-tracking refs for
inspection ('git log refs/bernstein-remotes/REMOTE/journal/TASK'). See
docs/remotes.md, Divergence.

Exit status: 0 fetched (also when nothing was new); 1 error; 5 a ref
diverged: nothing local moved.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote := remoteArg(args)
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			res, err := s.Fetch(remote)
			keyNotes(io, s, res)
			if res != nil && asJSON {
				if perr := printJSON(io, res); perr != nil {
					return perr
				}
			}
			var div *bernstein.DivergedError
			if errors.As(err, &div) {
				if !asJSON {
					printDiverged(io, div.Diverged)
				}
				fmt.Fprintf(io.Err, "nothing local moved; the remote's heads are under %s\n", bernstein.TrackingPrefix(remote))
				return exitCode(exitDiverged, fmt.Errorf("fetch from %s: %d ref%s diverged (%s)", remote, len(div.Diverged), plural(len(div.Diverged)), div.Diverged[0].What()))
			}
			if err != nil {
				return err
			}
			if !asJSON {
				printFetch(io, res)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the result as JSON (also when something diverged)")
	return cmd
}

// keyNotes tells, on stderr, what a fetch brought of writer keys: loudly a
// pinned writer whose published key is now another one, and the writers
// new here whose keys nothing pins yet.
func keyNotes(io *IO, s *bernstein.Store, res *bernstein.FetchResult) {
	wks, err := s.WriterKeys()
	if err != nil {
		fmt.Fprintf(io.Err, "warning: cannot list writer keys: %v\n", err)
		return
	}
	warnChanged(io, wks)
	if res == nil {
		return
	}
	created := map[string]bool{}
	for _, c := range res.Created {
		if c.Kind == "key" && c.Writer != "" {
			created[c.Writer] = true
		}
	}
	for _, wk := range wks {
		if created[wk.Writer] && wk.Trust == bernstein.TrustUnpinned {
			fmt.Fprintf(io.Err, "new writer %s publishes key %s, not pinned here: check it with its owner, then 'bernstein keys pin %s'\n", wk.Writer, wk.Fingerprint, wk.Writer)
		}
	}
}

func printFetch(io *IO, res *bernstein.FetchResult) {
	fmt.Fprintf(io.Out, "fetched from %s: %d ref%s created, %d fast-forwarded, %d up to date\n",
		res.Remote, len(res.Created), plural(len(res.Created)), len(res.Forwarded), res.UpToDate)
	printChanges(io, "created", res.Created)
	printChanges(io, "forwarded", res.Forwarded)
	if n := len(res.LocalAhead); n > 0 {
		fmt.Fprintf(io.Out, "this host has %d ref%s newer than %s: bernstein push %s\n", n, plural(n), res.Remote, res.Remote)
	}
}

func newCloneCmd(g *globals, io *IO) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "clone URL [DIR]",
		Short: "Clone a repository with its refs/bernstein/* and list the writers' keys",
		Long: `Run 'git clone URL DIR' (DIR named as git names it when omitted), set up the
origin remote's refspecs as 'bernstein remote setup' does, and fetch
refs/bernstein/* as 'bernstein fetch' does. Then list the writers whose keys
the repository publishes, with each key's SHA256 fingerprint.

A clone trusts nobody on its own: published keys tell "unverifiable" from
"tampered", never "verified". Compare each fingerprint with its writer out of
band, then pin it ('bernstein keys pin WRITER', or '--all'). No writer
identity is created; run 'bernstein init' in the clone to write.

It sets up git's diff of artifact versions in the clone, as 'bernstein init'
does (docs/format.md, "Diffing with git").

Exit status: 0 cloned; 1 error (git clone failed, DIR is not empty).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) > 1 {
				dir = args[1]
			}
			o := g.options()
			o.Repo = ""
			res, err := bernstein.Clone(args[0], dir, o)
			if err != nil {
				return err
			}
			driver, err := bernstein.SetupDiffDriver(res.GitDir)
			if err != nil {
				return fmt.Errorf("cloned into %s, but setting up git's diff of artifact versions failed: %w", res.Dir, err)
			}
			if asJSON {
				return printJSON(io, struct {
					*bernstein.CloneResult
					DiffDriver *bernstein.DiffDriverResult `json:"diff_driver"`
				}{res, driver})
			}
			fmt.Fprintf(io.Out, "cloned %s into %s\n", res.URL, res.Dir)
			printDiffDriver(io, driver)
			for _, w := range res.Setup.Warnings {
				fmt.Fprintf(io.Err, "warning: %s\n", w)
			}
			printFetch(io, res.Fetch)
			if len(res.Writers) == 0 {
				fmt.Fprintln(io.Out, "no writer keys are published in this repository")
				return nil
			}
			fmt.Fprintf(io.Out, "writers whose keys the repository publishes (none is trusted yet):\n")
			for _, w := range res.Writers {
				fp := w.Fingerprint
				if fp == "" {
					fp = "(the published key does not parse)"
				}
				fmt.Fprintf(io.Out, "  %-24s %s %s\n", w.Writer, fp, w.KeyType)
			}
			fmt.Fprintf(io.Out, "Check each fingerprint with its writer, out of band, then pin the keys you trust:\n")
			fmt.Fprintf(io.Out, "  cd %s && bernstein keys pin WRITER    (or: bernstein keys pin --all)\n", shellWord(res.Dir))
			fmt.Fprintf(io.Out, "Until then their rows read unverifiable, never verified.\n")
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the result as JSON")
	return cmd
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// shellWord quotes s for a shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
