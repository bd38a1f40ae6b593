package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits bound what clients can hold of `bernstein serve`: how long a
// connection may take to send a request, to take a response and to sit
// idle; how many connections, event streams and MCP sessions may be open at
// once. A zero field takes its default (DefaultLimits); docs/http.md,
// Security, gives the reasons.
type Limits struct {
	// ReadHeaderTimeout bounds the reading of a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included.
	// An event stream (GET /api/v1/events, GET /mcp) is released from it
	// once its request is read.
	ReadTimeout time.Duration
	// WriteTimeout bounds the sending of a response, from its first byte
	// (its header, a write or a flush): a client that does not take it in
	// time loses the connection. The time a handler takes to compute its
	// answer does not count, so a slow answer is never cut off before it
	// begins (a client would read an EOF, no error). The
	// event stream instead bounds each write (a slow subscriber is dropped
	// and resumes with Last-Event-ID); the MCP GET stream lives as long as
	// its session.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection no request uses.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
	// MaxConns caps the open connections. Beyond it a new connection takes
	// the place of one outside a handler: first of one that never had a
	// request served (silent, or still trickling its headers in), else of
	// one kept alive and idle, the longest waiting of either; when every
	// connection is inside a handler, the new one's request is read and
	// answered 503, and the connection closed.
	MaxConns int
	// MaxStreams caps the open event streams (the event stream and MCP's
	// GET stream together), so that streams alone cannot take every
	// connection; one beyond it is answered 503.
	MaxStreams int
	// MaxSessions caps the MCP sessions open at once, and
	// MaxSessionsPerToken those of one claim token: opening one more closes
	// the one least recently used. SessionIdle closes a session no request
	// used for that long.
	MaxSessions         int
	MaxSessionsPerToken int
	SessionIdle         time.Duration
}

// Defaults of Limits.
const (
	DefaultReadHeaderTimeout   = 5 * time.Second
	DefaultReadTimeout         = 30 * time.Second
	DefaultWriteTimeout        = 30 * time.Second
	DefaultIdleTimeout         = 60 * time.Second
	DefaultMaxHeaderBytes      = 64 << 10
	DefaultMaxConns            = 4096 // or half the descriptor limit, if lower
	DefaultMaxSessions         = 512
	DefaultMaxSessionsPerToken = 16
	DefaultSessionIdle         = 30 * time.Minute
)

// DefaultLimits returns the limits `bernstein serve` runs with. MaxConns is
// DefaultMaxConns or half the process's descriptor limit, whichever is
// lower (the other half stays with the repository: objects, refs, logs);
// MaxStreams is half of MaxConns.
func DefaultLimits() Limits { return Limits{}.withDefaults() }

func (l Limits) withDefaults() Limits {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&l.ReadTimeout, DefaultReadTimeout)
	set(&l.WriteTimeout, DefaultWriteTimeout)
	set(&l.IdleTimeout, DefaultIdleTimeout)
	set(&l.SessionIdle, DefaultSessionIdle)
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
		var rl syscall.Rlimit
		if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur/2 < uint64(l.MaxConns) {
			l.MaxConns = max(int(rl.Cur/2), 8)
		}
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = max(l.MaxConns/2, 1)
	}
	if l.MaxSessions == 0 {
		l.MaxSessions = DefaultMaxSessions
	}
	if l.MaxSessionsPerToken == 0 {
		l.MaxSessionsPerToken = DefaultMaxSessionsPerToken
	}
	return l
}

// connLimiter is a listener that holds at most max connections open. A
// connection beyond the cap evicts one outside a handler (see
// oldestIdleLocked); if every connection is inside a handler, the new one
// is refused: its request is answered 503.
// When accepting fails for want of descriptors, it evicts one the same way,
// so the server's retry finds one free.
type connLimiter struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	seq   uint64 // connections accepted (mu)

	refusing                   atomic.Int32 // refused connections still open
	accepted, evicted, refused atomic.Int64
}

// maxRefusing bounds the refused connections open at once; beyond it a
// connection over the cap is closed without a word.
const maxRefusing = 64

func newConnLimiter(l net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: l, max: max, conns: map[*trackedConn]struct{}{}}
}

// trackedConn is one accepted connection.
type trackedConn struct {
	net.Conn
	l      *connLimiter
	busy   int       // requests inside a handler (l.mu)
	served bool      // a request of it has reached a handler (l.mu)
	since  time.Time // when it last left a handler, or was accepted (l.mu)
	seq    uint64    // accept order: of two equal sinces, the earlier (l.mu)
	once   sync.Once
	// refuseBy is set on a connection over the cap: its one request is
	// answered 503, and no deadline on it runs past refuseBy.
	refuseBy time.Time
}

// clamp keeps a refused connection's deadlines within refuseBy.
func (c *trackedConn) clamp(t time.Time) time.Time {
	if !c.refuseBy.IsZero() && (t.IsZero() || t.After(c.refuseBy)) {
		return c.refuseBy
	}
	return t
}

func (c *trackedConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *trackedConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *trackedConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }

// CloseWrite half-closes the connection, as net/http does before it hangs
// up on a request it refused unread (a 431): the client reads the answer to
// its end instead of a reset.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		if !c.refuseBy.IsZero() {
			c.l.refusing.Add(-1)
			return
		}
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				l.evictOne()
			}
			return nil, err
		}
		l.mu.Lock()
		var victim *trackedConn
		if len(l.conns) >= l.max {
			if victim = l.oldestIdleLocked(); victim == nil {
				l.mu.Unlock()
				if rc := l.refuse(c); rc != nil {
					return rc, nil
				}
				continue
			}
			delete(l.conns, victim)
		}
		l.seq++
		tc := &trackedConn{Conn: c, l: l, since: time.Now(), seq: l.seq}
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close()
			l.evicted.Add(1)
		}
		l.accepted.Add(1)
		return tc, nil
	}
}

// oldestIdleLocked is the connection to evict: of those outside a handler,
// one that never had a request served (a slow or silent client) before one
// kept alive after its requests, and of either the one that has waited
// longest; nil when every connection is inside a handler. l.mu is held.
func (l *connLimiter) oldestIdleLocked() *trackedConn {
	var v *trackedConn
	for c := range l.conns {
		if c.busy > 0 {
			continue
		}
		if v == nil || (!c.served && v.served) || (c.served == v.served && c.older(v)) {
			v = c
		}
	}
	return v
}

// older reports whether c has waited longer than v. l.mu is held.
func (c *trackedConn) older(v *trackedConn) bool {
	return c.since.Before(v.since) || c.since.Equal(v.since) && c.seq < v.seq
}

func (l *connLimiter) evictOne() {
	l.mu.Lock()
	v := l.oldestIdleLocked()
	if v != nil {
		delete(l.conns, v)
	}
	l.mu.Unlock()
	if v != nil {
		v.Conn.Close()
		l.evicted.Add(1)
	}
}

// refuseWithin bounds a refused connection: the time it has to send its
// request and take the 503.
const refuseWithin = time.Second

// refuse hands c to the server as a refused connection (its request is
// read, then answered 503 and the connection closed: see guard), or closes
// it without a word when maxRefusing refusals are under way. A 503 written
// before the request is read would reach a client that has not sent it yet
// as an unsolicited response, and a client such as Go's then reports a
// broken connection instead of the 503.
func (l *connLimiter) refuse(c net.Conn) net.Conn {
	l.refused.Add(1)
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		c.Close()
		return nil
	}
	by := time.Now().Add(refuseWithin)
	c.SetDeadline(by)
	return &trackedConn{Conn: c, l: l, refuseBy: by}
}

func (l *connLimiter) begin(c *trackedConn) {
	l.mu.Lock()
	c.busy++
	c.served = true
	l.mu.Unlock()
}

func (l *connLimiter) end(c *trackedConn) {
	l.mu.Lock()
	c.busy--
	c.since = time.Now()
	l.mu.Unlock()
}

// open is the number of connections held.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

type connKey struct{}

// guard applies the per-request limits around h: it marks the connection
// busy while the handler runs, gives every response but a stream its write
// deadline, releases a stream from the read deadline once its request is
// read, and caps the streams open at once.
type guard struct {
	h       http.Handler
	lim     Limits
	streams atomic.Int64
}

// isStream tells the requests that stay open for as long as the client
// listens: the event stream and MCP's GET stream.
func isStream(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == EventsPath || r.URL.Path == MCPPath)
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if tc, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
		if !tc.refuseBy.IsZero() {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusServiceUnavailable, "", "the server has too many connections open: retry shortly")
			return
		}
		tc.l.begin(tc)
		defer tc.l.end(tc)
	}
	if !isStream(r) {
		// The write deadline runs from the response's first byte: a
		// handler that takes long to compute its answer (a cold listing of
		// many tasks) is not cut off with an EOF before it has written
		// anything; a client that does not take the response still loses
		// the connection WriteTimeout after it began.
		rc.SetWriteDeadline(time.Time{})
		sw := &sendingWriter{ResponseWriter: w, rc: rc, timeout: g.lim.WriteTimeout}
		g.h.ServeHTTP(sw, r)
		sw.begin() // what net/http still writes after the handler
		return
	}
	if g.streams.Add(1) > int64(g.lim.MaxStreams) {
		g.streams.Add(-1)
		rc.SetWriteDeadline(time.Now().Add(g.lim.WriteTimeout))
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "", "too many event streams are open: retry shortly")
		return
	}
	defer g.streams.Add(-1)
	// The request is read: the stream lives past ReadTimeout (a client
	// that goes away is noticed by the next write, a heartbeat at least).
	// No deadline from an earlier request on this connection applies.
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	g.h.ServeHTTP(w, r)
}

// sendingWriter sets the connection's write deadline when the response
// begins (its header, its first byte or a flush), WriteTimeout from then.
type sendingWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	begun   bool
}

func (w *sendingWriter) begin() {
	if !w.begun {
		w.begun = true
		w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

func (w *sendingWriter) WriteHeader(code int) {
	w.begin()
	w.ResponseWriter.WriteHeader(code)
}

func (w *sendingWriter) Write(b []byte) (int, error) {
	w.begin()
	return w.ResponseWriter.Write(b)
}

// Flush and FlushError begin the response too (an MCP answer flushes its
// header first).
func (w *sendingWriter) Flush() { w.FlushError() }

func (w *sendingWriter) FlushError() error {
	w.begin()
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *sendingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeLimits serves h on l until ctx ends, within lim (zero fields take
// their defaults), then shuts down gracefully.
func ServeLimits(ctx context.Context, l net.Listener, h http.Handler, lim Limits) error {
	lim = lim.withDefaults()
	cl := newConnLimiter(l, lim.MaxConns)
	// Requests live in base: ending it ends the open event streams, which
	// do not end by themselves, so shutdown does not wait on them.
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := &http.Server{
		Handler:           &guard{h: h, lim: lim},
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*trackedConn); ok {
				return context.WithValue(ctx, connKey{}, tc)
			}
			return ctx
		},
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(cl) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	endRequests()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
