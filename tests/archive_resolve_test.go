package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/internal/archivetest"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// endedTask makes task with one artifact, abandoned: its ledger has three
// rows (created, claimed, abandoned).
func endedTask(t *testing.T, f *fixture, s *bernstein.Store, task string) {
	t.Helper()
	tok := f.claimed(s, task, "agent")
	f.post(s, task, "summary", "agent", tok, report("# "+task))
	if _, err := s.Transition(task, record.KindTaskAbandoned, "", "ended"); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) rev(ref string) string {
	f.t.Helper()
	return strings.TrimSpace(f.git("rev-parse", ref))
}

func oid(t *testing.T, s string) gitstore.Oid {
	t.Helper()
	o, err := gitstore.ParseOid(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// isAncestor asks git whether a is in b's history.
func (f *fixture) isAncestor(a, b string) bool {
	_, err := f.gitErr("merge-base", "--is-ancestor", a, b)
	return err == nil
}

// showTask reads task through the CLI: its phase and ledger rows (task
// show) and its integrity state (task list).
func (f *fixture) showTask(task string) (phase string, ledgerRows int, integrity string) {
	f.t.Helper()
	out, errOut, code := f.cli("", "task", "show", task, "--output-json")
	if code != 0 && code != 2 {
		f.t.Fatalf("task show %s: exit %d %s", task, code, errOut)
	}
	var doc struct {
		Phase      string `json:"phase"`
		LedgerRows int    `json:"ledger_rows"`
	}
	decodeJSON(f.t, out, &doc)
	out, errOut, code = f.cli("", "task", "list", "--output-json")
	if code != 0 && code != 2 {
		f.t.Fatalf("task list: exit %d %s", code, errOut)
	}
	var list struct {
		Tasks []struct {
			ID        string `json:"id"`
			Integrity struct {
				State string `json:"state"`
			} `json:"integrity"`
		} `json:"tasks"`
	}
	decodeJSON(f.t, out, &list)
	for _, e := range list.Tasks {
		if e.ID == task {
			integrity = e.Integrity.State
		}
	}
	return doc.Phase, doc.LedgerRows, integrity
}

// TestArchiveEntryAgainstRef: a ref older than the entry (left by a fetch
// from a remote that has not archived the task) reads as the entry; a ref
// that extends the entry (a reopen) reads as the ref; neither is a
// divergence.
func TestArchiveEntryAgainstRef(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "X-1")
	ledgerRef := refs.Ledger("X-1")
	head := f.rev(ledgerRef)
	if _, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"X-1"}}); err != nil {
		t.Fatal(err)
	}

	// A stale ref: the ledger before its last row.
	f.git("update-ref", ledgerRef, head+"~1")
	if phase, rows, state := f.showTask("X-1"); phase != string(ledger.PhaseAbandoned) || rows != 3 || state != verify.Verified {
		t.Fatalf("stale ref below the entry: phase %s rows %d %s; want the entry's abandoned, 3 rows, verified", phase, rows, state)
	}
	snap, err := s.Snapshot(refs.Ledger("X-1"), refs.Journal("X-1"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := snap.ReadOptional(ledgerRef); v.String() != head {
		t.Fatalf("snapshot reads %s, want the entry %s", v, head)
	}
	if from, ok := snap.FromArchive(ledgerRef); !ok || from != refs.Archive("test-writer") {
		t.Fatalf("the entry's value is not marked as the archive's: %q %v", from, ok)
	}
	if d := snap.Divergences(); len(d) != 0 {
		t.Fatalf("divergences: %v", d)
	}

	// A reopen extends the entry: the write takes the stale ref from its
	// own value to the new row, whose parent is the archived head.
	if _, err := s.Transition("X-1", record.KindTaskReopened, "", "once more"); err != nil {
		t.Fatal(err)
	}
	now := f.rev(ledgerRef)
	if parent := f.rev(now + "~1"); parent != head {
		t.Fatalf("the reopen's parent is %s, want the archived head %s", parent, head)
	}
	if phase, rows, _ := f.showTask("X-1"); phase != string(ledger.PhaseReopened) || rows != 4 {
		t.Fatalf("after the reopen: phase %s rows %d", phase, rows)
	}
	snap, err = s.Snapshot(refs.Ledger("X-1"), refs.Journal("X-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.FromArchive(ledgerRef); ok {
		t.Fatal("the ref extending the entry is marked as the archive's")
	}
	if _, ok := snap.FromArchive(refs.Journal("X-1")); !ok {
		t.Fatal("the archived journal is not marked as the archive's")
	}
	rep, err := s.AuditVerify(bernstein.AuditOptions{})
	if err != nil || !rep.Verified {
		t.Fatalf("audit verify: %v %+v", err, rep)
	}
}

// TestWriteToArchivedTaskCreatesItsRef: a row on an archived task (no ref)
// has the archived head as parent, creates the ref (git's "must not
// exist") and leaves the archive as it was.
func TestWriteToArchivedTaskCreatesItsRef(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "W-1")
	head := f.rev(refs.Ledger("W-1"))
	if _, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"W-1"}}); err != nil {
		t.Fatal(err)
	}
	arch := f.rev(refs.Archive("test-writer"))
	if _, err := s.Transition("W-1", record.KindTaskReopened, "", "again"); err != nil {
		t.Fatal(err)
	}
	if parent := f.rev(refs.Ledger("W-1") + "~1"); parent != head {
		t.Fatalf("the reopen's parent is %s, want the archived head %s", parent, head)
	}
	if got := f.rev(refs.Archive("test-writer")); got != arch {
		t.Fatalf("the archive ref moved: %s, was %s", got, arch)
	}
	if _, err := f.gitErr("rev-parse", "-q", "--verify", refs.Journal("W-1")); err == nil {
		t.Fatal("the journal, which the reopen did not extend, was given a ref")
	}
	// The claim after the reopen reads the ledger from the ref and the
	// journal from the archive: a post lands on the archived journal.
	tok, err := s.Claim("W-1", "agent-2")
	if err != nil {
		t.Fatal(err)
	}
	jhead := f.git("rev-parse", refs.Archive("test-writer")+":"+archive.Path("W-1")+"/journal")
	f.post(s, "W-1", "summary", "agent-2", tok, report("# after the reopen"))
	if !f.isAncestor(strings.TrimSpace(jhead), refs.Journal("W-1")) {
		t.Fatal("the post's journal does not extend the archived journal")
	}
	// Ended again, it is archived again at its new heads.
	if _, err := s.Transition("W-1", record.KindTaskAbandoned, "", "ended again"); err != nil {
		t.Fatal(err)
	}
	show, _, _ := f.cli("", "task", "show", "W-1", "--output-json")
	if res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"W-1"}}); err != nil || len(res.Archived) != 1 {
		t.Fatalf("archive again: %v %+v", err, res)
	}
	if again, _, _ := f.cli("", "task", "show", "W-1", "--output-json"); again != show {
		t.Fatalf("task show differs once archived again:\n%s\n%s", show, again)
	}
	// Reopened and ended again with no post: its journal never left the
	// archive, and the task is archived again all the same.
	endedTask(t, f, s, "W-2")
	for _, k := range []string{"", record.KindTaskReopened, record.KindTaskAbandoned, ""} {
		if k == "" {
			if res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"W-2"}}); err != nil || len(res.Archived) != 1 {
				t.Fatalf("archive W-2: %v %+v", err, res)
			}
		} else if _, err := s.Transition("W-2", k, "", "round two"); err != nil {
			t.Fatal(err)
		}
	}
	if out, _, _ := f.cli("", "task", "show", "W-2", "--output-json"); !strings.Contains(out, `"ledger_rows": 5`) {
		t.Fatalf("W-2 archived again: %s", out)
	}
	rep, err := s.AuditVerify(bernstein.AuditOptions{})
	if err != nil || !rep.Verified {
		t.Fatalf("audit verify: %v %+v", err, rep)
	}
}

// TestWriteToArchivedTaskRacingAnArchiveCommit: the archive ref moves
// between the write's read and its commit (here, to an archive naming the
// task at a later head). The write holds the archive ref at the value it
// read, so it fails, is redone on the new entry, and extends it: the
// task does not fork.
func TestWriteToArchivedTaskRacingAnArchiveCommit(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "R-1")
	a0 := archivetest.Tasks(t, f.dir, "test-writer", "R-1").String()
	// The later head, written by another host's writer (this host's
	// writer never wrote it): reopened and abandoned again, then archived.
	s2 := openWith(t, f.secondHome("host-b"))
	if _, err := s2.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{record.KindTaskReopened, record.KindTaskAbandoned} {
		if _, err := s2.Transition("R-1", k, "", "round two"); err != nil {
			t.Fatal(err)
		}
	}
	s2.Close()
	if _, errOut, code := f.cli("", "keys", "pin", "host-b"); code != 0 {
		t.Fatal(errOut)
	}
	later := f.rev(refs.Ledger("R-1"))
	a1 := archivetest.Commit(t, f.dir, "test-writer", []archive.Entry{{Task: "R-1",
		Journal: oid(t, f.git("rev-parse", refs.Archive("test-writer")+":"+archive.Path("R-1")+"/journal")), Ledger: oid(t, later)}}, nil).String()
	f.git("update-ref", "-d", refs.Ledger("R-1"), later)
	f.git("update-ref", refs.Archive("test-writer"), a0, a1) // back to the older archive
	s.Close()

	h := &faults{}
	s = f.openFaults(h)
	moved := 0
	h.set(func(step string) error {
		if step == "intent written" && moved == 0 {
			moved++
			f.git("update-ref", refs.Archive("test-writer"), a1, a0) // the archive commit lands
		}
		return nil
	})
	if _, err := s.Transition("R-1", record.KindTaskReopened, "", "third"); err != nil {
		t.Fatal(err)
	}
	h.set(nil)
	if moved != 1 {
		t.Fatal("the archive ref was never moved under the write")
	}
	if !f.isAncestor(later, refs.Ledger("R-1")) {
		t.Fatal("the write does not extend the entry the archive names now: it forked the task")
	}
	if phase, rows, state := f.showTask("R-1"); phase != string(ledger.PhaseReopened) || rows != 6 || state != verify.Verified {
		t.Fatalf("after the race: phase %s rows %d %s", phase, rows, state)
	}
}

// TestForgedArchiveEntryIsARollback: an archive commit written with plain
// git naming an older head of a task this host's writer wrote further is a
// rollback, caught by the heads memory as one of its refs would be.
func TestForgedArchiveEntryIsARollback(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "F-1")
	l, j := f.rev(refs.Ledger("F-1")), f.rev(refs.Journal("F-1"))
	s.Close()
	archivetest.Commit(t, f.dir, "mallory", []archive.Entry{{Task: "F-1", Journal: oid(t, j), Ledger: oid(t, f.rev(l+"~1"))}}, nil)
	f.git("update-ref", "-d", refs.Ledger("F-1"), l)
	f.git("update-ref", "-d", refs.Journal("F-1"), j)
	out, errOut, code := f.cli("", "task", "progress", "F-1", "--output-json")
	if code != 2 || !strings.Contains(out, `"state": "tampered"`) || !strings.Contains(out, "rolled back") {
		t.Fatalf("progress of a task archived at an older head: exit %d\n%s%s", code, out, errOut)
	}
	s = f.open()
	if _, err := s.Transition("F-1", record.KindTaskReopened, "", "on the old head"); !errors.Is(err, bernstein.ErrUnproven) {
		t.Fatalf("a write on the rolled-back archived ledger: %v", err)
	}
}

// TestForgedArchivedRowsAreTampered: an entry naming rows made with plain
// git (a commit carrying a well-formed row, signed by no one) on top of the
// task's chain: tampered, never rendered as the task's state.
func TestForgedArchivedRowsAreTampered(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "G-1")
	l, j := f.rev(refs.Ledger("G-1")), f.rev(refs.Journal("G-1"))
	s.Close()
	raw := f.git("cat-file", "commit", l)
	body, err := record.RecordFromMessage([]byte(raw[strings.Index(raw, "\n\n")+2:]))
	if err != nil {
		t.Fatal(err)
	}
	last, err := record.ParseRow(body)
	if err != nil {
		t.Fatal(err)
	}
	row, err := record.NewRow(record.KindTaskReopened, "G-1", 3, last.Hash(), "mallory", map[string]string{"reason": "forged"})
	if err != nil {
		t.Fatal(err)
	}
	msg := string(record.Message("task.reopened", row.Bytes()))
	forged := strings.TrimSpace(f.git("-c", "user.name=m", "-c", "user.email=m@e", "commit-tree", "-p", l, "-m", strings.TrimSuffix(msg, "\n"), gitstore.EmptyTree.String()))
	archivetest.Commit(t, f.dir, "mallory", []archive.Entry{{Task: "G-1", Journal: oid(t, j), Ledger: oid(t, forged)}}, nil)
	phase, _, state := f.showTask("G-1")
	if phase == string(ledger.PhaseReopened) || state != verify.Tampered {
		t.Fatalf("a forged row in an archive entry: phase %s, integrity %s; want not reopened, tampered", phase, state)
	}
}

// TestReaderDuringAnArchiveTransaction: a writer killed in the middle of
// an archive transaction (Store.Archive), its archive ref moved and one of
// the task's refs deleted, the other not, leaves its intent: a reader takes
// the transaction as finished and reads the task as before, never missing.
func TestReaderDuringAnArchiveTransaction(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "P-1")
	endedTask(t, f, s, "P-2")
	before := surfacesOf(t, f, false, "P-1", "P-2")
	s.Close()
	h := &faults{}
	s = f.openFaults(h)
	h.set(func(step string) error {
		if step == "renamed 1" { // the archive ref moved, the first deletion done
			return refs.ErrFault
		}
		return nil
	})
	// Past its commit point the archive is acknowledged; the stop leaves
	// the rest to the intent, as a kill would.
	s.Archive(bernstein.ArchiveRequest{Tasks: []string{"P-1"}})
	h.set(nil)
	if _, err := f.gitErr("rev-parse", "-q", "--verify", refs.Archive("test-writer")); err != nil {
		t.Fatal("the archive ref did not move before the stop")
	}
	gone := 0
	for _, ref := range []string{refs.Journal("P-1"), refs.Ledger("P-1")} {
		if _, err := f.gitErr("rev-parse", "-q", "--verify", ref); err != nil {
			gone++
		}
	}
	if gone != 1 {
		t.Fatalf("%d of the task's refs deleted at the stop, want 1", gone)
	}
	keeps, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "pack", "*.keep"))
	if len(keeps) == 0 {
		t.Fatal("no intent left")
	}
	after := surfacesOf(t, f, false, "P-1", "P-2")
	for k, want := range before {
		if got := after[k]; got != want {
			t.Errorf("%s differs while the archive transaction is pending\nbefore: %.300s\nafter:  %.300s", k, want, got)
		}
	}
}

// TestArchiveDivergence: this host's ref and another writer's archive
// entry name two reopens of one ended task, neither extending the other:
// the task reads as its ref, and audit verify reports the divergence
// (two hosts' chains of one task), never the task as tampered.
func TestArchiveDivergence(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "V-1")
	base := f.rev(refs.Ledger("V-1"))
	j := oid(t, f.rev(refs.Journal("V-1")))
	archivetest.Tasks(t, f.dir, "test-writer", "V-1")
	s2 := openWith(t, f.secondHome("host-b"))
	if _, err := s2.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}}); err != nil {
		t.Fatal(err)
	}
	// Host b's chain runs one row further than ours will: ordering the two
	// walks its chain back to our position, where it is not ours.
	if _, err := s2.Transition("V-1", record.KindTaskReopened, "", "host b's"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Claim("V-1", "agent-b"); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	theirs := f.rev(refs.Ledger("V-1"))
	f.git("update-ref", "-d", refs.Ledger("V-1"), theirs)
	if _, errOut, code := f.cli("", "keys", "pin", "host-b"); code != 0 {
		t.Fatal(errOut)
	}
	if _, err := s.Transition("V-1", record.KindTaskReopened, "", "this host's reopen"); err != nil {
		t.Fatal(err)
	}
	ours := f.rev(refs.Ledger("V-1"))
	if f.rev(ours+"~1") != base || f.rev(theirs+"~2") != base {
		t.Fatal("the two reopens do not fork from the archived head")
	}
	archivetest.Commit(t, f.dir, "host-b", []archive.Entry{{Task: "V-1", Journal: j, Ledger: oid(t, theirs)}}, nil)

	if phase, rows, state := f.showTask("V-1"); phase != string(ledger.PhaseReopened) || rows != 4 || state == verify.Tampered {
		out, _, _ := f.cli("", "task", "list", "--output-json")
		t.Fatalf("a diverged task: phase %s rows %d integrity %s\n%s", phase, rows, state, out)
	}
	if got := strings.TrimSpace(f.git("rev-parse", refs.Ledger("V-1"))); got != ours {
		t.Fatalf("the ref moved: %s", got)
	}
	rep, err := s.AuditVerify(bernstein.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := verify.ArchiveDivergence{Ref: refs.Ledger("V-1"), Kept: ours, KeptFrom: "", Other: theirs, OtherFrom: refs.Archive("host-b")}
	if len(rep.ArchiveDivergences) != 1 || rep.ArchiveDivergences[0] != want {
		t.Fatalf("archive divergences: %+v, want %+v", rep.ArchiveDivergences, want)
	}
	for _, fl := range rep.Failures {
		if fl.TaskID == "V-1" && strings.Contains(fl.Reason, "tampered") {
			t.Errorf("the divergence is reported as tampered: %+v", fl)
		}
	}
	t.Logf("audit: verified %v, failures %v", rep.Verified, rep.Failures)
}

// TestPushSendsNoArchivedValueAsRef: push sends the refs as they are: an
// archived task travels in its archive ref, never as task refs recreated
// on the remote from the archive's entries.
func TestPushSendsNoArchivedValueAsRef(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "U-1")
	f.claimed(s, "U-2", "agent")
	// Archived by the writer (a signed archive: push leaves out one that
	// is not its writer's, see TestPushPastFailedArchive).
	if _, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"U-1"}}); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	f.git("remote", "add", "origin", bare)
	if out, errOut, code := f.cli("", "push", "origin"); code != 0 {
		t.Fatalf("push: %d %s %s", code, out, errOut)
	}
	remote := refsOf(t, bare, refs.Prefix)
	for _, ref := range []string{refs.Journal("U-1"), refs.Ledger("U-1")} {
		if remote[ref] != "" {
			t.Errorf("push created %s on the remote from the archive", ref)
		}
	}
	if remote[refs.Ledger("U-2")] == "" || remote[refs.Archive("test-writer")] != f.rev(refs.Archive("test-writer")) {
		t.Fatalf("the remote lacks the open task or the archive: %v", remote)
	}
}

// TestMisplacedArchiveEntry: an archive tree written with plain git that
// puts a task under another task's shard. A single-task read looks in the
// task's own shard (archive.Lookup) and does not find it; a listing reads
// every shard, refuses the tree as malformed and reads past that archive,
// naming it in a warning: neither shows the task, so the two never
// disagree on what the archive holds.
func TestMisplacedArchiveEntry(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTask(t, f, s, "M-1")
	j, l := f.rev(refs.Journal("M-1")), f.rev(refs.Ledger("M-1"))
	s.Close()
	wrong := "00"
	if archive.Shard("M-1") == wrong {
		wrong = "01"
	}
	mk := func(in string) string { return strings.TrimSpace(f.git2(in, "mktree")) }
	task := mk(fmt.Sprintf("160000 commit %s\tjournal\n160000 commit %s\tledger\n", j, l))
	shard := mk(fmt.Sprintf("040000 tree %s\tM-1\n", task))
	dir := mk(fmt.Sprintf("040000 tree %s\t%s\n", shard, wrong))
	root := mk(fmt.Sprintf("040000 tree %s\tt\n", dir))
	c := strings.TrimSpace(f.git("-c", "user.name=m", "-c", "user.email=m@e", "commit-tree", "-p", l, "-p", j, "-m", "archive", root))
	f.git("update-ref", refs.Archive("mallory"), c)
	f.git("update-ref", "-d", refs.Journal("M-1"), j)
	f.git("update-ref", "-d", refs.Ledger("M-1"), l)
	if _, errOut, code := f.cli("", "task", "show", "M-1"); code == 0 || !strings.Contains(errOut, "unknown task") {
		t.Fatalf("task show of a task misplaced in an archive: exit %d %s", code, errOut)
	}
	out, errOut, code := f.cli("", "task", "list", "--output-json")
	var list bernstein.TaskListDoc
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("task list --output-json: %v\n%s", err, out)
	}
	listed := slices.ContainsFunc(list.Tasks, func(e bernstein.TaskListEntry) bool { return e.ID == "M-1" })
	if code != 0 || listed || !strings.Contains(errOut, refs.Archive("mallory")) || !strings.Contains(errOut, "shard") ||
		len(list.ArchivesReadPast) != 1 || list.ArchivesReadPast[0].Ref != refs.Archive("mallory") {
		t.Fatalf("task list over a misplaced archive entry: exit %d\n%s%s", code, out, errOut)
	}
}

// git2 runs git with stdin.
func (f *fixture) git2(stdin string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", f.dir}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		f.t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}
