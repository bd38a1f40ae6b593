package tests

import (
	"errors"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// TestCopiedTaskGrantsNothing: a task copied with plain git from another
// repository that the same writer serves (so every row carries a signature
// this host trusts) is foreign here: the library and the CLI say so and
// why, its claim token posts nothing, nothing is written on top of it, its
// content is never shown, and audit verify fails naming the binding.
func TestCopiedTaskGrantsNothing(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "H-1", Title: "honest"}); err != nil {
		t.Fatal(err)
	}
	c := forgetest.CopyTask(t, f.dir, f.home, "test-writer", "T-1")

	s2 := f.open()
	info, err := s2.Task(c.Task)
	if err != nil {
		t.Fatalf("task show of the copied task: %v", err)
	}
	pr := info.Progress.Proof
	if pr.State != "tampered" || len(pr.RowsAtFault) == 0 || !strings.Contains(pr.RowsAtFault[0].Reason, "foreign:") || !strings.Contains(pr.RowsAtFault[0].Reason, "copied here from another repository") {
		t.Fatalf("the copied task's proof: %+v", pr)
	}
	if info.ClaimAgent != "" || info.LedgerRows != 0 {
		t.Fatalf("the copied task's ledger counts: %+v", info)
	}
	// No post lands on the copied claim, by its token or anyone's.
	auditBefore := len(f.chainRecords(refs.Audit("test-writer")))
	_, err = s2.Post(bernstein.PostRequest{Task: c.Task, Key: "summary", Agent: "agent", ClaimToken: c.Token, Payload: report("on a copied claim")})
	var refused *bernstein.RefusedError
	if !errors.As(err, &refused) || refused.Reason != record.ReasonClaimUnproven {
		t.Fatalf("post on the copied claim: %v", err)
	}
	if _, err := s2.Checkpoint(c.Task, "HEAD", ""); !errors.Is(err, bernstein.ErrUnproven) {
		t.Fatalf("checkpoint on the copied task: %v", err)
	}
	if _, err := s2.Transition(c.Task, record.KindTaskSuspended, "", ""); !errors.Is(err, bernstein.ErrUnproven) {
		t.Fatalf("transition on the copied task: %v", err)
	}
	if n := len(f.chainRecords(refs.Audit("test-writer"))); n != auditBefore+1 {
		t.Fatalf("the refusal was not audited: %d audit entries, was %d", n, auditBefore)
	}
	// The honest task is untouched.
	if h, err := s2.Task("H-1"); err != nil || h.Progress.Proof.State != "verified" {
		t.Fatalf("the honest task beside the copied one: %+v %v", h, err)
	}
	// The CLI: show, list and progress, of the task and of its artifacts,
	// say foreign and show no content.
	for _, args := range [][]string{{"task", "show", c.Task}, {"task", "list"}, {"task", "progress", c.Task}, {"artifact", "show", c.Task, "findings"}, {"artifact", "list", c.Task}} {
		out, errOut, _ := f.cli("", args...)
		if strings.Contains(out+errOut, forgetest.ForgedBody) {
			t.Fatalf("%v shows the copied content:\n%s%s", args, out, errOut)
		}
		if !strings.Contains(out+errOut, "foreign: its first record is rooted in another repository") {
			t.Fatalf("%v does not say the task is foreign:\n%s%s", args, out, errOut)
		}
	}
	out, errOut, code := f.cli("", "audit", "verify")
	if code == 0 || !strings.Contains(out+errOut, "repository_binding") {
		t.Fatalf("audit verify with a copied task: exit %d\n%s%s", code, out, errOut)
	}
	// In its own repository the task is verified: the rows are genuine.
	other := openWith(t, bernstein.Options{Repo: c.From, Home: f.home})
	if in, err := other.Task(c.Task); err != nil || in.Progress.Proof.State != "verified" {
		t.Fatalf("the task in its own repository: %+v %v", in, err)
	}
}
