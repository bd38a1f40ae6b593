package txn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bernstein/bernstein/refs"
)

// finishInterrupted completes or discards the transactions of writers that
// were killed mid-commit, then clears what they left in the pack and
// temporary directories. A writer killed before its pack was in place left
// its intent in a staged keep (and perhaps ref locks, which go); one killed
// later left it in the .keep file of its pack, and the refs it names are
// moved or left as the intent's commit point says. It runs under the writer
// lock before every batch, so a write never builds on a transaction half
// moved; when the scan finds nothing, that is all it costs.
func (w *Writer) finishInterrupted() error {
	left, err := w.c.Objects.Leftovers()
	if err != nil {
		return fmt.Errorf("read interrupted writes: %w", err)
	}
	if left.MergeTemps > 0 {
		w.clearDeadCompactions()
	}
	if left.Empty() {
		return nil
	}
	for _, path := range left.StagedKeeps {
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read interrupted writes: %w", err)
		}
		// An intent that does not parse was cut short while it was written,
		// before any lock was taken: there is nothing to undo.
		if in, ok, perr := refs.ParseIntent(data); ok && perr == nil {
			if err := w.recover(refs.Pending{Keep: path, Intent: in}); err != nil {
				return err
			}
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if len(left.Keeps) > 0 {
		pending, err := refs.PendingIntents(w.packDir())
		if err != nil {
			return fmt.Errorf("read interrupted writes: %w", err)
		}
		for _, p := range pending {
			if err := w.recover(p); err != nil {
				return err
			}
			if err := os.Remove(p.Keep); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	if _, err := w.c.Objects.CleanStale(); err != nil {
		w.c.Warn("clean the pack directory: %v", err)
	}
	return nil
}

// clearDeadCompactions removes what killed compactions left, when no
// compaction runs (a live one, of this process or another, holds the lock).
func (w *Writer) clearDeadCompactions() {
	unlock, ok := w.tryLockCompaction()
	if !ok {
		return
	}
	defer unlock()
	if err := w.c.Objects.CleanMergeTemps(); err != nil {
		w.c.Warn("clean the temporary directory: %v", err)
	}
}

// recover finishes or discards one interrupted transaction.
func (w *Writer) recover(p refs.Pending) error {
	committed, err := w.c.Txr.Recover(p)
	if !committed && strings.HasSuffix(p.Keep, ".keep") {
		// A pack cut off before its index was renamed in is invisible to
		// git and to us: nothing can rely on it, so it goes too.
		base := strings.TrimSuffix(p.Keep, ".keep")
		if _, err := os.Stat(base + ".idx"); os.IsNotExist(err) {
			os.Remove(base + ".pack")
		}
	}
	if err != nil {
		if !errors.Is(err, refs.ErrConflict) {
			return fmt.Errorf("finish the write interrupted in %s: %w", filepath.Base(p.Keep), err)
		}
		// Someone else moved a ref the interrupted write meant to move:
		// finishing it would undo their move. The rest of it stands.
		w.c.Warn("an interrupted write could not be finished: %v", err)
	}
	return nil
}

func (w *Writer) packDir() string { return filepath.Join(w.c.Objects.Dir(), "pack") }
