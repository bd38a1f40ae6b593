package bernstein

import (
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/verify"
)

// Task handle statuses, as agent protocols name a task's state.
const (
	StatusWorking       = "working"
	StatusInputRequired = "input_required"
	StatusCompleted     = "completed"
	StatusFailed        = "failed"
	StatusCancelled     = "cancelled"
)

// StatusOf maps a ledger phase to a handle status.
func StatusOf(phase string) string {
	switch phase {
	case ledger.PhaseSuspended:
		return StatusInputRequired
	case ledger.PhaseCompleted:
		return StatusCompleted
	case ledger.PhaseFailed:
		return StatusFailed
	case ledger.PhaseAbandoned:
		return StatusCancelled
	}
	return StatusWorking
}

// Handle is the task-handle projection agents read: where the task stands,
// the heads it was read at, and its progress vector. It is derived from the
// chains alone; there is nothing in it a caller can set.
type Handle struct {
	TaskID      string      `json:"taskId"`
	Status      string      `json:"status"`
	JournalHead record.Hash `json:"journalHead"`
	SpineHead   record.Hash `json:"spineHead"`
	// Progress carries its proof: whether every row it counts is proven,
	// and which rows did not count.
	Progress     progress.Wire `json:"progress"`
	ProgressHash string        `json:"progressHash"`
	ReceiptHash  record.Hash   `json:"receiptHash"`
}

// handleBody is what the receipt hash covers: every other field.
type handleBody struct {
	TaskID       string        `json:"taskId"`
	Status       string        `json:"status"`
	JournalHead  record.Hash   `json:"journalHead"`
	SpineHead    record.Hash   `json:"spineHead"`
	Progress     progress.Wire `json:"progress"`
	ProgressHash string        `json:"progressHash"`
}

// TaskHandle projects task's handle. SpineHead is the spine entry of the
// latest artifact the journal holds ("" before the first).
func (s *Store) TaskHandle(task string) (*Handle, error) {
	f, err := s.current(task)
	if err != nil {
		return nil, err
	}
	j, w := f.Journal, f.Wire
	b := handleBody{TaskID: task, Status: StatusOf(f.Ledger.State.Phase), JournalHead: j.Head, SpineHead: j.LastSpine,
		Progress: w, ProgressHash: w.VectorHash}
	receipt, _, err := record.HashOf(b)
	if err != nil {
		return nil, err
	}
	return &Handle{b.TaskID, b.Status, b.JournalHead, b.SpineHead, b.Progress, b.ProgressHash, receipt}, nil
}

// Claimant is the live claim a bearer claim token stands for.
type Claimant struct {
	Task  string
	Agent string
}

// ClaimByToken finds the live claim whose token is token. Over HTTP a claim
// token is the caller's whole identity: one agent on one task. It costs O(1)
// while no ledger moves: the token index (internal/tokenindex) names the task, and
// the proven fold of that task's ledger confirms it.
func (s *Store) ClaimByToken(token string) (*Claimant, error) {
	task, agent, err := s.tokens.Claim(token)
	if err != nil {
		return nil, err
	}
	return &Claimant{Task: task, Agent: agent}, nil
}

// UnprovenClaim finds, in task's ledger, a claim row no trusted writer
// signed (a forgery, or a row of a writer not pinned here) whose token is
// token, and returns the agent it names. Such a claim is no claim
// (ClaimByToken does not know it), but a post made with its token is a
// refusal worth recording: the HTTP API posts it, as the CLI would, so that
// the store refuses it (claim_unproven) and audits it. It reads the whole
// ledger: call it only for a task whose ledger holds rows at fault.
func (s *Store) UnprovenClaim(task, token string) (*Claimant, bool) {
	f, err := s.TaskFeed(task, Heads{})
	if err != nil {
		return nil, false
	}
	h := TokenHash(token)
	for i := len(f.Rows) - 1; i >= 0; i-- {
		r := f.Rows[i]
		if r.Chain != "ledger" || r.Proof == verify.Verified || r.Row.Kind != record.KindTaskClaimed {
			continue
		}
		var c ledger.Claimed
		if r.Row.DecodeData(&c) == nil && c.TokenSHA256 == h && ValidateAgent(c.Agent) == nil {
			return &Claimant{Task: task, Agent: c.Agent}, true
		}
	}
	return nil, false
}
