package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// packCounts maps the base of every pack r has mapped to its object count.
func packCounts(r *Repo) map[string]int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := map[string]int{}
	for _, p := range r.packs {
		m[p.name] = p.count
	}
	return m
}

// countObjects returns git's count-objects -v fields.
func countObjects(t testing.TB, gitDir string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, l := range strings.Split(git(t, gitDir, "count-objects", "-v"), "\n") {
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(v)
		m[k] = n
	}
	return m
}

// checkPacksOnDisk verifies every pack in gitDir with git, checks that r maps
// exactly those packs and that no temporary or orphaned file is left, and
// returns the total object count.
func checkPacksOnDisk(t testing.TB, gitDir string, r *Repo) int {
	t.Helper()
	noTempFiles(t, gitDir)
	bases := packBases(t, gitDir)
	have := map[string]bool{}
	total := 0
	for _, b := range bases {
		ids, _, _ := verifyPack(t, gitDir, b)
		total += len(ids)
		have[b] = true
	}
	for _, n := range packFiles(t, gitDir) {
		base := filepath.Join(gitDir, "objects", "pack", strings.TrimSuffix(n, filepath.Ext(n)))
		if !have[base] {
			t.Fatalf("%s is left without its index", n)
		}
	}
	if r != nil {
		mapped := packCounts(r)
		if len(mapped) != len(bases) {
			t.Fatalf("reader maps %d packs, %d on disk", len(mapped), len(bases))
		}
		for b := range mapped {
			if !have[b] {
				t.Fatalf("reader maps %s, which is gone", b)
			}
		}
	}
	return total
}

func TestCompactManySmallPacks(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	var objs []Object
	for i := 0; i < 200; i++ {
		o := blob(fmt.Sprintf("single object %d\n", i))
		objs = append(objs, o)
		if _, err := r.WritePack([]Object{o}); err != nil {
			t.Fatal(err)
		}
	}
	extra, head := reachable(objs)
	if _, err := r.WritePack(extra); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, extra...)
	old := packBases(t, dir)
	if r.PackCount() != 201 || len(old) != 201 {
		t.Fatalf("%d packs mapped, %d on disk; want 201", r.PackCount(), len(old))
	}
	before := openRepo(t, dir) // maps the 201 packs

	n, err := r.Compact(16)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 || r.PackCount() > 16 {
		t.Fatalf("Compact merged %d packs, %d left", n, r.PackCount())
	}
	if got := len(packBases(t, dir)); got != 201-n+1 {
		t.Fatalf("%d packs on disk after merging %d of 201", got, n)
	}
	gone := 0
	for _, b := range old {
		if _, err := os.Stat(b + ".idx"); os.IsNotExist(err) {
			gone++
			if _, err := os.Stat(b + ".pack"); !os.IsNotExist(err) {
				t.Fatalf("%s.pack left behind", b)
			}
		}
	}
	if gone != n {
		t.Fatalf("%d old packs removed, Compact reported %d", gone, n)
	}
	if total := checkPacksOnDisk(t, dir, r); total != len(objs) {
		t.Fatalf("packs hold %d objects, want %d", total, len(objs))
	}
	if c := countObjects(t, dir); c["in-pack"] != len(objs) || c["count"] != 0 || c["packs"] != r.PackCount() {
		t.Fatalf("count-objects: %v", c)
	}
	git(t, dir, "update-ref", "refs/bernstein/journal/t", head.String())
	fsckStrict(t, dir)

	var ids []Oid
	for _, o := range objs {
		ids = append(ids, o.ID)
	}
	want := catBatch(t, dir, ids)
	for _, o := range objs {
		if g := want[o.ID]; g.typ != o.Type || !bytes.Equal(g.data, o.Data) {
			t.Fatalf("git reads %s differently after Compact", o.ID)
		}
	}
	checkReadsLikeGit(t, r, want)
	checkReadsLikeGit(t, openRepo(t, dir), want)
	// A reader opened before the compaction still reads every object from
	// its mappings of the deleted packs.
	if before.PackCount() != 201 {
		t.Fatalf("the earlier reader maps %d packs", before.PackCount())
	}
	checkReadsLikeGit(t, before, want)

	// Nothing more to do.
	if n, err := r.Compact(16); err != nil || n != 0 {
		t.Fatalf("second Compact = %d, %v", n, err)
	}
}

// TestCompactMergedPackEqualsAnInput: when the smaller packs hold only
// copies of objects of a larger one, the merged pack comes out byte for byte
// equal to that larger pack (same name); Compact must not delete it as one
// of the merged inputs.
func TestCompactMergedPackEqualsAnInput(t *testing.T) {
	t.Parallel()
	x, y, z := blob("x\n"), blob("y\n"), blob("z\n")
	for name, packs := range map[string][][]Object{
		"two":   {{x}, {x, y}},
		"three": {{x, y, z}, {x}, {x, y}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := newBare(t)
			r := openRepo(t, dir)
			var all []Object
			for _, p := range packs {
				if _, err := r.WritePack(p); err != nil {
					t.Fatal(err)
				}
				if len(p) > len(all) {
					all = p // the largest pack holds every object
				}
			}
			if r.PackCount() != len(packs) {
				t.Fatalf("%d packs", r.PackCount())
			}
			if n, err := r.Compact(1); err != nil || n != len(packs) {
				t.Fatalf("Compact = %d, %v", n, err)
			}
			for _, rd := range []*Repo{r, openRepo(t, dir)} {
				for _, o := range all {
					if _, data, err := rd.ReadVerified(o.ID); err != nil || !bytes.Equal(data, o.Data) {
						t.Fatalf("after Compact, %q: %v", o.Data, err)
					}
				}
			}
			for _, o := range all {
				if _, err := runGit(dir, nil, nil, "cat-file", "-e", o.ID.String()); err != nil {
					t.Fatal(err)
				}
			}
			if total := checkPacksOnDisk(t, dir, r); total != len(all) || r.PackCount() != 1 {
				t.Fatalf("%d packs hold %d objects, want 1 pack of %d", r.PackCount(), total, len(all))
			}
		})
	}
}

func TestCompactLeavesKeepPacks(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	var objs []Object
	var bases []string
	for i := 0; i < 30; i++ {
		o := blob(fmt.Sprintf("object %d\n", i))
		objs = append(objs, o)
		base, err := r.WritePack([]Object{o})
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, base)
	}
	kept := []string{bases[0], bases[13], bases[29]}
	for _, b := range kept {
		if err := os.WriteFile(b+".keep", []byte("held by the test\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 3; round++ {
		if _, err := r.Compact(4); err != nil {
			t.Fatal(err)
		}
		for _, b := range kept {
			for _, ext := range []string{".idx", ".pack", ".keep"} {
				if _, err := os.Stat(b + ext); err != nil {
					t.Fatalf("round %d: kept pack lost %s: %v", round, ext, err)
				}
			}
		}
	}
	if r.PackCount() != 4 {
		t.Fatalf("%d packs, want the 3 kept and 1 merged", r.PackCount())
	}
	// The kept packs' objects were not copied into the merged pack.
	if total := checkPacksOnDisk(t, dir, r); total != len(objs) {
		t.Fatalf("packs hold %d objects, want %d", total, len(objs))
	}
	var ids []Oid
	for _, o := range objs {
		ids = append(ids, o.ID)
	}
	checkReadsLikeGit(t, openRepo(t, dir), catBatch(t, dir, ids))

	// With more kept packs than the limit, the rest is still merged and the
	// kept ones are still left alone.
	if n, err := r.Compact(2); err != nil || n != 0 {
		t.Fatalf("Compact with a single candidate = %d, %v", n, err)
	}
}

// TestCompactGitDeltaPacks merges packs git made with OFS_DELTA and
// REF_DELTA entries together with packs of our own.
func TestCompactGitDeltaPacks(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	// One pack by repack (OFS_DELTA), one by fast-import, one by
	// pack-objects without --delta-base-offset (REF_DELTA) holding copies
	// of the fast-import pack's objects, and another by fast-import.
	importHistoryTo(t, dir, "refs/heads/main", 30, 5)
	git(t, dir, "repack", "-adfq", "--depth=50", "--window=250")
	importHistoryTo(t, dir, "refs/heads/second", 20, 6)
	list := git(t, dir, "rev-list", "--objects", "refs/heads/second", "--not", "refs/heads/main")
	var in strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
		in.WriteString(strings.Fields(l)[0] + "\n")
	}
	gitIn(t, dir, []byte(in.String()), "pack-objects", "-q", "--window=250", "--depth=50", filepath.Join(dir, "objects", "pack", "pack"))
	importHistoryTo(t, dir, "refs/heads/third", 15, 7)
	gitPacks := packBases(t, dir)
	if len(gitPacks) != 4 {
		t.Fatalf("%d git packs, want 4", len(gitPacks))
	}
	ofs, ref := 0, 0
	for _, b := range gitPacks {
		types := packEntryTypes(t, b)
		ofs += types[packOfsDelta]
		ref += types[packRefDelta]
		t.Logf("%s: %v", filepath.Base(b), types)
	}
	if ofs < 50 || ref < 10 {
		t.Fatalf("git packs hold %d OFS and %d REF deltas; the test needs both", ofs, ref)
	}
	r := openRepo(t, dir)
	mine := []Object{blob("ours 1\n"), blob("ours 2\n")}
	for _, o := range mine {
		if _, err := r.WritePack([]Object{o}); err != nil {
			t.Fatal(err)
		}
	}
	// Our blobs also appear in a commit so that fsck sees them referenced.
	extra, head := reachable(mine)
	if _, err := r.WritePack(extra); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "update-ref", "refs/bernstein/journal/t", head.String())
	ids := allObjectIDs(t, dir)
	want := catBatch(t, dir, ids)
	early := openRepo(t, dir)

	// Each round merges the smallest packs; repeated, it ends in one pack.
	var rounds []int
	for len(rounds) < 10 {
		n, err := r.Compact(1)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		rounds = append(rounds, n)
		checkReadsLikeGit(t, r, want)
	}
	if len(rounds) < 2 || r.PackCount() != 1 {
		t.Fatalf("Compact rounds merged %v packs, %d left; want one pack after several rounds", rounds, r.PackCount())
	}
	t.Logf("rounds merged %v packs", rounds)
	base := packBases(t, dir)[0]
	if total := checkPacksOnDisk(t, dir, r); total != len(want) || idxCount(t, base) != len(want) {
		t.Fatalf("merged pack holds %d objects, want %d", total, len(want))
	}
	fsckStrict(t, dir)
	if got := catBatch(t, dir, ids); len(got) != len(want) {
		t.Fatal("git lost objects")
	} else {
		for id, g := range got {
			if w := want[id]; g.typ != w.typ || !bytes.Equal(g.data, w.data) {
				t.Fatalf("git reads %s differently after Compact", id)
			}
		}
	}
	checkReadsLikeGit(t, openRepo(t, dir), want)
	checkReadsLikeGit(t, r, want)
	checkReadsLikeGit(t, early, want)
	// git itself can repack the merged pack.
	git(t, dir, "repack", "-adq")
	checkReadsLikeGit(t, openRepo(t, dir), want)
}

// TestCompactGeometric writes 300 single-object packs with Compact(16)
// after each write: the pack count stays bounded, no object is lost or
// duplicated, and the objects rewritten by all compactions together stay
// within n·(log2 n + 1) (merging everything each time would be quadratic).
// The same over 2,000 writes, and the ratio, is `make bench`'s (growth).
func TestCompactGeometric(t *testing.T) {
	t.Parallel()
	n, limit := 300, 16
	dir := newBare(t)
	early := openRepo(t, dir) // opened before anything exists
	r := openRepo(t, dir)
	var objs []Object
	rewritten, compactions, maxPacks := 0, 0, 0
	for i := 0; i < n; i++ {
		o := blob(fmt.Sprintf("geometric %d\n", i))
		objs = append(objs, o)
		if _, err := r.WritePack([]Object{o}); err != nil {
			t.Fatal(err)
		}
		pre := packCounts(r)
		m, err := r.Compact(limit)
		if err != nil {
			t.Fatal(err)
		}
		if m > 0 {
			compactions++
			post := packCounts(r)
			if len(post) != len(pre)-m+1 {
				t.Fatalf("write %d: %d packs before, %d merged, %d after", i, len(pre), m, len(post))
			}
			for b, c := range post {
				if _, ok := pre[b]; !ok {
					rewritten += c
				}
			}
		}
		if c := r.PackCount(); c > limit {
			t.Fatalf("write %d: %d packs after Compact(%d)", i, c, limit)
		} else if c > maxPacks {
			maxPacks = c
		}
		if i%50 == 0 {
			if _, data, err := early.Read(o.ID); err != nil || !bytes.Equal(data, o.Data) {
				t.Fatalf("early reader, write %d: %v", i, err)
			}
		}
	}
	bound := int(float64(n) * (math.Log2(float64(n)) + 1))
	t.Logf("%d compactions rewrote %d objects (bound %d); at most %d packs; final sizes %v", compactions, rewritten, bound, maxPacks, packCounts(r))
	if rewritten > bound {
		t.Fatalf("compactions rewrote %d objects for %d writes, more than %d", rewritten, n, bound)
	}
	total := 0
	for _, c := range packCounts(r) {
		total += c
	}
	if total != n {
		t.Fatalf("packs hold %d objects, want %d", total, n)
	}
	if got := checkPacksOnDisk(t, dir, r); got != n {
		t.Fatalf("git counts %d objects in the packs, want %d", got, n)
	}
	if c := countObjects(t, dir); c["in-pack"] != n || c["packs"] != r.PackCount() {
		t.Fatalf("count-objects %v", c)
	}
	fresh := openRepo(t, dir)
	for _, rd := range []*Repo{r, fresh, early} {
		for _, o := range objs {
			if _, data, err := rd.Read(o.ID); err != nil || !bytes.Equal(data, o.Data) {
				t.Fatalf("Read %q: %v", o.Data, err)
			}
		}
	}
	if early.PackCount() != r.PackCount() {
		t.Fatalf("the early reader maps %d packs, the writer %d", early.PackCount(), r.PackCount())
	}
}

// TestCompactReaderOpenedBefore: a reader that mapped the old packs keeps
// reading after they are deleted, and retires them on its next rescan.
func TestCompactReaderOpenedBefore(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	empty := openRepo(t, dir) // sees no pack at all
	w := openRepo(t, dir)
	var objs []Object
	for i := 0; i < 40; i++ {
		o := NewObject(TypeBlob, textBytes(int64(i), 100+i*50))
		objs = append(objs, o)
		if _, err := w.WritePack([]Object{o}); err != nil {
			t.Fatal(err)
		}
	}
	old := packBases(t, dir)
	rd := openRepo(t, dir)
	if rd.PackCount() != 40 {
		t.Fatalf("reader maps %d packs", rd.PackCount())
	}
	if n, err := w.Compact(4); err != nil || n < 37 {
		t.Fatalf("Compact = %d, %v", n, err)
	}
	for _, b := range old {
		if _, err := os.Stat(b + ".idx"); err == nil {
			if _, err := os.Stat(b + ".pack"); err != nil {
				t.Fatalf("%s: index without pack", b)
			}
		}
	}
	if len(packBases(t, dir)) > 4 {
		t.Fatalf("%d packs on disk", len(packBases(t, dir)))
	}
	for _, o := range objs {
		if _, data, err := rd.ReadVerified(o.ID); err != nil || !bytes.Equal(data, o.Data) {
			t.Fatalf("reader opened before Compact: %v", err)
		}
	}
	if rd.PackCount() != 40 {
		t.Fatalf("the reader rescanned (%d packs) though nothing was missing", rd.PackCount())
	}
	// A new object makes it rescan: the deleted packs are retired.
	fresh := blob("after the compaction\n")
	if _, err := w.WritePack([]Object{fresh}); err != nil {
		t.Fatal(err)
	}
	if _, data, err := rd.Read(fresh.ID); err != nil || !bytes.Equal(data, fresh.Data) {
		t.Fatalf("Read after rescan: %v", err)
	}
	checkPacksOnDisk(t, dir, rd)
	for _, rdr := range []*Repo{rd, empty} {
		for _, o := range append(objs, fresh) {
			if _, data, err := rdr.ReadVerified(o.ID); err != nil || !bytes.Equal(data, o.Data) {
				t.Fatalf("read after rescan: %v", err)
			}
		}
	}
	if _, _, err := rd.Read(HashObject(TypeBlob, []byte("never"))); !errors.Is(err, ErrMissing) {
		t.Fatalf("unknown id: %v", err)
	}
}

// TestCompactWhileReading runs readers (one sharing the writer's Repo, one
// with its own) against a writer that compacts after every write. The
// readers read at every step of every write and compaction (the writer's
// fault hook hands them the turn and waits for their reads) and between a
// compaction's deletion of its inputs and the next write.
func TestCompactWhileReading(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	w := openRepo(t, dir)
	other := openRepo(t, dir)
	const n = 150
	objs := make([]Object, n)
	for i := range objs {
		objs[i] = NewObject(TypeBlob, textBytes(int64(i), 200+i))
	}
	var written, reads atomic.Int64
	readers := []*Repo{w, other}
	turn := make([]chan bool, len(readers)) // true: read once; false: stop
	done := make(chan error, len(readers))
	for j, rd := range readers {
		turn[j] = make(chan bool)
		go func() {
			for i := j; <-turn[j]; i += 7919 {
				k := written.Load()
				if k == 0 {
					done <- nil
					continue
				}
				o := objs[i%int(k)]
				_, data, err := rd.ReadVerified(o.ID)
				switch {
				case err != nil || !bytes.Equal(data, o.Data):
					err = fmt.Errorf("read %s while compacting: %v", o.ID, err)
				case !rd.Has(o.ID):
					err = fmt.Errorf("Has(%s) false while compacting", o.ID)
				default:
					reads.Add(1)
				}
				done <- err
			}
		}()
	}
	// readNow lets every reader read once, beside the writer stopped where
	// it is.
	readNow := func() {
		for _, c := range turn {
			c <- true
		}
		for range readers {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	w.FaultHook = func(string) error { readNow(); return nil }
	for i, o := range objs {
		if _, err := w.WritePack([]Object{o}); err != nil {
			t.Fatal(err)
		}
		written.Store(int64(i + 1))
		if _, err := w.Compact(8); err != nil {
			t.Fatal(err)
		}
		readNow()
	}
	w.FaultHook = nil
	for _, c := range turn {
		c <- false
	}
	if reads.Load() < 1000 {
		t.Fatalf("only %d reads ran during the writes and compactions", reads.Load())
	}
	if total := checkPacksOnDisk(t, dir, w); total != n {
		t.Fatalf("packs hold %d objects", total)
	}
}

func TestCompactNothingToDo(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	if n, err := r.Compact(16); err != nil || n != 0 {
		t.Fatalf("Compact of an empty store = %d, %v", n, err)
	}
	for i := 0; i < 5; i++ {
		if _, err := r.WritePack([]Object{blob(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	before := strings.Join(packFiles(t, dir), ",")
	if n, err := r.Compact(5); err != nil || n != 0 {
		t.Fatalf("Compact at the limit = %d, %v", n, err)
	}
	if after := strings.Join(packFiles(t, dir), ","); after != before {
		t.Fatal("Compact at the limit changed the pack directory")
	}
	if n, err := r.Compact(4); err != nil || n != 5 || r.PackCount() != 1 {
		t.Fatalf("Compact over the limit = %d, %v, %d packs", n, err, r.PackCount())
	}
	if !regexp.MustCompile(`^pack-[0-9a-f]{40}$`).MatchString(filepath.Base(packBases(t, dir)[0])) {
		t.Fatalf("merged pack named %s", packBases(t, dir)[0])
	}
}
