package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
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

// TestUnknownCommand: a mistyped subcommand fails with one line naming it
// and the nearest command, whatever flags follow it.
func TestUnknownCommand(t *testing.T) {
	cases := []struct {
		args    []string
		unknown string
		suggest string
	}{
		{[]string{"audit", "verfy"}, `unknown command "verfy" for "bernstein audit"`, `did you mean "bernstein audit verify"?`},
		{[]string{"task", "strat", "T-1"}, `unknown command "strat" for "bernstein task"`, `did you mean "bernstein task start"?`},
		{[]string{"artifact", "lst", "T-1"}, `unknown command "lst" for "bernstein artifact"`, `did you mean "bernstein artifact list"?`},
		{[]string{"verfy"}, `unknown command "verfy" for "bernstein"`, `did you mean "bernstein audit verify"?`},
		{[]string{"artifact", "pots", "T-1", "k", "--type", "report"}, `unknown command "pots" for "bernstein artifact"`, `did you mean "bernstein artifact post"?`},
		{[]string{"artifacts", "shwo", "T-1", "k"}, `unknown command "shwo" for "bernstein artifacts"`, `did you mean "bernstein artifacts show"?`},
		{[]string{"gate", "rn", "T-1", "build", "--quiet"}, `unknown command "rn" for "bernstein gate"`, `did you mean "bernstein gate run"?`},
		{[]string{"claim", "T-1"}, `unknown command "claim" for "bernstein"`, `did you mean "bernstein task claim"?`},
		{[]string{"help", "audit", "verfy"}, `unknown command "verfy" for "bernstein audit"`, `did you mean "bernstein audit verify"?`},
		{[]string{"xyzzy"}, `unknown command "xyzzy" for "bernstein"`, `(see 'bernstein --help')`},
	}
	for _, c := range cases {
		r := runBare(c.args...)
		if c.args[0] == "artifacts" {
			if !strings.HasPrefix(r.err, deprecationWarning+"\n") {
				t.Fatalf("%v: no deprecation warning: %q", c.args, r.err)
			}
			r.err = strings.TrimPrefix(r.err, deprecationWarning+"\n")
		}
		if r.code != 1 {
			t.Fatalf("%v exited %d, want 1\n%s%s", c.args, r.code, r.out, r.err)
		}
		oneErrorLine(t, c.args, r)
		if !strings.Contains(r.err, c.unknown) || !strings.Contains(r.err, c.suggest) {
			t.Fatalf("%v: stderr %q, want %q and %q", c.args, r.err, c.unknown, c.suggest)
		}
		if strings.Contains(r.err, "flag") {
			t.Fatalf("%v: complains about a flag: %q", c.args, r.err)
		}
		if r.out != "" {
			t.Fatalf("%v printed on stdout: %q", c.args, r.out)
		}
	}
	// A group with no argument prints its help and exits 0.
	for _, args := range [][]string{{"artifact"}, {"task"}, {"audit"}, {}, {"help", "audit"}} {
		r := runBare(args...)
		if r.code != 0 || !strings.Contains(r.out, "Usage:") || r.err != "" {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.out, r.err)
		}
	}
	// An unknown flag of a real command is still a flag error.
	r := runBare("artifact", "post", "T-1", "k", "--bogus")
	if r.code != 1 || !strings.Contains(r.err, "unknown flag: --bogus") {
		t.Fatalf("unknown flag: exit %d %q", r.code, r.err)
	}
}

// walk calls f for c and every command below it.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// TestEveryCommandDocumentsExitStatus: the README promises it.
func TestEveryCommandDocumentsExitStatus(t *testing.T) {
	root := newRootCmd(&IO{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	n := 0
	walk(root, func(c *cobra.Command) {
		if strings.HasPrefix(c.Name(), "__") || !c.Runnable() {
			if !strings.HasPrefix(c.Name(), "__") {
				t.Errorf("%s is not runnable: it would print help and exit 0 on any argument", c.CommandPath())
			}
			return
		}
		n++
		if !strings.Contains(c.Long, "Exit status") {
			t.Errorf("%s: --help does not document the exit status", c.CommandPath())
		}
	})
	if n < 30 {
		t.Fatalf("walked only %d commands", n)
	}
	// And --help shows it.
	r := runBare("task", "claim", "--help")
	if r.code != 0 || !strings.Contains(r.out, "Exit status") {
		t.Fatalf("task claim --help: %d\n%s", r.code, r.out)
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

// commit commits a change in the repository's work tree (work.txt set to
// msg, so each message its own tree: a checkpoint of it earns).
func (e *cliEnv) commit(msg string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.repo, "work.txt"), []byte(msg+"\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.git("add", "work.txt")
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

// TestListShowsMismatchedJournalIdentity: a sealed journal moved back one
// commit lists with its identity on a terminal and piped, and exits 2.
func TestListShowsMismatchedJournalIdentity(t *testing.T) {
	e := newCLIEnv(t)
	tok := e.claimed("T-1", "agent-7")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "one")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "two")
	e.ok("task", "start", "T-1")
	e.commit("work")
	e.ok("checkpoint", "T-1")

	// Open: unverifiable only because it is open, which nothing mentions
	// on stderr.
	if r := e.want(0, "artifact", "list", "T-1"); r.err != "" {
		t.Fatalf("open task: stderr %q", r.err)
	}
	e.ok("task", "complete", "T-1")
	if r := e.want(0, "artifact", "list", "T-1"); r.err != "" {
		t.Fatalf("sealed task: stderr %q", r.err)
	}
	e.tty = true
	if r := e.want(0, "artifact", "list", "T-1"); !strings.HasPrefix(r.out, "task T-1: journal identity verified\n") {
		t.Fatalf("sealed task on a terminal:\n%s", r.out)
	}

	// Cut the checkpoint row: the journal still holds every artifact row
	// its spine seals, but no longer what the seal says.
	e.git("update-ref", "refs/bernstein/journal/T-1", "refs/bernstein/journal/T-1~1")
	const reason = "journal has 2 rows, the seal says 3"
	e.tty = false
	r := e.want(2, "artifact", "list", "T-1")
	oneErrorLine(t, []string{"piped"}, r)
	if !strings.Contains(r.err, "journal identity mismatched") || !strings.Contains(r.err, reason) {
		t.Fatalf("piped: stderr %q", r.err)
	}
	if !strings.HasPrefix(r.out, "summary\t1\treport\tverified\t0\t") || strings.Count(r.out, "\n") != 2 {
		t.Fatalf("piped: stdout %q", r.out)
	}
	e.tty = true
	r = e.want(2, "artifact", "list", "T-1")
	first, _, _ := strings.Cut(r.out, "\n")
	if !strings.Contains(first, "journal identity mismatched") || !strings.Contains(first, reason) {
		t.Fatalf("terminal: first line %q", first)
	}
	oneErrorLine(t, []string{"terminal"}, r)
	e.tty = false
	r = e.want(2, "artifact", "list", "T-1", "--output-json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.out), &doc); err != nil || doc["journal_identity"] != "mismatched" {
		t.Fatalf("json: %v %s", err, r.out)
	}
	// The plural alias agrees.
	if r2 := e.want(2, "artifacts", "list", "T-1"); r2.out != e.run("", "artifact", "list", "T-1").out {
		t.Fatalf("plural: %q", r2.out)
	}
	// Cut an artifact row too: the chain is broken, and the identity is
	// still named.
	e.git("update-ref", "refs/bernstein/journal/T-1", "refs/bernstein/journal/T-1~1")
	r = e.want(2, "artifact", "list", "T-1")
	oneErrorLine(t, []string{"cut artifact row"}, r)
	if !strings.Contains(r.err, "journal lacks rows its spine seals") || !strings.Contains(r.err, "journal identity mismatched") {
		t.Fatalf("cut artifact row: stderr %q", r.err)
	}
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

// TestAuditVerifyUnpinnedCounts: the signature count is one total split
// into pinned and unpinned, on a clone that pins nothing, after pinning,
// and with a second writer this host does not pin.
func TestAuditVerifyUnpinnedCounts(t *testing.T) {
	e := newCLIEnv(t)
	tok := e.claimed("T-1", "agent-7")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "one")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "two")
	// Signed commits, counted by hand: ledger 2 (created, claimed), journal
	// 2, spine 2, audit 5 (key published, created, claimed, two posts).
	countLine := func(out string) string {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "signatures checked") {
				return l
			}
		}
		t.Fatalf("no count line:\n%s", out)
		return ""
	}
	if got := countLine(e.ok("audit", "verify")); got != "11 signatures checked: 11 against pinned keys, 0 only against published keys (unpinned)" {
		t.Fatalf("own repository: %q", got)
	}

	// A clone, read with a home that pins nothing (and has no identity).
	clone := filepath.Join(t.TempDir(), "clone")
	if r := runBare("clone", e.repo, clone); r.code != 0 {
		t.Fatalf("clone: %d %s", r.code, r.err)
	}
	home := os.Getenv("BERNSTEIN_HOME")
	t.Setenv("BERNSTEIN_HOME", filepath.Join(t.TempDir(), "reader"))
	r := runBare("--repo", clone, "audit", "verify")
	if r.code != 0 {
		t.Fatalf("unpinned clone: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if got := countLine(r.out); got != "11 signatures checked: 0 against pinned keys, 11 only against published keys (unpinned)" {
		t.Fatalf("unpinned clone: %q", got)
	}
	if !strings.Contains(r.out, "unverifiable: 2 artifact versions and 11 signatures are by writers whose keys are not pinned here") {
		t.Fatalf("unpinned clone: no note:\n%s", r.out)
	}
	if r := runBare("--repo", clone, "audit", "verify", "--strict"); r.code != 1 {
		t.Fatalf("unpinned clone, --strict: exit %d", r.code)
	}
	if r := runBare("--repo", clone, "keys", "pin", "cli-writer"); r.code != 0 {
		t.Fatalf("keys pin: %d %s", r.code, r.err)
	}
	if got := countLine(runBare("--repo", clone, "audit", "verify").out); got != "11 signatures checked: 11 against pinned keys, 0 only against published keys (unpinned)" {
		t.Fatalf("pinned clone: %q", got)
	}

	// A second writer this host does not pin: init (its key's audit entry)
	// and a task created (ledger row and audit entry) are 3 more.
	t.Setenv("BERNSTEIN_HOME", filepath.Join(t.TempDir(), "second"))
	e.ok("init", "--writer", "second-writer")
	e.ok("task", "create", "T-2")
	t.Setenv("BERNSTEIN_HOME", home)
	if got := countLine(e.ok("audit", "verify")); got != "14 signatures checked: 11 against pinned keys, 3 only against published keys (unpinned)" {
		t.Fatalf("second writer: %q", got)
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

// TestClaimOutputJSON: --output-json prints one document; without it the
// token alone.
func TestClaimOutputJSON(t *testing.T) {
	e := newCLIEnv(t)
	e.ok("task", "create", "T-1")
	r := e.want(0, "task", "claim", "T-1", "--agent", "agent-7", "--output-json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, r.out)
	}
	tok, _ := doc["token"].(string)
	if doc["task"] != "T-1" || doc["agent"] != "agent-7" || !strings.HasPrefix(tok, "bct_") ||
		!strings.HasPrefix(fmt.Sprint(doc["claim_id"]), "claim-") || doc["ledger_index"] != float64(1) || r.err != "" {
		t.Fatalf("claim document: %v (stderr %q)", doc, r.err)
	}
	// The token works.
	e.post("T-1", "k", "agent-7", tok, "--type", "report", "--body", "x")
	show := e.ok("task", "show", "T-1", "--output-json")
	if !strings.Contains(show, fmt.Sprintf("%q", doc["claim_id"])) {
		t.Fatalf("task show does not carry claim_id %v:\n%s", doc["claim_id"], show)
	}
	e.ok("task", "release", "T-1")
	out := e.ok("task", "claim", "T-1", "--agent", "agent-8")
	if !regexp.MustCompile(`^bct_[A-Za-z0-9_-]{43}\n$`).MatchString(out) {
		t.Fatalf("plain claim: %q", out)
	}
}

// TestShowHistoryAndWriter: history is oldest first in text and JSON; a
// tampered version says what is known of its writer.
func TestShowHistoryAndWriter(t *testing.T) {
	e := newCLIEnv(t)
	tok := e.claimed("T-1", "agent-7")
	for _, b := range []string{"one", "two", "three"} {
		e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", b)
	}
	out := e.ok("artifact", "show", "T-1", "summary")
	_, hist, ok := strings.Cut(out, "history (oldest first):\n")
	if !ok {
		t.Fatalf("no history:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(hist), "\n")
	if len(lines) != 3 {
		t.Fatalf("history:\n%s", hist)
	}
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), fmt.Sprintf("v%d ", i+1)) || !strings.HasSuffix(l, "by agent-7 (writer cli-writer)") {
			t.Fatalf("history line %d: %q", i, l)
		}
	}
	var doc struct {
		History []struct {
			Version int64 `json:"version"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(e.ok("artifact", "show", "T-1", "summary", "--output-json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.History) != 3 || doc.History[0].Version != 1 || doc.History[2].Version != 3 {
		t.Fatalf("json history: %+v", doc.History)
	}
	// v3's row now names a blob size its bytes do not have.
	e.forgeHead("refs/bernstein/journal/T-1", func(body string) string {
		return regexp.MustCompile(`"size":(\d+)`).ReplaceAllString(body, `"size":${1}1`)
	})
	r := e.want(2, "artifact", "show", "T-1", "summary", "--version", "3")
	if !strings.Contains(r.out, "posted:  by agent-7 at journal index 2 (writer cli-writer as its commit names it, unproven: tampered)") || strings.Contains(r.out, "writer -") {
		t.Fatalf("tampered version:\n%s", r.out)
	}
	if !strings.Contains(r.out, "v3  tampered") || !strings.Contains(r.out, "by agent-7 (writer cli-writer as its commit names it, unproven: tampered)") {
		t.Fatalf("tampered history line:\n%s", r.out)
	}
	if w, src := shownWriter(t, e, "T-1", "summary", "3"); w != "cli-writer" || src != "commit" {
		t.Fatalf("json: writer %q from %q, want cli-writer from commit", w, src)
	}
}

// shownWriter is the writer and writer_source that 'artifact show
// --output-json' gives version of key.
func shownWriter(t *testing.T, e *cliEnv, task, key, version string) (string, string) {
	t.Helper()
	var doc struct {
		Writer       string  `json:"writer"`
		WriterSource *string `json:"writer_source"`
	}
	r := e.run("", "artifact", "show", task, key, "--version", version, "--output-json")
	if err := json.Unmarshal([]byte(r.out), &doc); err != nil || doc.WriterSource == nil {
		t.Fatalf("artifact show --output-json: %v (no writer_source?)\n%s", err, r.out)
	}
	return doc.Writer, *doc.WriterSource
}

// TestTamperedWriterLabels: what is known of a tampered version's or a
// lost row's writer is shown, labelled by where it was read.
func TestTamperedWriterLabels(t *testing.T) {
	e := newCLIEnv(t)
	tok := e.claimed("T-1", "agent-7")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "one")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "two")

	// v2's row re-committed under another writer's name (its signature
	// left as it was): the blob and tree hold, the spine entry the row
	// names is cli-writer's and binds another writer than the commit.
	e.forgeHead("refs/bernstein/journal/T-1", func(body string) string {
		return strings.Replace(body, "\ncommitter cli-writer <cli-writer@bernstein> ", "\ncommitter wx <wx@bernstein> ", 1)
	})
	r := e.want(2, "artifact", "show", "T-1", "summary", "--version", "2")
	if !regexp.MustCompile(`(?m)^reason:  summary v2 at journal index 1: spine entry cli-writer/\d+ binds a different writer \(the row's commit names wx\)$`).MatchString(r.out) {
		t.Fatalf("reason does not name both writers:\n%s", r.out)
	}
	if !strings.Contains(r.out, "posted:  by agent-7 at journal index 1 (writer cli-writer as its spine entry names it, unproven: tampered)\n") ||
		!strings.Contains(r.out, "by agent-7 (writer cli-writer as its spine entry names it, unproven: tampered)\n") ||
		strings.Contains(r.out, "as its commit names it") {
		t.Fatalf("spine entry's writer not labelled as the spine entry's:\n%s", r.out)
	}
	if w, src := shownWriter(t, e, "T-1", "summary", "2"); w != "cli-writer" || src != "spine_entry" {
		t.Fatalf("json: writer %q from %q, want cli-writer from spine_entry", w, src)
	}
	// The row does not count: its writer is the one its commit names, which
	// has no key here.
	const fault = "  journal index 1 (unverifiable, writer wx as its commit names it): no key is known for writer wx\n"
	for _, args := range [][]string{{"task", "progress", "T-1"}, {"task", "show", "T-1"}} {
		if out := e.run("", args...).out; !strings.Contains(out, fault) {
			t.Fatalf("%v: no line %q:\n%s", args, fault, out)
		}
	}

	// A committer that names no writer: nothing names one.
	e.forgeHead("refs/bernstein/journal/T-1", func(body string) string {
		return strings.Replace(body, "\ncommitter wx <wx@bernstein> ", "\ncommitter Mallory Evil <m@example.com> ", 1)
	})
	r = e.want(2, "artifact", "show", "T-1", "summary", "--version", "2")
	if !strings.Contains(r.out, "posted:  by agent-7 at journal index 1 (writer cli-writer as its spine entry names it, unproven: tampered)\n") {
		t.Fatalf("no committer writer, spine entry reached:\n%s", r.out)
	}
	const noWriter = "  journal index 1 (tampered, writer unknown: no commit names one): the commit names no writer as its committer\n"
	if out := e.run("", "task", "progress", "T-1").out; !strings.Contains(out, noWriter) {
		t.Fatalf("task progress: no line %q:\n%s", noWriter, out)
	}
	// ... and whose blob no longer checks: the spine entry is never
	// reached, and nothing names a writer.
	e.forgeHead("refs/bernstein/journal/T-1", func(body string) string {
		return regexp.MustCompile(`"size":(\d+)`).ReplaceAllString(body, `"size":${1}1`)
	})
	r = e.want(2, "artifact", "show", "T-1", "summary", "--version", "2")
	if !strings.Contains(r.out, "posted:  by agent-7 at journal index 1 (writer unknown: tampered)\n") {
		t.Fatalf("no writer known:\n%s", r.out)
	}
	if w, src := shownWriter(t, e, "T-1", "summary", "2"); w != "" || src != "" {
		t.Fatalf("json: writer %q from %q, want none", w, src)
	}
}

// TestLostRowWriter: a row cut from a sealed journal has no commit, so no
// writer: progress says so instead of printing a dash.
func TestLostRowWriter(t *testing.T) {
	e := newCLIEnv(t)
	e.commit("one")
	e.claimed("T-1", "agent-7")
	e.ok("task", "start", "T-1")
	e.ok("checkpoint", "T-1")
	e.ok("checkpoint", "T-1")
	e.ok("task", "complete", "T-1")
	e.git("update-ref", "refs/bernstein/journal/T-1", "refs/bernstein/journal/T-1~1")
	const want = "  journal index 1 (tampered, writer unknown: no commit names one): journal identity mismatched: seal cli-writer/"
	for _, args := range [][]string{{"task", "progress", "T-1"}, {"task", "show", "T-1"}} {
		out := e.run("", args...).out
		if !strings.Contains(out, want) || !strings.Contains(out, ": journal has 1 rows, the seal says 2\n") || strings.Contains(out, "writer -") {
			t.Fatalf("%v:\n%s", args, out)
		}
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

// TestRefusalsNameTheProblem: a refusal whose input is fine says what is
// wrong instead of calling a field invalid; bad input still names its
// field. Nothing is written either way.
func TestRefusalsNameTheProblem(t *testing.T) {
	e := newCLIEnv(t)
	e.commit("one")
	e.ok("task", "create", "T-1")
	e.ok("task", "create", "T-2", "--evidence", "tests=true")
	before := e.git("for-each-ref")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "create", "T-1"}, "bernstein: task T-1 already exists\n"},
		{[]string{"task", "create", "T-1", "--title", "again"}, "bernstein: task T-1 already exists\n"},
		{[]string{"evidence", "run", "T-1"}, "bernstein: task T-1 declares no evidence producers: declare them at create (--evidence NAME=CMD)\n"},
		{[]string{"task", "claim", "NOPE", "--agent", "agent-7"}, "bernstein: unknown task: NOPE\n"},
		{[]string{"task", "start", "NOPE"}, "bernstein: unknown task: NOPE\n"},
		{[]string{"task", "abandon", "NOPE"}, "bernstein: unknown task: NOPE\n"},
		{[]string{"task", "reopen", "NOPE"}, "bernstein: unknown task: NOPE\n"},
		{[]string{"hooks", "install", "--checkpoint", "NOPE"}, "bernstein: unknown task: NOPE (create it first: the hook records checkpoints of an existing task)\n"},
		// Bad input: the field is named.
		{[]string{"hooks", "install", "--checkpoint", "a..b"}, "bernstein: invalid task_id: \"a..b\" contains \"..\"\n"},
		{[]string{"task", "create", "a..b"}, "bernstein: invalid task_id: \"a..b\" contains \"..\"\n"},
		{[]string{"evidence", "run", "T-2", "lint"}, "bernstein: invalid producer: \"lint\" is not declared for task T-2\n"},
	} {
		r := e.want(1, tc.args...)
		if r.err != tc.want || r.out != "" {
			t.Errorf("%v: stderr %q, want %q (stdout %q)", tc.args, r.err, tc.want, r.out)
		}
	}
	if after := e.git("for-each-ref"); after != before {
		t.Fatalf("a refusal wrote refs:\n%s\n%s", before, after)
	}
	if _, err := os.Stat(filepath.Join(e.repo, ".git", "hooks", "post-commit")); err == nil {
		t.Fatal("a refused hooks install wrote the hook")
	}
}

// complete asks cobra's hidden __complete command, as a shell does, and
// returns the candidates (the directive line dropped).
func (e *cliEnv) complete(args ...string) []string {
	e.t.Helper()
	out, _ := e.completeDirective(args...)
	return out
}

// completeDirective is complete with the directive line (":4" is
// ShellCompDirectiveNoFileComp; ":0", the default, lets the shell offer
// file names).
func (e *cliEnv) completeDirective(args ...string) ([]string, string) {
	e.t.Helper()
	r := e.run("", append([]string{"__complete"}, args...)...)
	if r.code != 0 {
		e.t.Fatalf("__complete %v: exit %d %s", args, r.code, r.err)
	}
	var out []string
	directive := ""
	for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if strings.HasPrefix(l, ":") {
			directive = l
		} else if l != "" {
			name, _, _ := strings.Cut(l, "\t")
			out = append(out, name)
		}
	}
	return out, directive
}

// TestDynamicCompletion: task ids, keys, gates, producers, --type and --kind
// come from the repository.
func TestDynamicCompletion(t *testing.T) {
	e := newCLIEnv(t)
	home := os.Getenv("BERNSTEIN_HOME")
	tok := e.claimed("T-1", "agent-7", "--gate", "build=true", "--evidence", "tests=true", "--evidence", "lint=true")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "x")
	e.post("T-1", "timings", "agent-7", tok, "--type", "table", "--column", "a", "--row", "1")
	e.ok("task", "create", "X:1")
	e.ok("task", "create", "U-2")
	check := func(got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("completions %q, want %q", got, want)
		}
	}
	check(e.complete("artifact", "show", ""), "T-1", "U-2", "X:1")
	check(e.complete("task", "claim", "X"), "X:1")
	check(e.complete("artifact", "show", "T-1", ""), "summary", "timings")
	check(e.complete("artifact", "show", "T-1", "t"), "timings")
	check(e.complete("artifacts", "show", "T-1", "s"), "summary")
	check(e.complete("artifact", "show", "T-1", "summary", ""))
	check(e.complete("artifact", "post", "T-1", "k", "--type", ""), "report", "table", "link")
	check(e.complete("artifact", "post", "T-1", "k", "--type", "link", "--kind", ""), "preview", "dashboard", "document")
	check(e.complete("artifact", "post", "T-1", "k", "--kind", "d"), "dashboard", "document")
	check(e.complete("gate", "run", "T-1", ""), "build")
	check(e.complete("evidence", "run", "T-1", "tests", ""), "lint")
	check(e.complete("checkpoint", "U"), "U-2")

	// Flag values the repository knows, with no file names offered.
	flagCheck := func(args []string, want ...string) {
		t.Helper()
		got, directive := e.completeDirective(args...)
		if strings.Join(got, ",") != strings.Join(want, ",") || directive != ":4" {
			t.Fatalf("__complete %q: %q %s, want %q :4", args, got, directive, want)
		}
	}
	flagCheck([]string{"audit", "verify", "--task", ""}, "T-1", "U-2", "X:1")
	flagCheck([]string{"audit", "verify", "--task=X"}, "X:1")
	flagCheck([]string{"hooks", "install", "--checkpoint", ""}, "T-1", "U-2", "X:1")
	flagCheck([]string{"hooks", "install", "--checkpoint", "U"}, "U-2")
	flagCheck([]string{"hooks", "run", "post-commit", "--task", "T"}, "T-1")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "y")
	e.post("T-1", "summary", "agent-7", tok, "--type", "report", "--body", "z")
	flagCheck([]string{"artifact", "show", "T-1", "summary", "--version", ""}, "1", "2", "3")
	flagCheck([]string{"artifacts", "show", "T-1", "timings", "--version", ""}, "1")
	flagCheck([]string{"artifact", "show", "T-1", "--version", ""})
	flagCheck([]string{"artifact", "show", "U-2", "summary", "--version", ""})

	// Revisions: HEAD, branches, tags.
	e.commit("one")
	e.git("branch", "side")
	e.git("tag", "v1")
	branch := strings.TrimSpace(e.git("symbolic-ref", "--short", "HEAD"))
	flagCheck([]string{"checkpoint", "T-1", "--commit", ""}, "HEAD", branch, "side", "v1")
	flagCheck([]string{"diff", "capture", "T-1", "--base", "s"}, "side")
	flagCheck([]string{"diff", "capture", "T-1", "--base", "v1", "--head", "v"}, "v1")

	// Remotes, as arguments and as init's --remote.
	e.git("remote", "add", "backup", "/nowhere/backup")
	e.git("remote", "add", "origin", "/nowhere/origin")
	flagCheck([]string{"push", ""}, "backup", "origin")
	flagCheck([]string{"fetch", "o"}, "origin")
	flagCheck([]string{"push", "origin", ""})
	flagCheck([]string{"remote", "setup", ""}, "backup", "origin")
	flagCheck([]string{"init", "--remote", "b"}, "backup")

	// Writers: pin offers those not pinned here, unpin those pinned.
	t.Setenv("BERNSTEIN_HOME", filepath.Join(t.TempDir(), "home-2"))
	e.ok("init", "--writer", "second-writer")
	t.Setenv("BERNSTEIN_HOME", filepath.Join(t.TempDir(), "home-3"))
	e.ok("init", "--writer", "third-writer")
	t.Setenv("BERNSTEIN_HOME", home)
	flagCheck([]string{"keys", "pin", ""}, "second-writer", "third-writer")
	flagCheck([]string{"keys", "pin", "second-writer", ""}, "third-writer")
	flagCheck([]string{"keys", "unpin", ""})
	e.ok("keys", "pin", "third-writer")
	flagCheck([]string{"keys", "pin", ""}, "second-writer")
	flagCheck([]string{"keys", "unpin", ""}, "third-writer")

	// No repository: no candidates, no error.
	r := runBare("__complete", "--repo", t.TempDir(), "artifact", "show", "")
	if r.code != 0 || strings.TrimSpace(r.out) != ":4" {
		t.Fatalf("without a repository: %d %q %q", r.code, r.out, r.err)
	}
}

// TestHelpHasNoStrayBreaks: no command's --help text breaks a line off
// short in the middle of a sentence (a line under half the width whose
// sentence goes on, in lower case, on the next).
func TestHelpHasNoStrayBreaks(t *testing.T) {
	root := newRootCmd(&IO{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	walk(root, func(c *cobra.Command) {
		lines := strings.Split(c.Long, "\n")
		for i, l := range lines {
			if i+1 < len(lines) && l != "" && !strings.HasPrefix(l, " ") && len(l) < 40 && !strings.HasSuffix(l, ":") &&
				!strings.HasSuffix(l, ".") && lines[i+1] != "" && !strings.HasPrefix(lines[i+1], " ") {
				if r := []rune(lines[i+1])[0]; r >= 'a' && r <= 'z' {
					t.Errorf("%s --help, line %d breaks off short: %q / %q", c.CommandPath(), i+1, l, lines[i+1])
				}
			}
		}
	})
}

// TestHelpFitsEightyColumns: every command's --help, flags included, reads
// on an 80-column terminal without a line wrapped by the terminal.
func TestHelpFitsEightyColumns(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(&IO{In: strings.NewReader(""), Out: &out, Err: &out})
	n := 0
	walk(root, func(c *cobra.Command) {
		if strings.HasPrefix(c.Name(), "__") {
			return
		}
		out.Reset()
		if err := c.Help(); err != nil {
			t.Fatalf("%s --help: %v", c.CommandPath(), err)
		}
		if !strings.Contains(out.String(), "Usage:") {
			t.Fatalf("%s --help printed no usage:\n%s", c.CommandPath(), out.String())
		}
		n++
		for i, l := range strings.Split(out.String(), "\n") {
			if w := utf8.RuneCountInString(l); w > 80 {
				t.Errorf("%s --help, line %d is %d columns: %q", c.CommandPath(), i+1, w, l)
			}
		}
	})
	if n < 30 {
		t.Fatalf("walked only %d commands", n)
	}
}
