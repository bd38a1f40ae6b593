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
	"github.com/bernstein/bernstein/server"
)

// 'serve': the pages, the task API, the event stream and MCP over HTTP.

type serveOptions struct {
	IO          *IO
	Store       openFunc
	Addr        string
	AllowRemote bool
	ReadToken   string // default $BERNSTEIN_READ_TOKEN; generated with --allow-remote
}

const serveLong = `Serve bernstein over HTTP on ADDR, loopback only unless --allow-remote.

  /              the tasks; /tasks/{id} one task, live
  /api/v1        the task API (JSON); /api/v1/events the event stream (SSE)
  /mcp           the MCP tools over streamable HTTP; each request carries
                 'Authorization: Bearer <claim token>' (the token 'bernstein
                 task claim' printed), which stands for one agent on one task
                 and stops working the moment the claim is released or the
                 task ends (401)

` + mcpTools + `

Who may see what (docs/http.md, Security): on loopback, reads are open and
writes need a claim token. With --allow-remote every request but MCP's also
needs the read token: serve generates one at start (or takes --read-token,
or BERNSTEIN_READ_TOKEN) and prints the URL that carries it; a page opened
from that URL keeps the token in a cookie, and API clients send
'Authorization: Bearer <read token>'. A read token given without
--allow-remote is required on loopback too. Cross-origin writes are refused.

Every connection has read, write and idle timeouts; connections, event
streams and MCP sessions are capped, and idle MCP sessions are closed.

Port 0 picks a free port. The URL is printed on stderr once the server
listens.

Exit status: 0 on SIGINT/SIGTERM; 1 on bad flags, a repository that cannot
be opened, or an address that cannot be listened on.`

func newServeCmd(f *factory, runF func(context.Context, *serveOptions) error) *cobra.Command {
	o := &serveOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:7420] [--allow-remote] [--read-token T]",
		Short: "Serve bernstein over HTTP: the pages, the task API, events and MCP",
		Long:  serveLong,
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
	cmd.Flags().StringVar(&o.Addr, "addr", server.DefaultAddr, "listen on ADDR (host:port)")
	cmd.Flags().BoolVar(&o.AllowRemote, "allow-remote", false, "allow an address that is not on loopback (requires a read token: generated unless given)")
	cmd.Flags().StringVar(&o.ReadToken, "read-token", "", "the read token every request but MCP's must show (default $BERNSTEIN_READ_TOKEN; generated with --allow-remote)")
	return cmd
}

// serveRun serves everything 'bernstein serve' serves until ctx ends: the
// MCP endpoint, the task API, the event stream and the pages; with a read
// token, every request but MCP's must show it.
func serveRun(ctx context.Context, o *serveOptions) error {
	readToken := o.ReadToken
	if readToken != "" {
		if err := server.ValidateReadToken(readToken); err != nil {
			return exitCode(1, fmt.Errorf("--read-token: %w", err))
		}
	} else if o.AllowRemote {
		readToken = server.NewReadToken()
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		l, err := server.Listen(o.Addr, o.AllowRemote)
		if err != nil {
			return exitCode(1, err)
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
