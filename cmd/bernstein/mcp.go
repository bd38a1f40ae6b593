package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/servecmd"
	"github.com/bernstein/bernstein/mcpserver"
)

// 'mcp': bernstein's MCP tools over stdio, or streamable HTTP ('mcp config'
// is in mcp_config.go, 'serve' in serve.go).

type mcpOptions struct {
	IO    *IO
	Store openFunc

	Agent       string   // stdio: the agent the server runs as
	Tokens      []string // stdio: its claim tokens
	HTTP        string   // serve streamable HTTP on this address instead
	AllowRemote bool
	// Args is the server program's command line over HTTP: 'mcp' and
	// the flags given (servecmd.PassOn).
	Args []string
	// IdentitySet: --agent or --claim-token was given (over HTTP, the
	// caller is each request's bearer token).
	IdentitySet bool
}

const mcpLong = `Serve bernstein's MCP tools. The caller's identity comes from the transport,
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
a free port. The URL is printed on stderr once the server listens. Over HTTP
the server is the program bernstein-serve, as for 'bernstein serve', which
this command then becomes.

` + servecmd.MCPTools + `

Exit status: 0 when the client closes the connection or on SIGINT/SIGTERM;
1 on bad flags, a repository that cannot be opened, an address that cannot
be listened on, or (--http) no bernstein-serve.`

func newMCPCmd(f *factory, runF func(context.Context, *mcpOptions) error) *cobra.Command {
	o := &mcpOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "mcp [--agent A --claim-token T ...] | mcp --http ADDR",
		Short: "Serve the MCP tools over stdio (or streamable HTTP)",
		Long:  mcpLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.IdentitySet = cmd.Flags().Changed("agent") || cmd.Flags().Changed("claim-token")
			if o.HTTP != "" {
				o.Args = servecmd.PassOn("mcp", cmd.Flags())
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return mcpRun(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Agent, "agent", "", "stdio: the agent the server runs as (default $BERNSTEIN_AGENT)")
	fl.StringArrayVar(&o.Tokens, "claim-token", nil, "stdio: a claim token of the agent (repeatable; default $BERNSTEIN_CLAIM_TOKEN)")
	fl.StringVar(&o.HTTP, "http", "", "serve streamable HTTP on ADDR (host:port, e.g. 127.0.0.1:0) instead of stdio")
	fl.BoolVar(&o.AllowRemote, "allow-remote", false, "with --http: allow an address that is not on loopback")
	cmd.AddCommand(newMCPConfigCmd(f, nil))
	return cmd
}

// mcpRun serves until the client closes the connection or ctx ends.
func mcpRun(ctx context.Context, o *mcpOptions) error {
	if o.HTTP != "" {
		if o.IdentitySet {
			return exitCode(1, errors.New("--agent and --claim-token apply to the stdio server: over HTTP the caller is the bearer claim token of each request"))
		}
		return exitCode(1, execServer(o.Args))
	}
	if o.AllowRemote {
		return exitCode(1, errors.New("--allow-remote applies to --http"))
	}
	agent, tokens := envDefault(o.Agent, "BERNSTEIN_AGENT"), o.Tokens
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
	// Over HTTP this process becomes the server (above) and must not catch
	// a signal first; over stdio it ends on one.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return withStore(o.Store, func(s *bernstein.Store) error {
		srv := mcpserver.New(s, mcpserver.Options{Identity: mcpserver.AgentIdentity(agent, tokens...), Version: version})
		if err := srv.Run(ctx, mcpserver.StdioTransport(o.IO.In, o.IO.Out)); !sessionEnded(err) {
			return err
		}
		return nil
	})
}

// sessionEnded tells a session the client closed (or a signal ended) from a
// failure.
func sessionEnded(err error) bool {
	return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed)
}
