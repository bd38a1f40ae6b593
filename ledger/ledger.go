// Package ledger owns the work ledger of a task: the legal transitions, the
// data each transition row carries, and the pure fold of ledger rows into the
// task's state (phase, live claim, declared evidence producers and gates).
package ledger

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/internal/ident"
	"github.com/bernstein/bernstein/record"
)

// Phases: the phase of a task is the last transition it went through.
const (
	PhaseCreated   = "created"
	PhaseClaimed   = "claimed"
	PhaseReleased  = "released"
	PhaseStarted   = "started"
	PhaseSuspended = "suspended"
	PhaseResumed   = "resumed"
	PhaseCompleted = "completed"
	PhaseFailed    = "failed"
	PhaseAbandoned = "abandoned"
	PhaseReopened  = "reopened"
)

// Phases in their display order; PhaseOrdinal indexes this list.
var Phases = []string{PhaseCreated, PhaseClaimed, PhaseReleased, PhaseStarted, PhaseSuspended, PhaseResumed, PhaseCompleted, PhaseFailed, PhaseAbandoned, PhaseReopened}

// PhaseOf maps a ledger row kind to the phase it enters.
func PhaseOf(kind string) string { return strings.TrimPrefix(kind, "task.") }

// KindOf maps a phase to the ledger row kind that enters it.
func KindOf(phase string) string { return "task." + phase }

// PhaseOrdinal is the position of phase in Phases (-1 if unknown).
func PhaseOrdinal(phase string) int {
	for i, p := range Phases {
		if p == phase {
			return i
		}
	}
	return -1
}

// Terminal reports whether phase ends the task's work.
func Terminal(phase string) bool {
	return phase == PhaseCompleted || phase == PhaseFailed || phase == PhaseAbandoned
}

// Working reports whether a claim in phase is live: the holder may post.
func Working(phase string) bool {
	switch phase {
	case PhaseClaimed, PhaseStarted, PhaseSuspended, PhaseResumed:
		return true
	}
	return false
}

// legal lists, per phase, the transitions (as row kinds) allowed from it.
var legal = map[string][]string{
	"":             {record.KindTaskCreated},
	PhaseCreated:   {record.KindTaskClaimed, record.KindTaskAbandoned},
	PhaseReleased:  {record.KindTaskClaimed, record.KindTaskAbandoned},
	PhaseReopened:  {record.KindTaskClaimed, record.KindTaskAbandoned},
	PhaseClaimed:   {record.KindTaskReleased, record.KindTaskStarted, record.KindTaskFailed, record.KindTaskAbandoned},
	PhaseStarted:   {record.KindTaskSuspended, record.KindTaskCompleted, record.KindTaskFailed, record.KindTaskReleased, record.KindTaskAbandoned},
	PhaseResumed:   {record.KindTaskSuspended, record.KindTaskCompleted, record.KindTaskFailed, record.KindTaskReleased, record.KindTaskAbandoned},
	PhaseSuspended: {record.KindTaskResumed, record.KindTaskFailed, record.KindTaskReleased, record.KindTaskAbandoned},
	PhaseCompleted: {record.KindTaskReopened},
	PhaseFailed:    {record.KindTaskReopened},
	PhaseAbandoned: {record.KindTaskReopened},
}

// Allowed lists the transitions legal from phase.
func Allowed(phase string) []string { return legal[phase] }

// IllegalTransitionError reports a transition the ledger refuses.
type IllegalTransitionError struct {
	Task, From, Kind string
}

func (e *IllegalTransitionError) Error() string {
	var verbs []string
	for _, k := range legal[e.From] {
		verbs = append(verbs, Verb(k))
	}
	from := e.From
	if from == "" {
		return fmt.Sprintf("task %s does not exist", e.Task)
	}
	return fmt.Sprintf("cannot %s task %s: it is %s (allowed: %s)", Verb(e.Kind), e.Task, from, strings.Join(verbs, ", "))
}

// Verb is the command word of a transition kind ("task.claimed" -> "claim").
func Verb(kind string) string {
	switch kind {
	case record.KindTaskCreated:
		return "create"
	case record.KindTaskClaimed:
		return "claim"
	case record.KindTaskReleased:
		return "release"
	case record.KindTaskStarted:
		return "start"
	case record.KindTaskSuspended:
		return "suspend"
	case record.KindTaskResumed:
		return "resume"
	case record.KindTaskCompleted:
		return "complete"
	case record.KindTaskFailed:
		return "fail"
	case record.KindTaskAbandoned:
		return "abandon"
	case record.KindTaskReopened:
		return "reopen"
	}
	return kind
}

// Check returns an error unless kind is legal from phase.
func Check(task, phase, kind string) error {
	for _, k := range legal[phase] {
		if k == kind {
			return nil
		}
	}
	return &IllegalTransitionError{Task: task, From: phase, Kind: kind}
}

// Producer is a declared evidence producer.
type Producer struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Command  string `json:"command"`
	Required bool   `json:"required"`
}

// Gate is a declared gate.
type Gate struct {
	Name    string `json:"name"`
	Command string `json:"command"`
}

// Created is the data of task.created.
type Created struct {
	Title    string     `json:"title"`
	Evidence []Producer `json:"evidence"`
	Gates    []Gate     `json:"gates"`
}

// Claimed is the data of task.claimed. The token itself is never stored.
type Claimed struct {
	Agent       string      `json:"agent"`
	ClaimID     string      `json:"claim_id"`
	TokenSHA256 record.Hash `json:"token_sha256"`
}

// Transition is the data of every other transition.
type Transition struct {
	Reason string `json:"reason"`
}

// ValidateName checks an evidence producer or gate name.
func ValidateName(what, name string) error {
	if !ident.Match(name, 64, "_.-", false) {
		return fmt.Errorf("%s name %q is invalid: use 1 to 64 of letters, digits and _ . - starting with a letter or digit", what, name)
	}
	return nil
}

// Claim is the live claim of a task.
type Claim struct {
	Agent       string
	ClaimID     string
	TokenSHA256 record.Hash
	Index       int64 // ledger index of the task.claimed row
}

// State is the fold of a task's ledger rows.
type State struct {
	TaskID   string
	Title    string
	Phase    string
	Rows     int64
	Head     record.Hash
	Started  int64 // number of task.started rows
	Sealed   bool  // a terminal transition was recorded: its journal was sealed
	Claim    *Claim
	Evidence []Producer
	Gates    []Gate
	Actor    string // actor of the last row
}

// Apply folds one ledger row into s. Rows must come in index order; an
// illegal transition or a malformed row is an error.
func (s *State) Apply(r record.Row) error { return s.ApplyHashed(r, r.Hash()) }

// ApplyHashed is Apply for a row whose hash the caller already has (from the
// canonical bytes it read).
//
// The first row's prev is the chain's root: "" or the genesis hash of the
// repository it belongs to. Whether that root is this repository's is the
// reader's check (verify.Binding), made before the row is folded; a state
// whose Head is set before its first row checks the root against it too.
func (s *State) ApplyHashed(r record.Row, hash record.Hash) error {
	if r.Index == 0 && s.Rows == 0 && s.Head == "" {
		s.Head = r.Prev
	}
	if r.Index != s.Rows || r.Prev != s.Head {
		return fmt.Errorf("ledger row %d out of chain", r.Index)
	}
	if err := Check(r.TaskID, s.Phase, r.Kind); err != nil {
		return fmt.Errorf("ledger row %d: %w", r.Index, err)
	}
	// Checked before anything is folded: a refused row leaves s unchanged.
	if s.Phase != "" && r.TaskID != s.TaskID {
		return fmt.Errorf("ledger row %d belongs to task %q", r.Index, r.TaskID)
	}
	switch r.Kind {
	case record.KindTaskCreated:
		var c Created
		if err := r.DecodeData(&c); err != nil {
			return err
		}
		s.TaskID, s.Title, s.Evidence, s.Gates = r.TaskID, c.Title, c.Evidence, c.Gates
	case record.KindTaskClaimed:
		var c Claimed
		if err := r.DecodeData(&c); err != nil {
			return err
		}
		s.Claim = &Claim{Agent: c.Agent, ClaimID: c.ClaimID, TokenSHA256: c.TokenSHA256, Index: r.Index}
	default:
		var tr Transition
		if err := r.DecodeData(&tr); err != nil {
			return err
		}
		if r.Kind == record.KindTaskStarted {
			s.Started++
		}
	}
	s.Phase = PhaseOf(r.Kind)
	if Terminal(s.Phase) {
		s.Sealed = true
	}
	if !Working(s.Phase) {
		s.Claim = nil
	}
	s.Rows++
	s.Head = hash
	s.Actor = r.Actor
	return nil
}

// Producer returns the declared producer named name.
func (s *State) Producer(name string) (Producer, bool) {
	for _, p := range s.Evidence {
		if p.Name == name {
			return p, true
		}
	}
	return Producer{}, false
}

// Gate returns the declared gate named name.
func (s *State) Gate(name string) (Gate, bool) {
	for _, g := range s.Gates {
		if g.Name == name {
			return g, true
		}
	}
	return Gate{}, false
}
