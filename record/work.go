package record

import "strconv"

// The data of the journal rows that real work produces, run on the
// orchestrator side. None carries a timestamp or a duration: rows are hashed.

// Checkpoint is the data of a checkpoint row: a real commit of the
// project's history, with what the progress fold needs to tell new work
// from old without the commit at hand: its tree and its first parent's
// tree (the empty tree's id for a root commit). Rows written before
// progress schema 3 carry no trees (the fields are omitted when empty).
type Checkpoint struct {
	Commit     string `json:"commit"`
	Tree       string `json:"tree,omitempty"`
	ParentTree string `json:"parent_tree,omitempty"`
}

// DiffCaptured is the data of a diff_captured row: a patch between two real
// commits, stored as a blob in the journal tree, with the trees it compares
// (the change the fold counts). Rows written before progress schema 3 carry
// no trees.
type DiffCaptured struct {
	Base     string `json:"base"`
	Head     string `json:"head"`
	BaseTree string `json:"base_tree,omitempty"`
	HeadTree string `json:"head_tree,omitempty"`
	Patch    Output `json:"patch"`
	Files    int64  `json:"files"`
	Added    int64  `json:"added"`
	Removed  int64  `json:"removed"`
}

// GateAttempt is the data of a gate_attempt row.
type GateAttempt struct {
	Gate     string `json:"gate"`
	Command  string `json:"command"`
	ExitCode int64  `json:"exit_code"`
	Passed   bool   `json:"passed"`
	Output   Output `json:"output"`
}

// EvidenceResult is the data of an evidence_result row.
type EvidenceResult struct {
	Producer string `json:"producer"`
	Kind     string `json:"kind"`
	Command  string `json:"command"`
	Required bool   `json:"required"`
	ExitCode int64  `json:"exit_code"`
	Passed   bool   `json:"passed"`
	Output   Output `json:"output"`
}

// Output describes a captured output (command output or patch) stored as a
// blob at Path in the journal tree. Size is the stored size; Truncated says
// the original was longer than the cap.
type Output struct {
	Path      string `json:"path"`
	Blob      string `json:"blob"`
	Hash      Hash   `json:"hash"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
}

// ArtifactPath is where version n of key sits in the tree of the journal
// commit that posts it: `git show <commit>:artifacts/<key>/v<n>.json`.
func ArtifactPath(key string, version int64) string {
	return "artifacts/" + key + "/v" + strconv.FormatInt(version, 10) + ".json"
}

// RowFault is a journal or ledger row that does not count: its commit is
// not proven to be a trusted writer's, or it follows one that is not (a
// chain is proven as a prefix: what follows an unproven row was built on
// it).
type RowFault struct {
	Chain  string `json:"chain"` // "journal" or "ledger"
	Index  int64  `json:"index"`
	Writer string `json:"writer"`
	State  string `json:"state"` // tampered or unverifiable
	Reason string `json:"reason"`
}
