// Package progress owns the progress vector: a pure projection of a task's
// journal and ledger rows (docs/cli.md, Progress vector). There is no input that sets it;
// artifacts, unknown row kinds and wall clock never move it, and repeating
// work never earns again: a checkpoint counts once per commit, a diff once
// per distinct non-empty patch, a declared gate once (its first pass), a
// declared evidence producer once (while its latest result passes).
// FoldProgress is the whole definition; Journal and Ledger are its
// incremental halves, so a cache keyed by the chain heads can fold only the
// rows it has not seen.
package progress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// SchemaVersion is the vector's schema_version. 2: new work only (a
// checkpoint per distinct commit, a diff per distinct non-empty patch, a
// gate per declared gate passed with its declared command, a pass needs exit
// code 0); earned_steps no longer counts gate attempts.
const SchemaVersion = 2

// Journal is the journal half of the fold. Its size grows with distinct
// work (commits, patches, gate commands, producers), never with repeated
// rows. It is serialised as JSON (the root package caches it on disk); the
// JSON carries the schema version it was folded under, and a journal folded
// under another version does not decode, so a stale cache is refolded rather
// than believed.
type Journal struct {
	// Commits holds each distinct commit a checkpoint row named.
	Commits map[string]bool `json:"commits,omitempty"`
	// Patches holds the hash (patch.hash) of each distinct non-empty patch a
	// diff_captured row stored.
	Patches map[record.Hash]bool `json:"patches,omitempty"`
	// GateAttempts counts every gate_attempt row, declared or ad hoc.
	GateAttempts int64 `json:"gate_attempts"`
	// GatePasses holds, per gate name, the commands that passed under it.
	// Whether a gate is declared (and with which command) is the ledger's
	// half: Project counts a declared gate when its declared command passed.
	GatePasses map[string]map[string]bool `json:"gate_passes,omitempty"`
	// Evidence holds, per producer, whether its latest result passed.
	Evidence map[string]bool `json:"evidence,omitempty"`
}

// passed is the one rule for a command's outcome: it passed when the row
// says so and its exit code is 0. A timed-out or killed command (exit 137,
// 128+signal) failed whatever the row claims.
func passed(claimed bool, exitCode int64) bool { return claimed && exitCode == 0 }

// Apply folds one journal row. Kinds that do not move progress (artifacts,
// and kinds unknown to this version) are ignored. Only the fields the vector
// reads are decoded: anything else a row carries (including a wall-clock
// field a later version might add) is ignored. Data that does not decode is
// an error and leaves j unchanged.
func (j *Journal) Apply(r record.Row) error {
	switch r.Kind {
	case record.KindCheckpoint:
		var c struct {
			Commit string `json:"commit"`
		}
		if err := json.Unmarshal(r.Data, &c); err != nil {
			return fmt.Errorf("checkpoint row %d: %w", r.Index, err)
		}
		// Object ids are hex: one commit, one key, however it is spelt.
		commit := strings.ToLower(c.Commit)
		if commit == "" {
			return nil // names no commit: proves nothing
		}
		if j.Commits == nil {
			j.Commits = map[string]bool{}
		}
		j.Commits[commit] = true
	case record.KindDiffCaptured:
		var d struct {
			Patch struct {
				Hash record.Hash `json:"hash"`
				Size int64       `json:"size"`
			} `json:"patch"`
		}
		if err := json.Unmarshal(r.Data, &d); err != nil {
			return fmt.Errorf("diff_captured row %d: %w", r.Index, err)
		}
		// The stored patch is the proof: an empty one (base and head with
		// the same tree) captured nothing, and a patch captured before
		// captures nothing new.
		if d.Patch.Size <= 0 || d.Patch.Hash == "" {
			return nil
		}
		if j.Patches == nil {
			j.Patches = map[record.Hash]bool{}
		}
		j.Patches[d.Patch.Hash] = true
	case record.KindGateAttempt:
		var g struct {
			Gate     string `json:"gate"`
			Command  string `json:"command"`
			ExitCode int64  `json:"exit_code"`
			Passed   bool   `json:"passed"`
		}
		if err := json.Unmarshal(r.Data, &g); err != nil {
			return fmt.Errorf("gate_attempt row %d: %w", r.Index, err)
		}
		j.GateAttempts++
		if passed(g.Passed, g.ExitCode) {
			if j.GatePasses == nil {
				j.GatePasses = map[string]map[string]bool{}
			}
			if j.GatePasses[g.Gate] == nil {
				j.GatePasses[g.Gate] = map[string]bool{}
			}
			j.GatePasses[g.Gate][g.Command] = true
		}
	case record.KindEvidenceResult:
		var e struct {
			Producer string `json:"producer"`
			ExitCode int64  `json:"exit_code"`
			Passed   bool   `json:"passed"`
		}
		if err := json.Unmarshal(r.Data, &e); err != nil {
			return fmt.Errorf("evidence_result row %d: %w", r.Index, err)
		}
		if j.Evidence == nil {
			j.Evidence = map[string]bool{}
		}
		j.Evidence[e.Producer] = passed(e.Passed, e.ExitCode)
	}
	return nil
}

// Clone returns an independent copy.
func (j Journal) Clone() Journal {
	c := Journal{GateAttempts: j.GateAttempts}
	if j.Commits != nil {
		c.Commits = make(map[string]bool, len(j.Commits))
		for k, v := range j.Commits {
			c.Commits[k] = v
		}
	}
	if j.Patches != nil {
		c.Patches = make(map[record.Hash]bool, len(j.Patches))
		for k, v := range j.Patches {
			c.Patches[k] = v
		}
	}
	if j.GatePasses != nil {
		c.GatePasses = make(map[string]map[string]bool, len(j.GatePasses))
		for g, cmds := range j.GatePasses {
			m := make(map[string]bool, len(cmds))
			for k, v := range cmds {
				m[k] = v
			}
			c.GatePasses[g] = m
		}
	}
	if j.Evidence != nil {
		c.Evidence = make(map[string]bool, len(j.Evidence))
		for k, v := range j.Evidence {
			c.Evidence[k] = v
		}
	}
	return c
}

// journalFields is Journal without its JSON methods.
type journalFields Journal

// journalJSON is the serialised form: the fields and the schema they were
// folded under.
type journalJSON struct {
	Schema *int `json:"schema"`
	journalFields
}

// MarshalJSON writes the journal with the schema version it was folded under.
func (j Journal) MarshalJSON() ([]byte, error) {
	v := SchemaVersion
	return json.Marshal(journalJSON{Schema: &v, journalFields: journalFields(j)})
}

// UnmarshalJSON reads a journal folded under this schema version and refuses
// any other (a version-1 journal, which counted rows, has no schema field):
// folding again is the only way to a journal this version can extend.
func (j *Journal) UnmarshalJSON(b []byte) error {
	var d journalJSON
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	if d.Schema == nil || *d.Schema != SchemaVersion {
		got := "none"
		if d.Schema != nil {
			got = fmt.Sprint(*d.Schema)
		}
		return fmt.Errorf("progress journal folded under schema %s, this is schema %d: fold it again", got, SchemaVersion)
	}
	*j = Journal(d.journalFields)
	return nil
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

// Project combines the two halves of the fold into the vector. A gate or a
// producer counts only when declared at task.created: without a ledger,
// nothing is declared.
func Project(task string, j Journal, l *ledger.State) Vector {
	v := Vector{
		SchemaVersion: SchemaVersion, TaskID: task,
		Checkpoints: int64(len(j.Commits)), DiffsCaptured: int64(len(j.Patches)),
		GateAttempts: j.GateAttempts,
	}
	if l != nil {
		v.LedgerPhase = l.Phase
		v.LedgerAttempts = l.Started
		v.Terminal = ledger.Terminal(l.Phase)
		// A declared gate is its name and its command: it has passed when an
		// attempt of that command under that name passed. The same name run
		// with another command (gate run T build -- true) is an ad-hoc gate.
		counted := make(map[string]bool, len(l.Gates))
		for _, g := range l.Gates {
			if !counted[g.Name] && j.GatePasses[g.Name][g.Command] {
				counted[g.Name] = true
				v.GatesPassed++
			}
		}
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

// EarnedSteps is the new work proven: distinct checkpoints + distinct
// non-empty diffs + declared gates passed + declared evidence passed. Gate
// attempts are shown, never earned.
func (v Vector) EarnedSteps() int64 {
	return v.Checkpoints + v.DiffsCaptured + v.GatesPassed + v.EvidencePassed
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
	// Proof says whether the rows the vector counts are proven; it is not
	// part of the canonical vector (a host's trust decides it, not the rows).
	Proof Proof `json:"proof"`
}

// Proof qualifies a vector: it counts only rows whose commits a trusted
// writer signed (a chain is proven as a prefix), and names the rest.
type Proof struct {
	// State is verified (every row counted, each signed by a trusted
	// writer), unverifiable (this reader trusts no key at all, so rows
	// counted as far as their published keys check) or tampered (some rows
	// did not count: see RowsAtFault). A row signed by a writer whose key
	// is published but not pinned does not count for a reader that trusts
	// some key; it is listed with state unverifiable.
	State       string            `json:"state"`
	RowsAtFault []record.RowFault `json:"rows_at_fault"`
}

// ToWire adds the derived fields and the heads.
func (v Vector) ToWire(journalHead record.Hash, journalRows int64, ledgerHead record.Hash, ledgerRows int64) Wire {
	return Wire{Vector: v, EarnedSteps: v.EarnedSteps(), PhaseOrdinal: PhaseOrdinal(v.LedgerPhase), VectorHash: v.Hash(),
		JournalHead: journalHead, JournalRows: journalRows, LedgerHead: ledgerHead, LedgerRows: ledgerRows,
		Proof: Proof{State: "verified", RowsAtFault: []record.RowFault{}}}
}

// String is a one-line summary for humans.
func (v Vector) String() string {
	n := func(n int64, noun string) string {
		if n == 1 {
			return "1 " + noun
		}
		return fmt.Sprintf("%d %ss", n, noun)
	}
	return fmt.Sprintf("%s, %s, %s passed (%s), %d/%d evidence passed, phase %s",
		n(v.Checkpoints, "checkpoint"), n(v.DiffsCaptured, "diff"), n(v.GatesPassed, "gate"), n(v.GateAttempts, "attempt"),
		v.EvidencePassed, v.EvidenceDeclared, v.LedgerPhase)
}
