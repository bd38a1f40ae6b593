package progress

import (
	"strings"
	"testing"

	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// TestSteps: a session of every kind, its earned steps after each row
// written by hand (as TestScripts has them), and for each row of work that
// earns nothing, the rule that says why.
func TestSteps(t *testing.T) {
	rows := chainRows(t, "T-1", []record.Row{
		checkpoint(t, treeA),                    // 0 +1
		artifactRow(t, "notes", 1),              // 1 moves nothing, by its kind
		diff(t, treeA, treeB, patch1, 1),        // 2 +1
		checkpoint(t, treeB),                    // 3 +1
		checkpoint(t, treeB),                    // 4 the same tree
		gate(t, "build", "make", 137, false),    // 5 failed
		gate(t, "build", "make", 0, true),       // 6 +1
		diff(t, treeB, treeA, patch1r, 1),       // 7 the same change, the other way
		evidence(t, "tests", 0, true),           // 8 +1
		gate(t, "adhoc", "true", 0, true),       // 9 not declared
		gate(t, "build", "true", 0, true),       // 10 not the declared command
		gate(t, "build", "make", 0, true),       // 11 passed before
		evidence(t, "tests", 0, true),           // 12 passed before
		evidence(t, "tests", 1, false),          // 13 -1: taken back
		evidence(t, "nobody", 0, true),          // 14 not declared
		diff(t, treeB, treeB, "", 0),            // 15 the same trees
		cp(t, treeC, treeC),                     // 16 a commit that changes nothing
		legacyCheckpoint(t, commitOf(treeD)),    // 17 no trees recorded
		row(t, "future_kind", map[string]int{}), // 18 a kind this version does not read
	})
	var st ledger.State
	for _, r := range working(t) {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	steps, err := Steps("T-1", rows, &st)
	if err != nil {
		t.Fatal(err)
	}
	after := []int64{1, 1, 2, 3, 3, 3, 4, 4, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4}
	// The fold's own words for checkpoints and diffs.
	why := []string{"", "", "", "", TreeCounted, "gate build failed (exit 137)", "", ChangeCaptured, "",
		"gate adhoc is not declared", "not gate build's declared command", "gate build passed before", "evidence tests passed before",
		"its step is taken back", "producer nobody is not declared", SameTrees, TreeUnchanged, NoTrees, ""}
	moved := map[int]string{0: "checkpoints +1", 2: "diffs_captured +1", 5: "gate_attempts +1", 6: "gates_passed +1,gate_attempts +1", 13: "evidence_passed -1"}
	if len(steps) != len(rows) {
		t.Fatalf("%d steps for %d rows", len(steps), len(rows))
	}
	prev := int64(0)
	for i, s := range steps {
		if s.Index != int64(i) || s.Kind != rows[i].Kind {
			t.Errorf("step %d: %+v", i, s)
		}
		if s.After != after[i] || s.Earned != after[i]-prev {
			t.Errorf("step %d (%s): earned %+d to %d, want %+d to %d", i, s.Kind, s.Earned, s.After, after[i]-prev, after[i])
		}
		prev = after[i]
		if (why[i] == "") != (s.Why == "") || !strings.Contains(s.Why, why[i]) {
			t.Errorf("step %d (%s): why %q, want it to say %q", i, s.Kind, s.Why, why[i])
		}
		if m, ok := moved[i]; ok && strings.Join(s.Moved, ",") != m {
			t.Errorf("step %d: moved %v, want %s", i, s.Moved, m)
		}
	}
	// The last step is the fold.
	if v := fold(t, rows, working(t)); steps[len(steps)-1].After != v.EarnedSteps() {
		t.Errorf("the last step says %d, the fold %d", steps[len(steps)-1].After, v.EarnedSteps())
	}
}
