package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRemoteSetupCLI: remote setup and init --remote configure the
// refspecs once, refuse an unknown remote with one line, and print JSON
// when asked.
func TestRemoteSetupCLI(t *testing.T) {
	e := newCLIEnv(t)
	remote := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", remote).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	e.git("remote", "add", "origin", "file://"+remote)

	r := e.want(1, "remote", "setup", "upstream")
	oneErrorLine(t, []string{"remote", "setup", "upstream"}, r)
	if !strings.Contains(r.err, `unknown remote "upstream"`) || !strings.Contains(r.err, "it has origin") {
		t.Fatalf("unknown remote: %q", r.err)
	}

	var res struct {
		Remote  string   `json:"remote"`
		Added   []string `json:"added"`
		Present []string `json:"present"`
	}
	if err := json.Unmarshal([]byte(e.ok("init", "--remote", "origin", "--output-json")), &struct {
		Remote *struct {
			Remote  string   `json:"remote"`
			Added   []string `json:"added"`
			Present []string `json:"present"`
		} `json:"remote"`
	}{Remote: &res}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"remote.origin.fetch refs/bernstein/*:refs/bernstein-remotes/origin/*",
		"remote.origin.push HEAD",
		"remote.origin.push refs/bernstein/*:refs/bernstein/*",
	}
	if res.Remote != "origin" || strings.Join(res.Added, "|") != strings.Join(want, "|") {
		t.Fatalf("init --remote origin: %+v", res)
	}
	out := e.ok("remote", "setup")
	if strings.Contains(out, "added") || strings.Count(out, "present:") != 2 {
		t.Fatalf("second setup: %q", out)
	}
	if n := len(strings.Fields(e.git("config", "--get-all", "remote.origin.push"))); n != 2 {
		t.Fatalf("%d push refspecs after two setups", n)
	}
}

// guardedRemote makes an empty bare repository with the remote guard
// installed (trust on first use, the operator's BERNSTEIN_HOME beside it),
// as the root package's remote tests make theirs, so that every push of
// these tests goes through the guard. The hook calls the bernstein command
// testscript.Main put on PATH (this test binary under that name) by its
// absolute path. It returns the repository and a function that lists, as
// keys list prints them, the keys the guard pinned.
func guardedRemote(t *testing.T) (string, func() string) {
	t.Helper()
	bin, err := exec.LookPath("bernstein")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	operator := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--repo", dir}, args...)...)
		cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+dir+".operator", "BERNSTEIN_FORCE_TTY=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bernstein %v in %s: %v\n%s", args, dir, err, out)
		}
		return string(out)
	}
	operator("hooks", "install", "--remote-guard", "--trust-first-use")
	return dir, func() string { return operator("keys", "list") }
}

// TestPushFetchCLI: push and fetch against a bare remote (guarded), in text
// and JSON.
func TestPushFetchCLI(t *testing.T) {
	e := newCLIEnv(t)
	remote, pinned := guardedRemote(t)
	e.git("remote", "add", "origin", "file://"+remote)
	r := e.want(1, "push", "nowhere")
	oneErrorLine(t, []string{"push", "nowhere"}, r)
	e.ok("task", "create", "T-1", "--title", "one")
	out := e.ok("push")
	if !strings.Contains(out, "pushed to origin (atomic)") || !strings.Contains(out, "task T-1 (ledger)") {
		t.Fatalf("push: %q", out)
	}
	var pushed struct {
		Pushed   []any `json:"pushed"`
		UpToDate int   `json:"up_to_date"`
		Atomic   bool  `json:"atomic"`
	}
	if err := json.Unmarshal([]byte(e.ok("push", "--output-json")), &pushed); err != nil {
		t.Fatal(err)
	}
	if len(pushed.Pushed) != 0 || pushed.UpToDate == 0 || !pushed.Atomic {
		t.Fatalf("second push: %+v", pushed)
	}
	type fetchResult struct {
		Created  []any  `json:"created"`
		UpToDate int    `json:"up_to_date"`
		Diverged []any  `json:"diverged"`
		Path     string `json:"path"`
	}
	// After the push, a fetch asks only for the per-writer refs and the
	// tasks their new entries name (none): it compares those alone. A full
	// fetch compares every ref, as many as the push found up to date.
	var narrow, full fetchResult
	if err := json.Unmarshal([]byte(e.ok("fetch", "--output-json")), &narrow); err != nil {
		t.Fatal(err)
	}
	if narrow.Path != "narrow" || len(narrow.Created) != 0 || narrow.UpToDate == 0 || narrow.UpToDate >= pushed.UpToDate || narrow.Diverged == nil {
		t.Fatalf("fetch: %+v, push found %d up to date", narrow, pushed.UpToDate)
	}
	if err := json.Unmarshal([]byte(e.ok("fetch", "--full", "--output-json")), &full); err != nil {
		t.Fatal(err)
	}
	if full.Path != "full" || len(full.Created) != 0 || full.UpToDate != pushed.UpToDate || full.Diverged == nil {
		t.Fatalf("fetch --full: %+v, push found %d up to date", full, pushed.UpToDate)
	}
	// The push went through the guard, which pinned the writer's key.
	if list := pinned(); !regexp.MustCompile(`(?m)^cli-writer\t\S+\t\S+\tpinned$`).MatchString(list) {
		t.Fatalf("the remote guard did not pin cli-writer:\n%s", list)
	}
}
