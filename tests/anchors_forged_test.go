package tests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/refs"
)

// The writer's own anchors ref forged with plain git as a blob, as an
// object the repository does not have, or as an unsigned commit appended
// to it (docs/trust.md, Refs that cannot be
// read): audit verify names it; the writer's next checkpoint goes on from
// the anchor it recorded last, over the forged value, with one warning
// naming the ref; push sends the writer's anchors, not the forgery. Every
// expectation is read with git.

// anchorsForgeries point ref at what is no anchor; each returns the value.
var anchorsForgeries = []struct {
	name  string
	forge func(f *fixture, ref string) string
}{
	{"blob", func(f *fixture, ref string) string {
		o := f.blob("no anchor")
		f.git("update-ref", ref, o)
		return o
	}},
	{"commit-tree", func(f *fixture, ref string) string {
		// An unsigned commit of no anchor record on the writer's head.
		return commitTreeOnto(f, ref)
	}},
	{"missing", func(f *fixture, ref string) string {
		// git update-ref refuses an absent object: the loose ref file is
		// written directly, as git would write it.
		o := strings.Repeat("7", len(f.rev(ref)))
		if err := os.WriteFile(filepath.Join(f.dir, ".git", filepath.FromSlash(ref)), []byte(o+"\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
		if got := strings.TrimSpace(f.git("rev-parse", "--verify", "--quiet", ref)); got != o {
			f.t.Fatalf("the forged ref reads %q in git, want %s", got, o)
		}
		return o
	}},
}

// anchoredFixture checkpoints A-1 at a project commit; it returns the
// fixture and a function making another project commit.
func anchoredFixture(t *testing.T) (*fixture, func(string) string) {
	f, _ := unreadableTaskFixture(t)
	commit := func(msg string) string {
		f.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", msg)
		return f.rev("HEAD")
	}
	if _, errOut, code := f.cli("", "checkpoint", "A-1", "--commit", commit("one")); code != 0 {
		t.Fatalf("checkpoint: exit %d %s", code, errOut)
	}
	return f, commit
}

func TestOwnAnchorsForgedBlocksNoWriter(t *testing.T) {
	for _, fg := range anchorsForgeries {
		t.Run(fg.name, func(t *testing.T) {
			f, commit := anchoredFixture(t)
			ref := refs.Anchors("test-writer")
			honest := f.rev(ref)
			forged := fg.forge(f, ref)
			auditNames(t, f, ref, true)

			second := commit("two")
			out, errOut, code := f.cli("", "checkpoint", "A-1", "--commit", second)
			if code != 0 {
				t.Fatalf("checkpoint over the forged anchors ref: exit %d\n%s%s", code, out, errOut)
			}
			if n := strings.Count(errOut, "warning: "+ref+" (at "+forged+") was tampered with"); n != 1 {
				t.Errorf("stderr %q: want one warning naming %s at %s", errOut, ref, forged)
			}
			// One anchor on the honest one, keeping the new commit.
			if p := f.rev(ref + "^1"); p != honest {
				t.Fatalf("the new anchor's first parent is %s, want the honest head %s", p, honest)
			}
			if p := f.rev(ref + "^2"); p != second {
				t.Fatalf("the new anchor keeps %s, want %s", p, second)
			}
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 || !strings.Contains(out, "everything holds") {
				t.Fatalf("audit verify after the write: exit %d\n%s%s", code, out, errOut)
			}
			if _, errOut, code := f.cli("", "checkpoint", "A-1", "--commit", commit("three")); code != 0 || strings.Contains(errOut, "warning") {
				t.Fatalf("the checkpoint after: exit %d %s", code, errOut)
			}
		})
	}
}

// TestOwnAnchorsForgedNoHeadRecorded: with no anchor recorded (the heads
// memory forgot it), a checkpoint over a commit appended to the writer's
// anchors goes on the writer's own anchor below it, and over an anchors
// ref that is no commit starts the writer's anchors anew over it, warning
// of either.
func TestOwnAnchorsForgedNoHeadRecorded(t *testing.T) {
	for _, fg := range anchorsForgeries {
		t.Run(fg.name, func(t *testing.T) {
			f, commit := anchoredFixture(t)
			ref := refs.Anchors("test-writer")
			honest := f.rev(ref)
			forged := fg.forge(f, ref)
			forgetHead(f, "anchors/test-writer")
			second := commit("two")
			out, errOut, code := f.cli("", "checkpoint", "A-1", "--commit", second)
			if code != 0 {
				t.Fatalf("checkpoint over the forged anchors ref: exit %d\n%s%s", code, out, errOut)
			}
			if !strings.Contains(errOut, "warning: "+ref+" (at "+forged+") was tampered with") {
				t.Errorf("stderr %q: want a warning naming %s at %s", errOut, ref, forged)
			}
			// A commit appended to the writer's anchors: the new anchor goes
			// on the writer's own below it. Nothing of the writer's below
			// (a blob, a missing object): a root anchor keeping the new
			// commit alone.
			want := []string{second}
			if fg.name == "commit-tree" {
				want = []string{honest, second}
			}
			if ps := strings.Fields(f.git("rev-list", "--parents", "-n", "1", ref)); !slices.Equal(ps[1:], want) {
				t.Fatalf("the new anchor has parents %v, want %v", ps[1:], want)
			}
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify after the write: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestPushRestoresForgedOwnAnchors: push moves the writer's own anchors
// ref back to the anchor it recorded, and the remote gets that.
func TestPushRestoresForgedOwnAnchors(t *testing.T) {
	for _, fg := range anchorsForgeries {
		t.Run(fg.name, func(t *testing.T) {
			f, _ := anchoredFixture(t)
			bare := bareOrigin(t, f)
			ref := refs.Anchors("test-writer")
			honest := f.rev(ref)
			forged := fg.forge(f, ref)
			out, errOut, code := f.cli("", "push", "origin")
			if code != 0 {
				t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
			}
			if !strings.Contains(errOut, "warning: "+ref+" (at "+forged+") was tampered with") || !strings.Contains(errOut, "moved back there") {
				t.Errorf("stderr %q: want a warning that %s at %s was moved back", errOut, ref, forged)
			}
			if got := f.rev(ref); got != honest {
				t.Fatalf("%s is at %s here, want %s", ref, got, honest)
			}
			if got := strings.TrimSpace(gitRun(t, bare, "rev-parse", ref)); got != honest {
				t.Fatalf("the remote's %s is at %s, want %s", ref, got, honest)
			}
		})
	}
}

// TestOwnAnchorsAfterInterruptedCheckpoint: a checkpoint that moved its
// refs and stopped before its heads memory was written leaves the
// writer's own signed anchor past the one it remembers: the next
// checkpoint builds on it, with no word of tampering.
func TestOwnAnchorsAfterInterruptedCheckpoint(t *testing.T) {
	f, commit := anchoredFixture(t)
	ref := refs.Anchors("test-writer")
	path := f.headsFile()
	memory, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := f.cli("", "checkpoint", "A-1", "--commit", commit("two")); code != 0 {
		t.Fatalf("checkpoint: exit %d %s", code, errOut)
	}
	interrupted := f.rev(ref)
	if err := os.WriteFile(path, memory, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), interrupted) || !strings.Contains(string(b), "anchors/test-writer") {
		t.Fatalf("the heads memory does not stand before the next checkpoint:\n%s", b)
	}
	if _, errOut, code := f.cli("", "checkpoint", "A-1", "--commit", commit("three")); code != 0 || strings.Contains(errOut, "warning") || strings.Contains(errOut, "tamper") {
		t.Fatalf("the checkpoint after an interrupted one: exit %d %q", code, errOut)
	}
	if p := f.rev(ref + "^1"); p != interrupted {
		t.Fatalf("the new anchor's first parent is %s, want the interrupted checkpoint's %s", p, interrupted)
	}
}
