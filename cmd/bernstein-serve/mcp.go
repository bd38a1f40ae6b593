package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/server"
)

// 'mcp --http': the MCP tools over streamable HTTP alone ('bernstein mcp'
// serves them over stdio itself).

type mcpOptions struct {
	IO          *IO
	Store       openFunc
	HTTP        string
	AllowRemote bool
}

const mcpLong = `Serve bernstein's MCP tools over streamable HTTP at http://ADDR/mcp, as
'bernstein mcp --http ADDR' does (see its help); over stdio, 'bernstein mcp'
serves them itself.`

func newMCPCmd(f *factory, runF func(context.Context, *mcpOptions) error) *cobra.Command {
	o := &mcpOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "mcp --http ADDR [--allow-remote]",
		Short: "Serve the MCP tools over streamable HTTP",
		Long:  mcpLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if runF != nil {
				return runF(ctx, o)
			}
			return mcpRun(ctx, o)
		},
	}
	cmd.Flags().StringVar(&o.HTTP, "http", "", "serve streamable HTTP on ADDR (host:port, e.g. 127.0.0.1:0)")
	cmd.Flags().BoolVar(&o.AllowRemote, "allow-remote", false, "allow an address that is not on loopback")
	return cmd
}

// mcpRun listens on o.HTTP and serves the MCP endpoint until ctx ends.
func mcpRun(ctx context.Context, o *mcpOptions) error {
	if o.HTTP == "" {
		return errors.New("bernstein-serve serves MCP over HTTP only: pass --http ADDR ('bernstein mcp' serves it over stdio)")
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		l, err := server.Listen(o.HTTP, o.AllowRemote)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.IO.Err, "bernstein: serving MCP at %s%s (Authorization: Bearer <claim token>)\n", server.URL(l), server.MCPPath)
		return server.Serve(ctx, l, server.Handler(s, server.Options{Version: version}))
	})
}
