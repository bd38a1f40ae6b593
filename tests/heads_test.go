package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// A chain moved back with plain git to an earlier commit of its own history
// consists of rows that all prove. The writer that extended it remembers
// its head outside the repository (BERNSTEIN_HOME/heads), so on its host the
// rollback grants nothing: no claim the ledger had released, no version
// number used twice, no progress reported as proven.

// rowCommit is the commit of a chain's row at index (0-based) of a chain
// that has rows rows.
func rowCommit(f *fixture, ref string, index, rows int) string {
	return strings.TrimSpace(f.git("rev-parse", fmt.Sprintf("%s~%d", ref, rows-1-index)))
}

// TestLedgerRollbackRevivesNoClaim: mallory held the claim, it was released
// and given to agent-7. Moving the ledger back to mallory's claim with
// plain git does not give it back to her: her post is refused as unproven
// (and audited), the task's progress says tampered, and the writer records
// nothing on top of the rolled-back ledger.
func TestLedgerRollbackRevivesNoClaim(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	old := f.claimed(s, "LR-1", "mallory") // rows 0 created, 1 claimed
	f.post(s, "LR-1", "k", "mallory", old, report("while she held it"))
	if _, err := s.Transition("LR-1", "task.released", "", "handed over"); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Claim("LR-1", "agent-7")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ledger := refs.Ledger("LR-1")
	f.git("update-ref", ledger, rowCommit(f, ledger, 1, 4))

	out, errOut, code := f.cli("", "artifact", "post", "LR-1", "k", "--type", "report", "--body", "after the rollback",
		"--agent", "mallory", "--claim-token", old)
	if code != 3 || !strings.Contains(errOut, "claim_unproven") || !strings.Contains(errOut, "rolled back") {
		t.Fatalf("mallory's post on a rolled-back ledger: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = f.cli("", "task", "progress", "LR-1", "--output-json")
	var w struct {
		Proof struct {
			State  string            `json:"state"`
			Faults []verify.RowFault `json:"rows_at_fault"`
		} `json:"proof"`
	}
	decodeJSON(t, out, &w)
	if code != 2 || w.Proof.State != verify.Tampered || len(w.Proof.Faults) != 1 ||
		w.Proof.Faults[0].Chain != "ledger" || w.Proof.Faults[0].Index != 2 || !strings.Contains(w.Proof.Faults[0].Reason, "rolled back") {
		t.Fatalf("progress of a rolled-back ledger: exit %d %+v\n%s%s", code, w.Proof, out, errOut)
	}
	s2 := f.open()
	if _, err := s2.Transition("LR-1", "task.started", "", ""); !errors.Is(err, bernstein.ErrUnproven) {
		t.Fatalf("a transition on a rolled-back ledger: %v", err)
	}
	h, err := s2.TaskHandle("LR-1")
	if err != nil {
		t.Fatal(err)
	}
	if h.Progress.Proof.State != verify.Tampered {
		t.Fatalf("the task handle of a rolled-back ledger says %s", h.Progress.Proof.State)
	}
	// The real holder is refused too (the ledger that named it is gone),
	// and nothing was written by either refusal but the audit entries.
	if _, err := s2.Post(bernstein.PostRequest{Task: "LR-1", Key: "k", Agent: "agent-7", ClaimToken: tok, Payload: report("x")}); err == nil {
		t.Fatal("a post on a rolled-back ledger was accepted")
	}
	if got := strings.TrimSpace(f.git("rev-parse", ledger)); got != rowCommit(f, ledger, 1, 2) {
		t.Fatalf("something was written on the rolled-back ledger: %s", got)
	}
}

// TestJournalRollbackTakesNoPost: a journal moved back two rows takes no
// post (which would reuse version 2 and 3 of its key); progress on this
// host says tampered. Removing the remembered head, as the error says to
// when the move was on purpose, lets writes go on.
func TestJournalRollbackTakesNoPost(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "JR-1", "agent")
	for i := 1; i <= 3; i++ {
		f.post(s, "JR-1", "k", "agent", tok, report(fmt.Sprintf("version %d", i)))
	}
	s.Close()
	journal := refs.Journal("JR-1")
	f.git("update-ref", journal, journal+"~2")

	_, errOut, code := f.cli("", "artifact", "post", "JR-1", "k", "--type", "report", "--body", "v2 again",
		"--agent", "agent", "--claim-token", tok)
	if code != 1 || !strings.Contains(errOut, "rolled back") || !strings.Contains(errOut, "up to index 2") {
		t.Fatalf("a post on a rolled-back journal: exit %d %s", code, errOut)
	}
	if got := strings.TrimSpace(f.git("rev-list", "--count", journal)); got != "1" {
		t.Fatalf("the journal holds %s rows after the refused post, want 1", got)
	}
	if out, errOut, code := f.cli("", "task", "progress", "JR-1"); code != 2 || !strings.Contains(out+errOut, "rolled back") {
		t.Fatalf("progress of a rolled-back journal: exit %d %s", code, errOut)
	}
	if _, _, code := f.cli("", "checkpoint", "JR-1", "--commit", "HEAD"); code == 0 {
		t.Fatal("a checkpoint was recorded on a rolled-back journal")
	}

	// On purpose: the command the error names forgets the head, and so goes
	// the block.
	if !strings.Contains(errOut, "run 'bernstein audit accept "+journal+"'") {
		t.Fatalf("the error does not name the way out: %s", errOut)
	}
	if out, errOut, code := f.cli("", "audit", "accept", journal); code != 0 {
		t.Fatalf("audit accept: exit %d %s%s", code, out, errOut)
	}
	if _, errOut, code := f.cli("", "artifact", "post", "JR-1", "k", "--type", "report", "--body", "v2 again",
		"--agent", "agent", "--claim-token", tok); code != 0 {
		t.Fatalf("a post after the head was dropped on purpose: exit %d %s", code, errOut)
	}
}

// TestSpineRollbackTakesNoPost: the writer's own spine moved back one entry
// (its journal rows left as they were) would make the next entry reuse a
// sequence number; the write is refused.
func TestSpineRollbackTakesNoPost(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SR-1", "agent")
	f.post(s, "SR-1", "k", "agent", tok, report("one"))
	f.post(s, "SR-1", "k", "agent", tok, report("two"))
	s.Close()
	spine := refs.Spine("test-writer")
	f.git("update-ref", spine, spine+"~1")
	s2 := f.open()
	_, err := s2.Post(bernstein.PostRequest{Task: "SR-1", Key: "j", Agent: "agent", ClaimToken: tok, Payload: report("three")})
	if !errors.Is(err, bernstein.ErrUnproven) || !strings.Contains(err.Error(), spine) || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("a post on a rolled-back spine: %v", err)
	}
}

// TestDeletedLedgerIsNotCreatedAgain: a ledger whose ref was deleted with
// plain git is a ledger rolled back to nothing; creating the task again
// would start a second history under the same id.
func TestDeletedLedgerIsNotCreatedAgain(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	f.claimed(s, "DL-1", "agent")
	s.Close()
	f.git("update-ref", "-d", refs.Ledger("DL-1"))
	s2 := f.open()
	if _, err := s2.CreateTask(bernstein.TaskSpec{ID: "DL-1", Title: "again"}); !errors.Is(err, bernstein.ErrUnproven) || !strings.Contains(err.Error(), "holds nothing") {
		t.Fatalf("create over a deleted ledger: %v", err)
	}
}

// TestStaleViewIsNoRollback: a reader's view taken before a post from
// another process is older than the head that post remembered. Reading
// from it is no rollback: every answer proves.
func TestStaleViewIsNoRollback(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SV-1", "agent")
	f.post(s, "SV-1", "k", "agent", tok, report("one"))
	view, err := s.ReadView("SV-1")
	if err != nil {
		t.Fatal(err)
	}
	other := f.open() // another store, as another process would be
	f.post(other, "SV-1", "k", "agent", tok, report("two"))
	other.Close()
	info, err := view.Task("SV-1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Progress.Proof.State != verify.Verified || len(info.Progress.Proof.RowsAtFault) != 0 {
		t.Fatalf("an older view reads as %s: %+v", info.Progress.Proof.State, info.Progress.Proof.RowsAtFault)
	}
	if info.JournalRows != 1 {
		t.Fatalf("the old view shows %d rows, want 1", info.JournalRows)
	}
}

// TestJournalRewrittenIsCaught: the journal holds as many rows as this
// host's writer wrote, but its last row is another one, signed with the
// same key (a copy of the identity writing elsewhere): the rows it built on
// are gone as surely as in a rollback.
func TestJournalRewrittenIsCaught(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "JW-1", "agent")
	f.post(s, "JW-1", "k", "agent", tok, report("one"))
	f.post(s, "JW-1", "k", "agent", tok, report("two"))
	s.Close()
	// The one file that holds the heads this writer wrote here.
	heads, _ := filepath.Glob(filepath.Join(f.home, "heads", "*", "test-writer.heads"))
	if len(heads) != 1 {
		t.Fatalf("heads files: %v", heads)
	}
	head := heads[0]
	remembered, err := os.ReadFile(head)
	if err != nil {
		t.Fatal(err)
	}
	// Elsewhere, the same writer's second row is another one.
	journal := refs.Journal("JW-1")
	f.git("update-ref", journal, journal+"~1")
	if _, errOut, code := f.cli("", "audit", "accept", journal); code != 0 {
		t.Fatalf("audit accept: %s", errOut)
	}
	s2 := f.open()
	f.post(s2, "JW-1", "k", "agent", tok, report("two, elsewhere"))
	s2.Close()
	if err := os.WriteFile(head, remembered, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := f.cli("", "artifact", "post", "JW-1", "k", "--type", "report", "--body", "three",
		"--agent", "agent", "--claim-token", tok)
	if code != 1 || !strings.Contains(errOut, "rewritten: its record at index 1") {
		t.Fatalf("a post on a rewritten journal: exit %d %s", code, errOut)
	}
}

// TestAuditVerifyFindsRollbackOnlyThisHostSees: the journal, the spine and
// the audit mirror all moved back one post together leave a repository
// that is whole in itself; only the heads this host's writer wrote tell.
func TestAuditVerifyFindsRollbackOnlyThisHostSees(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "AR-1", "agent")
	f.post(s, "AR-1", "k", "agent", tok, report("one"))
	f.post(s, "AR-1", "k", "agent", tok, report("two"))
	s.Close()
	for _, ref := range []string{refs.Journal("AR-1"), refs.Spine("test-writer"), refs.Audit("test-writer")} {
		f.git("update-ref", ref, ref+"~1")
	}
	out, errOut, code := f.cli("", "audit", "verify", "--output-json")
	var d struct {
		Failures []verify.Failure `json:"failures"`
	}
	decodeJSON(t, out, &d)
	var got []string
	for _, fl := range d.Failures {
		got = append(got, fmt.Sprintf("%s %s %s", fl.Check, fl.TaskID, fl.Writer))
	}
	sort.Strings(got)
	want := "rollback  test-writer,rollback  test-writer,rollback AR-1 "
	if code != 1 || strings.Join(got, ",") != want {
		t.Fatalf("audit verify of a repository rolled back whole: exit %d %v, want %s\n%s", code, got, want, errOut)
	}
}

// TestListFindsEveryRollback: a list reads the heads this host's writer
// left once per view (the heads file found and made current at its first
// read); each task of the list is still checked against them, the first
// one read and those after it.
func TestListFindsEveryRollback(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	for _, id := range []string{"LA-1", "LA-2", "LA-3"} {
		f.claimed(s, id, "agent")
		if _, err := s.Transition(id, "task.released", "", "handed over"); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	for _, id := range []string{"LA-1", "LA-3"} {
		ledger := refs.Ledger(id)
		f.git("update-ref", ledger, rowCommit(f, ledger, 1, 3))
	}
	out, errOut, code := f.cli("", "task", "list", "--output-json")
	var doc struct {
		Tasks []struct {
			ID        string `json:"id"`
			Integrity struct {
				State  string `json:"state"`
				Reason string `json:"reason"`
			} `json:"integrity"`
		} `json:"tasks"`
	}
	decodeJSON(t, out, &doc)
	got := map[string]string{}
	for _, e := range doc.Tasks {
		got[e.ID] = e.Integrity.State
		if e.Integrity.State == verify.Tampered && !strings.Contains(e.Integrity.Reason, "progress") {
			t.Errorf("%s: %s", e.ID, e.Integrity.Reason)
		}
	}
	want := map[string]string{"LA-1": verify.Tampered, "LA-2": verify.Verified, "LA-3": verify.Tampered}
	if code != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("task list: exit %d, states %v, want %v\n%s", code, got, want, errOut)
	}
}
