package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/server"
)

// forgeryRepo is a repository set up as the forgeries assume
// (internal/forgetest): two commits, task F-1 declaring the gate build and the
// evidence tests, claimed by agent, a checkpoint, summary v1 posted.
func forgeryRepo(t *testing.T) *repo {
	t.Helper()
	root := t.TempDir()
	r := &repo{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home"), task: "F-1"}
	r.opts = bernstein.Options{Repo: r.dir, Home: r.home}
	if _, err := bernstein.Init(r.opts, "test-writer"); err != nil {
		t.Fatal(err)
	}
	// Commits with trees of their own: a checkpoint of each earns.
	for _, msg := range []string{"first", "second"} {
		if err := os.WriteFile(filepath.Join(r.dir, "work.txt"), []byte(msg+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.git("add", "work.txt")
		r.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", msg)
	}
	s, err := bernstein.Open(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: r.task, Title: "forged", Gates: []ledger.Gate{{Name: "build", Command: "true"}},
		Evidence: []ledger.Producer{{Name: "tests", Command: "true", Required: true}}}); err != nil {
		t.Fatal(err)
	}
	if r.token, err = s.Claim(r.task, "agent"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(r.task, "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Post(bernstein.PostRequest{Task: r.task, Key: "summary", Agent: "agent", ClaimToken: r.token,
		Payload: artifact.Payload{Type: artifact.TypeReport, Body: "honest findings"}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAPIForgeries: rows forged with plain git, of every kind and signed
// every way (internal/forgetest, the table the library's and the CLI's
// forgery test use), grant nothing over the HTTP API, read by a server
// that was already running (its memo warm): the task detail, the progress
// (whose proof names the rows at fault), the journal (each forged row
// with its proof state) and the artifacts show the task as it was; no
// forged content is shown. A post with the forged claim's token is refused
// 403 claim_unproven and recorded in the audit mirror, as the real holder's
// post on a forged ledger is; on a forged journal the holder's post is a
// 409 naming the chain and the index, and writes nothing.
func TestAPIForgeries(t *testing.T) {
	apiTestDone(t)
	const task = "F-1"
	ok := `{"key":"summary","artifact_type":"report","body":"after the forgery"}`
	for _, v := range forgetest.Variants {
		for _, fg := range forgetest.Forgeries {
			t.Run(v.Name+"/"+fg.Name, func(t *testing.T) {
				t.Parallel()
				r := forgeryRepo(t)
				c := newAPIClient(t, r)
				var before server.TaskDetail
				c.get("/tasks/"+task, 200, &before)
				var journalBefore bernstein.JournalDoc
				c.get("/tasks/"+task+"/journal", 200, &journalBefore)
				if before.Task.Progress.Proof.State != "verified" || !before.Artifacts.Verified {
					t.Fatalf("before the forgery: %+v", before.Task.Progress.Proof)
				}

				n := fg.Rows(v.New(t, r.dir, "test-writer"), task)

				var after server.TaskDetail
				body := c.get("/tasks/"+task, 200, &after)
				ti, bi := after.Task, before.Task
				if ti.Phase != bi.Phase || ti.ClaimAgent != bi.ClaimAgent || ti.ClaimID != bi.ClaimID || ti.LedgerRows != bi.LedgerRows ||
					ti.JournalRows != bi.JournalRows || ti.Attempts != bi.Attempts || ti.Progress.VectorHash != bi.Progress.VectorHash {
					t.Fatalf("the forgery moved the task detail:\nbefore %+v\nafter %+v", bi, ti)
				}
				var p progress.Wire
				c.get("/tasks/"+task+"/progress", 200, &p)
				if p.VectorHash != bi.Progress.VectorHash || p.EarnedSteps != bi.Progress.EarnedSteps || p.Proof.State != v.State || len(p.Proof.RowsAtFault) != n {
					t.Fatalf("progress after the forgery: %+v, want the vector %s, proof %s with %d rows at fault", p, bi.Progress.VectorHash, v.State, n)
				}
				for _, f := range p.Proof.RowsAtFault {
					if f.Chain != fg.Chain || f.State != v.State || f.Reason == "" {
						t.Fatalf("row at fault %+v, want the %s, %s, with a reason", f, fg.Chain, v.State)
					}
				}
				var journal bernstein.JournalDoc
				c.get("/tasks/"+task+"/journal", 200, &journal)
				grow := 0
				if fg.Chain == "journal" {
					grow = n
				}
				if len(journal.Rows) != len(journalBefore.Rows)+grow {
					t.Fatalf("journal: %d rows, was %d", len(journal.Rows), len(journalBefore.Rows))
				}
				for i, row := range journal.Rows {
					if want := "verified"; i >= len(journalBefore.Rows) && row.Proof != v.State || i < len(journalBefore.Rows) && row.Proof != want {
						t.Fatalf("journal row %d: proof %s", i, row.Proof)
					}
				}
				var list bernstein.ArtifactListDoc
				listBody := c.get("/tasks/"+task+"/artifacts", 200, &list)
				// The task list reads the task as its proof does (tampered,
				// or unverifiable for a writer not pinned here), or tampered
				// when its artifact list finds a version tampered or its
				// journal identity mismatched (a forged completion no seal
				// matches).
				want := v.State
				for _, a := range list.Artifacts {
					if a.State == "tampered" {
						want = "tampered"
					}
				}
				if list.JournalIdentity == "mismatched" {
					want = "tampered"
				}
				var tasks bernstein.TaskListDoc
				c.get("/tasks", 200, &tasks)
				if len(tasks.Tasks) != 1 || tasks.Tasks[0].Integrity.State != want || tasks.Tasks[0].Integrity.ProgressProof != v.State {
					t.Fatalf("task list after the forgery: %+v, want %s (proof %s)", tasks.Tasks[0].Integrity, want, v.State)
				}
				var shown bernstein.ArtifactShowDoc
				showBody := c.get("/tasks/"+task+"/artifacts/summary", 200, &shown)
				for what, b := range map[string][]byte{"detail": body, "list": listBody, "show": showBody} {
					if strings.Contains(string(b), forgetest.ForgedBody) {
						t.Fatalf("the %s shows the forged content", what)
					}
				}
				// The default version is v1, or (a tampered latest is
				// shown as such) v2 without its content.
				if shown.State == "verified" && shown.Version != 1 || shown.State != "verified" && (shown.Payload != nil || shown.Withheld == "") {
					t.Fatalf("shown after the forgery: v%d %s, payload %v", shown.Version, shown.State, shown.Payload)
				}
				if fg.Name == "artifact" {
					var v2 bernstein.ArtifactShowDoc
					c.get("/tasks/"+task+"/artifacts/summary?version=2", 200, &v2)
					if v2.State == "verified" || v2.Payload != nil || v2.Withheld == "" {
						t.Fatalf("the forged version: %s payload %v withheld %q", v2.State, v2.Payload, v2.Withheld)
					}
					for _, a := range list.Artifacts {
						if a.Version == 2 && a.State == "verified" {
							t.Fatalf("the forged version is listed verified")
						}
					}
				}

				// Posts: the forged claim's token, then the holder's.
				if fg.Name == "claim" {
					c.wantRefused(r, task, forgetest.MalloryToken, ok, 403, "task_id", "mallory", record.ReasonClaimUnproven)
				} else {
					refsBefore := r.bernsteinRefs()
					c.wantPostError(task, "Bearer "+forgetest.MalloryToken, []byte(ok), 401, "claim_token")
					if r.bernsteinRefs() != refsBefore {
						t.Fatal("a post with a token of no claim wrote")
					}
				}
				if fg.Chain == "ledger" {
					c.wantRefused(r, task, r.token, ok, 403, "task_id", "agent", record.ReasonClaimUnproven)
				} else {
					refsBefore := r.bernsteinRefs()
					e := c.wantPostError(task, "Bearer "+r.token, []byte(ok), 409, "task_id")
					if want := fmt.Sprintf("the journal of %s holds a row no trusted writer signed at index %d", task, len(journalBefore.Rows)); !strings.Contains(e.Error.Message, want) {
						t.Fatalf("409 %q does not say %q", e.Error.Message, want)
					}
					if r.bernsteinRefs() != refsBefore {
						t.Fatal("a post on a forged journal wrote")
					}
				}
			})
		}
	}
}

// TestAPIPinSeenAtOnce: a key pinned (or unpinned) by another process takes
// effect at once in a server that is already running, though the refs the
// answers were kept for did not move: the API's answers are kept under the
// trust set too.
func TestAPIPinSeenAtOnce(t *testing.T) {
	r := newTaskRepo(t, "PN-1")
	r.post("summary", "posted by this host's writer")
	pins := filepath.Join(t.TempDir(), "signers")
	if err := os.WriteFile(pins, []byte(r.git("show", r.git("for-each-ref", "--format=%(refname)", "refs/bernstein/writers/test-writer.*")+":allowed_signers")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agentHome := filepath.Join(t.TempDir(), "agent-home")
	if _, err := bernstein.Init(bernstein.Options{Repo: r.dir, Home: agentHome}, "agent-writer"); err != nil {
		t.Fatal(err)
	}
	agent, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: agentHome, AllowedSigners: pins})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Post(bernstein.PostRequest{Task: "PN-1", Key: "summary", Agent: "agent-1", ClaimToken: r.token,
		Payload: artifact.Payload{Type: artifact.TypeReport, Body: "posted by the agent's writer"}}); err != nil {
		t.Fatal(err)
	}
	agent.Close()
	c := newAPIClient(t, r)
	state := func() (string, string) {
		t.Helper()
		var d server.TaskDetail
		c.get("/tasks/PN-1", 200, &d)
		var p progress.Wire
		c.get("/tasks/PN-1/progress", 200, &p)
		for _, a := range d.Artifacts.Artifacts {
			if a.Version == 2 {
				return a.State, p.Proof.State
			}
		}
		t.Fatalf("no version 2: %+v", d.Artifacts)
		return "", ""
	}
	for range 2 {
		if v2, proof := state(); v2 != "unverifiable" || proof != "unverifiable" {
			t.Fatalf("before the pin: v2 %s, proof %s", v2, proof)
		}
	}
	computed := c.srv.APIComputations("report", "PN-1")
	if computed != 1 {
		t.Fatalf("the answer was computed %d times for two reads", computed)
	}
	r.cli("keys", "pin", "agent-writer")
	if v2, proof := state(); v2 != "verified" || proof != "verified" {
		t.Fatalf("right after the pin: v2 %s, proof %s", v2, proof)
	}
	var shown bernstein.ArtifactShowDoc
	c.get("/tasks/PN-1/artifacts/summary", 200, &shown)
	if shown.Version != 2 || shown.Payload == nil {
		t.Fatalf("shown right after the pin: v%d %s", shown.Version, shown.State)
	}
	r.cli("keys", "unpin", "agent-writer")
	if v2, proof := state(); v2 != "unverifiable" || proof != "unverifiable" {
		t.Fatalf("right after the unpin: v2 %s, proof %s", v2, proof)
	}
	if n := c.srv.APIComputations("report", "PN-1"); n != computed+2 {
		t.Fatalf("the answer was computed %d times, want once per trust set (%d)", n, computed+2)
	}
}

// TestAPICopiedTask: a task copied with plain git from another repository
// the same writer serves (forgetest.CopyTask) is foreign over the HTTP API
// too: its detail and progress are tampered with the binding named, the
// task list says so, its content is never shown, and its claim token is
// no live claim here (401, nothing written).
func TestAPICopiedTask(t *testing.T) {
	r := forgeryRepo(t)
	cp := forgetest.CopyTask(t, r.dir, r.home, "test-writer", "C-1")
	c := newAPIClient(t, r)
	var detail server.TaskDetail
	body := c.get("/tasks/"+cp.Task, 200, &detail)
	pr := detail.Task.Progress.Proof
	if pr.State != "tampered" || len(pr.RowsAtFault) != cp.Rows || !strings.Contains(pr.RowsAtFault[0].Reason, "foreign: its first record is rooted in another repository") {
		t.Fatalf("the copied task's detail: %+v", pr)
	}
	if detail.Task.LedgerRows != 0 || detail.Task.ClaimAgent != "" {
		t.Fatalf("the copied task's rows count: %+v", detail.Task)
	}
	var tasks bernstein.TaskListDoc
	c.get("/tasks", 200, &tasks)
	found := false
	for _, tk := range tasks.Tasks {
		if tk.ID == cp.Task {
			found = true
			if tk.Integrity.State != "tampered" {
				t.Fatalf("the task list: %+v", tk.Integrity)
			}
		}
	}
	if !found {
		t.Fatalf("the copied task is not listed: %+v", tasks.Tasks)
	}
	show := c.get("/tasks/"+cp.Task+"/artifacts/findings", 200, nil)
	for what, b := range map[string][]byte{"detail": body, "show": show} {
		if strings.Contains(string(b), forgetest.ForgedBody) {
			t.Fatalf("the %s shows the copied content", what)
		}
	}
	// The copied claim is no live claim here: its token posts nothing.
	refsBefore := r.bernsteinRefs()
	c.wantPostError(cp.Task, "Bearer "+cp.Token, []byte(`{"key":"summary","artifact_type":"report","body":"on a copied claim"}`), 401, "claim_token")
	if r.bernsteinRefs() != refsBefore {
		t.Fatal("a post on the copied claim wrote")
	}
}
