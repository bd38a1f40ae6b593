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

			// The writer posts and creates on top of the chains.
			if out, errOut, code := f.cli("", "artifact", "post", "A-1", "more", "--type", "report", "--body", "# more",
				"--agent", "agent", "--claim-token", tokA); code != 0 {
				t.Fatalf("post over a forged identity: exit %d %s%s", code, out, errOut)
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
			if err := json.Unmarshal([]byte(out), &res); err != nil || !res.Restored || res.Minted {
				t.Fatalf("init: %+v %v\n%s", res, err, out)
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
