package refs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSnapshotReadsLooseRefsAsGit: a snapshot walks each directory of
// loose refs in the directory's own order (no directory is sorted) and
// reads each file without a stat; what it reads is what git reads: every
// ref, nested ones too, a file longer than one object id read whole (and
// read past, a task ref that is not an id), lock files left out, and the
// names it lists sorted.
func TestSnapshotReadsLooseRefsAsGit(t *testing.T) {
	dir, c := newRepo(t, 2)
	var refs []string
	for i := 0; i < 300; i++ {
		refs = append(refs, LedgerPrefix+"T-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"-"+itoa(i))
	}
	refs = append(refs, SpinePrefix+"w1", SpinePrefix+"nested/deeper/w2")
	for i, ref := range refs {
		git(t, dir, "update-ref", ref, c[i%2].String())
	}
	// A lock file beside the refs (a writer's update in flight).
	if err := os.WriteFile(filepath.Join(dir, "refs", "bernstein", "ledger", "T-a-0.lock"), []byte(c[1].String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A task ref whose loose file is far longer than an object id, and is
	// none: git ignores it.
	long := JournalPrefix + "L-1"
	if err := os.MkdirAll(filepath.Join(dir, "refs", "bernstein", "journal"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(long)), []byte(strings.Repeat("not an object id ", 40)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for n, o := range gitRefs(t, dir, Prefix) {
		if strings.HasPrefix(n, "refs/") {
			want[n] = o
		}
	}
	if len(want) != len(refs) {
		t.Fatalf("git reads %d refs, want %d", len(want), len(refs))
	}
	s, err := Reader{Dir: dir}.Snapshot(Prefix)
	if err != nil {
		t.Fatal(err)
	}
	vals, names, err := s.List(Prefix)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for n, o := range vals {
		got[n] = o.String()
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot reads %d refs, git %d; first differences: %v", len(got), len(want), firstDiff(got, want))
	}
	if !sort.StringsAreSorted(names) || len(names) != len(want) {
		t.Fatalf("names: %d, sorted %v", len(names), sort.StringsAreSorted(names))
	}
	if _, err := s.ReadOptional(long); !errors.As(err, new(*BadRefError)) {
		t.Fatalf("read of %s: %v, want a *BadRefError", long, err)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func firstDiff(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, k+" "+v+" != "+b[k])
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k+" missing")
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = out[:5]
	}
	return out
}

// TestSnapshotDerivedOnce: what a snapshot derives is made once per key
// and kept with it; an error is not kept.
func TestSnapshotDerivedOnce(t *testing.T) {
	dir, _ := newRepo(t, 1)
	s, err := Reader{Dir: dir}.Snapshot(Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var made atomic.Int32
	mk := func() (any, error) { made.Add(1); return new(int), nil }
	a, _ := s.Derived("k", mk)
	b, _ := s.Derived("k", mk)
	if a != b || made.Load() != 1 {
		t.Fatalf("made %d times, same value %v", made.Load(), a == b)
	}
	if _, err := s.Derived("e", func() (any, error) { return nil, errors.New("no") }); err == nil {
		t.Fatal("an error was not returned")
	}
	if v, err := s.Derived("e", mk); err != nil || v == nil || made.Load() != 2 {
		t.Fatalf("after an error: %v %v, made %d", v, err, made.Load())
	}
	s2, _ := Reader{Dir: dir}.Snapshot(Prefix)
	if c, _ := s2.Derived("k", mk); c == a {
		t.Fatal("another snapshot shares what one derived")
	}
}

// TestSnapshotPastDirectoryRemovedWhileRead: git pack-refs removes a
// directory of loose refs it emptied; one removed after a snapshot opened
// it and before it read its entries (getdents then fails with ENOENT) holds
// no loose ref, and the snapshot reads the refs from packed-refs, read
// before, with no error.
func TestSnapshotPastDirectoryRemovedWhileRead(t *testing.T) {
	dir, c := newRepo(t, 1)
	ref := JournalPrefix + "T-1"
	git(t, dir, "update-ref", ref, c[0].String())
	git(t, dir, "pack-refs", "--all", "--no-prune")
	journal := filepath.Join(dir, "refs", "bernstein", "journal")
	var removed atomic.Bool
	dirOpened = func(d string) {
		if d == journal && !removed.Load() {
			if err := os.RemoveAll(d); err != nil {
				t.Error(err)
			}
			removed.Store(true)
		}
	}
	defer func() { dirOpened = nil }()
	snap, err := (Reader{Dir: dir}).Snapshot(Prefix)
	if err != nil {
		t.Fatalf("a snapshot over a directory removed while it was read: %v", err)
	}
	if !removed.Load() {
		t.Fatal("the walk never opened the journal directory")
	}
	if got, err := snap.ReadOptional(ref); err != nil || got != c[0] {
		t.Fatalf("%s read %s, %v; want %s from packed-refs", ref, got, err, c[0])
	}
}
