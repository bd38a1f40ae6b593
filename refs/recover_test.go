package refs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein/gitstore"
)

// A power loss can cut a writer off after it made its ref locks and before
// the intent naming them reached the disk: no intent is left to recognise
// them by. A lock made before the system last booted belongs to no living
// process, so a transaction that has waited out such a lock removes it,
// says so, and goes on; a lock made since the boot is respected as ever.
func TestStaleLockFromBeforeBootIsRemoved(t *testing.T) {
	boot := bootTime()
	if boot.IsZero() {
		t.Skip("no boot time on this system (/proc/stat)")
	}
	dir, c := newRepo(t, 3)
	git(t, dir, "update-ref", refS, c[0].String())
	lock := filepath.Join(dir, filepath.FromSlash(refS)) + ".lock"

	// Made since the boot: someone may be holding it.
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var warned []string
	tx := &Transactor{GitDir: dir, LockWait: 50 * time.Millisecond, Warn: func(m string) { warned = append(warned, m) }}
	if _, err := tx.Apply([]Update{{refS, c[0], c[1]}}); !errors.Is(err, ErrLocked) {
		t.Fatalf("a lock made since the boot was not respected: %v", err)
	}
	if _, err := os.Stat(lock); err != nil || len(warned) != 0 {
		t.Fatalf("a lock made since the boot was removed (%v) or warned of (%q)", err, warned)
	}

	// Made before the boot (its time set an hour before it): nobody holds it.
	before := boot.Add(-time.Hour)
	if err := os.Chtimes(lock, before, before); err != nil {
		t.Fatal(err)
	}
	if out, err := tx.Apply([]Update{{refS, c[0], c[1]}}); out != Committed || err != nil {
		t.Fatalf("apply over a lock from before the boot: %v %v", out, err)
	}
	if rev(t, dir, refS) != c[1].String() {
		t.Fatal("the ref did not move")
	}
	if len(warned) != 1 || !strings.Contains(warned[0], lock) || !strings.Contains(warned[0], "booted") {
		t.Fatalf("the removal of a stale lock was not reported: %q", warned)
	}
	if l := lockFiles(t, dir); len(l) != 0 {
		t.Fatalf("locks left: %v", l)
	}
}

// Recover re-reads a ref under the lock it takes before it moves it: a ref
// that someone moved between Recover's first read and the lock is left
// where they put it, and the conflict is reported.
func TestRecoverRechecksUnderItsLock(t *testing.T) {
	dir, c := newRepo(t, 6)
	git(t, dir, "update-ref", refJ, c[0].String())
	git(t, dir, "update-ref", refS, c[1].String())
	in := Intent{Updates: []Update{{refJ, c[0], c[2]}, {refS, c[1], c[3]}}}
	git(t, dir, "update-ref", refS, c[3].String()) // committed: the spine moved
	hook := func(step string) error {
		if step == "recovering "+refJ {
			// A plain git moves the journal after Recover read it.
			git(t, dir, "update-ref", refJ, c[5].String())
		}
		return nil
	}
	ok, err := (&Transactor{GitDir: dir, LockWait: 100 * time.Millisecond, FaultHook: hook}).Recover(Pending{Intent: in})
	if !ok || !errors.Is(err, ErrConflict) {
		t.Fatalf("recover over a ref moved under it: %v %v", ok, err)
	}
	if got := rev(t, dir, refJ); got != c[5].String() {
		t.Fatalf("recover moved the journal over git's move: %s, want %s", got, c[5])
	}
	if l := lockFiles(t, dir); len(l) != 0 {
		t.Fatalf("locks left: %v", l)
	}
}

// A snapshot takes a committed intent as finished only for the refs still
// at their old value: one that someone else moved since reads as they left
// it, as Recover will leave it.
func TestSnapshotLeavesAMovedRefAlone(t *testing.T) {
	dir, c := newRepo(t, 7)
	refL := LedgerPrefix + "T-1"
	git(t, dir, "update-ref", refJ, c[0].String())
	git(t, dir, "update-ref", refS, c[1].String())
	git(t, dir, "update-ref", refL, c[2].String())
	in := Intent{Updates: []Update{{refJ, c[0], c[3]}, {refS, c[1], c[4]}, {refL, c[2], c[6]}}}
	keep := filepath.Join(dir, "objects", "pack", "pack-0123.keep")
	if err := os.WriteFile(keep, []byte(in.Encode()), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "update-ref", refS, c[4].String()) // the commit point
	git(t, dir, "update-ref", refJ, c[5].String()) // someone else's move
	snap, err := Reader{Dir: dir}.Snapshot(Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]gitstore.Oid{refS: c[4], refJ: c[5], refL: c[6]} {
		if got, _ := snap.ReadOptional(ref); got != want {
			t.Fatalf("snapshot reads %s as %s, want %s", ref, got, want)
		}
	}
}

// A lock cut short (empty) that an intent names is a dead writer's only
// if it stays so: a live git's lock is empty for the instant between its
// creation and its write, and one that then takes another value is not
// removed.
func TestRecoverLeavesAFreshEmptyLockThatFillsUp(t *testing.T) {
	dir, c := newRepo(t, 3)
	git(t, dir, "update-ref", refJ, c[0].String())
	lock := filepath.Join(dir, filepath.FromSlash(refJ)) + ".lock"
	// The live writer creates its lock and writes its value a moment later,
	// through the file it created, as git does.
	live, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// It writes while Recover waits to see whether the empty lock fills.
	tx := &Transactor{GitDir: dir}
	filled := false
	tx.testHookYoungLock = func(l string) {
		if l == lock && !filled {
			filled = true
			live.WriteString(c[2].String() + "\n")
			live.Close()
		}
	}
	// Not committed: nothing moved, and Recover removes the dead writer's locks.
	ok, err := tx.Recover(Pending{Intent: Intent{Updates: []Update{{refJ, c[0], c[1]}}}})
	if !filled {
		t.Fatal("Recover did not wait on the empty lock")
	}
	if ok || err != nil {
		t.Fatalf("recover: %v %v", ok, err)
	}
	if data, err := os.ReadFile(lock); err != nil || string(data) != c[2].String()+"\n" {
		t.Fatalf("recover removed or changed a live writer's lock: %q %v", data, err)
	}
}

// Readers never starve a writer: a reader that comes while a writer waits
// for the readers inside (who, overlapping, would keep the readers' lock
// shared for good) waits behind the writer at the turnstile it holds.
func TestWriterIsNotStarvedByReaders(t *testing.T) {
	dir := t.TempDir()
	tx := &Transactor{GitDir: dir}
	first := shareWithReaders(dir) // a reader inside
	waiting := make(chan struct{})
	tx.testHookTurnstile = func() { close(waiting) }
	writerIn, writerOut := make(chan struct{}), make(chan struct{})
	go func() {
		unblock := tx.excludeReaders()
		close(writerIn)
		<-writerOut
		unblock()
	}()
	<-waiting // the writer holds the turnstile and waits for the readers
	secondIn := make(chan struct{})
	go func() {
		unlock := shareWithReaders(dir)
		close(secondIn)
		unlock()
	}()
	// The second reader is in, or waits at the turnstile (the kernel lists
	// its lock request as blocked): only then does the first leave.
	fi, err := os.Stat(turnstilePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(":%d ", fi.Sys().(*syscall.Stat_t).Ino)
	for blocked := false; !blocked; {
		select {
		case <-secondIn:
			t.Fatal("a reader that came after the writer went in beside the reader it waits for")
		default:
		}
		locks, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(locks), "\n") {
			if strings.Contains(l, "-> FLOCK") && strings.Contains(l, " READ ") && strings.Contains(l, ino) {
				blocked = true
			}
		}
		runtime.Gosched()
	}
	first()
	select {
	case <-writerIn:
	case <-secondIn:
		t.Fatal("a reader that came after the writer went in before it")
	}
	select {
	case <-secondIn:
		t.Fatal("a reader went in while the writer held the lock")
	default:
	}
	close(writerOut)
	<-secondIn
}
