package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Real git servers on loopback for the remote tests: a bare repository over
// file://, `git daemon` on 127.0.0.1, and smart HTTP through `git
// http-backend` served by the test with net/http/cgi. Each serves the bare
// repositories under its root; newRemote makes one and returns its URL.

type gitServer struct {
	name string
	root string                   // folder of bare repositories
	url  func(repo string) string // URL of the bare repository named repo
}

// gitServerKinds are the servers every remote scenario runs against.
var gitServerKinds = []string{"file", "daemon", "http"}

// newGitServer starts a server of kind, stopped when the test ends.
func newGitServer(t *testing.T, kind string) *gitServer {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	root := t.TempDir()
	switch kind {
	case "file":
		return &gitServer{name: kind, root: root, url: func(repo string) string { return "file://" + filepath.Join(root, repo) }}
	case "daemon":
		return startDaemon(t, root)
	case "http":
		return startHTTPBackend(t, root)
	}
	t.Fatalf("unknown git server %q", kind)
	return nil
}

// newRemote creates an empty bare repository on the server and returns its
// URL. Pushes over HTTP are allowed without authentication
// (http.receivepack), as git-http-backend requires for an anonymous push.
// The remote guard is installed (pre-receive, trust on first use, the
// operator's BERNSTEIN_HOME beside the repository): every push of the suite
// goes through it, so a good push it refused would fail the test that made it.
func (g *gitServer) newRemote(t *testing.T, repo string) string {
	t.Helper()
	dir := filepath.Join(g.root, repo)
	gitRun(t, "", "init", "-q", "--bare", dir)
	gitRun(t, dir, "config", "http.receivepack", "true")
	cmd := exec.Command(cliBin, "--repo", dir, "hooks", "install", "--remote-guard", "--trust-first-use")
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+dir+".operator")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install the remote guard in %s: %v\n%s", dir, err, out)
	}
	return g.url(repo)
}

// operatorPin pins hosts' keys (from the allowed_signers file signers) in
// the bare repository repo's guard, as its operator does after checking
// them: fully, not on first use, so that each host may act on the others'
// tasks (a writer trusted only on first use may act on its own alone).
func (g *gitServer) operatorPin(t *testing.T, repo, signers string, hosts ...*host) {
	t.Helper()
	dir := g.dir(repo)
	args := []string{"--repo", dir, "keys", "pin", "--from", signers}
	for _, h := range hosts {
		args = append(args, h.name)
	}
	cmd := exec.Command(cliBin, args...)
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+dir+".operator")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("keys pin in %s: %v\n%s", dir, err, out)
	}
}

// guardPinned lists, as `keys list` prints them, the writer keys the guard
// of the bare repository dir pinned on first use: evidence that pushes went
// through it.
func guardPinned(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "hooks", "pre-receive"))
	if err != nil || !strings.Contains(string(b), "hooks run pre-receive") {
		t.Fatalf("%s runs no remote guard: %v\n%s", dir, err, b)
	}
	cmd := exec.Command(cliBin, "--repo", dir, "keys", "list")
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+dir+".operator", "BERNSTEIN_FORCE_TTY=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("keys list in %s: %v", dir, err)
	}
	return string(out)
}

// dir is the bare repository's folder, for inspection.
func (g *gitServer) dir(repo string) string { return filepath.Join(g.root, repo) }

// gitExecPath is where git keeps its helpers (git-http-backend).
func gitExecPath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// freePort finds a loopback port nobody listens on (a daemon that loses the
// race to another process fails to start and is retried).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startDaemon(t *testing.T, root string) *gitServer {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		if g := tryDaemon(t, root, freePort(t)); g != nil {
			return g
		}
	}
	t.Fatal("git daemon did not start")
	return nil
}

// tryDaemon starts git daemon on port and waits until it says it listens
// ("Ready to rumble", which --verbose has it log once its sockets are
// bound); nil when it exited (another process took the port).
func tryDaemon(t *testing.T, root string, port int) *gitServer {
	t.Helper()
	// git-daemon itself, not `git daemon`: the git wrapper would run it as a
	// child that outlives a kill of the wrapper.
	cmd := exec.Command(filepath.Join(gitExecPath(t), "git-daemon"), "--export-all", "--enable=receive-pack", "--base-path="+root,
		"--reuseaddr", "--listen=127.0.0.1", fmt.Sprintf("--port=%d", port), "--informative-errors", "--verbose", root)
	// A pipe of our own, not exec's: the daemon's children (one per
	// connection) inherit its stderr, and Wait would wait for the last of
	// them to close an exec pipe.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	// Its own process group, so that the clean-up stops the daemon and
	// the children serving connections.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start git daemon: %v", err)
	}
	pw.Close()
	var logMu sync.Mutex
	var log strings.Builder
	stderr := func() string { logMu.Lock(); defer logMu.Unlock(); return log.String() }
	ready := make(chan struct{})
	go func() {
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		said := false
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if !said && strings.Contains(sc.Text(), "Ready to rumble") {
				said = true
				close(ready)
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	select {
	case err := <-exited:
		t.Logf("git daemon on %s exited (%v): %s", addr, err, stderr())
		return nil
	case <-ready:
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	return &gitServer{name: "daemon", root: root, url: func(repo string) string { return "git://" + addr + "/" + repo }}
}

func startHTTPBackend(t *testing.T, root string) *gitServer {
	t.Helper()
	h := &cgi.Handler{
		Path: filepath.Join(gitExecPath(t), "git-http-backend"),
		Root: "/",
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"HOME=" + root,
		},
		InheritEnv: []string{"PATH", "TMPDIR"},
	}
	srv := httptest.NewServer(http.Handler(h))
	t.Cleanup(srv.Close)
	return &gitServer{name: "http", root: root, url: func(repo string) string { return srv.URL + "/" + repo }}
}

// gitRun runs git in dir (the current folder when empty) and fails the test
// on an error; it returns stdout.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitTry(dir, args...)
	if err != nil {
		t.Fatalf("git %s (in %s): %v", strings.Join(args, " "), dir, err)
	}
	return out
}

// gitTry runs git in dir and returns stdout, or an error carrying stderr.
func gitTry(dir string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.Command("git", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// isolateGit keeps the user's and the system's git configuration out of a
// test, and gives commits an identity.
func isolateGit(t *testing.T) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_AUTHOR_NAME", "tester")
	t.Setenv("GIT_AUTHOR_EMAIL", "tester@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "tester")
	t.Setenv("GIT_COMMITTER_EMAIL", "tester@example.com")
	t.Setenv("GIT_TERMINAL_PROMPT", "0")
	for _, v := range []string{"BERNSTEIN_REPO", "BERNSTEIN_HOME", "BERNSTEIN_ALLOWED_SIGNERS", "BERNSTEIN_AGENT", "BERNSTEIN_CLAIM_TOKEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
}
