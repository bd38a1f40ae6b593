package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// unreferenced returns objects of every kind that no ref of a fresh
// repository reaches: blobs small and large, a tree, a commit.
func unreferenced(t testing.TB, tag string) []Object {
	small := blob("in flight " + tag + "\n")
	large := NewObject(TypeBlob, randomBytes(t, 200<<10))
	text := NewObject(TypeBlob, textBytes(int64(len(tag)), 50<<10))
	tree := NewObject(TypeTree, EncodeTree([]TreeEntry{
		{Mode: ModeFile, Name: "large", ID: large.ID},
		{Mode: ModeFile, Name: "small", ID: small.ID},
		{Mode: ModeFile, Name: "text", ID: text.ID},
	}))
	return []Object{small, large, text, tree, commitOver(tree.ID, "not yet on a ref: "+tag+"\n")}
}

// TestWritePackKeptSurvivesGitMaintenance runs git's maintenance commands on
// a repository holding a kept pack whose objects no ref reaches: the pack
// stays and every object reads back. An unkept pack of unreferenced objects
// beside it shows that the same commands do drop what no keep protects, and
// after Unkeep the kept pack goes the same way.
func TestWritePackKeptSurvivesGitMaintenance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		drops bool // drops unreachable objects at once (the others make them loose)
	}{
		{[]string{"repack", "-ad"}, true},
		{[]string{"repack", "-Ad"}, false},
		{[]string{"gc"}, false},
		{[]string{"gc", "--aggressive", "--prune=now"}, true},
	} {
		args := tc.args
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			dir := newBare(t)
			r := openRepo(t, dir)
			// Something referenced, so that git has a pack to write.
			objs, head := sampleObjects(t)
			if _, err := r.WritePack(objs); err != nil {
				t.Fatal(err)
			}
			git(t, dir, "update-ref", "refs/bernstein/journal/t", head.String())
			inflight := unreferenced(t, "kept")
			base, err := r.WritePackKept(inflight, "bernstein post T-1 pid 42")
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(base + ".keep"); err != nil || string(b) != "bernstein post T-1 pid 42\n" {
				t.Fatalf("keep file: %q, %v", b, err)
			}
			loose := unreferenced(t, "unkept")
			looseBase, err := r.WritePack(loose)
			if err != nil {
				t.Fatal(err)
			}

			git(t, dir, args...)

			for _, ext := range []string{".pack", ".idx", ".keep"} {
				if _, err := os.Stat(base + ext); err != nil {
					t.Fatalf("git %s removed the kept pack's %s: %v", strings.Join(args, " "), ext, err)
				}
			}
			if _, err := os.Stat(looseBase + ".idx"); err == nil {
				t.Fatalf("git %s left the unkept pack in place: it did not repack", strings.Join(args, " "))
			}
			var ids []Oid
			for _, o := range inflight {
				ids = append(ids, o.ID)
			}
			want := catBatch(t, dir, ids)
			for _, o := range inflight {
				if g := want[o.ID]; g.typ != o.Type || !bytes.Equal(g.data, o.Data) {
					t.Fatalf("git reads %s as %s of %d bytes", o.ID, g.typ, len(g.data))
				}
			}
			checkReadsLikeGit(t, r, want)
			checkReadsLikeGit(t, openRepo(t, dir), want)
			if tc.drops {
				if _, err := runGit(dir, nil, nil, "cat-file", "-e", loose[0].ID.String()); err == nil {
					t.Fatalf("git %s kept an unreferenced object no keep protected", strings.Join(args, " "))
				}
			}

			// Without its keep the pack is git's to drop.
			if err := r.Unkeep(base); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(base + ".keep"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("keep file after Unkeep: %v", err)
			}
			git(t, dir, "repack", "-ad")
			if _, err := os.Stat(base + ".idx"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("git repack -ad left the unkept pack: %v", err)
			}
			for _, o := range inflight {
				if _, err := runGit(dir, nil, nil, "cat-file", "-e", o.ID.String()); err == nil {
					t.Fatalf("%s survived git repack -ad without its keep", o.ID)
				}
				if _, _, err := openRepo(t, dir).Read(o.ID); !errors.Is(err, ErrMissing) {
					t.Fatalf("Read %s after repack without keep: %v", o.ID, err)
				}
			}
			// The referenced objects are all still there.
			fsckStrict(t, dir)
		})
	}
}

func TestWritePackKeptArguments(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	for _, msg := range []string{"", "receive-pack 1 on host", "bernstein"} {
		if base, err := r.WritePackKept([]Object{blob("x\n")}, msg); err == nil {
			t.Fatalf("WritePackKept with keep message %q = %s, want an error", msg, base)
		}
	}
	if n := len(packFiles(t, dir)); n != 0 {
		t.Fatalf("refused writes left %d files", n)
	}
	base, err := r.WritePackKept(nil, "bernstein nothing")
	if err != nil || base != "" {
		t.Fatalf("WritePackKept(nil) = %q, %v", base, err)
	}
	if n := len(packFiles(t, dir)); n != 0 {
		t.Fatalf("WritePackKept(nil) left %d files", n)
	}
	if err := r.Unkeep(base); err != nil {
		t.Fatalf("Unkeep of no pack: %v", err)
	}
	// Unkeep of a pack without a keep is not an error.
	plain, err := r.WritePack([]Object{blob("plain\n")})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unkeep(plain); err != nil {
		t.Fatalf("Unkeep of an unkept pack: %v", err)
	}
	if err := r.Unkeep(plain); err != nil {
		t.Fatalf("second Unkeep: %v", err)
	}
	// The kept pack reads back like any other, and compaction leaves it.
	kept := blob("kept\n")
	kbase, err := r.WritePackKept([]Object{kept, kept}, "bernstein test")
	if err != nil {
		t.Fatal(err)
	}
	if ids, _, _ := verifyPack(t, dir, kbase); len(ids) != 1 {
		t.Fatalf("kept pack lists %d objects", len(ids))
	}
	if n, err := r.Compact(1); err != nil || n != 0 {
		t.Fatalf("Compact with one unkept pack = %d, %v", n, err)
	}
	checkReadsLikeGit(t, openRepo(t, dir), catBatch(t, dir, []Oid{kept.ID}))
	noTempFiles(t, dir)
}

// TestWritePackKeptNeverVisibleUnkept checks, at the instant each file of a
// kept pack is renamed into place, that the keep file is already there with
// its full content: the pack is never visible (its .idx in place) without it.
func TestWritePackKeptNeverVisibleUnkept(t *testing.T) {
	// The hook is this repository's.
	dir := newBare(t)
	r := openRepo(t, dir)
	objs, _ := sampleObjects(t)
	var renames []string
	var problems []string
	r.testHookRename = func(to string) {
		renames = append(renames, filepath.Ext(to))
		if filepath.Ext(to) == ".keep" {
			return
		}
		keep := strings.TrimSuffix(to, filepath.Ext(to)) + ".keep"
		if b, err := os.ReadFile(keep); err != nil || string(b) != "bernstein visible\n" {
			problems = append(problems, fmt.Sprintf("at the rename to %s the keep file holds %q (%v)", filepath.Base(to), b, err))
		}
	}
	defer func() { r.testHookRename = nil }()
	base, err := r.WritePackKept(objs, "bernstein visible")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if !slices.Contains(renames, ".idx") {
		t.Fatalf("renames seen: %q", renames)
	}
	if _, err := os.Stat(base + ".keep"); err != nil {
		t.Fatal(err)
	}
	// An unkept write renames only the pack and its index.
	renames = nil
	if _, err := r.WritePack([]Object{blob("unkept\n")}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(renames, " ") != ".pack .idx" {
		t.Fatalf("WritePack renamed %q", renames)
	}
}

// TestCleanStale leaves in the pack directory what killed writers leave, of
// bernstein and of git, and checks CleanStale removes exactly bernstein's.
func TestCleanStale(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	packDir := filepath.Join(dir, "objects", "pack")
	kept, err := r.WritePackKept([]Object{blob("kept by a killed writer\n")}, "bernstein post T-9 pid 7")
	if err != nil {
		t.Fatal(err)
	}
	held, err := r.WritePack([]Object{blob("kept by git\n")})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := r.WritePack([]Object{blob("kept by a user\n")})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Base(held) + ".keep":                        "receive-pack 123 on host\n",
		filepath.Base(empty) + ".keep":                       "",
		"pack-0123456789012345678901234567890123456789.keep": "bernstein post T-8 pid 8\n", // its pack never made it
		"pack-1111111111111111111111111111111111111111.keep": "bernsteinish\n",
		"tmp_pack_x":                 "git's pack in flight",
		"tmp_idx_x":                  "git's index in flight",
		"pack-2222.tmp":              "something else",
		tmpPackPrefix + "0011223344": "our pack",
		tmpIdxPrefix + "0011223344":  "our index",
		tmpKeepPrefix + "0011223344": "bernstein half",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(packDir, n), []byte(c), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	// What a writer killed mid-write leaves in the temporary directory.
	tmpDir := filepath.Join(dir, "objects", tempDirName)
	for _, n := range []string{tmpPackPrefix + "99", tmpIdxPrefix + "99", tmpKeepPrefix + "99"} {
		if err := os.WriteFile(filepath.Join(tmpDir, n), []byte("half written"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := r.CleanStale()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(tmpDir, tmpPackPrefix+"99"),
		filepath.Join(tmpDir, tmpIdxPrefix+"99"),
		filepath.Join(tmpDir, tmpKeepPrefix+"99"),
		kept + ".keep",
		filepath.Join(packDir, "pack-0123456789012345678901234567890123456789.keep"),
		filepath.Join(packDir, tmpIdxPrefix+"0011223344"),
		filepath.Join(packDir, tmpKeepPrefix+"0011223344"),
		filepath.Join(packDir, tmpPackPrefix+"0011223344"),
	}
	slices.Sort(removed)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Fatalf("CleanStale removed\n%s\nwant\n%s", strings.Join(removed, "\n"), strings.Join(want, "\n"))
	}
	for _, p := range want {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there: %v", p, err)
		}
	}
	for n, c := range files {
		p := filepath.Join(packDir, n)
		if slices.Contains(want, p) {
			continue
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != c {
			t.Fatalf("CleanStale touched %s: %q, %v", n, b, err)
		}
	}
	for _, b := range []string{kept, held, empty} {
		for _, ext := range []string{".pack", ".idx"} {
			if _, err := os.Stat(b + ext); err != nil {
				t.Fatalf("CleanStale removed a pack file: %v", err)
			}
		}
	}
	// Nothing left to clean.
	if removed, err := r.CleanStale(); err != nil || len(removed) != 0 {
		t.Fatalf("second CleanStale = %q, %v", removed, err)
	}
	// A repository without a pack directory has nothing stale.
	bare := newBare(t)
	os.RemoveAll(filepath.Join(bare, "objects", "pack"))
	if removed, err := openRepo(t, bare).CleanStale(); err != nil || len(removed) != 0 {
		t.Fatalf("CleanStale without a pack directory = %q, %v", removed, err)
	}
}

// TestTempFilesAreOurs checks the temporary files of a write and of a
// compaction carry bernstein's prefix, never git's.
func TestTempFilesAreOurs(t *testing.T) {
	// The hook is this repository's.
	dir := newBare(t)
	r := openRepo(t, dir)
	tmpDir := filepath.Join(dir, "objects", tempDirName)
	var seen []string
	r.testHookRename = func(string) {
		ents, _ := os.ReadDir(tmpDir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "tmp_") {
				seen = append(seen, e.Name())
			}
		}
	}
	defer func() { r.testHookRename = nil }()
	for i := 0; i < 3; i++ {
		if _, err := r.WritePack([]Object{blob(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.WritePackKept([]Object{blob("k")}, "bernstein k"); err != nil {
		t.Fatal(err)
	}
	checkPrefixes(t, seen, tmpIdxPrefix, tmpKeepPrefix, tmpPackPrefix)
	seen = nil
	if n, err := r.Compact(2); err != nil || n != 3 {
		t.Fatalf("Compact = %d, %v", n, err)
	}
	checkPrefixes(t, seen, tmpMergeIdxPrefix, tmpMergePackPrefix)
	noTempFiles(t, dir)
}

// checkPrefixes fails unless the names carry bernstein's prefixes, and
// exactly the ones wanted (sorted).
func checkPrefixes(t *testing.T, names []string, want ...string) {
	t.Helper()
	var prefixes []string
	for _, n := range names {
		if !strings.HasPrefix(n, tmpPrefix) {
			t.Errorf("temporary file %s does not carry bernstein's prefix", n)
		}
		prefixes = append(prefixes, n[:strings.LastIndexByte(n, '_')+1])
	}
	slices.Sort(prefixes)
	if prefixes = slices.Compact(prefixes); !slices.Equal(prefixes, want) {
		t.Fatalf("temporary files seen: %q", names)
	}
}

// TestWritePackKeptFailureLeavesNoKeep removes the temporary index just
// before its rename: the write fails and leaves neither a keep nor a
// temporary file behind.
func TestWritePackKeptFailureLeavesNoKeep(t *testing.T) {
	// The hook is this repository's.
	dir := newBare(t)
	r := openRepo(t, dir)
	tmpDir := filepath.Join(dir, "objects", tempDirName)
	r.testHookRename = func(to string) {
		if filepath.Ext(to) != ".idx" {
			return
		}
		ents, _ := os.ReadDir(tmpDir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), tmpIdxPrefix) {
				os.Remove(filepath.Join(tmpDir, e.Name()))
			}
		}
	}
	defer func() { r.testHookRename = nil }()
	if base, err := r.WritePackKept([]Object{blob("lost index\n")}, "bernstein doomed"); err == nil {
		t.Fatalf("WritePackKept without its index = %s, want an error", base)
	}
	for _, n := range packFiles(t, dir) {
		if strings.HasSuffix(n, ".keep") || strings.HasPrefix(n, "tmp_") {
			t.Errorf("failed write left %s", n)
		}
	}
	noTempFiles(t, dir)
}

// TestWriteSurvivesGitPrune runs `git prune --expire=now` (what `git gc
// --prune=now` runs) in the middle of a write, after the temporary files
// are written and before they are renamed: git deletes every tmp_* file of
// the pack directory at once, a live writer's included, but never looks
// into bernstein's temporary directory, so the write completes.
func TestWriteSurvivesGitPrune(t *testing.T) {
	// The hook is this repository's.
	dir := newBare(t)
	r := openRepo(t, dir)
	pruned := false
	r.testHookRename = func(to string) {
		if !pruned {
			pruned = true
			git(t, dir, "prune", "--expire=now")
		}
	}
	defer func() { r.testHookRename = nil }()
	base, err := r.WritePackKept([]Object{blob("written while git prunes\n")}, "bernstein pruned")
	if err != nil || !pruned {
		t.Fatalf("WritePackKept under git prune: %v (pruned %v)", err, pruned)
	}
	if ids, _, _ := verifyPack(t, dir, base); len(ids) != 1 {
		t.Fatalf("verify-pack lists %d objects", len(ids))
	}
	noTempFiles(t, dir)
}

// TestMergeTempsAreTheCompactions: a compaction runs beside writes, so the
// writers' CleanStale leaves its temporary files alone (and Leftovers does
// not count them as a writer's); CleanMergeTemps, run under the compaction
// lock, removes them and nothing else.
func TestMergeTempsAreTheCompactions(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	r := openRepo(t, dir)
	if _, err := r.WritePack([]Object{blob("a pack\n")}); err != nil {
		t.Fatal(err)
	}
	tmpDir := filepath.Join(dir, "objects", tempDirName)
	merge := []string{tmpMergeIdxPrefix + "01", tmpMergePackPrefix + "01"} // sorted, as ReadDir lists
	for _, n := range append([]string{tmpPackPrefix + "02"}, merge...) {
		if err := os.WriteFile(filepath.Join(tmpDir, n), []byte("x"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	l, err := r.Leftovers()
	if err != nil || l.Temps != 1 || l.MergeTemps != 2 || l.Empty() {
		t.Fatalf("Leftovers = %+v, %v", l, err)
	}
	if _, err := r.CleanStale(); err != nil {
		t.Fatal(err)
	}
	left := func() []string {
		ents, _ := os.ReadDir(tmpDir)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	if got := left(); !slices.Equal(got, merge) {
		t.Fatalf("after CleanStale: %q, want the compaction's %q", got, merge)
	}
	if l, _ := r.Leftovers(); !l.Empty() || l.MergeTemps != 2 {
		t.Fatalf("a compaction's files read as a writer's leftovers: %+v", l)
	}
	if err := r.CleanMergeTemps(); err != nil {
		t.Fatal(err)
	}
	if got := left(); len(got) != 0 {
		t.Fatalf("after CleanMergeTemps: %q", got)
	}
	if r.PackCount() != 1 {
		t.Fatal("the pack went")
	}
}
