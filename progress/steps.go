package progress

import (
	"encoding/json"
	"fmt"

	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// Steps is the fold told row by row: what each journal row earned, read
// from the vector before and after it (the fold's own output, so a change
// of the rules shows here as it counts), and when a row of work earned
// nothing, why, in the words of the rule that says so. The task page's
// timeline draws it (docs/http.md, "The timeline").

// Step is one journal row as the fold counted it.
type Step struct {
	Index int64  `json:"journal_index"`
	Kind  string `json:"kind"`
	// Earned is earned_steps after the row less before it (a failed
	// evidence result can take a step back); After is earned_steps after it.
	Earned int64 `json:"earned"`
	After  int64 `json:"earned_after"`
	// Moved names each field of the vector the row moved, with its change
	// ("checkpoints +1", "gate_attempts +1", "evidence_passed -1").
	Moved []string `json:"moved"`
	// Why says why a row of work earned nothing (or took back), "" when it
	// earned or moves nothing by its kind (an artifact).
	Why string `json:"why"`
}

// Work reports whether the row's kind is one the fold reads.
func (s Step) Work() bool {
	switch s.Kind {
	case record.KindCheckpoint, record.KindDiffCaptured, record.KindGateAttempt, record.KindEvidenceResult:
		return true
	}
	return false
}

// Steps folds rows (the journal's counted rows, in order) one at a time
// against the task's ledger state l (its declared gates and evidence; nil
// when it has none), and returns one Step a row. The last step's After is
// the earned_steps FoldProgress gives for the same rows.
func Steps(task string, rows []record.Row, l *ledger.State) ([]Step, error) {
	var j Journal
	before := Project(task, j, l)
	out := make([]Step, 0, len(rows))
	for _, r := range rows {
		why := whyNothing(&j, r, l)
		if err := j.Apply(r); err != nil {
			return nil, err
		}
		after := Project(task, j, l)
		st := Step{Index: r.Index, Kind: r.Kind, Earned: after.EarnedSteps() - before.EarnedSteps(), After: after.EarnedSteps(), Moved: []string{}}
		for _, f := range []struct {
			name string
			a, b int64
		}{
			{"checkpoints", before.Checkpoints, after.Checkpoints},
			{"diffs_captured", before.DiffsCaptured, after.DiffsCaptured},
			{"gates_passed", before.GatesPassed, after.GatesPassed},
			{"gate_attempts", before.GateAttempts, after.GateAttempts},
			{"evidence_passed", before.EvidencePassed, after.EvidencePassed},
		} {
			if d := f.b - f.a; d != 0 {
				st.Moved = append(st.Moved, fmt.Sprintf("%s %+d", f.name, d))
			}
		}
		if st.Work() && st.Earned <= 0 {
			st.Why = why
		}
		out = append(out, st)
		before = after
	}
	return out, nil
}

// whyNothing says, before r is folded into j, why r would earn nothing:
// the rule of Apply and Project that leaves earned_steps where it is (for
// checkpoints and diffs, the fold's own reasons: Journal.Checkpoint and
// Journal.Diff). Steps uses it only for a row of work that did not earn.
func whyNothing(j *Journal, r record.Row, l *ledger.State) string {
	switch r.Kind {
	case record.KindCheckpoint:
		// The fold's own rule and words (Journal.Checkpoint).
		var c checkpointData
		if json.Unmarshal(r.Data, &c) != nil {
			return "its data does not decode"
		}
		_, why := j.Checkpoint(c.Tree, c.ParentTree)
		return why
	case record.KindDiffCaptured:
		var d diffData
		if json.Unmarshal(r.Data, &d) != nil {
			return "its data does not decode"
		}
		_, why := j.Diff(d.BaseTree, d.HeadTree, d.Patch.Size, d.Patch.Hash)
		return why
	case record.KindGateAttempt:
		var g struct {
			Gate     string `json:"gate"`
			Command  string `json:"command"`
			ExitCode int64  `json:"exit_code"`
			Passed   bool   `json:"passed"`
		}
		json.Unmarshal(r.Data, &g)
		if !passed(g.Passed, g.ExitCode) {
			return fmt.Sprintf("gate %s failed (exit %d): attempts are shown, never earned", g.Gate, g.ExitCode)
		}
		declared, same := false, false
		if l != nil {
			for _, d := range l.Gates {
				if d.Name == g.Gate {
					declared = true
					same = same || d.Command == g.Command
				}
			}
		}
		switch {
		case !declared:
			return fmt.Sprintf("gate %s is not declared: an ad-hoc gate earns nothing", g.Gate)
		case !same:
			return fmt.Sprintf("not gate %s's declared command: the declared command is what the gate proves", g.Gate)
		}
		return fmt.Sprintf("gate %s passed before: a gate earns on its first pass", g.Gate)
	case record.KindEvidenceResult:
		var e struct {
			Producer string `json:"producer"`
			ExitCode int64  `json:"exit_code"`
			Passed   bool   `json:"passed"`
		}
		json.Unmarshal(r.Data, &e)
		declared := false
		if l != nil {
			for _, p := range l.Evidence {
				declared = declared || p.Name == e.Producer
			}
		}
		switch {
		case !declared:
			return fmt.Sprintf("producer %s is not declared: its results are ignored", e.Producer)
		case !passed(e.Passed, e.ExitCode) && j.Evidence[e.Producer]:
			return fmt.Sprintf("evidence %s failed (exit %d): its step is taken back until it passes again", e.Producer, e.ExitCode)
		case !passed(e.Passed, e.ExitCode):
			return fmt.Sprintf("evidence %s failed (exit %d)", e.Producer, e.ExitCode)
		}
		return fmt.Sprintf("evidence %s passed before: a producer counts once while its latest result passes", e.Producer)
	}
	return ""
}
