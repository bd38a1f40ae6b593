package server_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/server"
)

func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, err := server.Listen(addr, false)
		if err != nil {
			t.Errorf("%s: %v", addr, err)
			continue
		}
		if !strings.HasPrefix(server.URL(l), "http://127.0.0.1:") || strings.HasSuffix(server.URL(l), ":0") {
			t.Errorf("%s: URL %s does not name the port picked", addr, server.URL(l))
		}
		l.Close()
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:7420", "example.com:80"} {
		if l, err := server.Listen(addr, false); err == nil {
			l.Close()
			t.Errorf("%s: listened without --allow-remote", addr)
		} else if !strings.Contains(err.Error(), "not on loopback") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if _, err := server.Listen("127.0.0.1", false); err == nil {
		t.Error("an address without a port was accepted")
	}
	l, err := server.Listen("0.0.0.0:0", true)
	if err != nil {
		t.Fatalf("--allow-remote: %v", err)
	}
	l.Close()
}

func TestServeRoutesAndShutsDown(t *testing.T) {
	root := t.TempDir()
	opts := bernstein.Options{Repo: filepath.Join(root, "repo"), Home: filepath.Join(root, "home")}
	if _, err := bernstein.Init(opts, "test-writer"); err != nil {
		t.Fatal(err)
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "T-1", Title: "t"}); err != nil {
		t.Fatal(err)
	}
	token, err := s.Claim("T-1", "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, l, server.Handler(s, server.Options{Version: "test"})) }()
	base := server.URL(l)

	post := func(auth string) *http.Response {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
		req, _ := http.NewRequest(http.MethodPost, base+server.MCPPath, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := post(""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("/mcp without a token: %d", res.StatusCode)
	}
	res := post("Bearer " + token)
	if res.StatusCode != http.StatusOK || res.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("/mcp with the claim token: %d, session %q", res.StatusCode, res.Header.Get("Mcp-Session-Id"))
	}
	// A standalone event stream stays open until the server ends it.
	req, _ := http.NewRequest(http.MethodGet, base+server.MCPPath, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", res.Header.Get("Mcp-Session-Id"))
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %d", stream.StatusCode)
	}
	if res, err := http.Get(base + "/elsewhere"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown path: %v %v", res, err)
	}

	start := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown waited %v on an open event stream", d)
	}
}
