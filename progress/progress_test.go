package progress

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

var seedFlag = flag.Int64("progress.seed", 0, "seed of the property tests (0: from the clock)")

// seed returns the property tests' seed and prints it, so a failure can be
// replayed with -progress.seed.
func seed(t *testing.T) int64 {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -progress.seed=%d)", s, s)
	return s
}

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

// ledgerRows builds a ledger. task.created declares two evidence producers
// (tests, lint) and two gates (build = make, vet = go vet ./...).
func ledgerRows(t testing.TB, kinds ...string) []record.Row {
	var rows []record.Row
	for _, k := range kinds {
		var data any = ledger.Transition{}
		switch k {
		case record.KindTaskCreated:
			data = ledger.Created{Title: "golden", Evidence: []ledger.Producer{
				{Name: "tests", Kind: "command", Command: "go test ./...", Required: true},
				{Name: "lint", Kind: "command", Command: "go vet ./...", Required: true},
			}, Gates: []ledger.Gate{{Name: "build", Command: "make"}, {Name: "vet", Command: "go vet ./..."}}}
		case record.KindTaskClaimed:
			data = ledger.Claimed{Agent: "agent-1", ClaimID: "claim-0001", TokenSHA256: record.Sum([]byte("token"))}
		}
		rows = append(rows, row(t, k, data))
	}
	return chainRows(t, "T-1", rows)
}

// working is the ledger of a claimed and started task.
func working(t testing.TB) []record.Row {
	return ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted)
}

func output(path string) record.Output {
	return record.Output{Path: path, Blob: "0123456789012345678901234567890123456789", Hash: record.Sum([]byte(path)), Size: 3}
}

func artifactRow(t testing.TB, key string, v int64) record.Row {
	return row(t, record.KindArtifactPosted, record.ArtifactPosted{Key: key, ArtifactType: "report", Version: v,
		ContentHash: record.Sum([]byte(key)), Blob: "0123456789012345678901234567890123456789", Size: 10})
}

// Trees used by the scripts (the scripts' commits are named after their
// trees: commit "A" has tree treeA). treeP is the parent tree of every
// commit checkpoint() makes, a tree the scripts never checkpoint.
const (
	treeA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	treeB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	treeC = "cccccccccccccccccccccccccccccccccccccccc"
	treeD = "dddddddddddddddddddddddddddddddddddddddd"
	treeP = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
	// emptyTree is git's id of the tree with no entries: a root commit's
	// parent tree.
	emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
)

// commitOf names a script commit after its tree.
func commitOf(tree string) string {
	if len(tree) < 40 {
		return tree
	}
	return "c" + tree[1:]
}

// checkpoint is a checkpoint of a commit whose tree is tree and whose first
// parent's tree is treeP: a commit that changed something.
func checkpoint(t testing.TB, tree string) record.Row {
	return cp(t, tree, treeP)
}

// cp is a checkpoint of a commit with tree and first parent's tree parent.
func cp(t testing.TB, tree, parent string) record.Row {
	return row(t, record.KindCheckpoint, record.Checkpoint{Commit: commitOf(tree), Tree: tree, ParentTree: parent})
}

// legacyCheckpoint is a checkpoint row as schema 2 wrote it: a commit, no
// trees.
func legacyCheckpoint(t testing.TB, commit string) record.Row {
	return row(t, record.KindCheckpoint, record.Checkpoint{Commit: commit})
}

// diff is a diff_captured row between the commits of trees base and head
// whose stored patch is patch.
func diff(t testing.TB, base, head, patch string, files int64) record.Row {
	out := record.Output{Path: "outputs/000000-diff.patch", Blob: "0123456789012345678901234567890123456789",
		Hash: record.Sum([]byte(patch)), Size: int64(len(patch))}
	return row(t, record.KindDiffCaptured, record.DiffCaptured{Base: commitOf(base), Head: commitOf(head), BaseTree: base, HeadTree: head,
		Patch: out, Files: files, Added: files})
}

// legacyDiff is a diff_captured row as schema 2 wrote it: no trees.
func legacyDiff(t testing.TB, base, head, patch string) record.Row {
	out := record.Output{Path: "outputs/000000-diff.patch", Blob: "0123456789012345678901234567890123456789",
		Hash: record.Sum([]byte(patch)), Size: int64(len(patch))}
	return row(t, record.KindDiffCaptured, record.DiffCaptured{Base: base, Head: head, Patch: out, Files: 1, Added: 1})
}

func gate(t testing.TB, name, command string, exit int64, passed bool) record.Row {
	return row(t, record.KindGateAttempt, record.GateAttempt{Gate: name, Command: command, ExitCode: exit, Passed: passed,
		Output: output("outputs/000000-gate-" + name + ".log")})
}

func evidence(t testing.TB, producer string, exit int64, passed bool) record.Row {
	return row(t, record.KindEvidenceResult, record.EvidenceResult{Producer: producer, Kind: "command", Command: "go test ./...",
		Required: true, ExitCode: exit, Passed: passed, Output: output("outputs/000000-evidence-" + producer + ".log")})
}

const (
	patch1 = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
	patch2 = "diff --git a/y b/y\nnew file mode 100644\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+y\n"
	patch3 = "diff --git a/x b/x\nold mode 100644\nnew mode 100755\n"
	// patch1 reversed, with no context, and with no prefixes.
	patch1r  = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-b\n+a\n"
	patch1u0 = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\n"
	patch1np = "diff --git x x\n--- x\n+++ x\n@@ -1 +1 @@\n-a\n+b\n"
)

func workRows(t testing.TB) []record.Row {
	return []record.Row{
		row(t, record.KindCheckpoint, record.Checkpoint{Commit: "1111111111111111111111111111111111111111", Tree: treeA, ParentTree: treeP}),
		row(t, record.KindDiffCaptured, record.DiffCaptured{Base: "1111111111111111111111111111111111111111", Head: "2222222222222222222222222222222222222222",
			BaseTree: treeA, HeadTree: treeB, Patch: output("outputs/000001-diff.patch"), Files: 2, Added: 10, Removed: 3}),
		row(t, record.KindGateAttempt, record.GateAttempt{Gate: "build", Command: "make", ExitCode: 2, Passed: false, Output: output("outputs/000002-gate-build.log")}),
		row(t, record.KindGateAttempt, record.GateAttempt{Gate: "build", Command: "make", ExitCode: 0, Passed: true, Output: output("outputs/000003-gate-build.log")}),
		row(t, record.KindEvidenceResult, record.EvidenceResult{Producer: "tests", Kind: "command", Command: "go test ./...", Required: true, ExitCode: 0, Passed: true, Output: output("outputs/000004-evidence-tests.log")}),
		row(t, record.KindEvidenceResult, record.EvidenceResult{Producer: "lint", Kind: "command", Command: "go vet ./...", Required: true, ExitCode: 1, Passed: false, Output: output("outputs/000005-evidence-lint.log")}),
		row(t, record.KindCheckpoint, record.Checkpoint{Commit: "2222222222222222222222222222222222222222", Tree: treeB, ParentTree: treeA}),
	}
}

func fold(t testing.TB, journal, led []record.Row) Vector {
	t.Helper()
	v, err := FoldProgress("T-1", chainRows(t, "T-1", journal), led)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestGoldenVector pins the canonical bytes and hash of a fixed sequence.
func TestGoldenVector(t *testing.T) {
	journal := chainRows(t, "T-1", workRows(t))
	led := working(t)
	v, err := FoldProgress("T-1", journal, led)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"checkpoints":2,"diffs_captured":1,"evidence_declared":2,"evidence_passed":1,"gate_attempts":2,"gates_passed":1,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`
	if got := string(v.Bytes()); got != want {
		t.Fatalf("canonical bytes\n got %s\nwant %s", got, want)
	}
	// printf '%s' "$want" | sha256sum
	const wantHash = "f6ea2d756e1a49383f2a4390c58a25a5d63dc1c6939ae98fc91406b8482b810f"
	if v.Hash() != wantHash {
		t.Fatalf("vector_hash %s, want %s", v.Hash(), wantHash)
	}
	// 2 checkpoints + 1 diff + 1 declared gate passed + 1 producer passed;
	// the failed gate attempt earns nothing.
	if v.EarnedSteps() != 5 {
		t.Fatalf("earned steps %d, want 5", v.EarnedSteps())
	}
	w := v.ToWire(journal[len(journal)-1].Hash(), int64(len(journal)), led[len(led)-1].Hash(), int64(len(led)))
	if w.PhaseOrdinal != 2 || w.VectorHash != wantHash || w.JournalRows != 7 || w.LedgerRows != 3 || w.EarnedSteps != 5 {
		t.Fatalf("wire: %+v", w)
	}
	const wantString = "2 checkpoints, 1 diff, 1 gate passed (2 attempts), 1/2 evidence passed, phase started"
	if v.String() != wantString {
		t.Fatalf("String() = %q, want %q", v.String(), wantString)
	}
	// A terminal ledger changes the phase, the terminal flag and the hash.
	done := ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted, record.KindTaskCompleted)
	v2, _ := FoldProgress("T-1", journal, done)
	if !v2.Terminal || v2.LedgerPhase != "completed" || v2.Hash() == v.Hash() {
		t.Fatalf("terminal vector: %+v", v2)
	}
	// The same session recorded twice earns nothing more: only the attempts
	// of the repeated gate runs show.
	twice := fold(t, append(workRows(t), workRows(t)...), led)
	const wantTwice = `{"checkpoints":2,"diffs_captured":1,"evidence_declared":2,"evidence_passed":1,"gate_attempts":4,"gates_passed":1,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`
	if got := string(twice.Bytes()); got != wantTwice || twice.EarnedSteps() != 5 {
		t.Fatalf("the session twice\n got %s (earned %d)\nwant %s (earned 5)", got, twice.EarnedSteps(), wantTwice)
	}
}

// TestScripts: scripted journals against vectors written by hand, with the
// earned steps after every row.
func TestScripts(t *testing.T) {
	cases := []struct {
		name   string
		rows   func(t testing.TB) []record.Row
		earned []int64 // earned_steps after each row
		want   string  // canonical bytes after the last row
	}{
		{
			name: "five times the same checkpoint, then two distinct",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{checkpoint(t, treeA), checkpoint(t, treeA), checkpoint(t, treeA), checkpoint(t, treeA),
					checkpoint(t, treeA), checkpoint(t, treeB), checkpoint(t, treeC)}
			},
			earned: []int64{1, 1, 1, 1, 1, 2, 3},
			want:   `{"checkpoints":3,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			name: "one tree however spelt; trees that are no object ids",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{checkpoint(t, treeA), checkpoint(t, strings.ToUpper(treeA)), checkpoint(t, ""),
					checkpoint(t, "AbCdEf0123"), cp(t, treeB, ""), cp(t, treeB, "abc"), cp(t, treeB+"0", treeP),
					cp(t, strings.Repeat("g", 40), treeP), cp(t, strings.Repeat("b", 64), treeP)}
			},
			earned: []int64{1, 1, 1, 1, 1, 1, 1, 1, 2},
			want:   `{"checkpoints":2,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			// Issue 17, path 2, and its variants: a commit earns for a tree
			// that is new, never for one it shares with its first parent or
			// with a checkpoint counted before.
			name: "empty commits, amends, reverts, cherry-picks and rebases",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					cp(t, emptyTree, emptyTree), // git commit --allow-empty as the root commit
					cp(t, treeP, treeP),         // git commit --allow-empty
					cp(t, treeP, treeP),         // and again
					cp(t, treeP, treeP),         // git commit --amend --allow-empty --no-edit
					cp(t, treeA, treeP),         // a real change
					cp(t, treeA, treeP),         // git commit --amend --no-edit: a new commit, the same tree
					cp(t, treeA, treeA),         // git commit --allow-empty on top of it
					cp(t, treeB, treeA),         // a real change
					cp(t, treeA, treeB),         // git revert: back to a counted tree
					cp(t, treeB, treeA),         // revert the revert: counted too
					cp(t, treeB, treeC),         // a cherry-pick onto another branch landing a counted tree
					cp(t, treeB, treeD),         // a rebase landing the same tree on another parent
					cp(t, treeP, treeA),         // a revert back to the base tree: a tree not counted before
					cp(t, treeP, treeB),         // and to it again
					cp(t, treeC, emptyTree),     // a root commit with files
				}
			},
			earned: []int64{0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 4},
			want:   `{"checkpoints":4,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			// Issue 17, path 1: checkpointing the journal made a new journal
			// head each time. Journal commits carry the empty tree or one
			// row's files; were one ever recorded, its tree earns once.
			name: "a chain's commits recorded as checkpoints earn once per tree at most",
			rows: func(t testing.TB) []record.Row {
				var rows []record.Row
				for i := 0; i < 20; i++ {
					rows = append(rows, cp(t, emptyTree, emptyTree))
				}
				return rows
			},
			earned: make([]int64, 20),
			want:   `{"checkpoints":0,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			name: "rows written under schema 2 (no trees) earn nothing",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					legacyCheckpoint(t, commitOf(treeA)), legacyCheckpoint(t, commitOf(treeB)),
					legacyDiff(t, commitOf(treeA), commitOf(treeB), patch1),
					checkpoint(t, treeA),                 // the same commit with its trees: new work
					legacyCheckpoint(t, commitOf(treeC)), // still nothing
					diff(t, treeA, treeB, patch1, 1),     // with its trees
					legacyDiff(t, commitOf(treeB), commitOf(treeC), patch2),
				}
			},
			earned: []int64{0, 0, 0, 1, 1, 2, 2},
			want:   `{"checkpoints":1,"diffs_captured":1,"evidence_declared":2,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			// Issue 17, paths 3 and 4, and their variants: one pair of trees
			// is one change, in either order, whatever patch was stored.
			name: "a change captured forwards, backwards, with other options, between other commits",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					diff(t, treeA, treeA, "", 0),                      // base == head
					diff(t, treeA, treeB, patch1, 1),                  // new
					diff(t, treeB, treeA, patch1r, 1),                 // the same change reversed
					diff(t, treeA, treeB, patch1u0, 1),                // the same change with diff.context=0
					diff(t, treeA, treeB, patch1np, 1),                // the same change with diff.noprefix
					diff(t, strings.ToUpper(treeA), treeB, patch1, 1), // the same trees, spelt otherwise
					diff(t, treeB, treeC, patch2, 1),                  // new
					diff(t, treeB, treeB, "", 3),                      // claims files, stored nothing
					diff(t, treeC, treeD, patch3, 1),                  // trees that differ only in a mode: a real change
					diff(t, treeD, treeC, patch3, 1),                  // reversed
					diff(t, treeA, treeD, "", 0),                      // trees that differ but a patch that shows nothing
					diff(t, treeD, treeD, patch1, 1),                  // a patch stored for one tree: no change
					row(t, record.KindDiffCaptured, record.DiffCaptured{Base: treeA, Head: treeD, BaseTree: treeA, HeadTree: treeD, Files: 1,
						Patch: record.Output{Path: "outputs/000009-diff.patch", Size: 12}}), // a size but no hash: nothing to tell it by
					diff(t, treeA, "", patch1, 1),    // one tree missing
					diff(t, treeA, treeC, patch2, 1), // a pair not captured before, implied by A..B and B..C
				}
			},
			earned: []int64{0, 1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3},
			want:   `{"checkpoints":0,"diffs_captured":3,"evidence_declared":2,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			name: "declared gate fails, passes, passes again; ad-hoc gate passes",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					gate(t, "build", "make", 2, false),
					gate(t, "build", "make", 0, true),
					gate(t, "build", "make", 0, true),
					gate(t, "smoke", "true", 0, true),                  // not declared
					gate(t, "build", "true", 0, true),                  // declared name, another command: ad hoc
					gate(t, "build", "make", 1, false),                 // a later failure takes nothing back
					gate(t, "vet", "go vet ./...", 0, true),            // the second declared gate
					gate(t, "vet", "go vet ./...", 0, true),            // again
					gate(t, "tests", "go test ./...", 0, true),         // an evidence producer's name is not a gate
					gate(t, "lint", "go vet ./... && golint", 0, true), // nor is an undeclared name
				}
			},
			earned: []int64{0, 1, 1, 1, 1, 1, 2, 2, 2, 2},
			want:   `{"checkpoints":0,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":10,"gates_passed":2,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			name: "a declared gate's name with another command is an ad-hoc gate",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					gate(t, "build", "true", 0, true),    // gate run T build -- true
					gate(t, "build", "make -k", 0, true), // close, but not the declared command
					gate(t, "vet", "true", 0, true),
					gate(t, "build", "make", 0, true), // the declared command
				}
			},
			earned: []int64{0, 0, 0, 1},
			want:   `{"checkpoints":0,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":4,"gates_passed":1,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			name: "timeout exit 137 with passed=true forged",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					gate(t, "build", "make", 137, true),  // forged: killed, claims passed
					gate(t, "build", "make", 137, false), // the honest timeout
					gate(t, "vet", "go vet ./...", -1, true),
					evidence(t, "tests", 137, true),
					evidence(t, "lint", 1, true),
					gate(t, "build", "make", 0, false), // exit 0 but not passed: not a pass either
					gate(t, "build", "make", 0, true),  // the real pass
				}
			},
			earned: []int64{0, 0, 0, 0, 0, 0, 1},
			want:   `{"checkpoints":0,"diffs_captured":0,"evidence_declared":2,"evidence_passed":0,"gate_attempts":5,"gates_passed":1,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			name: "evidence pass, fail, pass",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					evidence(t, "tests", 0, true),
					evidence(t, "tests", 1, false),
					evidence(t, "tests", 0, true),
					evidence(t, "tests", 0, true), // the same result again adds nothing
					evidence(t, "lint", 2, false),
					evidence(t, "undeclared", 0, true),
					evidence(t, "lint", 0, true),
					evidence(t, "lint", 0, true),
				}
			},
			earned: []int64{1, 0, 1, 1, 1, 1, 2, 2},
			want:   `{"checkpoints":0,"diffs_captured":0,"evidence_declared":2,"evidence_passed":2,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
		{
			name: "a session of every kind, repeated work among it",
			rows: func(t testing.TB) []record.Row {
				return []record.Row{
					checkpoint(t, treeA),
					artifactRow(t, "notes", 1),
					diff(t, treeA, treeB, patch1, 1),
					checkpoint(t, treeB),
					checkpoint(t, treeB),
					gate(t, "build", "make", 137, false),
					gate(t, "build", "make", 0, true),
					diff(t, treeA, treeB, patch1, 1),
					evidence(t, "tests", 0, true),
					artifactRow(t, "notes", 2),
					gate(t, "adhoc", "true", 0, true),
					evidence(t, "tests", 0, true),
					checkpoint(t, treeA),
				}
			},
			earned: []int64{1, 1, 2, 3, 3, 3, 4, 4, 5, 5, 5, 5, 5},
			want:   `{"checkpoints":2,"diffs_captured":1,"evidence_declared":2,"evidence_passed":1,"gate_attempts":3,"gates_passed":1,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`,
		},
	}
	led := working(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows := c.rows(t)
			if len(c.earned) != len(rows) {
				t.Fatalf("script has %d rows, %d expected earned steps", len(rows), len(c.earned))
			}
			for n := 1; n <= len(rows); n++ {
				v := fold(t, rows[:n], led)
				if v.EarnedSteps() != c.earned[n-1] {
					t.Errorf("after row %d (%s %s): earned %d, want %d (%s)", n-1, rows[n-1].Kind, rows[n-1].Data, v.EarnedSteps(), c.earned[n-1], v.Bytes())
				}
			}
			if got := string(fold(t, rows, led).Bytes()); got != c.want {
				t.Errorf("canonical bytes\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestNoLedgerNothingDeclared: without a ledger no gate and no producer is
// declared, so passes earn nothing; checkpoints and diffs still count.
func TestNoLedgerNothingDeclared(t *testing.T) {
	v := fold(t, []record.Row{gate(t, "build", "make", 0, true), evidence(t, "tests", 0, true), checkpoint(t, treeA), diff(t, treeA, treeB, patch1, 1)}, nil)
	const want = `{"checkpoints":1,"diffs_captured":1,"evidence_declared":0,"evidence_passed":0,"gate_attempts":1,"gates_passed":0,"ledger_attempts":0,"ledger_phase":"","schema_version":3,"task_id":"T-1","terminal":false}`
	if got := string(v.Bytes()); got != want || v.EarnedSteps() != 2 {
		t.Fatalf("got %s (earned %d)\nwant %s (earned 2)", got, v.EarnedSteps(), want)
	}
}

// TestGateDeclaredTwiceCountsOnce: a gate name declared twice is one gate.
func TestGateDeclaredTwiceCountsOnce(t *testing.T) {
	led := chainRows(t, "T-1", []record.Row{row(t, record.KindTaskCreated, ledger.Created{Title: "dup",
		Gates: []ledger.Gate{{Name: "build", Command: "make"}, {Name: "build", Command: "make"}, {Name: "build", Command: "make all"}}})})
	v := fold(t, []record.Row{gate(t, "build", "make", 0, true), gate(t, "build", "make all", 0, true)}, led)
	const want = `{"checkpoints":0,"diffs_captured":0,"evidence_declared":0,"evidence_passed":0,"gate_attempts":2,"gates_passed":1,"ledger_attempts":0,"ledger_phase":"created","schema_version":3,"task_id":"T-1","terminal":false}`
	if got := string(v.Bytes()); got != want || v.EarnedSteps() != 1 {
		t.Fatalf("got %s (earned %d)\nwant %s (earned 1)", got, v.EarnedSteps(), want)
	}
}

// pool is the work the property tests draw from: repeated commits and
// patches, declared, ad-hoc and forged gate attempts, evidence of declared
// and undeclared producers, artifacts and rows of unknown kinds.
func pool(t testing.TB) []record.Row {
	return []record.Row{
		checkpoint(t, treeA), checkpoint(t, treeB), checkpoint(t, treeC), checkpoint(t, strings.ToUpper(treeD)), checkpoint(t, ""),
		cp(t, treeA, treeA), cp(t, treeB, treeA), cp(t, treeA, treeB), cp(t, emptyTree, emptyTree), legacyCheckpoint(t, commitOf(treeC)),
		diff(t, treeA, treeB, patch1, 1), diff(t, treeB, treeC, patch2, 1), diff(t, treeC, treeD, patch3, 1),
		diff(t, treeA, treeA, "", 0), diff(t, treeD, treeC, patch1, 1), diff(t, treeB, treeA, patch1r, 1),
		legacyDiff(t, commitOf(treeA), commitOf(treeD), patch2),
		gate(t, "build", "make", 0, true), gate(t, "build", "make", 2, false), gate(t, "build", "make", 137, true),
		gate(t, "vet", "go vet ./...", 0, true), gate(t, "smoke", "true", 0, true), gate(t, "build", "true", 0, true),
		evidence(t, "tests", 0, true), evidence(t, "tests", 1, false), evidence(t, "lint", 0, true), evidence(t, "lint", 137, true),
		evidence(t, "undeclared", 0, true),
		artifactRow(t, "k", 1), row(t, "future_kind", map[string]any{"percent": 99}),
	}
}

func randomJournal(t testing.TB, rng *rand.Rand, maxLen int) []record.Row {
	p := pool(t)
	rows := make([]record.Row, rng.Intn(maxLen+1))
	for i := range rows {
		rows[i] = p[rng.Intn(len(p))]
	}
	return rows
}

func isWork(kind string) bool {
	switch kind {
	case record.KindCheckpoint, record.KindDiffCaptured, record.KindGateAttempt, record.KindEvidenceResult:
		return true
	}
	return false
}

func producerOf(t testing.TB, r record.Row) string {
	var e record.EvidenceResult
	if err := json.Unmarshal(r.Data, &e); err != nil {
		t.Fatal(err)
	}
	return e.Producer
}

func insertAt(rows []record.Row, at int, r record.Row) []record.Row {
	out := append([]record.Row{}, rows[:at]...)
	out = append(out, r)
	return append(out, rows[at:]...)
}

func deleteAt(rows []record.Row, at int) []record.Row {
	return append(append([]record.Row{}, rows[:at]...), rows[at+1:]...)
}

// TestRepeatingWorkNeverEarns: a copy of any work row inserted anywhere
// after it raises no field but gate_attempts (an attempt is an attempt) and
// never earned_steps. An evidence result is the one row whose position
// matters (a producer counts by its latest result): its copy gives exactly
// what moving the row there gives, and nothing at all when no other result
// of that producer lies between.
func TestRepeatingWorkNeverEarns(t *testing.T) {
	rng := rand.New(rand.NewSource(seed(t)))
	led := working(t)
	tried := map[string]int{}
	for trial := 0; trial < 3000; trial++ {
		rows := randomJournal(t, rng, 30)
		var work []int
		for i, r := range rows {
			if isWork(r.Kind) {
				work = append(work, i)
			}
		}
		if len(work) == 0 {
			continue
		}
		i := work[rng.Intn(len(work))]
		at := i + 1 + rng.Intn(len(rows)-i) // in [i+1, len]
		with := insertAt(rows, at, rows[i])
		before, after := fold(t, rows, led), fold(t, with, led)
		kind := rows[i].Kind
		tried[kind]++
		if kind == record.KindEvidenceResult {
			if moved := fold(t, deleteAt(with, i), led); after != moved {
				t.Fatalf("trial %d: a copy of evidence row %d at %d gives %s, moving it there %s", trial, i, at, after.Bytes(), moved.Bytes())
			}
			between := false
			for _, r := range rows[i+1 : at] {
				between = between || r.Kind == record.KindEvidenceResult && producerOf(t, r) == producerOf(t, rows[i])
			}
			if !between && after != before {
				t.Fatalf("trial %d: a copy of evidence row %d at %d moved the vector\n%s\n%s", trial, i, at, before.Bytes(), after.Bytes())
			}
			continue
		}
		want := before
		if kind == record.KindGateAttempt {
			want.GateAttempts++
		}
		if after != want || after.EarnedSteps() != before.EarnedSteps() {
			t.Fatalf("trial %d: a copy of %s row %d (%s) at %d\n got %s (earned %d)\nwant %s (earned %d)", trial, kind, i, rows[i].Data, at,
				after.Bytes(), after.EarnedSteps(), want.Bytes(), before.EarnedSteps())
		}
	}
	// Many copies at once: non-evidence rows anywhere later, evidence
	// results right after their original.
	for trial := 0; trial < 1000; trial++ {
		rows := randomJournal(t, rng, 30)
		before := fold(t, rows, led)
		with := append([]record.Row{}, rows...)
		attempts := int64(0)
		for n := rng.Intn(20); n > 0; n-- {
			i := rng.Intn(len(with) + 1)
			if i == len(with) || !isWork(with[i].Kind) {
				continue
			}
			at := i + 1
			if with[i].Kind != record.KindEvidenceResult {
				at += rng.Intn(len(with) - i)
			}
			if with[i].Kind == record.KindGateAttempt {
				attempts++
			}
			with = insertAt(with, at, with[i])
		}
		after := fold(t, with, led)
		want := before
		want.GateAttempts += attempts
		if after != want || after.EarnedSteps() != before.EarnedSteps() {
			t.Fatalf("trial %d: %d copies\n got %s\nwant %s", trial, len(with)-len(rows), after.Bytes(), want.Bytes())
		}
	}
	for _, k := range []string{record.KindCheckpoint, record.KindDiffCaptured, record.KindGateAttempt, record.KindEvidenceResult} {
		if tried[k] < 100 {
			t.Fatalf("only %d copies of %s rows tried", tried[k], k)
		}
	}
}

// TestCommutingRowsCommute: checkpoints, diffs and gate attempts commute
// with everything, and results of different producers with each other; any
// reordering that keeps each producer's results in order keeps the vector.
func TestCommutingRowsCommute(t *testing.T) {
	rng := rand.New(rand.NewSource(seed(t)))
	led := working(t)
	for trial := 0; trial < 1000; trial++ {
		rows := randomJournal(t, rng, 40)
		perm := append([]record.Row{}, rows...)
		rng.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		// Put each producer's results back in their order, in the slots
		// the shuffle gave that producer.
		inOrder := map[string][]record.Row{}
		for _, r := range rows {
			if r.Kind == record.KindEvidenceResult {
				p := producerOf(t, r)
				inOrder[p] = append(inOrder[p], r)
			}
		}
		for i, r := range perm {
			if r.Kind == record.KindEvidenceResult {
				p := producerOf(t, r)
				perm[i], inOrder[p] = inOrder[p][0], inOrder[p][1:]
			}
		}
		a, b := fold(t, rows, led), fold(t, perm, led)
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("trial %d: a reordering moved the vector\n%s\n%s", trial, a.Bytes(), b.Bytes())
		}
	}
	// By hand: distinct checkpoints and distinct diffs in either order.
	fwd := []record.Row{checkpoint(t, treeA), diff(t, treeA, treeB, patch1, 1), checkpoint(t, treeB), diff(t, treeB, treeC, patch2, 1)}
	rev := []record.Row{diff(t, treeB, treeC, patch2, 1), checkpoint(t, treeB), diff(t, treeA, treeB, patch1, 1), checkpoint(t, treeA)}
	const want = `{"checkpoints":2,"diffs_captured":2,"evidence_declared":2,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`
	if a, b := string(fold(t, fwd, led).Bytes()), string(fold(t, rev, led).Bytes()); a != want || b != want {
		t.Fatalf("distinct checkpoints and diffs\n fwd %s\n rev %s\nwant %s", a, b, want)
	}
}

// TestArtifactsNeverMoveIt: any interleaving of artifact posts (and of rows of
// unknown kinds, and extra wall-clock fields) leaves the bytes unchanged.
func TestArtifactsNeverMoveIt(t *testing.T) {
	led := working(t)
	base, err := FoldProgress("T-1", chainRows(t, "T-1", workRows(t)), led)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed(t)))
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
	withClock := row(t, record.KindGateAttempt, map[string]any{"gate": "build", "command": "make", "passed": true, "finished_at": "2026-11-30T10:00:00Z", "duration_ms": 1234})
	plain := row(t, record.KindGateAttempt, map[string]any{"gate": "build", "command": "make", "passed": true})
	a, _ := FoldProgress("T-1", chainRows(t, "T-1", []record.Row{withClock}), led)
	b, _ := FoldProgress("T-1", chainRows(t, "T-1", []record.Row{plain}), led)
	if !bytes.Equal(a.Bytes(), b.Bytes()) || a.GatesPassed != 1 {
		t.Fatalf("a wall-clock field moved the vector: %s vs %s", a.Bytes(), b.Bytes())
	}
}

// TestFiftyReportsMoveNothing: fifty reports after the work, and every
// prefix of them, leave the bytes and the earned steps where they were.
func TestFiftyReportsMoveNothing(t *testing.T) {
	led := working(t)
	rows := workRows(t)
	const want = `{"checkpoints":2,"diffs_captured":1,"evidence_declared":2,"evidence_passed":1,"gate_attempts":2,"gates_passed":1,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`
	for i := 0; i <= 50; i++ {
		if i > 0 {
			rows = append(rows, artifactRow(t, fmt.Sprintf("report-%d", i%5), int64((i-1)/5+1)))
		}
		v := fold(t, rows, led)
		if string(v.Bytes()) != want || v.EarnedSteps() != 5 {
			t.Fatalf("after %d reports: %s (earned %d)", i, v.Bytes(), v.EarnedSteps())
		}
	}
}

// TestCheckpointsAdvanceStrictly: each checkpoint of a new commit moves the
// vector forward; checkpointing one already seen does not.
func TestCheckpointsAdvanceStrictly(t *testing.T) {
	led := working(t)
	var rows []record.Row
	prev, _ := FoldProgress("T-1", nil, led)
	seen := map[string]bool{prev.Hash(): true}
	for n := 1; n <= 50; n++ {
		rows = append(rows, checkpoint(t, fmt.Sprintf("%040d", n)))
		v, err := FoldProgress("T-1", chainRows(t, "T-1", rows), led)
		if err != nil {
			t.Fatal(err)
		}
		if v.Checkpoints != int64(n) || v.EarnedSteps() != int64(n) {
			t.Fatalf("after %d checkpoints: %+v (before %+v)", n, v, prev)
		}
		if seen[v.Hash()] {
			t.Fatalf("checkpoint %d repeated an earlier vector hash", n)
		}
		seen[v.Hash()] = true
		// The commit of an earlier checkpoint again: nothing moves.
		again, _ := FoldProgress("T-1", chainRows(t, "T-1", append(rows, checkpoint(t, fmt.Sprintf("%040d", 1+n/2)))), led)
		if again != v {
			t.Fatalf("a repeated checkpoint after %d moved the vector: %+v", n, again)
		}
		prev = v
	}
}

// TestFoldDeterministic: random row sequences fold to the same bytes every
// time, and folding incrementally (split anywhere, cloned, or through the
// JSON form a cache stores) equals folding at once.
func TestFoldDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(seed(t)))
	led := ledgerRows(t, record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted, record.KindTaskSuspended)
	var l ledger.State
	for _, r := range led {
		if err := l.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	for trial := 0; trial < 300; trial++ {
		rows := chainRows(t, "T-1", randomJournal(t, rng, 80))
		a, err := FoldProgress("T-1", rows, led)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := FoldProgress("T-1", rows, led)
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("two folds of the same rows differ")
		}
		split := rng.Intn(len(rows) + 1)
		var j Journal
		for _, r := range rows[:split] {
			if err := j.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
		cached := j.Clone()
		b1, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		var fromDisk Journal
		if err := json.Unmarshal(b1, &fromDisk); err != nil {
			t.Fatalf("the journal's JSON does not read back: %v\n%s", err, b1)
		}
		for _, r := range rows[split:] {
			cached.Apply(r)
			fromDisk.Apply(r)
		}
		if inc := Project("T-1", cached, &l); !bytes.Equal(inc.Bytes(), a.Bytes()) {
			t.Fatalf("incremental fold differs from a fold at once")
		}
		if inc := Project("T-1", fromDisk, &l); !bytes.Equal(inc.Bytes(), a.Bytes()) {
			t.Fatalf("a fold extended from its JSON differs from a fold at once:\n%s\n%s", inc.Bytes(), a.Bytes())
		}
		// Folding the rest into the clone left the original as it was.
		if b2, _ := json.Marshal(j); !bytes.Equal(b1, b2) {
			t.Fatalf("folding into a clone changed the original:\n%s\n%s", b1, b2)
		}
		if a.EvidencePassed > a.EvidenceDeclared || a.GatesPassed > 2 {
			t.Fatalf("an undeclared producer or gate counted: %+v", a)
		}
	}
}

// TestCloneIsDeep: every set of a clone is its own, down to the commands of
// a gate.
func TestCloneIsDeep(t *testing.T) {
	var j Journal
	for _, r := range []record.Row{checkpoint(t, treeA), diff(t, treeA, treeB, patch1, 1), gate(t, "build", "true", 0, true), evidence(t, "tests", 0, true)} {
		if err := j.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	orig, _ := json.Marshal(j)
	c := j.Clone()
	for _, r := range []record.Row{checkpoint(t, treeB), diff(t, treeB, treeC, patch2, 1), gate(t, "build", "make", 0, true),
		gate(t, "vet", "go vet ./...", 0, true), evidence(t, "tests", 1, false), evidence(t, "lint", 0, true)} {
		if err := c.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := json.Marshal(j); !bytes.Equal(got, orig) {
		t.Fatalf("the original changed with its clone:\n%s\n%s", orig, got)
	}
	led := working(t)
	var l ledger.State
	for _, r := range led {
		l.Apply(r)
	}
	// The original: one checkpoint, one diff, build passed only with an
	// undeclared command, tests passed.
	const want = `{"checkpoints":1,"diffs_captured":1,"evidence_declared":2,"evidence_passed":1,"gate_attempts":1,"gates_passed":0,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`
	if got := string(Project("T-1", j, &l).Bytes()); got != want {
		t.Fatalf("original after the clone moved on\n got %s\nwant %s", got, want)
	}
}

// TestJournalJSON: the journal's JSON carries its schema; a journal from
// another schema (a version-1 cache counted rows) is refused, so a cache
// holding one is folded again instead of extended.
func TestJournalJSON(t *testing.T) {
	var j Journal
	for _, r := range []record.Row{checkpoint(t, treeA), checkpoint(t, treeA), diff(t, treeA, treeB, patch1, 1),
		gate(t, "build", "make", 0, true), gate(t, "build", "make", 0, true), evidence(t, "tests", 0, true)} {
		if err := j.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema":3,"trees":{"` + treeA + `":true},"joined":{"` + treeB + `":"` + treeA + `"},"diffs":1,"sizes":{"` + treeA + `":1},"gate_attempts":2,"gate_passes":{"build":{"make":true}},"evidence":{"tests":true}}`
	if string(b) != want {
		t.Fatalf("journal JSON\n got %s\nwant %s", b, want)
	}
	var back Journal
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, j) {
		t.Fatalf("read back %+v (%v), want %+v", back, err, j)
	}
	if b, _ := json.Marshal(Journal{}); string(b) != `{"schema":3,"gate_attempts":0}` {
		t.Fatalf("empty journal JSON %s", b)
	}
	for _, stale := range []string{
		`{"Checkpoints":999,"DiffsCaptured":5,"GateAttempts":3,"GatesPassed":3,"Evidence":{"tests":true}}`,
		`{"Checkpoints":999}`,
		`{}`,
		`{"schema":1,"commits":{"` + treeA + `":true}}`,
		`{"schema":2,"commits":{"` + treeA + `":true},"gate_attempts":0}`,
		`{"schema":4}`,
		`{"schema":"3"}`,
		`[]`,
	} {
		var s Journal
		if err := json.Unmarshal([]byte(stale), &s); err == nil {
			t.Errorf("%s read as a schema-2 journal: %+v", stale, s)
		}
		// Inside a cache file the whole file is refused.
		var file struct {
			Head  string
			State struct{ Progress Journal }
		}
		if err := json.Unmarshal([]byte(`{"Head":"x","State":{"Progress":`+stale+`}}`), &file); err == nil {
			t.Errorf("a cache holding %s was read", stale)
		}
	}
}

// TestRepeatsDoNotGrow: folding the same rows a thousand times holds what
// folding them once holds.
func TestRepeatsDoNotGrow(t *testing.T) {
	rows := []record.Row{checkpoint(t, treeA), diff(t, treeA, treeB, patch1, 1), gate(t, "build", "make", 0, true),
		gate(t, "smoke", "true", 0, true), evidence(t, "tests", 0, true)}
	var once, many Journal
	for _, r := range rows {
		once.Apply(r)
	}
	for i := 0; i < 1000; i++ {
		for _, r := range rows {
			many.Apply(r)
		}
	}
	if len(many.Trees) != 1 || many.Diffs != 1 || len(many.GatePasses) != 2 || len(many.GatePasses["build"]) != 1 || len(many.Evidence) != 1 {
		t.Fatalf("a thousand repeats grew the fold: %+v", many)
	}
	if many.GateAttempts != 2000 {
		t.Fatalf("gate attempts %d, want 2000", many.GateAttempts)
	}
	many.GateAttempts = once.GateAttempts
	if !reflect.DeepEqual(many, once) {
		t.Fatalf("a thousand repeats differ from one:\n%+v\n%+v", many, once)
	}
}

// TestMalformedRows: data that does not decode is an error, never a panic,
// and leaves the fold as it was.
func TestMalformedRows(t *testing.T) {
	cases := []struct{ kind, data string }{
		{record.KindCheckpoint, `"x"`},
		{record.KindCheckpoint, `{"tree":5}`},
		{record.KindCheckpoint, `{"tree":"` + treeA + `","parent_tree":["a"]}`},
		{record.KindCheckpoint, ``},
		{record.KindDiffCaptured, `{"base_tree":1,"head_tree":"` + treeB + `"}`},
		{record.KindDiffCaptured, `{"base_tree":"` + treeA + `","head_tree":{}}`},
		{record.KindDiffCaptured, `{"patch":"x"}`},
		{record.KindDiffCaptured, `{"patch":{"size":"1","hash":"sha256:00"}}`},
		{record.KindDiffCaptured, `{"patch":{"size":1,"hash":7}}`},
		{record.KindDiffCaptured, `[1]`},
		{record.KindGateAttempt, `{"gate":"build","passed":"true"}`},
		{record.KindGateAttempt, `{"gate":"build","passed":true,"exit_code":"0"}`},
		{record.KindGateAttempt, `{"gate":"build","passed":true,"exit_code":0.5}`},
		{record.KindGateAttempt, `{"gate":"build","command":{},"passed":true}`},
		{record.KindGateAttempt, `{`},
		{record.KindEvidenceResult, `{"producer":1}`},
		{record.KindEvidenceResult, `{"producer":"tests","passed":true,"exit_code":1e30}`},
		{record.KindEvidenceResult, `null1`},
	}
	for _, c := range cases {
		var j Journal
		for _, r := range workRows(t) {
			j.Apply(r)
		}
		before, _ := json.Marshal(j)
		r := row(t, c.kind, map[string]any{})
		r.Data = json.RawMessage(c.data)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s %s: panic %v", c.kind, c.data, p)
				}
			}()
			if err := j.Apply(r); err == nil {
				t.Errorf("%s %s: no error", c.kind, c.data)
			}
		}()
		if after, _ := json.Marshal(j); !bytes.Equal(before, after) {
			t.Errorf("%s %s: a refused row changed the fold\n%s\n%s", c.kind, c.data, before, after)
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

// TestDocWorkedExample is the worked example of docs/cli.md, row by row.
func TestDocWorkedExample(t *testing.T) {
	led := chainRows(t, "T-1", []record.Row{
		row(t, record.KindTaskCreated, ledger.Created{Title: "example",
			Evidence: []ledger.Producer{{Name: "tests", Kind: "command", Command: "go test ./...", Required: true}},
			Gates:    []ledger.Gate{{Name: "build", Command: "make"}, {Name: "vet", Command: "go vet ./..."}}}),
		row(t, record.KindTaskClaimed, ledger.Claimed{Agent: "agent-1", ClaimID: "claim-0001", TokenSHA256: record.Sum([]byte("token"))}),
		row(t, record.KindTaskStarted, ledger.Transition{}),
	})
	// c1 has tree t1 (its parent t0), c2 tree t2 (its parent c1).
	t0, t1, t2 := treeP, treeA, treeB
	steps := []struct {
		r      record.Row
		earned int64
	}{
		{cp(t, t1, t0), 1},
		{cp(t, t1, t0), 1}, {cp(t, t1, t0), 1}, {cp(t, t1, t0), 1}, {cp(t, t1, t0), 1},
		{cp(t, t1, t1), 1}, // an empty commit on c1
		// the journal's checkpoint is refused: no row
		{diff(t, t1, t1, "", 0), 1},
		{cp(t, t2, t1), 2},
		{diff(t, t1, t2, patch1, 1), 3},
		{diff(t, t2, t1, patch1r, 1), 3},
		{cp(t, t1, t2), 3}, // the revert of c2
		{gate(t, "build", "make", 2, false), 3},
		{gate(t, "build", "make", 137, false), 3},
		{gate(t, "build", "make", 0, true), 4},
		{gate(t, "build", "make", 0, true), 4},
		{gate(t, "smoke", "true", 0, true), 4},
		{gate(t, "vet", "true", 0, true), 4},
		{evidence(t, "tests", 0, true), 5},
		{evidence(t, "tests", 0, true), 5},
		{evidence(t, "tests", 1, false), 4},
		{gate(t, "vet", "go vet ./...", 0, true), 5},
	}
	var rows []record.Row
	for i, s := range steps {
		rows = append(rows, s.r)
		if v := fold(t, rows, led); v.EarnedSteps() != s.earned {
			t.Errorf("step %d: earned %d, want %d (%s)", i, v.EarnedSteps(), s.earned, v.Bytes())
		}
	}
	const want = `{"checkpoints":2,"diffs_captured":1,"evidence_declared":1,"evidence_passed":0,"gate_attempts":7,"gates_passed":2,"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"T-1","terminal":false}`
	if got := string(fold(t, rows, led).Bytes()); got != want {
		t.Fatalf("canonical bytes\n got %s\nwant %s", got, want)
	}
}

// TestWhyNot: the reason a row earns nothing, as the library reports it
// with the row (WorkResult.Note), is the fold's own decision.
func TestWhyNot(t *testing.T) {
	var j Journal
	for _, r := range []record.Row{cp(t, treeA, treeP), diff(t, treeA, treeB, patch1, 1)} {
		if err := j.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		tree, parent, want string
	}{
		{treeB, treeA, ""},
		{treeA, treeP, TreeCounted},
		{strings.ToUpper(treeA), treeB, TreeCounted},
		{treeB, treeB, TreeUnchanged},
		{treeB, "", NoTrees},
		{"", treeA, NoTrees},
	} {
		key, why := j.Checkpoint(c.tree, c.parent)
		if why != c.want || (why == "") != (key != "") {
			t.Errorf("checkpoint of %s (parent %s): %q %q, want %q", c.tree, c.parent, key, why, c.want)
		}
	}
	for _, c := range []struct {
		base, head string
		size       int64
		want       string
	}{
		{treeB, treeC, 5, ""},
		{treeA, treeB, 5, ChangeCaptured},
		{treeB, treeP, 5, ""},
		{treeB, treeA, 5, ChangeCaptured},
		{treeC, treeC, 5, SameTrees},
		{treeC, treeD, 0, EmptyPatch},
		{treeC, "", 5, NoTrees},
	} {
		key, why := j.Diff(c.base, c.head, c.size, record.Sum([]byte("p")))
		if why != c.want || (why == "") != (key != "") {
			t.Errorf("diff %s..%s: %q %q, want %q", c.base, c.head, key, why, c.want)
		}
	}
}

// TestDiffsEarnAtMostTheChanges: a diff earns only when it joins two trees
// no captured changes connect yet, so n distinct trees earn at most n-1
// diffs, and the count is the same in every order of the rows (it is the
// number of trees less the number of groups the diffs connect them into,
// counted here apart from the fold).
func TestDiffsEarnAtMostTheChanges(t *testing.T) {
	trees := []string{treeA, treeB, treeC, treeD, treeP}
	var pairs [][2]string
	for i := range trees {
		for k := i + 1; k < len(trees); k++ {
			pairs = append(pairs, [2]string{trees[i], trees[k]})
		}
	}
	// groups counts the connected groups among the trees the pairs name.
	groups := func(ps [][2]string) (named, n int) {
		group := map[string]int{}
		next := 0
		for _, p := range ps {
			ga, oka := group[p[0]]
			gb, okb := group[p[1]]
			switch {
			case !oka && !okb:
				group[p[0]], group[p[1]] = next, next
				next++
			case !oka:
				group[p[0]] = gb
			case !okb:
				group[p[1]] = ga
			case ga != gb:
				for k, g := range group {
					if g == gb {
						group[k] = ga
					}
				}
			}
		}
		seen := map[int]bool{}
		for _, g := range group {
			seen[g] = true
		}
		return len(group), len(seen)
	}
	rng := rand.New(rand.NewSource(17))
	for round := 0; round < 300; round++ {
		k := 1 + rng.Intn(len(pairs))
		ps := make([][2]string, 0, k)
		for _, i := range rng.Perm(len(pairs))[:k] {
			p := pairs[i]
			if rng.Intn(2) == 0 {
				p[0], p[1] = p[1], p[0]
			}
			ps = append(ps, p)
		}
		named, n := groups(ps)
		want := int64(named - n)
		for perm := 0; perm < 3; perm++ {
			var j Journal
			for _, i := range rng.Perm(len(ps)) {
				if err := j.Apply(diff(t, ps[i][0], ps[i][1], patch1, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if got := Project("T-1", j, nil).DiffsCaptured; got != want {
				t.Fatalf("round %d: %d diffs over %d trees in %d groups earned %d, want %d", round, len(ps), named, n, got, want)
			}
		}
	}
	// Two separate changes, then one that connects them: each earns.
	var j Journal
	for _, r := range []record.Row{diff(t, treeA, treeB, patch1, 1), diff(t, treeC, treeD, patch1, 1), diff(t, treeB, treeC, patch1, 1)} {
		if err := j.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if j.Diffs != 3 {
		t.Fatalf("A..B, C..D, B..C earned %d, want 3", j.Diffs)
	}
}
