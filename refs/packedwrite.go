package refs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bernstein/bernstein/gitstore"
)

// Creating many refs at once (a clone's or a first fetch's) as loose refs
// costs a file, a lock, a sync and a rename per ref. CreatePacked writes
// them as git clone does instead: into packed-refs, in one rewrite of the
// file under git's own packed-refs.lock, synced before it is renamed into
// place and the git directory synced after. The rename is the commit point
// of all of them: readers (who are held off it, as off the renames of a
// loose transaction) and git see every ref or none.

// ErrPackedBusy: packed-refs.lock stayed someone else's (a git pack-refs or
// gc) beyond the wait; the caller may create the refs loose instead.
var ErrPackedBusy = errors.New("packed-refs is locked by another process")

func packedPath(gitDir string) string     { return filepath.Join(gitDir, "packed-refs") }
func packedLockPath(gitDir string) string { return packedPath(gitDir) + ".lock" }

// CreatePacked creates every ref of updates, each of which must have a zero
// Old (the ref does not exist, loose or packed), in one rewrite of
// packed-refs. As for Apply, the caller holds the store's writer lock and
// has made the transaction's intent durable; Recover finishes or discards
// it, and removes a packed-refs.lock a killed CreatePacked left.
func (t *Transactor) CreatePacked(updates []Update) (Outcome, error) {
	if err := checkCreations(updates); err != nil {
		return NotCommitted, err
	}
	lock, err := t.lockPacked()
	if err != nil {
		return NotCommitted, err
	}
	release := func() { os.Remove(lock) }
	data, err := t.packedWith(updates)
	if err != nil {
		release()
		return NotCommitted, err
	}
	if err := writeSynced(lock, data); err != nil {
		release()
		return NotCommitted, err
	}
	if err := t.FaultPoint("locked"); err != nil {
		return NotCommitted, err
	}
	unblock := t.excludeReaders()
	err = os.Rename(lock, packedPath(t.GitDir))
	unblock()
	if err != nil {
		release()
		return NotCommitted, fmt.Errorf("move packed-refs into place: %w", err)
	}
	if err := t.FaultPoint("renamed 0"); err != nil {
		return CommittedPending, err
	}
	if err := gitstore.SyncDir(t.GitDir); err != nil {
		return CommittedPending, err
	}
	if err := t.FaultPoint("dirs synced"); err != nil {
		return CommittedPending, err
	}
	return Committed, nil
}

// checkCreations refuses updates that are not creations of distinct
// bernstein refs.
func checkCreations(updates []Update) error {
	seen := map[string]bool{}
	for _, u := range updates {
		if err := checkRefName(u.Ref); err != nil {
			return err
		}
		if !u.Old.IsZero() || u.New.IsZero() || seen[u.Ref] {
			return fmt.Errorf("packed creation of %s: not a creation of one ref", u.Ref)
		}
		seen[u.Ref] = true
	}
	return nil
}

// lockPacked creates packed-refs.lock, waiting while someone else holds it
// (ErrPackedBusy past the wait).
func (t *Transactor) lockPacked() (string, error) {
	lock := packedLockPath(t.GitDir)
	deadline := time.Now().Add(t.wait())
	backoff := time.Millisecond
	for {
		f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			f.Close()
			return lock, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if removeIfBeforeBoot(lock) {
			continue
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%w: %s", ErrPackedBusy, lock)
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

// packedWith is packed-refs as it is now with the refs of updates added,
// sorted as git sorts it. A ref that exists already (loose or packed) fails
// it with ErrConflict. The caller holds packed-refs.lock, so the file
// cannot change under it.
func (t *Transactor) packedWith(updates []Update) ([]byte, error) {
	old, err := os.ReadFile(packedPath(t.GitDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, u := range updates {
		_, err := os.Lstat(filepath.Join(t.GitDir, filepath.FromSlash(u.Ref)))
		if err == nil {
			return nil, fmt.Errorf("%w: %s exists", ErrConflict, u.Ref)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return mergePacked(old, updates)
}

// packedEntry is one record of packed-refs with its peeled line, if any.
type packedEntry struct {
	name string
	text []byte // "<oid> <name>\n" and a "^<oid>\n" after it
}

// mergePacked parses packed-refs (git's format: an optional "# pack-refs
// with:" header, "<oid> <name>" records, each optionally followed by a
// "^<oid>" peeled line) and returns it with updates' refs added, records
// sorted by name, the header's traits kept and "sorted" added.
func mergePacked(old []byte, updates []Update) ([]byte, error) {
	traits, es, err := parsePacked(old)
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(es))
	for _, e := range es {
		have[e.name] = true
	}
	for _, u := range updates {
		if have[u.Ref] {
			return nil, fmt.Errorf("%w: %s exists in packed-refs", ErrConflict, u.Ref)
		}
		es = append(es, packedEntry{name: u.Ref, text: []byte(u.New.String() + " " + u.Ref + "\n")})
	}
	return renderPacked(traits, es), nil
}

// parsePacked parses packed-refs into its header's traits and its records.
func parsePacked(old []byte) ([]string, []packedEntry, error) {
	traits := []string{"peeled", "fully-peeled"}
	var es []packedEntry
	lines := bytes.SplitAfter(old, []byte("\n"))
	for i, line := range lines {
		switch {
		case len(line) == 0:
		case i == 0 && line[0] == '#':
			rest, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "# pack-refs with:")
			if ok {
				traits = strings.Fields(rest)
			}
		case line[0] == '^':
			if len(es) == 0 {
				return nil, nil, errors.New("packed-refs: a peeled line before any record")
			}
			es[len(es)-1].text = append(es[len(es)-1].text, withNewline(line)...)
		default:
			rec, err := parsePackedLine(bytes.TrimRight(line, "\n"))
			if err != nil {
				return nil, nil, err
			}
			es = append(es, packedEntry{name: rec.name, text: withNewline(line)})
		}
	}
	return traits, es, nil
}

// renderPacked writes packed-refs of records es (sorted here) under a
// header of traits, "sorted" added.
func renderPacked(traits []string, es []packedEntry) []byte {
	sort.SliceStable(es, func(i, j int) bool { return es[i].name < es[j].name })
	if !containsString(traits, "sorted") {
		traits = append(traits, "sorted")
	}
	var b bytes.Buffer
	b.WriteString("# pack-refs with: " + strings.Join(traits, " ") + " \n")
	for _, e := range es {
		b.Write(e.text)
	}
	return b.Bytes()
}

func withNewline(line []byte) []byte {
	if bytes.HasSuffix(line, []byte("\n")) {
		return line
	}
	return append(append([]byte(nil), line...), '\n')
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// writeSynced writes data to the file at path (which exists, empty) and
// syncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// removeDeadPackedLock removes a packed-refs.lock that a CreatePacked of
// the uncommitted intent us left: its content is what that CreatePacked
// wrote, or a prefix of it (killed while writing). Nobody else writes that:
// packed-refs cannot have changed while the lock stood, and no other
// writer knows the intent's new refs, which do not exist. A lock holding
// less than the whole is taken as dead only once it has stayed so for
// deadLockAge (git writes its own lock right after creating it).
//
// An intent that deletes refs may have left its packed-refs.lock too,
// holding packed-refs without the deleted refs (or a prefix of that).
func (t *Transactor) removeDeadPackedLock(us []Update) {
	if len(deletedRefs(us)) > 0 {
		t.removeLockHolding(packedLockPath(t.GitDir), func() ([]byte, bool) {
			want, err := t.packedWithout(us)
			return want, err == nil
		})
		return
	}
	if checkCreations(us) != nil {
		return
	}
	t.removeLockHolding(packedLockPath(t.GitDir), func() ([]byte, bool) {
		old, err := os.ReadFile(packedPath(t.GitDir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, false
		}
		want, err := mergePacked(old, us)
		return want, err == nil
	})
}
