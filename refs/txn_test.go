package refs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/systrace"
)

const childEnv = "REFS_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// runChild applies one transaction described by spec
// ("<gitdir> <ref> <old> <new> ..."), for the strace test.
func runChild(spec string) int {
	f := strings.Fields(spec)
	packed := f[0] == "packed"
	if packed {
		f = f[1:]
	}
	tx := &Transactor{GitDir: f[0]}
	var us []Update
	for i := 1; i+2 < len(f); i += 3 {
		old, _ := gitstore.ParseOid(f[i+1])
		nw, _ := gitstore.ParseOid(f[i+2])
		us = append(us, Update{Ref: f[i], Old: old, New: nw})
	}
	apply := tx.Apply
	if packed {
		apply = tx.CreatePacked
	}
	if out, err := apply(us); out != Committed || err != nil {
		fmt.Fprintln(os.Stderr, out, err)
		return 1
	}
	return 0
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a bare repository and n distinct commits in it.
func newRepo(t testing.TB, n int) (string, []gitstore.Oid) {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q", "--bare")
	var out []gitstore.Oid
	for i := 0; i < n; i++ {
		id := git(t, dir, "commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-m", fmt.Sprintf("c%d", i))
		o, err := gitstore.ParseOid(id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return dir, out
}

func rev(t testing.TB, dir, ref string) string {
	t.Helper()
	cmd := exec.Command("git", "-C", dir, "rev-parse", "--verify", "--quiet", ref)
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out))
}

func allRefs(t testing.TB, dir string) string {
	return git(t, dir, "for-each-ref", "--format=%(refname) %(objectname)")
}

func lockFiles(t testing.TB, dir string) []string {
	var out []string
	filepath.WalkDir(filepath.Join(dir, "refs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".lock") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

var (
	refJ = JournalPrefix + "T-1"
	refS = SpinePrefix + "w"
	refA = AuditPrefix + "w"
)

func TestApplyMovesEveryRef(t *testing.T) {
	dir, c := newRepo(t, 4)
	tx := &Transactor{GitDir: dir}
	out, err := tx.Apply([]Update{{refJ, gitstore.ZeroOid, c[0]}, {refS, gitstore.ZeroOid, c[1]}, {refA, gitstore.ZeroOid, c[2]}})
	if out != Committed || err != nil {
		t.Fatalf("apply: %v %v", out, err)
	}
	for ref, want := range map[string]gitstore.Oid{refJ: c[0], refS: c[1], refA: c[2]} {
		if got := rev(t, dir, ref); got != want.String() {
			t.Fatalf("git reads %s as %q, want %s", ref, got, want)
		}
	}
	if l := lockFiles(t, dir); len(l) != 0 {
		t.Fatalf("locks left: %v", l)
	}
	// And from there on, old values are checked.
	out, err = tx.Apply([]Update{{refJ, c[0], c[3]}, {refS, c[1], c[0]}})
	if out != Committed || err != nil {
		t.Fatalf("second apply: %v %v", out, err)
	}
	if rev(t, dir, refJ) != c[3].String() || rev(t, dir, refS) != c[0].String() {
		t.Fatal("second apply did not move the refs")
	}
}

// A stale old value on any ref fails the whole transaction: nothing moves,
// no lock is left, and the error is ErrConflict.
func TestApplyStaleOldMovesNothing(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed=%v", packed), func(t *testing.T) {
			dir, c := newRepo(t, 5)
			for i, ref := range []string{refJ, refS, refA} {
				git(t, dir, "update-ref", ref, c[i].String())
			}
			if packed {
				git(t, dir, "pack-refs", "--all")
				if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(refJ))); err == nil {
					t.Fatal("pack-refs left the loose ref")
				}
			}
			before := allRefs(t, dir)
			tx := &Transactor{GitDir: dir}
			// The journal's old value is stale (c[4] instead of c[0]); the
			// others are right and would move.
			out, err := tx.Apply([]Update{{refJ, c[4], c[3]}, {refS, c[1], c[3]}, {refA, c[2], c[3]}})
			if out != NotCommitted || !errors.Is(err, ErrConflict) {
				t.Fatalf("apply with a stale old value: %v %v", out, err)
			}
			if after := allRefs(t, dir); after != before {
				t.Fatalf("refs moved:\n%s\nwas\n%s", after, before)
			}
			if l := lockFiles(t, dir); len(l) != 0 {
				t.Fatalf("locks left: %v", l)
			}
			// A ref that must not exist but does is a conflict too.
			out, err = tx.Apply([]Update{{refS, c[1], c[3]}, {refJ, gitstore.ZeroOid, c[3]}})
			if out != NotCommitted || !errors.Is(err, ErrConflict) || allRefs(t, dir) != before {
				t.Fatalf("create over an existing ref: %v %v", out, err)
			}
			// The right old values move every ref, packed or loose.
			out, err = tx.Apply([]Update{{refJ, c[0], c[3]}, {refS, c[1], c[3]}, {refA, c[2], c[3]}})
			if out != Committed || err != nil {
				t.Fatalf("apply: %v %v", out, err)
			}
			for _, ref := range []string{refJ, refS, refA} {
				if rev(t, dir, ref) != c[3].String() {
					t.Fatalf("%s did not move", ref)
				}
			}
		})
	}
}

// A lock held by git is respected: the transaction waits, then fails with
// ErrLocked naming the lock, and moves nothing; released in time, it goes on.
func TestApplyRespectsGitLocks(t *testing.T) {
	dir, c := newRepo(t, 3)
	git(t, dir, "update-ref", refA, c[0].String())
	lock := filepath.Join(dir, filepath.FromSlash(refA)) + ".lock"
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// git itself sees the ref as locked.
	if out, err := exec.Command("git", "-C", dir, "update-ref", refA, c[1].String()).CombinedOutput(); err == nil {
		t.Fatalf("git moved a locked ref: %s", out)
	}
	tx := &Transactor{GitDir: dir, LockWait: 150 * time.Millisecond}
	before := allRefs(t, dir)
	out, err := tx.Apply([]Update{{refJ, gitstore.ZeroOid, c[1]}, {refA, c[0], c[1]}})
	if out != NotCommitted || !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), lock) {
		t.Fatalf("apply on a locked ref: %v %v", out, err)
	}
	if allRefs(t, dir) != before {
		t.Fatal("refs moved though one was locked")
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("the foreign lock was removed: %v", err)
	}
	if l := lockFiles(t, dir); len(l) != 1 {
		t.Fatalf("locks: %v", l)
	}
	// The lock goes while the transaction waits for it.
	tx.FaultHook = func(step string) error {
		if step == "waiting for "+refA {
			os.Remove(lock)
		}
		return nil
	}
	tx.LockWait = 5 * time.Second
	out, err = tx.Apply([]Update{{refJ, gitstore.ZeroOid, c[1]}, {refA, c[0], c[1]}})
	if out != Committed || err != nil || rev(t, dir, refA) != c[1].String() {
		t.Fatalf("apply after the lock went: %v %v", out, err)
	}
}

// Our locks are git's locks: while a transaction holds them, git cannot move
// the ref; and git racing us on one ref with compare-and-swap lets exactly
// one of the two win.
func TestApplyInteropWithGit(t *testing.T) {
	dir, c := newRepo(t, 64)
	git(t, dir, "update-ref", refJ, c[0].String())
	tx := &Transactor{GitDir: dir, LockWait: 10 * time.Second}
	tx.FaultHook = func(step string) error {
		if step == "checked" {
			cmd := exec.Command("git", "-C", dir, "update-ref", refJ, c[5].String())
			if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), ".lock") {
				t.Errorf("git moved a ref bernstein held locked: %v %s", err, out)
			}
		}
		return nil
	}
	out, err := tx.Apply([]Update{{refJ, c[0], c[1]}})
	tx.FaultHook = nil
	if out != Committed || err != nil || rev(t, dir, refJ) != c[1].String() {
		t.Fatalf("apply: %v %v", out, err)
	}

	// Race: each round, git and bernstein both try to move the ref from the
	// same old value; one wins, the other fails, never both.
	cur := c[1]
	for round := 0; round < 20; round++ {
		mine, theirs := c[2+2*round], c[3+2*round]
		var wg sync.WaitGroup
		var gitErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			gitErr = exec.Command("git", "-C", dir, "update-ref", refJ, theirs.String(), cur.String()).Run()
		}()
		out, err := tx.Apply([]Update{{refJ, cur, mine}})
		wg.Wait()
		got := rev(t, dir, refJ)
		switch {
		case out == Committed && err == nil && gitErr != nil && got == mine.String():
			cur = mine
		case out == NotCommitted && (errors.Is(err, ErrConflict) || errors.Is(err, ErrLocked)) && gitErr == nil && got == theirs.String():
			cur = theirs
		default:
			t.Fatalf("round %d: bernstein %v %v, git %v, ref at %s (mine %s, theirs %s)", round, out, err, gitErr, got, mine, theirs)
		}
	}
}

// Concurrent `git pack-refs --all` and `git update-ref` of neighbours never
// make a transaction lose a ref, read a wrong old value, or fail after its
// refs moved.
func TestApplyUnderPackRefs(t *testing.T) {
	dir, c := newRepo(t, 2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var gitRuns atomic.Int64
	for _, args := range [][]string{{"pack-refs", "--all", "--prune"}, {"update-ref", SpinePrefix + "neighbour", c[1].String()}} {
		wg.Add(1)
		go func(args []string) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				exec.Command("git", append([]string{"-C", dir}, args...)...).Run()
				gitRuns.Add(1)
			}
		}(args)
	}
	// Distinct commits to move through (ids only: nothing written that
	// git's object writes could race): 150 transactions, and on until git
	// ran ten times beside them.
	tx := &Transactor{GitDir: dir, LockWait: 10 * time.Second}
	old := gitstore.ZeroOid
	for i := 0; (i < 150 || gitRuns.Load() < 10) && i < 100000; i++ {
		id := gitstore.HashObject(gitstore.TypeCommit, []byte(fmt.Sprintf("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\n%d\n", i)))
		var out Outcome
		var err error
		for attempt := 0; attempt < 50; attempt++ {
			out, err = tx.Apply([]Update{{refJ, old, id}, {refS, old, id}, {refA, old, id}})
			if !errors.Is(err, ErrLocked) {
				break
			}
		}
		if out != Committed || err != nil {
			t.Fatalf("transaction %d: %v %v", i, out, err)
		}
		for _, ref := range []string{refJ, refS, refA} {
			if got, err := (Reader{Dir: dir}).Read(ref); err != nil || got != id {
				t.Fatalf("transaction %d: %s reads %s, %v", i, ref, got, err)
			}
		}
		old = id
	}
	close(stop)
	wg.Wait()
	if gitRuns.Load() < 10 {
		t.Fatalf("only %d git runs overlapped", gitRuns.Load())
	}
}

// A reader's snapshot never mixes two transactions: every transaction sets
// all three refs to the same value, and no snapshot sees them differ.
func TestSnapshotNeverSeesHalfATransaction(t *testing.T) {
	dir, _ := newRepo(t, 0)
	var ids []gitstore.Oid
	for i := 0; i < 150; i++ {
		ids = append(ids, gitstore.HashObject(gitstore.TypeBlob, []byte(fmt.Sprint(i))))
	}
	tx := &Transactor{GitDir: dir}
	done := make(chan struct{})
	var reads, mixed atomic.Int64
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				s, err := Reader{Dir: dir}.Snapshot(Prefix)
				if err != nil {
					t.Error(err)
					return
				}
				j, _ := s.ReadOptional(refJ)
				sp, _ := s.ReadOptional(refS)
				a, _ := s.ReadOptional(refA)
				if j != sp || sp != a {
					mixed.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	old := gitstore.ZeroOid
	for _, id := range ids {
		if out, err := tx.Apply([]Update{{refJ, old, id}, {refS, old, id}, {refA, old, id}}); out != Committed || err != nil {
			t.Fatal(out, err)
		}
		old = id
	}
	close(done)
	wg.Wait()
	if mixed.Load() != 0 {
		t.Fatalf("%d of %d snapshots saw a transaction half renamed", mixed.Load(), reads.Load())
	}
	if reads.Load() < 50 {
		t.Fatalf("only %d snapshots", reads.Load())
	}
}

// Fault injection at every step: a transaction stopped there (as a killed
// process would stop) reads, to a snapshot, as all or nothing; Recover then
// makes the disk say the same, and leaves no lock behind.
func TestInterruptedTransactionRecovers(t *testing.T) {
	steps := []string{"locked", "checked", "renamed 0", "renamed 1", "renamed 2", "dirs synced"}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			dir, c := newRepo(t, 6)
			for i, ref := range []string{refJ, refS, refA} {
				git(t, dir, "update-ref", ref, c[i].String())
			}
			us := []Update{{refJ, c[0], c[3]}, {refS, c[1], c[4]}, {refA, c[2], c[5]}}
			committed := strings.HasPrefix(step, "renamed") || step == "dirs synced"
			// The intent is durable before the transaction starts.
			packDir := filepath.Join(dir, "objects", "pack")
			keep := filepath.Join(packDir, "pack-0123.keep")
			if err := os.WriteFile(keep, []byte(Intent{Updates: us}.Encode()), 0o644); err != nil {
				t.Fatal(err)
			}
			stop := func(s string) error {
				if s == step {
					return ErrFault
				}
				return nil
			}
			out, err := (&Transactor{GitDir: dir, FaultHook: stop}).Apply(us)
			if !errors.Is(err, ErrFault) || (out != NotCommitted) == (step == "locked" || step == "checked") {
				t.Fatalf("apply stopped at %s: %v %v", step, out, err)
			}
			want := map[string]gitstore.Oid{refJ: c[0], refS: c[1], refA: c[2]}
			if committed {
				want = map[string]gitstore.Oid{refJ: c[3], refS: c[4], refA: c[5]}
			}
			// Readers see the transaction whole or not at all.
			snap, err := Reader{Dir: dir}.Snapshot(Prefix)
			if err != nil {
				t.Fatal(err)
			}
			for ref, w := range want {
				if got, _ := snap.ReadOptional(ref); got != w {
					t.Fatalf("snapshot reads %s as %s, want %s", ref, got, w)
				}
			}
			// The next writer finishes it.
			pending, err := PendingIntents(packDir)
			if err != nil || len(pending) != 1 {
				t.Fatalf("pending intents: %v %v", pending, err)
			}
			tx := &Transactor{GitDir: dir, LockWait: 100 * time.Millisecond}
			got, err := tx.Recover(pending[0])
			if err != nil || got != committed {
				t.Fatalf("recover: committed %v, %v", got, err)
			}
			for ref, w := range want {
				if r := rev(t, dir, ref); r != w.String() {
					t.Fatalf("after recovery git reads %s as %s, want %s", ref, r, w)
				}
			}
			if l := lockFiles(t, dir); len(l) != 0 {
				t.Fatalf("locks left after recovery: %v", l)
			}
			// A lock from the dead writer cut short (empty) is recognised
			// too; a lock of git's with another value is not.
			os.Remove(keep)
			dead := filepath.Join(dir, filepath.FromSlash(refJ)) + ".lock"
			os.WriteFile(dead, nil, 0o644)
			then := time.Now().Add(-2 * deadLockAge)
			os.Chtimes(dead, then, then)
			tx.Recover(Pending{Keep: keep, Intent: Intent{Updates: []Update{{refJ, want[refJ], c[1]}}}})
			if l := lockFiles(t, dir); len(l) != 0 {
				t.Fatalf("an empty lock of the dead writer was left: %v", l)
			}
			foreign := filepath.Join(dir, filepath.FromSlash(refS)) + ".lock"
			os.WriteFile(foreign, []byte(c[0].String()+"\n"), 0o644)
			tx.Recover(Pending{Keep: keep, Intent: Intent{Updates: []Update{{refS, c[2], c[1]}}}})
			if _, err := os.Stat(foreign); err != nil {
				t.Fatal("recovery removed a lock that was not the dead writer's")
			}
		})
	}
}

// A committed transaction whose lock files were lost (a power loss before
// their directory was synced) is finished from the intent alone.
func TestRecoverWithoutLockFiles(t *testing.T) {
	dir, c := newRepo(t, 4)
	git(t, dir, "update-ref", refJ, c[0].String())
	git(t, dir, "update-ref", refS, c[1].String())
	// The spine moved; the journal's lock vanished with the power.
	git(t, dir, "update-ref", refS, c[3].String())
	in := Intent{Updates: []Update{{refJ, c[0], c[2]}, {refS, c[1], c[3]}}}
	ok, err := (&Transactor{GitDir: dir}).Recover(Pending{Intent: in})
	if !ok || err != nil {
		t.Fatalf("recover: %v %v", ok, err)
	}
	if rev(t, dir, refJ) != c[2].String() {
		t.Fatal("the journal was not moved forward")
	}
	// A ref someone moved elsewhere meanwhile is left alone, and said so.
	git(t, dir, "update-ref", refJ, c[1].String())
	in = Intent{Updates: []Update{{refJ, c[2], c[0]}, {refS, c[3], c[1]}}}
	git(t, dir, "update-ref", refS, c[1].String())
	ok, err = (&Transactor{GitDir: dir}).Recover(Pending{Intent: in})
	if !ok || !errors.Is(err, ErrConflict) || rev(t, dir, refJ) != c[1].String() {
		t.Fatalf("recover over a moved ref: %v %v", ok, err)
	}
}

// The ref writes are durable in git's order: each lock file is synced
// before it is renamed onto its ref, and every ref's directory is synced
// after the renames.
func TestApplyIsDurable(t *testing.T) {
	dir, c := newRepo(t, 3)
	git(t, dir, "update-ref", refS, c[0].String())
	spec := fmt.Sprintf("%s %s %s %s %s %s %s", dir, refJ, gitstore.ZeroOid, c[1], refS, c[0], c[2])
	evs, out := systrace.Child(t, childEnv+"="+spec)
	if rev(t, dir, refJ) != c[1].String() || rev(t, dir, refS) != c[2].String() {
		t.Fatalf("the child did not move the refs: %s", out)
	}
	last := 0
	for _, ref := range []string{refS, refJ} { // the commit order
		path := filepath.Join(dir, filepath.FromSlash(ref))
		ri := systrace.Find(evs, "rename", path, 0)
		if ri < 0 || evs[ri].From != path+".lock" {
			t.Fatalf("%s was not renamed from its lock: %+v", ref, evs)
		}
		if si := systrace.Find(evs, "fsync", path+".lock", 0); si < 0 || si > ri {
			t.Fatalf("%s.lock not synced before its rename (sync %d, rename %d)", ref, si, ri)
		}
		if ri < last {
			t.Fatalf("%s renamed out of order", ref)
		}
		last = ri
	}
	for _, d := range []string{filepath.Join(dir, "refs", "bernstein", "journal"), filepath.Join(dir, "refs", "bernstein", "spine"), filepath.Join(dir, "refs", "bernstein")} {
		if systrace.Find(evs, "fsync", d, last) < 0 {
			t.Fatalf("%s not synced after the renames: %+v", d, evs)
		}
	}
}

// A `git pack-refs --all --prune` between a snapshot's two reads (loose
// refs, then packed-refs) moves nothing out of its sight: packed-refs, read
// second, already holds what the pruned loose files held. Read the other way
// round, the snapshot would take packed-refs' stale values for current.
func TestSnapshotPackRefsBetweenReads(t *testing.T) {
	dir, c := newRepo(t, 2)
	git(t, dir, "update-ref", refJ, c[0].String())
	git(t, dir, "pack-refs", "--all", "--prune")   // packed-refs: c[0]
	git(t, dir, "update-ref", refJ, c[1].String()) // loose: c[1]
	rd := Reader{Dir: dir, testHookBetweenReads: func() { git(t, dir, "pack-refs", "--all", "--prune") }}
	snap, err := rd.Snapshot(JournalPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := snap.ReadOptional(refJ); got != c[1] {
		t.Fatalf("snapshot reads %s as %s, want %s", refJ, got, c[1])
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(refJ))); err == nil {
		t.Fatal("pack-refs did not prune the loose ref between the reads")
	}
}

// Snapshots taken while `git pack-refs --all --prune` moves refs from loose
// files into packed-refs (and transactions move them back out) never miss a
// ref or mix two transactions: loose files are read before packed-refs, as
// git reads them, so a ref pruned meanwhile is found packed.
func TestSnapshotUnderPackRefs(t *testing.T) {
	dir, _ := newRepo(t, 0)
	const n = 40
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("%sT-%02d", JournalPrefix, i))
	}
	tx := &Transactor{GitDir: dir, LockWait: 10 * time.Second}
	move := func(old, nw gitstore.Oid) {
		var us []Update
		for _, name := range names {
			us = append(us, Update{name, old, nw})
		}
		for {
			out, err := tx.Apply(us)
			if out == Committed && err == nil {
				return
			}
			if !errors.Is(err, ErrLocked) {
				t.Errorf("move: %v %v", out, err)
				return
			}
		}
	}
	vals := []gitstore.Oid{gitstore.HashObject(gitstore.TypeBlob, []byte("a")), gitstore.HashObject(gitstore.TypeBlob, []byte("b"))}
	move(gitstore.ZeroOid, vals[0])
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			exec.Command("git", "-C", dir, "pack-refs", "--all", "--prune").Run()
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			move(vals[i%2], vals[(i+1)%2])
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	lists := 0
	for time.Now().Before(deadline) && !t.Failed() {
		snap, err := Reader{Dir: dir}.Snapshot(JournalPrefix)
		if err != nil {
			t.Fatal(err)
		}
		m, got, _ := snap.List(JournalPrefix)
		bad := ""
		if len(got) != n {
			bad = fmt.Sprintf("%d refs, want %d", len(got), n)
		}
		for _, name := range names {
			if bad == "" && m[name] != m[names[0]] {
				bad = fmt.Sprintf("%s at %s, %s at %s", names[0], m[names[0]], name, m[name])
			}
		}
		if bad != "" {
			close(stop)
			wg.Wait()
			t.Fatalf("snapshot %d: %s", lists, bad)
		}
		lists++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d snapshots", lists)
}
