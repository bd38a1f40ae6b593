// Package progress owns the progress vector: a pure projection of a task's
// journal and ledger rows (DESIGN.md §5). There is no input that sets it;
// artifacts, unknown row kinds and wall clock never move it. FoldProgress is
// the whole definition; Journal and Ledger are its incremental halves, so a
// cache keyed by the chain heads can fold only the rows it has not seen.
package progress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// SchemaVersion is the vector's schema_version.
const SchemaVersion = 1

// Journal is the journal half of the fold.
type Journal struct {
	Checkpoints   int64
	DiffsCaptured int64
	GateAttempts  int64
	GatesPassed   int64
	// Evidence holds, per producer, whether its latest result passed.
	Evidence map[string]bool
}

// Apply folds one journal row. Kinds that do not move progress (artifacts,
// and kinds unknown to this version) are ignored.
func (j *Journal) Apply(r record.Row) error {
	switch r.Kind {
	case record.KindCheckpoint:
		j.Checkpoints++
	case record.KindDiffCaptured:
		j.DiffsCaptured++
	case record.KindGateAttempt:
		// Only the fields the vector reads: anything else a row carries
		// (including a wall-clock field a later version might add) is ignored.
		var g struct {
			Passed bool `json:"passed"`
		}
		if err := json.Unmarshal(r.Data, &g); err != nil {
			return fmt.Errorf("gate_attempt row %d: %w", r.Index, err)
		}
		j.GateAttempts++
		if g.Passed {
			j.GatesPassed++
		}
	case record.KindEvidenceResult:
		var e struct {
			Producer string `json:"producer"`
			Passed   bool   `json:"passed"`
		}
		if err := json.Unmarshal(r.Data, &e); err != nil {
			return fmt.Errorf("evidence_result row %d: %w", r.Index, err)
		}
		if j.Evidence == nil {
			j.Evidence = map[string]bool{}
		}
		j.Evidence[e.Producer] = e.Passed
	}
	return nil
}

// Clone returns an independent copy.
func (j Journal) Clone() Journal {
	c := j
	if j.Evidence != nil {
		c.Evidence = make(map[string]bool, len(j.Evidence))
		for k, v := range j.Evidence {
			c.Evidence[k] = v
		}
	}
	return c
}

// Vector is the canonical progress vector. Its canonical bytes (RFC 8785)
// and their sha256 are the same on every host that folds the same rows.
type Vector struct {
	SchemaVersion    int    `json:"schema_version"`
	TaskID           string `json:"task_id"`
	Checkpoints      int64  `json:"checkpoints"`
	DiffsCaptured    int64  `json:"diffs_captured"`
	GateAttempts     int64  `json:"gate_attempts"`
	GatesPassed      int64  `json:"gates_passed"`
	EvidenceDeclared int64  `json:"evidence_declared"`
	EvidencePassed   int64  `json:"evidence_passed"`
	LedgerPhase      string `json:"ledger_phase"`
	LedgerAttempts   int64  `json:"ledger_attempts"`
	Terminal         bool   `json:"terminal"`
}

// Project combines the two halves of the fold into the vector.
func Project(task string, j Journal, l *ledger.State) Vector {
	v := Vector{
		SchemaVersion: SchemaVersion, TaskID: task,
		Checkpoints: j.Checkpoints, DiffsCaptured: j.DiffsCaptured,
		GateAttempts: j.GateAttempts, GatesPassed: j.GatesPassed,
	}
	if l != nil {
		v.LedgerPhase = l.Phase
		v.LedgerAttempts = l.Started
		v.Terminal = ledger.Terminal(l.Phase)
		names := make([]string, 0, len(l.Evidence))
		for _, p := range l.Evidence {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		v.EvidenceDeclared = int64(len(names))
		for _, n := range names {
			if j.Evidence[n] {
				v.EvidencePassed++
			}
		}
	}
	return v
}

// FoldProgress is the projection: a pure function of the task's journal rows
// and ledger rows, in chain order.
func FoldProgress(task string, journal, ledgerRows []record.Row) (Vector, error) {
	var j Journal
	for _, r := range journal {
		if err := j.Apply(r); err != nil {
			return Vector{}, err
		}
	}
	var l *ledger.State
	if len(ledgerRows) > 0 {
		l = &ledger.State{}
		for _, r := range ledgerRows {
			if err := l.Apply(r); err != nil {
				return Vector{}, err
			}
		}
	}
	return Project(task, j, l), nil
}

// Bytes returns the canonical bytes of the vector.
func (v Vector) Bytes() []byte { return record.MustCanonical(v) }

// Hash returns vector_hash: the sha256 hex of the canonical bytes.
func (v Vector) Hash() string {
	s := sha256.Sum256(v.Bytes())
	return hex.EncodeToString(s[:])
}

// EarnedSteps is checkpoints + diffs captured + gate attempts + evidence passed.
func (v Vector) EarnedSteps() int64 {
	return v.Checkpoints + v.DiffsCaptured + v.GateAttempts + v.EvidencePassed
}

// PhaseOrdinal places a phase on the task's lifecycle: 0 open (created,
// released, reopened), 1 claimed, 2 working (started, resumed), 3 suspended,
// 4 ended (completed, failed, abandoned); -1 before the task exists.
func PhaseOrdinal(phase string) int {
	switch phase {
	case ledger.PhaseCreated, ledger.PhaseReleased, ledger.PhaseReopened:
		return 0
	case ledger.PhaseClaimed:
		return 1
	case ledger.PhaseStarted, ledger.PhaseResumed:
		return 2
	case ledger.PhaseSuspended:
		return 3
	case ledger.PhaseCompleted, ledger.PhaseFailed, ledger.PhaseAbandoned:
		return 4
	}
	return -1
}

// Wire is the vector as surfaces send it: the canonical fields, the derived
// ones, and the chain heads it was folded at.
type Wire struct {
	Vector
	EarnedSteps  int64       `json:"earned_steps"`
	PhaseOrdinal int         `json:"phase_ordinal"`
	VectorHash   string      `json:"vector_hash"`
	JournalHead  record.Hash `json:"journal_head"`
	JournalRows  int64       `json:"journal_rows"`
	LedgerHead   record.Hash `json:"ledger_head"`
	LedgerRows   int64       `json:"ledger_rows"`
}

// ToWire adds the derived fields and the heads.
func (v Vector) ToWire(journalHead record.Hash, journalRows int64, ledgerHead record.Hash, ledgerRows int64) Wire {
	return Wire{Vector: v, EarnedSteps: v.EarnedSteps(), PhaseOrdinal: PhaseOrdinal(v.LedgerPhase), VectorHash: v.Hash(),
		JournalHead: journalHead, JournalRows: journalRows, LedgerHead: ledgerHead, LedgerRows: ledgerRows}
}

// String is a one-line summary for humans.
func (v Vector) String() string {
	return fmt.Sprintf("%d checkpoints, %d diffs, %d/%d gates passed, %d/%d evidence passed, phase %s",
		v.Checkpoints, v.DiffsCaptured, v.GatesPassed, v.GateAttempts, v.EvidencePassed, v.EvidenceDeclared, v.LedgerPhase)
}
