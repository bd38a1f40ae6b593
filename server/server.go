// Package server is bernstein's HTTP surface: one mux that 'bernstein serve'
// listens with. It mounts the MCP endpoint (streamable HTTP, bearer claim
// tokens) at /mcp; the task API, the event stream and the pages mount on the
// same mux. It listens on loopback unless told otherwise.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/mcpserver"
)

// DefaultAddr is where 'bernstein serve' listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7420"

// MCPPath is the path of the MCP endpoint.
const MCPPath = "/mcp"

// Options configure Handler.
type Options struct {
	// Version is announced by the MCP server.
	Version string
	// Logger receives diagnostics; nil logs nothing.
	Logger *slog.Logger
	// ReadToken, when set, is required of every request but MCP's (which
	// authenticates by claim token): see access.go and docs/http.md,
	// Security. --allow-remote requires one.
	ReadToken string
	// Limits bound connections, streams and MCP sessions; zero fields take
	// their defaults (DefaultLimits).
	Limits Limits

	// Test knobs (export_test.go): the event stream's heartbeat, how many
	// events the bus keeps in memory, the clock a new event log numbers
	// from. Zero takes the default.
	heartbeat time.Duration
	ringSize  int
	clock     func() time.Time
}

// mcpHandler is the MCP endpoint over store, its sessions within o.Limits.
func mcpHandler(store *bernstein.Store, o Options) http.Handler {
	lim := o.Limits.withDefaults()
	return mcpserver.NewHTTP(store, mcpserver.Options{Version: o.Version, Logger: o.Logger}, mcpserver.HTTPLimits{
		SessionIdle: lim.SessionIdle, MaxSessions: lim.MaxSessions, MaxSessionsPerToken: lim.MaxSessionsPerToken,
	})
}

// protect wraps mux with what every route gets (MCP's included), in this
// order: a request that reached a loopback address must name a loopback
// host (checkHost); browsers may not drive state-changing requests across
// origins; and with a read token every request but MCP's must show it.
// Each refusal is one APIError.
func protect(store *bernstein.Store, o Options, mux http.Handler) http.Handler {
	if o.ReadToken != "" {
		mux = &readGate{token: []byte(o.ReadToken), store: store, next: mux}
	}
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkHost(r); err != nil {
			writeError(w, http.StatusForbidden, "host", err.Error())
			return
		}
		if err := cop.Check(r); err != nil {
			writeError(w, http.StatusForbidden, "origin", fmt.Sprintf("a %s from another origin is refused (%v): a page of another site may not write here", r.Method, err))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// checkHost refuses a request that reached a loopback address with a Host
// that is not a loopback name (localhost, 127.0.0.0/8, ::1, any port): on
// loopback, reads need no token, and a page of another site whose name was
// made to resolve to 127.0.0.1 (DNS rebinding) must not read them. It is
// the rule MCP's SDK applies to its endpoint (StreamableHTTPOptions,
// DisableLocalhostProtection), here applied once to every route, /mcp
// included. A server listening beyond loopback (--allow-remote) answers
// any Host: its read token guards it.
func checkHost(r *http.Request) error {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil {
		return nil
	}
	lh, _, err := net.SplitHostPort(local.String())
	if err != nil || !isLoopback(lh) {
		return nil
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]")
	}
	if isLoopback(host) {
		return nil
	}
	return fmt.Errorf("Host %q is not a name of this server: on a loopback address it answers only localhost, 127.0.0.1 and [::1] (so that a page of another site cannot read it by DNS rebinding)", r.Host)
}

// Handler returns a mux that serves only the MCP endpoint over store
// (`bernstein mcp --http`).
func Handler(store *bernstein.Store, o Options) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(MCPPath, mcpHandler(store, o))
	return protect(store, o, mux)
}

// Server is everything `bernstein serve` serves over one store: the MCP
// endpoint, the task API, the event stream and the pages.
type Server struct {
	store *bernstein.Store
	bus   *Bus
	opts  Options
}

// New opens the server of store, with its event bus (not yet watching: see
// Run).
func New(store *bernstein.Store, o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	clock := o.clock
	if clock == nil {
		clock = time.Now
	}
	bus, err := newBus(store, o.Logger, clock)
	if err != nil {
		return nil, err
	}
	if o.ringSize > 0 {
		bus.ringSize = o.ringSize
	}

	return &Server{store: store, bus: bus, opts: o}, nil
}

// Bus returns the server's event bus.
func (s *Server) Bus() *Bus { return s.bus }

// Run watches the repository for the event stream until ctx ends.
func (s *Server) Run(ctx context.Context) error { return s.bus.Run(ctx) }

// Close releases the bus's log.
func (s *Server) Close() error { return s.bus.Close() }

// Handler returns the mux of every route.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(MCPPath, mcpHandler(s.store, s.opts))
	mux.HandleFunc("GET "+EventsPath, s.events)
	s.routeAPI(mux)
	s.routePages(mux)
	return protect(s.store, s.opts, mux)
}

// Serve serves every route on l within the server's limits until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return ServeLimits(ctx, l, s.Handler(), s.opts.Limits)
}

// Listen opens addr, refusing an address that is not on loopback unless
// allowRemote. Port 0 picks a free port (see the listener's Addr).
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	if !allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("address %q is not on loopback: pass --allow-remote to listen beyond this host", addr)
	}
	return net.Listen("tcp", addr)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// URL is the base URL a client reaches a listener at.
func URL(l net.Listener) string {
	return "http://" + l.Addr().String()
}

// Serve serves h on l until ctx ends, within the default limits, then shuts
// down gracefully.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	return ServeLimits(ctx, l, h, Limits{})
}
