package tests

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// An archive ref that cannot be read as an archive (forged with plain git:
// a blob, a tree of another shape, a shard that is not a tree, an entry
// naming no valid task, heads that are not in the repository) contributes
// no entries: every other task reads and is written as before, the
// snapshot names the archive (Snapshot.BadArchives), and audit verify
// reports it as tampered.

// archiveForgery writes, with plain git, an archive ref of one kind that
// no reader can read, and returns the ref and a word its reason carries.
type archiveForgery struct {
	name  string
	forge func(f *fixture) (ref, reason string)
}

// mkTree writes a tree with git mktree (--missing: gitlinks and entries
// may name absent objects).
func (f *fixture) mkTree(entries ...string) string {
	f.t.Helper()
	in := ""
	for _, e := range entries {
		in += e + "\n"
	}
	return strings.TrimSpace(f.git2(in, "mktree", "--missing"))
}

// commitTree writes with plain git an archive commit of tree as writer
// mallory's first: its message carries a well-formed archive record
// (chained to this repository's genesis of mallory's archive, adding
// adds), so only the tree or the heads are at fault; parents as given.
func (f *fixture) commitTree(tree string, adds []record.ArchivedTask, parents ...string) string {
	f.t.Helper()
	rec := record.Archive{V: 1, Writer: "mallory", Seq: 0, Prev: record.Genesis(f.repositoryID(), record.ChainArchive, "mallory"),
		Add: append([]record.ArchivedTask{}, adds...), Remove: []string{}}
	msg := record.Message("archive #0", record.MustCanonical(rec))
	args := []string{"-c", "user.name=mallory", "-c", "user.email=mallory@bernstein", "commit-tree", "-F", "-"}
	for _, p := range parents {
		args = append(args, "-p", p)
	}
	return strings.TrimSpace(f.git2(string(msg), append(args, tree)...))
}

func (f *fixture) blob(content string) string {
	f.t.Helper()
	return strings.TrimSpace(f.git2(content, "hash-object", "-w", "--stdin"))
}

// archiveRoot wraps one shard tree as an archive's root: t/<shard>.
func (f *fixture) archiveRoot(shard, shardTree string) string {
	dir := f.mkTree(fmt.Sprintf("040000 tree %s\t%s", shardTree, shard))
	return f.mkTree(fmt.Sprintf("040000 tree %s\tt", dir))
}

var archiveForgeries = []archiveForgery{
	{"blob", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		f.git("update-ref", ref, f.blob("not an archive"))
		return ref, "blob"
	}},
	{"tree of another shape", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		root := f.mkTree(fmt.Sprintf("100644 blob %s\tREADME", f.blob("hello")))
		f.git("update-ref", ref, f.commitTree(root, nil))
		return ref, "README"
	}},
	{"shard that is a blob", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		dir := f.mkTree(fmt.Sprintf("100644 blob %s\t00", f.blob("shard")))
		root := f.mkTree(fmt.Sprintf("040000 tree %s\tt", dir))
		f.git("update-ref", ref, f.commitTree(root, nil))
		return ref, "t/00"
	}},
	{"shard entry naming a blob", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		// git mktree checks an entry's type against its object: the tree
		// is written with git hash-object instead.
		b := oid(f.t, f.blob("shard"))
		dir := strings.TrimSpace(f.git2(string(gitstore.EncodeTree([]gitstore.TreeEntry{{Mode: gitstore.ModeTree, Name: "00", ID: b}})),
			"hash-object", "-t", "tree", "-w", "--stdin"))
		root := f.mkTree(fmt.Sprintf("040000 tree %s\tt", dir))
		f.git("update-ref", ref, f.commitTree(root, nil))
		return ref, "it is a blob, not a tree"
	}},
	{"task entry that is a blob", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		shard := f.mkTree(fmt.Sprintf("100644 blob %s\tZ-1", f.blob("task")))
		f.git("update-ref", ref, f.commitTree(f.archiveRoot(archive.Shard("Z-1"), shard), nil))
		return ref, "Z-1"
	}},
	{"invalid task id", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		// The heads of an honest ended task, under a name that is no
		// task id.
		at := refs.Archive("test-writer") + ":" + archive.Path("E-1")
		j, l := f.rev(at+"/journal"), f.rev(at+"/ledger")
		task := f.mkTree("160000 commit "+j+"\tjournal", "160000 commit "+l+"\tledger")
		shard := f.mkTree(fmt.Sprintf("040000 tree %s\t%%zz", task))
		f.git("update-ref", ref, f.commitTree(f.archiveRoot("00", shard), nil, j, l))
		return ref, "%zz"
	}},
	{"absent heads", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		j, l := strings.Repeat("1", 40), strings.Repeat("2", 40)
		task := f.mkTree("160000 commit "+j+"\tjournal", "160000 commit "+l+"\tledger")
		shard := f.mkTree(fmt.Sprintf("040000 tree %s\tGHOST-1", task))
		add := []record.ArchivedTask{{TaskID: "GHOST-1", Journal: j, JournalRows: 2, Ledger: l, LedgerRows: 3}}
		f.git("update-ref", ref, f.commitTree(f.archiveRoot(archive.Shard("GHOST-1"), shard), add))
		return ref, j
	}},
	{"absent shard", func(f *fixture) (string, string) {
		ref := refs.Archive("mallory")
		gone := strings.Repeat("3", 40)
		dir := f.mkTree(fmt.Sprintf("040000 tree %s\t%s", gone, archive.Shard("Y-1")))
		root := f.mkTree(fmt.Sprintf("040000 tree %s\tt", dir))
		f.git("update-ref", ref, f.commitTree(root, nil))
		return ref, gone
	}},
}

// splitReadPast takes a surface's output (a JSON document, after an HTTP
// status for a GET) apart: the document without its archives_read_past,
// written again, and that list (nil when the document has none).
func splitReadPast(t *testing.T, out string) (string, []map[string]string) {
	t.Helper()
	status, body, ok := strings.Cut(out, " ")
	if !ok || strings.HasPrefix(out, "{") {
		status, body = "", out
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal([]byte(body), &doc) != nil {
		return out, nil
	}
	raw, has := doc["archives_read_past"]
	if !has {
		return out, nil
	}
	past := []map[string]string{}
	if err := json.Unmarshal(raw, &past); err != nil {
		t.Fatalf("archives_read_past: %v\n%s", err, raw)
	}
	delete(doc, "archives_read_past")
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return status + " " + string(b), past
}

// unreadableArchiveFixture makes an open task O-1 (claimed, one post), an
// ended task E-1 archived by this host's writer, and returns the surfaces
// of both as they read before any forgery.
func unreadableArchiveFixture(t *testing.T) (*fixture, string, map[string]string) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "O-1", "agent")
	f.post(s, "O-1", "summary", "agent", tok, report("# open"))
	endedTask(t, f, s, "E-1")
	if res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"E-1"}}); err != nil || len(res.Archived) != 1 {
		t.Fatalf("archive: %v %+v", err, res)
	}
	// No false alarm: an honest archive is never read past.
	snap, err := s.Snapshot(refs.JournalPrefix, refs.LedgerPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if bad := snap.BadArchives(); len(bad) != 0 {
		t.Fatalf("an honest archive is reported unreadable: %+v", bad)
	}
	s.Close()
	for _, args := range [][]string{{"task", "list"}, {"task", "list", "--limit", "1"}, {"task", "list", "--strict"}} {
		if _, errOut, code := f.cli("", args...); code != 0 || strings.Contains(errOut, "warning") {
			t.Fatalf("%v over an honest archive: exit %d %s", args, code, errOut)
		}
	}
	return f, tok, surfacesOf(t, f, false, "O-1", "E-1")
}

// auditNames runs audit verify with args and checks that it exits 1
// (tampered) with at least one failure naming ref and, when only is set,
// no other.
func auditNames(t *testing.T, f *fixture, ref string, only bool, args ...string) {
	t.Helper()
	out, errOut, code := f.cli("", append([]string{"audit", "verify", "--output-json"}, args...)...)
	if code != 1 {
		t.Fatalf("audit verify %v: exit %d, want 1 (tampered)\n%s%s", args, code, out, errOut)
	}
	var rep struct {
		Failures []struct {
			Check, Reason string
		} `json:"failures"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("audit verify output: %v\n%s", err, out)
	}
	named := 0
	for _, fl := range rep.Failures {
		if strings.Contains(fl.Reason, ref) {
			named++
		} else if only {
			t.Errorf("audit verify %v: a failure not naming the forged archive %s: %+v", args, ref, fl)
		}
	}
	if named == 0 {
		t.Fatalf("audit verify %v: no failure names %s: %s", args, ref, out)
	}
}

func TestUnreadableArchiveBlocksNoOne(t *testing.T) {
	for _, fg := range archiveForgeries {
		t.Run(strings.ReplaceAll(fg.name, " ", "_"), func(t *testing.T) {
			f, tok, before := unreadableArchiveFixture(t)
			if out, errOut, code := f.cli("", "audit", "verify", "--checkpoint", "cp"); code != 0 {
				t.Fatalf("audit verify --checkpoint before the forgery: exit %d\n%s%s", code, out, errOut)
			}
			ref, why := fg.forge(f)

			// Every surface reads as before; the task lists, besides, name
			// the archive ref they read past (archives_read_past).
			after := surfacesOf(t, f, false, "O-1", "E-1")
			for k, want := range before {
				want, wasPast := splitReadPast(t, want)
				got, past := splitReadPast(t, after[k])
				if got != want {
					t.Errorf("%s differs with %s forged\nbefore: %.400s\nafter:  %.400s", k, ref, want, got)
				}
				if wasPast != nil && len(wasPast) != 0 {
					t.Errorf("%s before the forgery: archives_read_past %v", k, wasPast)
				}
				isList := strings.HasPrefix(k, "GET /api/v1/tasks") && !strings.HasPrefix(k, "GET /api/v1/tasks/") || strings.HasPrefix(k, "cli task list")
				if isList != (past != nil) {
					t.Errorf("%s: archives_read_past present %v, want %v", k, past != nil, isList)
				}
				// A whole list reads every archive whole, and names it; a
				// page reads what it needs (docs/archive.md, Reading), and
				// names it when it read past it.
				paged := strings.Contains(k, "limit")
				if isList && (len(past) != 1 && !(paged && len(past) == 0) ||
					len(past) == 1 && (past[0]["ref"] != ref || !strings.Contains(past[0]["message"], ref+" (at ") || !strings.Contains(past[0]["reason"], why))) {
					t.Errorf("%s: archives_read_past %v, want %s (%s)", k, past, ref, why)
				}
			}
			// The HTTP list and the CLI's say the same of each page.
			for _, task := range []string{"O-1", "E-1"} {
				_, http := splitReadPast(t, after["GET /api/v1/tasks?limit=2&cursor="+task])
				_, cli := splitReadPast(t, after["cli task list --output-json --limit 2 --cursor "+task])
				if fmt.Sprint(http) != fmt.Sprint(cli) {
					t.Errorf("the page after %s: GET /api/v1/tasks names %v, task list %v", task, http, cli)
				}
			}
			// The listing says what it read past, on stderr.
			if _, errOut, code := f.cli("", "task", "list"); code != 0 || !strings.Contains(errOut, "warning: "+ref) {
				t.Errorf("task list: exit %d, stderr %q: want 0 and a warning naming %s", code, errOut, ref)
			}
			if _, errOut, code := f.cli("", "task", "list", "--strict"); code != 2 || !strings.Contains(errOut, "read past (--strict)") {
				t.Errorf("task list --strict: exit %d, stderr %q: want 2, the archive read past", code, errOut)
			}

			// Writes: a post to the open task, a new task.
			if out, errOut, code := f.cli("", "artifact", "post", "O-1", "more", "--type", "report", "--body", "# more",
				"--agent", "agent", "--claim-token", tok); code != 0 {
				t.Fatalf("post to an open task: exit %d %s%s", code, out, errOut)
			}
			if _, errOut, code := f.cli("", "task", "create", "N-1", "--title", "new"); code != 0 {
				t.Fatalf("task create: exit %d %s", code, errOut)
			}

			s := f.open()
			snap, err := s.Snapshot(refs.JournalPrefix, refs.LedgerPrefix)
			if err != nil {
				t.Fatal(err)
			}
			bad := snap.BadArchives()
			if len(bad) != 1 || bad[0].Ref != ref || !strings.Contains(bad[0].Reason, why) {
				t.Fatalf("snapshot's bad archives: %+v, want %s naming %q", bad, ref, why)
			}

			// audit verify, full and since the checkpoint: tampered (exit 1),
			// every failure naming the forged archive.
			auditNames(t, f, ref, true)
			auditNames(t, f, ref, true, "--since", "cp")

			// A write to the task the honest archive holds extends its entry.
			archivedHead := f.rev(refs.Archive("test-writer") + ":" + archive.Path("E-1") + "/ledger")
			if _, errOut, code := f.cli("", "task", "reopen", "E-1", "--reason", "again"); code != 0 {
				t.Fatalf("reopen of the archived task: exit %d %s", code, errOut)
			}
			if parent := f.rev(refs.Ledger("E-1") + "~1"); parent != archivedHead {
				t.Fatalf("the reopen's parent is %s, want the archived head %s", parent, archivedHead)
			}
		})
	}
}

// extendArchive writes with plain git a commit on top of honest, this
// host's writer's last archive commit, as its next one (seq, prev, the
// writer's name), carrying tree.
func (f *fixture) extendArchive(honest, tree string) string {
	f.t.Helper()
	return appendArchive(f.t, f.dir, "test-writer", honest, tree)
}

// appendArchive writes with plain git, in the repository at dir, a commit
// on top of on, writer's archive commit, as its next one (its record's
// seq and prev following on's, the writer's name as author and
// committer), unsigned, carrying tree.
func appendArchive(t *testing.T, dir, writer, on, tree string) string {
	t.Helper()
	raw := gitRun(t, dir, "cat-file", "commit", on)
	body, err := record.RecordFromMessage([]byte(raw[strings.Index(raw, "\n\n")+2:]))
	if err != nil {
		t.Fatal(err)
	}
	prev, err := record.ParseArchive(body)
	if err != nil {
		t.Fatal(err)
	}
	rec := record.Archive{V: 1, Writer: writer, Seq: prev.Seq + 1, Prev: record.Sum(body), Add: []record.ArchivedTask{}, Remove: []string{}}
	msg := record.Message(fmt.Sprintf("archive #%d", rec.Seq), record.MustCanonical(rec))
	return strings.TrimSpace(gitRunStdin(t, dir, string(msg), "-c", "user.name="+writer, "-c", "user.email="+writer+"@bernstein",
		"commit-tree", "-F", "-", "-p", on, tree))
}

// TestPushPastUnreadableArchive: a local archive ref that cannot be read
// as an archive does not stop a push: this host's honest archive still
// covers the deletion of the remote's refs of the task it archived, and
// the unreadable one covers nothing.
func TestPushPastUnreadableArchive(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "E-1")
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	f.git("remote", "add", "origin", bare)
	if out, errOut, code := f.cli("", "push", "origin"); code != 0 {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	if res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"E-1"}}); err != nil || len(res.Archived) != 1 {
		t.Fatalf("archive: %v %+v", err, res)
	}
	s.Close()
	f.git("update-ref", refs.Archive("mallory"), f.blob("not an archive"))
	if out, errOut, code := f.cli("", "push", "origin"); code != 0 {
		t.Fatalf("push past an unreadable archive: %d %s %s", code, out, errOut)
	}
	remote := refsOf(t, bare, refs.Prefix)
	if remote[refs.Ledger("E-1")] != "" || remote[refs.Journal("E-1")] != "" || remote[refs.Archive("test-writer")] != f.rev(refs.Archive("test-writer")) {
		t.Fatalf("the remote after the push: %v", remote)
	}
}

// TestSinceAfterReopenOfArchivedTask: a reopen of an archived task after
// an audit checkpoint creates its ledger ref on top of the archived head
// (and a post, its journal ref): audit verify --since checks the rows
// added after the entries, not the archived rows again (whose audit
// entries predate the checkpoint), so it holds. A ref created with plain
// git on top of an archived head, carrying a forged row, is still
// reported.
func TestSinceAfterReopenOfArchivedTask(t *testing.T) {
	f, _, _ := unreadableArchiveFixture(t)
	if out, errOut, code := f.cli("", "audit", "verify", "--checkpoint", "cp"); code != 0 {
		t.Fatalf("checkpoint: exit %d\n%s%s", code, out, errOut)
	}
	at := refs.Archive("test-writer") + ":" + archive.Path("E-1")
	ledgerHead, journalHead := f.rev(at+"/ledger"), f.rev(at+"/journal")

	t.Run("forged", func(t *testing.T) {
		raw := f.git("cat-file", "commit", ledgerHead)
		body, err := record.RecordFromMessage([]byte(raw[strings.Index(raw, "\n\n")+2:]))
		if err != nil {
			t.Fatal(err)
		}
		last, err := record.ParseRow(body)
		if err != nil {
			t.Fatal(err)
		}
		row, err := record.NewRow(record.KindTaskReopened, "E-1", last.Index+1, last.Hash(), "test-writer", map[string]string{"reason": "forged"})
		if err != nil {
			t.Fatal(err)
		}
		msg := strings.TrimSuffix(string(record.Message("task.reopened", row.Bytes())), "\n")
		forged := strings.TrimSpace(f.git("-c", "user.name=test-writer", "-c", "user.email=test-writer@bernstein", "commit-tree", "-p", ledgerHead, "-m", msg, gitstore.EmptyTree.String()))
		f.git("update-ref", refs.Ledger("E-1"), forged, "")
		out, errOut, code := f.cli("", "audit", "verify", "--since", "cp")
		if code != 1 || !strings.Contains(out, "E-1") {
			t.Fatalf("audit verify --since over a forged row on an archived head: exit %d\n%s%s", code, out, errOut)
		}
		f.git("update-ref", "-d", refs.Ledger("E-1"), forged)
	})

	t.Run("ref at the entry's head", func(t *testing.T) {
		// As a fetch from a remote that has not archived the task leaves it.
		f.git("update-ref", refs.Journal("E-1"), journalHead, "")
		if out, errOut, code := f.cli("", "audit", "verify", "--since", "cp"); code != 0 {
			t.Fatalf("audit verify --since with a ref at the archived head: exit %d\n%s%s", code, out, errOut)
		}
		f.git("update-ref", "-d", refs.Journal("E-1"), journalHead)
	})

	if _, errOut, code := f.cli("", "task", "reopen", "E-1", "--reason", "again"); code != 0 {
		t.Fatalf("reopen: exit %d %s", code, errOut)
	}
	tok, errOut, code := f.cli("", "task", "claim", "E-1", "--agent", "agent-2", "--output-json")
	if code != 0 {
		t.Fatalf("claim: exit %d %s", code, errOut)
	}
	var claim struct {
		Token string `json:"token"`
	}
	decodeJSON(t, tok, &claim)
	if out, errOut, code := f.cli("", "artifact", "post", "E-1", "after", "--type", "report", "--body", "# after",
		"--agent", "agent-2", "--claim-token", claim.Token); code != 0 {
		t.Fatalf("post: exit %d %s%s", code, out, errOut)
	}
	if f.rev(refs.Ledger("E-1")+"~2") != ledgerHead || !f.isAncestor(journalHead, refs.Journal("E-1")) {
		t.Fatal("the reopen and the post do not extend the archived heads")
	}
	if out, errOut, code := f.cli("", "audit", "verify", "--since", "cp"); code != 0 {
		t.Fatalf("audit verify --since after a reopen of an archived task: exit %d\n%s%s", code, out, errOut)
	}
}
