package main

import (
	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein/internal/servecmd"
)

// 'serve': the pages, the task API, the event stream and MCP over HTTP,
// served by the program bernstein-serve (cmd/bernstein-serve), which this
// command becomes: the server's packages are not linked into bernstein, so
// no other command pays their initialisation (docs/performance.md,
// Start-up).

type serveOptions struct {
	IO *IO
	// Args is the server program's command line: 'serve' and the flags
	// given (servecmd.PassOn).
	Args []string
}

func newServeCmd(f *factory, runF func(*serveOptions) error) *cobra.Command {
	o := &serveOptions{IO: f.IO}
	var flags servecmd.ServeFlags
	cmd := &cobra.Command{
		Use:   servecmd.ServeUse,
		Short: servecmd.ServeShort,
		Long:  servecmd.ServeLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = servecmd.PassOn("serve", cmd.Flags())
			if runF != nil {
				return runF(o)
			}
			return serveRun(o)
		},
	}
	flags.Bind(cmd.Flags())
	return cmd
}

// execServer replaces this process with bernstein-serve; tests of this
// package, which must not be replaced, swap it.
var execServer = servecmd.Exec

// serveRun becomes the server program, run with o.Args: it returns only
// when that program is missing.
func serveRun(o *serveOptions) error {
	return exitCode(1, execServer(o.Args))
}
