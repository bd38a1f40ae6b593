package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// A ref other than a task's whose loose file holds no object id (text
// written by hand over it; git reads no value there) blocks no reader and
// no writer: every read reads past it as it reads past a ref naming an
// object the repository does not have, audit verify names it and exits 1,
// and the writer whose own spine, audit mirror or archive it is goes on
// from the head it recorded last, replacing the file.

// garbleLoose writes text over ref's loose file and checks that git reads
// no value there.
func garbleLoose(f *fixture, ref string) {
	f.t.Helper()
	p := filepath.Join(f.dir, ".git", filepath.FromSlash(ref))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("garbage\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if got, err := exec.Command("git", "-C", f.dir, "rev-parse", "--verify", "--quiet", ref).Output(); err == nil {
		f.t.Fatalf("the garbled ref reads %q in git, want no value", got)
	}
}

func TestOwnChainLooseGarbageBlocksNoWriter(t *testing.T) {
	for _, kind := range []string{"spine", "audit"} {
		t.Run(kind, func(t *testing.T) {
			f, tokA := unreadableTaskFixture(t)
			if out, errOut, code := f.cli("", "audit", "verify", "--checkpoint", "cp"); code != 0 {
				t.Fatalf("audit verify before: exit %d\n%s%s", code, out, errOut)
			}
			ref := refs.Prefix + kind + "/test-writer"
			honest := f.rev(ref)
			garbleLoose(f, ref)

			// Readers read past it.
			for _, args := range [][]string{{"task", "list"}, {"task", "list", "--output-json"}, {"task", "show", "A-1"}, {"artifact", "list"}, {"keys", "list"}} {
				if out, errOut, code := f.cli("", args...); code != 0 || strings.Contains(errOut, "loose file holds no object id") && !strings.Contains(errOut, ref) {
					t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
				}
			}
			if kind == "spine" {
				// The versions it sealed are tampered, naming it.
				out, errOut, code := f.cli("", "artifact", "show", "A-1", "summary")
				if code != 2 || !strings.Contains(errOut, "no spine entry") || !strings.Contains(errOut, ref+" (at ") || !strings.Contains(errOut, "cannot be read as a spine") {
					t.Errorf("artifact show over a garbled spine: exit %d\n%s%s", code, out, errOut)
				}
			}
			// audit verify names it: tampered, exit 1, full and since.
			auditNames(t, f, ref, false)
			auditNames(t, f, ref, false, "--since", "cp")

			// The writer posts and creates on top of the head it recorded.
			if out, errOut, code := f.cli("", "artifact", "post", "A-1", "more", "--type", "report", "--body", "# more",
				"--agent", "agent", "--claim-token", tokA); code != 0 {
				t.Fatalf("post over a garbled %s: exit %d %s%s", ref, code, out, errOut)
			}
			if _, errOut, code := f.cli("", "task", "create", "N-1", "--title", "new"); code != 0 {
				t.Fatalf("task create: exit %d %s", code, errOut)
			}
			now := f.rev(ref)
			if now == honest || !f.isAncestor(honest, now) {
				t.Fatalf("%s is at %s after the writes, which does not extend the honest head %s", ref, now, honest)
			}
			if kind == "spine" {
				// One post, one spine entry: the new head's parent is the
				// honest head.
				if p := f.rev(ref + "^"); p != honest {
					t.Fatalf("the new spine head's parent is %s, want %s", p, honest)
				}
			}
			// No false alarm once it is written again.
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify after the writes: exit %d\n%s%s", code, out, errOut)
			}
			if out, errOut, code := f.cli("", "task", "list", "--strict"); code != 0 {
				t.Fatalf("task list --strict after the writes: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestOwnArchiveLooseGarbageBlocksNoArchive: the writer archives ended
// tasks over its own archive ref whose loose file holds no object id, on
// top of the archive commit it recorded last.
func TestOwnArchiveLooseGarbageBlocksNoArchive(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "E-1")
	endedTask(t, f, s, "F-1")
	s.Close()
	if _, errOut, code := f.cli("", "archive", "E-1"); code != 0 {
		t.Fatalf("archive E-1: exit %d %s", code, errOut)
	}
	ref := refs.Archive("test-writer")
	honest := f.rev(ref)
	garbleLoose(f, ref)
	out, errOut, code := f.cli("", "task", "list")
	if code != 0 || !strings.Contains(errOut, "warning: "+ref) || !strings.Contains(out, "F-1") {
		t.Fatalf("task list over a garbled archive: exit %d\n%s%s", code, out, errOut)
	}
	auditNames(t, f, ref, false)
	if _, errOut, code := f.cli("", "archive", "F-1"); code != 0 {
		t.Fatalf("archive F-1 over a garbled archive ref: exit %d %s", code, errOut)
	}
	if p := f.rev(ref + "^"); p != honest {
		t.Fatalf("the new archive commit's parent is %s, want %s", p, honest)
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify after the archive: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = f.cli("", "task", "list")
	if !strings.Contains(out, "E-1") || !strings.Contains(out, "F-1") {
		t.Fatalf("task list after the archive:\n%s", out)
	}
}

// TestPostOverGarbledSpineKilledAtEveryStep: a post over a garbled spine
// (its compare-and-swap base the file's bytes) killed after each step of
// its write path is finished or discarded by the next writer, which then
// posts, and nothing reads as tampered once it has.
func TestPostOverGarbledSpineKilledAtEveryStep(t *testing.T) {
	for _, ws := range writeSteps {
		t.Run(ws.step, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "I-1", "agent")
			f.post(s, "I-1", "k", "agent", tok, report("version one"))
			s.Close()
			ref := refs.Spine("test-writer")
			honest := f.rev(ref)
			garbleLoose(f, ref)

			killPostThenPost(t, f, tok, ws.step, ws.committed)
			want := map[bool]string{true: "2", false: "1"}[ws.committed]
			if got := f.git("rev-list", "--count", honest+".."+ref); strings.TrimSpace(got) != want {
				t.Fatalf("the spine has %s entries on top of the honest head, want %s", strings.TrimSpace(got), want)
			}
			f.fsck()
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestPushPastLooseGarbage: push sends the writer's own spine, whose loose
// file holds no object id, at the head the writer recorded last (the rows
// it seals go with it), and reads past a key ref and a checkpoint ref so
// garbled: not pushed, named (read_past), the rest pushed.
func TestPushPastLooseGarbage(t *testing.T) {
	f, tokA := unreadableTaskFixture(t)
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	f.git("remote", "add", "origin", bare)
	if out, errOut, code := f.cli("", "push", "origin"); code != 0 {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	if out, errOut, code := f.cli("", "artifact", "post", "A-1", "more", "--type", "report", "--body", "# more",
		"--agent", "agent", "--claim-token", tokA); code != 0 {
		t.Fatalf("post: exit %d %s%s", code, out, errOut)
	}
	spine := refs.Spine("test-writer")
	head := f.rev(spine)
	key := f.writerRef("test-writer")
	keyAt := refsOf(t, bare, refs.Prefix)[key]
	garbleLoose(f, spine)
	garbleLoose(f, key)
	out, errOut, code := f.cli("", "push", "origin", "--output-json")
	if code != 0 {
		t.Fatalf("push over garbled refs: exit %d\n%s%s", code, out, errOut)
	}
	var doc struct {
		ReadPast []struct{ Ref, Reason string } `json:"read_past"`
	}
	decodeJSON(t, out, &doc)
	if len(doc.ReadPast) != 1 || doc.ReadPast[0].Ref != key || !strings.Contains(doc.ReadPast[0].Reason, "loose file holds no object id") {
		t.Fatalf("push read past %+v, want %s alone", doc.ReadPast, key)
	}
	remote := refsOf(t, bare, refs.Prefix)
	if remote[spine] != head || remote[refs.Journal("A-1")] != f.rev(refs.Journal("A-1")) || remote[key] != keyAt {
		t.Fatalf("the remote after the push: %v (spine want %s)", remote, head)
	}
}

// TestOwnAnchorsLooseGarbageBlocksNoWriter: a checkpoint (and so a diff)
// over the writer's own anchors ref whose loose file holds no object id
// goes on from the anchor the writer recorded last, replacing the file,
// and push sends the recorded head.
func TestOwnAnchorsLooseGarbageBlocksNoWriter(t *testing.T) {
	f, commit := anchoredFixture(t)
	ref := refs.Anchors("test-writer")
	honest := f.rev(ref)
	garbleLoose(f, ref)
	auditNames(t, f, ref, true)
	second := commit("two")
	if out, errOut, code := f.cli("", "checkpoint", "A-1", "--commit", second); code != 0 {
		t.Fatalf("checkpoint over a garbled anchors ref: exit %d %s%s", code, out, errOut)
	}
	// One anchor on top of the honest one, keeping the new commit.
	if p := f.rev(ref + "^1"); p != honest {
		t.Fatalf("the new anchor's first parent is %s, want the honest head %s", p, honest)
	}
	if p := f.rev(ref + "^2"); p != second {
		t.Fatalf("the new anchor keeps %s, want %s", p, second)
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify after the write: exit %d\n%s%s", code, out, errOut)
	}
}

// TestAutoArchiveOverGarbledOwnSpine: push's automatic archive reads the
// writer's own spine whose loose file holds no object id from the head
// the writer recorded, as its writes do, and archives what ended long
// ago.
func TestAutoArchiveOverGarbledOwnSpine(t *testing.T) {
	f := newFixture(t)
	long := time.Now().Add(-30 * 24 * time.Hour)
	o := f.opts
	o.Now = func() time.Time { return long }
	s, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	endedTask(t, f, s, "OLD-1")
	s.Close()
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	f.git("remote", "add", "origin", bare)
	garbleLoose(f, refs.Spine("test-writer"))
	out, errOut, code := f.cli("", "push", "origin", "--output-json")
	if code != 0 || strings.Contains(errOut, "warning") {
		t.Fatalf("push over a garbled spine: exit %d\n%s%s", code, out, errOut)
	}
	var res bernstein.PushResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.AutoArchive == nil || len(res.AutoArchive.Archived) != 1 || res.AutoArchive.Archived[0] != "OLD-1" {
		t.Fatalf("the push archived %+v, want OLD-1", res.AutoArchive)
	}
	if _, err := f.gitErr("rev-parse", "--verify", "-q", refs.Journal("OLD-1")); err == nil {
		t.Fatalf("%s is still there after the archive", refs.Journal("OLD-1"))
	}
}

// killPostThenPost kills a poster of I-1/k at step (the post committed
// or not), then posts again in this process: the next post goes on from
// what the killed one left (version 2 or 3, its chain whole), and leaves
// no interrupted write behind.
func killPostThenPost(t *testing.T, f *fixture, tok, step string, committed bool) {
	t.Helper()
	cmd := f.poster("I-1", "k", "agent", tok, 1)
	cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_CRASH="+step)
	out, _ := cmd.Output()
	st, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !st.Signaled() || st.Signal() != syscall.SIGKILL {
		t.Fatalf("the poster was not killed at %q (exit %d): %s", step, cmd.ProcessState.ExitCode(), out)
	}
	want := int64(1)
	if committed {
		want = 2
	}
	o := f.opts
	o.LockWait = 200 * time.Millisecond
	s2, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	res, err := s2.Post(bernstein.PostRequest{Task: "I-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("after the crash")})
	if err != nil {
		t.Fatalf("post after a crash at %q: %v", step, err)
	}
	if res.Version != want+1 || res.JournalIndex != want {
		t.Fatalf("post after a crash at %q is v%d at index %d, want v%d at %d", step, res.Version, res.JournalIndex, want+1, want)
	}
	checkVersionChain(t, s2, "I-1", "k", int(want+1))
	s2.Close()
	if left := leftovers(f); len(left) > 0 {
		t.Fatalf("left behind after the next write: %v", left)
	}
}
