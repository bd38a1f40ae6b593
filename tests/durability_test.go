package tests

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/internal/systrace"
	"github.com/bernstein/bernstein/refs"
)

// TestPostIsDurableInOrder runs one post in a child process under strace and
// checks the order of its durable steps against what a crash at any instant
// may leave:
//
//   - the intent is written (in the staged keep) before any ref lock is
//     created, so a writer killed while holding locks leaves them to the next
//     writer, which knows them by the intent;
//   - the keep, the pack and the index are each synced before they are
//     renamed into the pack directory, the keep first and the index last,
//     and the pack directory is synced before the first ref moves: no ref is
//     ever visible, on disk or after a power loss, naming an object that is
//     not durable;
//   - each lock file is synced before it is renamed onto its ref, the refs
//     move in commit order, and every ref directory is synced before the post
//     is acknowledged;
//   - the keep goes only after the ref directories are synced: until then a
//     crash may undo a rename, and the intent must be there to finish it.
//
// A post over the writer's own spine whose loose file holds garbage (its
// compare-and-swap base the file's stand-in) keeps the same order.
func TestPostIsDurableInOrder(t *testing.T) {
	for _, garbled := range []bool{false, true} {
		t.Run(map[bool]string{false: "honest", true: "garbled_spine"}[garbled], func(t *testing.T) { postIsDurableInOrder(t, garbled) })
	}
}

func postIsDurableInOrder(t *testing.T, garbledSpine bool) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "D-1", "agent")
	f.post(s, "D-1", "k", "agent", tok, report("version one"))
	s.Close()
	if garbledSpine {
		garbleLoose(f, refs.Spine("test-writer"))
	}
	evs, out := systrace.Child(t, "BERNSTEIN_TEST_POSTER=1",
		"BERNSTEIN_REPO="+f.dir, "BERNSTEIN_HOME="+f.home,
		"BERNSTEIN_TEST_TASK=D-1", "BERNSTEIN_TEST_KEY=k",
		"BERNSTEIN_AGENT=agent", "BERNSTEIN_CLAIM_TOKEN="+tok, "BERNSTEIN_TEST_POSTS=1")
	if !strings.Contains(out, "ok 2 D-1 k ") {
		t.Fatalf("the traced post did not succeed: %s", out)
	}
	checkReaders(t, f, "D-1", "k", 2)

	gitDir := filepath.Join(f.dir, ".git")
	tmpDir := filepath.Join(gitDir, "objects", "bernstein-tmp")
	packDir := filepath.Join(gitDir, "objects", "pack")
	find := func(call, path string, from int) int { return systrace.Find(evs, call, path, from) }
	first := func(what string, match func(e systrace.Event) bool) int {
		for i, e := range evs {
			if match(e) {
				return i
			}
		}
		t.Fatalf("no %s in the trace: %+v", what, evs)
		return -1
	}
	ack := first("acknowledgement on stdout", func(e systrace.Event) bool { return e.Call == "write" && e.Fd == 1 })

	// The intent, staged.
	keepTmp := evs[first("staged keep", func(e systrace.Event) bool {
		return e.Call == "create" && filepath.Dir(e.Path) == tmpDir && strings.HasPrefix(filepath.Base(e.Path), "tmp_bernstein_keep_")
	})].Path
	intent := find("write", keepTmp, 0)
	if intent < 0 {
		t.Fatalf("nothing written to the staged keep %s", keepTmp)
	}

	// The pack's files: synced, then renamed in, keep first; then the
	// directory synced.
	keepIn := first("keep renamed into the pack directory", func(e systrace.Event) bool { return e.Call == "rename" && e.From == keepTmp })
	base, ok := strings.CutSuffix(evs[keepIn].Path, ".keep")
	if !ok || filepath.Dir(base) != packDir {
		t.Fatalf("the staged keep went to %s", evs[keepIn].Path)
	}
	renamedIn := map[string]int{}
	for _, ext := range []string{".keep", ".pack", ".idx"} {
		ri := find("rename", base+ext, 0)
		if ri < 0 {
			t.Fatalf("%s%s was not renamed into place", base, ext)
		}
		if si := find("fsync", evs[ri].From, 0); si < 0 || si > ri {
			t.Fatalf("%s not synced before it was renamed to %s%s (sync at %d, rename at %d)", evs[ri].From, base, ext, si, ri)
		}
		renamedIn[ext] = ri
	}
	if !(renamedIn[".keep"] < renamedIn[".pack"] && renamedIn[".pack"] < renamedIn[".idx"]) {
		t.Fatalf("pack files renamed in the wrong order: %v", renamedIn)
	}
	packDirSynced := find("fsync", packDir, renamedIn[".idx"])
	if packDirSynced < 0 {
		t.Fatal("the pack directory was not synced after the pack was renamed in")
	}

	// The refs: locked after the intent was written; each lock synced
	// before its rename; the renames in commit order, after the pack
	// directory was synced.
	order := []string{refs.Spine("test-writer"), refs.Audit("test-writer"), refs.Journal("D-1")}
	last := -1
	for _, ref := range order {
		path := filepath.Join(gitDir, filepath.FromSlash(ref))
		ci := find("create", path+".lock", 0)
		if ci < 0 {
			t.Fatalf("no lock file created for %s", ref)
		}
		if ci < intent {
			t.Fatalf("%s.lock created (%d) before the intent was written (%d)", ref, ci, intent)
		}
		ri := find("rename", path, 0)
		if ri < 0 || evs[ri].From != path+".lock" {
			t.Fatalf("%s was not renamed from its lock", ref)
		}
		if si := find("fsync", path+".lock", ci); si < 0 || si > ri {
			t.Fatalf("%s.lock not synced before its rename (sync at %d, rename at %d)", ref, si, ri)
		}
		if ri < packDirSynced {
			t.Fatalf("%s moved (%d) before the pack directory was synced (%d): it could name objects a crash loses", ref, ri, packDirSynced)
		}
		if ri < last {
			t.Fatalf("%s renamed out of commit order", ref)
		}
		last = ri
	}

	// Every ref directory synced before the acknowledgement; the keep
	// removed only after.
	syncs := 0
	for _, ref := range order {
		dir := filepath.Dir(filepath.Join(gitDir, filepath.FromSlash(ref)))
		si := find("fsync", dir, last)
		if si < 0 || si > ack {
			t.Fatalf("%s not synced between the last rename (%d) and the acknowledgement (%d): at %d", dir, last, ack, si)
		}
		syncs = max(syncs, si)
	}
	if ui := find("unlink", base+".keep", 0); ui < 0 || ui < syncs {
		t.Fatalf("the keep was removed at %d, before the ref directories were synced (%d)", ui, syncs)
	}
}
