package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// adoptHosts is the three-host scene of TestRemoteAdopt: host-a made task
// T-1 and pushed it, host-b and host-c cloned, every host trusts every
// other's key.
type adoptHosts struct {
	srv     *gitServer
	url     string
	root    string
	a, b, c *host
	tok     string // the claim token of agent-host-a on T-1
	signers string
}

func newAdoptHosts(t *testing.T, kind string) *adoptHosts {
	t.Helper()
	isolateGit(t)
	s := &adoptHosts{srv: newGitServer(t, kind), root: t.TempDir()}
	s.url, s.a = newOrigin(t, s.srv, s.root)
	s.tok = s.a.work("T-1", "notes", 1)
	s.a.ok("push")
	s.b, _ = cloneHost(t, s.url, s.root, "host-b")
	s.c, _ = cloneHost(t, s.url, s.root, "host-c")
	s.signers = writeSigners(t, filepath.Join(s.root, "signers"), s.a, s.b, s.c)
	// The operator pins them all: a writer trusted only on first use may
	// not act on another's task (docs/trust.md).
	s.srv.operatorPin(t, "tasks.git", s.signers, s.a, s.b, s.c)
	for _, h := range []*host{s.a, s.b, s.c} {
		h.signers = s.signers
	}
	return s
}

// bodies lists the bodies of task's versions of key as h shows them, and
// fails unless every one is verified.
func bodies(t *testing.T, h *host, task, key string) []string {
	t.Helper()
	var list struct {
		Artifacts []struct {
			Key     string `json:"key"`
			Version int64  `json:"version"`
			State   string `json:"state"`
		} `json:"artifacts"`
	}
	out := h.ok("artifact", "list", task, "--output-json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%s: artifact list: %v\n%s", h.name, err, out)
	}
	var got []string
	for _, v := range list.Artifacts {
		if v.Key != key {
			continue
		}
		if v.State != "verified" {
			t.Fatalf("%s: %s %s v%d is %s\n%s", h.name, task, key, v.Version, v.State, out)
		}
		show := h.ok("artifact", "show", task, key, "--version", fmt.Sprint(v.Version), "--strict")
		_, body, _ := strings.Cut(show, "\n\n")
		body, _, _ = strings.Cut(body, "\n\nhistory (oldest first):")
		got = append(got, strings.TrimSpace(body))
	}
	return got
}

// TestRemoteAdopt: three hosts write to task T-1 with one claim before
// seeing each other's rows; host-b also works an unrelated task. host-a
// pushes first. host-b's push exits 5 naming T-1 only, and its unrelated
// task reaches the remote; 'task adopt' resolves the divergence, and its
// push goes through; host-c then diverges from what host-b pushed and
// adopts too. Afterwards every host and a fresh clone verify (exit 0,
// never TAMPERED) and report both resolutions; every version each host
// wrote is there, verified, re-recorded on top of the winner's, and each
// dropped version is still readable from its fork ref.
func TestRemoteAdopt(t *testing.T) {
	for _, kind := range gitServerKinds {
		t.Run(kind, func(t *testing.T) {
			s := newAdoptHosts(t, kind)
			a, b, c := s.a, s.b, s.c
			a.post("T-1", "notes", "agent-host-a", s.tok, 1)
			b.post("T-1", "notes", "agent-host-a", s.tok, 2)
			c.post("T-1", "notes", "agent-host-a", s.tok, 1)
			b.work("T-B", "notes", 1)
			a.ok("push")
			bJournal := b.refs()[refs.Journal("T-1")]

			// A diverged task blocks only itself.
			r := b.want(5, "push")
			mustHave(t, "host-b's push", r.err, "diverged: task T-1 (journal)", "task adopt T-1 origin")
			if strings.Contains(r.err, "T-B") {
				t.Fatalf("host-b's push names T-B, which did not diverge:\n%s", r.err)
			}
			remote := refsOf(t, s.srv.dir("tasks.git"), refs.Prefix)
			if remote[refs.Journal("T-B")] != b.refs()[refs.Journal("T-B")] {
				t.Fatalf("host-b's unrelated task T-B did not reach the remote: %v", sorted(remote))
			}
			if remote[refs.Journal("T-1")] != a.refs()[refs.Journal("T-1")] {
				t.Fatalf("the remote's T-1 is not host-a's")
			}
			r = b.want(5, "fetch")
			mustHave(t, "host-b's fetch", r.err, "task adopt T-1 origin")
			// Pending: no host calls it tampered before the adoption; one
			// that fetched host-b's spine and fork names the divergence.
			a.ok("fetch")
			for _, h := range []*host{a, b} {
				r := h.run("audit", "verify", "--strict")
				if r.code != 0 || strings.Contains(r.out+r.err, "TAMPERED") || h == a && !strings.Contains(r.out, "pending: writer host-b's 2 rows of T-1") {
					t.Fatalf("%s before the adoption: audit verify exited %d\n%s%s", h.name, r.code, r.out, r.err)
				}
			}

			out := b.ok("task", "adopt", "T-1")
			mustHave(t, "host-b's adopt", out, "resolved: 2 rows of T-1 re-recorded after a divergence with origin", "kept: refs/bernstein/forks/host-b/journal/T-1/1")
			if fork := b.refs()["refs/bernstein/forks/host-b/journal/T-1/1"]; fork != bJournal {
				t.Fatalf("host-b's fork of T-1 is %s, not the journal it had, %s", fork, bJournal)
			}
			// At once, before any push or fetch: the adopted task, and the
			// winner's spine entries it leans on, moved together.
			if r := b.run("audit", "verify", "--strict"); r.code != 0 || !strings.Contains(r.out, "resolved: 2 rows of T-1") {
				t.Fatalf("host-b right after its adopt: audit verify --strict exited %d\n%s%s", r.code, r.out, r.err)
			}
			b.ok("push")
			// A second adopt has nothing to resolve and writes nothing.
			before := b.refs()
			r = b.want(1, "task", "adopt", "T-1")
			mustHave(t, "second adopt", r.err, "has not diverged")
			sameRefs(t, "host-b's refs after a second adopt", b.refs(), before)

			// host-c diverged from what host-b pushed: it adopts too.
			r = c.want(5, "push")
			mustHave(t, "host-c's push", r.err, "diverged: task T-1 (journal)")
			out = c.ok("task", "adopt", "T-1", "origin")
			mustHave(t, "host-c's adopt", out, "resolved: 1 rows of T-1 re-recorded after a divergence with origin")
			c.ok("push")
			for _, h := range []*host{a, b, c} {
				h.ok("fetch")
			}
			want := []string{
				"T-1: post 0 on host-a", "T-1: post 0 on host-a", // host-a's (its second post has the same body)
				"T-1: post 0 on host-b", "T-1: post 1 on host-b", // host-b's, re-recorded
				"T-1: post 0 on host-c", // host-c's, re-recorded
			}
			d := newHost(t, s.root, "host-d")
			if r := d.runIn(s.root, "clone", s.url, d.dir); r.code != 0 {
				t.Fatalf("clone: exit %d\n%s%s", r.code, r.out, r.err)
			}
			d.signers = s.signers
			for _, h := range []*host{a, b, c, d} {
				if got := bodies(t, h, "T-1", "notes"); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: T-1's notes are\n%q\nwant\n%q", h.name, got, want)
				}
				r := h.run("audit", "verify", "--strict")
				if r.code != 0 || strings.Contains(r.out+r.err, "TAMPERED") {
					t.Fatalf("%s after the adoptions: audit verify --strict exited %d\n%s%s", h.name, r.code, r.out, r.err)
				}
				mustHave(t, h.name+"'s audit verify", r.out,
					"resolved: 2 rows of T-1 re-recorded after a divergence with origin",
					"resolved: 1 rows of T-1 re-recorded after a divergence with origin")
				if strings.Contains(r.out, "pending:") {
					t.Fatalf("%s: a divergence is still pending:\n%s", h.name, r.out)
				}
			}
			// --strict on the clone says what it could not check here: every
			// writer's HMACs, in its summary and its JSON.
			r = d.run("audit", "verify", "--strict")
			mustHave(t, "the clone's audit verify --strict", r.out, "not checked here: ", "audit entry HMACs of writer host-a, host-b, host-c",
				"strict: 1 kind(s) of check could not be made here")
			r = d.run("audit", "verify", "--strict", "--output-json")
			var rep struct {
				NotChecked []struct {
					Check   string   `json:"check"`
					Count   int      `json:"count"`
					Writers []string `json:"writers"`
				} `json:"not_checked"`
				Resolutions []struct {
					Task       string `json:"task_id"`
					Writer     string `json:"writer"`
					Rerecorded int    `json:"rerecorded"`
				} `json:"resolutions"`
			}
			decodeJSON(t, r.out, &rep)
			if len(rep.NotChecked) != 1 || rep.NotChecked[0].Check != "audit_hmac" || rep.NotChecked[0].Count == 0 || len(rep.NotChecked[0].Writers) != 3 {
				t.Fatalf("the clone's JSON not_checked: %+v", rep.NotChecked)
			}
			if len(rep.Resolutions) != 2 {
				t.Fatalf("the clone's JSON resolutions: %+v", rep.Resolutions)
			}
			// Nothing lost: each dropped version is readable, with git
			// itself, from its fork on a host that only cloned.
			for _, fv := range []struct{ ref, path, body string }{
				{"refs/bernstein/forks/host-b/journal/T-1/1", "artifacts/notes/v3.json", "post 1 on host-b"},
				{"refs/bernstein/forks/host-c/journal/T-1/1", "artifacts/notes/v2.json", "post 0 on host-c"},
			} {
				commit := strings.TrimSpace(d.git("rev-parse", fv.ref))
				if got := d.git("show", commit+":"+fv.path); !strings.Contains(got, fv.body) {
					t.Fatalf("%s:%s on the clone is %q, want %q", fv.ref, fv.path, got, fv.body)
				}
			}
		})
	}
}

// TestAdoptRefusesWhatDoesNotVerify: task adopt takes the remote's chains
// only when every row verifies here. A host that pins no key of the
// winner's writer is refused, naming the row and what to do, and nothing
// moves; once the key is pinned, the same adopt resolves it, recording its
// post and its checkpoint again.
func TestAdoptRefusesWhatDoesNotVerify(t *testing.T) {
	s := newAdoptHosts(t, "file")
	a, b := s.a, s.b
	a.post("T-1", "notes", "agent-host-a", s.tok, 1)
	b.post("T-1", "notes", "agent-host-a", s.tok, 1)
	b.ok("checkpoint", "T-1", "--commit", strings.TrimSpace(b.git("rev-parse", "origin/main")))
	a.ok("push")
	b.signers = ""
	before := b.refs()
	r := b.want(1, "task", "adopt", "T-1")
	mustHave(t, "adopt of unpinned rows", r.err, "origin's journal of task T-1 does not verify here at index 0", "keys pin")
	sameRefs(t, "host-b's refs after the refused adopt", b.refs(), before)
	b.ok("keys", "pin", "host-a")
	out := b.ok("task", "adopt", "T-1")
	mustHave(t, "adopt once pinned", out, "re-recorded: journal row 1 (artifact_posted notes v2) as row 2",
		"re-recorded: journal row 2 (checkpoint) as row 3", "resolved: 2 rows of T-1 re-recorded after a divergence with origin")
	b.ok("push")
	if r := b.run("audit", "verify", "--strict"); r.code != 0 {
		t.Fatalf("after the adoption: audit verify exited %d\n%s%s", r.code, r.out, r.err)
	}
}

// TestAdoptHeadsLeftBehind: task adopt moves the task's refs and its
// spine in one transaction and the heads this host remembers after it; a
// crash between the two leaves the old heads. The adopted chain must not
// then read as rolled back: the signed supersede entry in this writer's
// spine names the head it replaced.
func TestAdoptHeadsLeftBehind(t *testing.T) {
	s := newAdoptHosts(t, "file")
	a, b := s.a, s.b
	a.post("T-1", "notes", "agent-host-a", s.tok, 1)
	b.post("T-1", "notes", "agent-host-a", s.tok, 2)
	a.ok("push")
	b.want(5, "push")
	saved := filepath.Join(s.root, "heads-before")
	if err := os.CopyFS(saved, os.DirFS(filepath.Join(b.home, "heads"))); err != nil {
		t.Fatal(err)
	}
	b.ok("task", "adopt", "T-1")
	// What a crash after the refs moved, before the heads were written,
	// leaves.
	if err := os.RemoveAll(filepath.Join(b.home, "heads")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(b.home, "heads"), os.DirFS(saved)); err != nil {
		t.Fatal(err)
	}
	r := b.run("audit", "verify", "--strict")
	if r.code != 0 || strings.Contains(r.out, "rolled back") || strings.Contains(r.out, "rewritten") {
		t.Fatalf("after the adoption with the old heads: audit verify exited %d\n%s%s", r.code, r.out, r.err)
	}
	b.ok("artifact", "list", "T-1", "--strict")
	b.post("T-1", "notes", "agent-host-a", s.tok, 1)
	b.ok("push")
}

// TestForgedSupersedeHidesNoRollback: a supersede entry speaks for this
// writer's remembered heads only when this writer signed it. Someone with
// plain git write access rolls a journal back one row and appends to the
// writer's spine an unsigned supersede entry naming the dropped row: audit
// verify still reports the rollback.
func TestForgedSupersedeHidesNoRollback(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T-1", "agent")
	f.post(s, "T-1", "notes", "agent", tok, report("one"))
	f.post(s, "T-1", "notes", "agent", tok, report("two"))
	s.Close()
	journal := refs.Journal("T-1")
	head := strings.TrimSpace(f.git("rev-parse", journal))
	f.git("update-ref", journal, head+"~1", head)
	last := record.Sum([]byte(strings.TrimSpace(strings.SplitN(f.git("log", "-1", "--format=%B", head), "\n\n", 2)[1])))
	spine := strings.TrimSpace(f.git("rev-parse", refs.Spine("test-writer")))
	prevRec := strings.TrimSpace(strings.SplitN(f.git("log", "-1", "--format=%B", spine), "\n\n", 2)[1])
	prev, err := record.ParseSpineEntry([]byte(prevRec))
	if err != nil {
		t.Fatal(err)
	}
	first := record.Sum([]byte(strings.TrimSpace(strings.SplitN(f.git("log", "-1", "--format=%B", head+"~1"), "\n\n", 2)[1])))
	e := record.SpineSupersedeEntry{
		SpineHeader: record.SpineHeader{V: record.Version, Writer: "test-writer", Seq: prev.Header.Seq + 1, Prev: prev.Hash, Kind: record.SpineSupersede},
		TaskID:      "T-1", Remote: "origin", Entries: []record.Hash{},
		Journal: record.SupersededChain{Dropped: []record.Hash{last}, DroppedRows: 2, Adopted: first, AdoptedRows: 1, Head: first, Rows: 1},
		Ledger:  record.SupersededChain{Dropped: []record.Hash{}},
	}
	msg := record.Message("supersede T-1", record.MustCanonical(e))
	cmd := execGitStdin(f.dir, msg, "commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-p", spine)
	forged := strings.TrimSpace(string(mustOutput(t, cmd)))
	f.git("update-ref", refs.Spine("test-writer"), forged, spine)
	out, _, code := f.cli("", "audit", "verify", "--output-json")
	var rep struct {
		Failures []struct {
			Check  string `json:"check"`
			TaskID string `json:"task_id"`
		} `json:"failures"`
	}
	decodeJSON(t, out, &rep)
	found := false
	for _, fl := range rep.Failures {
		found = found || fl.Check == "rollback" && fl.TaskID == "T-1"
	}
	if code != 1 || !found {
		t.Fatalf("audit verify exited %d without the rollback of T-1's journal:\n%s", code, out)
	}
}

// TestForkThatDoesNotDivergeExplainsNothing: a fork explains a writer's
// spine entries only where the task's chain holds other rows. Someone with
// plain git write access rolls a journal back one row and points a fork
// ref at the dropped head (a fork merely ahead of the task): a host with
// no remembered heads (another home, the key pinned) still reports the
// spine entry that seals the dropped row.
func TestForkThatDoesNotDivergeExplainsNothing(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T-1", "agent")
	f.post(s, "T-1", "notes", "agent", tok, report("one"))
	f.post(s, "T-1", "notes", "agent", tok, report("two"))
	s.Close()
	journal := refs.Journal("T-1")
	head := strings.TrimSpace(f.git("rev-parse", journal))
	f.git("update-ref", journal, head+"~1", head)
	f.git("update-ref", refs.Fork("test-writer", "journal", "T-1", 1), head)
	signers := filepath.Join(t.TempDir(), "signers")
	if err := os.WriteFile(signers, []byte(f.publishedSigners()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cliBin, "--repo", f.dir, "audit", "verify", "--output-json")
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+t.TempDir(), "BERNSTEIN_ALLOWED_SIGNERS="+signers, "BERNSTEIN_FORCE_TTY=0")
	out, _ := cmd.Output()
	var rep struct {
		Failures []struct {
			Check string `json:"check"`
		} `json:"failures"`
		Pending []any `json:"pending"`
	}
	decodeJSON(t, string(out), &rep)
	if len(rep.Failures) == 0 || len(rep.Pending) != 0 || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("a fork that does not diverge explained the dropped row (exit %d):\n%s", cmd.ProcessState.ExitCode(), out)
	}
}
