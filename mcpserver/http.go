package mcpserver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
)

// Over HTTP a caller is the bearer claim token printed by 'task claim': one
// agent on one task. The token is resolved against the live claims on every
// request, so a released or completed claim stops working at once; a
// request without a live claim token is answered 401 (there is no identity
// to record a refusal for).

// MaxRequestBytes bounds an HTTP request body: a 1 MiB payload with the
// worst JSON escaping, and room for the envelope.
const MaxRequestBytes = 8 << 20

type claimKey struct{}

type bearerClaim struct {
	token    string
	claimant *bernstein.Claimant
}

// HTTPLimits bound the sessions of the HTTP handler; a zero field takes its
// default.
type HTTPLimits struct {
	// SessionIdle closes a session no request used for this long (default
	// 30 minutes). A GET stream held open does not count as use.
	SessionIdle time.Duration
	// MaxSessions caps the sessions open at once (default 512) and
	// MaxSessionsPerToken those opened with one claim token (default 16):
	// opening one more first closes the least recently used session (of the
	// token, then of all). Only when every session in the way is serving a
	// request is the new one refused (503).
	MaxSessions         int
	MaxSessionsPerToken int
}

func (l HTTPLimits) withDefaults() HTTPLimits {
	if l.SessionIdle <= 0 {
		l.SessionIdle = 30 * time.Minute
	}
	if l.MaxSessions <= 0 {
		l.MaxSessions = 512
	}
	if l.MaxSessionsPerToken <= 0 {
		l.MaxSessionsPerToken = 16
	}
	return l
}

// HTTP serves the tools over streamable HTTP, every request authenticated
// by its bearer claim token, its sessions capped and reaped.
type HTTP struct {
	store  *bernstein.Store
	opts   Options
	stream http.Handler
	lim    HTTPLimits

	// servers holds one MCP server per task with sessions open or being
	// opened: a session, bound to one claim token, lists only its task's
	// artifact versions as resources. A server whose sessions have all
	// ended is dropped when the next session opens, so a long serve holds
	// servers for the tasks in use, not for every task it ever served.
	smu     sync.Mutex
	servers map[string]*mcp.Server

	mu       sync.Mutex
	sessions map[string]*sessionUse // by Mcp-Session-Id
	opening  map[record.Hash]int    // sessions being opened, by token hash
	openTask map[string]int         // sessions being opened, by task
	evicted  int64
	// testHookUse, when set (by tests), is told of every request beginning
	// or ending on a session, with the requests it then has in flight.
	testHookUse func(id string, inflight int)
}

// sessionUse is what the handler knows of one session.
type sessionUse struct {
	owner    record.Hash // the hash of the claim token it was opened with
	last     time.Time   // when a request last began or ended
	inflight int
}

// HTTPHandler serves the tools over streamable HTTP with the default
// session limits. o.Identity is ignored.
func HTTPHandler(store *bernstein.Store, o Options) http.Handler {
	return NewHTTP(store, o, HTTPLimits{})
}

// NewHTTP serves the tools over streamable HTTP within lim. o.Identity is
// ignored.
func NewHTTP(store *bernstein.Store, o Options, lim HTTPLimits) *HTTP {
	o.Identity = bearerIdentity
	lim = lim.withDefaults()
	h := &HTTP{store: store, opts: o, lim: lim, servers: map[string]*mcp.Server{},
		sessions: map[string]*sessionUse{}, opening: map[record.Hash]int{}, openTask: map[string]int{}}
	stream := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		bc, _ := r.Context().Value(claimKey{}).(bearerClaim)
		task := ""
		if bc.claimant != nil {
			task = bc.claimant.Task
		}
		return h.serverFor(task)
	}, &mcp.StreamableHTTPOptions{
		Logger:              o.Logger,
		MaxRequestBodyBytes: MaxRequestBytes,
		SessionTimeout:      lim.SessionIdle,
	})
	// The SDK carries the verified claim to the tool handlers as TokenInfo,
	// and binds each session to the token it was opened with.
	withInfo := auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		bc, ok := r.Context().Value(claimKey{}).(bearerClaim)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{
			UserID: string(bernstein.TokenHash(bc.token)),
			Extra:  map[string]any{"agent": bc.claimant.Agent, "task": bc.claimant.Task, "token": bc.token},
		}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(stream)
	h.stream = withInfo
	return h
}

// serverFor returns the MCP server of task's sessions, made on first use.
func (h *HTTP) serverFor(task string) *mcp.Server {
	h.smu.Lock()
	defer h.smu.Unlock()
	if srv := h.servers[task]; srv != nil {
		return srv
	}
	o := h.opts
	o.ResourceTasks = []string{}
	if task != "" {
		o.ResourceTasks = []string{task}
	}
	srv := New(h.store, o)
	h.servers[task] = srv
	return srv
}

func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := bearerToken(r)
	if !ok {
		unauthorized(w, "no bearer claim token: send 'Authorization: Bearer <token>' with the token 'bernstein task claim' printed")
		return
	}
	c, err := h.store.ClaimByToken(token)
	if err != nil {
		unauthorized(w, "the bearer claim token matches no live claim (released, completed or never issued)")
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), claimKey{}, bearerClaim{token: token, claimant: c}))
	if id := r.Header.Get(sessionHeader); id != "" {
		h.use(id, 1)
		defer h.use(id, -1)
		h.stream.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodPost {
		h.stream.ServeHTTP(w, r) // the SDK answers what a request without a session can be
		return
	}
	// A POST without a session opens one: make room for it first.
	owner := bernstein.TokenHash(token)
	if !h.makeRoom(owner, c.Task) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many MCP sessions are serving requests: retry shortly", http.StatusServiceUnavailable)
		return
	}
	// The session is recorded as the response begins, before the client
	// can read it: a client that opens its next session at once must find
	// this one recorded (and evictable), not still counted as opening.
	ow := &openingWriter{ResponseWriter: w}
	ow.opened = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.opening[owner]--; h.opening[owner] == 0 {
			delete(h.opening, owner)
		}
		if h.openTask[c.Task]--; h.openTask[c.Task] == 0 {
			delete(h.openTask, c.Task)
		}
		if id := w.Header().Get(sessionHeader); id != "" {
			h.sessions[id] = &sessionUse{owner: owner, last: time.Now()}
		}
	}
	defer ow.done()
	h.stream.ServeHTTP(ow, r)
}

// openingWriter calls opened once, when the response to a request opening a
// session begins (or the request ends without one).
type openingWriter struct {
	http.ResponseWriter
	once   sync.Once
	opened func()
}

func (w *openingWriter) done() { w.once.Do(w.opened) }

func (w *openingWriter) WriteHeader(code int) {
	w.done()
	w.ResponseWriter.WriteHeader(code)
}

func (w *openingWriter) Write(b []byte) (int, error) {
	w.done()
	return w.ResponseWriter.Write(b)
}

func (w *openingWriter) Flush() {
	w.done()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *openingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sessionHeader is the header that names a streamable HTTP session.
const sessionHeader = "Mcp-Session-Id"

// use records a request beginning (+1) or ending (-1) on session id.
func (h *HTTP) use(id string, d int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.sessions[id]; ok {
		u.inflight += d
		u.last = time.Now()
		if h.testHookUse != nil {
			h.testHookUse(id, u.inflight)
		}
	}
}

// makeRoom closes the least recently used sessions in the way of one more
// session of owner on task, and reserves its place; false when every
// session in the way is serving a request. It drops the servers of tasks
// with no session open or being opened.
func (h *HTTP) makeRoom(owner record.Hash, task string) bool {
	h.mu.Lock()
	live := h.live() // under h.mu: no session registers meanwhile
	h.dropIdleServers()
	for id := range h.sessions {
		if live[id] == nil {
			delete(h.sessions, id) // closed by the SDK: idle, deleted or failed
		}
	}
	var victims []*mcp.ServerSession
	evict := func(of func(*sessionUse) bool, n int) bool {
		for n > 0 {
			var vid string
			var v *sessionUse
			for id, u := range h.sessions {
				if u.inflight == 0 && of(u) && (v == nil || u.last.Before(v.last)) {
					vid, v = id, u
				}
			}
			if v == nil {
				return false
			}
			delete(h.sessions, vid)
			victims = append(victims, live[vid])
			n--
		}
		return true
	}
	count := func(of func(*sessionUse) bool) int {
		n := 0
		for _, u := range h.sessions {
			if of(u) {
				n++
			}
		}
		return n
	}
	mine := func(u *sessionUse) bool { return u.owner == owner }
	all := func(*sessionUse) bool { return true }
	opening := 0
	for _, n := range h.opening {
		opening += n
	}
	ok := evict(mine, count(mine)+h.opening[owner]+1-h.lim.MaxSessionsPerToken) &&
		evict(all, len(h.sessions)+opening+1-h.lim.MaxSessions)
	if ok {
		h.opening[owner]++
		h.openTask[task]++
	}
	h.evicted += int64(len(victims))
	h.mu.Unlock()
	for _, v := range victims {
		v.Close()
	}
	return ok
}

// dropIdleServers forgets the servers with no session open and none being
// opened (a session being opened has its server before it is listed). The
// caller holds h.mu, so no session is being opened outside h.openTask.
func (h *HTTP) dropIdleServers() {
	h.smu.Lock()
	defer h.smu.Unlock()
	for task, srv := range h.servers {
		if h.openTask[task] > 0 {
			continue
		}
		idle := true
		for range srv.Sessions() {
			idle = false
			break
		}
		if idle {
			delete(h.servers, task)
		}
	}
}

// Servers is the number of per-task servers held.
func (h *HTTP) Servers() int {
	h.smu.Lock()
	defer h.smu.Unlock()
	return len(h.servers)
}

// live maps the id of every open session to the session.
func (h *HTTP) live() map[string]*mcp.ServerSession {
	m := map[string]*mcp.ServerSession{}
	h.smu.Lock()
	srvs := make([]*mcp.Server, 0, len(h.servers))
	for _, srv := range h.servers {
		srvs = append(srvs, srv)
	}
	h.smu.Unlock()
	for _, srv := range srvs {
		for ss := range srv.Sessions() {
			if id := ss.ID(); id != "" {
				m[id] = ss
			}
		}
	}
	return m
}

// Sessions is the number of sessions open.
func (h *HTTP) Sessions() int { return len(h.live()) }

// Evicted is the number of sessions closed to make room for new ones.
func (h *HTTP) Evicted() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.evicted
}

func bearerToken(r *http.Request) (string, bool) {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
		return "", false
	}
	return f[1], true
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="bernstein"`)
	http.Error(w, msg, http.StatusUnauthorized)
}

// bearerIdentity reads the caller that HTTPHandler verified for this request.
func bearerIdentity(ctx context.Context, req *mcp.CallToolRequest) (Caller, error) {
	info := auth.TokenInfoFromContext(ctx) // requests the SDK makes itself carry no Extra
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		info = req.Extra.TokenInfo
	}
	if info == nil {
		return Caller{}, errors.New("no bearer claim token on this request")
	}
	agent, _ := info.Extra["agent"].(string)
	token, _ := info.Extra["token"].(string)
	if agent == "" || token == "" {
		return Caller{}, errors.New("no bearer claim token on this request")
	}
	return Caller{Agent: agent, Tokens: []string{token}}, nil
}
