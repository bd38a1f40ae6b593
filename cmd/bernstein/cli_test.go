package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cliResult is what one run of the command line printed and returned.
type cliResult struct {
	out, err string
	code     int
}

// cliEnv is a fresh repository with a writer identity, driven through run().
type cliEnv struct {
	t    *testing.T
	repo string
	tty  bool
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required")
	}
	dir := t.TempDir()
	t.Setenv("BERNSTEIN_HOME", filepath.Join(dir, "home"))
	t.Setenv("HOME", dir)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("BERNSTEIN_REPO", "")
	t.Setenv("BERNSTEIN_AGENT", "")
	t.Setenv("BERNSTEIN_CLAIM_TOKEN", "")
	t.Setenv("BERNSTEIN_ALLOWED_SIGNERS", "")
	e := &cliEnv{t: t, repo: filepath.Join(dir, "repo")}
	e.ok("init", "--writer", "cli-writer")
	return e
}

// run runs the command line against the environment's repository.
func (e *cliEnv) run(stdin string, args ...string) cliResult {
	e.t.Helper()
	var out, errb bytes.Buffer
	io := &IO{In: strings.NewReader(stdin), Out: &out, Err: &errb, IsTTY: e.tty}
	code := run(append([]string{"--repo", e.repo}, args...), io)
	return cliResult{out.String(), errb.String(), code}
}

// ok runs the command line and fails the test unless it exits 0.
func (e *cliEnv) ok(args ...string) string {
	e.t.Helper()
	r := e.run("", args...)
	if r.code != 0 {
		e.t.Fatalf("%v exited %d\n%s%s", args, r.code, r.out, r.err)
	}
	return r.out
}

// want runs the command line and checks its exit status.
func (e *cliEnv) want(code int, args ...string) cliResult {
	e.t.Helper()
	r := e.run("", args...)
	if r.code != code {
		e.t.Fatalf("%v exited %d, want %d\n%s%s", args, r.code, code, r.out, r.err)
	}
	return r
}

func (e *cliEnv) git(args ...string) string {
	e.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", e.repo}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// claimed creates task with a live claim of agent and returns the token.
func (e *cliEnv) claimed(task, agent string, create ...string) string {
	e.t.Helper()
	e.ok(append([]string{"task", "create", task}, create...)...)
	return strings.TrimSpace(e.ok("task", "claim", task, "--agent", agent))
}

func (e *cliEnv) post(task, key, agent, token string, payload ...string) {
	e.t.Helper()
	e.ok(append([]string{"artifact", "post", task, key, "--agent", agent, "--claim-token", token}, payload...)...)
}

// runBare runs a command line that needs no repository.
func runBare(args ...string) cliResult {
	var out, errb bytes.Buffer
	code := run(args, &IO{In: strings.NewReader(""), Out: &out, Err: &errb})
	return cliResult{out.String(), errb.String(), code}
}

func oneErrorLine(t *testing.T, args []string, r cliResult) {
	t.Helper()
	if strings.Count(r.err, "\n") != 1 || !strings.HasPrefix(r.err, "bernstein: ") {
		t.Fatalf("%v: stderr is not one 'bernstein: ' line: %q", args, r.err)
	}
}

func (e *cliEnv) gitStdin(stdin string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", e.repo}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit makes a commit in the repository's work tree.
func (e *cliEnv) commit(msg string) {
	e.t.Helper()
	e.git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", msg)
}

// forgeHead rewrites the head commit of ref with edit, without re-signing.
func (e *cliEnv) forgeHead(ref string, edit func(string) string) {
	e.t.Helper()
	head := strings.TrimSpace(e.git("rev-parse", ref))
	body := e.git("cat-file", "commit", head)
	forged := edit(body)
	if forged == body {
		e.t.Fatalf("forgeHead: %s unchanged", ref)
	}
	e.git("update-ref", ref, e.gitStdin(forged, "hash-object", "-t", "commit", "-w", "--stdin"))
}

// TestAuditVerifyFailureNamesTask: every failure line stands alone.
func TestAuditVerifyFailureNamesTask(t *testing.T) {
	e := newCLIEnv(t)
	for _, task := range []string{"T-1", "T-2", "T-3"} {
		tok := e.claimed(task, "agent-7")
		e.post(task, "summary", "agent-7", tok, "--type", "report", "--body", "one")
		e.post(task, "summary", "agent-7", tok, "--type", "report", "--body", "two of "+task)
	}
	r := e.want(0, "audit", "verify")
	if !strings.Contains(r.out, "signatures checked: ") || !strings.Contains(r.out, " against pinned keys, 0 only against published keys (unpinned)\n") {
		t.Fatalf("counts:\n%s", r.out)
	}
	// The row of T-2's v2 says its blob is one byte longer than it is.
	e.forgeHead("refs/bernstein/journal/T-2", func(body string) string {
		return regexp.MustCompile(`"size":(\d+)`).ReplaceAllStringFunc(body, func(m string) string {
			return m + "1"
		})
	})
	r = e.want(1, "audit", "verify")
	var fails []string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(l, "FAIL ") {
			fails = append(fails, l)
		}
	}
	if len(fails) == 0 {
		t.Fatalf("no FAIL line:\n%s", r.out)
	}
	for _, l := range fails {
		if !strings.HasPrefix(l, "FAIL T-2 ") {
			t.Fatalf("failure line does not name T-2 first: %q", l)
		}
	}
	if !strings.HasPrefix(fails[0], "FAIL T-2 summary v2 at journal index 1 (blob): stored bytes are") {
		t.Fatalf("first failure: %q", fails[0])
	}
	// The JSON carries the same positions.
	r = e.want(1, "audit", "verify", "--output-json")
	var doc struct {
		Failures []struct {
			TaskID       string `json:"task_id"`
			Key          string `json:"key"`
			Version      *int64 `json:"version"`
			JournalIndex *int64 `json:"journal_index"`
			Check        string `json:"check"`
		} `json:"failures"`
	}
	if err := json.Unmarshal([]byte(r.out), &doc); err != nil || len(doc.Failures) != len(fails) {
		t.Fatalf("json failures: %v\n%s", err, r.out)
	}
	f := doc.Failures[0]
	if f.TaskID != "T-2" || f.Key != "summary" || *f.Version != 2 || *f.JournalIndex != 1 || f.Check != "blob" {
		t.Fatalf("json failure: %+v", f)
	}
}

// TestTableHeaderAsIs: on a terminal, column names are shown as they are.
func TestTableHeaderAsIs(t *testing.T) {
	e := newCLIEnv(t)
	tok := e.claimed("T-1", "agent-7")
	e.post("T-1", "grid", "agent-7", tok, "--type", "table", "--column", "a", "--column", "A", "--column", "snake_case", "--row", "1,2,3")
	e.tty = true
	r := e.want(0, "artifact", "show", "T-1", "grid")
	var header string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.Contains(l, "snake") {
			header = l
		}
	}
	fields := strings.FieldsFunc(header, func(r rune) bool { return r == '|' || r == '│' || r == ' ' })
	if strings.Join(fields, ",") != "a,A,snake_case" {
		t.Fatalf("header %q (fields %q):\n%s", header, fields, r.out)
	}
}

// TestWorkOnEndedTask: the refusal names the problem, not the task id.
func TestWorkOnEndedTask(t *testing.T) {
	e := newCLIEnv(t)
	e.commit("one")
	e.commit("two")
	e.claimed("T-1", "agent-7", "--evidence", "tests=true")
	e.ok("task", "start", "T-1")
	e.ok("task", "complete", "T-1")
	want := "bernstein: task T-1 is completed: reopen it before recording work\n"
	for _, args := range [][]string{
		{"checkpoint", "T-1"},
		{"diff", "capture", "T-1", "--base", "HEAD~1"},
		{"gate", "run", "T-1", "smoke", "--", "true"},
		{"evidence", "run", "T-1"},
	} {
		r := e.want(1, args...)
		if r.err != want {
			t.Fatalf("%v: stderr %q, want %q", args, r.err, want)
		}
	}
	e.ok("task", "reopen", "T-1")
	e.ok("checkpoint", "T-1")
}
