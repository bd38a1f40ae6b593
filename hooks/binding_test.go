package hooks_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// TestGuardRefusesCopiedTask: a task copied with plain git from another
// repository the same writer serves carries rows signed by a pinned key,
// but it is rooted in the other repository's identity: the guard refuses
// it, saying which task is foreign and why, and nothing moves.
func TestGuardRefusesCopiedTask(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	r := newRemote(t)
	r.mustCLI("hooks", "install", "--remote-guard")
	r.pin("host-a", h.signers())
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push refused:\n%s", out)
	}
	// The same writer (one home) in another repository.
	other := &host{t: t, root: h.root, dir: filepath.Join(t.TempDir(), "other"), home: h.home, writer: "host-a", tokens: map[string]string{}}
	if _, err := bernstein.Init(bernstein.Options{Repo: other.dir, Home: other.home}, "host-a"); err != nil {
		t.Fatal(err)
	}
	other.git("commit", "-q", "--allow-empty", "-m", "start")
	other.reopen()
	other.task("C-1")
	other.post("C-1", "summary", "made in another repository")
	h.git("fetch", "-q", other.dir, refs.Ledger("C-1")+":"+refs.Ledger("C-1"), refs.Journal("C-1")+":"+refs.Journal("C-1"))
	before := r.refs()
	out, code := h.push(r, "--atomic", refs.Ledger("C-1")+":"+refs.Ledger("C-1"), refs.Journal("C-1")+":"+refs.Journal("C-1"))
	if code == 0 {
		t.Fatalf("the copied task was accepted:\n%s", out)
	}
	mustContain(t, out, "refused "+refs.Journal("C-1"), "foreign: its first record is rooted in another repository", "[repository_binding]")
	if after := r.refs(); after != before {
		t.Fatalf("refs moved:\n%s\n%s", before, after)
	}
}

// TestGuardFirstUseWriterKeepsToItsOwnTasks: on a --trust-first-use
// remote, a newcomer's key is trusted on first use, for the tasks it
// creates only: its rows on a task another writer created are refused
// (task_owner), and the other writer's task stays as it was.
func TestGuardFirstUseWriterKeepsToItsOwnTasks(t *testing.T) {
	orch := newHost(t, "orch")
	orch.task("T-1")
	orch.post("T-1", "summary", "first")
	r := newRemote(t)
	r.mustCLI("hooks", "install", "--remote-guard", "--trust-first-use")
	if out, code := orch.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("orch's push refused:\n%s", out)
	}
	mal := newHostFrom(t, "mal", orch)
	if _, err := mal.s.PinKeys(bernstein.PinOptions{Writers: []string{"orch"}}); err != nil {
		t.Fatal(err)
	}
	// mal's own task passes.
	mal.task("M-1")
	if out, code := mal.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("mal's push of its own task refused:\n%s", out)
	}
	// mal's row on orch's task does not.
	if _, err := mal.s.Checkpoint("T-1", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	before := r.refs()
	out, code := mal.push(r, "--atomic", allBernstein)
	if code == 0 {
		t.Fatalf("mal's row on orch's task was accepted:\n%s", out)
	}
	mustContain(t, out, "refused "+refs.Journal("T-1"), "writer mal is trusted only on first use, so it may act only on the tasks it created; task T-1 was created by writer orch [task_owner]")
	if after := r.refs(); after != before {
		t.Fatalf("refs moved:\n%s\n%s", before, after)
	}
	// orch keeps working and pushing.
	orch.post("T-1", "summary", "second")
	if out, code := orch.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("orch's push after mal's attempt refused:\n%s", out)
	}
	if !strings.Contains(r.refs(), refs.Journal("T-1")) {
		t.Fatal("T-1 gone")
	}
}

// TestGuardRefusesRivalIdentity: a repository that minted its own identity
// (an init in a clone that never fetched the remote's) cannot push it over
// the remote's: the guard names both identities, and nothing moves.
func TestGuardRefusesRivalIdentity(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	r := newRemote(t)
	r.mustCLI("hooks", "install", "--remote-guard")
	r.pin("host-a", h.signers())
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push refused:\n%s", out)
	}
	rival := newHost(t, "host-b") // a repository of its own: another identity
	r.pin("host-b", rival.signers())
	before := r.refs()
	out, code := rival.push(r, "--atomic", "+"+refs.Repository+":"+refs.Repository)
	if code == 0 {
		t.Fatalf("a rival identity was accepted:\n%s", out)
	}
	mustContain(t, out, "refused "+refs.Repository, "[repository_identity]")
	if after := r.refs(); after != before {
		t.Fatalf("refs moved:\n%s\n%s", before, after)
	}
}
