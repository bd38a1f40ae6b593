package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/server"
)

// limStore is a repository with the given tasks, each claimed by
// agent-<i>; it returns the store and the tokens by task.
func limStore(t *testing.T, tasks ...string) (*bernstein.Store, bernstein.Options, map[string]string) {
	t.Helper()
	root := t.TempDir()
	opts := bernstein.Options{Repo: filepath.Join(root, "repo"), Home: filepath.Join(root, "home")}
	if _, err := bernstein.Init(opts, "test-writer"); err != nil {
		t.Fatal(err)
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tokens := map[string]string{}
	for i, id := range tasks {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		if tokens[id], err = s.Claim(id, fmt.Sprintf("agent-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return s, opts, tokens
}

// limServe serves every route of a server over s within o.Limits on a real
// listener, watching the repository, until the test ends.
func limServe(t *testing.T, s *bernstein.Store, o server.Options) string {
	t.Helper()
	srv, err := server.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { srv.Run(ctx); done <- struct{}{} }()
	go func() { srv.Serve(ctx, l); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		srv.Close()
	})
	return server.URL(l)
}

// limPost posts a report to task in process.
func limPost(t *testing.T, s *bernstein.Store, task, agent, token, key, body string) *bernstein.PostResult {
	t.Helper()
	res, err := s.Post(bernstein.PostRequest{Task: task, Key: key, Agent: agent, ClaimToken: token,
		Payload: artifact.Payload{Type: artifact.TypeReport, Body: body}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

const limInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// limMCP sends an initialize request to /mcp with a bearer token ("" none)
// and extra headers, and returns the status.
func limMCP(t *testing.T, base, token string, header ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+server.MCPPath, strings.NewReader(limInitialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// waitClosed reads c until the server closes it, and returns how long that
// took (or an error if it stayed open for limit).
func waitClosed(c net.Conn, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return time.Since(start), fmt.Errorf("still open after %v", limit)
	}
	return time.Since(start), nil
}

// TestSlowAndIdleConnectionsAreClosed opens 200 connections that send
// nothing, trickle their headers in, or never finish their body (without a
// token and with one), and checks that the server closes every one of them
// within its timeouts while a real client is served meanwhile.
func TestSlowAndIdleConnectionsAreClosed(t *testing.T) {
	s, _, tokens := limStore(t, "T-1", "T-2")
	lim := server.Limits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 800 * time.Millisecond,
		WriteTimeout: time.Second, IdleTimeout: 800 * time.Millisecond}
	base := limServe(t, s, server.Options{Limits: lim})
	addr := strings.TrimPrefix(base, "http://")

	kinds := []string{"idle", "slow headers", "slow body, no token", "slow body, claim token"}
	type result struct {
		kind string
		took time.Duration
		err  error
	}
	results := make(chan result, 200)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 200 {
		kind := kinds[i%len(kinds)]
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var head string
		switch kind {
		case "slow headers":
			head = "GET /api/v1/events HTTP/1.1\r\nHost: " + addr + "\r\n"
		case "slow body, no token":
			head = "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{"
		case "slow body, claim token":
			head = "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + tokens["T-1"] +
				"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{"
		}
		if head != "" {
			c.Write([]byte(head))
			wg.Add(1)
			go func() { // a byte every 50 ms, until the server gives up
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			took, err := waitClosed(c, 10*time.Second)
			results <- result{kind, took, err}
		}()
	}
	// A real client (its own claim) is served meanwhile.
	if st := limMCP(t, base, tokens["T-2"]); st != http.StatusOK {
		t.Errorf("a real client's initialize: %d", st)
	}
	longest := map[string]time.Duration{}
	for range 200 {
		r := <-results
		if r.err != nil {
			t.Errorf("%s: %v", r.kind, r.err)
		}
		longest[r.kind] = max(longest[r.kind], r.took)
	}
	close(stop)
	wg.Wait()
	for _, k := range kinds {
		t.Logf("%s: closed by the server within %v", k, longest[k].Round(time.Millisecond))
	}
}

// TestWriteTimeoutDropsAClientThatDoesNotRead checks that a response a
// client does not take fails its handler within WriteTimeout.
func TestWriteTimeoutDropsAClientThatDoesNotRead(t *testing.T) {
	failed := make(chan time.Duration, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				failed <- time.Since(start)
				return
			}
		}
	})
	l, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go server.ServeLimits(ctx, l, h, server.Limits{WriteTimeout: 500 * time.Millisecond})
	d := net.Dialer{Control: smallRcvBuf}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case took := <-failed:
		t.Logf("the handler's write failed after %v", took.Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("a client that does not read held its handler for 10 s")
	}
}

// TestSlowAnswerIsNotCutOff checks that a handler that computes its answer
// for longer than WriteTimeout (a cold listing of many tasks) still sends
// it whole: the write deadline runs from the response's first byte, so the
// client never reads an EOF in place of an answer.
func TestSlowAnswerIsNotCutOff(t *testing.T) {
	const timeout = time.Second
	body := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	wrote := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The computation outlasts the write timeout, measured from
		// before the handler began.
		<-time.After(timeout + timeout/2)
		w.Header().Set("Content-Type", "application/octet-stream")
		_, err := w.Write(body)
		wrote <- err
	})
	l, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go server.ServeLimits(ctx, l, h, server.Limits{WriteTimeout: timeout})
	resp, err := http.Get(server.URL(l) + "/slow")
	if err != nil {
		t.Fatalf("a slow answer was cut off: %v", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a slow answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("a slow answer: %s, %d bytes of %d", resp.Status, len(got), len(body))
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the handler's write failed: %v", err)
	}
}

// TestStreamOutlivesTimeouts checks that the event stream is not cut by the
// read and write timeouts of ordinary requests, and still delivers.
func TestStreamOutlivesTimeouts(t *testing.T) {
	s, _, tokens := limStore(t, "T-1")
	base := limServe(t, s, server.WithHeartbeat(server.Options{Limits: server.Limits{ReadHeaderTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}}, 100*time.Millisecond))
	res, err := http.Get(base + server.EventsPath + "?task=T-1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// Ten heartbeats, each after 100 ms of silence: the stream has lived
	// past every timeout (300 ms at most) three times over.
	heartbeats := 0
	for heartbeats < 10 {
		line, ok := <-lines
		if !ok {
			t.Fatalf("the stream ended after %d heartbeats", heartbeats)
		}
		if strings.Contains(line, "heartbeat") {
			heartbeats++
		}
	}
	limPost(t, s, "T-1", "agent-0", tokens["T-1"], "late", "# after the timeouts")
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended before the event")
			}
			if line == "event: "+server.EventArtifact {
				t.Logf("%d heartbeats, then the event, past every timeout", heartbeats)
				return
			}
		case <-timeout:
			t.Fatal("no event")
		}
	}
}

// rawRequest sends one request on a new connection and returns the status
// line the server answers with ("" if it closes without one).
func rawStatus(t *testing.T, addr, request string) (string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte(request))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.SetReadDeadline(time.Time{})
	return strings.TrimSpace(line), c
}

// TestConnectionAndStreamCaps checks the caps: beyond MaxConns a new
// connection takes the place of an idle one; beyond MaxStreams a stream is
// answered 503; when every connection is serving a request a new one is
// answered 503; a freed place serves again.
func TestConnectionAndStreamCaps(t *testing.T) {
	s, _, _ := limStore(t, "T-1")
	base := limServe(t, s, server.Options{Limits: server.Limits{MaxConns: 8, MaxStreams: 4}})
	addr := strings.TrimPrefix(base, "http://")
	stream := "GET " + server.EventsPath + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"

	// Eight idle connections fill the cap; a real request still gets in.
	var idle []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// The server accepts in the order of the dials (the listen queue is
	// first in, first out), so idle[0] is the oldest, and all eight are
	// held when the next connection is accepted.
	if st, c := rawStatus(t, addr, "GET /nowhere HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); !strings.Contains(st, " 404 ") {
		t.Errorf("a request with the cap full of idle connections: %q", st)
	} else {
		c.Close()
	}
	if _, err := waitClosed(idle[0], 5*time.Second); err != nil {
		t.Errorf("the oldest idle connection: %v", err)
	}

	// Four streams: the cap of streams; a fifth is refused.
	var streams []net.Conn
	for i := range 4 {
		st, c := rawStatus(t, addr, stream)
		if !strings.Contains(st, " 200 ") {
			t.Fatalf("stream %d: %q", i, st)
		}
		defer c.Close()
		streams = append(streams, c)
	}
	if st, c := rawStatus(t, addr, stream); !strings.Contains(st, " 503 ") {
		t.Errorf("a stream beyond MaxStreams: %q", st)
	} else {
		c.Close()
	}
	for _, c := range streams {
		c.Close()
	}

	// Four connections, each serving a stream: every place is inside a
	// handler, and a new connection is refused.
	base = limServe(t, s, server.Options{Limits: server.Limits{MaxConns: 4, MaxStreams: 4}})
	addr = strings.TrimPrefix(base, "http://")
	stream = "GET " + server.EventsPath + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"
	streams = nil
	for i := range 4 {
		st, c := rawStatus(t, addr, stream)
		if !strings.Contains(st, " 200 ") {
			t.Fatalf("stream %d: %q", i, st)
		}
		defer c.Close()
		streams = append(streams, c)
	}
	if st, c := rawStatus(t, addr, "GET /nowhere HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); !strings.Contains(st, " 503 ") {
		t.Errorf("a connection with every place serving: %q", st)
	} else {
		c.Close()
	}
	// A stream ends: its place serves again. The client ends its side;
	// the server ends the handler and then closes the connection, so once
	// the client reads the end the place is free.
	streams[0].(*net.TCPConn).CloseWrite()
	if _, err := waitClosed(streams[0], 30*time.Second); err != nil {
		t.Fatalf("a stream whose client ended: %v", err)
	}
	st, c := rawStatus(t, addr, "GET /nowhere HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	c.Close()
	if !strings.Contains(st, " 404 ") {
		t.Errorf("after a stream ended: %q", st)
	}
}

// TestRefusalAnswersTheRequest: at the connection cap, with every place
// inside a handler, the server answers a new connection's request with a
// well-formed 503 and never writes before it has read one. A connection
// that sends no request and ends its side reads nothing at all (a 503
// written unasked reaches a client that has not yet sent its request as an
// unsolicited response: Go's client then reports a broken connection, not
// a 503). Every request of Go's own client at the cap reads the 503.
func TestRefusalAnswersTheRequest(t *testing.T) {
	s, _, _ := limStore(t, "T-1")
	base := limServe(t, s, server.Options{Limits: server.Limits{MaxConns: 2, MaxStreams: 2}})
	addr := strings.TrimPrefix(base, "http://")
	// Two streams hold both places: their 200 is written from inside
	// their handlers, so once it is read both places are busy.
	for range 2 {
		res, err := http.Get(base + server.EventsPath)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("stream: %v %v", err, res)
		}
		defer res.Body.Close()
	}

	// No request: the server must not speak first.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
		t.Errorf("a connection over the cap that sent no request read %q (%v), want nothing", b, err)
	}

	// A request, raw: one well-formed 503 for it, then the end.
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _ := http.NewRequest(http.MethodPost, base+server.APIPrefix+"/tasks/T-1/artifacts", strings.NewReader(`{"key":"k"}`))
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("the answer to a request over the cap: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	var e server.APIError
	if err != nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" || !res.Close ||
		json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		t.Errorf("the answer to a request over the cap: %d %v close=%v %q (%v)", res.StatusCode, res.Header, res.Close, body, err)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("after the 503: %q", rest)
	}

	// Go's client, on a new connection each time: always the 503.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 50 {
		res, err := hc.Get(base + server.APIPrefix + "/tasks")
		if err != nil {
			t.Fatalf("request %d over the cap: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %d over the cap: %d", i, res.StatusCode)
		}
	}
}
