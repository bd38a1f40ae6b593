package refs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bernstein/bernstein/gitstore"
)

var syscallEISDIR = syscall.EISDIR

// Errors a transaction reports; callers branch on them.
var (
	// ErrConflict: a ref was not at the expected old value (compare-and-swap lost).
	ErrConflict = errors.New("ref changed concurrently")
	// ErrLocked: another process holds a ref's lock file beyond the wait.
	ErrLocked = errors.New("ref locked by another process")
	// ErrFault is what a fault hook returns to stop a transaction where it is,
	// as a crash would: nothing is cleaned up.
	ErrFault = errors.New("injected fault")
)

// FaultPoint runs t.FaultHook (set by tests) at step.
func (t *Transactor) FaultPoint(step string) error {
	if t.FaultHook == nil {
		return nil
	}
	return t.FaultHook(step)
}

// Update moves Ref from Old to New. A zero Old means the ref must not
// exist; a zero New deletes the ref (Old must then be its value).
type Update struct {
	Ref string
	Old gitstore.Oid
	New gitstore.Oid
}

// Deletes reports whether u deletes its ref.
func (u Update) Deletes() bool { return u.New.IsZero() }

// Transactor moves several refs at once with git's own lock-file protocol:
// an exclusive <ref>.lock per ref holding the new value and synced, old
// values checked under the locks against loose and packed refs, the locks
// renamed in a fixed order while readers are held off, and the ref
// directories synced. The first rename is the commit point. Before it
// nothing is visible and every lock is removed on failure; after it the
// transaction is committed, and what a crash leaves undone is finished by
// Recover from the transaction's intent.
type Transactor struct {
	GitDir   string        // the common git directory
	LockWait time.Duration // how long to wait for a ref lock held by someone else (default 5s)
	// Warn, when set, is told of a stale lock the transaction removed.
	Warn func(string)
	// FaultHook, when set (by tests), is called at each step of a
	// transaction: "waiting for <ref>" (its lock is someone else's, each
	// time before the transaction waits a moment more), "locked" (every
	// lock file created, holding its new value, and synced), "checked" (old
	// values checked under the locks), "renamed <i>" (after the i-th rename,
	// 0-based), "dirs synced" and "recovering <ref>"; the store adds its own
	// ("intent written", "packed"). A non-nil return stops the transaction right there,
	// leaving the files as a killed process would.
	FaultHook func(step string) error

	// Test hooks: told of an empty young lock an intent names (before the
	// wait to see whether it fills), and of the turnstile taken by
	// excludeReaders (before the wait for the readers).
	testHookYoungLock func(lock string)
	testHookTurnstile func()
}

func (t *Transactor) warn(format string, args ...any) {
	if t.Warn != nil {
		t.Warn(fmt.Sprintf(format, args...))
	}
}

func (t *Transactor) wait() time.Duration {
	if t.LockWait > 0 {
		return t.LockWait
	}
	return 5 * time.Second
}

// Outcome says how far a transaction got.
type Outcome int

const (
	// NotCommitted: no ref moved; every lock taken was removed.
	NotCommitted Outcome = iota
	// Committed: every ref moved and the moves are durable.
	Committed
	// CommittedPending: the transaction is committed (at least one ref moved)
	// but not every rename or sync completed; the intent must stay so that
	// Recover finishes it. Readers already see it whole.
	CommittedPending
)

// refLock is one ref's lock file while a transaction holds it.
type refLock struct {
	u    Update
	path string // the ref file
	lock string // path + ".lock"
	f    *os.File
	dirs []string // directories created for it, outermost first
}

// Apply moves every ref of updates or none: Prepare, then Commit. The caller
// holds the store's writer lock and has made the transaction's intent
// durable.
func (t *Transactor) Apply(updates []Update) (Outcome, error) {
	p, err := t.Prepare(updates)
	if err != nil {
		return NotCommitted, err
	}
	return p.Commit()
}

// Prepared is a transaction whose locks are held, hold the new values on
// disk, and whose old values have been checked: nothing is visible yet.
// Commit makes it take effect; Abort drops it.
type Prepared struct {
	t     *Transactor
	locks []*refLock // in commit order
	// packed is packed-refs.lock, held (and written with packed-refs
	// without the deleted refs) when the transaction deletes refs; "" when
	// it deletes none.
	packed string
}

// Prepare takes every ref's lock, each written with its new value and
// synced side by side with the others, and then checks every old value
// under the locks. On an error nothing moved and no lock is left (unless
// the error is ErrFault, which stops as a crash would). The caller must
// have made the transaction's intent visible to the next writer before it
// calls Prepare: a writer killed while it holds locks leaves them to be
// removed by Recover, which knows them by the intent.
func (t *Transactor) Prepare(updates []Update) (*Prepared, error) {
	p := &Prepared{t: t}
	if len(updates) == 0 {
		return p, nil
	}
	us := append([]Update(nil), updates...)
	Order(us)
	for _, u := range us {
		if err := checkRefName(u.Ref); err != nil {
			return nil, err
		}
	}
	if err := checkDeletions(us); err != nil {
		return nil, err
	}
	// Each lock is created, written and synced on its own: the disk takes
	// the flushes together.
	locks := make([]*refLock, len(us))
	errs := make([]error, len(us))
	var wg sync.WaitGroup
	for i, u := range us {
		wg.Go(func() {
			l, err := t.lock(u)
			if err == nil {
				if err = l.sync(); err != nil {
					l.abandon()
					l = nil
				}
			}
			locks[i], errs[i] = l, err
		})
	}
	wg.Wait()
	release := func() {
		for _, l := range locks {
			if l != nil {
				l.abandon()
			}
		}
		if p.packed != "" {
			os.Remove(p.packed)
		}
	}
	for _, err := range errs {
		if err != nil {
			// The first error in commit order says why; a lock wait names
			// the lock.
			release()
			return nil, err
		}
	}
	if us[len(us)-1].Deletes() {
		// Held to the end: git pack-refs could otherwise copy a ref about
		// to be deleted into packed-refs, where it would outlive its
		// loose file.
		lock, err := t.lockPacked()
		if err != nil {
			release()
			return nil, err
		}
		p.packed = lock
	}
	if err := t.FaultPoint("locked"); err != nil {
		return nil, err
	}
	for _, l := range locks {
		cur, err := t.current(l.u.Ref)
		if err != nil {
			release()
			return nil, err
		}
		if cur != l.u.Old {
			release()
			return nil, fmt.Errorf("%w: %s is at %s, not %s", ErrConflict, l.u.Ref, short(cur), short(l.u.Old))
		}
	}
	if p.packed != "" {
		if err := t.writePackedWithout(p.packed, us); err != nil {
			release()
			return nil, err
		}
	}
	if err := t.FaultPoint("checked"); err != nil {
		return nil, err
	}
	p.locks = locks
	return p, nil
}

// Commit renames the locks onto their refs, in order, while readers wait,
// and syncs the ref directories.
func (p *Prepared) Commit() (Outcome, error) {
	if len(p.locks) == 0 {
		return Committed, nil
	}
	return p.t.rename(p.locks, p.packed)
}

// Abort removes the locks of a transaction that will not commit.
func (p *Prepared) Abort() {
	if p == nil {
		return
	}
	for _, l := range p.locks {
		l.abandon()
	}
	if p.packed != "" {
		os.Remove(p.packed)
	}
	p.locks, p.packed = nil, ""
}

// rename is the commit phase: the locks become the refs, in order, while
// readers wait, and then the directories are synced. The deletions come
// last (packed is then packed-refs.lock, held): packed-refs without the
// deleted refs first, then their loose files, so that no older packed
// value shows through a deleted loose file.
func (t *Transactor) rename(locks []*refLock, packed string) (Outcome, error) {
	unblock := t.excludeReaders()
	for i, l := range locks {
		if l.u.Deletes() {
			// Never the first of a transaction's moves (checkDeletions);
			// a recovery may start with one.
			if err := t.deleteLocked(l, &packed); err != nil {
				unblock()
				return CommittedPending, err
			}
		} else if err := os.Rename(l.lock, l.path); err != nil {
			unblock()
			if i == 0 {
				for _, l := range locks {
					l.abandon()
				}
				return NotCommitted, fmt.Errorf("move %s: %w", l.u.Ref, err)
			}
			return CommittedPending, fmt.Errorf("move %s: %w", l.u.Ref, err)
		}
		if err := t.FaultPoint(fmt.Sprintf("renamed %d", i)); err != nil {
			unblock()
			return CommittedPending, err
		}
	}
	unblock()
	if err := syncRefDirs(locks); err != nil {
		return CommittedPending, err
	}
	if locks[len(locks)-1].u.Deletes() {
		// packed-refs was renamed (or deletions unlinked) in the git directory.
		if err := gitstore.SyncDir(t.GitDir); err != nil {
			return CommittedPending, err
		}
	}
	if err := t.FaultPoint("dirs synced"); err != nil {
		return CommittedPending, err
	}
	return Committed, nil
}

// lock creates u's lock file, waiting while someone else holds it.
func (t *Transactor) lock(u Update) (*refLock, error) {
	if err := checkRefName(u.Ref); err != nil {
		return nil, err
	}
	path := filepath.Join(t.GitDir, filepath.FromSlash(u.Ref))
	l := &refLock{u: u, path: path, lock: path + ".lock"}
	deadline := time.Now().Add(t.wait())
	backoff := time.Millisecond
	staleChecked := false
	for {
		f, err := os.OpenFile(l.lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			l.f = f
			if _, err := f.WriteString(u.New.String() + "\n"); err != nil {
				l.abandon()
				return nil, fmt.Errorf("write %s: %w", l.lock, err)
			}
			return l, nil
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			made, err := mkdirs(filepath.Dir(path), t.GitDir)
			if err != nil {
				return nil, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
			}
			l.dirs = append(l.dirs, made...)
			continue
		case !errors.Is(err, fs.ErrExist):
			return nil, fmt.Errorf("lock %s: %w", u.Ref, err)
		}
		if time.Now().After(deadline) {
			// A lock that outlived the wait and was made before the
			// system last booted belongs to no living process: a power
			// loss cut its writer off (perhaps before the intent that
			// names it reached the disk). It goes, once.
			if !staleChecked {
				staleChecked = true
				if removeIfBeforeBoot(l.lock) {
					t.warn("removed %s: it was made before the system last booted, so no running process holds it", l.lock)
					continue
				}
			}
			return nil, fmt.Errorf("%w: %s exists; if no git or bernstein process is running, remove it", ErrLocked, l.lock)
		}
		if err := t.FaultPoint("waiting for " + u.Ref); err != nil {
			return nil, err
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

// abandon closes and removes a lock that did not become the ref.
func (l *refLock) abandon() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	os.Remove(l.lock)
}

// sync flushes the lock file's content and closes it.
func (l *refLock) sync() error {
	err := l.f.Sync()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	if err != nil {
		return fmt.Errorf("sync %s: %w", l.lock, err)
	}
	return nil
}

// syncLocks flushes every lock file's content, side by side.
func syncLocks(locks []*refLock) error {
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() { errs[i] = l.sync() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// syncRefDirs makes the renames durable: every ref's directory, and the
// parents of directories this transaction created, synced side by side. A
// directory that is gone was emptied by `git pack-refs`, whose packed-refs
// now holds the ref.
func syncRefDirs(locks []*refLock) error {
	dirs := map[string]bool{}
	for _, l := range locks {
		dirs[filepath.Dir(l.path)] = true
		for _, d := range l.dirs {
			dirs[filepath.Dir(d)] = true
		}
	}
	return syncDirs(dirs)
}

func syncDirs(dirs map[string]bool) error {
	errs := make(chan error, len(dirs))
	for d := range dirs {
		go func(d string) {
			err := gitstore.SyncDir(d)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
			errs <- err
		}(d)
	}
	var first error
	for range dirs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// mkdirs creates dir and its missing parents below root, returning those it
// created, outermost first.
func mkdirs(dir, root string) ([]string, error) {
	var missing []string
	for d := dir; len(d) > len(root); d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i, j := 0, len(missing)-1; i < j; i, j = i+1, j-1 {
		missing[i], missing[j] = missing[j], missing[i]
	}
	return missing, nil
}

// current reads ref's value as git would: the loose file, else packed-refs.
func (t *Transactor) current(ref string) (gitstore.Oid, error) {
	return Reader{Dir: t.GitDir}.ReadOptional(ref)
}

func checkRefName(ref string) error {
	if !strings.HasPrefix(ref, Prefix) || strings.Contains(ref, "..") || strings.HasSuffix(ref, ".lock") || strings.HasSuffix(ref, "/") {
		return fmt.Errorf("refusing to write ref %q outside %s", ref, Prefix)
	}
	return nil
}

func short(o gitstore.Oid) string {
	if o.IsZero() {
		return "nothing"
	}
	return o.String()[:12]
}

// readersLockPath is the file readers lock shared while they read refs and
// writers lock exclusively while they rename them: a reader never sees a
// transaction half renamed. Locks on the file do not queue, so a stream of
// overlapping readers could keep a writer out for good; a writer therefore
// first takes the turnstile beside it, which a new reader passes through
// (takes and drops) before it locks, so readers that come after a waiting
// writer wait for it.
func readersLockPath(gitDir string) string {
	return filepath.Join(gitDir, "bernstein", "refs.lock")
}

func turnstilePath(gitDir string) string {
	return filepath.Join(gitDir, "bernstein", "refs.turnstile")
}

// excludeReaders takes the readers' lock exclusively, behind the turnstile.
// Without the files (a repository this process cannot write to) it returns
// at once.
func (t *Transactor) excludeReaders() func() {
	gate := flockPath(turnstilePath(t.GitDir), syscall.LOCK_EX)
	if t.testHookTurnstile != nil {
		t.testHookTurnstile()
	}
	unlock := flockPath(readersLockPath(t.GitDir), syscall.LOCK_EX)
	return func() {
		unlock()
		gate()
	}
}

// shareWithReaders takes the readers' lock shared, after passing the
// turnstile.
func shareWithReaders(gitDir string) func() {
	flockPath(turnstilePath(gitDir), syscall.LOCK_SH)()
	return flockPath(readersLockPath(gitDir), syscall.LOCK_SH)
}

// flockPath locks path (creating it when it can) and returns the unlock.
func flockPath(path string, how int) func() {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		}
	}
	if err != nil {
		if f, err = os.Open(path); err != nil {
			return func() {}
		}
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	return func() { f.Close() }
}

// Pending is an intent found in a kept pack's .keep file.
type Pending struct {
	Keep   string // the .keep file
	Intent Intent
}

// PendingIntents lists the intents the .keep files of packDir hold. Keep
// files of git's or a user's are not intents and are skipped; an intent
// that does not parse is an error naming its file.
func PendingIntents(packDir string) ([]Pending, error) {
	ents, err := os.ReadDir(packDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Pending
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, "pack-") || !strings.HasSuffix(n, ".keep") {
			continue
		}
		path := filepath.Join(packDir, n)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // finished meanwhile
		}
		if err != nil {
			return nil, err
		}
		in, ok, err := ParseIntent(data)
		if !ok {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, Pending{Keep: path, Intent: in})
	}
	return out, nil
}

// Recover finishes or discards the transaction p describes, which a killed
// writer left. The caller holds the store's writer lock, so no writer of
// bernstein's is live; a lock file holding the intent's new value for its
// ref (or a prefix of it, cut short by the crash) is that dead writer's.
// Locks of anyone else are respected. It reports whether the transaction
// took effect. On success the caller removes the intent; so it may when
// the only error is ErrConflict (someone else moved one of the refs since,
// and finishing would undo their move: everything else was finished).
func (t *Transactor) Recover(p Pending) (bool, error) {
	committed, err := p.Intent.committed(t.current)
	if err != nil {
		return false, err
	}
	us := append([]Update(nil), p.Intent.Updates...)
	Order(us)
	if !committed {
		for _, u := range us {
			t.removeDeadLock(u)
		}
		t.removeDeadPackedLock(us)
		return false, nil
	}
	var locks []*refLock
	var errs []error
	packed := ""
	for _, u := range us {
		cur, err := t.current(u.Ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch cur {
		case u.New:
			t.removeDeadLock(u)
			continue
		case u.Old:
		default:
			t.removeDeadLock(u)
			errs = append(errs, fmt.Errorf("%w: interrupted transaction cannot move %s: it is at %s, neither %s nor %s", ErrConflict, u.Ref, short(cur), short(u.Old), short(u.New)))
			continue
		}
		if err := t.FaultPoint("recovering " + u.Ref); err != nil {
			return true, err
		}
		t.removeDeadLock(u)
		if u.Deletes() && packed == "" {
			// The dead writer's packed-refs.lock goes first; the deletions
			// are done again under a lock of this writer's.
			t.removeDeadPackedLock(us)
			if packed, err = t.lockPacked(); err != nil {
				errs = append(errs, err)
				break
			}
		}
		l, err := t.lock(u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The ref may have moved between the read above and the lock: only
		// a value read under the lock decides.
		if cur, err := t.current(u.Ref); err != nil || cur != u.Old {
			l.abandon()
			errs = append(errs, fmt.Errorf("%w: %s moved while an interrupted transaction was finished", ErrConflict, u.Ref))
			continue
		}
		locks = append(locks, l)
	}
	if len(locks) > 0 {
		err := syncLocks(locks)
		if err == nil && packed != "" {
			err = t.writePackedWithout(packed, us)
		}
		if err != nil {
			for _, l := range locks {
				l.abandon()
			}
			if packed != "" {
				os.Remove(packed)
			}
			return true, err
		}
		if out, err := t.rename(locks, packed); out != Committed {
			return true, err
		}
	} else if packed != "" {
		os.Remove(packed)
	}
	// The dead writer's own renames may not have reached the disk: every
	// ref the intent names has its directory synced before the caller
	// drops the intent, or a power loss could undo a rename with nothing
	// left to redo it.
	if err := syncRefDirsUp(t.GitDir, us); err != nil {
		return true, err
	}
	// ... and the git directory, where a CreatePacked renamed packed-refs.
	if err := gitstore.SyncDir(t.GitDir); err != nil {
		return true, err
	}
	// Conflicts last: a caller that sees only ErrConflict knows everything
	// else was finished.
	var conflicts, others []error
	for _, err := range errs {
		if errors.Is(err, ErrConflict) {
			conflicts = append(conflicts, err)
		} else {
			others = append(others, err)
		}
	}
	if len(others) > 0 {
		return true, errors.Join(others...)
	}
	return true, errors.Join(conflicts...)
}

// syncRefDirsUp syncs the directory of every ref of us and each directory
// above it up to the git directory: a dead writer may have created some of
// them, and nothing says which.
func syncRefDirsUp(gitDir string, us []Update) error {
	dirs := map[string]bool{}
	for _, u := range us {
		for d := filepath.Dir(filepath.Join(gitDir, filepath.FromSlash(u.Ref))); len(d) > len(gitDir); d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	return syncDirs(dirs)
}

// removeDeadLock removes u's lock file when it is a dead writer's: its
// content is the intent's new value, or a prefix of it (a writer killed
// between creating the lock and writing it). A live git's lock is empty,
// too, for the instant between its creation and its write, so a lock
// holding less than the whole value is taken as dead only once it has
// stayed so for deadLockAge.
func (t *Transactor) removeDeadLock(u Update) {
	lock := filepath.Join(t.GitDir, filepath.FromSlash(u.Ref)) + ".lock"
	t.removeLockHolding(lock, func() ([]byte, bool) { return []byte(u.New.String() + "\n"), true })
}

// removeLockHolding removes lock when it holds what want returns (read
// again at each look), or a prefix of it that has stayed so for
// deadLockAge: a writer killed between creating its lock and filling it.
// Anything else in the lock is a live writer's, and stays.
func (t *Transactor) removeLockHolding(lock string, want func() ([]byte, bool)) {
	for {
		data, err := os.ReadFile(lock)
		if err != nil {
			return
		}
		w, ok := want()
		if !ok || !bytes.HasPrefix(w, data) {
			return
		}
		if len(data) < len(w) {
			fi, err := os.Stat(lock)
			if err != nil {
				return
			}
			if age := time.Since(fi.ModTime()); age < deadLockAge {
				if t.testHookYoungLock != nil {
					t.testHookYoungLock(lock)
				}
				time.Sleep(deadLockAge - age)
				continue
			}
		}
		os.Remove(lock)
		return
	}
}

// deadLockAge is how long a lock cut short must have stayed so before it is
// taken as a dead writer's: far longer than any writer takes between
// creating a lock file and writing its value.
const deadLockAge = time.Second

// bootTime is when the system last booted (the zero time where it cannot
// be read).
var bootTime = sync.OnceValue(func() time.Time {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			var sec int64
			if _, err := fmt.Sscan(rest, &sec); err == nil && sec > 0 {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
})

// removeIfBeforeBoot removes the lock file at path if it was last written
// before the system booted, and reports whether it did.
func removeIfBeforeBoot(path string) bool {
	boot := bootTime()
	fi, err := os.Stat(path)
	if boot.IsZero() || err != nil || !fi.ModTime().Before(boot) {
		return false
	}
	return os.Remove(path) == nil
}
