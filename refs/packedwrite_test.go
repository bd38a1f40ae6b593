package refs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/systrace"
)

// packedTaskRepo is a repository whose packed-refs git wrote (with an annotated
// tag, whose peeled line must survive), a loose ref beside it, and n
// creations of task refs to make.
func packedTaskRepo(t *testing.T, n int) (string, []gitstore.Oid, []Update) {
	t.Helper()
	dir, c := newRepo(t, 3)
	git(t, dir, "update-ref", "refs/heads/main", c[0].String())
	git(t, dir, "tag", "-a", "-m", "v1", "v1", c[1].String())
	git(t, dir, "update-ref", refS, c[1].String())
	git(t, dir, "pack-refs", "--all")
	git(t, dir, "update-ref", refA, c[2].String()) // loose
	var us []Update
	for i := 0; i < n; i++ {
		us = append(us, Update{Ref: fmt.Sprintf("%sT-%03d", JournalPrefix, i), New: c[i%3]})
	}
	return dir, c, us
}

// CreatePacked writes the refs into packed-refs, where git reads them and
// keeps what was there (a peeled tag included), with no loose file each.
func TestCreatePackedWritesPackedRefs(t *testing.T) {
	dir, _, us := packedTaskRepo(t, 100)
	before := git(t, dir, "show-ref", "-d")
	out, err := (&Transactor{GitDir: dir}).CreatePacked(us)
	if out != Committed || err != nil {
		t.Fatalf("create: %v %v", out, err)
	}
	for _, u := range us {
		if got := rev(t, dir, u.Ref); got != u.New.String() {
			t.Fatalf("git reads %s as %q, want %s", u.Ref, got, u.New)
		}
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(u.Ref))); err == nil {
			t.Fatalf("%s was written loose", u.Ref)
		}
	}
	after := git(t, dir, "show-ref", "-d")
	for _, line := range strings.Split(before, "\n") {
		if !strings.Contains(after+"\n", line+"\n") {
			t.Fatalf("git lost %q from its refs:\n%s", line, after)
		}
	}
	if _, err := os.Stat(packedLockPath(dir)); err == nil {
		t.Fatal("packed-refs.lock left")
	}
	// git rewrites the file itself afterwards, keeping every ref.
	git(t, dir, "pack-refs", "--all")
	if got := rev(t, dir, us[50].Ref); got != us[50].New.String() {
		t.Fatalf("after git pack-refs git reads %s as %q", us[50].Ref, got)
	}
}

// A ref that exists, loose or packed, fails the creation: nothing is
// written and no lock is left.
func TestCreatePackedRefusesExistingRefs(t *testing.T) {
	for _, ref := range []string{refA, refS} { // loose, packed
		dir, c, us := packedTaskRepo(t, 10)
		before := allRefs(t, dir)
		us = append(us, Update{Ref: ref, New: c[0]})
		out, err := (&Transactor{GitDir: dir}).CreatePacked(us)
		if out != NotCommitted || !errors.Is(err, ErrConflict) {
			t.Fatalf("creating %s that exists: %v %v", ref, out, err)
		}
		if got := allRefs(t, dir); got != before {
			t.Fatalf("refs changed:\n%s\nwant\n%s", got, before)
		}
		if _, err := os.Stat(packedLockPath(dir)); err == nil {
			t.Fatal("packed-refs.lock left")
		}
	}
}

// A creation killed before or after its commit point (the rename of
// packed-refs) is seen whole or not at all, and the next writer finishes
// it from its intent: a lock the dead writer left is removed (git could
// not rewrite packed-refs otherwise), a lock of anyone else's is not.
func TestCreatePackedInterrupted(t *testing.T) {
	for _, step := range []string{"locked", "renamed 0", "dirs synced"} {
		t.Run(step, func(t *testing.T) {
			dir, _, us := packedTaskRepo(t, 80)
			committed := step != "locked"
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
			if _, err := (&Transactor{GitDir: dir, FaultHook: stop}).CreatePacked(us); !errors.Is(err, ErrFault) {
				t.Fatalf("create stopped at %s: %v", step, err)
			}
			snap, err := Reader{Dir: dir}.Snapshot(Prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range us {
				got, _ := snap.ReadOptional(u.Ref)
				if committed != (got == u.New) || !committed && !got.IsZero() {
					t.Fatalf("snapshot reads %s as %s (committed %v)", u.Ref, got, committed)
				}
			}
			pending, err := PendingIntents(packDir)
			if err != nil || len(pending) != 1 {
				t.Fatalf("pending intents: %v %v", pending, err)
			}
			got, err := (&Transactor{GitDir: dir}).Recover(pending[0])
			if err != nil || got != committed {
				t.Fatalf("recover: committed %v, %v", got, err)
			}
			if _, err := os.Stat(packedLockPath(dir)); err == nil {
				t.Fatal("the dead writer's packed-refs.lock was left")
			}
			for _, u := range us {
				if r := rev(t, dir, u.Ref); (r == u.New.String()) != committed {
					t.Fatalf("after recovery git reads %s as %q (committed %v)", u.Ref, r, committed)
				}
			}
			git(t, dir, "pack-refs", "--all")
		})
	}
}

// A packed-refs.lock cut short by a kill while it was written is the dead
// writer's once it has stayed so for deadLockAge; one holding anything
// else (git's own pack-refs) is not.
func TestRecoverPackedLockCutShort(t *testing.T) {
	dir, c, us := packedTaskRepo(t, 70)
	old, err := os.ReadFile(packedPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := mergePacked(old, us)
	if err != nil {
		t.Fatal(err)
	}
	lock := packedLockPath(dir)
	tx := &Transactor{GitDir: dir}
	os.WriteFile(lock, whole[:len(whole)/2], 0o644)
	then := time.Now().Add(-2 * deadLockAge)
	os.Chtimes(lock, then, then)
	if _, err := tx.Recover(Pending{Intent: Intent{Updates: us}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lock); err == nil {
		t.Fatal("a lock cut short of the dead writer's content was left")
	}
	foreign := append([]byte(nil), whole[:len(whole)/2]...)
	foreign = append(foreign, []byte(c[0].String()+" refs/heads/other\n")...)
	os.WriteFile(lock, foreign, 0o644)
	os.Chtimes(lock, then, then)
	tx.Recover(Pending{Intent: Intent{Updates: us}})
	if _, err := os.Stat(lock); err != nil {
		t.Fatal("recovery removed a packed-refs.lock that was not the dead writer's")
	}
}

// packed-refs is durable in git's order: the lock synced before it is
// renamed onto packed-refs, the git directory synced after.
func TestCreatePackedIsDurable(t *testing.T) {
	dir, c := newRepo(t, 3)
	spec := fmt.Sprintf("packed %s %s %s %s %s %s %s", dir, refJ, gitstore.ZeroOid, c[1], refS, gitstore.ZeroOid, c[2])
	evs, out := systrace.Child(t, childEnv+"="+spec)
	if rev(t, dir, refJ) != c[1].String() || rev(t, dir, refS) != c[2].String() {
		t.Fatalf("the child did not create the refs: %s", out)
	}
	packed := filepath.Join(dir, "packed-refs")
	ri := systrace.Find(evs, "rename", packed, 0)
	if ri < 0 || evs[ri].From != packed+".lock" {
		t.Fatalf("packed-refs was not renamed from its lock: %+v", evs)
	}
	if si := systrace.Find(evs, "fsync", packed+".lock", 0); si < 0 || si > ri {
		t.Fatalf("packed-refs.lock not synced before its rename (sync %d, rename %d)", si, ri)
	}
	if systrace.Find(evs, "fsync", dir, ri) < 0 {
		t.Fatalf("%s not synced after the rename: %+v", dir, evs)
	}
}
