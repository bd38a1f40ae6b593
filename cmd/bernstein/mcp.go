package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/server"
)

const mcpTools = `Tools:
  bernstein_post_artifact  task_id, key, artifact_type (report | table | link) and
                           per type body | columns + rows | url + link_kind: post a
                           version to a task whose live claim the caller holds
  bernstein_task_handle    task_id: taskId, status, journalHead, spineHead,
                           progress, progressHash and receiptHash of a task`

func newMCPCmd(g *globals, io *IO) *cobra.Command {
	var agent, httpAddr string
	var tokens []string
	var allowRemote bool
	cmd := &cobra.Command{
		Use:   "mcp [--agent A --claim-token T ...] | mcp --http ADDR",
		Short: "Serve the MCP tools over stdio (or streamable HTTP)",
		Long: `Serve bernstein's MCP tools. The caller's identity comes from the transport,
never from a tool argument.

Over stdio (the default) the server runs as one agent: --agent (or
BERNSTEIN_AGENT) with the claim tokens 'bernstein task claim' printed for it,
--claim-token (repeatable, one per claimed task; or BERNSTEIN_CLAIM_TOKEN).
A post to a task whose live claim the agent and its tokens do not hold is
refused with a tool error, and the refusal is recorded in the audit mirror.

With --http ADDR it serves streamable HTTP at http://ADDR/mcp instead; every
request carries 'Authorization: Bearer <claim token>', which stands for one
agent on one task and stops working the moment the claim is released or the
task ends (401). ADDR must be on loopback unless --allow-remote; port 0 picks
a free port. The URL is printed on stderr once the server listens.

` + mcpTools + `

Exit status: 0 when the client closes the connection or on SIGINT/SIGTERM;
1 on bad flags, a repository that cannot be opened, or an address that
cannot be listened on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if httpAddr != "" {
				if cmd.Flags().Changed("agent") || cmd.Flags().Changed("claim-token") {
					return exitCode(1, errors.New("--agent and --claim-token apply to the stdio server: over HTTP the caller is the bearer claim token of each request"))
				}
				return serveHTTP(ctx, g, io, httpAddr, allowRemote)
			}
			if allowRemote {
				return exitCode(1, errors.New("--allow-remote applies to --http"))
			}
			agent = envDefault(agent, "BERNSTEIN_AGENT")
			if len(tokens) == 0 {
				if t := os.Getenv("BERNSTEIN_CLAIM_TOKEN"); t != "" {
					tokens = []string{t}
				}
			}
			if agent != "" {
				if err := bernstein.ValidateAgent(agent); err != nil {
					return exitCode(1, err)
				}
			} else if len(tokens) > 0 {
				return exitCode(1, errors.New("a claim token needs its agent: pass --agent or set BERNSTEIN_AGENT"))
			}
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			srv := mcpserver.New(s, mcpserver.Options{Identity: mcpserver.AgentIdentity(agent, tokens...), Version: version})
			if err := srv.Run(ctx, stdioTransport(io)); !sessionEnded(err) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&agent, "agent", "", "stdio: the agent the server runs as (default $BERNSTEIN_AGENT)")
	f.StringArrayVar(&tokens, "claim-token", nil, "stdio: a claim token of the agent (repeatable; default $BERNSTEIN_CLAIM_TOKEN)")
	f.StringVar(&httpAddr, "http", "", "serve streamable HTTP on ADDR (host:port, e.g. 127.0.0.1:0) instead of stdio")
	f.BoolVar(&allowRemote, "allow-remote", false, "with --http: allow an address that is not on loopback")
	cmd.AddCommand(newMCPConfigCmd(g, io))
	return cmd
}

func newServeCmd(g *globals, io *IO) *cobra.Command {
	var addr, readToken string
	var allowRemote bool
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:7420] [--allow-remote] [--read-token T]",
		Short: "Serve bernstein over HTTP: the pages, the task API, events and MCP",
		Long: `Serve bernstein over HTTP on ADDR, loopback only unless --allow-remote.

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
be opened, or an address that cannot be listened on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			readToken = envDefault(readToken, "BERNSTEIN_READ_TOKEN")
			if readToken != "" {
				if err := server.ValidateReadToken(readToken); err != nil {
					return exitCode(1, fmt.Errorf("--read-token: %w", err))
				}
			} else if allowRemote {
				readToken = server.NewReadToken()
			}
			return serveAll(ctx, g, io, addr, allowRemote, readToken)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", server.DefaultAddr, "listen on ADDR (host:port)")
	cmd.Flags().BoolVar(&allowRemote, "allow-remote", false, "allow an address that is not on loopback (requires a read token: generated unless given)")
	cmd.Flags().StringVar(&readToken, "read-token", "", "the read token every request but MCP's must show (default $BERNSTEIN_READ_TOKEN; generated with --allow-remote)")
	return cmd
}

// serveHTTP opens the store, listens on addr and serves until ctx ends.
func serveHTTP(ctx context.Context, g *globals, io *IO, addr string, allowRemote bool) error {
	s, err := g.open()
	if err != nil {
		return err
	}
	defer s.Close()
	l, err := server.Listen(addr, allowRemote)
	if err != nil {
		return exitCode(1, err)
	}
	fmt.Fprintf(io.Err, "bernstein: serving MCP at %s%s (Authorization: Bearer <claim token>)\n", server.URL(l), server.MCPPath)
	return server.Serve(ctx, l, server.Handler(s, server.Options{Version: version}))
}

// serveAll serves everything `bernstein serve` serves: the MCP endpoint,
// the task API, the event stream and the pages; with a read token, every
// request but MCP's must show it.
func serveAll(ctx context.Context, g *globals, io *IO, addr string, allowRemote bool, readToken string) error {
	s, err := g.open()
	if err != nil {
		return err
	}
	defer s.Close()
	l, err := server.Listen(addr, allowRemote)
	if err != nil {
		return exitCode(1, err)
	}
	// Problems the server meets after it started (a scan of the refs that
	// failed, the event log) go to stderr.
	logger := slog.New(slog.NewTextHandler(io.Err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.New(s, server.Options{Version: version, ReadToken: readToken, Logger: logger})
	if err != nil {
		l.Close()
		return err
	}
	defer srv.Close()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go srv.Run(ctx)
	base := server.URL(l)
	fmt.Fprintf(io.Err, "bernstein: serving MCP at %s%s (Authorization: Bearer <claim token>)\n", base, server.MCPPath)
	if readToken != "" {
		fmt.Fprintf(io.Err, "bernstein: every request but MCP's needs the read token: API clients send 'Authorization: Bearer %s'\n", readToken)
	}
	fmt.Fprintf(io.Err, "bernstein: open %s (tasks), API at %s/api/v1, events at %s%s\n", server.ReadURL(base, readToken), base, base, server.EventsPath)
	return srv.Serve(ctx, l)
}

// stdioTransport speaks MCP over the command's stdin and stdout.
func stdioTransport(in *IO) mcp.Transport {
	return mcpserver.StdioTransport(in.In, in.Out)
}

// sessionEnded tells a session the client closed (or a signal ended) from a
// failure.
func sessionEnded(err error) bool {
	return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed)
}
