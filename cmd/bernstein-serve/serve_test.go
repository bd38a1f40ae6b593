package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bernstein/bernstein/internal/servecmd"
	"github.com/bernstein/bernstein/internal/testbin"
	"github.com/bernstein/bernstein/server"
	"github.com/spf13/cobra"
)

// cliEnv is a fresh repository with a writer identity, made by the
// bernstein binary (internal/testbin); the server program runs in process.
type cliEnv struct {
	t    *testing.T
	bin  string
	repo string
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("BERNSTEIN_HOME", filepath.Join(dir, "home"))
	t.Setenv("HOME", dir)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("BERNSTEIN_REPO", "")
	t.Setenv("BERNSTEIN_READ_TOKEN", "")
	t.Setenv("BERNSTEIN_ALLOWED_SIGNERS", "")
	e := &cliEnv{t: t, bin: bin, repo: filepath.Join(dir, "repo")}
	e.bernstein("init", "--writer", "cli-writer")
	return e
}

// bernstein runs the bernstein binary on the environment's repository.
func (e *cliEnv) bernstein(args ...string) string {
	e.t.Helper()
	out, err := exec.Command(e.bin, append([]string{"--repo", e.repo}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("bernstein %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (e *cliEnv) claimed(task, agent string) {
	e.t.Helper()
	e.bernstein("task", "create", task)
	e.bernstein("task", "claim", task, "--agent", agent)
}

type cliResult struct {
	out, err string
	code     int
}

// want runs the server program's command line in process on the
// environment's repository and fails unless it exits with code.
func (e *cliEnv) want(code int, args ...string) cliResult {
	e.t.Helper()
	var out, errb bytes.Buffer
	got := run(append([]string{"--repo", e.repo}, args...), &IO{In: strings.NewReader(""), Out: &out, Err: &errb})
	if got != code {
		e.t.Fatalf("%v: exit %d, want %d: %s%s", args, got, code, out.String(), errb.String())
	}
	return cliResult{out.String(), errb.String(), got}
}

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

// startServe runs 'bernstein-serve serve args...' in process until the test ends
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
	if !strings.HasPrefix(r.err, "bernstein: --read-token: a read token is 16 to 256 characters long") {
		t.Errorf("a short read token: %q", r.err)
	}
}

// TestSharedDefinitions: what bernstein shows and passes on for serve is
// what this program serves: the default address, the version.
func TestSharedDefinitions(t *testing.T) {
	if servecmd.DefaultAddr != server.DefaultAddr {
		t.Errorf("serve's help and flag default %s, the server's %s", servecmd.DefaultAddr, server.DefaultAddr)
	}
	e := newCLIEnv(t)
	cli := strings.Fields(e.bernstein("--version"))
	var out bytes.Buffer
	if code := run([]string{"--version"}, &IO{Out: &out, Err: &out}); code != 0 || len(cli) == 0 || !strings.HasSuffix(strings.TrimSpace(out.String()), " "+cli[len(cli)-1]) {
		t.Errorf("bernstein-serve --version %q (exit %d), bernstein's %q", out.String(), code, cli)
	}
}

// TestErrorsAsBernsteinPrintsThem: outside a repository, the server program
// prints the line bernstein prints for any command there, and exits 1.
func TestErrorsAsBernsteinPrintsThem(t *testing.T) {
	e := newCLIEnv(t)
	nowhere := t.TempDir()
	cmd := exec.Command(e.bin, "--repo", nowhere, "task", "list")
	var cliErr bytes.Buffer
	cmd.Stderr = &cliErr
	if err := cmd.Run(); err == nil {
		t.Fatal("bernstein task list outside a repository succeeded")
	}
	var errb bytes.Buffer
	code := run([]string{"--repo", nowhere, "serve", "--addr", "127.0.0.1:0"}, &IO{In: strings.NewReader(""), Out: io.Discard, Err: &errb})
	if code != 1 || errb.String() != cliErr.String() || !strings.Contains(errb.String(), "use --repo DIR") {
		t.Errorf("serve outside a repository: exit %d %q; bernstein prints %q", code, errb.String(), cliErr.String())
	}
	var mcpErr bytes.Buffer
	if code := run([]string{"--repo", e.repo, "mcp"}, &IO{Out: io.Discard, Err: &mcpErr}); code != 1 || !strings.Contains(mcpErr.String(), "pass --http ADDR") {
		t.Errorf("mcp without --http: exit %d %q", code, mcpErr.String())
	}
}

// TestHelpFitsEightyColumns: this program's --help, as bernstein's, reads on
// an 80-column terminal.
func TestHelpFitsEightyColumns(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(&IO{In: strings.NewReader(""), Out: &out, Err: &out})
	for _, c := range append([]*cobra.Command{root}, root.Commands()...) {
		out.Reset()
		if err := c.Help(); err != nil || !strings.Contains(out.String(), "Usage:") {
			t.Fatalf("%s --help: %v\n%s", c.CommandPath(), err, out.String())
		}
		for i, l := range strings.Split(out.String(), "\n") {
			if w := utf8.RuneCountInString(l); w > 80 {
				t.Errorf("%s --help, line %d is %d columns: %q", c.CommandPath(), i+1, w, l)
			}
		}
	}
}
