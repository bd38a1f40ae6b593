package bernstein_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// withCommits gives the fixture's work tree two commits to checkpoint, each
// with a tree of its own (so each earns); the second changes a file, so a
// diff between them is not empty.
func (f *fixture) withCommits() {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "README"), []byte("planner\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	f.git("add", "README")
	f.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "first")
	if err := os.WriteFile(filepath.Join(f.dir, "planner.txt"), []byte("prefer hash joins\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	f.git("add", "planner.txt")
	f.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "second")
}

// TestFiftyReportsEarnNothing: posting reports never moves the vector.
func TestFiftyReportsEarnNothing(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "R-1", "agent")
	before, err := s.Progress("R-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		f.post(s, "R-1", fmt.Sprintf("report-%d", i%5), "agent", tok, report(fmt.Sprintf("progress: %d%% done", 2*i)))
	}
	after, err := s.Progress("R-1")
	if err != nil {
		t.Fatal(err)
	}
	if after.VectorHash != before.VectorHash || after.EarnedSteps != 0 {
		t.Fatalf("fifty reports moved the vector: %+v -> %+v", before, after)
	}
	if after.JournalRows != 50 {
		t.Fatalf("journal rows %d", after.JournalRows)
	}
	// A fresh store (no in-memory cache) folds the same vector.
	if cold, _ := f.open().Progress("R-1"); cold.VectorHash != after.VectorHash {
		t.Fatalf("cold fold differs from the cached one")
	}
}

// TestWorkRows: gates, evidence and checkpoints move the vector as docs/cli.md
// (Progress vector) says, and a checkpoint of an unknown revision writes nothing.
func TestWorkRows(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "W-1",
		Evidence: []ledger.Producer{{Name: "tests", Command: "echo tests ok", Required: true}, {Name: "lint", Command: "echo lint bad >&2; exit 3", Required: true}},
		Gates:    []ledger.Gate{{Name: "build", Command: "exit 1"}, {Name: "smoke", Command: "echo smoke; exit 0"}},
	}); err != nil {
		t.Fatal(err)
	}
	p0, _ := s.Progress("W-1")

	// A failing gate: attempts up, passed not.
	res, err := s.RunGate("W-1", "build", nil, bernstein.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := res.Data.(record.GateAttempt)
	if g.Passed || g.ExitCode != 1 || res.Progress.GateAttempts != 1 || res.Progress.GatesPassed != 0 {
		t.Fatalf("failing gate: %+v %+v", g, res.Progress)
	}
	// A declared gate that passes earns its step, once.
	res, err = s.RunGate("W-1", "smoke", nil, bernstein.RunOptions{})
	if err != nil || !res.Data.(record.GateAttempt).Passed || res.Progress.GatesPassed != 1 || res.Progress.GateAttempts != 2 {
		t.Fatalf("passing gate: %v %+v", err, res)
	}
	if out := f.git("show", "refs/bernstein/journal/W-1:"+res.Data.(record.GateAttempt).Output.Path); out != "smoke\n" {
		t.Fatalf("gate output stored as %q", out)
	}
	// An ad-hoc gate given on the command line is an attempt that earns
	// nothing.
	res, err = s.RunGate("W-1", "adhoc", []string{"sh", "-c", "exit 0"}, bernstein.RunOptions{})
	if err != nil || !res.Data.(record.GateAttempt).Passed || res.Progress.GatesPassed != 1 || res.Progress.GateAttempts != 3 {
		t.Fatalf("ad-hoc gate: %v %+v", err, res)
	}
	// Evidence: the passing producer moves evidence_passed, the failing one not.
	results, err := s.RunEvidence("W-1", nil, bernstein.RunOptions{})
	if err != nil || len(results) != 2 {
		t.Fatalf("evidence: %v %d", err, len(results))
	}
	last := results[1].Progress
	if last.EvidenceDeclared != 2 || last.EvidencePassed != 1 {
		t.Fatalf("evidence progress: %+v", last)
	}
	if _, err := s.RunEvidence("W-1", []string{"undeclared"}, bernstein.RunOptions{}); err == nil {
		t.Fatalf("an undeclared producer ran")
	}
	// A checkpoint of an unknown revision is refused and writes nothing.
	refsBefore, objectsBefore := f.refsSnapshot(), f.objectFiles()
	for _, rev := range []string{"no-such-branch", "deadbeef", "HEAD~99", "--all", "refs/bernstein/journal/W-1^{tree}"} {
		_, err := s.Checkpoint("W-1", rev, "")
		var in *artifact.InputError
		if !errors.As(err, &in) || in.Field != "commit" {
			t.Fatalf("checkpoint of %q: %v", rev, err)
		}
	}
	if f.refsSnapshot() != refsBefore || !reflect.DeepEqual(f.objectFiles(), objectsBefore) {
		t.Fatalf("a refused checkpoint wrote something")
	}
	// A real one advances the vector.
	res, err = s.Checkpoint("W-1", "HEAD~1", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Data.(record.Checkpoint).Commit != strings.TrimSpace(f.git("rev-parse", "HEAD~1")) || res.Progress.Checkpoints != 1 {
		t.Fatalf("checkpoint: %+v", res)
	}
	// A diff capture stores the patch.
	res, err = s.CaptureDiff("W-1", "HEAD~1", "HEAD", "")
	if err != nil || res.Progress.DiffsCaptured != 1 {
		t.Fatalf("diff: %v %+v", err, res)
	}
	p1, _ := s.Progress("W-1")
	// Earned: one checkpoint, one diff, one declared gate passed (smoke),
	// one declared producer passed (tests).
	if p1.EarnedSteps != 1+1+1+1 || p1.VectorHash == p0.VectorHash {
		t.Fatalf("progress after the work: %+v", p1)
	}
	// The vector, written out by hand in canonical form (sorted members),
	// hashed here, not by the code under test.
	want := `{"checkpoints":1,"diffs_captured":1,"evidence_declared":2,"evidence_passed":1,"gate_attempts":3,"gates_passed":1,` +
		`"ledger_attempts":0,"ledger_phase":"created","schema_version":3,"task_id":"W-1","terminal":false}`
	if got := string(p1.Vector.Bytes()); got != want {
		t.Fatalf("vector after the work:\n%s\nwant\n%s", got, want)
	}
	if sum := sha256.Sum256([]byte(want)); hex.EncodeToString(sum[:]) != p1.VectorHash {
		t.Fatalf("vector_hash %s is not the sha256 of the canonical bytes", p1.VectorHash)
	}
	// Work on an ended task is refused.
	if _, err := s.Transition("W-1", record.KindTaskAbandoned, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint("W-1", "HEAD", ""); err == nil {
		t.Fatalf("checkpoint of an abandoned task succeeded")
	}
	f.fsck()
}

// TestCrossHostDeterminism: a task's life split across two hosts, moved with
// plain git, projects to byte-identical vectors on both.
func TestCrossHostDeterminism(t *testing.T) {
	a := newFixture(t)
	a.withCommits()
	sa := a.open()
	if _, err := sa.CreateTask(bernstein.TaskSpec{ID: "X:1", Evidence: []ledger.Producer{{Name: "tests", Command: "true", Required: true}}}); err != nil {
		t.Fatal(err)
	}
	tok, _ := sa.Claim("X:1", "agent-a")
	sa.Transition("X:1", record.KindTaskStarted, "", "")
	if _, err := sa.Checkpoint("X:1", "HEAD~1", ""); err != nil {
		t.Fatal(err)
	}
	sa.RunEvidence("X:1", nil, bernstein.RunOptions{})
	f := report("host a")
	for i := 0; i < 5; i++ {
		a.post(sa, "X:1", "notes", "agent-a", tok, f)
	}
	if _, err := sa.Transition("X:1", record.KindTaskReleased, "", "handing over"); err != nil {
		t.Fatal(err)
	}

	// Host B: a plain git clone that fetches refs/bernstein/*, its own home.
	root := t.TempDir()
	b := &fixture{t: t, dir: filepath.Join(root, "b"), home: filepath.Join(root, "home-b")}
	b.opts = bernstein.Options{Repo: b.dir, Home: b.home}
	if out, err := execGit(root, "clone", "-q", a.dir, b.dir); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	b.git("fetch", "-q", "origin", "refs/bernstein/*:refs/bernstein/*")
	if _, err := bernstein.Init(b.opts, "writer-b"); err != nil {
		t.Fatal(err)
	}
	// Each host pins the other's key: rows count only when a trusted
	// writer signed them.
	pins := filepath.Join(root, "allowed_signers")
	if err := os.WriteFile(pins, []byte(b.publishedSigners()), 0o644); err != nil {
		t.Fatal(err)
	}
	a.opts.AllowedSigners, b.opts.AllowedSigners = pins, pins
	sb := b.open()
	pa, _ := sa.Progress("X:1")
	pb, _ := sb.Progress("X:1")
	if pa.VectorHash != pb.VectorHash || !reflect.DeepEqual(pa.Vector.Bytes(), pb.Vector.Bytes()) {
		t.Fatalf("after the fetch the hosts disagree:\n%s\n%s", pa.Vector.Bytes(), pb.Vector.Bytes())
	}
	// Resume on B: claim, start, checkpoint, complete.
	if _, err := sb.Claim("X:1", "agent-b"); err != nil {
		t.Fatal(err)
	}
	sb.Transition("X:1", record.KindTaskStarted, "", "")
	if _, err := sb.Checkpoint("X:1", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Transition("X:1", record.KindTaskCompleted, "", ""); err != nil {
		t.Fatal(err)
	}
	// Back to A with plain git (fast-forward only).
	a.git("fetch", "-q", b.dir, "refs/bernstein/*:refs/bernstein/*")
	pa, _ = a.open().Progress("X:1")
	pb, _ = sb.Progress("X:1")
	if ta, _ := a.open().Task("X:1"); ta.Progress.Proof.State != "verified" {
		t.Fatalf("host a with b's key pinned: %+v", ta.Progress.Proof)
	}
	if pa.VectorHash != pb.VectorHash || string(pa.Vector.Bytes()) != string(pb.Vector.Bytes()) {
		t.Fatalf("after the resume the hosts disagree:\n%s\n%s", pa.Vector.Bytes(), pb.Vector.Bytes())
	}
	if pa.LedgerAttempts != 2 || pa.Checkpoints != 2 || !pa.Terminal || pa.EvidencePassed != 1 || pa.JournalHead != pb.JournalHead {
		t.Fatalf("resumed vector: %+v", pa)
	}
	// The CLI on either host prints the same canonical fields.
	outA, _, _ := a.cli("", "--allowed-signers", pins, "task", "progress", "X:1", "--output-json")
	outB, _, _ := b.cli("", "--allowed-signers", pins, "task", "progress", "X:1", "--output-json")
	if outA != outB || !strings.Contains(outA, pa.VectorHash) {
		t.Fatalf("CLI output differs across hosts:\n%s\n%s", outA, outB)
	}
}

// TestProgressCacheIsDerived: a cold process uses the on-disk fold cache,
// and deleting it changes no output.
func TestProgressCacheIsDerived(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	f.claimed(s, "CA-1", "agent")
	for i := 0; i < 40; i++ {
		if _, err := s.Checkpoint("CA-1", "HEAD", ""); err != nil {
			t.Fatal(err)
		}
	}
	warm, _ := f.open().Progress("CA-1") // a cold store folds 40 rows and writes the cache
	cache := filepath.Join(f.dir, ".git", "bernstein", "cache", "journal", "CA-1.json")
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("no fold cache after a 40-row fold: %v", err)
	}
	s.Checkpoint("CA-1", "HEAD~1", "")
	viaCache, _ := f.open().Progress("CA-1") // extends the cached fold by one row
	os.RemoveAll(filepath.Join(f.dir, ".git", "bernstein", "cache"))
	fresh, _ := f.open().Progress("CA-1")
	if viaCache.VectorHash != fresh.VectorHash || viaCache.Checkpoints != 2 || warm.Checkpoints != 1 || viaCache.JournalRows != 41 {
		t.Fatalf("cache changed the output: %+v vs %+v", viaCache, fresh)
	}
	// A cache that does not descend from the journal's head is not used.
	os.MkdirAll(filepath.Dir(cache), 0o755)
	os.WriteFile(cache, []byte(`{"head":"`+strings.Repeat("1", 40)+`","state":{"Task":"CA-1","Rows":999,"Head":"","Keys":{},"Progress":{"Checkpoints":999}}}`), 0o644)
	if p, _ := f.open().Progress("CA-1"); p.Checkpoints != 2 || p.JournalRows != 41 {
		t.Fatalf("a bogus cache was believed: %+v", p)
	}
}
