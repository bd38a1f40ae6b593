package bernstein_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The steps of a post's write path, in order, and whether a crash right
// after each leaves the post committed.
var writeSteps = []struct {
	step      string
	committed bool
}{
	{"intent written", false}, // in the staged keep, before any lock
	{"pack temps synced", false},
	{"locked", false}, // side by side with the pack's writes: ref locks held
	{"checked", false},
	{"pack .keep renamed", false},
	{"pack .pack renamed", false},
	{"pack .idx renamed", false},
	{"pack dir synced", false},
	{"packed", false},
	{"renamed 0", true}, // the spine: the commit point
	{"renamed 1", true},
	{"renamed 2", true}, // the journal, last
	{"dirs synced", true},
}

// TestPostKilledAtEveryStep kills a posting process (SIGKILL, no clean-up of
// any kind) right after each step of the write path. Every reader then sees
// the post whole or not at all and never "tampered"; the next writer
// finishes or discards it at once (no stale lock to wait out, no journal
// index used twice) and leaves nothing behind.
func TestPostKilledAtEveryStep(t *testing.T) {
	for _, ws := range writeSteps {
		t.Run(ws.step, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "I-1", "agent")
			f.post(s, "I-1", "k", "agent", tok, report("version one"))

			cmd := f.poster("I-1", "k", "agent", tok, 1)
			cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_CRASH="+ws.step)
			out, _ := cmd.Output()
			st, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !st.Signaled() || st.Signal() != syscall.SIGKILL {
				t.Fatalf("the poster was not killed at %q (exit %d): %s", ws.step, cmd.ProcessState.ExitCode(), out)
			}
			if strings.Contains(string(out), "ok ") {
				t.Fatalf("the killed poster acknowledged a post: %s", out)
			}
			want := int64(1)
			if ws.committed {
				want = 2
			}
			checkReaders(t, f, "I-1", "k", want)

			// The next writer, with a lock wait far below what a stale lock
			// would need, finishes or discards the interrupted post.
			o := f.opts
			o.LockWait = 200 * time.Millisecond
			s2, err := bernstein.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			res, err := s2.Post(bernstein.PostRequest{Task: "I-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("after the crash")})
			if err != nil {
				t.Fatalf("post after a crash at %q: %v", ws.step, err)
			}
			if res.Version != want+1 || res.JournalIndex != want {
				t.Fatalf("post after a crash at %q is v%d at index %d, want v%d at %d", ws.step, res.Version, res.JournalIndex, want+1, want)
			}
			checkVersionChain(t, s2, "I-1", "k", int(want+1))
			// A write removes its keep once it is acknowledged; closing the
			// store waits for that.
			s2.Close()
			if left := leftovers(f); len(left) > 0 {
				t.Fatalf("left behind after the next write: %v", left)
			}
			f.fsck()
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}

// checkReaders runs every reading command and checks they agree that key
// has versions 1..n, all verified.
func checkReaders(t *testing.T, f *fixture, task, key string, n int64) {
	t.Helper()
	out, errOut, code := f.cli("", "artifact", "list", task, "--output-json")
	if code != 0 {
		t.Fatalf("artifact list: exit %d\n%s%s", code, out, errOut)
	}
	var doc struct {
		Artifacts []verify.VersionState `json:"artifacts"`
	}
	decodeJSON(t, out, &doc)
	if int64(len(doc.Artifacts)) != n {
		t.Fatalf("artifact list shows %d versions, want %d:\n%s", len(doc.Artifacts), n, out)
	}
	for _, a := range doc.Artifacts {
		if a.State != verify.Verified {
			t.Fatalf("artifact list: %s v%d is %s: %s", a.Key, a.Version, a.State, a.Reason)
		}
	}
	out, errOut, code = f.cli("", "artifact", "show", task, key)
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("%s v%d ", key, n)) {
		t.Fatalf("artifact show: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code = f.cli("", "audit", "verify", "--output-json"); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code = f.cli("", "task", "progress", task); code != 0 {
		t.Fatalf("task progress: exit %d\n%s%s", code, out, errOut)
	}
}

// maintenance is git's maintenance that could lose objects no ref reaches yet.
var maintenance = [][]string{{"repack", "-a", "-d", "-q"}, {"repack", "-A", "-d", "-q"}, {"gc", "-q", "--prune=now"}, {"gc", "--aggressive", "-q", "--prune=now"}, {"maintenance", "run"}}

// TestRepackWhilePostWaits: a post has written and synced its pack, index
// and intent (staged, outside the pack directory) and waits for a ref lock
// while git's maintenance runs. Nothing of it is lost, the post lands, and
// plain git finds every object.
func TestRepackWhilePostWaits(t *testing.T) {
	for _, maint := range maintenance {
		t.Run(strings.Join(maint, " "), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "R-1", "agent")
			f.post(s, "R-1", "k", "agent", tok, report("version one"))
			// A plain lock file on the audit ref makes the post wait, as a
			// git process holding it would.
			lock := filepath.Join(f.dir, ".git", filepath.FromSlash(refs.Audit("test-writer"))) + ".lock"
			if err := os.WriteFile(lock, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			// A post in another process, which says when its pack and
			// index are written and synced (staged), then waits for the lock.
			var stderr bytes.Buffer
			cmd := f.poster("R-1", "k", "agent", tok, 1)
			cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_REACHED=pack temps synced")
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			rd := bufio.NewReader(out)
			if line, err := rd.ReadString('\n'); line != "reached pack temps synced\n" {
				t.Fatalf("the post staged no pack: %q %v\n%s", line, err, stderr.String())
			}
			if len(stagedIndexes(f)) == 0 {
				t.Fatal("no staged index while the post waits")
			}
			f.git(maint...)
			os.Remove(lock)
			rest, _ := io.ReadAll(rd)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("post: %v\n%s%s", err, rest, stderr.String())
			}
			if !strings.HasPrefix(string(rest), "ok 2 R-1 k ") {
				t.Fatalf("post said %q", rest)
			}
			f.fsck()
			checkReaders(t, f, "R-1", "k", 2)
			if left := leftovers(f); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

func stagedIndexes(f *fixture) []string {
	out, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "bernstein-tmp", "tmp_bernstein_idx_*"))
	return out
}

// TestRepackBetweenPackAndRefs is the lost-post scenario: a post's pack is
// in the pack directory and its refs have not moved yet (nothing reaches its
// objects) when git's maintenance runs. The pack's keep, in place before the
// pack, holds it; the post lands, and plain git finds every object.
func TestRepackBetweenPackAndRefs(t *testing.T) {
	for _, maint := range maintenance {
		t.Run(strings.Join(maint, " "), func(t *testing.T) {
			f := newFixture(t)
			h := &faults{}
			s := f.openFaults(h)
			tok := f.claimed(s, "R-2", "agent")
			f.post(s, "R-2", "k", "agent", tok, report("version one"))
			var ran atomic.Int32
			h.set(func(step string) error {
				if step != "packed" || ran.Add(1) != 1 {
					return nil
				}
				keeps, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "pack", "pack-*.keep"))
				if len(keeps) != 1 {
					t.Errorf("keep files while the refs wait: %v", keeps)
				}
				if out, err := f.gitErr(maint...); err != nil {
					t.Errorf("git %v: %v\n%s", maint, err, out)
				}
				return nil
			})
			_, err := s.Post(bernstein.PostRequest{Task: "R-2", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("version two")})
			h.set(nil)
			if err != nil {
				t.Fatalf("post: %v", err)
			}
			if ran.Load() == 0 {
				t.Fatal("the maintenance did not run between the pack and the refs")
			}
			f.fsck()
			checkReaders(t, f, "R-2", "k", 2)
			s.Close()
			if left := leftovers(f); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

// TestRolledBackJournalIsNotShown: a journal moved back behind its spine
// with plain git is detected by every reader, show included.
func TestRolledBackJournalIsNotShown(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "B-1", "agent")
	for i := 1; i <= 3; i++ {
		f.post(s, "B-1", "k", "agent", tok, report(fmt.Sprintf("version %d", i)))
	}
	journal := refs.Journal("B-1")
	f.git("update-ref", journal, journal+"~2")
	out, errOut, code := f.cli("", "artifact", "show", "B-1", "k")
	if code != 2 || strings.Contains(out, "version 1") || !strings.Contains(out+errOut, "does not hold") {
		t.Fatalf("show of a rolled-back journal: exit %d\n%s%s", code, out, errOut)
	}
	if first, _, _ := strings.Cut(out, "\n"); strings.HasSuffix(first, ": verified") || !strings.Contains(first, "withheld") {
		t.Fatalf("show of a rolled-back journal heads its withheld content with %q", first)
	}
	out, _, code = f.cli("", "artifact", "show", "B-1", "k", "--output-json")
	var doc map[string]any
	decodeJSON(t, out, &doc)
	if code != 2 || doc["payload"] != nil || !strings.Contains(fmt.Sprint(doc["content_withheld"]), "does not hold") {
		t.Fatalf("show --output-json of a rolled-back journal: exit %d\n%s", code, out)
	}
	if _, errOut, code := f.cli("", "artifact", "list", "B-1"); code != 2 || !strings.Contains(errOut, "does not hold") {
		t.Fatalf("list of a rolled-back journal: exit %d %s", code, errOut)
	}
	if _, _, code := f.cli("", "audit", "verify"); code != 1 {
		t.Fatalf("audit verify of a rolled-back journal: exit %d", code)
	}
}

// TestPostRetriesAfterPlainGitMovesARef: between a post's read of the
// journal and its compare-and-swap, another process (plain git, with the
// writer's key) moves the journal to an equivalent commit: the same row,
// signed again at another date. The swap fails, nothing moves, and the post
// is redone on the new head.
func TestPostRetriesAfterPlainGitMovesARef(t *testing.T) {
	f := newFixture(t)
	h := &faults{}
	s := f.openFaults(h)
	tok := f.claimed(s, "G-1", "agent")
	f.post(s, "G-1", "k", "agent", tok, report("version one"))
	id, err := keys.Load(f.home)
	if err != nil {
		t.Fatal(err)
	}
	journal := refs.Journal("G-1")
	var moved atomic.Int32
	var movedTo string
	h.set(func(step string) error {
		if step == "intent written" && moved.Add(1) == 1 {
			head := strings.TrimSpace(f.git("rev-parse", journal))
			raw := f.git("cat-file", "commit", head)
			c, _, err := gitstore.ParseCommit([]byte(raw))
			if err != nil {
				t.Errorf("parse head: %v", err)
				return nil
			}
			c.Committer = gitstore.Ident("test-writer", "test-writer@bernstein", 978307200) // 2001-01-01
			c.Signature = nil
			if c.Signature, err = id.SignCommit(gitstore.EncodeCommit(c)); err != nil {
				t.Errorf("sign: %v", err)
				return nil
			}
			out, err := execGitStdin(f.dir, gitstore.EncodeCommit(c), "hash-object", "-w", "-t", "commit", "--stdin").Output()
			if err != nil {
				t.Errorf("hash-object: %v", err)
				return nil
			}
			movedTo = strings.TrimSpace(string(out))
			f.git("update-ref", journal, movedTo, head)
		}
		return nil
	})
	res, err := s.Post(bernstein.PostRequest{Task: "G-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("version two")})
	h.set(nil)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	if moved.Load() < 2 {
		t.Fatalf("the post was not redone (%d attempts)", moved.Load())
	}
	if res.Version != 2 || res.JournalIndex != 1 {
		t.Fatalf("post is v%d at index %d", res.Version, res.JournalIndex)
	}
	if parent := strings.TrimSpace(f.git("rev-parse", journal+"~1")); parent != movedTo {
		t.Fatalf("the post was not built on the head git moved to: parent %s, want %s", parent, movedTo)
	}
	checkVersionChain(t, s, "G-1", "k", 2)
	f.fsck()
	s.Close()
	if left := leftovers(f); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestPackRefsDuringPostsKeepsExitCodesHonest: with `git pack-refs --all`
// running in a loop, every post either succeeds or fails having written
// nothing: the versions stored are exactly the posts acknowledged.
func TestPackRefsDuringPostsKeepsExitCodesHonest(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "P-1", "agent")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var packs atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if exec.Command("git", "-C", f.dir, "pack-refs", "--all").Run() == nil {
				packs.Add(1)
			}
		}
	}()
	var warnings atomic.Int64
	o := f.opts
	o.Warn = func(string) { warnings.Add(1) }
	o.LockWait = 10 * time.Second
	s2, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	// 120 posts, and on until pack-refs ran five times beside them.
	acked := 0
	for i := 0; (i < 120 || packs.Load() < 5) && i < 10000; i++ {
		_, err := s2.Post(bernstein.PostRequest{Task: "P-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report(fmt.Sprint("post ", i))})
		if err == nil {
			acked++
		}
	}
	close(stop)
	wg.Wait()
	if packs.Load() < 5 {
		t.Fatalf("only %d pack-refs runs overlapped", packs.Load())
	}
	if acked == 0 {
		t.Fatal("no post succeeded")
	}
	checkVersionChain(t, s, "P-1", "k", acked)
	t.Logf("%d posts acknowledged, %d pack-refs runs, %d warnings", acked, packs.Load(), warnings.Load())
}

// TestPostAddsOneRow: a post adds one row's objects, whatever the version:
// its commit, the three trees of artifacts/<key>/v<N>.json and the blob, and
// the commit's tree holds that one file (never the earlier versions: a tree
// that carried them forward would grow with every post). What a post adds
// in bytes at version 10 and at 1,000, and the ratio, is `make bench`'s
// (history); a Store's heap over 3,000 posts is its growth section's.
func TestPostAddsOneRow(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "S-1", "agent")
	journal := refs.Journal("S-1")
	for i := 1; i <= 30; i++ {
		f.post(s, "S-1", "k", "agent", tok, report(fmt.Sprintf("body %04d", i)))
		if files := strings.Fields(f.git("ls-tree", "-r", "--name-only", journal)); len(files) != 1 || files[0] != fmt.Sprintf("artifacts/k/v%d.json", i) {
			t.Fatalf("version %d: the row's tree holds %q", i, files)
		}
		kinds := map[string]int{}
		rng := journal // the first row: its commit is the journal's root
		if i > 1 {
			rng = journal + "~1.." + journal
		}
		for _, line := range strings.Split(strings.TrimSpace(f.git("rev-list", "--objects", rng)), "\n") {
			id, _, _ := strings.Cut(line, " ")
			kinds[strings.TrimSpace(f.git("cat-file", "-t", id))]++
		}
		if want := map[string]int{"commit": 1, "tree": 3, "blob": 1}; !reflect.DeepEqual(kinds, want) {
			t.Fatalf("version %d added %v, want %v", i, kinds, want)
		}
	}
}

// TestTruncatedSealedJournal: a completed task whose journal is moved back
// one commit behind its seal. Every row left is proven, but rows are lost:
// list and progress both say so, and neither exits 0.
func TestTruncatedSealedJournal(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	tok := f.claimed(s, "S-1", "agent")
	if _, err := s.Transition("S-1", record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	f.post(s, "S-1", "k", "agent", tok, report("one"))
	if _, err := s.Checkpoint("S-1", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition("S-1", record.KindTaskCompleted, "", ""); err != nil {
		t.Fatal(err)
	}
	before, _ := f.open().Progress("S-1")
	if before.Proof.State != "verified" || before.Checkpoints != 1 {
		t.Fatalf("before: %+v", before)
	}
	journal := refs.Journal("S-1")
	f.git("update-ref", journal, journal+"~1")
	p, err := f.open().Progress("S-1")
	if err != nil {
		t.Fatal(err)
	}
	// Two findings, each on its own: the journal no longer matches its seal,
	// and it no longer holds the head this host's writer wrote.
	var reasons []string
	for _, f := range p.Proof.RowsAtFault {
		reasons = append(reasons, f.Reason)
	}
	all := strings.Join(reasons, "\n")
	if p.Proof.State != "tampered" || len(reasons) != 2 || !strings.Contains(all, "journal has 1 rows, the seal says 2") || !strings.Contains(all, "rolled back:") {
		t.Fatalf("progress of a truncated sealed journal: %+v", p.Proof)
	}
	if out, _, code := f.cli("", "task", "progress", "S-1"); code != 2 || !strings.Contains(out, "journal identity mismatched") {
		t.Fatalf("task progress: exit %d\n%s", code, out)
	}
	if h, err := f.open().TaskHandle("S-1"); err != nil || h.Progress.Proof.State != "tampered" {
		t.Fatalf("task handle: %+v %v", h, err)
	}
	// The artifact row is still there, but the journal that holds it lost
	// rows: its latest version may not be the latest, so show withholds it.
	if out, errOut, code := f.cli("", "artifact", "show", "S-1", "k"); code != 2 || strings.Contains(out, "one") && !strings.Contains(out, "withheld") || !strings.Contains(out+errOut, "journal identity mismatched") {
		t.Fatalf("artifact show: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := f.cli("", "artifact", "list", "S-1"); code != 2 || !strings.Contains(errOut, "mismatched") {
		t.Fatalf("artifact list: exit %d %s", code, errOut)
	}
}
