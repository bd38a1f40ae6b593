package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// testdata/format1.tar.gz is a repository written in storage format 1 by
// bernstein as it was before the repository identity (the commit before
// it, built from git history): `bernstein init --writer legacy-w`, task
// L-1 created, claimed by agent (legacyToken), a summary posted ("legacy
// findings") and HEAD~1 checkpointed, task L-2 created. It holds the work
// tree (repo/) and the writer's BERNSTEIN_HOME (home/; a test key).
const legacyToken = "bct_spQ3GjYVE7c27pkpZuFaHW3HNUTCNmfkRu4UlTVz5WU"

// legacyFixture unpacks the format-1 repository into a fresh folder.
func legacyFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	abs, err := filepath.Abs(filepath.Join("testdata", "format1.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xzf", abs, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	f := &fixture{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home")}
	f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
	return f
}

// TestUpgradeFromFormat1: a repository made by the code before the
// repository identity keeps working and verifying as it is; `bernstein
// upgrade` mints its identity and binds its chains (each still verifies,
// its claim still posts, new tasks are rooted in the identity); a second
// upgrade does nothing; and a format-1 chain copied in after the upgrade is
// foreign.
func TestUpgradeFromFormat1(t *testing.T) {
	f := legacyFixture(t)
	other := legacyFixture(t) // another copy, never upgraded
	if _, _, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatal("the format-1 repository does not verify before the upgrade")
	}
	if info, err := f.open().Task("L-1"); err != nil || info.Progress.Proof.State != "verified" || info.ClaimAgent != "agent" {
		t.Fatalf("L-1 before the upgrade: %+v %v", info, err)
	}
	if f.repositoryID() != "" {
		t.Fatal("the fixture has an identity")
	}

	out, errOut, code := f.cli("", "upgrade")
	if code != 0 || !strings.Contains(out, "storage format 1 -> 3") || !strings.Contains(out, "5 format-1 chains bound") {
		t.Fatalf("upgrade: exit %d\n%s%s", code, out, errOut)
	}
	id := f.repositoryID()
	if record.ValidateRepositoryID(id) != nil {
		t.Fatalf("no identity after the upgrade: %q", id)
	}
	// The upgrade's commit verifies with git against the published key.
	signers := filepath.Join(t.TempDir(), "signers")
	if err := os.WriteFile(signers, []byte(f.publishedSigners()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := f.gitErr("-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", refs.Repository); err != nil {
		t.Fatalf("git verify-commit %s: %v\n%s", refs.Repository, err, out)
	}
	if out, errOut, code := f.cli("", "upgrade"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("upgrade again: exit %d\n%s%s", code, out, errOut)
	}
	s := f.open()
	for _, task := range []string{"L-1", "L-2"} {
		if info, err := s.Task(task); err != nil || info.Progress.Proof.State != "verified" {
			t.Fatalf("%s after the upgrade: %+v %v", task, info, err)
		}
	}
	if _, err := s.Post(bernstein.PostRequest{Task: "L-1", Key: "summary", Agent: "agent", ClaimToken: legacyToken, Payload: report("after the upgrade")}); err != nil {
		t.Fatalf("post on the legacy claim after the upgrade: %v", err)
	}
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "N-1", Title: "new"}); err != nil {
		t.Fatal(err)
	}
	first := strings.Fields(f.git("rev-list", "--max-parents=0", refs.Ledger("N-1")))[0]
	if !strings.Contains(f.git("log", "-1", "--format=%B", first), string(record.Genesis(id, record.ChainLedger, "N-1"))) {
		t.Fatal("a new task after the upgrade is not rooted in the identity")
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify after the upgrade: exit %d\n%s%s", code, out, errOut)
	}

	// A format-1 chain made elsewhere (the other copy, written by the same
	// writer) and copied in is not among the bound ones: foreign.
	so := openWith(t, other.opts)
	if _, err := so.CreateTask(bernstein.TaskSpec{ID: "X-1", Title: "made after the upgrade, elsewhere"}); err != nil {
		t.Fatal(err)
	}
	f.git("fetch", "-q", other.dir, refs.Ledger("X-1")+":"+refs.Ledger("X-1"))
	info, err := f.open().Task("X-1")
	if err != nil || info.Progress.Proof.State != "tampered" || len(info.Progress.Proof.RowsAtFault) == 0 ||
		!strings.Contains(info.Progress.Proof.RowsAtFault[0].Reason, "not among the format-1 chains this repository bound") {
		t.Fatalf("a format-1 task copied in after the upgrade: %+v %v", info, err)
	}
}

// TestUpgradeKilledAtEveryStep kills `bernstein upgrade` (strace sends
// SIGKILL as it enters the call) at each rename it makes, in turn (the
// host's memory copied under the new id, the pack, the identity's ref),
// and once right before the identity's ref is renamed into place: the
// repository is then in format 1 (before that rename) or 2, whole, and
// verifies; an upgrade run again finishes.
func TestUpgradeKilledAtEveryStep(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed")
	}
	kill := func(f *fixture, args ...string) bool {
		t.Helper()
		cmd := exec.Command(strace, append(append([]string{"-f", "-qq", "-o", "/dev/null"}, args...), cliBin, "--repo", f.dir, "upgrade")...)
		cmd.Env = append(cmd.Environ(), "BERNSTEIN_HOME="+f.home)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
			return true
		}
		if strings.Contains(string(out), "ptrace") {
			t.Skipf("strace cannot trace here: %s", out)
		}
		if err != nil {
			t.Fatalf("upgrade under strace: %v\n%s", err, out)
		}
		return false
	}
	check := func(f *fixture, wantFormat int) {
		t.Helper()
		if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
			t.Fatalf("audit verify after the kill: exit %d\n%s%s", code, out, errOut)
		}
		if got := f.repositoryID() != ""; wantFormat == 1 && got {
			t.Fatal("the identity was minted though the kill came before its ref moved")
		}
		if out, errOut, code := f.cli("", "upgrade"); code != 0 {
			t.Fatalf("upgrade after the kill: exit %d\n%s%s", code, out, errOut)
		}
		if f.repositoryID() == "" {
			t.Fatal("no identity after the second upgrade")
		}
		if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
			t.Fatalf("audit verify after the second upgrade: exit %d\n%s%s", code, out, errOut)
		}
		if info, err := f.open().Task("L-1"); err != nil || info.Progress.Proof.State != "verified" || info.ClaimAgent != "agent" {
			t.Fatalf("L-1 after the second upgrade: %+v %v", info, err)
		}
	}
	setUp := func() *fixture {
		f := legacyFixture(t)
		// A pin, so that there is memory to copy.
		if _, err := f.open().PinKeys(bernstein.PinOptions{All: true}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// Right before the commit point.
	f := setUp()
	lock := filepath.Join(f.dir, ".git", "refs", "bernstein", "repository.lock")
	if !kill(f, "-P", lock, "-e", "trace=rename,renameat,renameat2", "-e", "inject=rename,renameat,renameat2:signal=KILL") {
		t.Fatal("the upgrade was not killed before its ref's rename")
	}
	check(f, 1)
	// At each rename in turn.
	killed := 0
	for n := 1; n < 40; n++ {
		f := setUp()
		if !kill(f, "-e", "trace=rename,renameat,renameat2", "-e", fmt.Sprintf("inject=rename,renameat,renameat2:signal=KILL:when=%d", n)) {
			break
		}
		killed++
		check(f, 0)
	}
	t.Logf("killed at %d renames", killed)
	if killed < 2 {
		t.Fatalf("the upgrade was killed at %d renames only", killed)
	}
}
