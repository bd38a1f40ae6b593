package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The writer's own archive (docs/archive.md, The writer's own archive):
// an archive builds only on a head its writer verifies as its own. What
// plain git put on the writer's archive ref (a commit appended, the ref
// moved back, deleted, pointed at a blob) is reported as tampered and
// built past: the next archive commit's first parent is the writer's last
// archive commit, every entry it held is kept, and the ref is compared and
// swapped over the forged value. Every expectation is read with git.

// ownArchiveFixture archives E-0, then E-1 (two archive commits of
// test-writer) and ends E-2, not archived; it returns the fixture, the
// archive's head and the heads git shows for each task's chains.
func ownArchiveFixture(t *testing.T) (*fixture, string, map[string][2]string) {
	f := newFixture(t)
	s := f.open()
	heads := map[string][2]string{}
	for _, task := range []string{"E-0", "E-1", "E-2"} {
		f.endedTask(s, task)
		heads[task] = [2]string{rev(f, refs.Journal(task)), rev(f, refs.Ledger(task))}
	}
	s.Close()
	for _, task := range []string{"E-0", "E-1"} {
		if out, errOut, code := f.cli("", "archive", task); code != 0 || strings.Contains(errOut, "warning") {
			t.Fatalf("archive %s: exit %d\n%s%s", task, code, out, errOut)
		}
	}
	return f, rev(f, refs.Archive("test-writer")), heads
}

// holds checks with git that the archive at rev names each task at the
// heads given.
func (f *fixture) holds(at string, heads map[string][2]string, tasks ...string) {
	f.t.Helper()
	for _, task := range tasks {
		for i, chain := range []string{"journal", "ledger"} {
			if got := rev(f, at+":"+archivePath(task)+"/"+chain); got != heads[task][i] {
				f.t.Errorf("%s holds %s's %s at %q, want %s", at, task, chain, got, heads[task][i])
			}
		}
	}
}

// archiveJSON runs bernstein archive --output-json with args and returns
// its result and stderr.
type archiveOut struct {
	Archived []string `json:"archived"`
	Commits  []string `json:"commits"`
	Tampered *struct {
		Ref, At, Base, Reason string
		Carried               []string
	} `json:"tampered"`
}

func (f *fixture) archiveJSON(args ...string) (archiveOut, string) {
	f.t.Helper()
	out, errOut, code := f.cli("", append([]string{"archive", "--output-json"}, args...)...)
	if code != 0 {
		f.t.Fatalf("archive %v: exit %d\n%s%s", args, code, out, errOut)
	}
	var res archiveOut
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		f.t.Fatalf("archive --output-json: %v\n%s", err, out)
	}
	return res, errOut
}

func TestArchiveBuildsPastForgedOwnHead(t *testing.T) {
	ref := refs.Archive("test-writer")
	cases := []struct {
		name  string
		forge func(f *fixture, honest string) string // moves ref; returns its forged value ("" : deleted)
		why   string                                 // a word of the reason
	}{
		{"commit appended, unsigned", func(f *fixture, honest string) string {
			// The writer's next archive commit in every way but its
			// signature: its record chained to the honest one, the same tree.
			return f.extendArchive(honest, rev(f, honest+"^{tree}"))
		}, "archive_signature"},
		{"commit appended, signed by another key", func(f *fixture, honest string) string {
			return f.signedByOther(f.extendArchive(honest, rev(f, honest+"^{tree}")))
		}, "archive_signature"},
		{"commit appended dropping an entry", func(f *fixture, honest string) string {
			return f.extendArchive(honest, rev(f, honest+"~1^{tree}"))
		}, "archive_"},
		{"tree of another shape", func(f *fixture, honest string) string {
			return f.extendArchive(honest, f.mkTree(fmt.Sprintf("100644 blob %s\tREADME", f.blob("hello"))))
		}, "archive_"},
		{"blob", func(f *fixture, honest string) string { return f.blob("not an archive") }, "blob"},
		{"moved back", func(f *fixture, honest string) string { return rev(f, honest+"~1") }, "non_fast_forward"},
		{"deleted", func(f *fixture, honest string) string { return "" }, "deleted"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			f, honest, heads := ownArchiveFixture(t)
			forged := c.forge(f, honest)
			if forged == "" {
				f.git("update-ref", "-d", ref)
			} else {
				f.git("update-ref", ref, forged)
			}

			res, errOut := f.archiveJSON("E-2")
			if !strings.Contains(errOut, "warning: "+ref) || !strings.Contains(errOut, "tampered") || !strings.Contains(errOut, c.why) {
				t.Errorf("stderr %q: want a warning that %s was tampered with (%s)", errOut, ref, c.why)
			}
			if res.Tampered == nil || res.Tampered.At != forged || res.Tampered.Base != honest || !strings.Contains(res.Tampered.Reason, c.why) {
				t.Fatalf("tampered: %+v, want at %q base %s (%s)", res.Tampered, forged, honest, c.why)
			}
			head := rev(f, ref)
			if len(res.Commits) != 1 || res.Commits[0] != head {
				t.Fatalf("commits %v, the ref at %s", res.Commits, head)
			}
			// Built on the writer's last archive commit, not on the forged
			// value, which the new head does not contain.
			if parent := rev(f, head+"^1"); parent != honest {
				t.Fatalf("the new archive commit's first parent is %s, want the writer's last archive commit %s", parent, honest)
			}
			if forged != "" && forged != rev(f, honest+"~1") {
				if _, err := f.gitErr("merge-base", "--is-ancestor", forged, head); err == nil {
					t.Fatalf("the new head contains the forged %s", forged)
				}
			}
			f.verifyCommit(head)
			f.holds(ref, heads, "E-0", "E-1", "E-2")
			if rev(f, refs.Journal("E-2")) != "" || rev(f, refs.Ledger("E-2")) != "" {
				t.Fatal("E-2's refs were not deleted")
			}
			// The archive verifies, and the next archive finds it the
			// writer's own: no word of tampering.
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify after the recovery: exit %d\n%s%s", code, out, errOut)
			}
			s := f.open()
			f.endedTask(s, "E-3")
			s.Close()
			res, errOut = f.archiveJSON("E-3")
			if res.Tampered != nil || strings.Contains(errOut, "warning") || rev(f, ref+"^1") != head {
				t.Fatalf("the archive after the recovery: %+v %q, its parent %s (want %s)", res.Tampered, errOut, rev(f, ref+"^1"), head)
			}
		})
	}
}

// signedByOther signs commit again (committer and all) with a key of its
// own, not the writer's, with plain git, and returns the new commit.
func (f *fixture) signedByOther(commit string) string {
	f.t.Helper()
	key := filepath.Join(f.t.TempDir(), "other")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		f.t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	raw := f.git("cat-file", "commit", commit)
	hdr, msg, _ := strings.Cut(raw, "\n\n")
	var tree string
	var parents []string
	for _, line := range strings.Split(hdr, "\n") {
		if v, ok := strings.CutPrefix(line, "tree "); ok {
			tree = v
		}
		if v, ok := strings.CutPrefix(line, "parent "); ok {
			parents = append(parents, "-p", v)
		}
	}
	args := append([]string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + key, "-c", "user.name=test-writer",
		"-c", "user.email=test-writer@bernstein", "commit-tree", "-S", "-F", "-"}, parents...)
	signed := strings.TrimSpace(f.git2(msg, append(args, tree)...))
	if !strings.Contains(f.git("cat-file", "commit", signed), "gpgsig") {
		f.t.Fatalf("commit %s is not signed", signed)
	}
	return signed
}

// TestArchiveAfterInterruptedArchive: a write that moved the archive ref
// and stopped before its heads memory was written (the memory is put back
// as it was before that archive) leaves the writer's own signed commit
// past the head it remembers: the next archive builds on it, with no word
// of tampering, and remembers its own head.
func TestArchiveAfterInterruptedArchive(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	for _, task := range []string{"E-0", "E-1", "E-2"} {
		f.endedTask(s, task)
	}
	s.Close()
	ref := refs.Archive("test-writer")
	f.archiveJSON("E-0")
	path := f.headsFile()
	memory, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first := rev(f, ref)
	f.archiveJSON("E-1")
	second := rev(f, ref)
	if err := os.WriteFile(path, memory, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), second) || !strings.Contains(string(b), "archive/test-writer") || !strings.Contains(string(b), first) {
		t.Fatalf("the heads memory does not stand before the second archive:\n%s", b)
	}
	res, errOut := f.archiveJSON("E-2")
	if res.Tampered != nil || strings.Contains(errOut, "warning") || strings.Contains(errOut, "tamper") {
		t.Fatalf("a false alarm after an interrupted archive: %+v %q", res.Tampered, errOut)
	}
	if parent := rev(f, ref+"^1"); parent != second {
		t.Fatalf("the archive commit's first parent is %s, want the interrupted archive's commit %s", parent, second)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "archive/test-writer") || !strings.Contains(string(b), rev(f, ref)) {
		t.Fatalf("the heads memory does not keep the new head %s:\n%s", rev(f, ref), b)
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
}

// TestPushRestoresForgedOwnArchive: host-a archives OLD-1 and, before it
// pushes, a commit is appended to its archive ref with plain git. The
// push's automatic archive (nothing else due) moves the ref back to
// host-a's own head, says so, and the guarded remote takes the archive and
// the deletion of OLD-1's refs: nothing is left out. A second forgery,
// then a task due (OLD-2, under an age of 0): the automatic
// archive builds on host-a's own head, and the push sends it.
func TestPushRestoresForgedOwnArchive(t *testing.T) {
	_, url, root, a, _ := autoArchiveHosts(t)
	ref := refs.Archive(a.name)
	a.ok("archive", "OLD-1")
	honest := strings.TrimSpace(a.git("rev-parse", ref))
	forge := func(on string) string {
		forged := appendArchive(t, a.dir, a.name, on, on+"^{tree}")
		a.git("update-ref", ref, forged)
		return forged
	}
	forged := forge(honest)

	res, errOut := autoPush(t, a)
	if len(res.LeftOut) != 0 {
		t.Fatalf("push left out %+v", res.LeftOut)
	}
	if res.AutoArchive == nil || res.AutoArchive.Tampered == nil || res.AutoArchive.Tampered.At != forged || res.AutoArchive.Tampered.Base != honest {
		t.Fatalf("the automatic archive's report: %+v", res.AutoArchive)
	}
	if !strings.Contains(errOut, "warning: "+ref) || !strings.Contains(errOut, "tampered") {
		t.Fatalf("push's stderr: %q", errOut)
	}
	if got := strings.TrimSpace(a.git("rev-parse", ref)); got != honest {
		t.Fatalf("%s is at %s, want host-a's own head %s", ref, got, honest)
	}
	remote := lsRemote(t, root, url)
	if remote[ref] != honest || remote[refs.Ledger("OLD-1")] != "" || remote[refs.Journal("OLD-1")] != "" {
		t.Fatalf("the remote after the push: archive %q, OLD-1 %q %q", remote[ref], remote[refs.Journal("OLD-1")], remote[refs.Ledger("OLD-1")])
	}

	forged = forge(honest)
	endAt(t, a, time.Now().Add(-30*24*time.Hour), "OLD-2", record.KindTaskCompleted)
	// Pushed by a Store whose clock is 8 days on, every end of host-a's is
	// due under the default 7 days: NEW-1's, pending before OLD-2's.
	s := storeAt(t, a, time.Now().Add(8*24*time.Hour))
	pushed, err := s.Push("origin")
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	res = *pushed
	if len(res.LeftOut) != 0 || res.AutoArchive == nil || res.AutoArchive.Tampered == nil || res.AutoArchive.Tampered.At != forged {
		t.Fatalf("the second push: left out %+v, automatic archive %+v", res.LeftOut, res.AutoArchive)
	}
	if got := autoArchived(res); !slices.Contains(got, "OLD-2") {
		t.Fatalf("archived %v, want OLD-2 among them: %+v", got, res.AutoArchive)
	}
	head := strings.TrimSpace(a.git("rev-parse", ref))
	if parent := strings.TrimSpace(a.git("rev-parse", head+"^1")); parent != honest {
		t.Fatalf("the archive commit's first parent is %s, want host-a's own head %s", parent, honest)
	}
	if remote := lsRemote(t, root, url); remote[ref] != head || remote[refs.Ledger("OLD-2")] != "" {
		t.Fatalf("the remote after the second push: archive %q (want %s), OLD-2's ledger %q", remote[ref], head, remote[refs.Ledger("OLD-2")])
	}
	// A push with nothing tampered says nothing of it.
	res, errOut = autoPush(t, a)
	if res.AutoArchive == nil || res.AutoArchive.Tampered != nil || strings.Contains(errOut, "tamper") {
		t.Fatalf("a third push: %+v %q", res.AutoArchive, errOut)
	}
}

// TestArchiveRestoresForgedOwnHead: with nothing to archive, bernstein
// archive still moves the writer's archive ref back to its last archive
// commit over a commit appended with plain git, and says so: a push that
// follows sends the writer's archive.
func TestArchiveRestoresForgedOwnHead(t *testing.T) {
	f, honest, heads := ownArchiveFixture(t)
	ref := refs.Archive("test-writer")
	forged := f.extendArchive(honest, rev(f, honest+"^{tree}"))
	f.git("update-ref", ref, forged)
	res, errOut := f.archiveJSON("--ended-before", "100000h")
	if len(res.Commits) != 0 || res.Tampered == nil || res.Tampered.At != forged || res.Tampered.Base != honest {
		t.Fatalf("archive with nothing to archive over a forged head: %+v, tampered %+v", res, res.Tampered)
	}
	if !strings.Contains(errOut, "warning: "+ref) || !strings.Contains(errOut, "tampered") {
		t.Fatalf("stderr %q", errOut)
	}
	if got := rev(f, ref); got != honest {
		t.Fatalf("%s is at %s, want the writer's last archive commit %s", ref, got, honest)
	}
	f.holds(ref, heads, "E-0", "E-1")
	// Restored, it is the writer's own: nothing more is said.
	if res, errOut := f.archiveJSON("--ended-before", "100000h"); res.Tampered != nil || strings.Contains(errOut, "warning") {
		t.Fatalf("a second archive: %+v %q", res.Tampered, errOut)
	}
}

// TestArchiveRememberedHeadPruned: the archive ref moved back with plain
// git and the writer's last archive commit pruned by git gc: nothing can
// be built on the head remembered, so archive refuses, naming the ref and
// that commit, and writes nothing.
func TestArchiveRememberedHeadPruned(t *testing.T) {
	f, honest, _ := ownArchiveFixture(t)
	ref := refs.Archive("test-writer")
	f.git("update-ref", ref, honest+"~1")
	f.git("reflog", "expire", "--expire=now", "--all")
	f.git("gc", "-q", "--prune=now")
	if _, err := f.gitErr("cat-file", "-e", honest); err == nil {
		t.Fatalf("git gc kept %s", honest)
	}
	before := f.refsSnapshot()
	out, errOut, code := f.cli("", "archive", "E-2")
	if code == 0 || !strings.Contains(errOut, ref) || !strings.Contains(errOut, honest+", which it does not contain, is not in the repository") {
		t.Fatalf("archive with the remembered head pruned: exit %d\n%s%s", code, out, errOut)
	}
	if f.refsSnapshot() != before {
		t.Fatal("the refused archive moved refs")
	}
}

// headsFile is the path of test-writer's heads memory in this repository.
func (f *fixture) headsFile() string {
	f.t.Helper()
	files, _ := filepath.Glob(filepath.Join(f.home, "heads", "*", "test-writer.heads"))
	if len(files) != 1 {
		f.t.Fatalf("heads files: %v", files)
	}
	return files[0]
}

// TestArchiveCarriesOwnCommitsPastForgery: an earlier version built a
// commit of the writer's own (signed by its key, archiving E-2, its refs
// deleted) on a commit appended with plain git, and plain git appended
// another on top (unsigned, archiving E-3). The next archive builds on
// the writer's last verified commit, and adds E-2 again at the heads its
// own commit archived, not E-3: no task the writer archived is lost,
// nothing of a forgery is taken, and the archive verifies.
func TestArchiveCarriesOwnCommitsPastForgery(t *testing.T) {
	f, honest, heads := ownArchiveFixture(t)
	s := f.open()
	f.endedTask(s, "E-3")
	s.Close()
	heads["E-3"] = [2]string{rev(f, refs.Journal("E-3")), rev(f, refs.Ledger("E-3"))}
	ref := refs.Archive("test-writer")
	forged := f.extendArchive(honest, rev(f, honest+"^{tree}"))
	f.git("update-ref", ref, forged)
	own := f.signedArchiveOn(forged, "E-2")
	if rev(f, ref) != own || rev(f, refs.Ledger("E-2")) != "" {
		t.Fatalf("the earlier version's archive: %s at %s, E-2's ledger %q", ref, rev(f, ref), rev(f, refs.Ledger("E-2")))
	}
	f.verifyCommit(own)
	top := f.archiveOn(own, "E-3", false)

	res, errOut := f.archiveJSON("E-3")
	if res.Tampered == nil || res.Tampered.At != top || len(res.Tampered.Carried) != 1 || res.Tampered.Carried[0] != "E-2" || res.Tampered.Base != honest || !strings.Contains(errOut, "tampered") || !strings.Contains(errOut, "E-2") {
		t.Fatalf("tampered %+v\n%s", res.Tampered, errOut)
	}
	head := rev(f, ref)
	restored := rev(f, head+"^1")
	if rev(f, restored+"^1") != honest {
		t.Fatalf("the archive's commits: %s on %s on %s, want them on %s", head, restored, rev(f, restored+"^1"), honest)
	}
	if _, err := f.gitErr("merge-base", "--is-ancestor", forged, head); err == nil {
		t.Fatalf("the new head contains the forged %s", forged)
	}
	f.holds(restored, heads, "E-0", "E-1", "E-2")
	if got := rev(f, restored+":"+archivePath("E-3")+"/ledger"); got != "" {
		t.Fatalf("the restored archive holds E-3, which only the forgery archived, at %s", got)
	}
	f.holds(ref, heads, "E-0", "E-1", "E-2", "E-3")
	f.verifyCommit(restored)
	f.verifyCommit(head)
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
	// E-2 reads from the archive as it did before.
	if out, errOut, code := f.cli("", "task", "show", "E-2", "--output-json"); code != 0 || !strings.Contains(out, `"phase": "completed"`) && !strings.Contains(out, `"phase":"completed"`) {
		t.Fatalf("task show E-2: exit %d\n%s%s", code, out, errOut)
	}
}

// signedArchiveOn writes, as an earlier version of bernstein did, an
// archive commit of test-writer's on top of on (whatever on is), signed
// by the writer's key: it archives task (its record's entry, the tree
// through the codec, the parents archive.Parents) and deletes the task's
// refs in the same git ref transaction.
func (f *fixture) signedArchiveOn(on, task string) string {
	f.t.Helper()
	return f.archiveOn(on, task, true)
}

// archiveOn is signedArchiveOn, the commit signed or not; unsigned, it
// leaves the task's refs (a forgery needs no deletion).
func (f *fixture) archiveOn(on, task string, sign bool) string {
	f.t.Helper()
	objs, err := gitstore.Open(filepath.Join(f.dir, ".git", "objects"))
	if err != nil {
		f.t.Fatal(err)
	}
	defer objs.Close()
	onID := oid(f.t, on)
	cc, err := chain.ReadAnchor(objs, onID)
	if err != nil {
		f.t.Fatal(err)
	}
	prev, err := record.ParseArchive(cc.Record)
	if err != nil {
		f.t.Fatal(err)
	}
	e := archive.Entry{Task: task, Journal: oid(f.t, rev(f, refs.Journal(task))), Ledger: oid(f.t, rev(f, refs.Ledger(task)))}
	at := record.ArchivedTask{TaskID: task, Journal: e.Journal.String(), Ledger: e.Ledger.String()}
	for _, x := range []struct {
		head gitstore.Oid
		rows *int64
	}{{e.Journal, &at.JournalRows}, {e.Ledger, &at.LedgerRows}} {
		row, err := chain.Read(objs, x.head)
		if err != nil {
			f.t.Fatal(err)
		}
		r, err := record.ParseRow(row.Record)
		if err != nil {
			f.t.Fatal(err)
		}
		*x.rows = r.Index + 1
	}
	rec := record.Archive{V: record.Version, Writer: "test-writer", Seq: prev.Seq + 1, Prev: record.Sum(cc.Record), Add: []record.ArchivedTask{at}, Remove: []string{}}
	tree, made, err := archive.Build(objs, oid(f.t, rev(f, on+"^{tree}")), archive.Update{Add: []archive.Entry{e}})
	if err != nil {
		f.t.Fatal(err)
	}
	who := gitstore.Ident("test-writer", "test-writer@bernstein", time.Now().Unix())
	cm := gitstore.Commit{Tree: tree, Parents: archive.Parents(onID, []archive.Entry{e}), Author: who, Committer: who,
		Message: record.Message(fmt.Sprintf("archive #%d: 1 tasks added, 0 removed", rec.Seq), record.MustCanonical(rec))}
	if sign {
		id, err := keys.Load(f.home)
		if err != nil {
			f.t.Fatal(err)
		}
		if cm.Signature, err = id.SignCommit(gitstore.EncodeCommit(cm)); err != nil {
			f.t.Fatal(err)
		}
	}
	c := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(cm))
	if _, err := objs.WritePack(append(made, c)); err != nil {
		f.t.Fatal(err)
	}
	script := fmt.Sprintf("start\nupdate %s %s %s\n", refs.Archive("test-writer"), c.ID, rev(f, refs.Archive("test-writer")))
	if sign {
		script += fmt.Sprintf("delete %s %s\ndelete %s %s\n", refs.Journal(task), e.Journal, refs.Ledger(task), e.Ledger)
	}
	script += "prepare\ncommit\n"
	if out, err := execGitStdin(f.dir, []byte(script), "update-ref", "--stdin").CombinedOutput(); err != nil {
		f.t.Fatalf("git update-ref: %v\n%s", err, out)
	}
	return c.ID.String()
}

// TestArchiveRestoreReplacesForgedFirstHead: a writer that never archived
// (no head remembered) finds its archive ref created with plain git at a
// blob: with nothing to archive, bernstein archive writes the writer's
// first archive commit, empty, over it (no commit of the writer's is in
// it), and says so; the next archive builds on that commit.
func TestArchiveRestoreReplacesForgedFirstHead(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	f.endedTask(s, "E-0")
	s.Close()
	ref := refs.Archive("test-writer")
	forged := f.blob("not an archive")
	f.git("update-ref", ref, forged)
	res, errOut := f.archiveJSON("--ended-before", "100000h")
	if res.Tampered == nil || res.Tampered.At != forged || res.Tampered.Base != "" || !strings.Contains(errOut, "tampered") {
		t.Fatalf("tampered %+v\n%s", res.Tampered, errOut)
	}
	first := rev(f, ref)
	if c := f.archiveCommitAt(ref); c.rec.Seq != 0 || len(c.rec.Add) != 0 || len(c.parents) != 0 || rev(f, ref+"^{tree}") != rev(f, "4b825dc642cb6eb9a060e54bf8d69288fbee4904") {
		t.Fatalf("%s after the restore: %+v, parents %v, tree %s", ref, c.rec, c.parents, rev(f, ref+"^{tree}"))
	}
	f.verifyCommit(ref)
	res, errOut = f.archiveJSON("E-0")
	if res.Tampered != nil || strings.Contains(errOut, "warning") {
		t.Fatalf("the next archive: %+v %q", res.Tampered, errOut)
	}
	if c := f.archiveCommitAt(ref); c.rec.Seq != 1 || len(c.rec.Add) != 1 || c.rec.Add[0].TaskID != "E-0" || c.parents[0] != first {
		t.Fatalf("the archive's next commit: %+v, parents %v", c.rec, c.parents)
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
}
