package bernstein_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// A forger has write access to the repository and no key of the writer's:
// it appends rows to a task's chains with plain git, either unsigned or
// signed by a key of its own.
type forger struct {
	f      *fixture
	signer *keys.Identity // nil: unsigned
	writer string         // the writer the commits name as committer
}

// appendRow chains a row onto ref as plain git would: the next index, the
// previous row's hash, the row's files in the commit's tree.
func (g *forger) appendRow(ref, task, kind, actor string, data any, files map[string][]byte) record.Row {
	t := g.f.t
	t.Helper()
	head, _ := g.f.gitErr("rev-parse", "--verify", "--quiet", ref)
	head = strings.TrimSpace(head)
	index, prev := int64(0), record.Hash("")
	var parents []gitstore.Oid
	if head != "" {
		c, _, err := gitstore.ParseCommit([]byte(g.f.git("cat-file", "commit", head)))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := record.RecordFromMessage(c.Message)
		if err != nil {
			t.Fatal(err)
		}
		last, err := record.ParseRow(rec)
		if err != nil {
			t.Fatal(err)
		}
		index, prev = last.Index+1, last.Hash()
		parents = []gitstore.Oid{mustOid(t, head)}
	}
	row, err := record.NewRow(kind, task, index, prev, actor, data)
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[string]gitstore.Oid{}
	for path, b := range files {
		blobs[path] = g.write("blob", b)
	}
	tree, trees, err := gitstore.TreeOf(blobs)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range trees {
		g.write("tree", o.Data)
	}
	if len(blobs) == 0 {
		tree = g.write("tree", nil)
	}
	c := gitstore.Commit{Tree: tree, Parents: parents, Author: gitstore.Ident(actor, actor+"@bernstein", 1700000000),
		Committer: gitstore.Ident(g.writer, g.writer+"@bernstein", 1700000000), Message: record.Message(kind+" forged", row.Bytes())}
	if g.signer != nil {
		sig, err := g.signer.SignCommit(gitstore.EncodeCommit(c))
		if err != nil {
			t.Fatal(err)
		}
		c.Signature = sig
	}
	id := g.write("commit", gitstore.EncodeCommit(c))
	args := []string{"update-ref", ref, id.String()}
	if head != "" {
		args = append(args, head)
	}
	g.f.git(args...)
	return row
}

func (g *forger) write(kind string, data []byte) gitstore.Oid {
	out, err := execGitStdin(g.f.dir, data, "hash-object", "-w", "-t", kind, "--stdin").Output()
	if err != nil {
		g.f.t.Fatalf("hash-object: %v", err)
	}
	return mustOid(g.f.t, strings.TrimSpace(string(out)))
}

// forgedRows appends the rows of one forgery to task's chains.
type forgery struct {
	name  string
	chain string // "ledger" or "journal"
	rows  func(g *forger, task string) int
}

const malloryToken = "bct_mallory_token"

var forgeries = []forgery{
	{"claim", "ledger", func(g *forger, task string) int {
		g.appendRow(refs.Ledger(task), task, record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"}, nil)
		g.appendRow(refs.Ledger(task), task, record.KindTaskClaimed, "mallory", ledger.Claimed{Agent: "mallory", ClaimID: "claim-forged", TokenSHA256: bernstein.TokenHash(malloryToken)}, nil)
		return 2
	}},
	{"release", "ledger", func(g *forger, task string) int {
		g.appendRow(refs.Ledger(task), task, record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"}, nil)
		return 1
	}},
	{"complete", "ledger", func(g *forger, task string) int {
		g.appendRow(refs.Ledger(task), task, record.KindTaskCompleted, "mallory", ledger.Transition{}, nil)
		return 1
	}},
	{"start-again", "ledger", func(g *forger, task string) int {
		g.appendRow(refs.Ledger(task), task, record.KindTaskSuspended, "mallory", ledger.Transition{}, nil)
		g.appendRow(refs.Ledger(task), task, record.KindTaskResumed, "mallory", ledger.Transition{}, nil)
		return 2
	}},
	{"checkpoint", "journal", func(g *forger, task string) int {
		head := strings.TrimSpace(g.f.git("rev-parse", "HEAD~1"))
		g.appendRow(refs.Journal(task), task, record.KindCheckpoint, "mallory", record.Checkpoint{Commit: head}, nil)
		return 1
	}},
	{"diff", "journal", func(g *forger, task string) int {
		patch := []byte("diff --git a/x b/x\n+forged\n")
		out := record.Output{Path: "outputs/000009-diff.patch", Blob: gitstore.HashObject(gitstore.TypeBlob, patch).String(), Hash: record.Sum(patch), Size: int64(len(patch))}
		g.appendRow(refs.Journal(task), task, record.KindDiffCaptured, "mallory", record.DiffCaptured{Base: strings.TrimSpace(g.f.git("rev-parse", "HEAD~1")),
			Head: strings.TrimSpace(g.f.git("rev-parse", "HEAD")), Patch: out, Files: 1, Added: 1}, map[string][]byte{out.Path: patch})
		return 1
	}},
	{"gate", "journal", func(g *forger, task string) int {
		log := []byte("all good\n")
		out := record.Output{Path: "outputs/000009-gate-build.log", Blob: gitstore.HashObject(gitstore.TypeBlob, log).String(), Hash: record.Sum(log), Size: int64(len(log))}
		g.appendRow(refs.Journal(task), task, record.KindGateAttempt, "mallory", record.GateAttempt{Gate: "build", Command: "true", ExitCode: 0, Passed: true, Output: out}, map[string][]byte{out.Path: log})
		return 1
	}},
	{"evidence", "journal", func(g *forger, task string) int {
		log := []byte("passed\n")
		out := record.Output{Path: "outputs/000009-evidence-tests.log", Blob: gitstore.HashObject(gitstore.TypeBlob, log).String(), Hash: record.Sum(log), Size: int64(len(log))}
		g.appendRow(refs.Journal(task), task, record.KindEvidenceResult, "mallory", record.EvidenceResult{Producer: "tests", Kind: "command", Command: "true", Required: true, ExitCode: 0, Passed: true, Output: out}, map[string][]byte{out.Path: log})
		return 1
	}},
	{"artifact", "journal", func(g *forger, task string) int {
		p, _ := report("forged findings").Canonical()
		blob := gitstore.HashObject(gitstore.TypeBlob, p)
		g.appendRow(refs.Journal(task), task, record.KindArtifactPosted, "agent", record.ArtifactPosted{Key: "summary", ArtifactType: artifact.TypeReport,
			Version: 2, ContentHash: record.Sum(p), Blob: blob.String(), Size: int64(len(p)), SpineEntryHash: record.Sum([]byte("made up"))},
			map[string][]byte{record.ArtifactPath("summary", 2): p})
		return 1
	}},
}

// TestForgedRowsGrantNothing forges each kind of row with plain git (claims,
// transitions, work rows, artifacts), unsigned, signed by another key in the
// honest writer's name, and signed by a writer of the forger's own whose key
// is published but not pinned. On the honest host nothing is granted: no
// post is accepted on a forged claim (and the refusal says why and is
// audited), no transition or work row is written on top, the progress
// vector does not move, and its proof names the rows at fault.
func TestForgedRowsGrantNothing(t *testing.T) {
	type variant struct {
		name  string
		state string // the proof state the forged rows get
		make  func(t *testing.T, f *fixture) *forger
	}
	variants := []variant{
		{"unsigned", "tampered", func(t *testing.T, f *fixture) *forger { return &forger{f: f, writer: "test-writer"} }},
		{"signed-in-the-writers-name", "tampered", func(t *testing.T, f *fixture) *forger {
			other, _, err := keys.Create(t.TempDir(), "test-writer")
			if err != nil {
				t.Fatal(err)
			}
			return &forger{f: f, signer: other, writer: "test-writer"}
		}},
		{"signed-by-an-unpinned-writer", "unverifiable", func(t *testing.T, f *fixture) *forger {
			// The forger runs bernstein init with a key of its own: its
			// key is published in its refs/bernstein/writers ref like any
			// writer's.
			home := filepath.Join(t.TempDir(), "mallory")
			if _, err := bernstein.Init(bernstein.Options{Repo: f.dir, Home: home}, "mallory"); err != nil {
				t.Fatal(err)
			}
			id, err := keys.Load(home)
			if err != nil {
				t.Fatal(err)
			}
			return &forger{f: f, signer: id, writer: "mallory"}
		}},
	}
	for _, v := range variants {
		for _, fg := range forgeries {
			t.Run(v.name+"/"+fg.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				f.withCommits()
				s := f.open()
				const task = "F-1"
				if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: "forged", Gates: []ledger.Gate{{Name: "build", Command: "true"}},
					Evidence: []ledger.Producer{{Name: "tests", Command: "true", Required: true}}}); err != nil {
					t.Fatal(err)
				}
				tok, err := s.Claim(task, "agent")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Transition(task, record.KindTaskStarted, "", ""); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Checkpoint(task, "HEAD", ""); err != nil {
					t.Fatal(err)
				}
				f.post(s, task, "summary", "agent", tok, report("honest findings"))
				before, err := s.Task(task)
				if err != nil {
					t.Fatal(err)
				}
				if before.Progress.Proof.State != "verified" {
					t.Fatalf("before the forgery: %+v", before.Progress.Proof)
				}
				g := v.make(t, f)
				n := fg.rows(g, task)

				// A fresh process on the honest host.
				s2 := f.open()
				after, err := s2.Task(task)
				if err != nil {
					t.Fatal(err)
				}
				if after.Progress.VectorHash != before.Progress.VectorHash || after.Phase != before.Phase ||
					after.ClaimAgent != before.ClaimAgent || after.LedgerRows != before.LedgerRows || after.JournalRows != before.JournalRows {
					t.Fatalf("the forgery moved the task: before %+v\nafter %+v", before, after)
				}
				if after.Progress.Proof.State != v.state || len(after.Progress.Proof.RowsAtFault) != n {
					t.Fatalf("proof after the forgery: %+v, want state %s and %d rows at fault", after.Progress.Proof, v.state, n)
				}
				for i, rf := range after.Progress.Proof.RowsAtFault {
					if rf.Chain != fg.chain {
						t.Fatalf("row at fault %d is in the %s, want the %s", i, rf.Chain, fg.chain)
					}
				}
				h, err := s2.TaskHandle(task)
				if err != nil || h.ProgressHash != before.Progress.VectorHash || h.Progress.Proof.State != v.state {
					t.Fatalf("task handle: %+v %v", h, err)
				}

				// No post lands: not mallory's on a forged claim, and not the
				// real agent's while the ledger holds unproven rows.
				auditBefore := len(f.chainRecords(refs.Audit("test-writer")))
				for _, who := range []struct{ agent, token string }{{"mallory", malloryToken}, {"agent", tok}} {
					_, err := s2.Post(bernstein.PostRequest{Task: task, Key: "summary", Agent: who.agent, ClaimToken: who.token, Payload: report("after the forgery")})
					var refused *bernstein.RefusedError
					switch {
					case fg.chain == "ledger" && (!errors.As(err, &refused) || refused.Reason != record.ReasonClaimUnproven):
						t.Fatalf("post by %s on a forged ledger: %v", who.agent, err)
					case fg.chain == "journal" && who.agent == "agent" && !errors.Is(err, bernstein.ErrUnproven):
						t.Fatalf("post by the claim holder on a forged journal: %v", err)
					case err == nil:
						t.Fatalf("post by %s accepted", who.agent)
					}
				}
				if fg.chain == "ledger" {
					audit := f.chainRecords(refs.Audit("test-writer"))
					if len(audit) != auditBefore+2 {
						t.Fatalf("the refusals were not audited: %d entries, was %d", len(audit), auditBefore)
					}
					last := audit[len(audit)-1]
					if last["event"] != record.EventArtifactRefused || !strings.Contains(fmt.Sprint(last["details"]), record.ReasonClaimUnproven) {
						t.Fatalf("last audit entry: %v", last)
					}
				}
				// Nothing is written on top of an unproven row.
				if _, err := s2.Checkpoint(task, "HEAD~1", ""); !errors.Is(err, bernstein.ErrUnproven) {
					t.Fatalf("checkpoint on top of a forgery: %v", err)
				}
				if fg.chain == "ledger" {
					if _, err := s2.Transition(task, record.KindTaskSuspended, "", ""); !errors.Is(err, bernstein.ErrUnproven) {
						t.Fatalf("transition on top of a forged ledger: %v", err)
					}
				}
				// The CLI says the same.
				if _, errOut, code := f.cli("", "artifact", "post", task, "k", "--type", "report", "--body", "x", "--agent", "mallory", "--claim-token", malloryToken); code == 0 {
					t.Fatalf("the CLI accepted mallory's post: %s", errOut)
				} else if fg.chain == "ledger" && (code != 3 || !strings.Contains(errOut, record.ReasonClaimUnproven)) {
					t.Fatalf("the CLI's refusal of mallory's post: exit %d %s", code, errOut)
				}
				out, _, _ := f.cli("", "task", "progress", task, "--output-json")
				if !strings.Contains(out, before.Progress.VectorHash) {
					t.Fatalf("task progress after the forgery:\n%s", out)
				}
				if _, _, code := f.cli("", "audit", "verify"); code == 0 && v.state == "tampered" {
					t.Fatalf("audit verify passed a forgery")
				}
			})
		}
	}
}

// TestPoisonedCacheChangesNothing: the on-disk fold cache with any one field
// changed (under its old MAC, or re-MACed with another writer's key),
// replaced by garbage or stripped of its MAC changes no output and no next
// version.
func TestPoisonedCacheChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	tok := f.claimed(s, "P-1", "agent")
	for i := 0; i < 40; i++ {
		f.post(s, "P-1", "k0", "agent", tok, report(fmt.Sprintf("post %d", i)))
	}
	if _, err := s.Checkpoint("P-1", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	want, err := f.open().Task("P-1") // a cold store writes the cache
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(f.dir, ".git", "bernstein", "cache", "journal", "P-1.json")
	good, err := os.ReadFile(cache)
	if err != nil {
		t.Fatalf("no cache was written: %v", err)
	}
	mac, content, _ := strings.Cut(string(good), "\n")
	other, _, err := keys.Create(t.TempDir(), "other-writer")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal([]byte(content), &doc); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{"garbage": "garbage", "no MAC": content}
	for path, edited := range poisonEachLeaf(doc, "") {
		b, _ := json.Marshal(edited)
		cases[path+" under its old MAC"] = mac + "\n" + string(b)
		cases[path+" under another key's MAC"] = other.MAC(b) + "\n" + string(b)
	}
	if len(cases) < 20 {
		t.Fatalf("only %d poisoned caches: %s", len(cases), content)
	}
	latest := want.Artifacts["k0"]
	for name, body := range cases {
		if err := os.WriteFile(cache, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := f.open().Task("P-1")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Progress.VectorHash != want.Progress.VectorHash || got.Artifacts["k0"] != latest || got.JournalRows != want.JournalRows || got.Progress.Proof.State != "verified" {
			t.Fatalf("poisoned cache (%s) changed the task: %+v", name, got)
		}
		if err := os.WriteFile(cache, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := f.open().Post(bernstein.PostRequest{Task: "P-1", Key: "k0", Agent: "agent", ClaimToken: tok, Payload: report("next " + name)})
		if err != nil {
			t.Fatalf("%s: post: %v", name, err)
		}
		if res.Version != latest+1 {
			t.Fatalf("poisoned cache (%s): posted v%d after v%d", name, res.Version, latest)
		}
		latest = res.Version
		want, _ = f.open().Task("P-1")
	}
	checkVersionChain(t, f.open(), "P-1", "k0", int(latest))
}

// poisonEachLeaf returns, for every leaf of a JSON document, a copy of the
// document with that leaf changed (numbers moved, strings altered, booleans
// flipped), keyed by the leaf's path.
func poisonEachLeaf(doc any, path string) map[string]any {
	out := map[string]any{}
	switch v := doc.(type) {
	case map[string]any:
		for k, child := range v {
			for p, edited := range poisonEachLeaf(child, path+"/"+k) {
				c := map[string]any{}
				for k2, v2 := range v {
					c[k2] = v2
				}
				c[k] = edited
				out[p] = c
			}
		}
	case []any:
		for i, child := range v {
			for p, edited := range poisonEachLeaf(child, fmt.Sprintf("%s/%d", path, i)) {
				c := append([]any(nil), v...)
				c[i] = edited
				out[p] = c
			}
		}
	case float64:
		out[path] = v + 100
	case string:
		out[path] = v + "0"
	case bool:
		out[path] = !v
	}
	return out
}

// TestAgentWriterMustBePinned: an agent that posts through a writer of its
// own (its own bernstein home and key, pinning the orchestrator's key so it
// can check its claim) is trusted by the orchestrator's host only once that
// host pins its key. Until then its versions are unverifiable there: show
// passes over them for the latest verified version (and names them), shows
// one on request with its state, never under --strict; its rows do not
// count and the orchestrator writes nothing on top of them.
func TestAgentWriterMustBePinned(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	tok := f.claimed(s, "A-1", "agent")
	f.post(s, "A-1", "summary", "agent", tok, report("posted through the orchestrator"))

	// The agent's own writer pins the orchestrator's key and posts v2.
	orchestratorPins := filepath.Join(t.TempDir(), "orchestrator_signers")
	os.WriteFile(orchestratorPins, []byte(f.publishedSigners()), 0o644)
	agentHome := filepath.Join(t.TempDir(), "agent-home")
	if _, err := bernstein.Init(bernstein.Options{Repo: f.dir, Home: agentHome}, "agent-writer"); err != nil {
		t.Fatal(err)
	}
	agentStore, err := bernstein.Open(bernstein.Options{Repo: f.dir, Home: agentHome, AllowedSigners: orchestratorPins})
	if err != nil {
		t.Fatal(err)
	}
	defer agentStore.Close()
	v2, err := agentStore.Post(bernstein.PostRequest{Task: "A-1", Key: "summary", Agent: "agent", ClaimToken: tok, Payload: report("posted through the agent's own writer")})
	if err != nil || v2.Version != 2 || v2.Writer != "agent-writer" {
		t.Fatalf("post through the agent's writer: %+v %v", v2, err)
	}

	// The orchestrator's host, not pinning the agent's writer.
	out, errOut, code := f.cli("", "artifact", "show", "A-1", "summary")
	if code != 0 || !strings.HasPrefix(out, "summary v1 ") || !strings.Contains(errOut, "v2 is newer but unverifiable here") {
		t.Fatalf("default show: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = f.cli("", "artifact", "show", "A-1", "summary", "--version", "2")
	if code != 0 || !strings.HasPrefix(out, "summary v2 (report) of task A-1: unverifiable") || !strings.Contains(out, "agent's own writer") {
		t.Fatalf("show --version 2: exit %d\n%s", code, out)
	}
	out, _, code = f.cli("", "artifact", "show", "A-1", "summary", "--version", "2", "--strict")
	if code != 2 || strings.Contains(out, "agent's own writer") {
		t.Fatalf("show --version 2 --strict: exit %d\n%s", code, out)
	}
	p, err := f.open().Progress("A-1")
	if err != nil || p.Proof.State != "unverifiable" || len(p.Proof.RowsAtFault) != 1 || p.Proof.RowsAtFault[0].Writer != "agent-writer" {
		t.Fatalf("progress on the orchestrator's host: %+v %v", p, err)
	}
	if _, _, code := f.cli("", "task", "progress", "A-1"); code != 2 {
		t.Fatalf("task progress with a row that does not count exited %d", code)
	}
	if _, err := f.open().Checkpoint("A-1", "HEAD", ""); !errors.Is(err, bernstein.ErrUnproven) {
		t.Fatalf("checkpoint on top of an unpinned writer's row: %v", err)
	}

	// Pinned, everything is verified and work goes on.
	both := filepath.Join(t.TempDir(), "both_signers")
	os.WriteFile(both, []byte(f.publishedSigners()), 0o644)
	o := f.opts
	o.AllowedSigners = both
	pinned, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	rep, err := pinned.Artifacts("A-1")
	if err != nil || !rep.Verified() {
		t.Fatalf("with the agent's writer pinned: %+v %v", rep, err)
	}
	if v, newer := rep.Shown("summary"); v.Version != 2 || len(newer) != 0 {
		t.Fatalf("shown with the agent's writer pinned: v%d, passed over %d", v.Version, len(newer))
	}
	if _, err := pinned.Checkpoint("A-1", "HEAD", ""); err != nil {
		t.Fatalf("checkpoint with the agent's writer pinned: %v", err)
	}
	if p, _ := pinned.Progress("A-1"); p.Proof.State != "verified" || p.Checkpoints != 1 {
		t.Fatalf("progress with the agent's writer pinned: %+v", p)
	}
}
