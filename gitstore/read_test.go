package gitstore

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	mrand "math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// importHistory feeds `git fast-import` a history of commits revisions long
// in which a few files change a little each time (so that git finds deltas
// between their versions and between the trees), plus annotated tags.
func importHistory(t testing.TB, gitDir string, commits int, seed int64) {
	importHistoryTo(t, gitDir, "refs/heads/main", commits, seed)
}

// importHistoryTo is importHistory onto branch ref.
func importHistoryTo(t testing.TB, gitDir, ref string, commits int, seed int64) {
	t.Helper()
	rng := mrand.New(mrand.NewSource(seed))
	lines := make([]string, 300)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d: %s", i, textBytes(int64(i)+seed, 40+rng.Intn(40)))
	}
	bin := randomBytesSeeded(seed, 20000)
	var s bytes.Buffer
	data := func(b []byte) {
		fmt.Fprintf(&s, "data %d\n", len(b))
		s.Write(b)
		s.WriteByte('\n')
	}
	for c := 1; c <= commits; c++ {
		for k := 0; k < 3; k++ {
			lines[rng.Intn(len(lines))] = fmt.Sprintf("changed in %d: %s", c, textBytes(int64(c*7+k), 30))
		}
		lines = append(lines, fmt.Sprintf("appended in commit %d", c))
		for k := 0; k < 4; k++ {
			bin[rng.Intn(len(bin))] = byte(rng.Intn(256))
		}
		fmt.Fprintf(&s, "commit %s\nmark :%d\n", ref, c)
		fmt.Fprintf(&s, "author Ada Author <ada@example.com> %d +0000\n", 1700000000+c)
		fmt.Fprintf(&s, "committer Cy Committer <cy@example.com> %d +0000\n", 1700000000+c)
		data([]byte(fmt.Sprintf("commit %d\n\nchanges a few lines\n", c)))
		fmt.Fprintf(&s, "M 100644 inline doc.txt\n")
		data([]byte(strings.Join(lines, "\n") + "\n"))
		fmt.Fprintf(&s, "M 100644 inline src/deep/dir/data.bin\n")
		data(bin)
		fmt.Fprintf(&s, "M 100644 inline src/deep/dir/n%03d.txt\n", c%17)
		data([]byte(fmt.Sprintf("file %d version %d\n%s", c%17, c, textBytes(int64(c%17), 2000))))
		if c%10 == 0 {
			fmt.Fprintf(&s, "tag %s-v%d\nfrom :%d\ntagger Cy Committer <cy@example.com> %d +0000\n", filepath.Base(ref), c, c, 1700000000+c)
			data([]byte(fmt.Sprintf("release %d\n", c)))
		}
	}
	gitIn(t, gitDir, s.Bytes(), "fast-import", "--quiet")
}

// smallHistory imports a few revisions of one small file: a pack of a few
// KiB whose blobs and trees are deltas.
func smallHistory(t testing.TB, gitDir string, commits int) {
	t.Helper()
	lines := make([]string, 40)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %02d of a small file that changes", i)
	}
	var s bytes.Buffer
	for c := 1; c <= commits; c++ {
		lines[(c*7)%len(lines)] = fmt.Sprintf("line changed by commit %d", c)
		body := strings.Join(lines, "\n") + "\n"
		msg := fmt.Sprintf("commit %d\n", c)
		fmt.Fprintf(&s, "commit refs/heads/main\ncommitter C <c@example.com> %d +0000\ndata %d\n%s\n", 1700000000+c, len(msg), msg)
		fmt.Fprintf(&s, "M 100644 inline a/file.txt\ndata %d\n%s\n", len(body), body)
	}
	gitIn(t, gitDir, s.Bytes(), "fast-import", "--quiet")
}

func randomBytesSeeded(seed int64, n int) []byte {
	b := make([]byte, n)
	mrand.New(mrand.NewSource(seed)).Read(b)
	return b
}

// packEntryTypes counts the entry types of a pack as stored (deltas not
// resolved), read through the package's own index parser.
func packEntryTypes(t testing.TB, base string) map[int]int {
	t.Helper()
	p, err := openPack(base)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	types := map[int]int{}
	for i := 0; i < p.count; i++ {
		off, err := p.offsetAt(i)
		if err != nil {
			t.Fatal(err)
		}
		typ, _, _, _, _, err := p.entryHeader(off)
		if err != nil {
			t.Fatal(err)
		}
		types[typ]++
	}
	return types
}

func TestReadGitPacksWithDeltas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		repack []string
		ref    bool // expect REF_DELTA rather than OFS_DELTA entries
	}{
		{"repack-adf", []string{"repack", "-adfq", "--depth=50", "--window=250"}, false},
		{"gc-aggressive", []string{"gc", "--aggressive", "--prune=now", "-q"}, false},
		{"ref-delta", []string{"-c", "repack.useDeltaBaseOffset=false", "repack", "-adfq", "--depth=50", "--window=250"}, true},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := newBare(t)
			importHistory(t, dir, 60, 1)
			git(t, dir, tc.repack...)
			bases := packBases(t, dir)
			if len(bases) != 1 {
				t.Fatalf("%d packs after repack", len(bases))
			}
			_, deltas, depth := verifyPack(t, dir, bases[0])
			if deltas < 100 || depth < 10 {
				t.Fatalf("git made only %d deltas of depth %d; the test needs long chains", deltas, depth)
			}
			types := packEntryTypes(t, bases[0])
			if tc.ref && (types[packRefDelta] == 0 || types[packOfsDelta] != 0) {
				t.Fatalf("entry types %v: want REF_DELTA only", types)
			}
			if !tc.ref && (types[packOfsDelta] == 0 || types[packRefDelta] != 0) {
				t.Fatalf("entry types %v: want OFS_DELTA only", types)
			}
			if types[int(TypeTag)] == 0 {
				t.Fatalf("entry types %v: no annotated tags", types)
			}
			ids := allObjectIDs(t, dir)
			want := catBatch(t, dir, ids)
			if len(want) < 200 {
				t.Fatalf("only %d objects", len(want))
			}
			r := openRepo(t, dir)
			checkReadsLikeGit(t, r, want)
			// A second pass is served partly from the delta cache.
			checkReadsLikeGit(t, r, want)
			// Reading in another order from a cold reader gives the same.
			cold := openRepo(t, dir)
			for i := len(ids) - 1; i >= 0; i-- {
				typ, data, err := cold.Read(ids[i])
				if err != nil || typ != want[ids[i]].typ || !bytes.Equal(data, want[ids[i]].data) {
					t.Fatalf("cold Read %s: %v", ids[i], err)
				}
			}
			// Walking the history through the parsers gives git's view.
			head := mustOid(t, git(t, dir, "rev-parse", "refs/heads/main"))
			n := 0
			for id := head; !id.IsZero(); n++ {
				data, err := r.ReadType(id, TypeCommit)
				if err != nil {
					t.Fatal(err)
				}
				c, _, err := ParseCommit(data)
				if err != nil {
					t.Fatal(err)
				}
				tree, err := r.ReadType(c.Tree, TypeTree)
				if err != nil {
					t.Fatal(err)
				}
				es, err := ParseTree(tree)
				if err != nil || !bytes.Equal(EncodeTree(es), tree) {
					t.Fatalf("tree %s does not round-trip: %v", c.Tree, err)
				}
				id = ZeroOid
				if len(c.Parents) > 0 {
					id = c.Parents[0]
				}
			}
			if n != 60 {
				t.Fatalf("walked %d commits, want 60", n)
			}
		})
	}
}

// TestReadReturnsPrivateBytes checks that a caller who modifies what Read
// returned does not change what the next Read returns (delta results are
// cached).
func TestReadReturnsPrivateBytes(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	importHistory(t, dir, 12, 2)
	git(t, dir, "repack", "-adfq", "--depth=50", "--window=250")
	want := catBatch(t, dir, allObjectIDs(t, dir))
	r := openRepo(t, dir)
	for id, g := range want {
		_, first, err := r.Read(id)
		if err != nil {
			t.Fatal(err)
		}
		for i := range first {
			first[i] ^= 0xff
		}
		_, second, err := r.ReadVerified(id)
		if err != nil || !bytes.Equal(second, g.data) {
			t.Fatalf("%s: after the caller modified a Read result, the next read returns other bytes (%v)", id, err)
		}
	}
}

func TestReadLooseObjects(t *testing.T) {
	t.Parallel()
	work := newWork(t)
	for i := 0; i < 8; i++ {
		if err := os.MkdirAll(filepath.Join(work, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "sub", fmt.Sprintf("f%d.txt", i%3)), textBytes(int64(i), 500+i*1000), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "top.bin"), randomBytesSeeded(int64(i), 3000), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, work, "add", "-A")
		git(t, work, "commit", "-q", "-m", fmt.Sprintf("commit %d", i))
	}
	git(t, work, "tag", "-a", "v1", "-m", "annotated")
	gitDir := filepath.Join(work, ".git")
	if n := len(packBases(t, gitDir)); n != 0 {
		t.Fatalf("%d packs; the test wants loose objects only", n)
	}
	want := catBatch(t, gitDir, allObjectIDs(t, gitDir))
	if len(want) < 30 {
		t.Fatalf("only %d objects", len(want))
	}
	r := openRepo(t, gitDir)
	checkReadsLikeGit(t, r, want)
	if r.PackCount() != 0 {
		t.Fatalf("PackCount = %d", r.PackCount())
	}
	tag := mustOid(t, git(t, work, "rev-parse", "v1"))
	if typ, _, err := r.Read(tag); err != nil || typ != TypeTag {
		t.Fatalf("tag: %s %v", typ, err)
	}
}

func TestReadAlternates(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	base := filepath.Join(root, "base")
	git(t, root, "init", "-q", "-b", "main", base)
	baseGit := filepath.Join(base, ".git")
	importHistory(t, baseGit, 20, 3)
	git(t, baseGit, "repack", "-adq")
	// Some base objects stay loose.
	gitIn(t, baseGit, []byte("loose in base\n"), "hash-object", "-w", "--stdin")

	clone := filepath.Join(root, "clone")
	git(t, root, "clone", "-q", "--shared", base, clone)
	cloneGit := filepath.Join(clone, ".git")
	if b, err := os.ReadFile(filepath.Join(cloneGit, "objects", "info", "alternates")); err != nil || !strings.Contains(string(b), baseGit) {
		t.Fatalf("clone --shared wrote no alternates: %q %v", b, err)
	}
	if n := len(packBases(t, cloneGit)); n != 0 {
		t.Fatalf("the shared clone has %d packs of its own", n)
	}
	// The clone adds objects of its own, loose and packed.
	if err := os.WriteFile(filepath.Join(clone, "new.txt"), []byte("only in the clone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, clone, "add", "new.txt")
	git(t, clone, "commit", "-q", "-m", "clone commit")
	own := mustOid(t, gitIn(t, cloneGit, []byte("packed in clone\n"), "hash-object", "-w", "--stdin"))
	gitIn(t, cloneGit, []byte(own.String()+"\n"), "pack-objects", "-q", filepath.Join(cloneGit, "objects", "pack", "pack"))
	git(t, cloneGit, "prune-packed")

	ids := allObjectIDs(t, cloneGit)
	want := catBatch(t, cloneGit, ids)
	baseIDs := allObjectIDs(t, baseGit)
	if len(want) <= len(baseIDs) {
		t.Fatalf("clone sees %d objects, base %d", len(want), len(baseIDs))
	}
	r := openRepo(t, cloneGit)
	checkReadsLikeGit(t, r, want)
	// A reader of the clone without alternates would miss the base objects.
	baseOnly := 0
	for _, id := range baseIDs {
		if _, err := os.Stat(filepath.Join(cloneGit, "objects", id.String()[:2], id.String()[2:])); err == nil {
			continue
		}
		baseOnly++
	}
	if baseOnly < len(baseIDs) {
		t.Fatalf("only %d of %d base objects are outside the clone", baseOnly, len(baseIDs))
	}

	// A relative alternates entry, resolved against the objects directory,
	// and a chain of two alternates.
	rel := filepath.Join(root, "rel")
	git(t, root, "init", "-q", "--bare", rel)
	if err := os.WriteFile(filepath.Join(rel, "objects", "info", "alternates"), []byte("# comment\n\n../../clone/.git/objects\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	relIDs := allObjectIDs(t, rel)
	if len(relIDs) != len(ids) {
		t.Fatalf("git sees %d objects through the relative alternate, want %d", len(relIDs), len(ids))
	}
	checkReadsLikeGit(t, openRepo(t, rel), want)
	if _, _, err := openRepo(t, rel).Read(HashObject(TypeBlob, []byte("nowhere"))); !errors.Is(err, ErrMissing) {
		t.Fatalf("unknown id through alternates: %v", err)
	}

	// An alternate that does not exist is an error at Open, as in git.
	broken := filepath.Join(root, "broken")
	git(t, root, "init", "-q", "--bare", broken)
	if err := os.WriteFile(filepath.Join(broken, "objects", "info", "alternates"), []byte(filepath.Join(root, "gone", "objects")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := Open(filepath.Join(broken, "objects")); err == nil {
		r.Close()
		t.Fatal("Open accepted a missing alternate")
	}
}

func TestReadMissing(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	if _, err := r.WritePack([]Object{blob("present\n")}); err != nil {
		t.Fatal(err)
	}
	id := HashObject(TypeBlob, []byte("absent\n"))
	if _, _, err := r.Read(id); !errors.Is(err, ErrMissing) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("Read: %v", err)
	}
	if _, _, err := r.ReadVerified(id); !errors.Is(err, ErrMissing) {
		t.Fatalf("ReadVerified: %v", err)
	}
	if _, err := r.ReadType(id, TypeBlob); !errors.Is(err, ErrMissing) {
		t.Fatalf("ReadType: %v", err)
	}
	if r.Has(id) || r.Has(ZeroOid) {
		t.Fatal("Has is true for an absent id")
	}
	if r.HasEmptyTree() {
		t.Fatal("HasEmptyTree is true before the empty tree is stored")
	}
	// ReadType of the wrong type is corrupt, not missing.
	present := HashObject(TypeBlob, []byte("present\n"))
	if _, err := r.ReadType(present, TypeTree); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadType of a blob as a tree: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "no-such-dir")); err == nil {
		t.Fatal("Open of a missing directory succeeded")
	}
	if _, err := Open(filepath.Join(dir, "HEAD")); err == nil {
		t.Fatal("Open of a file succeeded")
	}
}

// TestReadSeesObjectsAddedAfterOpen: objects that other writers add after
// Open (loose by git, a pack by git, a pack by another Repo) are found.
func TestReadSeesObjectsAddedAfterOpen(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	loose := HashObject(TypeBlob, []byte("loose by git\n"))
	byGitRead := HashObject(TypeBlob, []byte("packed by git, read first\n"))
	byGitHas := HashObject(TypeBlob, []byte("packed by git, Has first\n"))
	other := blob("written by another Repo\n")
	for _, id := range []Oid{loose, byGitRead, byGitHas, other.ID} {
		if r.Has(id) {
			t.Fatalf("Has(%s) before it exists", id)
		}
		if _, _, err := r.Read(id); !errors.Is(err, ErrMissing) {
			t.Fatalf("Read(%s) before it exists: %v", id, err)
		}
	}
	if r.PackCount() != 0 {
		t.Fatalf("PackCount = %d", r.PackCount())
	}

	// A loose object written by git.
	if got := mustOid(t, gitIn(t, dir, []byte("loose by git\n"), "hash-object", "-w", "--stdin")); got != loose {
		t.Fatal("hash mismatch")
	}
	if _, data, err := r.Read(loose); err != nil || string(data) != "loose by git\n" || !r.Has(loose) {
		t.Fatalf("loose: %q %v", data, err)
	}

	// Two packs written by git pack-objects, the loose copies pruned.
	for _, s := range []string{"packed by git, read first\n", "packed by git, Has first\n"} {
		id := mustOid(t, gitIn(t, dir, []byte(s), "hash-object", "-w", "--stdin"))
		gitIn(t, dir, []byte(id.String()+"\n"), "pack-objects", "-q", filepath.Join(dir, "objects", "pack", "pack"))
	}
	git(t, dir, "prune-packed")
	if _, err := os.Stat(filepath.Join(dir, "objects", byGitRead.String()[:2], byGitRead.String()[2:])); !os.IsNotExist(err) {
		t.Fatalf("the loose copy is still there: %v", err)
	}
	if _, data, err := r.Read(byGitRead); err != nil || string(data) != "packed by git, read first\n" {
		t.Fatalf("pack by git, Read: %q %v", data, err)
	}
	if r.PackCount() != 2 {
		t.Fatalf("PackCount after the rescan = %d, want 2", r.PackCount())
	}
	// The second git pack was mapped by the rescan of that Read; a third
	// pack, made now, can only be discovered by the rescan inside Has.
	if !r.Has(byGitHas) {
		t.Fatal("Has: pack by git not found")
	}
	third := mustOid(t, gitIn(t, dir, []byte("third, Has first\n"), "hash-object", "-w", "--stdin"))
	gitIn(t, dir, []byte(third.String()+"\n"), "pack-objects", "-q", filepath.Join(dir, "objects", "pack", "pack"))
	git(t, dir, "prune-packed")
	if !r.Has(third) {
		t.Fatal("Has: a pack added after the last scan is not found")
	}
	if r.PackCount() != 3 {
		t.Fatalf("PackCount = %d, want 3", r.PackCount())
	}

	// A pack written by a second Repo on the same directory.
	w, err := Open(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WritePack([]Object{other}); err != nil {
		t.Fatal(err)
	}
	if !r.Has(other.ID) {
		t.Fatal("Has: pack by another Repo not found")
	}
	if typ, data, err := r.ReadVerified(other.ID); err != nil || typ != TypeBlob || !bytes.Equal(data, other.Data) {
		t.Fatalf("ReadVerified: %v", err)
	}
	more := blob("second write by the other Repo\n")
	if _, err := w.WritePack([]Object{more}); err != nil {
		t.Fatal(err)
	}
	if typ, data, err := r.Read(more.ID); err != nil || typ != TypeBlob || !bytes.Equal(data, more.Data) {
		t.Fatalf("Read: %v", err)
	}
	if r.HasEmptyTree() {
		t.Fatal("HasEmptyTree before it is written")
	}
	if _, err := w.WritePack([]Object{NewObject(TypeTree, nil)}); err != nil {
		t.Fatal(err)
	}
	if !r.HasEmptyTree() || !r.HasEmptyTree() {
		t.Fatal("HasEmptyTree after another Repo wrote it")
	}
}

// zlibOf compresses b.
func zlibOf(b []byte) []byte {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(b)
	w.Close()
	return z.Bytes()
}

func TestReadVerifiedCorruptLoose(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	const original = "the original content\n"
	id := mustOid(t, gitIn(t, dir, []byte(original), "hash-object", "-w", "--stdin"))
	path := filepath.Join(dir, "objects", id.String()[:2], id.String()[2:])
	replace := func(b []byte) {
		t.Helper()
		os.Chmod(path, 0o644)
		if err := os.WriteFile(path, b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	r := openRepo(t, dir)
	if _, data, err := r.ReadVerified(id); err != nil || string(data) != original {
		t.Fatalf("before corruption: %q %v", data, err)
	}

	// Another valid zlib stream of a well-formed blob: decodes, wrong id.
	replace(zlibOf([]byte("blob 9\x00imposter\n")))
	if _, err := runGit(dir, nil, nil, "fsck", "--full"); err == nil {
		t.Fatal("git fsck does not see the corruption; the test proves nothing")
	}
	typ, data, err := r.Read(id)
	if err != nil || typ != TypeBlob || string(data) != "imposter\n" {
		t.Fatalf("Read (unverified) = %s %q %v", typ, data, err)
	}
	if _, data, err := r.ReadVerified(id); !errors.Is(err, ErrCorrupt) || data != nil {
		t.Fatalf("ReadVerified of a replaced loose object = %q, %v; want ErrCorrupt", data, err)
	}
	// The same stream under another type also fails ReadType.
	replace(zlibOf([]byte("tree 0\x00")))
	if _, err := r.ReadType(id, TypeBlob); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadType of a blob id holding a tree: %v", err)
	}
	if _, _, err := r.ReadVerified(id); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadVerified: %v", err)
	}

	// Undecodable forms are corrupt already for Read.
	full := zlibOf([]byte("blob 21\x00" + original))
	for name, b := range map[string][]byte{
		"not zlib":       []byte("garbage, not a zlib stream"),
		"truncated":      full[:len(full)/2],
		"size too large": zlibOf([]byte("blob 99\x00" + original)),
		"no header nul":  zlibOf([]byte("blob 21 " + original)),
		"unknown type":   zlibOf([]byte("bolb 21\x00" + original)),
		"bad size":       zlibOf([]byte("blob x1\x00" + original)),
		"negative size":  zlibOf([]byte("blob -1\x00" + original)),
		"no space":       zlibOf([]byte("blob\x00" + original)),
		"empty file":     {},
	} {
		replace(b)
		if _, _, err := r.Read(id); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Read = %v, want ErrCorrupt", name, err)
		}
		if _, _, err := r.ReadVerified(id); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: ReadVerified = %v, want ErrCorrupt", name, err)
		}
	}
	// Restored, it reads again.
	replace(full)
	if _, data, err := r.ReadVerified(id); err != nil || string(data) != original {
		t.Fatalf("after restoring: %q %v", data, err)
	}
}

// corruptPackObjects writes a pack of objects whose compressed forms hold
// stored (raw) and Huffman-coded blocks.
func corruptPackObjects(t testing.TB) []Object {
	objs := []Object{
		NewObject(TypeBlob, randomBytesSeeded(7, 700)), // stored block: a flip changes data silently
		NewObject(TypeBlob, textBytes(8, 900)),
		blob("small\n"),
	}
	tree := NewObject(TypeTree, EncodeTree([]TreeEntry{{ModeFile, "r", objs[0].ID}, {ModeFile, "t", objs[1].ID}, {ModeFile, "s", objs[2].ID}}))
	return append(objs, tree, commitOver(tree.ID, "corrupt me\n"))
}

func TestReadVerifiedCorruptPack(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	w := openRepo(t, dir)
	objs := corruptPackObjects(t)
	base, err := w.WritePack(objs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := openPack(base)
	if err != nil {
		t.Fatal(err)
	}
	off, err := p.offsetAt(p.find(objs[0].ID))
	p.close()
	if err != nil {
		t.Fatal(err)
	}
	pack, err := os.ReadFile(base + ".pack")
	if err != nil {
		t.Fatal(err)
	}
	// Flip one byte in the middle of the random blob's compressed data.
	pack[off+350] ^= 0x20
	os.Chmod(base+".pack", 0o644)
	if err := os.WriteFile(base+".pack", pack, 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := runGit(dir, nil, nil, "verify-pack", base+".idx"); err == nil {
		t.Fatal("git verify-pack accepts the corrupted pack; the test proves nothing")
	}
	r := openRepo(t, dir)
	typ, data, err := r.Read(objs[0].ID)
	if err == nil && bytes.Equal(data, objs[0].Data) {
		t.Fatal("Read returned the original bytes from a corrupted entry")
	}
	if err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read: %v, want ErrCorrupt", err)
	}
	t.Logf("unverified Read of the flipped entry: %s %d bytes, err %v", typ, len(data), err)
	if _, data, err := r.ReadVerified(objs[0].ID); !errors.Is(err, ErrCorrupt) || data != nil {
		t.Fatalf("ReadVerified = %d bytes, %v; want ErrCorrupt", len(data), err)
	}
	// The other entries are intact.
	for _, o := range objs[1:] {
		if _, data, err := r.ReadVerified(o.ID); err != nil || !bytes.Equal(data, o.Data) {
			t.Fatalf("intact %s: %v", o.ID, err)
		}
	}
}

// flipAll flips, one at a time, one bit of every byte of file (bit pos%8
// when mask is 0, else the bits of mask) and checks
// that a fresh reader never panics and that ReadVerified returns either the
// original bytes or an error of the allowed kinds. It returns how often
// Read returned wrong bytes without an error (which ReadVerified caught).
func flipAll(t *testing.T, gitDir, file string, mask byte, want map[Oid]gitObject, allowed func(pos int, err error) bool) int {
	t.Helper()
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(file, 0o644)
	defer os.WriteFile(file, orig, 0o444)
	silent := 0
	buf := append([]byte{}, orig...)
	for pos := range orig {
		if strings.HasSuffix(file, ".idx") && pos >= 8+16 && pos < 8+256*4-16 && pos%4 != 0 {
			// In the middle of the fan-out table only the high byte of each
			// entry is flipped (to keep the test fast).
			continue
		}
		copy(buf, orig)
		if mask == 0 {
			buf[pos] ^= 1 << (pos % 8)
		} else {
			buf[pos] ^= mask
		}
		if err := os.WriteFile(file, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Fatalf("%s: flipping byte %d panics: %v", filepath.Base(file), pos, v)
				}
			}()
			r, err := Open(filepath.Join(gitDir, "objects"))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for id, g := range want {
				typ, data, err := r.Read(id)
				if err == nil && (typ != g.typ || !bytes.Equal(data, g.data)) {
					silent++
				}
				typ, data, err = r.ReadVerified(id)
				if err == nil {
					if typ != g.typ || !bytes.Equal(data, g.data) {
						t.Fatalf("%s: flipping byte %d: ReadVerified(%s) returned wrong data without an error", filepath.Base(file), pos, id)
					}
					continue
				}
				if !allowed(pos, err) {
					t.Fatalf("%s: flipping byte %d: ReadVerified(%s): %v", filepath.Base(file), pos, id, err)
				}
			}
		}()
	}
	return silent
}

// TestReadCorruptPackEveryByte flips every byte of a pack written here and
// of a pack with deltas written by git, and every byte of their indexes.
func TestReadCorruptPackEveryByte(t *testing.T) {
	t.Parallel()
	// In the pack header a flip makes the pack unusable: the objects go missing.
	packRule := func(pos int, err error) bool {
		return errors.Is(err, ErrCorrupt) || pos < 12 && errors.Is(err, ErrMissing)
	}
	// A flipped index byte may hide an object or point elsewhere.
	idxRule := func(pos int, err error) bool { return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrMissing) }

	t.Run("own", func(t *testing.T) {
		t.Parallel()
		dir := newBare(t)
		objs := corruptPackObjects(t)
		base, err := openRepo(t, dir).WritePack(objs)
		if err != nil {
			t.Fatal(err)
		}
		var ids []Oid
		for _, o := range objs {
			ids = append(ids, o.ID)
		}
		want := catBatch(t, dir, ids)
		silent := flipAll(t, dir, base+".pack", 0, want, packRule)
		if silent == 0 {
			t.Fatal("no flip changed the data silently; expected stored-block flips to do so")
		}
		t.Logf("%d flips returned wrong bytes from Read, all caught by ReadVerified", silent)
		flipAll(t, dir, base+".idx", 0, want, idxRule)
	})
	t.Run("git-deltas", func(t *testing.T) {
		t.Parallel()
		dir := newBare(t)
		smallHistory(t, dir, 4)
		git(t, dir, "repack", "-adfq", "--depth=50", "--window=250")
		base := packBases(t, dir)[0]
		if types := packEntryTypes(t, base); types[packOfsDelta] == 0 {
			t.Fatalf("no deltas: %v", types)
		}
		want := catBatch(t, dir, allObjectIDs(t, dir))
		t.Logf("pack of %d objects, %d bytes", len(want), fileSize(t, base+".pack"))
		flipAll(t, dir, base+".pack", 0, want, packRule)
		flipAll(t, dir, base+".idx", 0x80, want, idxRule)
	})
}

func fileSize(t testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestCorruptSizesDoNotReserveMemory: sizes declared by a corrupt delta, pack
// entry or loose object header must not make a read reserve gigabytes (the
// fuzzer found reads of 12-byte deltas taking 8 GiB each). Not parallel, so
// that the allocation count is this test's own.
func TestCorruptSizesDoNotReserveMemory(t *testing.T) {
	base := []byte("the quick brown fox jumps over the lazy dog\n")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	// A delta declaring an 8 GiB result that copies four bytes.
	if _, err := applyDelta(base, append(deltaHeader(len(base), 1<<33), 0x91, 0, 4)); err == nil {
		t.Fatal("applyDelta accepted a result shorter than declared")
	}
	// A zlib stream of 4 bytes read as a 16 GiB object.
	if _, err := inflateZlib(bytes.NewReader(zlibOf([]byte("tiny"))), 1<<34); err == nil {
		t.Fatal("inflateZlib accepted a short stream")
	}
	// A pack entry whose header declares 4 GiB.
	var e bytes.Buffer
	writeEntryHeader(&e, int(TypeBlob), 1<<32)
	e.Write(zlibOf([]byte("tiny")))
	r, p := memPack(t.TempDir(), append(e.Bytes(), encodeEntry(blob("x")).raw...), uint16(e.Len()))
	if _, _, err := r.readPacked(p, 12, 0); err == nil {
		t.Fatal("readPacked accepted an entry shorter than declared")
	}
	// A loose object whose header declares 16 GiB.
	dir := newBare(t)
	id := HashObject(TypeBlob, []byte("tiny"))
	path := filepath.Join(dir, "objects", id.String()[:2], id.String()[2:])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, zlibOf([]byte("blob 17179869184\x00tiny")), 0o444); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openRepo(t, dir).Read(id); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("loose object with a lying size: %v", err)
	}

	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
		t.Fatalf("reading corrupt sizes allocated %d MiB", got>>20)
	}
}

// TestReadLargeObjectsExactly reads objects above the eager-allocation
// threshold (deltas and full) and checks their exact bytes.
func TestReadLargeObjectsExactly(t *testing.T) {
	t.Parallel()
	work := newWork(t)
	big := textBytes(11, 3<<20)
	for i := 0; i < 3; i++ {
		copy(big[i*1000:], fmt.Sprintf("revision %d", i))
		if err := os.WriteFile(filepath.Join(work, "big.txt"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "rand.bin"), randomBytesSeeded(int64(i), 1<<20+1), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, work, "add", "-A")
		git(t, work, "commit", "-q", "-m", fmt.Sprintf("big %d", i))
	}
	gitDir := filepath.Join(work, ".git")
	loose := catBatch(t, gitDir, allObjectIDs(t, gitDir))
	checkReadsLikeGit(t, openRepo(t, gitDir), loose)
	git(t, gitDir, "repack", "-adfq", "--window=10")
	if _, deltas, _ := verifyPack(t, gitDir, packBases(t, gitDir)[0]); deltas == 0 {
		t.Fatal("no deltas between the big revisions")
	}
	checkReadsLikeGit(t, openRepo(t, gitDir), loose)
}
