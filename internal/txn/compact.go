package txn

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const compactAbove = 16

// maybeCompact merges small packs once there are more than compactAbove, in
// the background: posts go on meanwhile (the merged pack is made from packs
// no write touches any more, and written under names no writer clears). A
// compaction lock serializes compactions across processes; when another
// process holds it, this one leaves the work to it. A failure leaves the
// packs as they were. Close waits for a compaction under way.
func (w *Writer) maybeCompact() {
	if w.c.Objects.PackCount() <= compactAbove || w.gitMaintains() || !w.compacting.CompareAndSwap(false, true) {
		return
	}
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		defer w.compacting.Store(false)
		unlock, ok := w.tryLockCompaction()
		if !ok {
			return
		}
		defer unlock()
		if err := w.c.Objects.CleanMergeTemps(); err != nil {
			w.maintErr.Store(err.Error())
		}
		if _, err := w.c.Objects.Compact(compactAbove); err != nil {
			w.maintErr.Store(err.Error())
		}
	}()
}

// gitMaintains reports whether git's own maintenance is running on this
// repository: a `git gc` (its gc.pid names a live process of this host) or
// a `git maintenance run` (its lock is recent). A merge of packs then waits
// for a later write: git 2.39's repack gives up ("unable to add recent
// objects") when a pack it listed at its start loses its index before it
// reads it, which a compaction beside it does. Nothing is lost either way;
// this only keeps git's maintenance from failing. A bare `git repack` leaves
// no such mark.
func (w *Writer) gitMaintains() bool {
	if b, err := os.ReadFile(filepath.Join(w.c.GitDir, "gc.pid")); err == nil {
		var pid int
		var host string
		if n, _ := fmt.Sscan(string(b), &pid, &host); n == 2 && pid > 0 {
			if me, err := os.Hostname(); err == nil && me == host && syscall.Kill(pid, 0) == nil {
				return true
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(w.c.Objects.Dir(), "maintenance.lock")); err == nil && time.Since(fi.ModTime()) < time.Hour {
		return true
	}
	return false
}
