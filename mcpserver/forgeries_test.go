package mcpserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/internal/testbin"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/record"
)

const forgedTask = "F-1"

// forgedSetUp makes the honest task of forgetest.SetUp and reads its handle
// over the tool before the forgery: everything proven.
func forgedSetUp(t *testing.T, r *repo, fg forgetest.Forgery) (tok string, before map[string]any) {
	t.Helper()
	tok = forgetest.SetUp(t, r.store, forgedTask, fg)
	before = readHandle(t, serveAs(t, r, "agent", tok), forgedTask)
	p := before["progress"].(map[string]any)
	if proof := p["proof"].(map[string]any); proof["state"] != "verified" || len(proof["rows_at_fault"].([]any)) != 0 {
		t.Fatalf("before the forgery: %v", proof)
	}
	// What SetUp did, by hand: one checkpoint, the declared gate and
	// producer, no pass yet; the ledger created, claimed and (unless the
	// forgery needs a claimed task) started; summary v1 posted.
	phase, ledgerRows, attempts := "started", 3.0, 1.0
	if fg.Claimed {
		phase, ledgerRows, attempts = "claimed", 2, 0
	}
	want := map[string]any{"checkpoints": 1.0, "diffs_captured": 0.0, "gate_attempts": 0.0, "gates_passed": 0.0, "evidence_declared": 1.0,
		"evidence_passed": 0.0, "ledger_phase": phase, "ledger_attempts": attempts, "terminal": false, "earned_steps": 1.0,
		"journal_rows": 2.0, "ledger_rows": ledgerRows}
	for k, v := range want {
		if p[k] != v {
			t.Fatalf("before the forgery: progress %s = %v, want %v", k, p[k], v)
		}
	}
	return tok, before
}

// checkForgedHandle checks a handle read after fg's n rows were forged by v:
// the same vector, status and heads as before, and a proof in state
// v.State naming the n forged rows, the first at the index the chain's
// counted rows end.
func checkForgedHandle(t *testing.T, before, after map[string]any, v forgetest.Variant, fg forgetest.Forgery, n int) {
	t.Helper()
	for _, k := range []string{"progressHash", "status", "journalHead", "spineHead", "taskId"} {
		if after[k] != before[k] {
			t.Errorf("the forgery moved the handle's %s: %v -> %v", k, before[k], after[k])
		}
	}
	pb, pa := before["progress"].(map[string]any), after["progress"].(map[string]any)
	for k := range pb {
		if k != "proof" && !reflect.DeepEqual(pa[k], pb[k]) {
			t.Errorf("the forgery moved progress %s: %v -> %v", k, pb[k], pa[k])
		}
	}
	proof := pa["proof"].(map[string]any)
	faults := proof["rows_at_fault"].([]any)
	if proof["state"] != v.State || len(faults) != n {
		t.Fatalf("proof after the forgery: %v, want state %s and %d rows at fault", proof, v.State, n)
	}
	first := pb["ledger_rows"].(float64)
	if fg.Chain == "journal" {
		first = pb["journal_rows"].(float64)
	}
	for i, f := range faults {
		f := f.(map[string]any)
		if f["chain"] != fg.Chain || f["index"] != first+float64(i) || f["state"] != v.State || f["reason"] == "" {
			t.Errorf("row at fault %d: %v, want the %s at index %v in state %s", i, f, fg.Chain, first+float64(i), v.State)
		}
	}
}

// TestForgedRowsGrantNothingOverMCP forges every kind of row of
// forgetest.Forgeries, with each of its signers, on a task an MCP server
// serves. Over the tools nothing is granted: the handle shows the same
// vector, status and heads, with a proof naming the forged rows; mallory's
// post is refused and audited (claim_unproven on a forged ledger, a scope
// violation on the real claim otherwise); the claim holder's post is
// refused and audited on a forged ledger, and refused without a write on a
// forged journal.
func TestForgedRowsGrantNothingOverMCP(t *testing.T) {
	for _, v := range forgetest.Variants {
		for _, fg := range forgetest.Forgeries {
			t.Run(v.Name+"/"+fg.Name, func(t *testing.T) {
				t.Parallel()
				r := newRepo(t)
				tok, before := forgedSetUp(t, r, fg)
				n := fg.Rows(v.New(t, r.dir, writer), forgedTask)

				agent := serveAs(t, r, "agent", tok)
				checkForgedHandle(t, before, readHandle(t, agent, forgedTask), v, fg, n)
				// A server on a store opened after the forgery says the same.
				checkForgedHandle(t, before, readHandle(t, serveAs(t, reopen(t, r), "agent", tok), forgedTask), v, fg, n)

				mallory := serveAs(t, r, "mallory", forgetest.MalloryToken)
				post := report(forgedTask, "summary", "after the forgery")
				if fg.Chain == "ledger" {
					refusal(t, r, mallory, post, "mallory", record.ReasonClaimUnproven)
					if msg := refusal(t, r, agent, post, "agent", record.ReasonClaimUnproven); !strings.Contains(msg, fmt.Sprintf("at index %v", before["progress"].(map[string]any)["ledger_rows"])) {
						t.Errorf("the refusal does not name the first forged row: %s", msg)
					}
				} else {
					refusal(t, r, mallory, post, "mallory", record.ReasonClaimScopeViolation)
					refs := r.bernsteinRefs()
					if msg := toolErr(t, agent.call(mcpserver.ToolPostArtifact, post)); !strings.Contains(msg, "unproven rows") {
						t.Errorf("the claim holder's post on a forged journal: %s", msg)
					}
					if r.bernsteinRefs() != refs {
						t.Errorf("a post on a forged journal wrote something")
					}
				}
				checkForgedHandle(t, before, readHandle(t, agent, forgedTask), v, fg, n)
			})
		}
	}
}

// reopen opens the repository's store again, as another process would.
func reopen(t *testing.T, r *repo) *repo {
	t.Helper()
	s, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: filepath.Join(filepath.Dir(r.dir), "home")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	o := *r
	o.store = s
	return &o
}

// bernsteinBinary is the bernstein command, built once for every
// package's tests (internal/testbin).
func bernsteinBinary(t *testing.T) string {
	t.Helper()
	bin, err := testbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// toolResult is a tools/call result as the wire carries it.
type toolResult struct {
	IsError bool `json:"isError"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
}

func (c *stdioSession) tool(id int, name string, args any) toolResult {
	c.t.Helper()
	b, err := json.Marshal(map[string]any{"name": name, "arguments": args})
	if err != nil {
		c.t.Fatal(err)
	}
	m := c.call(id, "tools/call", string(b))
	if m.Error != nil {
		c.t.Fatalf("%s: %s", name, m.raw)
	}
	var res toolResult
	if err := json.Unmarshal(m.Result, &res); err != nil {
		c.t.Fatalf("%s: %v: %s", name, err, m.raw)
	}
	return res
}

// TestForgedRowsGrantNothingOverMCPBinary runs the real `bernstein mcp`
// stdio server of the honest host as mallory, holding the token a forged
// claim names, after each forgery of forgetest.Forgeries (unsigned, and
// signed by an unpinned writer): mallory's post is refused (claim_unproven
// on a forged ledger) and audited, and the handle shows the vector as it
// was with the forged rows at fault.
func TestForgedRowsGrantNothingOverMCPBinary(t *testing.T) {
	bin := bernsteinBinary(t)
	for _, v := range forgetest.Variants {
		if v.Name == "signed-in-the-writers-name" {
			continue // the library and in-memory tests cover it
		}
		for _, fg := range forgetest.Forgeries {
			t.Run(v.Name+"/"+fg.Name, func(t *testing.T) {
				t.Parallel()
				r := newRepo(t)
				_, before := forgedSetUp(t, r, fg)
				n := fg.Rows(v.New(t, r.dir, writer), forgedTask)

				cmd := exec.Command(bin, "--repo", r.dir, "mcp", "--agent", "mallory", "--claim-token", forgetest.MalloryToken)
				cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+filepath.Join(filepath.Dir(r.dir), "home"))
				in, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
				c := &stdioSession{t: t, in: in, out: bufio.NewReader(out)}
				c.initialize("2025-11-25")

				auditBefore := len(r.audit())
				refsBefore, auditHead := r.bernsteinRefs(), r.refValue("refs/bernstein/audit/"+writer)
				res := c.tool(2, mcpserver.ToolPostArtifact, report(forgedTask, "summary", "mallory over the binary"))
				msg := ""
				for _, ct := range res.Content {
					msg += ct.Text
				}
				reason := record.ReasonClaimScopeViolation
				if fg.Chain == "ledger" {
					reason = record.ReasonClaimUnproven
				}
				if !res.IsError || !strings.Contains(msg, "refused ("+reason+")") {
					t.Fatalf("mallory's post over the binary: %+v", res)
				}
				audit := r.audit()
				if len(audit) != auditBefore+1 {
					t.Fatalf("the refusal was not audited: %d entries, was %d", len(audit), auditBefore)
				}
				var d struct {
					Reason string `json:"reason"`
				}
				last := audit[len(audit)-1]
				if err := json.Unmarshal(last.Details, &d); err != nil || last.Event != record.EventArtifactRefused || last.Actor != "mallory" || d.Reason != reason {
					t.Fatalf("audit entry %+v %s", last, last.Details)
				}
				if got := r.bernsteinRefs(); strings.Replace(got, r.refValue("refs/bernstein/audit/"+writer), auditHead, 1) != refsBefore {
					t.Fatalf("the refusal wrote more than the audit mirror:\n%s\n%s", refsBefore, got)
				}

				h := c.tool(3, mcpserver.ToolTaskHandle, map[string]any{"task_id": forgedTask})
				if h.IsError {
					t.Fatalf("handle over the binary: %+v", h)
				}
				checkForgedHandle(t, before, h.StructuredContent, v, fg, n)
				in.Close()
				if err := cmd.Wait(); err != nil {
					t.Fatalf("bernstein mcp: %v\n%s", err, stderr.String())
				}
			})
		}
	}
}

// TestCopiedTaskGrantsNothingOverMCP: a task copied with plain git from
// another repository the same writer serves (forgetest.CopyTask) is
// foreign over the tools too: its handle's proof is tampered and names the
// binding, and a post on its claim token is refused and audited.
func TestCopiedTaskGrantsNothingOverMCP(t *testing.T) {
	r := newRepo(t)
	c := forgetest.CopyTask(t, r.dir, filepath.Join(filepath.Dir(r.dir), "home"), writer, "C-1")
	agent := serveAs(t, reopen(t, r), "agent", c.Token)
	h := readHandle(t, agent, c.Task)
	p := h["progress"].(map[string]any)
	proof := p["proof"].(map[string]any)
	faults := proof["rows_at_fault"].([]any)
	if proof["state"] != "tampered" || len(faults) != c.Rows || !strings.Contains(fmt.Sprint(faults[0]), "foreign: its first record is rooted in another repository") {
		t.Fatalf("the copied task's proof over MCP: %v", proof)
	}
	if p["ledger_rows"] != 0.0 || p["journal_rows"] != 0.0 || p["earned_steps"] != 0.0 {
		t.Fatalf("the copied task's rows count over MCP: %v", p)
	}
	refusal(t, r, agent, report(c.Task, "summary", "on a copied claim"), "agent", record.ReasonClaimUnproven)
}
