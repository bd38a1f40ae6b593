package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	return cmd
}

func newServeCmd(g *globals, io *IO) *cobra.Command {
	var addr string
	var allowRemote bool
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:7420]",
		Short: "Serve bernstein over HTTP (MCP at /mcp)",
		Long: `Serve bernstein over HTTP on ADDR, loopback only unless --allow-remote.

  /mcp   the MCP tools over streamable HTTP; each request carries
         'Authorization: Bearer <claim token>' (the token 'bernstein task
         claim' printed), which stands for one agent on one task and stops
         working the moment the claim is released or the task ends (401)

` + mcpTools + `

Port 0 picks a free port. The URL is printed on stderr once the server
listens.

Exit status: 0 on SIGINT/SIGTERM; 1 on bad flags, a repository that cannot
be opened, or an address that cannot be listened on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serveAll(ctx, g, io, addr, allowRemote)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", server.DefaultAddr, "listen on ADDR (host:port)")
	cmd.Flags().BoolVar(&allowRemote, "allow-remote", false, "allow an address that is not on loopback")
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
// the task API, the event stream and the pages.
func serveAll(ctx context.Context, g *globals, io *IO, addr string, allowRemote bool) error {
	s, err := g.open()
	if err != nil {
		return err
	}
	defer s.Close()
	l, err := server.Listen(addr, allowRemote)
	if err != nil {
		return exitCode(1, err)
	}
	srv, err := server.New(s, server.Options{Version: version})
	if err != nil {
		l.Close()
		return err
	}
	defer srv.Close()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go srv.Run(ctx)
	fmt.Fprintf(io.Err, "bernstein: serving MCP at %s%s (Authorization: Bearer <claim token>)\n", server.URL(l), server.MCPPath)
	fmt.Fprintf(io.Err, "bernstein: open %s/ (tasks), API at %s/api/v1, events at %s%s\n", server.URL(l), server.URL(l), server.URL(l), server.EventsPath)
	return server.Serve(ctx, l, srv.Handler())
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
