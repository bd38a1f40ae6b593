package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/refs"
)

// TestAuditVerifyNothingToVerify: a plain git clone fetches no
// refs/bernstein/*; audit verify there exits 2 with one line saying there
// is nothing to verify and how to get the refs, instead of "everything
// holds". After the documented git fetch it verifies.
func TestAuditVerifyNothingToVerify(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	a.work("T-1", "notes", 1)
	a.ok("push")
	p := newHost(t, root, "plain")
	gitRun(t, root, "clone", "-q", url, p.dir)
	r := p.want(2, "audit", "verify")
	if r.out != "" || strings.Count(strings.TrimSpace(r.err), "\n") != 0 {
		t.Fatalf("want one line on stderr and nothing on stdout:\nstdout: %q\nstderr: %q", r.out, r.err)
	}
	mustHave(t, "audit verify on a plain clone", r.err, "nothing to verify", "bernstein clone", "git fetch origin 'refs/bernstein/*:refs/bernstein/*'")
	p.git("fetch", "-q", "origin", "refs/bernstein/*:refs/bernstein/*")
	if r := p.run("audit", "verify"); r.code != 0 || !strings.Contains(r.out, "1 tasks") {
		t.Fatalf("after the fetch: audit verify exited %d\n%s%s", r.code, r.out, r.err)
	}
}

// TestPushFirstToGuardedRemote: a guard without trust on first use trusts
// no key of a new writer. Its first push exits 6 having published the
// writer's key ref alone (which the guard accepts) and prints the exact pin
// command with the key's fingerprint; the operator runs it; the second push
// completes; a fresh clone with the key pinned verifies.
func TestPushFirstToGuardedRemote(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	bare := srv.dir("guarded.git")
	gitRun(t, "", "init", "-q", "--bare", bare)
	operator := func(args ...string) (string, error) {
		cmd := exec.Command(cliBin, append([]string{"--repo", bare}, args...)...)
		cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+bare+".operator", "BERNSTEIN_FORCE_TTY=0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := operator("hooks", "install", "--remote-guard"); err != nil {
		t.Fatalf("install the guard: %v\n%s", err, out)
	}
	url := srv.url("guarded.git")
	a := newHost(t, root, "host-a")
	gitRun(t, root, "clone", "-q", url, a.dir)
	a.git("commit", "-q", "--allow-empty", "-m", "start")
	a.git("push", "-q", "origin", "HEAD:refs/heads/main")
	a.ok("init", "--writer", a.name, "--remote", "origin")
	a.work("T-1", "notes", 2)

	r := a.want(6, "push")
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(a.authorizedKey()))
	if err != nil {
		t.Fatal(err)
	}
	fp := ssh.FingerprintSHA256(pk)
	mustHave(t, "first push", r.err, "trusts no key of writer host-a yet", fp)
	cmdLine := regexp.MustCompile(`(?m)^  (bernstein keys pin .*)$`).FindStringSubmatch(r.err)
	if cmdLine == nil || !strings.Contains(cmdLine[1], "--key "+fp) || !strings.Contains(cmdLine[1], " host-a") {
		t.Fatalf("the first push prints no pin command with the fingerprint %s:\n%s", fp, r.err)
	}
	// Only the key ref reached the remote.
	remote := refsOf(t, bare, refs.Prefix)
	var keyRef string
	for ref := range remote {
		keyRef = ref
	}
	if len(remote) != 1 || !strings.HasPrefix(keyRef, refs.WritersPrefix+"host-a") || remote[keyRef] != a.refs()[keyRef] {
		t.Fatalf("after the first push the remote holds %v, want host-a's key ref alone", sorted(remote))
	}
	// The operator runs the printed command, inside the remote.
	args := strings.Fields(strings.TrimPrefix(cmdLine[1], "bernstein "))
	for i, f := range args {
		if f == "--repo" {
			args = append(args[:i], args[i+2:]...) // operator() names the repository
			break
		}
	}
	if out, err := operator(args...); err != nil {
		t.Fatalf("the operator's %v: %v\n%s", args, err, out)
	}
	a.ok("push")
	sameRefs(t, "the remote's and host-a's refs", refsOf(t, bare, refs.Prefix), a.refs())

	c := newHost(t, root, "host-c")
	if r := c.runIn(root, "clone", url, c.dir); r.code != 0 {
		t.Fatalf("clone: exit %d\n%s%s", r.code, r.out, r.err)
	}
	c.ok("keys", "pin", "host-a")
	if r := c.run("audit", "verify", "--strict"); r.code != 0 || !strings.Contains(r.out, "verified: everything holds") {
		t.Fatalf("the clone: audit verify --strict exited %d\n%s%s", r.code, r.out, r.err)
	}
}

// appendUnsigned appends an unsigned commit to ref in the bare repository
// with plain git, as someone with write access to the remote's files can.
func appendUnsigned(t *testing.T, bare, ref string) string {
	t.Helper()
	old := strings.TrimSpace(gitRun(t, bare, "rev-parse", ref))
	tree := strings.TrimSpace(gitRun(t, bare, "rev-parse", old+"^{tree}"))
	id := strings.TrimSpace(gitRun(t, bare, "commit-tree", tree, "-p", old, "-m", "appended"))
	gitRun(t, bare, "update-ref", ref, id, old)
	return id
}

// TestFetchHoldsBack: a fetch moves a ref only to commits that verify, and
// never this host's own chains. An unsigned commit appended on the remote
// to host-a's own spine is reported as tampering on the remote and taken
// nowhere: host-a's later posts work. One appended to a task's journal
// stays in host-b's remote-tracking ref, reported, while the rest of the
// fetch moves; host-b builds nothing on it.
func TestFetchHoldsBack(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	tok := a.work("T-1", "notes", 1)
	a.ok("push")
	b, _ := cloneHost(t, url, root, "host-b")
	signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers
	bare := srv.dir("tasks.git")

	spine := a.refs()[refs.Spine("host-a")]
	appendUnsigned(t, bare, refs.Spine("host-a"))
	r := a.want(2, "fetch")
	mustHave(t, "host-a's fetch", r.out+r.err, "held back: writer host-a (spine)", "not what this host's writer wrote")
	if got := a.refs()[refs.Spine("host-a")]; got != spine {
		t.Fatalf("host-a's fetch moved its own spine to %s", got)
	}
	a.post("T-1", "notes", "agent-host-a", tok, 1)
	verifyPinned(t, a, signers)

	// host-a's good post goes to the remote's journal through the guard
	// (its spine there is not host-a's any more: restore it first).
	gitRun(t, bare, "update-ref", refs.Spine("host-a"), spine)
	a.ok("fetch")
	a.ok("push")
	journal := a.refs()[refs.Journal("T-1")]
	bad := appendUnsigned(t, bare, refs.Journal("T-1"))
	r = b.want(2, "fetch")
	mustHave(t, "host-b's fetch", r.out+r.err, "held back: task T-1 (journal)", "do not verify")
	if got := b.refs()[refs.Journal("T-1")]; got != journal {
		t.Fatalf("host-b's T-1 journal is %s, want the last verified commit %s (the unsigned one is %s)\n%s%s", got, journal, bad, r.out, r.err)
	}
	if got := b.refs()[refs.Spine("host-a")]; got != a.refs()[refs.Spine("host-a")] {
		t.Fatalf("host-b's fetch did not move what verifies (host-a's spine)")
	}
	if got := strings.TrimSpace(b.git("rev-parse", "refs/bernstein-remotes/origin/journal/T-1")); got != bad {
		t.Fatalf("the remote-tracking journal is %s, want the remote's head %s", got, bad)
	}
	verifyPinned(t, b, signers)
}

// TestAnchorsTravel: a checkpoint of a commit that no branch pushed, and a
// diff between two such commits, travel with the journal: a fresh clone
// holds the commits (git cat-file -e), and audit verify there checks them
// (none left "not in this repository").
func TestAnchorsTravel(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	a.ok("task", "create", "T-1", "--title", "t")
	a.git("checkout", "-q", "-b", "local-only")
	if err := os.WriteFile(filepath.Join(a.dir, "f.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.git("add", "f.txt")
	a.git("commit", "-q", "-m", "one")
	c1 := strings.TrimSpace(a.git("rev-parse", "HEAD"))
	a.ok("checkpoint", "T-1", "--commit", c1)
	if err := os.WriteFile(filepath.Join(a.dir, "f.txt"), []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.git("commit", "-q", "-am", "two")
	c2 := strings.TrimSpace(a.git("rev-parse", "HEAD"))
	a.ok("diff", "capture", "T-1", "--base", c1, "--head", c2)
	a.ok("push")
	if a.refs()[refs.Anchors("host-a")] == "" {
		t.Fatalf("no anchors ref: %v", sorted(a.refs()))
	}
	c := newHost(t, root, "host-c")
	if r := c.runIn(root, "clone", url, c.dir); r.code != 0 {
		t.Fatalf("clone: exit %d\n%s%s", r.code, r.out, r.err)
	}
	for _, id := range []string{c1, c2} {
		if _, err := gitTry(c.dir, "cat-file", "-e", id+"^{commit}"); err != nil {
			t.Fatalf("the clone lacks the recorded commit %s: %v", id, err)
		}
	}
	c.signers = writeSigners(t, filepath.Join(root, "signers"), a)
	r := c.run("audit", "verify", "--strict", "--output-json")
	if r.code != 0 {
		t.Fatalf("the clone: audit verify exited %d\n%s%s", r.code, r.out, r.err)
	}
	var rep struct {
		Counts struct {
			CommitsChecked    int `json:"commits_checked"`
			CommitsNotChecked int `json:"commits_not_checked"`
		} `json:"counts"`
		NotChecked []struct {
			Check string `json:"check"`
		} `json:"not_checked"`
	}
	decodeJSON(t, r.out, &rep)
	if rep.Counts.CommitsChecked < 2 || rep.Counts.CommitsNotChecked != 0 {
		t.Fatalf("the clone checked %d commits, %d not: %s", rep.Counts.CommitsChecked, rep.Counts.CommitsNotChecked, r.out)
	}
}

// TestGuardRefusesForkThatDoesNotDiverge: the remote guard accepts a fork
// ref only when it records a divergence (its rows after the shared ones
// differ from the task's): one that only repeats the task's chain is
// refused, whoever pushes it with plain git.
func TestGuardRefusesForkThatDoesNotDiverge(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	_, a := newOrigin(t, srv, root)
	a.work("T-1", "notes", 2)
	a.ok("push")
	head := strings.TrimSpace(a.git("rev-parse", refs.Journal("T-1")))
	fork := refs.Fork("host-a", "journal", "T-1", 2)
	out, err := gitTry(a.dir, "push", "origin", head+":"+fork)
	if err != nil {
		out += err.Error()
	}
	if err == nil || !strings.Contains(out, "bernstein guard: refused "+fork) {
		t.Fatalf("the guard took a fork that does not diverge (err %v):\n%s", err, out)
	}
	if refsOf(t, srv.dir("tasks.git"), refs.ForksPrefix)[fork] != "" {
		t.Fatalf("the remote holds %s", fork)
	}
}
