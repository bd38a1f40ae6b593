package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// TestFetchNarrow: a fetch after the first reads the per-writer refs and
// the journals and ledgers of the tasks their new entries name, and no
// other task's ref: git's own packet trace shows the remote advertised
// none of them. A post arrives whole and verifies. A task ref moved on the
// remote by plain git, with no entry naming it, is not read by that path
// (it moves nothing here and is not reported); fetch --full reads every
// ref and holds it back as not verifying.
func TestFetchNarrow(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	tok := a.work("T-1", "notes", 1)
	a.work("T-2", "notes", 1)
	a.work("T-3", "notes", 1)
	a.ok("push")
	b, _ := cloneHost(t, url, root, "host-b")
	signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers
	bare := srv.dir("tasks.git")

	a.post("T-1", "notes", "agent-host-a", tok, 1)
	a.ok("push")
	j2 := refs.Journal("T-2")
	beforeJ2 := b.refs()[j2]
	beforeTracking := strings.TrimSpace(b.git("rev-parse", "refs/bernstein-remotes/origin/journal/T-2"))
	bad := appendUnsigned(t, bare, j2)

	trace := filepath.Join(root, "trace")
	t.Setenv("GIT_TRACE_PACKET", trace)
	out := b.ok("fetch", "--output-json")
	os.Unsetenv("GIT_TRACE_PACKET")
	var res bernstein.FetchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("fetch --output-json: %v\n%s", err, out)
	}
	if res.Path != "narrow" || res.TasksNamed != 1 {
		t.Fatalf("fetch took the %s path naming %d tasks, want narrow naming 1 (T-1)\n%s", res.Path, res.TasksNamed, out)
	}
	for _, ref := range []string{refs.Journal("T-1"), refs.Spine("host-a"), refs.Audit("host-a")} {
		if got, want := b.refs()[ref], a.refs()[ref]; got != want {
			t.Fatalf("after the narrow fetch host-b's %s is %s, host-a's %s", ref, got, want)
		}
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	tr := string(data)
	if !strings.Contains(tr, "ref-prefix refs/bernstein/journal/T-1\n") {
		t.Fatalf("the fetch did not ask for T-1's journal by its name:\n%s", tr)
	}
	for _, name := range []string{"journal/T-2", "ledger/T-2", "journal/T-3", "ledger/T-3", "ledger/T-1"} {
		if strings.Contains(tr, " refs/bernstein/"+name+"\n") {
			t.Fatalf("the remote advertised refs/bernstein/%s to a fetch of one post:\n%s", name, tr)
		}
	}
	if strings.Contains(tr, "ref-prefix refs/bernstein/\n") {
		t.Fatalf("the fetch asked for every ref:\n%s", tr)
	}
	if got := b.refs()[j2]; got != beforeJ2 {
		t.Fatalf("the narrow fetch moved T-2's journal to %s", got)
	}
	if got := strings.TrimSpace(b.git("rev-parse", "refs/bernstein-remotes/origin/journal/T-2")); got != beforeTracking {
		t.Fatalf("the narrow fetch read T-2's journal (its remote-tracking copy is %s)", got)
	}
	verifyPinned(t, b, signers)

	r := b.want(2, "fetch", "--full")
	mustHave(t, "fetch --full", r.out+r.err, "held back: task T-2 (journal)", "do not verify")
	if got := b.refs()[j2]; got != beforeJ2 {
		t.Fatalf("fetch --full moved T-2's journal to %s", got)
	}
	if got := strings.TrimSpace(b.git("rev-parse", "refs/bernstein-remotes/origin/journal/T-2")); got != bad {
		t.Fatalf("fetch --full left T-2's remote-tracking journal at %s, want the remote's %s", got, bad)
	}
	verifyPinned(t, b, signers)
}

// manyTasks creates n tasks in h's repository through the library (one
// ledger ref each), fast enough for the refs of a clone to pass
// PackedCreations.
func manyTasks(t *testing.T, h *host, n int) {
	t.Helper()
	s, err := bernstein.Open(bernstein.Options{Repo: h.dir, Home: h.home})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < n; i++ {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: fmt.Sprintf("M-%03d", i), Title: "many"}); err != nil {
			t.Fatal(err)
		}
	}
}

func looseBernsteinRefs(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(dir, ".git", "refs", "bernstein"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestClonePacked: bernstein clone writes the refs it creates into
// packed-refs in one rewrite, as git clone does: no loose ref under
// refs/bernstein/, git reads every one as the remote holds it, and the
// clone verifies with the writer pinned.
func TestClonePacked(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	a.work("T-1", "notes", 1)
	manyTasks(t, a, 80)
	a.ok("push")
	c := newHost(t, root, "host-c")
	if r := c.runIn(root, "clone", url, c.dir); r.code != 0 {
		t.Fatalf("clone: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if loose := looseBernsteinRefs(t, c.dir); len(loose) != 0 {
		t.Fatalf("the clone wrote %d loose refs, first %s", len(loose), loose[0])
	}
	sameRefs(t, "the clone's and the remote's refs", c.refs(), refsOf(t, srv.dir("tasks.git"), refs.Prefix))
	c.ok("keys", "pin", "host-a")
	if r := c.run("audit", "verify", "--strict"); r.code != 0 || !strings.Contains(r.out, "verified: everything holds") {
		t.Fatalf("the clone: audit verify --strict exited %d\n%s%s", r.code, r.out, r.err)
	}
}

// TestCloneInterrupted: a clone stopped before and after the commit point
// of its packed refs (as a crash would stop it) shows readers nothing or
// everything, never an alarm; the next fetch finishes it (the dead
// writer's packed-refs.lock removed, else git could not write packed-refs
// again), and the clone verifies.
func TestCloneInterrupted(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	a.work("T-1", "notes", 1)
	manyTasks(t, a, 80)
	a.ok("push")
	want := refsOf(t, srv.dir("tasks.git"), refs.Prefix)
	for _, step := range []string{"locked", "renamed 0"} {
		t.Run(step, func(t *testing.T) {
			c := newHost(t, root, "host-c-"+strings.ReplaceAll(step, " ", "-"))
			h := &faults{}
			h.set(func(s string) error {
				if s == step {
					return refs.ErrFault
				}
				return nil
			})
			_, err := bernstein.Clone(url, c.dir, bernstein.Options{Home: c.home, FaultHook: h.hook})
			if !errors.Is(err, refs.ErrFault) {
				t.Fatalf("clone stopped at %s: %v", step, err)
			}
			committed := step != "locked"
			got := c.refs()
			if committed && fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) || !committed && len(got) != 0 {
				t.Fatalf("after a clone stopped at %s git reads %d refs (committed: %v)", step, len(got), committed)
			}
			// Readers: nothing to verify yet, or everything verified.
			c.signers = filepath.Join(root, "signers-"+c.name)
			writeSigners(t, c.signers, a)
			r := c.run("audit", "verify")
			if r.code != 0 && r.code != 2 || strings.Contains(r.out+r.err, "TAMPERED") || committed != strings.Contains(r.out, "verified: everything holds") {
				t.Fatalf("audit verify of a clone stopped at %s exited %d:\n%s%s", step, r.code, r.out, r.err)
			}
			c.ok("fetch")
			if _, err := os.Stat(filepath.Join(c.dir, ".git", "packed-refs.lock")); err == nil {
				t.Fatal("packed-refs.lock left after the next fetch")
			}
			sameRefs(t, "the finished clone's refs", c.refs(), want)
			gitRun(t, c.dir, "pack-refs", "--all")
			if r := c.run("audit", "verify", "--strict"); r.code != 0 || !strings.Contains(r.out, "verified: everything holds") {
				t.Fatalf("the clone: audit verify --strict exited %d\n%s%s", r.code, r.out, r.err)
			}
		})
	}
}
