package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeUse runs the shell block under "## Use" in README.md as
// written, one command line at a time and in order, in the setup the README
// describes: a fresh git repository with a few commits, a notes.md and a
// timings.csv in its work tree, and a temporary BERNSTEIN_HOME. Every line
// must exit 0. The two servers are run briefly: `bernstein mcp` answers
// requests piped to it and exits when its input ends; `bernstein serve` is
// started, asked over HTTP, and stopped with SIGTERM (exit 0).
func TestReadmeUse(t *testing.T) {
	lines := readmeUseLines(t)
	r := newReadmeRun(t)

	// What some lines must print, so that the comments beside them stay
	// true. Each must match a line of the block.
	expect := map[string][]string{
		"bernstein task claim T-1":               {`^bct_[A-Za-z0-9_-]{43}$`},
		"bernstein artifact list T-1":            {`(?m)^summary\t1\treport\tverified\t0\t`, `(?m)^timings\t1\ttable\tverified\t1\t`, `(?m)^preview\t1\tlink/preview\tverified\t2\t`},
		"bernstein artifact show T-1 summary":    {`(?m)^summary v1 \(report\) of task T-1: verified$`},
		"git show refs/bernstein/journal/T-1~2:": {`"type":"report"`, `Planner notes`},
		"bernstein diff capture T-1":             {`(?m)^captured [1-9][0-9]* files?, \+[0-9]+ -[0-9]+: diff_captured row`},
		"bernstein gate run T-1":                 {`(?m)^gate \S+ passed: gate_attempt row`},
		"bernstein task progress T-1":            {`"checkpoints": 1,`, `"diffs_captured": 1,`, `"gates_passed": 1,`, `"earned_steps": 3,`, `"vector_hash": "[0-9a-f]{64}"`},
		"bernstein audit verify":                 {`verified: everything holds`},
		"bernstein task list --strict":           {`(?m)^T-1\tverified\t3\t0\t0\tverified\topen\tclaimed\tagent-7\t3\tFix the planner$`},
		"bernstein artifact diff T-1 summary":    {`(?m)^--- summary v1 \(report, verified, journal index 0\)$`, "(?m)^-The planner picks a nested loop for `orders` joins\\.$", "(?m)^\\+The planner picks hash joins for `orders` joins\\.$"},
		"git diff refs/bernstein/journal/T-1~3:": {"(?m)^-The planner picks a nested loop for `orders` joins\\.$", "(?m)^\\+The planner picks hash joins for `orders` joins\\.$"},
		"git log -p --diff-filter=A":             {`(?m)^\+# Planner notes$`, "(?m)^\\+The planner picks hash joins for `orders` joins\\.$", "(?m)^\\+The planner picks a nested loop for `orders` joins\\.$"},
	}
	used := map[string]bool{}
	ran := map[string]bool{}
	for i, line := range lines {
		var stdout string
		switch {
		case strings.HasPrefix(line, "bernstein mcp"):
			stdout = r.mcp(line)
			ran["mcp"] = true
		case strings.HasPrefix(line, "bernstein serve"):
			r.serve(line)
			ran["serve"] = true
		default:
			stdout = r.line(line)
		}
		for prefix, res := range expect {
			if !strings.HasPrefix(strings.TrimPrefix(line, "TOKEN=$("), prefix) {
				continue
			}
			used[prefix] = true
			for _, re := range res {
				if !regexp.MustCompile(re).MatchString(stdout) {
					t.Errorf("README command %d `%s`: stdout does not match %q:\n%s", i+1, line, re, stdout)
				}
			}
		}
	}
	for prefix := range expect {
		if !used[prefix] {
			t.Errorf("no README line starts with %q: update readme_test.go with the README", prefix)
		}
	}
	if !ran["mcp"] || !ran["serve"] {
		t.Errorf("the README block no longer runs `bernstein mcp` and `bernstein serve` (ran %v): update readme_test.go", ran)
	}
}

// readmeUseLines returns the command lines of the first sh block under
// "## Use" in README.md: continuation lines joined, blank and comment-only
// lines left out.
func readmeUseLines(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	at := strings.Index(text, "\n## Use\n")
	if at < 0 {
		t.Fatal(`README.md has no "## Use" section`)
	}
	text = text[at:]
	if next := strings.Index(text[1:], "\n## "); next >= 0 {
		text = text[:next+1]
	}
	start := strings.Index(text, "\n```sh\n")
	if start < 0 {
		t.Fatal(`README.md's "## Use" section has no sh block`)
	}
	text = text[start+len("\n```sh\n"):]
	end := strings.Index(text, "\n```")
	if end < 0 {
		t.Fatal("README.md's sh block under \"## Use\" is not closed")
	}
	var lines []string
	cont := ""
	for _, l := range strings.Split(text[:end], "\n") {
		if strings.HasSuffix(l, `\`) {
			cont += strings.TrimSuffix(l, `\`)
			continue
		}
		l = strings.TrimSpace(cont + l)
		cont = ""
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, l)
	}
	if cont != "" {
		t.Fatal("README.md's sh block under \"## Use\" ends in a continuation line")
	}
	if len(lines) < 10 {
		t.Fatalf("README.md's sh block under \"## Use\" has only %d command lines", len(lines))
	}
	return lines
}

// readmeRun is a newcomer's shell: a fresh repository as the current
// directory, the bernstein under test on PATH, and the variables earlier
// lines assigned.
type readmeRun struct {
	t    *testing.T
	dir  string
	env  []string
	vars map[string]string
}

func newReadmeRun(t *testing.T) *readmeRun {
	t.Helper()
	root := t.TempDir()
	r := &readmeRun{t: t, dir: filepath.Join(root, "repo"), vars: map[string]string{}}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "BERNSTEIN_") || strings.HasPrefix(name, "GIT_") || strings.HasPrefix(name, "XDG_") || name == "HOME" || name == "PATH" {
			continue
		}
		r.env = append(r.env, kv)
	}
	r.env = append(r.env,
		"PATH="+filepath.Dir(cliBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+root,
		"XDG_CONFIG_HOME="+filepath.Join(root, ".config"),
		"BERNSTEIN_HOME="+filepath.Join(root, "bernstein-home"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_PAGER=cat",
		"GIT_AUTHOR_NAME=Newcomer", "GIT_AUTHOR_EMAIL=newcomer@example.com",
		"GIT_COMMITTER_NAME=Newcomer", "GIT_COMMITTER_EMAIL=newcomer@example.com",
	)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The setup the README describes: a git repository with a few commits,
	// and the files the block posts in its work tree.
	r.setup("git init -q")
	steps := []string{"Parse the query.", "Pick a join order.", "Prefer hash joins for orders."}
	for i := range steps {
		r.write("planner.md", "# Planner\n\n"+strings.Join(steps[:i+1], "\n")+"\n")
		r.setup("git add planner.md && git commit -q -m " + shellQuote(fmt.Sprintf("planner: step %d", i+1)))
	}
	r.write("notes.md", "# Planner notes\n\nThe planner picks a nested loop for `orders` joins.\n")
	r.write("timings.csv", "query,before_ms,after_ms\nq1,840,120\nq2,310,95\n")
	return r
}

func (r *readmeRun) write(name, content string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, name), []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *readmeRun) setup(script string) {
	r.t.Helper()
	cmd := r.cmd(context.Background(), script)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("setup `%s`: %v\n%s", script, err, out)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// cmd is bash running script in the repository with the run's environment.
func (r *readmeRun) cmd(ctx context.Context, script string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = r.dir
	cmd.Env = append([]string(nil), r.env...)
	for k, v := range r.vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

var assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=`)

// line runs one README line and fails the test unless it exits 0; it
// returns the line's stdout. A line assigning a variable (TOKEN=$(...))
// keeps the value for the lines after it.
func (r *readmeRun) line(line string) string {
	r.t.Helper()
	script := line
	name := ""
	if m := assignment.FindStringSubmatch(line); m != nil {
		name = m[1]
		script = line + "\n__rc=$?\nprintf '%s' \"$" + name + "\"\nexit $__rc"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := r.cmd(ctx, script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r.t.Logf("$ %s\n%s%s", line, stdout.String(), stderr.String())
	if err != nil {
		r.t.Fatalf("README line `%s` failed: %v\nstdout:\n%s\nstderr:\n%s", line, err, stdout.String(), stderr.String())
	}
	if name != "" {
		r.vars[name] = stdout.String()
	}
	return stdout.String()
}

// mcp runs the stdio server line with a client's first requests piped in: it
// must answer them and exit 0 when its input ends.
func (r *readmeRun) mcp(line string) string {
	r.t.Helper()
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"readme","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bernstein_task_handle","arguments":{"task_id":"T-1"}}}
`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := r.cmd(ctx, "exec "+line)
	cmd.Stdin = strings.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var brief strings.Builder
	for _, l := range strings.SplitAfter(stdout.String(), "\n") {
		if len(l) > 200 {
			l = l[:200] + "...\n"
		}
		brief.WriteString(l)
	}
	r.t.Logf("$ %s < (initialize, tools/list, task handle)\n%s%s", line, brief.String(), stderr.String())
	if err != nil {
		r.t.Fatalf("README line `%s` failed: %v\nstdout:\n%s\nstderr:\n%s", line, err, stdout.String(), stderr.String())
	}
	for _, want := range []string{`"id":1,"result":{`, `"id":2,"result":{`, `"tools":[`, `"name":"bernstein_post_artifact"`, `"id":3,"result":{`, `"taskId":"T-1"`} {
		if !strings.Contains(stdout.String(), want) {
			r.t.Errorf("README line `%s`: the server's answers lack %s:\n%s", line, want, stdout.String())
		}
	}
	return stdout.String()
}

// serve starts the HTTP server line, waits until it says where it serves,
// checks that /mcp answers (401 without a bearer claim token), and stops it
// with SIGTERM: it must exit 0. If the README's port is taken on this host,
// the same line runs on a free port instead.
func (r *readmeRun) serve(line string) {
	r.t.Helper()
	if l, err := net.Listen("tcp", "127.0.0.1:7420"); err != nil {
		r.t.Logf("127.0.0.1:7420 is busy (%v): serving on a free port", err)
		line = strings.Replace(line, "bernstein serve", "bernstein serve --addr 127.0.0.1:0", 1)
	} else {
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := r.cmd(ctx, "exec "+line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("README line `%s`: %v", line, err)
	}
	stopped := false
	defer func() {
		if !stopped {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
		}
	}()
	urls := make(chan string, 1)
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(errPipe)
		found := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if m := regexp.MustCompile(`serving MCP at (http://\S+/mcp)`).FindStringSubmatch(sc.Text()); m != nil && !found {
				found = true
				urls <- m[1]
			}
		}
		io.Copy(io.Discard, errPipe)
	}()
	var url string
	select {
	case url = <-urls:
	case <-done:
		cmd.Wait()
		r.t.Fatalf("README line `%s` exited before serving:\n%s", line, stderr.String())
	case <-time.After(30 * time.Second):
		r.t.Fatalf("README line `%s` did not say where it serves within 30s", line)
	}
	if !strings.Contains(line, "--addr") && !strings.HasPrefix(url, "http://127.0.0.1:7420/") {
		r.t.Errorf("README line `%s` serves at %s, not at 127.0.0.1:7420/mcp as the README says", line, url)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("README line `%s`: %s does not answer: %v", line, url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		r.t.Errorf("README line `%s`: POST %s without a bearer claim token: %s, want 401", line, url, resp.Status)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	<-done
	err = cmd.Wait()
	stopped = true
	r.t.Logf("$ %s\n(served at %s; stopped with SIGTERM)\n%s%s", line, url, stdout.String(), stderr.String())
	if err != nil {
		r.t.Fatalf("README line `%s` after SIGTERM: %v, want exit 0\n%s", line, err, stderr.String())
	}
}
