package gitstore

// go-git is a second, independent reader of what the store writes: it
// re-indexes every pack written or compacted here with its own pack parser
// and index encoder, which must produce our .idx byte for byte, and it reads
// every object back through its own storage of the repository. It is a test
// dependency only: nothing outside the _test.go files imports it, so it is
// not linked into bernstein.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// goGitIndex parses the pack at base with go-git and returns the version 2
// index go-git encodes for it, and the ids it lists.
func goGitIndex(t testing.TB, base string) ([]byte, []Oid) {
	t.Helper()
	pack, err := os.ReadFile(base + ".pack")
	if err != nil {
		t.Fatal(err)
	}
	w := new(idxfile.Writer)
	p, err := packfile.NewParser(packfile.NewScanner(bytes.NewReader(pack)), w)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := p.Parse()
	if err != nil {
		t.Fatalf("go-git parses %s: %v", filepath.Base(base), err)
	}
	if "pack-"+sum.String() != filepath.Base(base) {
		t.Fatalf("go-git reads the checksum of %s as %s", filepath.Base(base), sum)
	}
	idx, err := w.Index()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := idxfile.NewEncoder(&out).Encode(idx); err != nil {
		t.Fatal(err)
	}
	it, err := idx.Entries()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var ids []Oid
	for {
		e, err := it.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, Oid(e.Hash))
	}
	return out.Bytes(), ids
}

// goGitStorage opens gitDir with go-git's filesystem storage.
func goGitStorage(t testing.TB, gitDir string, c cache.Object) *filesystem.Storage {
	t.Helper()
	st := filesystem.NewStorage(osfs.New(gitDir), c)
	t.Cleanup(func() { st.Close() })
	return st
}

// goGitRead reads id through st.
func goGitRead(st storer.EncodedObjectStorer, id Oid) (ObjectType, []byte, error) {
	o, err := st.EncodedObject(plumbing.AnyObject, plumbing.Hash(id))
	if err != nil {
		return 0, nil, err
	}
	rd, err := o.Reader()
	if err != nil {
		return 0, nil, err
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return 0, nil, err
	}
	if int64(len(data)) != o.Size() {
		return 0, nil, fmt.Errorf("%s: read %d bytes of %d", id, len(data), o.Size())
	}
	return ObjectType(o.Type()), data, nil
}

// checkGoGitAgrees checks go-git indexes each pack in bases exactly as we
// did, lists exactly the objects of want among them all, and reads every
// one of them with the same type and bytes.
func checkGoGitAgrees(t testing.TB, gitDir string, bases []string, want map[Oid]gitObject) {
	t.Helper()
	seen := map[Oid]bool{}
	for _, base := range bases {
		ours, err := os.ReadFile(base + ".idx")
		if err != nil {
			t.Fatal(err)
		}
		theirs, ids := goGitIndex(t, base)
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("%s: go-git's index (%d bytes) differs from ours (%d bytes) at byte %d",
				filepath.Base(base), len(theirs), len(ours), firstDiff(ours, theirs))
		}
		for _, id := range ids {
			if _, ok := want[id]; !ok {
				t.Fatalf("%s holds %s, which was not written", filepath.Base(base), id)
			}
			seen[id] = true
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("the packs hold %d of the %d objects", len(seen), len(want))
	}
	st := goGitStorage(t, gitDir, cache.NewObjectLRUDefault())
	for id, w := range want {
		typ, data, err := goGitRead(st, id)
		if err != nil {
			t.Fatalf("go-git reads %s: %v", id, err)
		}
		if typ != w.typ || !bytes.Equal(data, w.data) {
			t.Fatalf("go-git reads %s as %s of %d bytes, want %s of %d bytes", id, typ, len(data), w.typ, len(w.data))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// variedObjects returns blobs large and small (empty, incompressible,
// compressible, over the compression threshold and under it), trees,
// commits, an annotated tag, and many small blobs so that every fan-out
// bucket is used; the list repeats some objects.
func variedObjects(t testing.TB) []Object {
	objs, head := sampleObjects(t)
	tag := NewObject(TypeTag, []byte("object "+head.String()+"\ntype commit\ntag v1\ntagger Ada Author <ada@example.com> 1700000000 +0000\n\nfirst release\n"))
	objs = append(objs, tag,
		NewObject(TypeBlob, textBytes(9, compressAbove-1)),
		NewObject(TypeBlob, textBytes(9, compressAbove)),
		NewObject(TypeBlob, randomBytes(t, 0xffff)),
		NewObject(TypeBlob, randomBytes(t, 0x10000)))
	for i := range 600 {
		objs = append(objs, blob(fmt.Sprintf("small object %d\n", i)))
	}
	return append(objs, objs[1], objs[len(objs)/2], tag)
}

func wantOf(objs []Object) map[Oid]gitObject {
	m := map[Oid]gitObject{}
	for _, o := range objs {
		m[o.ID] = gitObject{o.Type, o.Data}
	}
	return m
}

func TestGoGitReadsWrittenPacks(t *testing.T) {
	t.Parallel()
	for _, kept := range []bool{false, true} {
		t.Run(fmt.Sprintf("kept=%v", kept), func(t *testing.T) {
			t.Parallel()
			dir := newBare(t)
			r := openRepo(t, dir)
			objs := variedObjects(t)
			var bases []string
			// One pack of everything, and packs of one object each (the
			// smallest packs a post writes), a duplicate among them.
			for _, batch := range append([][]Object{objs}, []Object{objs[0]}, []Object{objs[7]}, []Object{objs[0]}) {
				var base string
				var err error
				if kept {
					base, err = r.WritePackKept(batch, "bernstein go-git")
				} else {
					base, err = r.WritePack(batch)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(bases, base) {
					bases = append(bases, base)
				}
				checkGoGitAgrees(t, dir, []string{base}, wantOf(batch))
			}
			if len(bases) != 3 {
				t.Fatalf("%d distinct packs, want 3", len(bases))
			}
			checkGoGitAgrees(t, dir, bases, wantOf(objs))
		})
	}
}

// TestGoGitReadsCompactedPacks compacts many packs of our own (overlapping)
// and a pack git made with delta chains, down to one, and has go-git check
// every pack each compaction produced.
func TestGoGitReadsCompactedPacks(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	importHistory(t, dir, 40, 5)
	git(t, dir, "repack", "-adfq", "--depth=50", "--window=250")
	if _, deltas, _ := verifyPack(t, dir, packBases(t, dir)[0]); deltas == 0 {
		t.Fatal("git's pack has no deltas")
	}
	r := openRepo(t, dir)
	objs := variedObjects(t)
	for i := 0; i < len(objs); i += 13 {
		// Every fourth pack repeats objects of the one before.
		batch := objs[i:min(i+13, len(objs))]
		if i%52 == 0 && i > 0 {
			batch = append(batch, objs[i-5:i]...)
		}
		if _, err := r.WritePack(batch); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.WritePackKept(objs[:3], "bernstein in flight"); err != nil {
		t.Fatal(err)
	}
	if r.PackCount() < 40 {
		t.Fatalf("only %d packs", r.PackCount())
	}
	produced := 0
	compact := func() {
		for {
			before := packBases(t, dir)
			n, err := r.Compact(2)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			for _, b := range packBases(t, dir) {
				if slices.Contains(before, b) {
					continue
				}
				produced++
				ours, err := os.ReadFile(b + ".idx")
				if err != nil {
					t.Fatal(err)
				}
				if theirs, _ := goGitIndex(t, b); !bytes.Equal(ours, theirs) {
					t.Fatalf("go-git's index of %s differs from ours at byte %d", filepath.Base(b), firstDiff(ours, theirs))
				}
			}
		}
	}
	ids := allObjectIDs(t, dir) // before any compaction
	compact()
	// More small packs, merged with the pack the first compaction made.
	for i := range 20 {
		later := blob(fmt.Sprintf("later %d\n", i))
		if _, err := r.WritePack([]Object{later, objs[i]}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, later.ID)
	}
	compact()
	want := catBatch(t, dir, ids)
	bases := packBases(t, dir)
	if produced < 2 || len(bases) != 2 {
		t.Fatalf("%d packs produced, %d left (want the merged one and the kept one)", produced, len(bases))
	}
	checkGoGitAgrees(t, dir, bases, want)
	checkReadsLikeGit(t, openRepo(t, dir), want)
}

// postHistory writes n posts as a bernstein store does (a small blob, a tree
// holding it, a commit on the previous one), packs of 50 posts compacted as
// the store compacts them, and returns the ids in the order a walk from the
// newest commit reads them.
func postHistory(b testing.TB, dir string, n int) []Oid {
	r := openRepo(b, dir)
	var walk []Oid
	var parent []Oid
	var batch []Object
	for i := range n {
		bl := NewObject(TypeBlob, textBytes(int64(i), 150+i%200))
		tr := NewObject(TypeTree, EncodeTree([]TreeEntry{{Mode: ModeFile, Name: fmt.Sprintf("v%d.json", i), ID: bl.ID}}))
		c := commitOver(tr.ID, fmt.Sprintf("row %d\n\n{\"index\":%d}\n", i, i), parent...)
		parent = []Oid{c.ID}
		batch = append(batch, bl, tr, c)
		walk = append(walk, bl.ID, tr.ID, c.ID)
		if len(batch) == 150 || i == n-1 {
			if _, err := r.WritePack(batch); err != nil {
				b.Fatal(err)
			}
			batch = nil
			if _, err := r.Compact(16); err != nil {
				b.Fatal(err)
			}
		}
	}
	git(b, dir, "update-ref", "refs/bernstein/journal/bench", parent[0].String())
	slices.Reverse(walk)
	return walk
}

// BenchmarkGoGitRead compares go-git's object reads with ours on one
// repository of 3,000 posts (9,000 small objects): as bernstein wrote and
// compacted it, and after `git repack -adf` (git's deltas). "walk" opens
// the store and reads every object once, as a chain walk or `audit verify`
// does; "warm" reads from a store kept open (go-git with its default
// 96 MiB object cache, which then holds every object). go-git runs with its
// default options and with KeepDescriptors.
func BenchmarkGoGitRead(b *testing.B) {
	const posts = 3000
	for _, layout := range []string{"bernstein", "git-repacked"} {
		dir := newBare(b)
		walk := postHistory(b, dir, posts)
		if layout == "git-repacked" {
			git(b, dir, "repack", "-adfq")
		}
		readers := []struct {
			name string
			open func() (read func(Oid) error, close func())
		}{
			{"bernstein", func() (func(Oid) error, func()) {
				r, err := Open(filepath.Join(dir, "objects"))
				if err != nil {
					b.Fatal(err)
				}
				return func(id Oid) error { _, _, err := r.Read(id); return err }, func() { r.Close() }
			}},
			{"go-git", func() (func(Oid) error, func()) {
				st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
				return func(id Oid) error { _, _, err := goGitRead(st, id); return err }, func() { st.Close() }
			}},
			{"go-git-keepfd", func() (func(Oid) error, func()) {
				// Without KeepDescriptors go-git opens the pack file anew
				// for every object it reads.
				st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: true})
				return func(id Oid) error { _, _, err := goGitRead(st, id); return err }, func() { st.Close() }
			}},
		}
		for _, rd := range readers {
			b.Run(layout+"/walk/"+rd.name, func(b *testing.B) {
				for b.Loop() {
					read, done := rd.open()
					for _, id := range walk {
						if err := read(id); err != nil {
							b.Fatal(err)
						}
					}
					done()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(walk)), "ns/object")
			})
			b.Run(layout+"/warm/"+rd.name, func(b *testing.B) {
				read, done := rd.open()
				defer done()
				i := 0
				for b.Loop() {
					if err := read(walk[i%len(walk)]); err != nil {
						b.Fatal(err)
					}
					i += 7
				}
			})
		}
	}
}

// TestGoGitIgnoresGitRefLock records why go-git does not write refs here:
// with git's lock file on a ref (as a running `git update-ref` holds it),
// git refuses to move the ref, and go-git's filesystem storage moves it
// anyway. go-git writes the loose ref file in place under flock(2) instead
// of through <ref>.lock and a rename, so it neither sees nor takes git's
// lock (see also go-git issue 2399). Should go-git start refusing, the test
// skips and says docs/gitstore.md needs updating.
func TestGoGitIgnoresGitRefLock(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	a, b := commitOver(EmptyTree, "a\n"), commitOver(EmptyTree, "b\n")
	if _, err := r.WritePack([]Object{NewObject(TypeTree, nil), a, b}); err != nil {
		t.Fatal(err)
	}
	const ref = "refs/bernstein/journal/t"
	git(t, dir, "update-ref", ref, a.ID.String())
	lock := filepath.Join(dir, ref+".lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runGit(dir, nil, nil, "update-ref", ref, b.ID.String(), a.ID.String()); err == nil {
		t.Fatal("git moved a ref whose lock is held")
	}
	st := goGitStorage(t, dir, cache.NewObjectLRUDefault())
	err := st.CheckAndSetReference(
		plumbing.NewHashReference(plumbing.ReferenceName(ref), plumbing.Hash(b.ID)),
		plumbing.NewHashReference(plumbing.ReferenceName(ref), plumbing.Hash(a.ID)))
	if err != nil {
		t.Skipf("go-git now refuses a locked ref (%v): update docs/gitstore.md", err)
	}
	if got := strings.TrimSpace(git(t, dir, "rev-parse", ref)); got != b.ID.String() {
		t.Fatalf("ref at %s after go-git's update", got)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("git's lock file: %v", err)
	}
}
