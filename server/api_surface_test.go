package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/server"
)

// newServedAPIClient serves r's repository as `bernstein serve` does
// (server.Listen on loopback, Server.Serve within o.Limits, Server.Run
// watching the refs) and returns a
// client of it that opens a new connection for every request.
func newServedAPIClient(t *testing.T, r *repo, o server.Options) *apiClient {
	t.Helper()
	s, err := bernstein.Open(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	o.Version = "test"
	srv, err := server.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, watched := make(chan struct{}), make(chan struct{})
	go func() { srv.Serve(ctx, l); close(done) }()
	go func() { srv.Run(ctx); close(watched) }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-watched
		srv.Close()
		s.Close()
	})
	return &apiClient{t: t, base: server.URL(l), srv: srv, spec: loadSpec(t), http: &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// documentedOp is one operation of the description, with a path that names
// something that exists.
type documentedOp struct {
	method, tmpl, path string
}

func documentedOps(t *testing.T, task, key string) []documentedOp {
	sp := loadSpec(t)
	var ops []documentedOp
	for tmpl, item := range sp.doc["paths"].(map[string]any) {
		for m := range item.(map[string]any) {
			if m == "parameters" {
				continue
			}
			path := strings.NewReplacer("{id}", task, "{key}", key).Replace(tmpl)
			ops = append(ops, documentedOp{strings.ToUpper(m), tmpl, path})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].method+ops[i].tmpl < ops[j].method+ops[j].tmpl })
	return ops
}

// wantStatus sends one request and wants status (and, for an Error
// document, field).
func (c *apiClient) wantStatus(op documentedOp, path string, hdr map[string]string, status int, field string) {
	c.t.Helper()
	var body []byte
	if op.method == http.MethodPost {
		body = []byte(`{"key":"k","artifact_type":"report","body":"b"}`)
	}
	res, b := c.do(op.method, path, body, hdr)
	if res.StatusCode != status {
		c.t.Errorf("%s %s %v: %d, want %d\n%s", op.method, path, hdr, res.StatusCode, status, short(b))
		return
	}
	if field == "-" {
		return
	}
	var e server.APIError
	if json.Unmarshal(b, &e) != nil || e.Error.Field != field || e.Error.Message == "" {
		c.t.Errorf("%s %s: %d %s, want an error naming %q", op.method, path, status, short(b), field)
	}
}

// TestAPISurface: every documented operation answers, besides its own
// statuses, the refusals that come before any operation, each as the
// description says: 401 without the read token of a server that has one,
// 403 for a Host that is not a loopback name on a loopback address, 431 for
// headers over the limit (the HTTP server's plain text), 503 at the
// connection cap, and 307 for a path with dot segments. The event stream's
// own statuses too: 400 for a bad task or event id, 503 at the stream cap.
func TestAPISurface(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T-1")
	r.post("k", "a version")
	ops := documentedOps(t, "T-1", "k")
	if len(ops) < 10 {
		t.Fatalf("the description has %d operations", len(ops))
	}

	// A server with a read token and a small header limit.
	tok := server.NewReadToken()
	c := newServedAPIClient(t, r, server.Options{ReadToken: tok, Limits: server.Limits{MaxHeaderBytes: 1024}})
	auth := map[string]string{"Authorization": "Bearer " + tok}
	for _, op := range ops {
		full := server.APIPrefix + op.path
		c.wantStatus(op, full, nil, http.StatusUnauthorized, "token")
		c.wantStatus(op, full, map[string]string{"Authorization": "Bearer brt_not-the-read-token"}, http.StatusUnauthorized, "token")
		c.wantStatus(op, full, map[string]string{"Host": "evil.example", "Authorization": "Bearer " + tok}, http.StatusForbidden, "host")
		c.wantStatus(op, full, map[string]string{"Authorization": "Bearer " + tok, "X-Padding": strings.Repeat("a", 6<<10)}, http.StatusRequestHeaderFieldsTooLarge, "-")
		dotted := server.APIPrefix + "/." + op.path
		c.wantStatus(op, dotted, auth, http.StatusTemporaryRedirect, "-")
		res, _ := c.do(op.method, server.APIPrefix+"/x/.."+op.path, nil, auth)
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusTemporaryRedirect || !strings.HasSuffix(loc, full) {
			t.Errorf("%s %s/x/..%s: %d to %q, want a 307 to %s", op.method, server.APIPrefix, op.path, res.StatusCode, loc, full)
		}
	}
	// The event stream's own refusals.
	events := documentedOp{http.MethodGet, "/events", "/events"}
	c.wantStatus(events, server.EventsPath+"?task=a%2F..%2Fb", auth, http.StatusBadRequest, "task")
	c.wantStatus(events, server.EventsPath+"?last_event_id=-3", auth, http.StatusBadRequest, "last_event_id")
	c.wantStatus(events, server.EventsPath, map[string]string{"Authorization": "Bearer " + tok, "Last-Event-ID": "x"}, http.StatusBadRequest, "last_event_id")

	// At the connection cap, with every connection inside a handler (two
	// event streams), a new connection's request is answered 503, whatever
	// it asks.
	full := newServedAPIClient(t, r, server.Options{Limits: server.Limits{MaxConns: 2, MaxStreams: 2}})
	var held []*http.Response
	for range 2 {
		res, err := http.Get(full.base + server.EventsPath)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("stream: %v %v", err, res)
		}
		held = append(held, res)
	}
	// (A stream's 200 is written from inside its handler: both are busy.)
	for _, op := range ops {
		full.wantStatus(op, server.APIPrefix+op.path, nil, http.StatusServiceUnavailable, "")
	}
	for _, res := range held {
		res.Body.Close()
	}
	// At the stream cap, one more stream is answered 503.
	capped := newServedAPIClient(t, r, server.Options{Limits: server.Limits{MaxConns: 8, MaxStreams: 1}})
	res, err := http.Get(capped.base + server.EventsPath)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", err, res)
	}
	capped.wantStatus(events, server.EventsPath, nil, http.StatusServiceUnavailable, "")
	res.Body.Close()

	// The 200 of the event stream, through the description's checks.
	open := newServedAPIClient(t, r, server.Options{})
	s := connect(t, open.base+server.EventsPath+"?task=T-1", "")
	r.post("k", "another version")
	s.next(server.EventArtifact)
	s.close()
}

// TestHostMustBeLoopback: a server on a loopback address answers only a
// request whose Host is a loopback name (so that a page of another site
// whose name resolves to 127.0.0.1 cannot read it: DNS rebinding), on every
// route, /mcp included, with one JSON error naming host; localhost,
// 127.0.0.1 and [::1] with any port pass.
func TestHostMustBeLoopback(t *testing.T) {
	r := newTaskRepo(t, "T-1")
	c := newServedAPIClient(t, r, server.Options{})
	port := c.base[strings.LastIndexByte(c.base, ':')+1:]
	// (A stream answered by mistake would never end.)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	paths := []string{server.APIPrefix + "/tasks", server.APIPrefix + "/tasks/T-1", "/", "/tasks/T-1", "/static/app.css", server.EventsPath, server.MCPPath}
	for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.1.nip.io:" + port, "localhost.evil.example", "10.0.0.1:" + port, "[::2]:" + port} {
		for _, p := range paths {
			req, _ := http.NewRequest(http.MethodGet, c.base+p, nil)
			req.Host = host
			if p == server.MCPPath {
				req.Header.Set("Authorization", "Bearer "+r.token)
			}
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var e server.APIError
			if res.StatusCode != http.StatusForbidden || json.Unmarshal(b, &e) != nil || e.Error.Field != "host" || !strings.Contains(e.Error.Message, host) {
				t.Errorf("GET %s with Host %s: %d %s", p, host, res.StatusCode, short(b))
			}
		}
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "127.1.2.3:" + port, "[::1]:" + port, "localhost"} {
		for _, p := range paths[:5] {
			req, _ := http.NewRequest(http.MethodGet, c.base+p, nil)
			req.Host = host
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("GET %s with Host %s: %d", p, host, res.StatusCode)
			}
		}
	}
}
