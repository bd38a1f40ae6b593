package refs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein/gitstore"
)

var refL = LedgerPrefix + "T-1"

// deletionRepo is a repository where refA is at c[0], refL is packed only
// (at c[1]), and refJ is loose at c[2] over an older packed value c[3]:
// the three places a deleted ref can be found. us moves refA to c[4] and
// deletes the other two.
func deletionRepo(t *testing.T) (string, []gitstore.Oid, []Update) {
	t.Helper()
	dir, c := newRepo(t, 6)
	git(t, dir, "update-ref", refJ, c[3].String())
	git(t, dir, "update-ref", refL, c[1].String())
	git(t, dir, "update-ref", SpinePrefix+"neighbour", c[5].String())
	git(t, dir, "pack-refs", "--all", "--prune")
	git(t, dir, "update-ref", refJ, c[2].String())
	git(t, dir, "update-ref", refA, c[0].String())
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(refJ))); err != nil {
		t.Fatal("the journal ref is not loose over its packed value")
	}
	return dir, c, []Update{{refA, c[0], c[4]}, {refJ, c[2], gitstore.ZeroOid}, {refL, c[1], gitstore.ZeroOid}}
}

// wantDeleted checks with git that refA is at c[4], refJ and refL are gone
// (neither loose nor packed: no older packed value shows through) and the
// neighbour kept, and that no lock is left.
func wantDeleted(t *testing.T, dir string, c []gitstore.Oid) {
	t.Helper()
	if got := rev(t, dir, refA); got != c[4].String() {
		t.Fatalf("git reads %s as %q, want %s", refA, got, c[4])
	}
	for _, ref := range []string{refJ, refL} {
		if got := rev(t, dir, ref); got != "" {
			t.Fatalf("git still reads the deleted %s as %s", ref, got)
		}
	}
	if got := rev(t, dir, SpinePrefix+"neighbour"); got != c[5].String() {
		t.Fatalf("a packed neighbour was lost: %q", got)
	}
	if strings.Contains(git(t, dir, "show-ref"), "T-1") {
		t.Fatal("git show-ref lists a deleted ref")
	}
	if l := lockFiles(t, dir); len(l) != 0 {
		t.Fatalf("locks left: %v", l)
	}
	if _, err := os.Stat(packedLockPath(dir)); err == nil {
		t.Fatal("packed-refs.lock was left")
	}
}

// TestApplyDeletesRefs: a transaction moves one ref and deletes two, one
// packed and one loose over an older packed value; git then reads neither.
func TestApplyDeletesRefs(t *testing.T) {
	dir, c, us := deletionRepo(t)
	out, err := (&Transactor{GitDir: dir}).Apply(us)
	if out != Committed || err != nil {
		t.Fatalf("apply: %v %v", out, err)
	}
	wantDeleted(t, dir, c)
	// The intent of such a transaction reads back as it was written.
	in, ok, err := ParseIntent([]byte(Intent{Updates: us}.Encode()))
	if !ok || err != nil || len(in.Updates) != 3 || !in.Updates[2].Deletes() || in.Updates[0].Ref != refA {
		t.Fatalf("intent with deletions: %+v %v %v", in, ok, err)
	}
}

// TestDeletionIsCompareAndSwap: a deletion whose old value is not the
// ref's (loose or packed) moves nothing and deletes nothing; so does a
// deletion of a ref that does not exist.
func TestDeletionIsCompareAndSwap(t *testing.T) {
	for _, bad := range []Update{{refJ, gitstore.ZeroOid, gitstore.ZeroOid}, {refJ, gitstore.ZeroOid, gitstore.ZeroOid}, {refL, gitstore.ZeroOid, gitstore.ZeroOid}, {LedgerPrefix + "none", gitstore.ZeroOid, gitstore.ZeroOid}} {
		dir, c, us := deletionRepo(t)
		stale := bad
		switch stale.Ref {
		case refJ:
			stale.Old = c[3] // the packed value under the loose one
		case refL:
			stale.Old = c[2]
		default:
			stale.Old = c[1]
		}
		before := allRefs(t, dir)
		_, err := (&Transactor{GitDir: dir}).Apply([]Update{us[0], stale})
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("delete %s from a stale %s: %v", stale.Ref, stale.Old, err)
		}
		if after := allRefs(t, dir); after != before {
			t.Fatalf("a refused deletion changed the refs:\n%s\nwant\n%s", after, before)
		}
		if l := lockFiles(t, dir); len(l) != 0 {
			t.Fatalf("locks left: %v", l)
		}
		if _, err := os.Stat(packedLockPath(dir)); err == nil {
			t.Fatal("packed-refs.lock was left")
		}
	}
}

// TestDeletionsNeedACommitPoint: a transaction of deletions alone, or a
// deletion without an old value, is refused before anything is locked.
func TestDeletionsNeedACommitPoint(t *testing.T) {
	dir, c, _ := deletionRepo(t)
	before := allRefs(t, dir)
	for _, us := range [][]Update{
		{{refJ, c[2], gitstore.ZeroOid}},
		{{refA, c[0], c[4]}, {refJ, gitstore.ZeroOid, gitstore.ZeroOid}},
	} {
		if _, err := (&Transactor{GitDir: dir}).Apply(us); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Fatalf("apply %v: %v", us, err)
		}
	}
	if allRefs(t, dir) != before {
		t.Fatal("a refused transaction changed the refs")
	}
}

// TestInterruptedDeletionRecovers stops a transaction with deletions at
// each step, as a crash would: a reader's snapshot sees it whole or not at
// all (the intent says which), and the next writer's Recover finishes or
// discards it, its packed-refs.lock included.
func TestInterruptedDeletionRecovers(t *testing.T) {
	steps := []string{"locked", "checked", "renamed 0", "packed-refs rewritten", "renamed 1", "renamed 2", "dirs synced"}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			dir, c, us := deletionRepo(t)
			before := allRefs(t, dir)
			committed := step != "locked" && step != "checked"
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
			if _, err := (&Transactor{GitDir: dir, FaultHook: stop}).Apply(us); !errors.Is(err, ErrFault) {
				t.Fatalf("apply stopped at %s: %v", step, err)
			}
			snap, err := Reader{Dir: dir}.Snapshot(Prefix)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]gitstore.Oid{refA: c[0], refJ: c[2], refL: c[1]}
			if committed {
				want = map[string]gitstore.Oid{refA: c[4]}
			}
			for _, ref := range []string{refA, refJ, refL} {
				if got, _ := snap.ReadOptional(ref); got != want[ref] {
					t.Fatalf("snapshot reads %s as %s, want %s", ref, got, want[ref])
				}
			}
			pending, err := PendingIntents(packDir)
			if err != nil || len(pending) != 1 {
				t.Fatalf("pending intents: %v %v", pending, err)
			}
			// A lock cut short at "locked" (packed-refs.lock still empty) is
			// the dead writer's once it has stayed so for deadLockAge.
			then := time.Now().Add(-2 * deadLockAge)
			os.Chtimes(packedLockPath(dir), then, then)
			got, err := (&Transactor{GitDir: dir, LockWait: 100 * time.Millisecond}).Recover(pending[0])
			if err != nil || got != committed {
				t.Fatalf("recover: committed %v, %v", got, err)
			}
			if committed {
				wantDeleted(t, dir, c)
				return
			}
			if after := allRefs(t, dir); after != before {
				t.Fatalf("an uncommitted transaction changed the refs:\n%s\nwant\n%s", after, before)
			}
			if l := lockFiles(t, dir); len(l) != 0 {
				t.Fatalf("locks left: %v", l)
			}
			if _, err := os.Stat(packedLockPath(dir)); err == nil {
				t.Fatal("the dead writer's packed-refs.lock was left")
			}
		})
	}
}

// TestDeletionWaitsForPackRefs: packed-refs.lock held by someone else (git
// pack-refs) keeps a deletion from going ahead: after the wait it fails
// with nothing moved, and the other's lock stays.
func TestDeletionWaitsForPackRefs(t *testing.T) {
	dir, _, us := deletionRepo(t)
	before := allRefs(t, dir)
	if err := os.WriteFile(packedLockPath(dir), []byte("# someone else's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Transactor{GitDir: dir, LockWait: 50 * time.Millisecond}).Apply(us); !errors.Is(err, ErrPackedBusy) {
		t.Fatalf("apply under someone else's packed-refs.lock: %v", err)
	}
	if allRefs(t, dir) != before {
		t.Fatal("the refs changed")
	}
	if b, err := os.ReadFile(packedLockPath(dir)); err != nil || string(b) != "# someone else's\n" {
		t.Fatal("someone else's packed-refs.lock was touched")
	}
	if l := lockFiles(t, dir); len(l) != 0 {
		t.Fatalf("locks left: %v", l)
	}
}

// TestDeletedRefIsNoCommitEvidence: an intent that was never carried out,
// one of whose deletions someone else has made meanwhile (git update-ref
// -d), is still not taken as committed: Recover moves nothing, and a
// snapshot reads the other refs as they are.
func TestDeletedRefIsNoCommitEvidence(t *testing.T) {
	dir, c, us := deletionRepo(t)
	git(t, dir, "update-ref", "-d", refL)
	before := allRefs(t, dir)
	p := Pending{Keep: filepath.Join(dir, "objects", "pack", "pack-0123.keep"), Intent: Intent{Updates: us}}
	if err := os.WriteFile(p.Keep, []byte(p.Intent.Encode()), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := Reader{Dir: dir}.Snapshot(Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := snap.ReadOptional(refA); got != c[0] {
		t.Fatalf("snapshot reads %s as %s, want %s", refA, got, c[0])
	}
	committed, err := (&Transactor{GitDir: dir}).Recover(p)
	if err != nil || committed {
		t.Fatalf("recover: committed %v, %v", committed, err)
	}
	if after := allRefs(t, dir); after != before {
		t.Fatalf("recovery of an intent never carried out moved refs:\n%s\nwant\n%s", after, before)
	}
}
