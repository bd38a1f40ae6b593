package bernstein_test

// The read and write paths' own checks, each reached by a forgery or a run
// that only that check stops: a journal row signed by the trusted writer
// whose prev does not link, a clone that trusts no key at all, and commands
// that time out or are killed.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// wantVector checks a vector's canonical bytes against the bytes written by
// hand, and its hash against their sha256.
func wantVector(t *testing.T, what string, got bernstein.TaskInfo, want string) {
	t.Helper()
	if b := string(got.Progress.Vector.Bytes()); b != want {
		t.Fatalf("%s: vector\n%s\nwant\n%s", what, b, want)
	}
	if sum := sha256.Sum256([]byte(want)); got.Progress.VectorHash != hex.EncodeToString(sum[:]) {
		t.Fatalf("%s: vector_hash %s is not the sha256 of the canonical bytes", what, got.Progress.VectorHash)
	}
}

// TestJournalPrevLinkOnTheReadPath: a journal row signed with the trusted
// writer's own key, at the right index and on top of the journal's head
// commit, whose prev names an older row (a re-chained row) does not count:
// progress, the handle and the CLI show the vector without it and the row
// at fault, and nothing is posted or recorded on top of it. The same row
// with its prev right counts, so the link is all that stops it.
func TestJournalPrevLinkOnTheReadPath(t *testing.T) {
	const task = "L-1"
	// Two honest rows: a checkpoint of HEAD~1 (row 0) and summary v1 (row 1).
	const honest = `{"checkpoints":1,"diffs_captured":0,"evidence_declared":0,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,` +
		`"ledger_attempts":0,"ledger_phase":"claimed","schema_version":3,"task_id":"L-1","terminal":false}`
	const withRow = `{"checkpoints":2,"diffs_captured":0,"evidence_declared":0,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,` +
		`"ledger_attempts":0,"ledger_phase":"claimed","schema_version":3,"task_id":"L-1","terminal":false}`
	for _, linked := range []bool{false, true} {
		t.Run(map[bool]string{false: "prev-names-row-0", true: "prev-links"}[linked], func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.withCommits()
			s := f.open()
			tok := f.claimed(s, task, "agent")
			row0, err := s.Checkpoint(task, "HEAD~1", "")
			if err != nil {
				t.Fatal(err)
			}
			f.post(s, task, "summary", "agent", tok, report("honest"))
			before, err := s.Task(task)
			if err != nil {
				t.Fatal(err)
			}
			wantVector(t, "before", *before, honest)

			id, err := keys.Load(f.home)
			if err != nil {
				t.Fatal(err)
			}
			g := &forgetest.Forger{T: t, Dir: f.dir, Signer: id, Writer: "test-writer"}
			var prev func(record.Hash) record.Hash
			if !linked {
				prev = func(record.Hash) record.Hash { return row0.RowHash }
			}
			head := strings.TrimSpace(f.git("rev-parse", "HEAD"))
			g.AppendRowPrev(refs.Journal(task), task, record.KindCheckpoint, "test-writer", prev, record.Checkpoint{Commit: head,
				Tree: strings.TrimSpace(f.git("rev-parse", "HEAD^{tree}")), ParentTree: strings.TrimSpace(f.git("rev-parse", "HEAD~1^{tree}"))}, nil)
			if p := strings.TrimSpace(f.git("rev-parse", refs.Journal(task)+"~1")); p == "" || f.git("show", "-s", "--format=%G?", refs.Journal(task)) == "N\n" {
				t.Fatalf("the re-chained row is not a signed commit on top of the journal")
			}

			if linked {
				after, err := f.open().Task(task)
				if err != nil {
					t.Fatal(err)
				}
				wantVector(t, "with the row linked", *after, withRow)
				if after.Progress.Proof.State != "verified" || len(after.Progress.Proof.RowsAtFault) != 0 || after.JournalRows != 3 {
					t.Fatalf("a row signed by the writer and linked did not count: %+v", after.Progress.Proof)
				}
				return
			}

			// The store that was open (its fold extends the one in memory)
			// and a fresh one say the same.
			for name, st := range map[string]*bernstein.Store{"open store": s, "fresh store": f.open()} {
				after, err := st.Task(task)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				wantVector(t, name, *after, honest)
				p := after.Progress.Proof
				if after.JournalRows != 2 || p.State != "tampered" || len(p.RowsAtFault) != 1 {
					t.Fatalf("%s: journal rows %d, proof %+v", name, after.JournalRows, p)
				}
				if rf := p.RowsAtFault[0]; rf.Chain != "journal" || rf.Index != 2 || rf.Writer != "test-writer" || rf.State != "tampered" || !strings.Contains(rf.Reason, "broken at row 2") {
					t.Fatalf("%s: row at fault %+v", name, rf)
				}
				h, err := st.TaskHandle(task)
				if err != nil || h.ProgressHash != before.Progress.VectorHash || h.Progress.Proof.State != "tampered" || len(h.Progress.Proof.RowsAtFault) != 1 {
					t.Fatalf("%s: handle %+v %v", name, h, err)
				}
				journal := f.git("rev-parse", refs.Journal(task))
				if _, err := st.Post(bernstein.PostRequest{Task: task, Key: "summary", Agent: "agent", ClaimToken: tok, Payload: report("on top")}); !errors.Is(err, bernstein.ErrUnproven) {
					t.Fatalf("%s: post on a re-chained journal: %v", name, err)
				}
				if _, err := st.Checkpoint(task, "HEAD", ""); !errors.Is(err, bernstein.ErrUnproven) {
					t.Fatalf("%s: checkpoint on a re-chained journal: %v", name, err)
				}
				if f.git("rev-parse", refs.Journal(task)) != journal {
					t.Fatalf("%s: the journal moved", name)
				}
			}
			if out, _, code := f.cli("", "task", "progress", task); code != 2 || !strings.Contains(out, "tampered") {
				t.Fatalf("task progress: exit %d\n%s", code, out)
			}
		})
	}
}

// TestUnanchoredCloneCountsUnverifiable: a plain git clone opened with no
// writer identity and no pins trusts no key. Its progress is computed from
// the rows whose signatures check against the keys the writers' refs
// publish, the same vector as on the writer's host, and marked
// unverifiable (not verified, and not a vector of zeros), with no row at
// fault; an unsigned forged row there still does not count.
func TestUnanchoredCloneCountsUnverifiable(t *testing.T) {
	a := newFixture(t)
	a.withCommits()
	s := a.open()
	const task = "U-1"
	tok := a.startedTask(s, task)
	for _, step := range []func() error{
		func() error { _, err := s.Checkpoint(task, "HEAD~1", ""); return err },
		func() error { _, err := s.Checkpoint(task, "HEAD", ""); return err },
		func() error { _, err := s.CaptureDiff(task, "HEAD~1", "HEAD", ""); return err },
		func() error { _, err := s.RunGate(task, "build", nil, bernstein.RunOptions{}); return err },
		func() error { _, err := s.RunEvidence(task, nil, bernstein.RunOptions{}); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	a.post(s, task, "summary", "agent", tok, report("findings"))
	const want = `{"checkpoints":2,"diffs_captured":1,"evidence_declared":1,"evidence_passed":1,"gate_attempts":1,"gates_passed":1,` +
		`"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"U-1","terminal":false}`
	host, err := s.Task(task)
	if err != nil {
		t.Fatal(err)
	}
	wantVector(t, "the writer's host", *host, want)
	if host.Progress.Proof.State != "verified" {
		t.Fatalf("the writer's host: %+v", host.Progress.Proof)
	}

	root := t.TempDir()
	b := &fixture{t: t, dir: filepath.Join(root, "clone"), home: filepath.Join(root, "no-home")}
	b.opts = bernstein.Options{Repo: b.dir, Home: b.home}
	if out, err := execGit(root, "clone", "-q", a.dir, b.dir); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	b.git("fetch", "-q", "origin", "refs/bernstein/*:refs/bernstein/*")

	check := func(what, wantState string, faults int) {
		t.Helper()
		c := b.open()
		if tr, err := c.Trust(); err != nil || tr.Anchored() {
			t.Fatalf("%s: the clone trusts a key: %v", what, err)
		}
		got, err := c.Task(task)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wantVector(t, what, *got, want)
		if got.Progress.EarnedSteps != 5 || got.Progress.Proof.State != wantState || len(got.Progress.Proof.RowsAtFault) != faults {
			t.Fatalf("%s: earned %d, proof %+v", what, got.Progress.EarnedSteps, got.Progress.Proof)
		}
		h, err := c.TaskHandle(task)
		if err != nil || h.ProgressHash != host.Progress.VectorHash || h.Progress.Proof.State != wantState || len(h.Progress.Proof.RowsAtFault) != faults {
			t.Fatalf("%s: handle %+v %v", what, h, err)
		}
		out, _, code := b.cli("", "task", "progress", task, "--output-json")
		var w struct {
			VectorHash string `json:"vector_hash"`
			Proof      struct {
				State       string            `json:"state"`
				RowsAtFault []json.RawMessage `json:"rows_at_fault"`
			} `json:"proof"`
		}
		decodeJSON(t, out, &w)
		wantCode := 0
		if faults > 0 {
			wantCode = 2
		}
		if code != wantCode || w.VectorHash != host.Progress.VectorHash || w.Proof.State != wantState || w.Proof.RowsAtFault == nil || len(w.Proof.RowsAtFault) != faults {
			t.Fatalf("%s: task progress exit %d\n%s", what, code, out)
		}
	}
	check("the clone", "unverifiable", 0)
	if _, err := os.Stat(b.home); !os.IsNotExist(err) {
		t.Fatalf("reading made a home on the clone: %v", err)
	}

	// An unsigned diff forged on the clone: a new patch, which would earn.
	patch := []byte("diff --git a/x b/x\n+forged on the clone\n")
	out := record.Output{Path: "outputs/000099-diff.patch", Blob: gitstore.HashObject(gitstore.TypeBlob, patch).String(), Hash: record.Sum(patch), Size: int64(len(patch))}
	(&forgetest.Forger{T: t, Dir: b.dir, Writer: "test-writer"}).AppendRow(refs.Journal(task), task, record.KindDiffCaptured, "mallory",
		record.DiffCaptured{Base: strings.TrimSpace(b.git("rev-parse", "HEAD~1")), Head: strings.TrimSpace(b.git("rev-parse", "HEAD")), Patch: out, Files: 1, Added: 1},
		map[string][]byte{out.Path: patch})
	check("the clone with a forged row", "tampered", 1)
}

// TestTimedOutAndKilledCommandsFail: a gate or evidence command that
// outlives its timeout is killed, with the processes it started, and
// recorded as exit 137 and failed; so is one killed by a signal; none
// earns anything, on the library and on the CLI (which exits 4).
func TestTimedOutAndKilledCommandsFail(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	const task = "K-1"
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task,
		Gates: []ledger.Gate{{Name: "slow", Command: "sleep 10"}, {Name: "killed", Command: "kill -9 $$"},
			{Name: "group", Command: "sleep 30 & echo $! > " + pidFile + "; wait"}},
		Evidence: []ledger.Producer{{Name: "slowtests", Command: "sleep 10", Required: true}, {Name: "killedtests", Command: "kill -9 $$", Required: true}},
	}); err != nil {
		t.Fatal(err)
	}
	timeout := bernstein.RunOptions{Timeout: 300 * time.Millisecond}
	gateRun := func(gate string, argv []string, o bernstein.RunOptions) record.GateAttempt {
		t.Helper()
		res, err := s.RunGate(task, gate, argv, o)
		if err != nil {
			t.Fatal(err)
		}
		return res.Data.(record.GateAttempt)
	}
	failed := func(what string, exitCode int64, passed bool, started time.Time) {
		t.Helper()
		if exitCode != 137 || passed {
			t.Fatalf("%s: recorded exit %d, passed %v; want exit 137, failed", what, exitCode, passed)
		}
		if d := time.Since(started); d > 5*time.Second {
			t.Fatalf("%s: took %s: the timeout did not stop it", what, d)
		}
	}

	start := time.Now()
	g := gateRun("slow", nil, timeout)
	failed("declared gate past its timeout", g.ExitCode, g.Passed, start)
	if log := f.git("show", refs.Journal(task)+":"+g.Output.Path); !strings.Contains(log, "killed after the 300ms timeout") {
		t.Fatalf("the stored output does not say why: %q", log)
	}
	start = time.Now()
	g = gateRun("adhoc", []string{"sleep", "10"}, timeout)
	failed("ad-hoc gate past its timeout", g.ExitCode, g.Passed, start)
	start = time.Now()
	g = gateRun("killed", nil, bernstein.RunOptions{})
	failed("gate killed by a signal", g.ExitCode, g.Passed, start)

	// The whole process group goes: the background child too.
	start = time.Now()
	g = gateRun("group", nil, timeout)
	failed("gate with a child past its timeout", g.ExitCode, g.Passed, start)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		// Gone, or a zombie its new parent has not reaped yet.
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate's child %d outlived the timeout: %s", pid, stat)
		}
	}

	start = time.Now()
	results, err := s.RunEvidence(task, []string{"slowtests", "killedtests"}, timeout)
	if err != nil || len(results) != 2 {
		t.Fatalf("evidence: %v %d", err, len(results))
	}
	for _, r := range results {
		e := r.Data.(record.EvidenceResult)
		failed("evidence "+e.Producer, e.ExitCode, e.Passed, start)
	}

	// The CLI: exit 4, the receipt says 137 and failed.
	for _, args := range [][]string{
		{"gate", "run", task, "slow", "--timeout", "1s", "--quiet", "--output-json"},
		{"gate", "run", task, "adhoc", "--timeout", "1s", "--quiet", "--output-json", "--", "sleep", "10"},
		{"evidence", "run", task, "slowtests", "--timeout", "1s", "--quiet", "--output-json"},
	} {
		start = time.Now()
		out, errOut, code := f.cli("", args...)
		if code != 4 || !strings.Contains(out, `"exit_code": 137`) || !strings.Contains(out, `"passed": false`) || time.Since(start) > 8*time.Second {
			t.Fatalf("%s: exit %d after %s\n%s%s", strings.Join(args, " "), code, time.Since(start), out, errOut)
		}
	}

	// Six gate attempts and three evidence results, none passed.
	got, err := f.open().Task(task)
	if err != nil {
		t.Fatal(err)
	}
	wantVector(t, "after the runs", *got, `{"checkpoints":0,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":6,"gates_passed":0,`+
		`"ledger_attempts":0,"ledger_phase":"created","schema_version":3,"task_id":"K-1","terminal":false}`)
	if got.Progress.EarnedSteps != 0 || got.JournalRows != 9 {
		t.Fatalf("after the runs: earned %d, %d journal rows", got.Progress.EarnedSteps, got.JournalRows)
	}
}
