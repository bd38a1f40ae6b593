package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// refs/bernstein/repository is a ref like any other: plain git can garble
// it, point it at a blob, delete it or move it to another repository's
// identity record (one the same writer signed). None of that blocks the
// writer or makes its tasks foreign on its host: the identity its
// BERNSTEIN_HOME recorded for the repository, which the repository still
// holds, binds the chains; audit verify names the ref; a post goes on; and
// `bernstein init` moves the ref back.

// identityForgeries forge refs/bernstein/repository in f; each returns the
// value the ref is left at ("" when it is deleted).
var identityForgeries = []struct {
	name  string
	forge func(f *fixture) string
}{
	{"garbled", func(f *fixture) string { garbleLoose(f, refs.Repository); return "" }},
	{"blob", func(f *fixture) string {
		blob := strings.TrimSpace(f.gitIn("some bytes\n", "hash-object", "-w", "--stdin"))
		f.git("update-ref", refs.Repository, blob)
		return blob
	}},
	{"deleted", func(f *fixture) string { f.git("update-ref", "-d", refs.Repository); return "" }},
	{"another repository's identity", func(f *fixture) string {
		// The same writer (same BERNSTEIN_HOME) signs another
		// repository's identity; its record is copied here.
		other := filepath.Join(filepath.Dir(f.dir), "other")
		if _, err := bernstein.Init(bernstein.Options{Repo: other, Home: f.home}, "test-writer"); err != nil {
			f.t.Fatalf("init other: %v", err)
		}
		f.git("fetch", "-q", other, "+"+refs.Repository+":refs/forged/identity")
		at := f.rev("refs/forged/identity")
		f.git("update-ref", refs.Repository, at)
		f.git("update-ref", "-d", "refs/forged/identity")
		return at
	}},
}

func (f *fixture) gitIn(stdin string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", f.dir}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		f.t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

func TestRepositoryIdentityForgeryBlocksNoWriter(t *testing.T) {
	for _, fg := range identityForgeries {
		t.Run(strings.ReplaceAll(fg.name, " ", "_"), func(t *testing.T) {
			f, tokA := unreadableTaskFixture(t)
			honest := f.rev(refs.Repository)
			bare := filepath.Join(t.TempDir(), "remote.git")
			if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			f.git("remote", "add", "origin", bare)
			if out, errOut, code := f.cli("", "audit", "verify", "--checkpoint", "cp"); code != 0 {
				t.Fatalf("audit verify before: exit %d\n%s%s", code, out, errOut)
			}
			fg.forge(f)
			if got, _ := f.gitErr("rev-parse", "--verify", "--quiet", refs.Repository); strings.TrimSpace(got) == honest {
				t.Fatalf("the forgery left %s at the honest head", refs.Repository)
			}

			// No task reads as foreign or tampered.
			out, errOut, code := f.cli("", "task", "list", "--output-json", "--strict")
			if code != 0 || strings.Contains(out+errOut, "foreign") || strings.Contains(out+errOut, `"state": "tampered"`) {
				t.Fatalf("task list over a forged identity: exit %d\n%s%s", code, out, errOut)
			}
			for _, task := range []string{"A-1", "B-1"} {
				out, errOut, code := f.cli("", "task", "show", task, "--output-json")
				if code != 0 || strings.Contains(out+errOut, "foreign") {
					t.Fatalf("task show %s: exit %d\n%s%s", task, code, out, errOut)
				}
			}
			if out, errOut, code := f.cli("", "artifact", "show", "A-1", "summary", "--strict"); code != 0 || !strings.Contains(out, "# A-1") {
				t.Fatalf("artifact show: exit %d\n%s%s", code, out, errOut)
			}
			// audit verify names the ref, and only it.
			auditNames(t, f, refs.Repository, true)
			auditNames(t, f, refs.Repository, true, "--since", "cp")

			// A read moves nothing, nor does a write that writes nothing
			// (a task created again).
			if _, _, code := f.cli("", "task", "create", "A-1", "--title", "again"); code == 0 {
				t.Fatal("a task was created again")
			}
			if got, _ := f.gitErr("rev-parse", "--verify", "--quiet", refs.Repository); strings.TrimSpace(got) == honest {
				t.Fatalf("a read or a write that wrote nothing moved %s back", refs.Repository)
			}
			// The writer posts and creates on top of the chains; the post
			// moves the ref back to the recorded identity, and says so.
			out, errOut, code = f.cli("", "artifact", "post", "A-1", "more", "--type", "report", "--body", "# more",
				"--agent", "agent", "--claim-token", tokA, "--output-json")
			if code != 0 || !strings.Contains(errOut, "warning: "+refs.Repository+" (at ") || !strings.Contains(errOut, "was tampered with") || !strings.Contains(errOut, honest) {
				t.Fatalf("post over a forged identity: exit %d %s%s", code, out, errOut)
			}
			// The receipt says it too, in the warning's words.
			var receipt struct {
				Tampered []string `json:"tampered"`
			}
			if err := json.Unmarshal([]byte(out), &receipt); err != nil || len(receipt.Tampered) != 1 ||
				!strings.Contains(errOut, "warning: "+receipt.Tampered[0]) || !strings.HasPrefix(receipt.Tampered[0], refs.Repository+" (at ") {
				t.Fatalf("the post's receipt over a forged identity: %v %q (stderr %q)", err, receipt.Tampered, errOut)
			}
			if got := f.rev(refs.Repository); got != honest {
				t.Fatalf("the post left %s at %s, want the honest %s", refs.Repository, got, honest)
			}
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify after the post: exit %d\n%s%s", code, out, errOut)
			}
			if _, errOut, code := f.cli("", "task", "create", "N-1", "--title", "new"); code != 0 {
				t.Fatalf("task create: exit %d %s", code, errOut)
			}
			// Push sends the recorded identity, never the forged ref.
			if out, errOut, code := f.cli("", "push", "origin"); code != 0 {
				t.Fatalf("push over a forged identity: exit %d %s%s", code, out, errOut)
			}
			if got := refsOf(t, bare, refs.Prefix)[refs.Repository]; got != honest {
				t.Fatalf("the remote's %s is %q after the push, want the honest %s", refs.Repository, got, honest)
			}
			// The new task's chains are rooted in the honest identity: once
			// the ref is back, nothing is at fault.
			out, errOut, code = f.cli("", "init", "--writer", "test-writer", "--output-json")
			if code != 0 {
				t.Fatalf("init over a forged identity: exit %d\n%s%s", code, out, errOut)
			}
			var res struct {
				Restored bool   `json:"repository_restored"`
				Minted   bool   `json:"repository_minted"`
				ID       string `json:"repository_id"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.Restored || res.Minted {
				t.Fatalf("init after the post put the ref back: %+v %v\n%s", res, err, out)
			}
			if got := f.rev(refs.Repository); got != honest {
				t.Fatalf("init left %s at %s, want the honest %s", refs.Repository, got, honest)
			}
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify after init: exit %d\n%s%s", code, out, errOut)
			}
			if out, errOut, code := f.cli("", "task", "list", "--strict"); code != 0 || !strings.Contains(out, "N-1") {
				t.Fatalf("task list after init: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestRepositoryCreatedAgainIsNew: a repository deleted and created again
// at the same path is a new repository, though BERNSTEIN_HOME recorded the
// old one's identity for the path: init mints a new identity, and nothing
// reads as tampered, foreign or rolled back.
func TestRepositoryCreatedAgainIsNew(t *testing.T) {
	f, _ := unreadableTaskFixture(t)
	old := f.rev(refs.Repository)
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := f.cli("", "init", "--writer", "test-writer", "--output-json")
	if code != 0 {
		t.Fatalf("init of a repository created again: exit %d\n%s%s", code, out, errOut)
	}
	var res struct {
		Restored bool `json:"repository_restored"`
		Minted   bool `json:"repository_minted"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Restored || !res.Minted {
		t.Fatalf("init: %+v %v\n%s", res, err, out)
	}
	if now := f.rev(refs.Repository); now == old {
		t.Fatalf("the repository created again has the old identity record %s", now)
	}
	if _, errOut, code := f.cli("", "task", "create", "A-1", "--title", "again"); code != 0 {
		t.Fatalf("task create: exit %d %s", code, errOut)
	}
	for _, args := range [][]string{{"audit", "verify"}, {"task", "list", "--strict"}, {"task", "show", "A-1"}} {
		if out, errOut, code := f.cli("", args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

// TestPostRestoringIdentityKilledAtEveryStep: a post over a garbled
// refs/bernstein/repository, which moves it back with the rest of the
// post, killed right after each step of the write path (one more ref
// renamed than a post's three): the next post finishes or discards it,
// the ref is then at the recorded identity, nothing is left behind and
// nothing reads as tampered.
func TestPostRestoringIdentityKilledAtEveryStep(t *testing.T) {
	steps := append(append([]struct {
		step      string
		committed bool
	}(nil), writeSteps...), struct {
		step      string
		committed bool
	}{"renamed 3", true})
	for _, ws := range steps {
		t.Run(ws.step, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "I-1", "agent")
			f.post(s, "I-1", "k", "agent", tok, report("version one"))
			s.Close()
			honest := f.rev(refs.Repository)
			garbleLoose(f, refs.Repository)

			killPostThenPost(t, f, tok, ws.step, ws.committed)
			if got := f.rev(refs.Repository); got != honest {
				t.Fatalf("%s is at %s after the next write, want the honest %s", refs.Repository, got, honest)
			}
			f.fsck()
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}
