package mcpserver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/record"
)

// bearer adds a claim token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connectHTTP connects a client over streamable HTTP with token.
func connectHTTP(t *testing.T, url, token string) (*client, error) {
	t.Helper()
	c := &client{t: t, notified: make(chan struct{}, 1000)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, req.Params)
			c.mu.Unlock()
			c.notified <- struct{}{}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		return nil, err
	}
	c.cs = cs
	t.Cleanup(func() { cs.Close() })
	return c, nil
}

// rawPost sends an initialize request with the given Authorization header.
func rawPost(t *testing.T, url, authorization string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

func TestHTTPBearerClaimToken(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	r.createTask("T-2")
	tok1 := r.claim("T-1", "owner")
	tok2 := r.claim("T-2", "other")
	srv := httptest.NewServer(mcpserver.HTTPHandler(r.store, mcpserver.Options{}))
	defer srv.Close()

	// No identity, no service: 401 and nothing recorded.
	auditBefore := len(r.audit())
	for _, h := range []string{"", "Basic b3duZXI6eA==", "Bearer", "Bearer bct_not-a-claim-token"} {
		res := rawPost(t, srv.URL, h)
		if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: status %d, WWW-Authenticate %q", h, res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
	}
	if _, err := connectHTTP(t, srv.URL, "bct_not-a-claim-token"); err == nil {
		t.Error("a client with an unknown token connected")
	}
	if n := len(r.audit()); n != auditBefore {
		t.Errorf("unauthenticated requests wrote %d audit entries", n-auditBefore)
	}

	// The token is the caller: owner on T-1.
	owner, err := connectHTTP(t, srv.URL, tok1)
	if err != nil {
		t.Fatal(err)
	}
	posted := ok[postResult](t, owner.call(mcpserver.ToolPostArtifact, report("T-1", "summary", "# over HTTP")))
	if posted.Agent != "owner" || posted.Version != 1 {
		t.Errorf("post over HTTP: %+v", posted)
	}
	// An identity argument is refused, not believed.
	args := report("T-1", "summary", "x")
	args["agent"] = "other"
	if msg := toolErr(t, owner.call(mcpserver.ToolPostArtifact, args)); !strings.HasPrefix(msg, "invalid agent: ") {
		t.Errorf("identity argument: %q", msg)
	}

	// The token of T-2 posts to T-1: refused, audited with the token's agent.
	other, err := connectHTTP(t, srv.URL, tok2)
	if err != nil {
		t.Fatal(err)
	}
	refusal(t, r, other, report("T-1", "summary", "not mine"), "other", record.ReasonClaimScopeViolation)
	// ...and its own task is fine.
	if res := ok[postResult](t, other.call(mcpserver.ToolPostArtifact, report("T-2", "notes", "mine"))); res.Agent != "other" {
		t.Errorf("post to T-2: %+v", res)
	}
	// Any task's handle can be read.
	if h := readHandle(t, other, "T-1"); h["spineHead"] != posted.SpineEntryHash {
		t.Errorf("handle of T-1 over HTTP: %v", h)
	}

	// Progress notifications travel on the call's stream.
	r.checkpoint("T-1")
	if _, err := owner.callWith(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"}, "tok-h"); err != nil {
		t.Fatal(err)
	}
	if p := owner.waitProgress("tok-h"); p.Progress != 1 {
		t.Errorf("progress over HTTP: %v", p.Progress)
	}

	// Released: the token stops working on the next request.
	r.transition("T-1", record.KindTaskReleased)
	auditBefore = len(r.audit())
	if _, err := owner.callWith(mcpserver.ToolPostArtifact, report("T-1", "summary", "after release"), nil); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("a released token still calls: %v", err)
	}
	if res := rawPost(t, srv.URL, "Bearer "+tok1); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("released token: status %d", res.StatusCode)
	}
	if n := len(r.audit()); n != auditBefore {
		t.Errorf("a request without identity wrote %d audit entries", n-auditBefore)
	}

	// Completed: the same.
	r.transition("T-2", record.KindTaskStarted)
	ok[postResult](t, other.call(mcpserver.ToolPostArtifact, report("T-2", "notes", "before completion")))
	r.transition("T-2", record.KindTaskCompleted)
	if res := rawPost(t, srv.URL, "Bearer "+tok2); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("token of a completed task: status %d", res.StatusCode)
	}
	if _, err := other.callWith(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-2"}, nil); err == nil {
		t.Error("the token of a completed task still calls")
	}
}

// TestHTTPSessionBoundToToken checks that a session opened with one claim
// token cannot be driven with another.
func TestHTTPSessionBoundToToken(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	r.createTask("T-2")
	tok1 := r.claim("T-1", "owner")
	tok2 := r.claim("T-2", "other")
	srv := httptest.NewServer(mcpserver.HTTPHandler(r.store, mcpserver.Options{}))
	defer srv.Close()

	var mu sync.Mutex
	token := tok1
	var sessionID string
	client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		req = req.Clone(req.Context())
		mu.Lock()
		req.Header.Set("Authorization", "Bearer "+token)
		mu.Unlock()
		res, err := http.DefaultTransport.RoundTrip(req)
		if err == nil && res.Header.Get("Mcp-Session-Id") != "" {
			mu.Lock()
			sessionID = res.Header.Get("Mcp-Session-Id")
			mu.Unlock()
		}
		return res, err
	})}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: client, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if sessionID == "" {
		t.Fatal("no session id")
	}
	mu.Lock()
	token = tok2 // a live token, but not the session's
	mu.Unlock()
	before := r.bernsteinRefs()
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolPostArtifact, Arguments: report("T-2", "k", "x")})
	if err == nil {
		t.Error("a session answered a request carrying another claim's token")
	}
	if r.bernsteinRefs() != before {
		t.Error("the hijacked request wrote to the repository")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// openSession opens a session with a raw initialize request and returns its
// id ("" if none was opened) and the status.
func openSession(t *testing.T, url, token string) (string, int) {
	t.Helper()
	res := rawPost(t, url, "Bearer "+token)
	return res.Header.Get("Mcp-Session-Id"), res.StatusCode
}

// pingSession sends a ping on session id and returns the status.
func pingSession(t *testing.T, url, token, id string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", id)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestHTTPSessionCaps checks that sessions opened and abandoned cannot pile
// up: a token holds at most MaxSessionsPerToken, all tokens together at
// most MaxSessions, the least recently used giving way; a session in use
// keeps working throughout.
func TestHTTPSessionCaps(t *testing.T) {
	r := newRepo(t)
	tokens := map[string]string{}
	for _, id := range []string{"T-1", "T-2", "T-3", "T-4"} {
		r.createTask(id)
		tokens[id] = r.claim(id, "agent-"+strings.ToLower(id))
	}
	h := mcpserver.NewHTTP(r.store, mcpserver.Options{}, mcpserver.HTTPLimits{MaxSessions: 6, MaxSessionsPerToken: 3})
	srv := httptest.NewServer(h)
	defer srv.Close()

	// A real client on T-4, used throughout.
	real, err := connectHTTP(t, srv.URL, tokens["T-4"])
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	for i := range 40 {
		id, status := openSession(t, srv.URL, tokens["T-1"])
		if status != http.StatusOK || id == "" {
			t.Fatalf("session %d: status %d, id %q", i, status, id)
		}
		if i < 2 {
			first = append(first, id)
		}
		if n := h.Sessions(); n > 6 {
			t.Fatalf("%d sessions open after %d opened (cap 6)", n, i+1)
		}
		if i%10 == 0 {
			readHandle(t, real, "T-4")
		}
	}
	for _, id := range first {
		if st := pingSession(t, srv.URL, tokens["T-1"], id); st != http.StatusNotFound {
			t.Errorf("an abandoned session past the token's cap answered %d", st)
		}
	}
	// Other tokens: the global cap, least recently used first; the real
	// client, used meanwhile, stays.
	for i := range 30 {
		tok := tokens[[]string{"T-2", "T-3"}[i%2]]
		if _, status := openSession(t, srv.URL, tok); status != http.StatusOK {
			t.Fatalf("session of another token: %d", status)
		}
		readHandle(t, real, "T-4")
		if n := h.Sessions(); n > 6 {
			t.Fatalf("%d sessions open (cap 6)", n)
		}
	}
	if h.Evicted() < 60 {
		t.Errorf("%d sessions evicted, want at least 60", h.Evicted())
	}
	ok[postResult](t, real.call(mcpserver.ToolPostArtifact, report("T-4", "still", "here")))
}

// TestHTTPIdleSessionsReaped checks that a session no request uses is closed
// after SessionIdle, and that one a request is using is not.
func TestHTTPIdleSessionsReaped(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "owner")
	h := mcpserver.NewHTTP(r.store, mcpserver.Options{}, mcpserver.HTTPLimits{SessionIdle: 500 * time.Millisecond})
	srv := httptest.NewServer(h)
	defer srv.Close()
	inUse := make(chan string, 16)
	h.OnUse(func(id string, inflight int) {
		if inflight > 0 {
			inUse <- id
		}
	})
	// The first is kept in use: a request on it is still sending its body
	// (which holds the SDK's idle timer) while the others go idle.
	first, _ := openSession(t, srv.URL, tok)
	body, send := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", first)
	answered := make(chan int, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			answered <- 0
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		answered <- res.StatusCode
	}()
	send.Write([]byte(`{"jsonrpc":"2.0",`))
	if id := <-inUse; id != first {
		t.Fatalf("a request on %s, want %s", id, first)
	}
	ids := []string{first}
	for range 4 {
		id, _ := openSession(t, srv.URL, tok)
		ids = append(ids, id)
	}
	if n := h.Sessions(); n != 5 {
		t.Fatalf("%d sessions open, want 5", n)
	}
	for _, id := range ids[1:] {
		<-h.SessionClosed(id)
	}
	if n := h.Sessions(); n != 1 {
		t.Fatalf("%d sessions open after the idle ones' timeout, want 1", n)
	}
	for _, id := range ids[1:] {
		if st := pingSession(t, srv.URL, tok, id); st != http.StatusNotFound {
			t.Errorf("an idle session answered %d after its timeout", st)
		}
	}
	// Its request ends: it goes idle too.
	send.Write([]byte(`"id":2,"method":"ping"}`))
	send.Close()
	if st := <-answered; st != http.StatusOK {
		t.Fatalf("the request on the session in use: %d", st)
	}
	<-h.SessionClosed(first)
	if n := h.Sessions(); n != 0 {
		t.Errorf("%d sessions open after every one went idle", n)
	}
}

// TestHTTPServersFollowSessions checks that a long serve holds an MCP server
// only for the tasks with sessions: sessions of many tasks opened and closed
// one after another leave at most the servers of the sessions still open
// (and of those closed by the last opening), and a task whose server was
// dropped is served afresh, its versions listed as resources again.
func TestHTTPServersFollowSessions(t *testing.T) {
	r := newRepo(t)
	tokens := map[string]string{}
	var tasks []string
	for i := range 12 {
		id := "T-" + string(rune('a'+i))
		tasks = append(tasks, id)
		r.createTask(id)
		tokens[id] = r.claim(id, "agent-"+id)
	}
	h := mcpserver.NewHTTP(r.store, mcpserver.Options{}, mcpserver.HTTPLimits{MaxSessions: 2})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i, id := range tasks {
		if _, status := openSession(t, srv.URL, tokens[id]); status != http.StatusOK {
			t.Fatalf("session on %s: %d", id, status)
		}
		// Open: at most 2; closed by this opening, not yet dropped: 1.
		if n := h.Servers(); n > 3 {
			t.Fatalf("%d servers held after sessions on %d tasks (2 open at most)", n, i+1)
		}
	}
	first := tasks[0]
	c, err := connectHTTP(t, srv.URL, tokens[first])
	if err != nil {
		t.Fatal(err)
	}
	res := ok[postResult](t, c.call(mcpserver.ToolPostArtifact, report(first, "summary", "back again")))
	want := mcpserver.VersionURI(first, "summary", res.Version)
	var listed []string
	for rs, err := range c.cs.Resources(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, rs.URI)
	}
	if !slices.Contains(listed, want) {
		t.Errorf("resources %v after the server of %s was made again, want %s among them", listed, first, want)
	}
}
