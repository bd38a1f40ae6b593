package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

type fetchOptions struct {
	IO     *IO
	Store  openFunc
	Remote string
	JSON   bool
	Full   bool
}

const fetchLong = `Fetch REMOTE's (default origin) refs/bernstein/* into the remote-tracking refs
refs/bernstein-remotes/REMOTE/*, then move the local refs forward to them in
one ref transaction under the writer lock (as a post does: a concurrent post
is never lost, readers never see half of it): a ref this host lacks is
created, one the remote extends is fast-forwarded, one this host has newer is
left as it is (push it).

A ref moves only to commits that verify here, checked as the remote guard
checks a push (docs/remotes.md, Hooks) against this host's trust: signed by a
trusted key, or by the key its writer publishes (fetched unverifiable, for a
later pin to prove), chaining, and bound to the rows, spine entries, seals
and audit entries that move with it. What does not verify stays in the
remote-tracking refs, with whatever depends on it, and is named ("held
back"); nothing is built on it. This host's own chains (its spine, audit
mirror, key ref, anchors and forks) are never moved by a fetch. A remote read
while a push moved its refs (git reads them one by one) is fetched again.

After the first fetch from REMOTE, a fetch reads only the refs a writer has
a few of (spines, audit mirrors, key refs, anchors, forks, the repository's
identity) and the journals and ledgers of the tasks their new entries name,
so it costs what changed, not the number of tasks. A task ref moved on the
remote by plain git with no entry naming it is not read then (it stays where
it is here); --full reads and compares every ref, as the first fetch does.

A ref that both sides moved (diverged) does not move; everything that does
not depend on it does. Each is named with both heads: a task journal or
ledger when two hosts wrote to one task (resolve it with 'bernstein task
adopt TASK REMOTE'), a writer's spine, audit mirror or key ref when one
writer identity wrote on two hosts (or a chain was rewritten). The remote's
heads stay in the remote-tracking refs for inspection ('git log
refs/bernstein-remotes/REMOTE/journal/TASK'). See docs/remotes.md,
Divergence.

With witnesses configured ('bernstein witness'), every other writer's log
the remote holds is checked before anything moves: its checkpoint signed by
the writer's trusted key, the spine matching it, its cosignatures, and no
rollback or fork against the newest cosigned checkpoint this host verified
(or, with none, against what the witnesses hold). A rolled-back, forked or
forged log refuses the whole fetch, naming the writer, the sizes and the
witness (exit 1); a log not cosigned yet is only reported.

A ref whose chain cannot be read as one, the remote's or this host's (plain
git moved it to a blob or a missing object, or wrote text over its loose
file, which stops git's own fetch here and not this one), stays where it is
and is named ("warning: ... not fetched"; read_past in --output-json).

Exit status: 0 fetched (also when nothing was new); 1 error; 2 the remote
holds commits that do not verify here, or a ref whose chain cannot be read
as one (held back and named; the rest moved); 5 a ref diverged (named; the
rest moved).`

func newFetchCmd(f *factory, runF func(*fetchOptions) error) *cobra.Command {
	o := &fetchOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "fetch [REMOTE]",
		Short: "Fetch refs/bernstein/* and fast-forward the local refs",
		Long:  fetchLong,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Remote = remoteArg(args)
			if runF != nil {
				return runF(o)
			}
			return fetchRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON (also when something diverged)")
	cmd.Flags().BoolVar(&o.Full, "full", false, "read and compare every refs/bernstein/* ref of the remote, not only what the remote's new entries name")
	return cmd
}

func fetchRun(o *fetchOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.FetchWith(o.Remote, bernstein.FetchOptions{Full: o.Full})
		keyNotes(o.IO, s, res)
		if res != nil && o.JSON {
			if perr := printJSON(o.IO, res); perr != nil {
				return perr
			}
		}
		if res != nil {
			// Read past, not fetched: said whatever else happened.
			for _, b := range res.ReadPast {
				fmt.Fprintf(o.IO.Err, "warning: %s; not fetched\n", b)
			}
		}
		var div *bernstein.DivergedError
		var held *bernstein.HeldBackError
		if res != nil && !o.JSON && (err == nil || errors.As(err, &div) || errors.As(err, &held)) {
			printFetch(o.IO, res)
			printHeldBack(o.IO, res.HeldBack)
		}
		switch {
		case errors.As(err, &div):
			if !o.JSON {
				printDiverged(o.IO, div.Diverged)
			}
			fmt.Fprintf(o.IO.Err, "the diverged refs did not move; the remote's heads are under %s\n", bernstein.TrackingPrefix(o.Remote))
			return exitCode(exitDiverged, fmt.Errorf("fetch from %s: %d ref%s diverged (%s)", o.Remote, len(div.Diverged), plural(len(div.Diverged)), div.Diverged[0].What()))
		case errors.As(err, &held):
			return exitCode(exitHeldBack, errors.New(held.Error()))
		}
		return err
	})
}

// exitHeldBack is fetch's exit status when the remote holds commits that do
// not verify here: they were held back, the rest moved.
const exitHeldBack = 2

// printHeldBack names, on stderr, each ref a fetch held back and why (its
// first problems).
func printHeldBack(io *IO, hs []bernstein.HeldBack) {
	for _, h := range hs {
		fmt.Fprintln(io.Err, h.String())
		for i, p := range h.Problems {
			if i == 3 {
				fmt.Fprintf(io.Err, "  ... and %d more\n", len(h.Problems)-i)
				break
			}
			fmt.Fprintf(io.Err, "  %s\n", p)
		}
	}
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
	if n := len(res.Deleted); n > 0 {
		fmt.Fprintf(io.Out, "%d ref%s of tasks archived on %s deleted here (they read from the archive)\n", n, plural(n), res.Remote)
		printChanges(io, "deleted", res.Deleted)
	}
	if n := len(res.LocalAhead); n > 0 {
		fmt.Fprintf(io.Out, "this host has %d ref%s newer than %s: bernstein push %s\n", n, plural(n), res.Remote, res.Remote)
	}
	printLogs(io, res)
}

// printLogs says what the checks of the other writers' logs found (with
// witnesses configured): a log not cosigned is said, never called
// tampered.
func printLogs(io *IO, res *bernstein.FetchResult) {
	for _, l := range res.Logs {
		switch l.State {
		case "cosigned":
			fmt.Fprintf(io.Out, "log of writer %s: %d of %d entries cosigned by %s\n", l.Writer, l.Size, l.Spine, strings.Join(l.Cosigned, ", "))
		case "not_cosigned":
			fmt.Fprintf(io.Out, "log of writer %s: its checkpoint of %d entries has %d of the %d cosignatures needed (not yet cosigned)\n", l.Writer, l.Size, len(l.Cosigned), l.Need)
		case "no_checkpoint":
			fmt.Fprintf(io.Out, "log of writer %s: no checkpoint (the writer configures no witness)\n", l.Writer)
		default:
			fmt.Fprintf(io.Out, "log of writer %s: not checked, this host trusts no key of the writer\n", l.Writer)
		}
		for w, why := range l.Unreachable {
			fmt.Fprintf(io.Err, "warning: witness %s could not be asked about writer %s's log: %s\n", w, l.Writer, why)
		}
	}
}
