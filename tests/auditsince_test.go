package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// audit verify --since checks what was added after an audit checkpoint the
// verifier signed: every added row, entry and blob with its signature,
// HMAC, binding and mirror, and that nothing the checkpoint covered was
// taken away. Its cost follows what was added.

type sinceDoc struct {
	Verified       bool                `json:"verified"`
	Since          string              `json:"since"`
	Checkpoint     string              `json:"checkpoint"`
	CheckpointNote string              `json:"checkpoint_note"`
	Tasks          []verify.TaskResult `json:"tasks"`
	Failures       []verify.Failure    `json:"failures"`
	Counts         verify.Counts       `json:"counts"`
}

func (f *fixture) audit(t *testing.T, args ...string) (sinceDoc, string, int) {
	t.Helper()
	out, errOut, code := f.cli("", append([]string{"audit", "verify", "--output-json"}, args...)...)
	var d sinceDoc
	if code <= 1 {
		decodeJSON(t, out, &d)
	}
	return d, errOut, code
}

// sinceFixture has task S-1 with posts versions of k, then an audit
// checkpoint c1 of it, then two more versions and a new task S-2.
func sinceFixture(t *testing.T, posts int) (*fixture, string) {
	t.Helper()
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "S-1", "agent")
	for i := 1; i <= posts; i++ {
		f.post(s, "S-1", "k", "agent", tok, report(fmt.Sprintf("v%d", i)))
	}
	s.Close()
	d, errOut, code := f.audit(t, "--checkpoint", "c1")
	if code != 0 || d.Checkpoint != "c1" {
		t.Fatalf("audit verify --checkpoint: exit %d %+v %s", code, d, errOut)
	}
	s = f.open()
	f.post(s, "S-1", "k", "agent", tok, report("after 1"))
	f.post(s, "S-1", "k", "agent", tok, report("after 2"))
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "S-2", Title: "another"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	return f, tok
}

func TestAuditSinceChecksWhatWasAdded(t *testing.T) {
	var read []int
	for _, posts := range []int{3, 60} {
		f, _ := sinceFixture(t, posts)
		d, errOut, code := f.audit(t, "--since", "c1")
		if code != 0 || !d.Verified || d.Since != "c1" || len(d.Failures) != 0 {
			t.Fatalf("--since on %d posts: exit %d %+v %s", posts, code, d, errOut)
		}
		// Counted by hand: two posts (a journal row, a spine entry and an
		// audit entry each) and a task created (a ledger row and an audit
		// entry).
		c := d.Counts
		if c.JournalRows != 2 || c.LedgerRows != 1 || c.SpineEntries != 2 || c.AuditEntries != 3 || c.Artifacts != 2 || c.Verified != 2 || c.HMACsChecked != 3 || c.SignaturesChecked != 8 {
			t.Fatalf("--since counts on %d posts: %+v", posts, c)
		}
		var versions []string
		for _, tr := range d.Tasks {
			for _, a := range tr.Artifacts {
				versions = append(versions, fmt.Sprintf("%s %s v%d@%d %s", tr.TaskID, a.Key, a.Version, a.JournalIndex, a.State))
			}
		}
		want := fmt.Sprintf("S-1 k v%d@%d verified,S-1 k v%d@%d verified", posts+1, posts, posts+2, posts+1)
		if strings.Join(versions, ",") != want {
			t.Fatalf("--since versions on %d posts: %v, want %s", posts, versions, want)
		}
		read = append(read, c.CommitsRead)
	}
	// What it reads follows what was added, not the history before.
	if read[0] != read[1] || read[0] == 0 {
		t.Fatalf("--since read %d commits after 3 posts and %d after 60", read[0], read[1])
	}
}

// TestAuditSinceMovesForward: --since and --checkpoint together move a
// checkpoint on; from there, nothing added is nothing read.
func TestAuditSinceMovesForward(t *testing.T) {
	f, _ := sinceFixture(t, 2)
	if d, errOut, code := f.audit(t, "--since", "c1", "--checkpoint", "c1"); code != 0 || d.Checkpoint != "c1" {
		t.Fatalf("moving c1 on: exit %d %+v %s", code, d, errOut)
	}
	d, errOut, code := f.audit(t, "--since", "c1")
	if code != 0 || !d.Verified || d.Counts.CommitsRead != 0 || d.Counts.JournalRows != 0 {
		t.Fatalf("--since a checkpoint taken just now: exit %d %+v %s", code, d, errOut)
	}
}

// TestAuditSinceFindsTampering: what someone with plain git does after a
// checkpoint is found by --since, each named by its check.
func TestAuditSinceFindsTampering(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, f *fixture)
		check  string
	}{
		{"forged row", func(t *testing.T, f *fixture) {
			g := &forgetest.Forger{T: t, Dir: f.dir, Writer: "test-writer"}
			g.AppendRow(refs.Journal("S-1"), "S-1", record.KindCheckpoint, "ci", record.Checkpoint{Commit: strings.Repeat("a", 40)}, nil)
		}, "row_signature"},
		{"journal rolled back behind the checkpoint", func(t *testing.T, f *fixture) {
			f.git("update-ref", refs.Journal("S-1"), refs.Journal("S-1")+"~3")
		}, "non_fast_forward"},
		{"ref deleted", func(t *testing.T, f *fixture) {
			f.git("update-ref", "-d", refs.Journal("S-1"))
		}, "deletion"},
		{"row dropped after the checkpoint", func(t *testing.T, f *fixture) {
			// Still ahead of the checkpoint, but the audit mirror records
			// the post the journal lost.
			f.git("update-ref", refs.Journal("S-1"), refs.Journal("S-1")+"~1")
		}, "audit_mirror"},
		{"row its writer signed but never mirrored", func(t *testing.T, f *fixture) {
			id, err := keys.Load(f.home)
			if err != nil {
				t.Fatal(err)
			}
			g := &forgetest.Forger{T: t, Dir: f.dir, Signer: id, Writer: "test-writer"}
			g.AppendRow(refs.Journal("S-1"), "S-1", record.KindCheckpoint, "ci", record.Checkpoint{Commit: strings.Repeat("b", 40)}, nil)
		}, "audit_mirror"},
		{"audit entry whose HMAC does not recompute", func(t *testing.T, f *fixture) {
			appendAuditEntry(t, f, func(a *record.AuditEntry) { a.HMAC = strings.Repeat("0", 64) })
		}, "audit_hmac"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, _ := sinceFixture(t, 3)
			tc.tamper(t, f)
			d, errOut, code := f.audit(t, "--since", "c1")
			if code != 1 || d.Verified {
				t.Fatalf("--since after %s: exit %d %+v %s", tc.name, code, d, errOut)
			}
			var checks []string
			found := false
			for _, fl := range d.Failures {
				checks = append(checks, fl.Check+": "+fl.Reason)
				found = found || fl.Check == tc.check
			}
			if !found {
				t.Fatalf("--since after %s: no %s failure in %v", tc.name, tc.check, checks)
			}
			// The human output names the failure too.
			out, _, code := f.cli("", "audit", "verify", "--since", "c1")
			if code != 1 || !strings.Contains(out, "("+tc.check+")") {
				t.Fatalf("--since (text) after %s: exit %d\n%s", tc.name, code, out)
			}
		})
	}
}

// appendAuditEntry appends to the writer's audit mirror an entry signed
// with the writer's key (what a holder of the key could write), changed by
// edit before it is committed.
func appendAuditEntry(t *testing.T, f *fixture, edit func(*record.AuditEntry)) {
	t.Helper()
	id, err := keys.Load(f.home)
	if err != nil {
		t.Fatal(err)
	}
	ref := refs.Audit("test-writer")
	head := strings.TrimSpace(f.git("rev-parse", ref))
	msg := f.git("log", "-1", "--format=%B", ref)
	_, canon, _ := strings.Cut(strings.TrimSpace(msg), "\n\n")
	prev, err := record.ParseAuditEntry([]byte(canon))
	if err != nil {
		t.Fatal(err)
	}
	a := record.AuditEntry{V: 1, Writer: "test-writer", Seq: prev.Seq + 1, Event: "artifact.refused", Actor: "x", TaskID: "S-1",
		Resource: "bernstein://S-1/k", Details: json.RawMessage(`{}`), PrevHMAC: prev.HMAC}
	a.HMAC = id.MAC(a.MACBytes())
	edit(&a)
	b := record.MustCanonical(a)
	parent, _ := gitstore.ParseOid(head)
	c := gitstore.Commit{Tree: gitstore.EmptyTree, Parents: []gitstore.Oid{parent}, Author: gitstore.Ident("test-writer", "test-writer@bernstein", 1700000000),
		Committer: gitstore.Ident("test-writer", "test-writer@bernstein", 1700000000), Message: record.Message("artifact.refused S-1", b)}
	if c.Signature, err = id.SignCommit(gitstore.EncodeCommit(c)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "-C", f.dir, "hash-object", "-w", "-t", "commit", "--stdin")
	cmd.Stdin = strings.NewReader(string(gitstore.EncodeCommit(c)))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	f.git("update-ref", ref, strings.TrimSpace(string(out)), head)
}

// TestAuditCheckpointIsTheVerifiers: a checkpoint whose content was changed
// (here to take a rolled-back journal for its head), or one moved in from
// another repository, is refused, exit 2, and nothing is checked from it.
func TestAuditCheckpointIsTheVerifiers(t *testing.T) {
	f, _ := sinceFixture(t, 3)
	files, _ := filepath.Glob(filepath.Join(f.home, "audits", "*", "c1"))
	if len(files) != 1 {
		t.Fatalf("checkpoint files: %v", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	journal := refs.Journal("S-1")
	older := strings.TrimSpace(f.git("rev-parse", journal+"~4"))
	at := strings.TrimSpace(f.git("rev-parse", journal+"~2"))
	edited := strings.Replace(string(data), at, older, 1)
	if edited == string(data) {
		t.Fatalf("the checkpoint does not name %s", at)
	}
	if err := os.WriteFile(files[0], []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := f.cli("", "audit", "verify", "--since", "c1")
	if code != 2 || !strings.Contains(errOut, "not signed by this host's writer") {
		t.Fatalf("--since an edited checkpoint: exit %d %s", code, errOut)
	}

	// Another repository's checkpoint, signed by the same writer.
	other := &fixture{t: t, dir: filepath.Join(t.TempDir(), "repo"), home: f.home}
	other.opts = bernstein.Options{Repo: other.dir, Home: f.home}
	if _, err := bernstein.Init(other.opts, "test-writer"); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := other.cli("", "audit", "verify", "--checkpoint", "mine"); code != 0 {
		t.Fatalf("checkpoint of the other repository: exit %d %s", code, errOut)
	}
	theirs, _ := filepath.Glob(filepath.Join(f.home, "audits", "*", "mine"))
	if len(theirs) != 1 {
		t.Fatalf("checkpoint files: %v", theirs)
	}
	moved := filepath.Join(filepath.Dir(files[0]), "mine")
	if moved == theirs[0] {
		t.Fatal("two repositories share a checkpoint folder")
	}
	b, _ := os.ReadFile(theirs[0])
	os.WriteFile(moved, b, 0o600)
	if _, errOut, code := f.cli("", "audit", "verify", "--since", "mine"); code != 2 || !strings.Contains(errOut, "taken of the repository") {
		t.Fatalf("--since another repository's checkpoint: exit %d %s", code, errOut)
	}
	if _, errOut, code := f.cli("", "audit", "verify", "--since", "none"); code != 2 || !strings.Contains(errOut, "no such audit checkpoint") {
		t.Fatalf("--since a checkpoint never taken: exit %d %s", code, errOut)
	}
	if _, errOut, code := f.cli("", "audit", "verify", "--since", "../x"); code != 2 || !strings.Contains(errOut, "checkpoint") {
		t.Fatalf("--since a bad name: exit %d %s", code, errOut)
	}
}

// TestAuditCheckpointNotTakenWhenTampered: a checkpoint records only what
// was found whole.
func TestAuditCheckpointNotTakenWhenTampered(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "N-1", "agent")
	f.post(s, "N-1", "k", "agent", tok, report("one"))
	s.Close()
	g := &forgetest.Forger{T: t, Dir: f.dir, Writer: "test-writer"}
	g.AppendRow(refs.Journal("N-1"), "N-1", record.KindCheckpoint, "ci", record.Checkpoint{Commit: strings.Repeat("c", 40)}, nil)
	d, errOut, code := f.audit(t, "--checkpoint", "bad")
	if code != 1 || d.Checkpoint != "" || !strings.Contains(d.CheckpointNote, "not taken") || !strings.Contains(errOut, "not taken") {
		t.Fatalf("--checkpoint of a tampered repository: exit %d %+v %s", code, d, errOut)
	}
	if files, _ := filepath.Glob(filepath.Join(f.home, "audits", "*", "bad")); len(files) != 0 {
		t.Fatalf("a checkpoint of a tampered repository was written: %v", files)
	}
}

// TestAuditSinceTrustNarrowed: a checkpoint taken while this host trusted a
// writer it has since unpinned proves nothing about that writer's rows.
func TestAuditSinceTrustNarrowed(t *testing.T) {
	f := newFixture(t)
	other := filepath.Join(t.TempDir(), "other")
	cmd := exec.Command(cliBin, "--repo", f.dir, "init", "--writer", "host-b")
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+other)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("init host-b: %v %s", err, out)
	}
	if _, errOut, code := f.cli("", "keys", "pin", "host-b"); code != 0 {
		t.Fatalf("keys pin: %s", errOut)
	}
	if d, errOut, code := f.audit(t, "--checkpoint", "c1"); code != 0 || d.Checkpoint != "c1" {
		t.Fatalf("checkpoint: exit %d %+v %s", code, d, errOut)
	}
	if _, errOut, code := f.cli("", "keys", "unpin", "host-b"); code != 0 {
		t.Fatalf("keys unpin: %s", errOut)
	}
	if _, errOut, code := f.cli("", "audit", "verify", "--since", "c1"); code != 2 || !strings.Contains(errOut, "no longer trusts") || !strings.Contains(errOut, "host-b") {
		t.Fatalf("--since after an unpin: exit %d %s", code, errOut)
	}
}

// TestAuditSinceUnpinnedWriter: what a writer this host does not pin added
// since the checkpoint is unverifiable, not tampered: exit 0 with verified
// false and a note, and --strict exit 1.
func TestAuditSinceUnpinnedWriter(t *testing.T) {
	f := newFixture(t)
	if d, errOut, code := f.audit(t, "--checkpoint", "c1"); code != 0 || d.Checkpoint != "c1" {
		t.Fatalf("checkpoint: exit %d %+v %s", code, d, errOut)
	}
	other := filepath.Join(t.TempDir(), "other")
	b := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cliBin, append([]string{"--repo", f.dir}, args...)...)
		cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+other)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("host-b %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	b("init", "--writer", "host-b")
	b("task", "create", "B-1", "--title", "host b's")
	tok := b("task", "claim", "B-1", "--agent", "agent-b")
	b("artifact", "post", "B-1", "k", "--type", "report", "--body", "from host b", "--agent", "agent-b", "--claim-token", tok)

	d, errOut, code := f.audit(t, "--since", "c1")
	if code != 0 || d.Verified || len(d.Failures) != 0 || d.Counts.Unverifiable != 1 || d.Counts.SignaturesUnpinned == 0 {
		t.Fatalf("--since with an unpinned writer's rows: exit %d %+v %s", code, d, errOut)
	}
	out, _, code := f.cli("", "audit", "verify", "--since", "c1")
	if code != 0 || !strings.Contains(out, "unverifiable") || !strings.Contains(out, "keys pin") {
		t.Fatalf("--since (text): exit %d\n%s", code, out)
	}
	if _, _, code := f.cli("", "audit", "verify", "--since", "c1", "--strict"); code != 1 {
		t.Fatalf("--since --strict with an unpinned writer's rows: exit %d", code)
	}
}

// TestAuditSinceFindsRollbackToTheCheckpoint: posts after a checkpoint,
// then the journal, the spine and the audit mirror moved back with plain
// git to exactly where the checkpoint saw them. No ref differs from the
// checkpoint, so only the heads this host's writer wrote after it can tell:
// --since checks the chains written since the checkpoint's place in the
// heads file, and every head when that place is lost (the file rewritten).
func TestAuditSinceFindsRollbackToTheCheckpoint(t *testing.T) {
	for _, rewritten := range []bool{false, true} {
		t.Run(fmt.Sprintf("heads file rewritten %v", rewritten), func(t *testing.T) {
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "S-1", "agent")
			for i := 1; i <= 3; i++ {
				f.post(s, "S-1", "k", "agent", tok, report(fmt.Sprintf("v%d", i)))
			}
			s.Close()
			moved := []string{refs.Journal("S-1"), refs.Spine("test-writer"), refs.Audit("test-writer")}
			at := map[string]string{}
			for _, r := range moved {
				at[r] = strings.TrimSpace(f.git("rev-parse", r))
			}
			if d, errOut, code := f.audit(t, "--checkpoint", "c1"); code != 0 || d.Checkpoint != "c1" {
				t.Fatalf("audit verify --checkpoint: exit %d %+v %s", code, d, errOut)
			}
			s = f.open()
			f.post(s, "S-1", "k", "agent", tok, report("after 1"))
			f.post(s, "S-1", "k", "agent", tok, report("after 2"))
			s.Close()
			if d, errOut, code := f.audit(t, "--since", "c1"); code != 0 || !d.Verified {
				t.Fatalf("--since before the rollback: exit %d %+v %s", code, d, errOut)
			}
			for _, r := range moved {
				f.git("update-ref", r, at[r])
			}
			if rewritten {
				files, _ := filepath.Glob(filepath.Join(f.home, "heads", "*", "test-writer.heads"))
				if len(files) != 1 {
					t.Fatalf("heads files: %v", files)
				}
				b, err := os.ReadFile(files[0])
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(files[0]+".new", b, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(files[0]+".new", files[0]); err != nil {
					t.Fatal(err)
				}
			}
			d, errOut, code := f.audit(t, "--since", "c1")
			found := map[string]bool{}
			for _, fl := range d.Failures {
				if fl.Check == "rollback" {
					found[fl.TaskID+fl.Writer] = true
				}
			}
			if code != 1 || d.Verified || !found["S-1"] || !found["test-writer"] {
				t.Fatalf("--since after the rollback to the checkpoint: exit %d, rollbacks %v, %+v %s", code, found, d.Failures, errOut)
			}
		})
	}
}
