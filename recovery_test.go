package bernstein_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/systrace"
	"github.com/bernstein/bernstein/refs"
)

// The recovery of an interrupted write is held to what the write itself is:
// whatever instant it is cut off at, readers see the write whole, and the
// next writer finishes it; its ref moves are durable before its intent goes;
// a problem after the commit point is a warning, never a failure.

// killedPoster runs one post in a child that kills itself at step, and
// checks that it died there.
func killedPoster(t *testing.T, f *fixture, task, key, tok, step string) {
	t.Helper()
	cmd := f.poster(task, key, "agent", tok, 1)
	cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_CRASH="+step)
	out, _ := cmd.Output()
	st, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !st.Signaled() || st.Signal() != syscall.SIGKILL {
		t.Fatalf("the poster was not killed at %q (exit %d): %s", step, cmd.ProcessState.ExitCode(), out)
	}
	if strings.Contains(string(out), "ok ") {
		t.Fatalf("the killed poster acknowledged a post: %s", out)
	}
}

// pendingKeeps lists the intents left in the pack directory.
func pendingKeeps(t *testing.T, f *fixture) []refs.Pending {
	t.Helper()
	p, err := refs.PendingIntents(filepath.Join(f.dir, ".git", "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRecoveryKilledAtEveryStep: a post killed past its commit point (the
// spine moved, the audit mirror and the journal not), then the writer that
// finishes it killed at each step of that recovery, then a third writer.
// After each kill every reader sees the post whole; the third writer
// finishes what is left, and nothing is lost, duplicated or left behind.
func TestRecoveryKilledAtEveryStep(t *testing.T) {
	steps := []string{
		"recovering " + refs.Audit("test-writer"),
		"recovering " + refs.Journal("RK-1"),
		"renamed 0", // the recovery's first move: the audit mirror
		"renamed 1", // the journal
		"dirs synced",
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "RK-1", "agent")
			f.post(s, "RK-1", "k", "agent", tok, report("version one"))
			s.Close()

			killedPoster(t, f, "RK-1", "k", tok, "renamed 0")
			if len(pendingKeeps(t, f)) != 1 {
				t.Fatal("the interrupted post left no intent")
			}
			checkReaders(t, f, "RK-1", "k", 2)

			// The next writer dies while it finishes the interrupted post.
			killedPoster(t, f, "RK-1", "k", tok, step)
			if len(pendingKeeps(t, f)) != 1 {
				t.Fatalf("the intent was retired by a recovery killed at %q", step)
			}
			checkReaders(t, f, "RK-1", "k", 2)

			o := f.opts
			o.LockWait = 200 * time.Millisecond
			s3, err := bernstein.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s3.Post(bernstein.PostRequest{Task: "RK-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("after two crashes")})
			if err != nil {
				t.Fatalf("post after a recovery killed at %q: %v", step, err)
			}
			if res.Version != 3 || res.JournalIndex != 2 {
				t.Fatalf("post after a recovery killed at %q is v%d at index %d, want v3 at 2", step, res.Version, res.JournalIndex)
			}
			checkVersionChain(t, s3, "RK-1", "k", 3)
			s3.Close()
			if left := leftovers(f); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
			f.fsck()
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestRecoveryIsDurableInOrder traces the writer that finishes a post
// killed past its commit point: each ref it moves has its lock synced
// before the rename, the ref directories are synced after the renames (also
// when every ref had moved and only the syncs were missing), and the intent
// (the keep file) goes only after that. A recovery that dropped its intent
// before its moves were durable could be undone by a power loss with
// nothing left to finish it.
func TestRecoveryIsDurableInOrder(t *testing.T) {
	for _, tc := range []struct {
		killedAt string
		moves    []string // the refs the recovery must move
	}{
		{"renamed 0", []string{refs.Audit("test-writer"), refs.Journal("RD-1")}},
		{"renamed 2", nil}, // every ref moved, their directories not synced
	} {
		t.Run(tc.killedAt, func(t *testing.T) {
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "RD-1", "agent")
			f.post(s, "RD-1", "k", "agent", tok, report("version one"))
			s.Close()
			killedPoster(t, f, "RD-1", "k", tok, tc.killedAt)
			pending := pendingKeeps(t, f)
			if len(pending) != 1 {
				t.Fatalf("intents left: %v", pending)
			}
			keep := pending[0].Keep

			evs, out := systrace.Child(t, "BERNSTEIN_TEST_POSTER=1",
				"BERNSTEIN_REPO="+f.dir, "BERNSTEIN_HOME="+f.home,
				"BERNSTEIN_TEST_TASK=RD-1", "BERNSTEIN_TEST_KEY=k",
				"BERNSTEIN_AGENT=agent", "BERNSTEIN_CLAIM_TOKEN="+tok, "BERNSTEIN_TEST_POSTS=1")
			if !strings.Contains(out, "ok 3 RD-1 k ") {
				t.Fatalf("the traced post did not succeed: %s", out)
			}
			checkReaders(t, f, "RD-1", "k", 3)

			gitDir := filepath.Join(f.dir, ".git")
			find := func(call, path string, from int) int { return systrace.Find(evs, call, path, from) }
			unlink := find("unlink", keep, 0)
			if unlink < 0 {
				t.Fatalf("the interrupted write's keep %s was not removed", keep)
			}
			last := -1
			for _, ref := range tc.moves {
				path := filepath.Join(gitDir, filepath.FromSlash(ref))
				ri := find("rename", path, 0)
				if ri < 0 || evs[ri].From != path+".lock" || ri > unlink {
					t.Fatalf("the recovery did not move %s from its lock before it retired the intent (rename at %d, unlink at %d)", ref, ri, unlink)
				}
				if si := find("fsync", path+".lock", 0); si < 0 || si > ri {
					t.Fatalf("%s.lock not synced before the recovery renamed it (sync at %d, rename at %d)", ref, si, ri)
				}
				last = max(last, ri)
			}
			for _, ref := range []string{refs.Spine("test-writer"), refs.Audit("test-writer"), refs.Journal("RD-1")} {
				dir := filepath.Dir(filepath.Join(gitDir, filepath.FromSlash(ref)))
				if si := find("fsync", dir, last+1); si < 0 || si > unlink {
					t.Fatalf("%s not synced between the recovery's renames (%d) and the intent's removal (%d): at %d", dir, last, unlink, si)
				}
			}
		})
	}
}

// TestErrorAfterCommitPointIsAWarning: a write whose refs began to move is
// committed; a failure after that (here a rename that fails, as an I/O
// error or a file system filling up would make it) is reported as a
// warning and the post as posted. Reporting it as a failure would tell a
// client that nothing was written, and its retry would post twice.
func TestErrorAfterCommitPointIsAWarning(t *testing.T) {
	for _, step := range []string{"renamed 0", "renamed 1", "dirs synced"} {
		t.Run(step, func(t *testing.T) {
			f := newFixture(t)
			var mu sync.Mutex
			var warned []string
			o := f.opts
			o.Warn = func(m string) { mu.Lock(); warned = append(warned, m); mu.Unlock() }
			h := &faults{}
			o.FaultHook = h.hook
			s, err := bernstein.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tok := f.claimed(s, "EC-1", "agent")
			f.post(s, "EC-1", "k", "agent", tok, report("version one"))
			hit := false
			h.set(func(st string) error {
				if st == step && !hit {
					hit = true
					return errors.New("input/output error")
				}
				return nil
			})
			res, err := s.Post(bernstein.PostRequest{Task: "EC-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("version two")})
			h.set(nil)
			if !hit {
				t.Fatalf("the write never reached %q", step)
			}
			if err != nil {
				t.Fatalf("a post past its commit point reported failure: %v", err)
			}
			if res.Version != 2 {
				t.Fatalf("post is v%d, want v2", res.Version)
			}
			mu.Lock()
			w := strings.Join(warned, "\n")
			mu.Unlock()
			if !strings.Contains(w, "committed") || !strings.Contains(w, "input/output error") {
				t.Fatalf("no warning names the problem after the commit point: %q", w)
			}
			// The next write finishes it; no version is written twice.
			f.post(s, "EC-1", "k", "agent", tok, report("version three"))
			checkVersionChain(t, s, "EC-1", "k", 3)
			s.Close()
			if left := leftovers(f); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
			f.fsck()
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// TestRecoveryConflictIsAWarning: a post killed past its commit point, and
// then one of the refs it meant to move moved by someone else with plain
// git. Finishing the move would undo theirs, so the next writer leaves that
// ref, finishes the rest, retires the intent and says so; later writes go
// on. Treating the conflict as fatal would make every later write fail.
func TestRecoveryConflictIsAWarning(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "RC-1", "agent")
	tok2 := f.claimed(s, "RC-2", "agent")
	f.post(s, "RC-1", "k", "agent", tok, report("version one"))
	s.Close()
	killedPoster(t, f, "RC-1", "k", tok, "renamed 0")
	journal := refs.Journal("RC-1")
	moved := strings.TrimSpace(f.git("commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-m", "someone else's"))
	// git refuses while the dead writer's lock is there, and says to remove
	// it by hand; they do, then move the ref.
	os.Remove(filepath.Join(f.dir, ".git", filepath.FromSlash(journal)) + ".lock")
	f.git("update-ref", journal, moved)

	var mu sync.Mutex
	var warned []string
	o := f.opts
	o.LockWait = 200 * time.Millisecond
	o.Warn = func(m string) { mu.Lock(); warned = append(warned, m); mu.Unlock() }
	s2, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for i := 0; i < 2; i++ {
		if _, err := s2.Post(bernstein.PostRequest{Task: "RC-2", Key: "k", Agent: "agent", ClaimToken: tok2, Payload: report("on another task")}); err != nil {
			t.Fatalf("post %d after a recovery conflict: %v", i+1, err)
		}
	}
	mu.Lock()
	w := strings.Join(warned, "\n")
	mu.Unlock()
	if !strings.Contains(w, "could not be finished") || !strings.Contains(w, journal) {
		t.Fatalf("the conflict was not reported: %q", w)
	}
	if got := strings.TrimSpace(f.git("rev-parse", journal)); got != moved {
		t.Fatalf("the recovery moved %s over someone else's move: %s, want %s", journal, got, moved)
	}
	if p := pendingKeeps(t, f); len(p) != 0 {
		t.Fatalf("the intent was not retired: %v", p)
	}
	checkVersionChain(t, s2, "RC-2", "k", 2)
}

// TestPowerLossBeforeTheIntentReachedTheDisk: the intent is staged and the
// ref locks are synced side by side, so a power loss can leave synced locks
// beside a staged keep that never got its content. No intent names those
// locks, but they were made before the system booted again, so no living
// process holds them: the next writer waits for them as for anyone's, then
// removes them, says so, and posts.
func TestPowerLossBeforeTheIntentReachedTheDisk(t *testing.T) {
	boot := readBootTime(t)
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "PL-1", "agent")
	f.post(s, "PL-1", "k", "agent", tok, report("version one"))
	s.Close()

	gitDir := filepath.Join(f.dir, ".git")
	tmpDir := filepath.Join(gitDir, "objects", "bernstein-tmp")
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmpDir, "tmp_bernstein_keep_1234"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := boot.Add(-time.Hour)
	dead := "2b947f70562014e170d92bbe668e1631c5d721c3\n" // a commit that never reached the disk
	for _, ref := range []string{refs.Spine("test-writer"), refs.Audit("test-writer"), refs.Journal("PL-1")} {
		lock := filepath.Join(gitDir, filepath.FromSlash(ref)) + ".lock"
		if err := os.WriteFile(lock, []byte(dead), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(lock, before, before); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var warned []string
	o := f.opts
	o.LockWait = 100 * time.Millisecond
	o.Warn = func(m string) { mu.Lock(); warned = append(warned, m); mu.Unlock() }
	s2, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	res, err := s2.Post(bernstein.PostRequest{Task: "PL-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("after the power came back")})
	if err != nil {
		t.Fatalf("post after a power loss: %v", err)
	}
	if res.Version != 2 {
		t.Fatalf("post is v%d, want v2", res.Version)
	}
	mu.Lock()
	n := strings.Count(strings.Join(warned, "\n"), "booted")
	mu.Unlock()
	if n != 3 {
		t.Fatalf("%d removals of stale locks reported, want 3: %q", n, warned)
	}
	s2.Close()
	if left := leftovers(f); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	checkReaders(t, f, "PL-1", "k", 2)
}

// readBootTime reads when the system last booted, or skips the test.
func readBootTime(t *testing.T) time.Time {
	t.Helper()
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Skip("no /proc/stat")
	}
	for _, line := range strings.Split(string(data), "\n") {
		var sec int64
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			if _, err := fmt.Sscan(rest, &sec); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	t.Skip("no boot time in /proc/stat")
	return time.Time{}
}
