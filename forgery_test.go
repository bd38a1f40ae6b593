package bernstein_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// TestForgedRowsGrantNothing forges each kind of row with plain git (claims,
// releases, starts and the other transitions, work rows, artifacts; the
// table is forgetest.Forgeries), unsigned, signed by another key in the
// honest writer's name, and signed by a writer of the forger's own whose key
// is published but not pinned. On the honest host nothing is granted: no
// post is accepted on a forged claim (and the refusal says why and is
// audited), no transition or work row is written on top, the progress
// vector does not move, and its proof names the rows at fault.
func TestForgedRowsGrantNothing(t *testing.T) {
	for _, v := range forgetest.Variants {
		for _, fg := range forgetest.Forgeries {
			t.Run(v.Name+"/"+fg.Name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t)
				f.withCommits()
				s := f.open()
				const task = "F-1"
				tok := forgetest.SetUp(t, s, task, fg)
				before, err := s.Task(task)
				if err != nil {
					t.Fatal(err)
				}
				if before.Progress.Proof.State != "verified" {
					t.Fatalf("before the forgery: %+v", before.Progress.Proof)
				}
				n := fg.Rows(v.New(t, f.dir, "test-writer"), task)

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
				if after.Progress.Proof.State != v.State || len(after.Progress.Proof.RowsAtFault) != n {
					t.Fatalf("proof after the forgery: %+v, want state %s and %d rows at fault", after.Progress.Proof, v.State, n)
				}
				for i, rf := range after.Progress.Proof.RowsAtFault {
					if rf.Chain != fg.Chain {
						t.Fatalf("row at fault %d is in the %s, want the %s", i, rf.Chain, fg.Chain)
					}
				}
				h, err := s2.TaskHandle(task)
				if err != nil || h.ProgressHash != before.Progress.VectorHash || h.Progress.Proof.State != v.State {
					t.Fatalf("task handle: %+v %v", h, err)
				}

				// No post lands: not mallory's on a forged claim, and not the
				// real agent's while the ledger holds unproven rows.
				auditBefore := len(f.chainRecords(refs.Audit("test-writer")))
				for _, who := range []struct{ agent, token string }{{"mallory", forgetest.MalloryToken}, {"agent", tok}} {
					_, err := s2.Post(bernstein.PostRequest{Task: task, Key: "summary", Agent: who.agent, ClaimToken: who.token, Payload: report("after the forgery")})
					var refused *bernstein.RefusedError
					switch {
					case fg.Chain == "ledger" && (!errors.As(err, &refused) || refused.Reason != record.ReasonClaimUnproven):
						t.Fatalf("post by %s on a forged ledger: %v", who.agent, err)
					case fg.Chain == "journal" && who.agent == "agent" && !errors.Is(err, bernstein.ErrUnproven):
						t.Fatalf("post by the claim holder on a forged journal: %v", err)
					case err == nil:
						t.Fatalf("post by %s accepted", who.agent)
					}
				}
				if fg.Chain == "ledger" {
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
				if fg.Chain == "ledger" {
					if _, err := s2.Transition(task, record.KindTaskSuspended, "", ""); !errors.Is(err, bernstein.ErrUnproven) {
						t.Fatalf("transition on top of a forged ledger: %v", err)
					}
				}
				// The CLI says the same.
				if _, errOut, code := f.cli("", "artifact", "post", task, "k", "--type", "report", "--body", "x", "--agent", "mallory", "--claim-token", forgetest.MalloryToken); code == 0 {
					t.Fatalf("the CLI accepted mallory's post: %s", errOut)
				} else if fg.Chain == "ledger" && (code != 3 || !strings.Contains(errOut, record.ReasonClaimUnproven)) {
					t.Fatalf("the CLI's refusal of mallory's post: exit %d %s", code, errOut)
				}
				out, _, _ := f.cli("", "task", "progress", task, "--output-json")
				if !strings.Contains(out, before.Progress.VectorHash) {
					t.Fatalf("task progress after the forgery:\n%s", out)
				}
				if _, _, code := f.cli("", "audit", "verify"); code == 0 && v.State == "tampered" {
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

// poisonEachMember returns, for every member of every object of a JSON
// document, a copy with that member set to null and a copy without it,
// keyed by the member's path.
func poisonEachMember(doc any, path string) map[string]any {
	out := map[string]any{}
	switch v := doc.(type) {
	case map[string]any:
		for k, child := range v {
			for _, edit := range []struct {
				name string
				set  func(c map[string]any)
			}{{" null", func(c map[string]any) { c[k] = nil }}, {" absent", func(c map[string]any) { delete(c, k) }}} {
				c := maps.Clone(v)
				edit.set(c)
				out[path+"/"+k+edit.name] = c
			}
			for p, edited := range poisonEachMember(child, path+"/"+k) {
				c := maps.Clone(v)
				c[k] = edited
				out[p] = c
			}
		}
	case []any:
		for i, child := range v {
			for p, edited := range poisonEachMember(child, fmt.Sprintf("%s/%d", path, i)) {
				c := append([]any(nil), v...)
				c[i] = edited
				out[p] = c
			}
		}
	}
	return out
}

// cloneJSON deep-copies a decoded JSON document.
func cloneJSON(t *testing.T, doc any) map[string]any {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// member returns the object at path (members separated by /) of doc,
// creating empty objects on the way.
func member(doc map[string]any, path string) map[string]any {
	m := doc
	for _, k := range strings.Split(path, "/") {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}

// TestPoisonedCacheAddsNothing: the fold cache poisoned by adding what would
// inflate the task if it were believed (a checkpointed tree, a captured change, a
// pass of the declared gate, a pass of the declared producer, a key with a
// version, a version far ahead, a row at fault, all of them at once) or by
// setting any member to null or taking it out, each under the file's old
// MAC and under another writer's MAC, changes nothing visible: the vector
// (written by hand), the artifacts and the journal rows (counted with plain
// git), the proof, the handle, and the next versions posted.
func TestPoisonedCacheAddsNothing(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	const task = "Q-1"
	tok := f.startedTask(s, task)
	for i := 0; i < 40; i++ {
		f.post(s, task, "k0", "agent", tok, report(fmt.Sprintf("post %d", i)))
	}
	if _, err := s.Checkpoint(task, "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	const want = `{"checkpoints":1,"diffs_captured":0,"evidence_declared":1,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,` +
		`"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"Q-1","terminal":false}`
	wantHash := sha256.Sum256([]byte(want))
	other, _, err := keys.Create(t.TempDir(), "other-writer")
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := filepath.Join(f.dir, ".git", "bernstein", "cache")
	cache := filepath.Join(cacheDir, "journal", task+".json")
	older := strings.TrimSpace(f.git("rev-parse", "HEAD~1^{tree}"))

	// The cache as a cold fold writes it now, and its document.
	goodCache := func(t *testing.T) (mac string, doc map[string]any) {
		t.Helper()
		os.RemoveAll(cacheDir)
		if _, err := f.open().Task(task); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(cache)
		if err != nil {
			t.Fatalf("no cache was written: %v", err)
		}
		mac, content, _ := strings.Cut(string(b), "\n")
		if err := json.Unmarshal([]byte(content), &doc); err != nil {
			t.Fatal(err)
		}
		return mac, doc
	}
	// What plain git counts: the journal's rows, and per key its posts.
	counted := func() (int64, map[string]int64) {
		rows := f.chainRows(refs.Journal(task))
		versions := map[string]int64{}
		for _, r := range rows {
			if r.Kind == record.KindArtifactPosted {
				var a record.ArtifactPosted
				r.DecodeData(&a)
				versions[a.Key]++
			}
		}
		return int64(len(rows)), versions
	}

	additions := map[string]func(doc map[string]any){
		"a checkpointed tree": func(doc map[string]any) { member(doc, "state/Progress/trees")[older] = true },
		"a captured change": func(doc map[string]any) {
			member(doc, "state/Progress/changes")[older+".."+strings.Repeat("f", 40)] = true
		},
		"a gate pass":      func(doc map[string]any) { member(doc, "state/Progress/gate_passes/build")["true"] = true },
		"an evidence pass": func(doc map[string]any) { member(doc, "state/Progress/evidence")["tests"] = true },
		"a key with a version": func(doc map[string]any) {
			member(doc, "state/Keys")["k1"] = map[string]any{"Version": 7, "SpineHash": string(record.Sum([]byte("spine")))}
		},
		"a version far ahead": func(doc map[string]any) { member(doc, "state/Keys/k0")["Version"] = 500 },
		"a row at fault": func(doc map[string]any) {
			member(doc, "state/Proof")["Faults"] = []any{map[string]any{"chain": "journal", "index": 3, "writer": "mallory", "state": "tampered", "reason": "poisoned"}}
		},
	}
	cases := map[string]func(doc map[string]any) map[string]any{}
	for name, add := range additions {
		cases["added "+name] = func(doc map[string]any) map[string]any { add(doc); return doc }
	}
	cases["added everything"] = func(doc map[string]any) map[string]any {
		for _, add := range additions {
			add(doc)
		}
		member(doc, "state/Progress")["gate_attempts"] = 7
		return doc
	}
	_, doc := goodCache(t)
	for path := range poisonEachMember(doc, "") {
		cases[path] = func(doc map[string]any) map[string]any { return poisonEachMember(doc, "")[path].(map[string]any) }
	}
	if len(cases) < 30 {
		t.Fatalf("only %d poisoned caches: %v", len(cases), doc)
	}
	for name, poison := range cases {
		t.Run(name, func(t *testing.T) {
			mac, doc := goodCache(t)
			b, err := json.Marshal(poison(cloneJSON(t, doc)))
			if err != nil {
				t.Fatal(err)
			}
			for _, file := range []struct{ mac, name string }{{mac, "old MAC"}, {other.MAC(b), "another writer's MAC"}} {
				body := []byte(file.mac + "\n" + string(b))
				rows, versions := counted()
				if err := os.WriteFile(cache, body, 0o644); err != nil {
					t.Fatal(err)
				}
				st := f.open()
				got, err := st.Task(task)
				if err != nil {
					t.Fatalf("%s: %v", file.name, err)
				}
				if v := string(got.Progress.Vector.Bytes()); v != want || got.Progress.VectorHash != hex.EncodeToString(wantHash[:]) || got.Progress.EarnedSteps != 1 {
					t.Fatalf("%s: vector\n%s\nwant\n%s", file.name, v, want)
				}
				if !maps.Equal(got.Artifacts, versions) || got.JournalRows != rows || got.Progress.Proof.State != "verified" || len(got.Progress.Proof.RowsAtFault) != 0 {
					t.Fatalf("%s: artifacts %v (git: %v), %d journal rows (git: %d), proof %+v", file.name, got.Artifacts, versions, got.JournalRows, rows, got.Progress.Proof)
				}
				if h, err := st.TaskHandle(task); err != nil || h.ProgressHash != got.Progress.VectorHash || h.Progress.Proof.State != "verified" || len(h.Progress.Proof.RowsAtFault) != 0 {
					t.Fatalf("%s: handle %+v %v", file.name, h, err)
				}
				for _, key := range []string{"k0", "k1"} {
					if err := os.WriteFile(cache, body, 0o644); err != nil {
						t.Fatal(err)
					}
					res, err := f.open().Post(bernstein.PostRequest{Task: task, Key: key, Agent: "agent", ClaimToken: tok, Payload: report(name + " " + file.name)})
					if err != nil {
						t.Fatalf("%s: post %s: %v", file.name, key, err)
					}
					if res.Version != versions[key]+1 {
						t.Fatalf("%s: posted %s v%d after v%d", file.name, key, res.Version, versions[key])
					}
					versions[key]++
				}
			}
		})
	}
	_, versions := counted()
	checkVersionChain(t, f.open(), task, "k0", int(versions["k0"]))
	checkVersionChain(t, f.open(), task, "k1", int(versions["k1"]))
}
