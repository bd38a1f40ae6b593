package txn

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockWriters serializes bernstein writers across processes on this
// repository. The lock dies with its process, so a killed writer never
// wedges the others.
func (w *Writer) lockWriters() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(w.lockPath), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(w.lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", w.lockPath, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// tryLockCompaction takes the cross-process compaction lock if no one holds
// it. Like the writer lock, it dies with its process.
func (w *Writer) tryLockCompaction() (func(), bool) {
	path := filepath.Join(filepath.Dir(w.lockPath), "compact.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, true
}
