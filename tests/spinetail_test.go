package tests

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
)

// The entries after the kept spine index's head are kept in a tail beside
// it (verify/spinetail.go, docs/format.md, Derived cache): these tests
// extend the index through it, merge it, and edit, replay and forge it.

// spineTailPath is where the reader keeps the test writer's tail.
func (f *fixture) spineTailPath() string {
	return filepath.Join(f.dir, ".git", "bernstein", "cache", "spine", hex.EncodeToString([]byte("test-writer"))+".v2.tail")
}

// readSpineTail returns the kept tail's MAC line and content.
func (f *fixture) readSpineTail() (string, []byte) {
	f.t.Helper()
	b, err := os.ReadFile(f.spineTailPath())
	if err != nil {
		f.t.Fatalf("no spine tail kept: %v", err)
	}
	line, content, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		f.t.Fatalf("spine tail without a MAC line")
	}
	return string(line), content
}

// writeSpineTail writes content as the kept tail; with the writer's key it
// is MAC'd as the reader's own (a forger holding the key), else it keeps
// line.
func (f *fixture) writeSpineTail(line string, content []byte, withKey bool) {
	f.t.Helper()
	if withKey {
		id, err := keys.Load(f.home)
		if err != nil {
			f.t.Fatal(err)
		}
		line = id.MAC([]byte("bernstein spine index tail v2\ntest-writer\n--\n" + string(content)))
	}
	if err := os.WriteFile(f.spineTailPath(), append([]byte(line+"\n"), content...), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// spineCount is how many entries git shows in the test writer's spine.
func (f *fixture) spineCount() int {
	f.t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(f.git("rev-list", "--count", refs.Spine("test-writer"))))
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// allVerified checks that task reads as many versions as git shows rows in
// its journal, every one verified.
func (f *fixture) allVerified(task, what string) []string {
	f.t.Helper()
	got := f.states(task)
	rows, _ := strconv.Atoi(strings.TrimSpace(f.git("rev-list", "--count", refs.Journal(task))))
	if len(got) != rows {
		f.t.Fatalf("%s: the journal of %s has %d rows; read %v", what, task, rows, got)
	}
	for _, g := range got {
		if !strings.HasSuffix(g, " verified") {
			f.t.Fatalf("%s: %s reads %v", what, task, got)
		}
	}
	return got
}

// TestSpineIndexTailExtends: reads after each new post keep the new entries
// in the tail; the index file itself (its inode, size and content) stays as
// it was until the tail holds 32 entries, when it is written again with
// them and the tail goes. Every read reads what a walk without any kept
// index reads.
func TestSpineIndexTailExtends(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "ST-1", "agent")
	tok2 := f.claimed(s, "ST-2", "agent")
	f.post(s, "ST-1", "k", "agent", tok, report("v1"))
	s.Close()
	f.allVerified("ST-1", "first read")
	n0 := f.spineCount()
	st0, err := os.Stat(f.spineIndexPath())
	if err != nil {
		t.Fatal(err)
	}
	_, idx0 := f.readSpineIndex()
	for i := 1; ; i++ {
		s = f.open()
		if i%2 == 0 {
			f.post(s, "ST-1", "k", "agent", tok, report("v"+strconv.Itoa(i)))
		} else {
			f.post(s, "ST-2", "k", "agent", tok2, report("v"+strconv.Itoa(i)))
		}
		s.Close()
		f.allVerified("ST-1", "read "+strconv.Itoa(i))
		f.allVerified("ST-2", "read "+strconv.Itoa(i))
		added := f.spineCount() - n0
		st, err := os.Stat(f.spineIndexPath())
		if err != nil {
			t.Fatal(err)
		}
		_, idx := f.readSpineIndex()
		head := f.rawOid(refs.Spine("test-writer"))
		if added < 32 {
			if !os.SameFile(st0, st) || st.Size() != st0.Size() || !st.ModTime().Equal(st0.ModTime()) || !bytes.Equal(idx, idx0) {
				t.Fatalf("the index was written again after %d new entries", added)
			}
			if _, tail := f.readSpineTail(); !bytes.Contains(tail, head) {
				t.Fatalf("the tail does not hold the newest entry after %d new entries", added)
			}
			continue
		}
		if os.SameFile(st0, st) || bytes.Count(idx, head) != 2 {
			t.Fatalf("the index was not written again at the head with %d entries in the tail", added)
		}
		if _, err := os.Stat(f.spineTailPath()); !os.IsNotExist(err) {
			t.Fatalf("the tail is still kept after it was merged: %v", err)
		}
		break
	}
	// One more post: a new tail over the merged index.
	s = f.open()
	f.post(s, "ST-1", "j", "agent", tok, report("last"))
	s.Close()
	got1, got2 := f.allVerified("ST-1", "after the merge"), f.allVerified("ST-2", "after the merge")
	f.readSpineTail()
	// A walk without any kept index reads the same.
	if err := os.RemoveAll(filepath.Dir(f.spineIndexPath())); err != nil {
		t.Fatal(err)
	}
	if w1, w2 := f.states("ST-1"), f.states("ST-2"); strings.Join(w1, ",") != strings.Join(got1, ",") || strings.Join(w2, ",") != strings.Join(got2, ",") {
		t.Fatalf("walked: %v %v; from the index and its tail: %v %v", w1, w2, got1, got2)
	}
}

// tailRolledBack makes SB-1 with v1 and SB-2 with one version, reads them
// (the index is kept), posts v2 of SB-1 and reads it (v2's entry is in the
// tail), then moves SB-1's journal back one row with plain git: the spine
// seals v2, which the journal no longer holds.
func tailRolledBack(t *testing.T) (f *fixture, line string, content []byte) {
	f = newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SB-1", "agent")
	tok2 := f.claimed(s, "SB-2", "agent")
	f.post(s, "SB-1", "k", "agent", tok, report("one"))
	f.post(s, "SB-2", "k", "agent", tok2, report("other"))
	s.Close()
	f.allVerified("SB-1", "first read")
	s = f.open()
	f.post(s, "SB-1", "k", "agent", tok, report("two"))
	s.Close()
	f.allVerified("SB-1", "read with v2")
	line, content = f.readSpineTail()
	if !bytes.Contains(content, f.rawOid(refs.Spine("test-writer"))) {
		t.Fatalf("v2's entry is not in the tail")
	}
	f.git("update-ref", refs.Journal("SB-1"), refs.Journal("SB-1")+"~1")
	return f, line, content
}

// TestSpineIndexTailEditedWithoutKey: v2's record in the tail refiled under
// SB-2 without the key: the tail does not authenticate and is not read, and
// the read still finds the spine entry the rolled-back journal lacks.
func TestSpineIndexTailEditedWithoutKey(t *testing.T) {
	f, line, content := tailRolledBack(t)
	f.lacksV2("with the tail as kept")
	edited := replaceOnce(t, content, []byte("\x04SB-1"), []byte("\x04SB-2"))
	f.writeSpineTail(line, edited, false)
	f.lacksV2("with v2's record refiled without the key")
	// The same edit MAC'd with the key is read: what it lists rests on
	// the MAC (docs/format.md, Derived cache), which this checks is what
	// refused the edit above.
	f.writeSpineTail(line, edited, true)
	s := f.open()
	rep, err := s.Artifacts("SB-1")
	s.Close()
	if err != nil || rep.ChainBroken {
		t.Fatalf("the refiled record MAC'd with the key was not read: %v %v", err, rep.ChainBroken)
	}
}

// tailRecords splits a tail into what precedes its records (without their
// count) and its records.
func tailRecords(t *testing.T, b []byte) (prefix []byte, firstAt int, recs [][]byte) {
	t.Helper()
	at := len("bernstein spine tail v2\n")
	str := func() {
		n, w := binary.Uvarint(b[at:])
		at += w + int(n)
	}
	num := func() int64 {
		v, w := binary.Varint(b[at:])
		at += w
		return v
	}
	str()    // tag
	at += 32 // the index's header hash
	firstAt = at
	num() // first broken
	str() // why
	str() // check
	prefix = slices0(b[:at])
	n := num()
	for i := int64(0); i < n; i++ {
		l, w := binary.Uvarint(b[at:])
		recs = append(recs, slices0(b[at+w:at+w+int(l)]))
		at += w + int(l)
	}
	if at != len(b) {
		t.Fatalf("tail of %d bytes read to %d", len(b), at)
	}
	return prefix, firstAt, recs
}

func slices0(b []byte) []byte { return append([]byte(nil), b...) }

// joinTail puts a tail together again, each record at position ord0 on.
func joinTail(prefix []byte, recs [][]byte, ord0 int64) []byte {
	out := binary.AppendVarint(slices0(prefix), int64(len(recs)))
	for i, r := range recs {
		n, w := binary.Uvarint(r)
		_, ow := binary.Varint(r[w+int(n):])
		rec := binary.AppendVarint(slices0(r[:w+int(n)]), ord0+int64(i))
		rec = append(rec, r[w+int(n)+ow:]...)
		out = binary.AppendUvarint(out, uint64(len(rec)))
		out = append(out, rec...)
	}
	return out
}

// recOrd is the chain position a tail record names.
func recOrd(r []byte) int64 {
	n, w := binary.Uvarint(r)
	v, _ := binary.Varint(r[w+int(n):])
	return v
}

// TestSpineIndexTailForgedWithKey: tails MAC'd with the key that lack an
// entry a row names, point an entry to another task's entry's commit, or
// do not follow the index's positions: each is caught (by the entries a
// read decides on, read again from their commits, or by the positions)
// and the spine walked.
func TestSpineIndexTailForgedWithKey(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SF-1", "agent")
	tok2 := f.claimed(s, "SF-2", "agent")
	f.post(s, "SF-1", "k", "agent", tok, report("one"))
	s.Close()
	f.allVerified("SF-1", "first read")
	s = f.open()
	f.post(s, "SF-1", "k", "agent", tok, report("two"))
	f.post(s, "SF-2", "k", "agent", tok2, report("other"))
	s.Close()
	f.allVerified("SF-1", "read with v2")
	line, content := f.readSpineTail()
	index, err := os.ReadFile(f.spineIndexPath())
	if err != nil {
		t.Fatal(err)
	}
	prefix, firstAt, recs := tailRecords(t, content)
	spine := refs.Spine("test-writer")
	v2, other := f.rawOid(spine+"~1"), f.rawOid(spine)
	if len(recs) != 2 || !bytes.Contains(recs[0], v2) || !bytes.Contains(recs[1], other) {
		t.Fatalf("the tail does not hold v2's entry, then SF-2's: %d records", len(recs))
	}
	ord0 := recOrd(recs[0])
	// A break named in the index's entries, which the index does not name.
	broken := binary.AppendVarint(slices0(prefix[:firstAt]), ord0-1)
	broken = append(append(broken, 1, 'x'), 11)
	broken = append(broken, "spine_chain"...)
	const want = "k v1 verified,k v2 verified"
	for _, c := range []struct {
		name    string
		content []byte
	}{
		{"v2's entry missing", joinTail(prefix, recs[1:], ord0)},
		{"v2's entry in SF-2's entry's commit", bytes.Replace(joinTail(prefix, recs, ord0), v2, other, 1)},
		{"positions one off", joinTail(prefix, recs, ord0+1)},
		{"positions one back", joinTail(prefix, recs, ord0-1)},
		{"a break in the index's entries", joinTail(broken, recs, ord0)},
	} {
		if err := os.WriteFile(f.spineIndexPath(), index, 0o644); err != nil {
			t.Fatal(err)
		}
		f.writeSpineTail("", c.content, true)
		if got := strings.Join(f.states("SF-1"), ","); got != want {
			t.Errorf("%s: %s", c.name, got)
		}
		// A tail that did not hold is replaced by what the read walked.
		if now, err := os.ReadFile(f.spineTailPath()); err == nil && bytes.Contains(now, c.content) {
			t.Errorf("%s: the forged tail is still kept", c.name)
		}
	}
	// The index and tail kept at the newer head, put back after the spine
	// was rolled back behind SF-2's entry: the tail's newest entry is not
	// in the spine, which is walked.
	f.git("update-ref", spine, spine+"~1")
	if err := os.WriteFile(f.spineIndexPath(), index, 0o644); err != nil {
		t.Fatal(err)
	}
	f.writeSpineTail(line, content, false)
	if got := strings.Join(f.states("SF-2"), ","); got != "k v1 tampered" {
		t.Fatalf("rolled back, the tail of the newer head: %s", got)
	}
}

// TestSpineIndexTailOfAnotherIndex: a tail kept over an older index, put
// back once the index was merged and written again, is not read (it names
// the older index, and positions the merged index holds).
func TestSpineIndexTailOfAnotherIndex(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SO-1", "agent")
	f.post(s, "SO-1", "k", "agent", tok, report("v1"))
	s.Close()
	f.allVerified("SO-1", "first read")
	s = f.open()
	f.post(s, "SO-1", "k", "agent", tok, report("v2"))
	s.Close()
	f.allVerified("SO-1", "read with v2")
	line, old := f.readSpineTail()
	s = f.open()
	for i := 3; i <= 40; i++ {
		f.post(s, "SO-1", "k", "agent", tok, report("v"+strconv.Itoa(i)))
	}
	s.Close()
	f.allVerified("SO-1", "read that merges")
	if _, err := os.Stat(f.spineTailPath()); !os.IsNotExist(err) {
		t.Fatalf("the tail is still kept after the merge: %v", err)
	}
	st0, _ := os.Stat(f.spineIndexPath())
	for _, c := range []struct {
		name    string
		line    string
		content []byte
		withKey bool
	}{
		{"as kept", line, old, false},
		{"MAC'd with the key", "", old, true},
	} {
		f.writeSpineTail(c.line, c.content, c.withKey)
		f.allVerified("SO-1", "with the older index's tail "+c.name)
		if st, _ := os.Stat(f.spineIndexPath()); !os.SameFile(st0, st) {
			t.Fatalf("with the older index's tail %s, the index was dropped", c.name)
		}
	}
}

// TestSpineIndexRewriteTakesTurns: a reader that finds the tail full
// rewrites the kept index only when no other reader (another process, or
// another goroutine: each takes the lock file afresh) is rewriting it. While
// the lock is held, as by a reader merging a large index, reads over the
// full tail still read every entry, and the index file is left as it was;
// once it is free, the next read merges.
func TestSpineIndexRewriteTakesTurns(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SL-1", "agent")
	f.post(s, "SL-1", "k", "agent", tok, report("v0"))
	s.Close()
	f.allVerified("SL-1", "first read")
	n0 := f.spineCount()
	lockPath := strings.TrimSuffix(f.spineIndexPath(), ".idx") + ".lock"
	var lock *os.File
	for i := 1; lock == nil || f.spineCount()-n0 < 40; i++ {
		if lock == nil && f.spineCount()-n0 >= 30 {
			// Held from here on: the posts that fill the tail past the
			// merge find the index being rewritten by someone else.
			l, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatalf("the lock is held with no reader running: %v", err)
			}
			lock = l
		}
		st0, err := os.Stat(f.spineIndexPath())
		if err != nil {
			t.Fatal(err)
		}
		s = f.open()
		f.post(s, "SL-1", "k", "agent", tok, report("v"+strconv.Itoa(i)))
		s.Close()
		f.allVerified("SL-1", "read "+strconv.Itoa(i))
		st, err := os.Stat(f.spineIndexPath())
		if err != nil {
			t.Fatal(err)
		}
		if lock != nil && !os.SameFile(st0, st) {
			t.Fatalf("the index was written again, %d entries after it, while another reader held its lock", f.spineCount()-n0)
		}
	}
	if _, err := os.Stat(f.spineTailPath()); err != nil {
		t.Fatalf("no tail kept while the index could not be rewritten: %v", err)
	}
	st0, err := os.Stat(f.spineIndexPath())
	if err != nil {
		t.Fatal(err)
	}
	lock.Close()
	f.allVerified("SL-1", "read after the lock's release")
	st, err := os.Stat(f.spineIndexPath())
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(st0, st) {
		t.Fatal("the index was not written again once its lock was free, with a full tail")
	}
	if _, idx := f.readSpineIndex(); !bytes.Contains(idx, f.rawOid(refs.Spine("test-writer"))) {
		t.Fatal("the index written again is not at the spine's head")
	}
	if _, err := os.Stat(f.spineTailPath()); !os.IsNotExist(err) {
		t.Fatalf("the tail is still kept after it was merged: %v", err)
	}
}
