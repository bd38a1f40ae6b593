package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// TestPlainGitAgrees: what bernstein writes is what plain git reads.
func TestPlainGitAgrees(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T:1", "agent-a")
	f.post(s, "T:1", "summary", "agent-a", tok, report("# first\n"))
	f.post(s, "T:1", "scores", "agent-a", tok, artifact.Payload{Type: artifact.TypeTable, Columns: []string{"name", "score"}, Rows: [][]string{{"a", "1"}, {"b", "2"}}})
	f.post(s, "T:1", "preview", "agent-a", tok, artifact.Payload{Type: artifact.TypeLink, URL: "https://example.com/p", LinkKind: artifact.LinkPreview})
	v2 := f.post(s, "T:1", "summary", "agent-a", tok, report("# second\n"))

	f.fsck()

	// The escaped journal ref, its rows in git log, its payload via git show.
	journal := "refs/bernstein/journal/T%3A1"
	rows := f.chainRecords(journal)
	if len(rows) != 4 {
		t.Fatalf("git log shows %d journal rows, want 4", len(rows))
	}
	for i, r := range rows {
		if r["kind"] != record.KindArtifactPosted || r["index"] != float64(i) || r["task_id"] != "T:1" {
			t.Fatalf("row %d as git shows it: %v", i, r)
		}
	}
	if got := rows[3]["data"].(map[string]any)["spine_entry_hash"]; got != string(v2.SpineEntryHash) {
		t.Fatalf("row 3 spine hash %v, post returned %s", got, v2.SpineEntryHash)
	}
	shown := f.git("show", journal+":artifacts/summary/v2.json")
	want, _ := report("# second\n").Canonical()
	if shown != string(want) {
		t.Fatalf("git show prints %q, want %q", shown, want)
	}
	if record.Sum([]byte(shown)) != v2.ContentHash {
		t.Fatalf("content hash of what git shows differs from the receipt")
	}
	// Each row's commit holds exactly the row's own file: what it added.
	if files := f.git("ls-tree", "-r", "--name-only", journal); strings.TrimSpace(files) != "artifacts/summary/v2.json" {
		t.Fatalf("the last row's tree holds %q", files)
	}
	if diff := f.git("diff", "--diff-filter=A", "--name-only", journal+"~1", journal); strings.TrimSpace(diff) != "artifacts/summary/v2.json" {
		t.Fatalf("git diff of the last row adds %q", diff)
	}
	// Every version sits at its own row's commit.
	for i, path := range []string{"artifacts/summary/v1.json", "artifacts/scores/v1.json", "artifacts/preview/v1.json"} {
		if _, err := f.gitErr("show", fmt.Sprintf("%s~%d:%s", journal, 3-i, path)); err != nil {
			t.Fatalf("git show of %s at its row: %v", path, err)
		}
	}

	// Every spine and audit commit verifies with the published allowed_signers.
	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	os.WriteFile(allowed, []byte(f.publishedSigners()), 0o644)
	for _, ref := range []string{"refs/bernstein/spine/test-writer", "refs/bernstein/audit/test-writer", f.writerRef("test-writer"), refs.Repository,
		"refs/bernstein/journal/T%3A1", "refs/bernstein/ledger/T%3A1"} {
		ids := strings.Fields(f.git("rev-list", ref))
		if len(ids) == 0 {
			t.Fatalf("%s is empty", ref)
		}
		for _, id := range ids {
			if out, err := f.gitErr("-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", id); err != nil {
				t.Fatalf("git verify-commit %s (%s): %v\n%s", id, ref, err, out)
			}
		}
	}
	// And fails against a key that did not sign them.
	other, _, err := keys.Create(t.TempDir(), "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(allowed, []byte(keys.AllowedSignersLine("test-writer", other.AuthorizedKey())+"\n"), 0o644)
	if _, err := f.gitErr("-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", "refs/bernstein/spine/test-writer"); err == nil {
		t.Fatalf("git verify-commit accepted a spine commit against the wrong key")
	}

	// Spine and audit as plain git shows them: contiguous, linked.
	spine := f.chainRecords("refs/bernstein/spine/test-writer")
	if len(spine) != 4 {
		t.Fatalf("spine has %d entries, want 4", len(spine))
	}
	audit := f.chainRecords("refs/bernstein/audit/test-writer")
	for i, a := range audit {
		if a["seq"] != float64(i) {
			t.Fatalf("audit entry %d has seq %v", i, a["seq"])
		}
		if i > 0 && a["prev_hmac"] != audit[i-1]["hmac"] {
			t.Fatalf("audit entry %d does not link to %d", i, i-1)
		}
	}
	// Only refs under refs/bernstein/ exist; HEAD's branch was never created.
	if out := f.git("for-each-ref", "--format=%(refname)"); strings.Contains(out, "refs/heads") {
		t.Fatalf("bernstein wrote outside refs/bernstein: %s", out)
	}

	// The reader re-verifies every version.
	rep, err := s.Artifacts("T:1")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Verified() || len(rep.Versions) != 4 {
		t.Fatalf("verification: %+v", rep)
	}
	if rep.Versions[3].PrevVersionHash != rep.Versions[0].SpineEntryHash {
		t.Fatalf("summary v2 does not reference v1's spine entry")
	}
}

// TestInitIsIdempotent: a second init changes nothing.
func TestInitIsIdempotent(t *testing.T) {
	f := newFixture(t)
	before := f.refsSnapshot()
	objects := f.objectFiles()
	res, err := bernstein.Init(f.opts, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.IdentityCreated || res.KeyPublished || res.RepoCreated || res.FsyncConfigured || res.Writer != "test-writer" {
		t.Fatalf("second init did something: %+v", res)
	}
	// The first init made git sync references (packed-refs included).
	if got := strings.TrimSpace(f.git("config", "--local", "core.fsync")); got != "pack,derived-metadata,reference" {
		t.Fatalf("core.fsync is %q", got)
	}
	if after := f.refsSnapshot(); after != before {
		t.Fatalf("refs changed:\n%s\n%s", before, after)
	}
	if len(f.objectFiles()) != len(objects) {
		t.Fatalf("objects written by a second init")
	}
	for _, name := range []string{"signing.pem", "hmac.key", "writer"} {
		fi, err := os.Stat(filepath.Join(f.home, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v mode %v", name, err, fi.Mode())
		}
	}
	// Nothing private went into the repository.
	pem, _ := os.ReadFile(filepath.Join(f.home, "signing.pem"))
	if out, _ := f.gitErr("grep", "-r", "PRIVATE KEY", f.writerRef("test-writer")); strings.Contains(out, "PRIVATE") || bytes.Contains([]byte(f.git("show", f.writerRef("test-writer")+":test-writer.pub")), pem[:20]) {
		t.Fatalf("private key material published")
	}
	// A value the user chose is kept.
	f.git("config", "--local", "core.fsync", "all")
	if res, err := bernstein.Init(f.opts, ""); err != nil || res.FsyncConfigured || strings.TrimSpace(f.git("config", "core.fsync")) != "all" {
		t.Fatalf("init changed the user's core.fsync: %+v %v", res, err)
	}
	// A different writer for the same home is refused.
	if _, err := bernstein.Init(f.opts, "another"); err == nil {
		t.Fatalf("init with another writer name for an existing home succeeded")
	}
}

// TestInitBareAndHomeInsideRefused: bare repositories work; a home inside
// the repository is refused.
func TestInitBareAndHomeInsideRefused(t *testing.T) {
	root := t.TempDir()
	bare := filepath.Join(root, "bare.git")
	if out, err := execGit(root, "init", "--bare", "-q", bare); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	o := bernstein.Options{Repo: bare, Home: filepath.Join(root, "home")}
	if _, err := bernstein.Init(o, "bare-writer"); err != nil {
		t.Fatalf("init bare: %v", err)
	}
	s, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "B-1"}); err != nil {
		t.Fatal(err)
	}
	tok, _ := s.Claim("B-1", "a")
	if _, err := s.Post(bernstein.PostRequest{Task: "B-1", Key: "k", Agent: "a", ClaimToken: tok, Payload: report("x")}); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(root, "work")
	inside := bernstein.Options{Repo: work, Home: filepath.Join(work, ".bernstein-home")}
	if _, err := bernstein.Init(inside, "w"); err == nil || !strings.Contains(err.Error(), "inside the repository") {
		t.Fatalf("home inside the repository: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, ".bernstein-home", "signing.pem")); err == nil {
		t.Fatalf("a key was written inside the repository")
	}
}

// TestClaimScoping: only the live claim's holder posts; refusals are audited
// and write nothing else.
func TestClaimScoping(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T-1", "alice")
	other := f.claimed(s, "T-2", "bob")
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "T-3"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, task, agent, token, reason string
	}{
		{"other agent", "T-1", "mallory", tok, record.ReasonClaimScopeViolation},
		{"right agent wrong token", "T-1", "alice", tok + "x", record.ReasonClaimScopeViolation},
		{"token of another task", "T-1", "bob", other, record.ReasonClaimScopeViolation},
		{"unclaimed task", "T-3", "alice", tok, record.ReasonUnclaimedTask},
		{"unknown task", "T-404", "alice", tok, record.ReasonUnclaimedTask},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			auditBefore := len(f.chainRecords("refs/bernstein/audit/test-writer"))
			journal, spine := f.refsSnapshotOf("journal", "spine")
			_, err := s.Post(bernstein.PostRequest{Task: c.task, Key: "k", Agent: c.agent, ClaimToken: c.token, Payload: report("x")})
			var refused *bernstein.RefusedError
			if !errors.As(err, &refused) || refused.Reason != c.reason {
				t.Fatalf("want refusal %s, got %v", c.reason, err)
			}
			audit := f.chainRecords("refs/bernstein/audit/test-writer")
			if len(audit) != auditBefore+1 {
				t.Fatalf("audit grew by %d, want 1", len(audit)-auditBefore)
			}
			last := audit[len(audit)-1]
			if last["event"] != record.EventArtifactRefused || last["actor"] != c.agent || last["task_id"] != c.task ||
				last["details"].(map[string]any)["reason"] != c.reason {
				t.Fatalf("audit entry: %v", last)
			}
			if j, sp := f.refsSnapshotOf("journal", "spine"); j != journal || sp != spine {
				t.Fatalf("a refused post moved the journal or the spine")
			}
		})
	}
	// A released claim stops working at once; a completed task too.
	if _, err := s.Transition("T-1", record.KindTaskReleased, "", "done for now"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Post(bernstein.PostRequest{Task: "T-1", Key: "k", Agent: "alice", ClaimToken: tok, Payload: report("x")}); !isRefusal(err, record.ReasonUnclaimedTask) {
		t.Fatalf("post after release: %v", err)
	}
	if _, err := s.Transition("T-2", record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	f.post(s, "T-2", "k", "bob", other, report("fine while working"))
	if _, err := s.Transition("T-2", record.KindTaskCompleted, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Post(bernstein.PostRequest{Task: "T-2", Key: "k", Agent: "bob", ClaimToken: other, Payload: report("x")}); !isRefusal(err, record.ReasonUnclaimedTask) {
		t.Fatalf("post after complete: %v", err)
	}
}

func isRefusal(err error, reason string) bool {
	var r *bernstein.RefusedError
	return errors.As(err, &r) && r.Reason == reason
}

// refsSnapshotOf returns the for-each-ref listing of some namespaces.
func (f *fixture) refsSnapshotOf(ns ...string) (string, string) {
	out := make([]string, 2)
	for i, n := range ns {
		out[i] = f.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/"+n+"/")
	}
	return out[0], out[1]
}

// TestLedgerTransitions: illegal transitions are refused and write nothing.
func TestLedgerTransitions(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "L-1"}); err != nil {
		t.Fatal(err)
	}
	before := f.refsSnapshot()
	for _, kind := range []string{record.KindTaskStarted, record.KindTaskCompleted, record.KindTaskReleased, record.KindTaskReopened} {
		if _, err := s.Transition("L-1", kind, "", ""); err == nil || !strings.Contains(err.Error(), "cannot") {
			t.Fatalf("%s from created: %v", kind, err)
		}
	}
	// The refusals name the problem: the task exists, or is unknown; no
	// id is invalid.
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "L-1"}); !errors.Is(err, bernstein.ErrTaskExists) || err.Error() != "task L-1 already exists" {
		t.Fatalf("creating an existing task: %v", err)
	}
	if _, err := s.Claim("L-404", "a"); !errors.Is(err, bernstein.ErrUnknownTask) || err.Error() != "unknown task: L-404" {
		t.Fatalf("claim of an unknown task: %v", err)
	}
	for _, kind := range []string{record.KindTaskStarted, record.KindTaskReleased, record.KindTaskAbandoned, record.KindTaskReopened} {
		if _, err := s.Transition("L-404", kind, "", ""); !errors.Is(err, bernstein.ErrUnknownTask) || err.Error() != "unknown task: L-404" {
			t.Fatalf("%s of an unknown task: %v", kind, err)
		}
	}
	if after := f.refsSnapshot(); after != before {
		t.Fatalf("refused transitions wrote refs")
	}
	tok, err := s.Claim("L-1", "a")
	if err != nil || !strings.HasPrefix(tok, "bct_") {
		t.Fatalf("claim: %q %v", tok, err)
	}
	if _, err := s.Claim("L-1", "b"); err == nil {
		t.Fatalf("a second claim of a claimed task succeeded")
	}
	// The ledger keeps the token's hash, never the token.
	ledger := f.git("log", "--format=%B", "refs/bernstein/ledger/L-1")
	if strings.Contains(ledger, tok) || !strings.Contains(ledger, string(bernstein.TokenHash(tok))) {
		t.Fatalf("ledger holds the token or lacks its hash:\n%s", ledger)
	}
	for _, kind := range []string{record.KindTaskStarted, record.KindTaskSuspended, record.KindTaskResumed, record.KindTaskCompleted, record.KindTaskReopened} {
		if _, err := s.Transition("L-1", kind, "", ""); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	info, err := s.Task("L-1")
	if err != nil || info.Phase != "reopened" || info.Attempts != 1 || info.ClaimAgent != "" {
		t.Fatalf("task after reopen: %+v %v", info, err)
	}
	rows := f.chainRecords("refs/bernstein/ledger/L-1")
	if len(rows) != 7 {
		t.Fatalf("ledger has %d rows, want 7", len(rows))
	}
	// Every transition is mirrored into the audit chain.
	events := map[string]int{}
	for _, a := range f.chainRecords("refs/bernstein/audit/test-writer") {
		events[a["event"].(string)]++
	}
	for _, kind := range []string{"task.created", "task.claimed", "task.started", "task.suspended", "task.resumed", "task.completed", "task.reopened"} {
		if events[kind] != 1 {
			t.Fatalf("audit has %d %s entries, want 1 (%v)", events[kind], kind, events)
		}
	}
}

// TestJournalSealIdentity: a terminal transition seals the journal.
func TestJournalSealIdentity(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "S-1", "a")
	f.post(s, "S-1", "k", "a", tok, report("one"))
	rep, _ := s.Artifacts("S-1")
	if rep.JournalIdentity != verify.IdentityUnverifiable {
		t.Fatalf("open task identity %s", rep.JournalIdentity)
	}
	if _, err := s.Transition("S-1", record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition("S-1", record.KindTaskCompleted, "", ""); err != nil {
		t.Fatal(err)
	}
	rep, _ = s.Artifacts("S-1")
	if rep.JournalIdentity != verify.IdentityVerified {
		t.Fatalf("sealed task identity %s: %s", rep.JournalIdentity, rep.IdentityReason)
	}
	// Truncate the journal with plain git: the seal no longer matches.
	f.git("update-ref", "-d", "refs/bernstein/journal/S-1")
	rep, _ = s.Artifacts("S-1")
	if rep.JournalIdentity != verify.IdentityMismatched {
		t.Fatalf("truncated journal identity %s", rep.JournalIdentity)
	}
}

func execGit(dir string, args ...string) (string, error) {
	f := &fixture{dir: dir}
	return f.gitErr(args...)
}

// TestDemoRuns: `make run`'s demo script runs to the end with the binary
// under test, and each command it shows succeeds.
func TestDemoRuns(t *testing.T) {
	cmd := exec.Command("bash", "scripts/demo.sh")
	cmd.Dir = ".." // the module's root
	cmd.Env = append(os.Environ(), "BERNSTEIN_BIN="+cliBin, "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"verified: everything holds", "Hash join for `orders`", "refused and recorded in the audit mirror"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}

// TestEmptyJournalSealIdentity: a task ended before any artifact was
// posted seals an empty journal, whose head is the journal's genesis. It
// reads as verified, not tampered; so does its journal after a reopen and
// new rows; and a row forged onto the sealed empty journal with plain git
// (a copy of another task's row) is refused.
func TestEmptyJournalSealIdentity(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	f.claimed(s, "E-1", "a")
	if _, err := s.Transition("E-1", record.KindTaskAbandoned, "", ""); err != nil {
		t.Fatal(err)
	}
	identity := func(when, want string) {
		t.Helper()
		rep, err := s.Artifacts("E-1")
		if err != nil || rep.JournalIdentity != want {
			t.Fatalf("%s: journal identity %s (%s), want %s; %v", when, rep.JournalIdentity, rep.IdentityReason, want, err)
		}
	}
	identity("sealed empty", verify.IdentityVerified)
	if r, err := s.AuditVerify(bernstein.AuditOptions{}); err != nil || !r.Verified {
		t.Fatalf("audit verify of a task sealed empty: %v %+v", err, r.Failures)
	}
	if _, err := s.Transition("E-1", record.KindTaskReopened, "", ""); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Claim("E-1", "a")
	if err != nil {
		t.Fatal(err)
	}
	f.post(s, "E-1", "k", "a", tok, report("one"))
	identity("reopened after an empty seal", verify.IdentityUnverifiable)
	for _, kind := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
		if _, err := s.Transition("E-1", kind, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	identity("sealed again", verify.IdentityVerified)
	if r, err := s.AuditVerify(bernstein.AuditOptions{}); err != nil || !r.Verified {
		t.Fatalf("audit verify after the second seal: %v %+v", err, r.Failures)
	}
	// A second task sealed empty, then a row of E-1 put on its journal
	// with plain git: its seal of no rows no longer holds.
	f.claimed(s, "E-2", "a")
	if _, err := s.Transition("E-2", record.KindTaskAbandoned, "", ""); err != nil {
		t.Fatal(err)
	}
	f.git("update-ref", "refs/bernstein/journal/E-2", "refs/bernstein/journal/E-1")
	rep, err := s.Artifacts("E-2")
	if err != nil || rep.JournalIdentity != verify.IdentityMismatched {
		t.Fatalf("a sealed empty journal given rows with plain git: %s (%s) %v", rep.JournalIdentity, rep.IdentityReason, err)
	}
}
