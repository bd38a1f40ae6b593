package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// A remote whose guard predates storage format 3 (docs/archive.md,
// Remotes): the guard is bernstein's own as it was before the archive
// existed, built from this repository's history, installed in a bare
// repository as its operator would.

// preArchiveCommit is the last commit of this repository before the
// archive's codec (internal/archive) was added: its guard knows no
// refs/bernstein/archive/ and refuses every deletion of a task ref.
const preArchiveCommit = "97cc425"

// oldGuardBin builds bernstein at preArchiveCommit (offline, from the
// module cache) and returns the binary. It needs this repository's
// history: without the commit, the test cannot run and says so.
func oldGuardBin(t *testing.T) string {
	t.Helper()
	top, err := gitTry("", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("not in a git checkout of bernstein: %v", err)
	}
	top = strings.TrimSpace(top)
	if _, err := gitTry(top, "cat-file", "-e", preArchiveCommit+"^{commit}"); err != nil {
		t.Skipf("the history of %s does not hold %s, the version before the archive: %v", top, preArchiveCommit, err)
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", top, "archive", "--format=tar", preArchiveCommit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	archive.Stderr = &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v %s", preArchiveCommit, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	bin := filepath.Join(src, "bin", "bernstein")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "./cmd/bernstein")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bernstein at %s: %v\n%s", preArchiveCommit, err, out)
	}
	return bin
}

// TestPushToPreArchiveGuard: host-a pushes to a remote guarded by the
// bernstein of before the archive. Its push archives OLD-1 (ended 30 days
// ago): the old guard refuses the push whole (the archive ref is no ref it
// knows, the deletions of OLD-1's refs are deletions); push sees that from
// the guard's own words, warns with its reason, and pushes the rest
// without the archive: the open task's new rows land, OLD-1's refs stay on
// the remote at their heads, and the JSON names what was held back.
func TestPushToPreArchiveGuard(t *testing.T) {
	old := oldGuardBin(t)
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	bare := srv.dir("old.git")
	gitRun(t, "", "init", "-q", "--bare", bare)
	install := exec.Command(old, "--repo", bare, "hooks", "install", "--remote-guard", "--trust-first-use")
	install.Env = append(os.Environ(), "BERNSTEIN_HOME="+bare+".operator")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install the old guard: %v\n%s", err, out)
	}
	if hook, err := os.ReadFile(filepath.Join(bare, "hooks", "pre-receive")); err != nil || !strings.Contains(string(hook), old) {
		t.Fatalf("the pre-receive hook does not run the old binary %s: %v\n%s", old, err, hook)
	}
	url := srv.url("old.git")
	a := newHost(t, root, "host-a")
	gitRun(t, root, "clone", "-q", url, a.dir)
	a.git("commit", "-q", "--allow-empty", "-m", "start")
	a.git("push", "-q", "origin", "HEAD:refs/heads/main")
	a.ok("init", "--writer", a.name, "--remote", "origin")
	endAt(t, a, time.Now().Add(-30*24*time.Hour), "OLD-1", record.KindTaskCompleted)
	tok := a.work("OPEN-1", "notes", 1)
	a.ok("push", "--no-archive") // the old guard takes all of it
	before := lsRemote(t, root, url)
	if before[refs.Ledger("OLD-1")] == "" || before[refs.Ledger("OPEN-1")] == "" {
		t.Fatalf("the first push: the remote holds %v", before)
	}

	a.post("OPEN-1", "notes", "agent-"+a.name, tok, 1)
	res, errOut := autoPush(t, a)
	if got := autoArchived(res); len(got) != 1 || got[0] != "OLD-1" {
		t.Fatalf("the automatic archive archived %v, want OLD-1", got)
	}
	archive := refs.Archive(a.name)
	if res.ArchiveRefused == nil || len(res.ArchiveRefused.Refs) != 1 || res.ArchiveRefused.Refs[0] != archive ||
		res.ArchiveRefused.Deletions != 2 || !strings.Contains(res.ArchiveRefused.Reason, archive) || !strings.Contains(res.ArchiveRefused.Reason, "[ref_name]") {
		t.Fatalf("archive_refused: %+v", res.ArchiveRefused)
	}
	if !strings.Contains(errOut, "refused the archive: its guard predates storage format 3") {
		t.Fatalf("push's stderr: %q", errOut)
	}
	after := lsRemote(t, root, url)
	local := a.refs()
	for _, ref := range []string{refs.Journal("OPEN-1"), refs.Spine(a.name)} {
		if after[ref] != local[ref] || after[ref] == before[ref] {
			t.Errorf("the remote holds %s at %q, want this host's new head %s", ref, after[ref], local[ref])
		}
	}
	if after[archive] != "" {
		t.Errorf("the old guard took %s", archive)
	}
	for _, ref := range []string{refs.Journal("OLD-1"), refs.Ledger("OLD-1")} {
		if after[ref] != before[ref] || local[ref] != "" {
			t.Errorf("%s: the remote holds %q (was %q), here %q: want it kept there, archived here", ref, after[ref], before[ref], local[ref])
		}
	}
	if len(res.Deleted) != 0 {
		t.Errorf("deleted %+v", res.Deleted)
	}

	// The next push is refused the same way and goes the same way: the
	// writer is never blocked.
	a.post("OPEN-1", "notes", "agent-"+a.name, tok, 1)
	r := a.run("push", "--output-json")
	var again bernstein.PushResult
	if r.code != 0 || json.Unmarshal([]byte(r.out), &again) != nil || again.ArchiveRefused == nil || again.ArchiveRefused.Deletions != 2 {
		t.Fatalf("the second push: exit %d %+v\n%s%s", r.code, again.ArchiveRefused, r.out, r.err)
	}
	if got := lsRemote(t, root, url)[refs.Journal("OPEN-1")]; got != a.refs()[refs.Journal("OPEN-1")] {
		t.Fatalf("the second push: the remote holds OPEN-1's journal at %s", got)
	}
}
