// Package progress owns the progress vector: a pure projection of a task's
// journal and ledger rows (docs/cli.md, Progress vector). There is no input that sets it;
// artifacts, unknown row kinds and wall clock never move it, and only new
// work earns: a checkpoint earns once per new tree (a tree that differs from
// its commit's first parent's and was not counted before), a diff once per
// change (an unordered pair of distinct trees), a declared gate once (its
// first pass), a declared evidence producer once (while its latest result
// passes). The rows carry the trees, so the fold never reads the repository
// and is the same on a host that lacks the commits.
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

// SchemaVersion is the vector's schema_version. 3: a checkpoint earns per
// new tree and a diff per change (pair of trees), read from the trees the
// rows record; rows without them (written under 2) earn nothing. 2: new work
// only (a checkpoint per distinct commit, a diff per distinct non-empty
// patch, a gate per declared gate passed with its declared command, a pass
// needs exit code 0).
const SchemaVersion = 3

// Journal is the journal half of the fold. Its size grows with distinct
// work (trees, changes, gate commands, producers), never with repeated
// rows. It is serialised as JSON (the root package caches it on disk); the
// JSON carries the schema version it was folded under, and a journal folded
// under another version does not decode, so a stale cache is refolded rather
// than believed.
type Journal struct {
	// Trees holds each tree a checkpoint earned for: a tree that differed
	// from its commit's first parent's tree.
	Trees map[string]bool `json:"trees,omitempty"`
	// Joined links the trees the earning diffs connected into a forest
	// (each tree to its parent; a root is absent), and Diffs counts those
	// diffs. A diff earns only when it joins two trees not yet connected:
	// the same change either way round, or one already implied by a chain
	// of captured changes (a..b, b..c, then a..c), earns nothing, so n
	// distinct trees earn at most n-1 diffs, whatever the order of the
	// rows (the rank of a graph does not depend on the order of its edges).
	Joined map[string]string `json:"joined,omitempty"`
	Diffs  int64             `json:"diffs,omitempty"`
	// Sizes holds, less one, the number of trees under each root that has
	// any (the smaller component goes under the larger: paths stay short).
	Sizes map[string]int64 `json:"sizes,omitempty"`
	// GateAttempts counts every gate_attempt row, declared or ad hoc.
	GateAttempts int64 `json:"gate_attempts"`
	// GatePasses holds, per gate name, the commands that passed under it.
	// Whether a gate is declared (and with which command) is the ledger's
	// half: Project counts a declared gate when its declared command passed.
	GatePasses map[string]map[string]bool `json:"gate_passes,omitempty"`
	// Evidence holds, per producer, whether its latest result passed.
	Evidence map[string]bool `json:"evidence,omitempty"`
}

// objectID returns id in lower case when it is a git object id (40 or 64
// hex digits), "" otherwise: one object, one key, however it is spelt.
func objectID(id string) string {
	if len(id) != 40 && len(id) != 64 {
		return ""
	}
	id = strings.ToLower(id)
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	return id
}

// checkpointData is what the fold reads of a checkpoint row.
type checkpointData struct {
	Tree       string `json:"tree"`
	ParentTree string `json:"parent_tree"`
}

// diffData is what the fold reads of a diff_captured row.
type diffData struct {
	BaseTree string `json:"base_tree"`
	HeadTree string `json:"head_tree"`
	Patch    struct {
		Hash record.Hash `json:"hash"`
		Size int64       `json:"size"`
	} `json:"patch"`
}

// The reasons a checkpoint or a diff earns nothing (Checkpoint, Diff).
const (
	NoTrees        = "the row records no trees (written before progress schema 3), so nothing shows the work is new"
	TreeUnchanged  = "its tree is its first parent's: the commit changes nothing"
	TreeCounted    = "its tree was counted by an earlier checkpoint"
	SameTrees      = "base and head have the same tree: there is no change"
	EmptyPatch     = "the stored patch is empty"
	ChangeCaptured = "its two trees are already joined by changes captured before (this change either way round, or a chain of changes that implies it)"
)

// Checkpoint says whether a checkpoint row recording tree, whose first
// parent has parentTree, earns in j, and why not. key is what it would add.
func (j *Journal) Checkpoint(tree, parentTree string) (key, whyNot string) {
	t, p := objectID(tree), objectID(parentTree)
	switch {
	case t == "" || p == "":
		return "", NoTrees
	case t == p:
		return "", TreeUnchanged
	case j.Trees[t]:
		return "", TreeCounted
	}
	return t, ""
}

// Diff says whether a diff_captured row comparing baseTree with headTree,
// whose stored patch has patchSize bytes hashing to patchHash, earns in j,
// and why not. key is what it would add.
func (j *Journal) Diff(baseTree, headTree string, patchSize int64, patchHash record.Hash) (key, whyNot string) {
	a, b := objectID(baseTree), objectID(headTree)
	switch {
	case a == "" || b == "":
		return "", NoTrees
	case a == b:
		return "", SameTrees
	case patchSize <= 0 || patchHash == "":
		// The stored patch is the proof there was something to see.
		return "", EmptyPatch
	}
	if b < a {
		a, b = b, a
	}
	if j.root(a) == j.root(b) {
		return "", ChangeCaptured
	}
	return a + ".." + b, ""
}

// root is the root of tree's component in the forest of joined trees.
func (j *Journal) root(tree string) string {
	for {
		p, ok := j.Joined[tree]
		if !ok {
			return tree
		}
		tree = p
	}
}

// join connects the components of two trees (not yet connected), the
// smaller under the larger so that paths stay logarithmic.
func (j *Journal) join(a, b string) {
	ra, rb := j.root(a), j.root(b)
	if j.Joined == nil {
		j.Joined = map[string]string{}
	}
	if j.Sizes == nil {
		j.Sizes = map[string]int64{}
	}
	sa, sb := j.Sizes[ra]+1, j.Sizes[rb]+1 // sizes are stored less one
	if sa < sb || sa == sb && rb < ra {
		ra, rb = rb, ra
		sa, sb = sb, sa
	}
	j.Joined[rb] = ra
	delete(j.Sizes, rb)
	j.Sizes[ra] = sa + sb - 1
	j.Diffs++
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
		var c checkpointData
		if err := json.Unmarshal(r.Data, &c); err != nil {
			return fmt.Errorf("checkpoint row %d: %w", r.Index, err)
		}
		if key, _ := j.Checkpoint(c.Tree, c.ParentTree); key != "" {
			if j.Trees == nil {
				j.Trees = map[string]bool{}
			}
			j.Trees[key] = true
		}
	case record.KindDiffCaptured:
		var d diffData
		if err := json.Unmarshal(r.Data, &d); err != nil {
			return fmt.Errorf("diff_captured row %d: %w", r.Index, err)
		}
		if key, _ := j.Diff(d.BaseTree, d.HeadTree, d.Patch.Size, d.Patch.Hash); key != "" {
			a, b, _ := strings.Cut(key, "..")
			j.join(a, b)
		}
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
	if j.Trees != nil {
		c.Trees = make(map[string]bool, len(j.Trees))
		for k, v := range j.Trees {
			c.Trees[k] = v
		}
	}
	c.Diffs = j.Diffs
	if j.Joined != nil {
		c.Joined = make(map[string]string, len(j.Joined))
		for k, v := range j.Joined {
			c.Joined[k] = v
		}
	}
	if j.Sizes != nil {
		c.Sizes = make(map[string]int64, len(j.Sizes))
		for k, v := range j.Sizes {
			c.Sizes[k] = v
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
// any other (a version-1 journal, which counted rows, has no schema field; a
// version-2 one counted commits and patches):
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
		Checkpoints: int64(len(j.Trees)), DiffsCaptured: j.Diffs,
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

// EarnedSteps is the new work proven: checkpoints of new trees + captured
// changes + declared gates passed + declared evidence passed. Gate attempts
// are shown, never earned.
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
