package progress

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// chainRows re-indexes and re-chains rows as a journal would hold them.
func chainRows(t testing.TB, task string, rows []record.Row) []record.Row {
	out := make([]record.Row, len(rows))
	prev := record.Hash("")
	for i, r := range rows {
		r.Index, r.Prev, r.TaskID = int64(i), prev, task
		out[i] = r
		prev = r.Hash()
	}
	return out
}

func row(t testing.TB, kind string, data any) record.Row {
	t.Helper()
	r, err := record.NewRow(kind, "T-1", 0, "", "orchestrator", data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ledgerRows(t testing.TB, kinds ...string) []record.Row {
	var rows []record.Row
	for _, k := range kinds {
		var data any = ledger.Transition{}
		switch k {
		case record.KindTaskCreated:
			data = ledger.Created{Title: "golden", Evidence: []ledger.Producer{
				{Name: "tests", Kind: "command", Command: "go test ./...", Required: true},
				{Name: "lint", Kind: "command", Command: "go vet ./...", Required: true},
			}, Gates: []ledger.Gate{{Name: "build", Command: "make"}}}
		case record.KindTaskClaimed:
			data = ledger.Claimed{Agent: "agent-1", ClaimID: "claim-0001", TokenSHA256: record.Sum([]byte("token"))}
		}
		rows = append(rows, row(t, k, data))
	}
	return chainRows(t, "T-1", rows)
}

func output(path string) record.Output {
	return record.Output{Path: path, Blob: "0123456789012345678901234567890123456789", Hash: record.Sum([]byte(path)), Size: 3}
}

func artifactRow(t testing.TB, key string, v int64) record.Row {
	return row(t, record.KindArtifactPosted, record.ArtifactPosted{Key: key, ArtifactType: "report", Version: v,
		ContentHash: record.Sum([]byte(key)), Blob: "0123456789012345678901234567890123456789", Size: 10})
}

func workRows(t testing.TB) []record.Row {
	return []record.Row{
		row(t, record.KindCheckpoint, record.Checkpoint{Commit: "1111111111111111111111111111111111111111"}),
		row(t, record.KindDiffCaptured, record.DiffCaptured{Base: "1111111111111111111111111111111111111111", Head: "2222222222222222222222222222222222222222", Patch: output("outputs/000001-diff.patch"), Files: 2, Added: 10, Removed: 3}),
		row(t, record.KindGateAttempt, record.GateAttempt{Gate: "build", Command: "make", ExitCode: 2, Passed: false, Output: output("outputs/000002-gate-build.log")}),
		row(t, record.KindGateAttempt, record.GateAttempt{Gate: "build", Command: "make", ExitCode: 0, Passed: true, Output: output("outputs/000003-gate-build.log")}),
		row(t, record.KindEvidenceResult, record.EvidenceResult{Producer: "tests", Kind: "command", Command: "go test ./...", Required: true, ExitCode: 0, Passed: true, Output: output("outputs/000004-evidence-tests.log")}),
		row(t, record.KindEvidenceResult, record.EvidenceResult{Producer: "lint", Kind: "command", Command: "go vet ./...", Required: true, ExitCode: 1, Passed: false, Output: output("outputs/000005-evidence-lint.log")}),
		row(t, record.KindCheckpoint, record.Checkpoint{Commit: "2222222222222222222222222222222222222222"}),
	}
}

// TestGoldenVector pins the canonical bytes and hash of a fixed sequence.
func TestGoldenVector(t *testing.T) {
	journal := chainRows(t, "T-1", workRows(t))
	led := ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted)
	v, err := FoldProgress("T-1", journal, led)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"checkpoints":2,"diffs_captured":1,"evidence_declared":2,"evidence_passed":1,"gate_attempts":2,"gates_passed":1,"ledger_attempts":1,"ledger_phase":"started","schema_version":1,"task_id":"T-1","terminal":false}`
	if got := string(v.Bytes()); got != want {
		t.Fatalf("canonical bytes\n got %s\nwant %s", got, want)
	}
	const wantHash = "4f6fcc87c587f03b23670de8be192c1bece19cd68783a4ac45d602a0a397730f"
	if v.Hash() != wantHash {
		t.Fatalf("vector_hash %s, want %s", v.Hash(), wantHash)
	}
	if v.EarnedSteps() != 2+1+2+1 {
		t.Fatalf("earned steps %d", v.EarnedSteps())
	}
	w := v.ToWire(journal[len(journal)-1].Hash(), int64(len(journal)), led[len(led)-1].Hash(), int64(len(led)))
	if w.PhaseOrdinal != 2 || w.VectorHash != wantHash || w.JournalRows != 7 || w.LedgerRows != 3 {
		t.Fatalf("wire: %+v", w)
	}
	// A terminal ledger changes the phase, the terminal flag and the hash.
	done := ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted, record.KindTaskCompleted)
	v2, _ := FoldProgress("T-1", journal, done)
	if !v2.Terminal || v2.LedgerPhase != "completed" || v2.Hash() == v.Hash() {
		t.Fatalf("terminal vector: %+v", v2)
	}
}

// TestArtifactsNeverMoveIt: any interleaving of artifact posts (and of rows of
// unknown kinds, and extra wall-clock fields) leaves the bytes unchanged.
func TestArtifactsNeverMoveIt(t *testing.T) {
	led := ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted)
	base, err := FoldProgress("T-1", chainRows(t, "T-1", workRows(t)), led)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 300; trial++ {
		rows := workRows(t)
		n := rng.Intn(60)
		versions := map[string]int64{}
		for i := 0; i < n; i++ {
			at := rng.Intn(len(rows) + 1)
			var extra record.Row
			switch rng.Intn(3) {
			case 0, 1:
				key := fmt.Sprintf("k%d", rng.Intn(4))
				versions[key]++
				extra = artifactRow(t, key, versions[key])
			default:
				extra = row(t, "progress_claimed", map[string]any{"percent": 99, "at": "2026-11-30T10:00:00Z"})
			}
			rows = append(rows[:at], append([]record.Row{extra}, rows[at:]...)...)
		}
		got, err := FoldProgress("T-1", chainRows(t, "T-1", rows), led)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), base.Bytes()) {
			t.Fatalf("trial %d: %d inserted rows moved the vector:\n%s\n%s", trial, n, got.Bytes(), base.Bytes())
		}
	}
	// A wall-clock field inside a work row's data does not move it either.
	withClock := row(t, record.KindGateAttempt, map[string]any{"gate": "build", "passed": true, "finished_at": "2026-11-30T10:00:00Z", "duration_ms": 1234})
	plain := row(t, record.KindGateAttempt, map[string]any{"gate": "build", "passed": true})
	a, _ := FoldProgress("T-1", chainRows(t, "T-1", []record.Row{withClock}), led)
	b, _ := FoldProgress("T-1", chainRows(t, "T-1", []record.Row{plain}), led)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("a wall-clock field moved the vector")
	}
}

// TestCheckpointsAdvanceStrictly: each checkpoint moves the vector forward.
func TestCheckpointsAdvanceStrictly(t *testing.T) {
	led := ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted)
	var rows []record.Row
	prev, _ := FoldProgress("T-1", nil, led)
	seen := map[string]bool{prev.Hash(): true}
	for n := 1; n <= 50; n++ {
		rows = append(rows, row(t, record.KindCheckpoint, record.Checkpoint{Commit: fmt.Sprintf("%040d", n)}))
		v, err := FoldProgress("T-1", chainRows(t, "T-1", rows), led)
		if err != nil {
			t.Fatal(err)
		}
		if v.Checkpoints != int64(n) || v.EarnedSteps() <= prev.EarnedSteps() {
			t.Fatalf("after %d checkpoints: %+v (before %+v)", n, v, prev)
		}
		if seen[v.Hash()] {
			t.Fatalf("checkpoint %d repeated an earlier vector hash", n)
		}
		seen[v.Hash()] = true
		prev = v
	}
}

// TestFoldDeterministic: random row sequences fold to the same bytes every
// time, and folding incrementally (split anywhere, cloned) equals folding at
// once.
func TestFoldDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	kinds := []string{record.KindCheckpoint, record.KindDiffCaptured, record.KindGateAttempt, record.KindEvidenceResult, record.KindArtifactPosted, "future_kind"}
	led := ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted, record.KindTaskSuspended)
	for trial := 0; trial < 200; trial++ {
		var rows []record.Row
		for i := rng.Intn(80); i > 0; i-- {
			k := kinds[rng.Intn(len(kinds))]
			var data any
			switch k {
			case record.KindCheckpoint:
				data = record.Checkpoint{Commit: fmt.Sprintf("%040x", rng.Int63())}
			case record.KindGateAttempt:
				data = record.GateAttempt{Gate: "g", Passed: rng.Intn(2) == 0}
			case record.KindEvidenceResult:
				data = record.EvidenceResult{Producer: []string{"tests", "lint", "undeclared"}[rng.Intn(3)], Passed: rng.Intn(2) == 0}
			case record.KindArtifactPosted:
				data = record.ArtifactPosted{Key: "k"}
			default:
				data = map[string]any{"n": rng.Intn(100)}
			}
			rows = append(rows, row(t, k, data))
		}
		rows = chainRows(t, "T-1", rows)
		a, err := FoldProgress("T-1", rows, led)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := FoldProgress("T-1", rows, led)
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("two folds of the same rows differ")
		}
		split := 0
		if len(rows) > 0 {
			split = rng.Intn(len(rows) + 1)
		}
		var j Journal
		for _, r := range rows[:split] {
			j.Apply(r)
		}
		cached := j.Clone()
		for _, r := range rows[split:] {
			cached.Apply(r)
		}
		var l ledger.State
		for _, r := range led {
			l.Apply(r)
		}
		if inc := Project("T-1", cached, &l); !bytes.Equal(inc.Bytes(), a.Bytes()) {
			t.Fatalf("incremental fold differs from a fold at once")
		}
		if a.EvidencePassed > a.EvidenceDeclared {
			t.Fatalf("an undeclared producer counted: %+v", a)
		}
	}
}

// TestEvidenceLatestResultCounts: a declared producer counts when its latest
// result passed; a later failure takes it back.
func TestEvidenceLatestResultCounts(t *testing.T) {
	led := ledgerRows(t, record.KindTaskCreated)
	pass := row(t, record.KindEvidenceResult, record.EvidenceResult{Producer: "tests", Passed: true})
	fail := row(t, record.KindEvidenceResult, record.EvidenceResult{Producer: "tests", Passed: false})
	v, _ := FoldProgress("T-1", chainRows(t, "T-1", []record.Row{pass}), led)
	if v.EvidencePassed != 1 || v.EvidenceDeclared != 2 {
		t.Fatalf("after a pass: %+v", v)
	}
	v, _ = FoldProgress("T-1", chainRows(t, "T-1", []record.Row{pass, fail}), led)
	if v.EvidencePassed != 0 {
		t.Fatalf("after pass then fail: %+v", v)
	}
}

func BenchmarkFold(b *testing.B) {
	rows := make([]record.Row, 0, 1000)
	for i := 0; i < 1000; i++ {
		rows = append(rows, row(b, record.KindGateAttempt, record.GateAttempt{Gate: "g", Passed: i%2 == 0}))
	}
	rows = chainRows(b, "T-1", rows)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var j Journal
		for _, r := range rows {
			j.Apply(r)
		}
	}
}
