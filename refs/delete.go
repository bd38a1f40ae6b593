package refs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Deleting refs. A transaction may delete refs (an Update with a zero New)
// beside moving others: the archive of ended tasks deletes a task's two
// refs in the transaction that moves the archive ref to a commit holding
// them (docs/archive.md). The protocol is git's own (files backend): the
// loose ref's lock and packed-refs.lock are held from the check of the old
// values to the end; packed-refs is rewritten without the deleted refs (so
// that no older packed value shows through) before their loose files are
// removed. The deletions come after every other move (Order), one of which
// is the commit point: a crash before it leaves every ref as it was (the
// next writer removes the locks, packed-refs.lock included, that the
// intent's deletions account for); a crash after it leaves deletions that
// Recover finishes from the intent.

// checkDeletions refuses a deletion without an old value, and deletions
// without a move beside them (the commit point is a move: a deletion is
// no evidence that an intent took effect). us is in commit order.
func checkDeletions(us []Update) error {
	if len(us) == 0 || !us[len(us)-1].Deletes() {
		return nil
	}
	if us[0].Deletes() {
		return fmt.Errorf("refusing a transaction that only deletes refs (%s): its commit point must be a ref moved to a value", us[0].Ref)
	}
	for _, u := range us {
		if u.Deletes() && u.Old.IsZero() {
			return fmt.Errorf("refusing to delete %s with no old value to check", u.Ref)
		}
	}
	return nil
}

// deletedRefs names the refs us deletes.
func deletedRefs(us []Update) map[string]bool {
	out := map[string]bool{}
	for _, u := range us {
		if u.Deletes() {
			out[u.Ref] = true
		}
	}
	return out
}

// packedWithout is packed-refs as it is now without the refs us deletes
// (unchanged, byte for byte, when it holds none of them).
func (t *Transactor) packedWithout(us []Update) ([]byte, error) {
	old, err := os.ReadFile(packedPath(t.GitDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	traits, es, err := parsePacked(old)
	if err != nil {
		return nil, err
	}
	del := deletedRefs(us)
	kept := es[:0]
	for _, e := range es {
		if !del[e.name] {
			kept = append(kept, e)
		}
	}
	if len(kept) == len(es) {
		return old, nil
	}
	return renderPacked(traits, kept), nil
}

// writePackedWithout writes packed-refs without the refs us deletes into
// lock (packed-refs.lock, held), synced.
func (t *Transactor) writePackedWithout(lock string, us []Update) error {
	data, err := t.packedWithout(us)
	if err != nil {
		return err
	}
	return writeSynced(lock, data)
}

// deleteLocked carries out the deletion whose lock is l: first (once per
// transaction; *packed is then cleared) packed-refs.lock goes into place
// when it differs from packed-refs (which held a deleted ref), or is
// removed; then the loose file goes, and its lock.
func (t *Transactor) deleteLocked(l *refLock, packed *string) error {
	if *packed != "" {
		differs, err := packedDiffers(*packed, packedPath(t.GitDir))
		if err != nil {
			return fmt.Errorf("delete %s: %w", l.u.Ref, err)
		}
		if differs {
			err = os.Rename(*packed, packedPath(t.GitDir))
		} else {
			err = os.Remove(*packed)
		}
		if err != nil {
			return fmt.Errorf("delete %s: move packed-refs into place: %w", l.u.Ref, err)
		}
		*packed = ""
		if err := t.FaultPoint("packed-refs rewritten"); err != nil {
			return err
		}
	}
	if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", l.u.Ref, err)
	}
	if err := os.Remove(l.lock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: remove its lock: %w", l.u.Ref, err)
	}
	return nil
}

// packedDiffers reports whether the lock's content differs from
// packed-refs (never when there is no packed-refs: nothing to delete from).
func packedDiffers(lock, packed string) (bool, error) {
	cur, err := os.ReadFile(packed)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	next, err := os.ReadFile(lock)
	if err != nil {
		return false, err
	}
	return !bytes.Equal(cur, next), nil
}
