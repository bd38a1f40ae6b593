package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/servecmd"
)

// The commands have the shape of bernstein's (docs/architecture.md, The
// CLI): an options struct, a constructor that only parses flags into it,
// and a run function that does the work on the options' streams.

// version is bernstein's (cmd/bernstein), which a test holds equal.
const version = "0.1.0"

// IO is where a command reads and writes; tests swap it.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

func newIO() *IO { return &IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }

// factory holds the streams and the global flags, as bernstein's does.
type factory struct {
	IO             *IO
	repo           string
	allowedSigners string
}

// Store opens the repository the global flags (or their environment
// variables) name, as bernstein does.
func (f *factory) Store() (*bernstein.Store, error) {
	as := f.allowedSigners
	if as == "" {
		as = os.Getenv("BERNSTEIN_ALLOWED_SIGNERS")
	}
	w := f.IO.Err
	return bernstein.Open(bernstein.Options{Repo: f.repo, AllowedSigners: as,
		Warn: func(msg string) { fmt.Fprintln(w, "warning: "+msg) }})
}

type openFunc func() (*bernstein.Store, error)

// withStore opens the store, runs use on it and closes it.
var withStore = servecmd.WithStore

const rootLong = `bernstein-serve is bernstein's HTTP server: the task pages, the task API,
the event stream and the MCP tools over streamable HTTP. 'bernstein serve'
and 'bernstein mcp --http' run it, with their own arguments: see their help.

Exit status: 0 on SIGINT/SIGTERM; 1 on bad flags, a repository that cannot
be opened, or an address that cannot be listened on.`

func newRootCmd(sio *IO) *cobra.Command {
	f := &factory{IO: sio}
	root := &cobra.Command{
		Use:           servecmd.Program,
		Short:         "bernstein's HTTP server: pages, task API, events and MCP over HTTP",
		Long:          rootLong,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(sio.Out)
	root.SetErr(sio.Err)
	root.SetIn(sio.In)
	root.PersistentFlags().StringVar(&f.repo, "repo", "", "repository directory (default $BERNSTEIN_REPO, else the enclosing repository)")
	root.PersistentFlags().StringVar(&f.allowedSigners, "allowed-signers", "", "pin writer keys from this allowed_signers file (default $BERNSTEIN_ALLOWED_SIGNERS)")
	root.AddCommand(newServeCmd(f, nil), newMCPCmd(f, nil))
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetUsageTemplate(servecmd.UsageTemplate(root.UsageTemplate()))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})
	return root
}

// run executes the command line and returns the exit status: every error
// is status 1, printed on stderr as one line, as bernstein prints it.
func run(args []string, sio *IO) int {
	root := newRootCmd(sio)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(sio.Err, "bernstein: "+servecmd.OneLine(userMessage(err)))
		return 1
	}
	return 0
}

// userMessage is bernstein's wording of the errors opening a repository
// can meet.
func userMessage(err error) string {
	if msg, ok := servecmd.OpenMessage(err); ok {
		return msg
	}
	return err.Error()
}
