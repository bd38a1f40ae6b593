package gitstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/internal/systrace"
)

// sampleObjects returns blobs of many sizes (empty, tiny, just over 64 KiB,
// incompressible, 1 MiB+, compressible 3 MiB), a subtree, a root tree and
// two commits, all reachable from the last commit.
func sampleObjects(t testing.TB) (objs []Object, head Oid) {
	blobs := []Object{
		blob(""),
		blob("hello\n"),
		NewObject(TypeBlob, []byte{0, 0, 0, 1, 0xff, 0xfe}),
		NewObject(TypeBlob, textBytes(2, 64<<10+1)),
		NewObject(TypeBlob, randomBytes(t, 70000)),
		NewObject(TypeBlob, randomBytes(t, 1<<20+123)),
		NewObject(TypeBlob, textBytes(3, 3<<20)),
	}
	sub := NewObject(TypeTree, EncodeTree([]TreeEntry{
		{Mode: ModeFile, Name: "hello.txt", ID: blobs[1].ID},
		{Mode: ModeFile, Name: "empty", ID: blobs[0].ID},
	}))
	rootEntries := []TreeEntry{{Mode: ModeTree, Name: "dir", ID: sub.ID}, {Mode: ModeFile, Name: "dir.txt", ID: blobs[2].ID}}
	for i, b := range blobs[3:] {
		rootEntries = append(rootEntries, TreeEntry{Mode: ModeFile, Name: fmt.Sprintf("big-%d", i), ID: b.ID})
	}
	root := NewObject(TypeTree, EncodeTree(rootEntries))
	c1 := commitOver(sub.ID, "first\n")
	c2 := commitOver(root.ID, "second\n\n{\"index\":1}\n", c1.ID)
	objs = append(blobs, sub, root, c1, c2)
	return objs, c2.ID
}

func TestWritePackGitAccepts(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	objs, head := sampleObjects(t)
	// Duplicates in one call are written once.
	withDups := append(append([]Object{}, objs...), objs[1], objs[len(objs)-2], objs[5])
	base, err := r.WritePack(withDups)
	if err != nil {
		t.Fatal(err)
	}
	packDir := filepath.Join(dir, "objects", "pack")
	if filepath.Dir(base) != packDir || !regexp.MustCompile(`^pack-[0-9a-f]{40}$`).MatchString(filepath.Base(base)) {
		t.Fatalf("WritePack returned %q", base)
	}
	files := packFiles(t, dir)
	if want := []string{filepath.Base(base) + ".idx", filepath.Base(base) + ".pack"}; strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("pack directory holds %q, want %q", files, want)
	}
	noTempFiles(t, dir)

	// The pack is named after its trailer, which the index repeats.
	pack, err := os.ReadFile(base + ".pack")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := os.ReadFile(base + ".idx")
	if err != nil {
		t.Fatal(err)
	}
	trailer := pack[len(pack)-20:]
	if "pack-"+hex.EncodeToString(trailer) != filepath.Base(base) {
		t.Fatalf("pack name %s, trailer %x", filepath.Base(base), trailer)
	}
	if !bytes.Equal(idx[len(idx)-40:len(idx)-20], trailer) {
		t.Fatal("index does not carry the pack checksum")
	}
	if n := binary.BigEndian.Uint32(pack[8:12]); int(n) != len(objs) {
		t.Fatalf("pack header counts %d objects, want %d", n, len(objs))
	}
	if n := idxCount(t, base); n != len(objs) {
		t.Fatalf("index counts %d objects, want %d", n, len(objs))
	}

	// git accepts the pack and lists exactly the objects.
	ids, _, _ := verifyPack(t, dir, base)
	want := map[Oid]bool{}
	for _, o := range objs {
		want[o.ID] = true
	}
	if len(ids) != len(want) {
		t.Fatalf("verify-pack lists %d objects, want %d", len(ids), len(want))
	}
	for _, id := range ids {
		if !want[id] {
			t.Fatalf("verify-pack lists unexpected %s", id)
		}
	}
	// git returns identical bytes for every object.
	var all []Oid
	for _, o := range objs {
		all = append(all, o.ID)
	}
	got := catBatch(t, dir, all)
	for _, o := range objs {
		if g := got[o.ID]; g.typ != o.Type || !bytes.Equal(g.data, o.Data) {
			t.Fatalf("git cat-file %s: %s of %d bytes, wrote %s of %d bytes", o.ID, g.typ, len(g.data), o.Type, len(o.Data))
		}
	}
	if p := git(t, dir, "cat-file", "-p", objs[1].ID.String()); p != "hello\n" {
		t.Fatalf("cat-file -p = %q", p)
	}
	if c := countObjects(t, dir); c["count"] != 0 || c["in-pack"] != len(objs) || c["packs"] != 1 {
		t.Fatalf("count-objects: %v", c)
	}
	// Referenced by a ref, the objects pass fsck --strict.
	git(t, dir, "update-ref", "refs/bernstein/journal/t", head.String())
	fsckStrict(t, dir)
	if out := git(t, dir, "rev-list", "--objects", "--all"); strings.Count(out, "\n") != len(objs) {
		t.Fatalf("rev-list --objects --all sees %d objects, want %d:\n%s", strings.Count(out, "\n"), len(objs), out)
	}

	// The writer and a fresh reader both read everything back.
	checkReadsLikeGit(t, r, got)
	checkReadsLikeGit(t, openRepo(t, dir), got)
}

func TestWritePackDeduplicates(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	a, b := blob("a\n"), blob("b\n")
	base, err := r.WritePack([]Object{a, b, a, a, b, NewObject(TypeBlob, []byte("a\n"))})
	if err != nil {
		t.Fatal(err)
	}
	ids, _, _ := verifyPack(t, dir, base)
	if len(ids) != 2 || idxCount(t, base) != 2 {
		t.Fatalf("verify-pack lists %d objects, index %d; want 2", len(ids), idxCount(t, base))
	}
	pack, _ := os.ReadFile(base + ".pack")
	if binary.BigEndian.Uint32(pack[8:12]) != 2 {
		t.Fatalf("pack header counts %d", binary.BigEndian.Uint32(pack[8:12]))
	}
	checkReadsLikeGit(t, openRepo(t, dir), catBatch(t, dir, []Oid{a.ID, b.ID}))

	// Writing the same objects again yields the same pack, not a second one.
	base2, err := r.WritePack([]Object{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if base2 != base || r.PackCount() != 1 || len(packBases(t, dir)) != 1 {
		t.Fatalf("rewrite: %s vs %s, %d packs mapped, %d on disk", base2, base, r.PackCount(), len(packBases(t, dir)))
	}
	noTempFiles(t, dir)
}

func TestWritePackEmpty(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	base, err := r.WritePack(nil)
	if err != nil || base != "" {
		t.Fatalf("WritePack(nil) = %q, %v", base, err)
	}
	if n := len(packFiles(t, dir)); n != 0 || r.PackCount() != 0 {
		t.Fatalf("WritePack(nil) left %d files, %d packs", n, r.PackCount())
	}
}

// TestWritePackManyObjects fills every fan-out bucket so that the index
// layout and the lookup are both exercised.
func TestWritePackManyObjects(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	var objs []Object
	for i := 0; i < 5000; i++ {
		objs = append(objs, blob(fmt.Sprintf("object number %d\n", i)))
	}
	base, err := r.WritePack(objs)
	if err != nil {
		t.Fatal(err)
	}
	if ids, _, _ := verifyPack(t, dir, base); len(ids) != len(objs) {
		t.Fatalf("verify-pack lists %d", len(ids))
	}
	check := git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype) %(objectsize)")
	if strings.Count(check, " blob ") != len(objs) {
		t.Fatalf("git sees %d blobs", strings.Count(check, " blob "))
	}
	fresh := openRepo(t, dir)
	for _, o := range objs {
		if !fresh.Has(o.ID) {
			t.Fatalf("Has(%s) = false", o.ID)
		}
		typ, data, err := fresh.Read(o.ID)
		if err != nil || typ != TypeBlob || !bytes.Equal(data, o.Data) {
			t.Fatalf("Read(%s) = %s %q %v", o.ID, typ, data, err)
		}
		// A neighbour id in the same fan-out bucket is absent.
		n := o.ID
		n[19] ^= 0x01
		if fresh.Has(n) {
			t.Fatalf("Has(%s) = true for an id never written", n)
		}
	}
	// Sorted order of the index names equals git's view.
	var ids []string
	for _, o := range objs {
		ids = append(ids, o.ID.String())
	}
	sort.Strings(ids)
	var gitIDs []string
	for _, l := range strings.Split(strings.TrimSpace(check), "\n") {
		gitIDs = append(gitIDs, strings.Fields(l)[0])
	}
	if strings.Join(ids, ",") != strings.Join(gitIDs, ",") {
		t.Fatal("git lists a different set of objects")
	}
}

// TestWritePackThenGitRepacks checks git can take over the packs: after
// `git gc` the objects are in git's own pack and still read back.
func TestWritePackThenGitRepacks(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	objs, head := sampleObjects(t)
	for _, o := range objs {
		if _, err := r.WritePack([]Object{o}); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "update-ref", "refs/bernstein/journal/t", head.String())
	before := packBases(t, dir)
	git(t, dir, "gc", "--prune=now", "-q")
	after := packBases(t, dir)
	if len(after) != 1 || len(before) != len(objs) {
		t.Fatalf("packs before gc %d, after %d", len(before), len(after))
	}
	var ids []Oid
	for _, o := range objs {
		ids = append(ids, o.ID)
	}
	want := catBatch(t, dir, ids)
	// The old reader still serves from its mappings of the deleted packs.
	checkReadsLikeGit(t, r, want)
	// A miss makes it rescan: it retires the deleted packs and maps git's.
	if _, _, err := r.Read(HashObject(TypeBlob, []byte("never written"))); !errors.Is(err, ErrMissing) {
		t.Fatalf("Read of an unknown id: %v", err)
	}
	if r.PackCount() != 1 {
		t.Fatalf("reader maps %d packs after gc and a rescan, want 1", r.PackCount())
	}
	checkReadsLikeGit(t, r, want)
}

// The durability test runs a writer under strace in a child process (the
// test binary itself, see TestMain) and checks the order of the system
// calls: each file synced before it is renamed into place, the directory
// synced after, the .pack before the .idx, and a compaction's old packs
// removed only after the merged pack is durable.

const childEnv = "GITSTORE_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(runChild(v))
	}
	os.Exit(m.Run())
}

func runChild(spec string) int {
	mode, dir, _ := strings.Cut(spec, ":")
	r, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer r.Close()
	switch mode {
	case "write":
		base, err := r.WritePack([]Object{blob("durable one\n"), blob("durable two\n")})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(base)
	case "writekept":
		base, err := r.WritePackKept([]Object{blob("kept one\n"), blob("kept two\n")}, "bernstein durable")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(base)
	case "compact":
		n, err := r.Compact(1)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(n)
	default:
		return 2
	}
	return 0
}

// traceChild runs the child under strace and returns its system calls.
func traceChild(t *testing.T, spec string) ([]systrace.Event, string) {
	t.Helper()
	return systrace.Child(t, childEnv+"="+spec)
}

// checkDurableWrite checks the system calls that put base in place (and its
// keep file, if kept) and returns the index of the directory sync that made
// it durable.
func checkDurableWrite(t *testing.T, evs []systrace.Event, base string, kept bool) int {
	t.Helper()
	find := func(call, path string, from int) int { return systrace.Find(evs, call, path, from) }
	renamed := map[string]int{}
	exts := []string{".pack", ".idx"}
	if kept {
		exts = append(exts, ".keep")
	}
	for _, ext := range exts {
		ri := find("rename", base+ext, 0)
		if ri < 0 {
			t.Fatalf("%s%s was not renamed into place: %+v", base, ext, evs)
		}
		tmp := evs[ri].From
		if !strings.HasPrefix(filepath.Base(tmp), tmpPrefix) || filepath.Dir(tmp) != filepath.Join(filepath.Dir(filepath.Dir(base)), tempDirName) {
			t.Fatalf("%s%s renamed from %s", base, ext, tmp)
		}
		if si := find("fsync", tmp, 0); si < 0 || si > ri {
			t.Fatalf("%s not synced before its rename to %s%s (sync at %d, rename at %d)", tmp, base, ext, si, ri)
		}
		renamed[ext] = ri
	}
	if renamed[".pack"] > renamed[".idx"] {
		t.Fatal("the .idx was renamed into place before the .pack")
	}
	if kept && renamed[".keep"] > renamed[".pack"] {
		t.Fatal("the .pack was renamed into place before its .keep")
	}
	if !kept && find("rename", base+".keep", 0) >= 0 {
		t.Fatal("an unkept write renamed a .keep into place")
	}
	di := find("fsync", filepath.Dir(base), renamed[".idx"])
	if di < 0 {
		t.Fatalf("pack directory not synced after the renames: %+v", evs)
	}
	return di
}

func TestWritePackIsDurable(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"write", "writekept"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := newBare(t)
			evs, out := traceChild(t, mode+":"+filepath.Join(dir, "objects"))
			base := strings.TrimSpace(out)
			kept := mode == "writekept"
			checkDurableWrite(t, evs, base, kept)
			noTempFiles(t, dir)
			if ids, _, _ := verifyPack(t, dir, base); len(ids) != 2 {
				t.Fatalf("verify-pack lists %d objects", len(ids))
			}
			if b, err := os.ReadFile(base + ".keep"); kept != (err == nil) || kept && string(b) != "bernstein durable\n" {
				t.Fatalf("keep file: %q, %v", b, err)
			}
		})
	}
}

func TestCompactIsDurable(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	var old []string
	for i := 0; i < 3; i++ {
		base, err := r.WritePack([]Object{blob(fmt.Sprintf("pack %d\n", i))})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, base)
	}
	evs, out := traceChild(t, "compact:"+filepath.Join(dir, "objects"))
	if strings.TrimSpace(out) != "3" {
		t.Fatalf("Compact merged %q packs, want 3", out)
	}
	bases := packBases(t, dir)
	if len(bases) != 1 {
		t.Fatalf("%d packs after Compact", len(bases))
	}
	di := checkDurableWrite(t, evs, bases[0], false)
	for _, b := range old {
		ii, pi := -1, -1
		for i, e := range evs {
			if e.Call == "unlink" && e.Path == b+".idx" {
				ii = i
			}
			if e.Call == "unlink" && e.Path == b+".pack" {
				pi = i
			}
		}
		if ii < 0 || pi < 0 {
			t.Fatalf("old pack %s not removed: %+v", b, evs)
		}
		if ii < di || pi < di {
			t.Fatalf("old pack %s removed before the merged pack was durable", b)
		}
		if ii > pi {
			t.Fatalf("old pack %s: .pack removed before its .idx", b)
		}
	}
	noTempFiles(t, dir)
}
