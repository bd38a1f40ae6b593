package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

type cloneOptions struct {
	IO      *IO
	Options func() bernstein.Options
	URL     string
	Dir     string // "": as git names it
	JSON    bool
}

const cloneLong = `Run 'git clone URL DIR' (DIR named as git names it when omitted), set up the
origin remote's refspecs as 'bernstein remote setup' does, and fetch
refs/bernstein/* as 'bernstein fetch' does. Then list the writers whose keys
the repository publishes, with each key's SHA256 fingerprint.

A clone trusts nobody on its own: published keys tell "unverifiable" from
"tampered", never "verified". Compare each fingerprint with its writer out of
band, then pin it ('bernstein keys pin WRITER', or '--all'). No writer
identity is created; run 'bernstein init' in the clone to write.

It sets up git's diff of artifact versions in the clone, as 'bernstein init'
does (docs/format.md, "Diffing with git").

With witnesses configured for the repository in BERNSTEIN_HOME, the fetch
checks every writer's log and asks the witnesses whether they saw it
further: a rolled-back or forked remote fails the clone (exit 1) and no
refs/bernstein/* ref moves (docs/trust.md, Witnesses).

Exit status: 0 cloned; 1 error (git clone failed, DIR is not empty); 2
cloned, but the remote holds commits that do not verify here: they were
held back (named, and kept in refs/bernstein-remotes/origin/), as 'bernstein
fetch' holds them back.`

func newCloneCmd(f *factory, runF func(*cloneOptions) error) *cobra.Command {
	o := &cloneOptions{IO: f.IO, Options: f.Options}
	cmd := &cobra.Command{
		Use:   "clone URL [DIR]",
		Short: "Clone a repository with refs/bernstein/*; list the writers' keys",
		Long:  cloneLong,
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.URL = args[0]
			if len(args) > 1 {
				o.Dir = args[1]
			}
			if runF != nil {
				return runF(o)
			}
			return cloneRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON")
	return cmd
}

func cloneRun(o *cloneOptions) error {
	opts := o.Options()
	opts.Repo = ""
	res, err := bernstein.Clone(o.URL, o.Dir, opts)
	var held *bernstein.HeldBackError
	if err != nil && (res == nil || !errors.As(err, &held)) {
		return err
	}
	driver, err := bernstein.SetupDiffDriver(res.GitDir)
	if err != nil {
		return fmt.Errorf("cloned into %s, but setting up git's diff of artifact versions failed: %w", res.Dir, err)
	}
	if o.JSON {
		return printJSON(o.IO, struct {
			*bernstein.CloneResult
			DiffDriver *bernstein.DiffDriverResult `json:"diff_driver"`
		}{res, driver})
	}
	fmt.Fprintf(o.IO.Out, "cloned %s into %s\n", res.URL, res.Dir)
	printDiffDriver(o.IO, driver)
	for _, w := range res.Setup.Warnings {
		fmt.Fprintf(o.IO.Err, "warning: %s\n", w)
	}
	printFetch(o.IO, res.Fetch)
	printCloneWriters(o.IO, res)
	if held != nil {
		return exitCode(2, held)
	}
	return nil
}

// printCloneWriters lists the writers whose keys a clone publishes, and
// what to do before trusting them.
func printCloneWriters(sio *IO, res *bernstein.CloneResult) {
	if len(res.Writers) == 0 {
		fmt.Fprintln(sio.Out, "no writer keys are published in this repository")
		return
	}
	fmt.Fprintf(sio.Out, "writers whose keys the repository publishes (none is trusted yet):\n")
	for _, w := range res.Writers {
		fp := w.Fingerprint
		if fp == "" {
			fp = "(the published key does not parse)"
		}
		fmt.Fprintf(sio.Out, "  %-24s %s %s\n", w.Writer, fp, w.KeyType)
	}
	fmt.Fprintf(sio.Out, "Check each fingerprint with its writer, out of band, then pin the keys you trust:\n")
	fmt.Fprintf(sio.Out, "  cd %s && bernstein keys pin WRITER    (or: bernstein keys pin --all)\n", shellWord(res.Dir))
	fmt.Fprintf(sio.Out, "Until then their rows read unverifiable, never verified.\n")
}
