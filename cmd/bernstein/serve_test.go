package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a buffer a server writes to while a test reads it;
// wrote is closed (and replaced) at every write.
type lockedBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		close(l.wrote)
	}
	l.wrote = make(chan struct{})
	return l.b.Write(p)
}

// next returns a channel closed at the next write.
func (l *lockedBuffer) next() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote == nil {
		l.wrote = make(chan struct{})
	}
	return l.wrote
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe runs 'bernstein serve args...' in process until the test ends
// and returns the URL it printed to open and everything it printed by then.
func startServe(t *testing.T, e *cliEnv, args ...string) (string, string) {
	t.Helper()
	errb := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		root := newRootCmd(&IO{In: strings.NewReader(""), Out: io.Discard, Err: errb})
		root.SetArgs(append([]string{"--repo", e.repo, "serve", "--addr", "127.0.0.1:0"}, args...))
		root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	open := regexp.MustCompile(`bernstein: open (http://\S+)`)
	hang := time.After(30 * time.Second)
	for {
		wrote := errb.next()
		if m := open.FindStringSubmatch(errb.String()); m != nil {
			return m[1], errb.String()
		}
		select {
		case <-done:
			t.Fatalf("serve ended: %s", errb.String())
		case <-hang:
			t.Fatalf("serve printed no URL in 30 s: %s", errb.String())
		case <-wrote:
		}
	}
}

func status(t *testing.T, method, u, auth string) int {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestServeReadToken checks the serve command's wiring of the read token:
// --allow-remote generates one and prints the URL that carries it, which
// opens the pages while a request without it is refused; --read-token (or
// BERNSTEIN_READ_TOKEN) is taken as given and required on loopback too;
// without either, reads are open; a malformed one is refused up front.
func TestServeReadToken(t *testing.T) {
	e := newCLIEnv(t)
	e.claimed("T-1", "agent-1")

	open, printed := startServe(t, e, "--allow-remote")
	u, err := url.Parse(open)
	if err != nil {
		t.Fatal(err)
	}
	rt := u.Query().Get("token")
	if !strings.HasPrefix(rt, "brt_") || !strings.Contains(printed, "Authorization: Bearer "+rt) {
		t.Fatalf("--allow-remote printed no read token: %s", printed)
	}
	base := u.Scheme + "://" + u.Host
	if st := status(t, "GET", base+"/api/v1/events", ""); st != http.StatusUnauthorized {
		t.Errorf("a read without the read token: %d", st)
	}
	if st := status(t, "GET", base+"/", "Bearer brt_wrongwrongwrongwrong"); st != http.StatusUnauthorized {
		t.Errorf("a read with a wrong token: %d", st)
	}
	if st := status(t, "GET", open, ""); st == http.StatusUnauthorized {
		t.Errorf("the printed URL: %d", st)
	}
	if st := status(t, "GET", base+"/", "Bearer "+rt); st == http.StatusUnauthorized {
		t.Errorf("a read with the read token: %d", st)
	}
	// MCP keeps its claim token authentication.
	if st := status(t, "GET", base+"/mcp", ""); st != http.StatusUnauthorized {
		t.Errorf("MCP without a claim token: %d", st)
	}

	given := "brt_given-by-the-operator-0123456789"
	open2, _ := startServe(t, e, "--read-token", given)
	if !strings.Contains(open2, "token="+given) {
		t.Errorf("--read-token: printed %s", open2)
	}
	base2 := strings.SplitN(open2, "/?", 2)[0]
	if st := status(t, "GET", base2+"/", ""); st != http.StatusUnauthorized {
		t.Errorf("--read-token on loopback: a read without it: %d", st)
	}
	if st := status(t, "GET", base2+"/", "Bearer "+given); st == http.StatusUnauthorized {
		t.Errorf("--read-token: a read with it: %d", st)
	}

	t.Setenv("BERNSTEIN_READ_TOKEN", "brt_from-the-environment-0123456789")
	open3, _ := startServe(t, e)
	if !strings.Contains(open3, "token=brt_from-the-environment-0123456789") {
		t.Errorf("BERNSTEIN_READ_TOKEN: printed %s", open3)
	}
	t.Setenv("BERNSTEIN_READ_TOKEN", "")

	open4, printed4 := startServe(t, e)
	if strings.Contains(open4, "token=") || strings.Contains(printed4, "read token") {
		t.Errorf("loopback without a read token printed one: %s", printed4)
	}
	if st := status(t, "GET", strings.TrimSuffix(open4, "/")+"/", ""); st == http.StatusUnauthorized {
		t.Errorf("loopback: an open read: %d", st)
	}

	r := e.want(1, "serve", "--addr", "127.0.0.1:0", "--read-token", "short")
	if !strings.Contains(r.err, "--read-token: a read token is 16 to 256 characters long") {
		t.Errorf("a short read token: %q", r.err)
	}
}
