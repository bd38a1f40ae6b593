package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/servecmd"
	"github.com/bernstein/bernstein/server"
)

// 'serve': the pages, the task API, the event stream and MCP over HTTP.

type serveOptions struct {
	IO    *IO
	Store openFunc
	servecmd.ServeFlags
}

func newServeCmd(f *factory, runF func(context.Context, *serveOptions) error) *cobra.Command {
	o := &serveOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   servecmd.ServeUse,
		Short: servecmd.ServeShort,
		Long:  servecmd.ServeLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.ReadToken = envDefault(o.ReadToken, "BERNSTEIN_READ_TOKEN")
			if runF != nil {
				return runF(ctx, o)
			}
			return serveRun(ctx, o)
		},
	}
	o.Bind(cmd.Flags())
	return cmd
}

// envDefault is a flag's value, else its environment variable's.
func envDefault(flag, env string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(env)
}

// serveRun serves everything 'bernstein serve' serves until ctx ends: the
// MCP endpoint, the task API, the event stream and the pages; with a read
// token, every request but MCP's must show it.
func serveRun(ctx context.Context, o *serveOptions) error {
	readToken := o.ReadToken
	if readToken != "" {
		if err := server.ValidateReadToken(readToken); err != nil {
			return fmt.Errorf("--read-token: %w", err)
		}
	} else if o.AllowRemote {
		readToken = server.NewReadToken()
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		l, err := server.Listen(o.Addr, o.AllowRemote)
		if err != nil {
			return err
		}
		// Problems the server meets after it started (a scan of the refs
		// that failed, the event log) go to stderr.
		logger := slog.New(slog.NewTextHandler(o.IO.Err, &slog.HandlerOptions{Level: slog.LevelWarn}))
		srv, err := server.New(s, server.Options{Version: version, ReadToken: readToken, Logger: logger})
		if err != nil {
			l.Close()
			return err
		}
		defer srv.Close()
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		go srv.Run(ctx)
		printServing(o.IO, server.URL(l), readToken)
		return srv.Serve(ctx, l)
	})
}

// printServing says on stderr where the server listens, once it does.
func printServing(sio *IO, base, readToken string) {
	fmt.Fprintf(sio.Err, "bernstein: serving MCP at %s%s (Authorization: Bearer <claim token>)\n", base, server.MCPPath)
	if readToken != "" {
		fmt.Fprintf(sio.Err, "bernstein: every request but MCP's needs the read token: API clients send 'Authorization: Bearer %s'\n", readToken)
	}
	fmt.Fprintf(sio.Err, "bernstein: open %s (tasks), API at %s/api/v1, events at %s%s\n", server.ReadURL(base, readToken), base, base, server.EventsPath)
}
