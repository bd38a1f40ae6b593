package txn

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// Moves of refs/bernstein/* refs that are not batches of operations (a
// fetch's fast-forwards) take the same writer lock and the same intent, so
// that readers never see them half done and a post is never lost.

// Lock takes the writer lock and finishes any write a killed writer left
// half done (its intent in a kept pack's .keep file), as the next batch
// would; the caller moves refs with ApplyLocked, then unlocks.
func (w *Writer) Lock() (unlock func(), err error) {
	unlock, err = w.lockWriters()
	if err != nil {
		return nil, err
	}
	if err := w.finishInterrupted(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// Settle finishes any write a killed writer left half done, under the
// writer lock. After it, refs/bernstein/* holds only whole transactions.
func (w *Writer) Settle() error {
	unlock, err := w.lockWriters()
	if err != nil {
		return err
	}
	defer unlock()
	return w.finishInterrupted()
}

// ApplyLocked moves refs as one transaction under an intent kept in a
// pack's .keep file, as a batch's commit does. The caller holds the writer lock. The pack
// holds the empty tree and a blob of the intent, the process and the time:
// a pack of the empty tree alone would take the same name every time, and a compaction (which
// runs beside writers) deleting the last such pack as one of its inputs
// would delete the files the next one had just put in its place.
func (w *Writer) ApplyLocked(updates []refs.Update) error {
	var us []refs.Update
	for _, u := range updates {
		if u.Old != u.New {
			us = append(us, u)
		}
	}
	if len(us) == 0 {
		return nil
	}
	intent := refs.Intent{Updates: us}.Encode()
	nonce := fmt.Sprintf("%s\nwritten by %d at %d\n", intent, os.Getpid(), time.Now().UnixNano())
	objs := []gitstore.Object{gitstore.NewObject(gitstore.TypeTree, nil), gitstore.NewObject(gitstore.TypeBlob, []byte(nonce))}
	base, err := w.c.Objects.WritePackKept(objs, intent)
	if err != nil {
		return fmt.Errorf("write intent: %w", err)
	}
	out, err := w.apply(us)
	if errors.Is(err, refs.ErrFault) {
		return err // a test's simulated crash: leave everything as it is
	}
	switch out {
	case refs.NotCommitted:
		w.c.Objects.Unkeep(base)
		return err
	case refs.CommittedPending:
		w.c.Warn("the fast-forward is committed, but finishing it failed (the next write completes it): %v", err)
		return nil
	}
	if err := w.c.Objects.Unkeep(base); err != nil {
		w.c.Warn("the fast-forward is committed, but its intent could not be retired (the next write does): %v", err)
	}
	return nil
}

// PackedCreations is how many refs, all new, a move must create for
// ApplyLocked to write them into packed-refs in one rewrite (as git clone
// does) rather than as loose refs, a file and a sync each.
var PackedCreations = 64

// apply moves us in one ref transaction: into packed-refs when they are
// PackedCreations creations or more, and packed-refs is not held by git
// (a pack-refs or gc under way) beyond the wait; as loose refs otherwise.
func (w *Writer) apply(us []refs.Update) (refs.Outcome, error) {
	if len(us) >= PackedCreations && allCreations(us) {
		out, err := w.c.Txr.CreatePacked(us)
		if !errors.Is(err, refs.ErrPackedBusy) {
			return out, err
		}
	}
	return w.c.Txr.Apply(us)
}

func allCreations(us []refs.Update) bool {
	for _, u := range us {
		if !u.Old.IsZero() {
			return false
		}
	}
	return true
}
