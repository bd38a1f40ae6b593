package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

// 'remote setup', and what push, fetch and clone (push.go, fetch.go,
// clone.go) print alike.

// exitDiverged is the exit status of push and fetch when a ref moved on both
// sides (two hosts wrote to one task) or the remote rejected refs this host
// moved because it holds commits this host lacks.
const exitDiverged = 5

func newRemoteCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{Use: "remote", Short: "Set up git remotes for refs/bernstein/*"}
	cmd.AddCommand(newRemoteSetupCmd(f, nil))
	return cmd
}

type remoteSetupOptions struct {
	IO      *IO
	Options func() bernstein.Options
	Remote  string
	JSON    bool
}

const remoteSetupLong = `Configure REMOTE (default origin) so that plain git moves refs/bernstein/*
safely, fast-forward only (no refspec carries '+'):

  remote.REMOTE.fetch = refs/bernstein/*:refs/bernstein-remotes/REMOTE/*
  remote.REMOTE.push  = HEAD                    (only if it had no push refspec)
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

Exit status: 0 configured (or already configured); 1 no such remote, or error.`

func newRemoteSetupCmd(f *factory, runF func(*remoteSetupOptions) error) *cobra.Command {
	o := &remoteSetupOptions{IO: f.IO, Options: f.Options}
	cmd := &cobra.Command{
		Use:   "setup [REMOTE]",
		Short: "Configure a remote's fetch and push refspecs for refs/bernstein/*",
		Long:  remoteSetupLong,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Remote = remoteArg(args)
			if runF != nil {
				return runF(o)
			}
			return remoteSetupRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON")
	return cmd
}

func remoteSetupRun(o *remoteSetupOptions) error {
	res, err := bernstein.RemoteSetup(o.Options(), o.Remote)
	if err != nil {
		return err
	}
	if o.JSON {
		return printJSON(o.IO, res)
	}
	printSetup(o.IO, res)
	return nil
}

// remoteArg is the remote a command names, origin when none.
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
		switch {
		case c.New == "":
			span = "was " + short(c.Old) // deleted
		case c.Old != "":
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
