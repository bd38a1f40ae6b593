package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/bernstein/bernstein/internal/testbin"
)

// serverOnly are packages only bernstein-serve may link: their package
// initialisation would otherwise run at the start of every command.
var serverOnly = []string{
	"github.com/bernstein/bernstein/server",
	"github.com/yuin/goldmark",
	"github.com/microcosm-cc/bluemonday",
	"github.com/gorilla/css",
	"github.com/aymerick/douceur",
	"golang.org/x/net/html",
}

// deps lists the packages pkg links, as go list reports them.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestCLILinksNoServerPackages: bernstein links neither the server nor the
// markdown renderer and sanitizer of its pages; bernstein-serve does (so
// the check below can see them).
func TestCLILinksNoServerPackages(t *testing.T) {
	linked := func(pkgs []string) []string {
		var found []string
		for _, p := range pkgs {
			for _, s := range serverOnly {
				if p == s || strings.HasPrefix(p, s+"/") {
					found = append(found, p)
				}
			}
		}
		return found
	}
	if found := linked(deps(t, "github.com/bernstein/bernstein/cmd/bernstein")); len(found) > 0 {
		t.Errorf("bernstein links %v: only bernstein-serve may (docs/performance.md, Start-up)", found)
	}
	if found := linked(deps(t, "github.com/bernstein/bernstein/cmd/bernstein-serve")); len(found) < len(serverOnly) {
		t.Errorf("bernstein-serve links only %v of %v: the list no longer names what the server links", found, serverOnly)
	}
}

// binEnv is a repository made by the built bernstein, beside which
// bernstein-serve is (internal/testbin).
type binEnv struct {
	t          *testing.T
	bin, repo  string
	home, temp string
}

func newBinEnv(t *testing.T) *binEnv {
	t.Helper()
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &binEnv{t: t, bin: bin, repo: filepath.Join(dir, "repo"), home: filepath.Join(dir, "home"), temp: dir}
	if out, err := e.cmd(bin, "init", "--writer", "w").CombinedOutput(); err != nil {
		t.Fatalf("init: %v %s", err, out)
	}
	return e
}

// cmd is bin with args on the environment's repository and home.
func (e *binEnv) cmd(bin string, args ...string) *exec.Cmd {
	c := exec.Command(bin, append([]string{"--repo", e.repo}, args...)...)
	c.Env = append(os.Environ(), "BERNSTEIN_HOME="+e.home, "HOME="+e.temp, "GIT_CONFIG_NOSYSTEM=1", "BERNSTEIN_REPO=", "BERNSTEIN_READ_TOKEN=")
	return c
}

var openLine = regexp.MustCompile(`^bernstein: open (http://\S+)`)

// started runs c and returns the URL it printed to open (its readiness
// signal) and its stderr so far.
func started(t *testing.T, c *exec.Cmd) (string, string) {
	t.Helper()
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	sc := bufio.NewScanner(stderr)
	var printed strings.Builder
	for sc.Scan() {
		printed.WriteString(sc.Text() + "\n")
		if m := openLine.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stderr)
			return m[1], printed.String()
		}
	}
	c.Wait()
	t.Fatalf("serve ended without a URL: %s", printed.String())
	return "", ""
}

// TestServeBecomesTheServerProgram: 'bernstein serve' replaces itself with
// bernstein-serve: the process started is the server (same pid, its
// program bernstein-serve), it serves what the flags asked, takes a read
// token from the environment without putting it on its command line, and
// ends with status 0 on SIGTERM.
func TestServeBecomesTheServerProgram(t *testing.T) {
	e := newBinEnv(t)
	token := "brt_from-the-environment-0123456789"
	c := e.cmd(e.bin, "serve", "--addr", "127.0.0.1:0")
	c.Env = append(c.Env, "BERNSTEIN_READ_TOKEN="+token)
	open, _ := started(t, c)
	if !strings.Contains(open, "token="+token) {
		t.Errorf("the read token of the environment did not reach the server: %s", open)
	}
	pid := strconv.Itoa(c.Process.Pid)
	exe, err := os.Readlink("/proc/" + pid + "/exe")
	if err != nil || filepath.Base(exe) != testbin.ServeProgram {
		t.Errorf("the process started as bernstein runs %q (%v), not %s", exe, err, testbin.ServeProgram)
	}
	cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
	if want := "serve\x00--addr=127.0.0.1:0\x00--repo=" + e.repo + "\x00"; !strings.HasSuffix(string(cmdline), want) || bytes.Contains(cmdline, []byte(token)) {
		t.Errorf("the server's command line %q, want it to end %q and not hold the token", cmdline, want)
	}
	base := strings.SplitN(open, "/?", 2)[0]
	if st := get(t, base+"/api/v1/tasks", ""); st != http.StatusUnauthorized {
		t.Errorf("a read without the read token: %d", st)
	}
	if st := get(t, base+"/api/v1/tasks", "Bearer "+token); st != http.StatusOK {
		t.Errorf("a read with the read token: %d", st)
	}
	c.Process.Signal(syscall.SIGTERM)
	if err := c.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v, want exit 0", err)
	}
}

func get(t *testing.T, u, auth string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestMCPOverHTTPBecomesTheServerProgram: 'bernstein mcp --http' is served
// by bernstein-serve too, and ends with status 0 on SIGINT.
func TestMCPOverHTTPBecomesTheServerProgram(t *testing.T) {
	e := newBinEnv(t)
	c := e.cmd(e.bin, "mcp", "--http", "127.0.0.1:0")
	stderr, _ := c.StderrPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	m := regexp.MustCompile(`^bernstein: serving MCP at (http://\S+)/mcp `).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("mcp --http printed %q (%v)", line, err)
	}
	go io.Copy(io.Discard, stderr)
	if exe, _ := os.Readlink("/proc/" + strconv.Itoa(c.Process.Pid) + "/exe"); filepath.Base(exe) != testbin.ServeProgram {
		t.Errorf("mcp --http runs %q, not %s", exe, testbin.ServeProgram)
	}
	if st := get(t, m[1]+"/mcp", ""); st != http.StatusUnauthorized {
		t.Errorf("MCP without a claim token: %d", st)
	}
	c.Process.Signal(os.Interrupt)
	if err := c.Wait(); err != nil {
		t.Errorf("mcp --http after SIGINT: %v, want exit 0", err)
	}
}

// TestServeWithoutTheServerProgram: a bernstein with no bernstein-serve
// beside it or on PATH says what to install and exits 1, having written
// nothing; its help needs no server program.
func TestServeWithoutTheServerProgram(t *testing.T) {
	e := newBinEnv(t)
	lone := filepath.Join(t.TempDir(), "bernstein")
	b, err := os.ReadFile(e.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"serve", "--addr", "127.0.0.1:0"}, {"mcp", "--http", "127.0.0.1:0"}} {
		c := e.cmd(lone, args...)
		c.Env = append(c.Env, "PATH="+t.TempDir())
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != 1 || out.Len() != 0 ||
			!strings.HasPrefix(errb.String(), "bernstein: the HTTP server is the program bernstein-serve, found neither at "+filepath.Join(filepath.Dir(lone), "bernstein-serve")+" nor on PATH: install it with go install github.com/bernstein/bernstein/cmd/...@latest") {
			t.Errorf("%v without bernstein-serve: %v, stdout %q, stderr %q", args, err, out.String(), errb.String())
		}
	}
	help, err := e.cmd(lone, "serve", "--help").Output()
	if err != nil || !strings.Contains(string(help), "Exit status: 0 on SIGINT/SIGTERM") || !strings.Contains(string(help), "--read-token") {
		t.Errorf("serve --help without bernstein-serve: %v %s", err, help)
	}
}

// TestServerProgramTakesEveryGlobalFlag: the flags serve and mcp --http
// pass on include bernstein's global ones, so bernstein-serve must accept
// each (a global flag added to bernstein and not to it fails here).
func TestServerProgramTakesEveryGlobalFlag(t *testing.T) {
	serve, err := testbin.ServePath()
	if err != nil {
		t.Fatal(err)
	}
	var globals []string
	newRootCmd(&IO{Out: io.Discard, Err: io.Discard}).PersistentFlags().VisitAll(func(f *pflag.Flag) {
		globals = append(globals, "--"+f.Name+"="+f.Value.String())
	})
	if len(globals) < 2 {
		t.Fatalf("read only %v", globals)
	}
	for _, cmd := range []string{"serve", "mcp"} {
		// --help: the flags are parsed, nothing is served.
		out, err := exec.Command(serve, append(append([]string{cmd}, globals...), "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("bernstein-serve %s %v: %v %s", cmd, globals, err, out)
		}
	}
}
