package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// Push over the writer's own spine or audit mirror forged with plain git
// (docs/trust.md, Entries appended to the writer's own spine or audit
// mirror): the ref is moved back to the writer's last verified head before
// anything is sent, a warning names the forged ref, and the remote gets
// the honest head, never the forged commit. An interrupted post's own
// signed entries past the recorded head are pushed as they are, with no
// alarm. Every expectation is read with plain git, here and on the
// remote.

// bareOrigin makes a bare repository and adds it as f's remote origin.
func bareOrigin(t *testing.T, f *fixture) string {
	t.Helper()
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	f.git("remote", "add", "origin", "file://"+bare)
	return bare
}

// commitTreeOnto appends to ref with plain git commit-tree an unsigned
// commit of its head's tree, committed in the writer's name, and moves
// the ref there with update-ref; it returns the commit.
func commitTreeOnto(f *fixture, ref string) string {
	f.t.Helper()
	honest := rev(f, ref)
	cmd := exec.Command("git", "-C", f.dir, "commit-tree", honest+"^{tree}", "-p", honest, "-m", "forged entry")
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test-writer", "GIT_AUTHOR_EMAIL=test-writer@bernstein",
		"GIT_COMMITTER_NAME=test-writer", "GIT_COMMITTER_EMAIL=test-writer@bernstein")
	out, err := cmd.Output()
	if err != nil {
		f.t.Fatalf("git commit-tree: %v", err)
	}
	forged := strings.TrimSpace(string(out))
	f.git("update-ref", ref, forged, honest)
	return forged
}

func TestPushRestoresForgedOwnChain(t *testing.T) {
	for _, kind := range []string{"spine", "audit"} {
		for _, forge := range []string{"commit-tree", "next entry"} {
			for _, policy := range []string{"auto archive", "archive off"} {
				t.Run(kind+"/"+strings.ReplaceAll(forge, " ", "_")+"/"+strings.ReplaceAll(policy, " ", "_"), func(t *testing.T) {
					f, _ := ownChainFixture(t)
					if policy == "archive off" {
						f.git("config", "bernstein.archive.endedBefore", "off")
					}
					bare := bareOrigin(t, f)
					ref := refs.Prefix + kind + "/test-writer"
					honest := rev(f, ref)
					var forged string
					if forge == "commit-tree" {
						forged = commitTreeOnto(f, ref)
					} else {
						forged = forgeNextEntry(f, ref)
						f.git("update-ref", ref, forged, honest)
					}
					out, errOut, code := f.cli("", "push", "origin", "--output-json")
					if code != 0 {
						t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
					}
					want := ref + " (at " + forged + ") was tampered with"
					if n := strings.Count(errOut, "warning: "+want); n != 1 || !strings.Contains(errOut, "moved back there") {
						t.Errorf("stderr %q: want one warning that %s was tampered with and moved back", errOut, want)
					}
					var res bernstein.PushResult
					decodeJSON(t, out, &res)
					if n := strings.Count(errOut, "warning:"); n != 1 {
						t.Errorf("stderr %q: %d warnings, want the one", errOut, n)
					}
					// The automatic archive read the writer's spine, not
					// the forged one.
					if a := res.AutoArchive; (policy == "auto archive") != (a != nil) || a != nil && a.Error != "" {
						t.Errorf("auto archive %+v", a)
					}
					if len(res.Tampered) != 1 || !strings.HasPrefix(res.Tampered[0], want) {
						t.Errorf("tampered %q, want %q...", res.Tampered, want)
					}
					if got := rev(f, ref); got != honest {
						t.Fatalf("%s is at %s here, want the writer's %s", ref, got, honest)
					}
					if got := strings.TrimSpace(gitRun(t, bare, "rev-parse", ref)); got != honest {
						t.Fatalf("the remote's %s is at %s, want the writer's %s", ref, got, honest)
					}
					if _, err := gitTry(bare, "cat-file", "-e", forged); err == nil {
						t.Fatalf("the remote holds the forged commit %s", forged)
					}
					if out, errOut, code := f.cli("", "audit", "verify"); code != 0 || !strings.Contains(out, "everything holds") {
						t.Fatalf("audit verify after the push: exit %d\n%s%s", code, out, errOut)
					}
					// The next push finds the writer's own chains.
					if out, errOut, code := f.cli("", "push", "origin"); code != 0 || strings.Contains(errOut, "warning") {
						t.Fatalf("the push after: exit %d\n%s%s", code, out, errOut)
					}
				})
			}
		}
	}
}

// TestPushAfterInterruptedPost: a post that moved its refs and stopped
// before its heads memory was written leaves the writer's own signed
// entries past the heads it remembers: push sends them, with no word of
// tampering, and moves nothing back.
func TestPushAfterInterruptedPost(t *testing.T) {
	f, tok := ownChainFixture(t)
	bare := bareOrigin(t, f)
	spine, audit := interruptPost(f, tok)
	out, errOut, code := f.cli("", "push", "origin", "--output-json")
	if code != 0 || strings.Contains(errOut, "warning") || strings.Contains(errOut, "tamper") || strings.Contains(out, `"tampered"`) {
		t.Fatalf("push after an interrupted post: exit %d\n%s%s", code, out, errOut)
	}
	for ref, want := range map[string]string{refs.Spine("test-writer"): spine, refs.Audit("test-writer"): audit} {
		if got := rev(f, ref); got != want {
			t.Fatalf("%s moved to %s here, want the interrupted post's %s", ref, got, want)
		}
		if got := strings.TrimSpace(gitRun(t, bare, "rev-parse", ref)); got != want {
			t.Fatalf("the remote's %s is at %s, want the interrupted post's %s", ref, got, want)
		}
	}
}

// TestPushOverRolledBackOwnChain: the writer's own spine or audit mirror
// moved back with plain git to a commit of its own is a rollback
// (docs/trust.md, Rollbacks), not a forgery push moves back over: push
// goes on as it did, saying nothing of tampering, and the next post
// refuses the chain.
func TestPushOverRolledBackOwnChain(t *testing.T) {
	for _, kind := range []string{"spine", "audit"} {
		t.Run(kind, func(t *testing.T) {
			f, tok := ownChainFixture(t)
			postCLI(f, tok, "two")
			bare := bareOrigin(t, f)
			ref := refs.Prefix + kind + "/test-writer"
			honest := rev(f, ref)
			f.git("update-ref", ref, honest+"~1", honest)
			back := rev(f, ref)
			out, errOut, code := f.cli("", "push", "origin")
			if code != 0 || strings.Contains(errOut, "tamper") {
				t.Fatalf("push over a rolled-back %s: exit %d\n%s%s", ref, code, out, errOut)
			}
			if got := rev(f, ref); got != back {
				t.Fatalf("%s moved to %s here, want it left at %s", ref, got, back)
			}
			if got := strings.TrimSpace(gitRun(t, bare, "rev-parse", ref)); got != back {
				t.Fatalf("the remote's %s is at %s, want %s", ref, got, back)
			}
			if _, errOut, code := f.cli("", "artifact", "post", "OC-1", "three", "--type", "report", "--body", "# three",
				"--agent", "agent", "--claim-token", tok); code == 0 || !strings.Contains(errOut, "rolled back") {
				t.Fatalf("the post after: exit %d %q, want the rollback refused", code, errOut)
			}
		})
	}
}

// TestPushRestoresForgedOwnChainNoHeadRecorded: with no head of its own
// spine, audit mirror or anchors remembered (another BERNSTEIN_HOME),
// push moves a chain plain git appended to back to the newest commit the
// writer verifies as its own, warns, and the remote gets that; the push
// records the head, so the next push finds it recorded and says nothing.
func TestPushRestoresForgedOwnChainNoHeadRecorded(t *testing.T) {
	for _, kind := range []string{"spine", "audit", "anchors"} {
		t.Run(kind, func(t *testing.T) {
			var f *fixture
			if kind == "anchors" {
				f, _ = anchoredFixture(t)
			} else {
				f, _ = ownChainFixture(t)
			}
			f.git("config", "bernstein.archive.endedBefore", "off")
			bare := bareOrigin(t, f)
			ref := refs.Prefix + kind + "/test-writer"
			honest := rev(f, ref)
			forged := commitTreeOnto(f, ref)
			forgetHead(f, kind+"/test-writer")
			out, errOut, code := f.cli("", "push", "origin")
			if code != 0 || !strings.Contains(errOut, "warning: "+ref+" (at "+forged+") was tampered with") || !strings.Contains(errOut, "moved back there") {
				t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
			}
			if got := rev(f, ref); got != honest {
				t.Fatalf("%s is at %s here, want the writer's %s", ref, got, honest)
			}
			if got := strings.TrimSpace(gitRun(t, bare, "rev-parse", ref)); got != honest {
				t.Fatalf("the remote's %s is at %s, want the writer's %s", ref, got, honest)
			}
			if _, err := gitTry(bare, "cat-file", "-e", forged); err == nil {
				t.Fatalf("the remote holds the forged commit %s", forged)
			}
			if b, err := os.ReadFile(f.headsFile()); err != nil || !strings.Contains(string(b), kind+"/test-writer") {
				t.Fatalf("the push recorded no head of %s: %v", ref, err)
			}
			if out, errOut, code := f.cli("", "push", "origin"); code != 0 || strings.Contains(errOut, "warning") {
				t.Fatalf("the push after: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestPushRecordsOwnHeadsNotRecorded: with no head of its own chains
// remembered and nothing forged, push raises no alarm, moves nothing, and
// records the heads.
func TestPushRecordsOwnHeadsNotRecorded(t *testing.T) {
	f, _ := ownChainFixture(t)
	f.git("config", "bernstein.archive.endedBefore", "off")
	bare := bareOrigin(t, f)
	spine, audit := rev(f, refs.Spine("test-writer")), rev(f, refs.Audit("test-writer"))
	forgetHead(f, "spine/test-writer")
	forgetHead(f, "audit/test-writer")
	if out, errOut, code := f.cli("", "push", "origin"); code != 0 || strings.Contains(errOut, "warning") {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	if got := strings.TrimSpace(gitRun(t, bare, "rev-parse", refs.Spine("test-writer"))); got != spine || rev(f, refs.Audit("test-writer")) != audit {
		t.Fatalf("the push moved the writer's chains: remote spine %s, want %s", got, spine)
	}
	b, err := os.ReadFile(f.headsFile())
	if err != nil || !strings.Contains(string(b), spine) || !strings.Contains(string(b), audit) {
		t.Fatalf("the push recorded no heads: %v\n%s", err, b)
	}
}
