package bernstein

import (
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Integrity first on every list of tasks (docs/cli.md, "Listing tasks"):
// each task says how its artifact versions verified, whether its progress
// is proven and what its journal identity is, and one state sums them up.

// VersionCounts counts a task's artifact versions by verify state.
type VersionCounts struct {
	Verified     int `json:"verified"`
	Tampered     int `json:"tampered"`
	Unverifiable int `json:"unverifiable"`
}

// TaskIntegrity is a task's integrity as a list of tasks shows it.
type TaskIntegrity struct {
	// State is tampered when anything of the task is (a version, a row its
	// progress would count, its journal chain, or its journal against its
	// seal: identity mismatched), else unverifiable when anything cannot be
	// proven here (a version or row by a writer not pinned, or the seal of
	// an ended task), else verified.
	State string `json:"state"`
	// Reason says why the state is not verified ("" when it is).
	Reason   string        `json:"reason"`
	Versions VersionCounts `json:"versions"`
	// ProgressProof is the proof state of the progress vector.
	ProgressProof string `json:"progress_proof"`
	// JournalIdentity is verified, unverifiable or mismatched
	// (docs/format.md, Journal seals), with its reason.
	JournalIdentity       string `json:"journal_identity"`
	JournalIdentityReason string `json:"journal_identity_reason"`
	// JournalOpen is set when the identity is unverifiable only because
	// the task is open (no seal yet, or reopened after one): expected, not
	// a finding.
	JournalOpen bool `json:"journal_open"`
}

// Verified reports whether the task's integrity state is verified.
func (t TaskIntegrity) Verified() bool { return t.State == verify.Verified }

// NewTaskIntegrity sums up a task's integrity from its TaskInfo and the
// verification of its artifacts (both read from one view).
func NewTaskIntegrity(info *TaskInfo, rep *verify.TaskReport) TaskIntegrity {
	ti := TaskIntegrity{State: verify.Verified, JournalIdentity: rep.JournalIdentity, JournalIdentityReason: rep.IdentityReason}
	for _, v := range rep.Versions {
		switch v.State {
		case verify.Verified:
			ti.Versions.Verified++
		case verify.Tampered:
			ti.Versions.Tampered++
		default:
			ti.Versions.Unverifiable++
		}
	}
	if info.Progress != nil {
		ti.ProgressProof = info.Progress.Proof.State
	}
	ti.JournalOpen = rep.JournalIdentity == verify.IdentityUnverifiable && !info.Terminal
	var tampered, unverifiable []string
	n := len(rep.Versions)
	if rep.ChainBroken {
		tampered = append(tampered, rep.ChainReason)
	}
	if ti.Versions.Tampered > 0 {
		tampered = append(tampered, fmt.Sprintf("%d of %d versions tampered", ti.Versions.Tampered, n))
	}
	switch ti.ProgressProof {
	case verify.Tampered:
		tampered = append(tampered, "progress: some rows do not count (see its proof)")
	case verify.Unverifiable:
		unverifiable = append(unverifiable, "progress: counted rows are not proven by a pinned key")
	}
	switch {
	case rep.JournalIdentity == verify.IdentityMismatched:
		tampered = append(tampered, "journal identity mismatched: "+rep.IdentityReason)
	case rep.JournalIdentity == verify.IdentityUnverifiable && !ti.JournalOpen:
		unverifiable = append(unverifiable, "journal identity unverifiable: "+rep.IdentityReason)
	}
	if ti.Versions.Unverifiable > 0 {
		unverifiable = append(unverifiable, fmt.Sprintf("%d of %d versions unverifiable: no pinned key for their writer", ti.Versions.Unverifiable, n))
	}
	switch {
	case len(tampered) > 0:
		ti.State, ti.Reason = verify.Tampered, joinReasons(tampered)
	case len(unverifiable) > 0:
		ti.State, ti.Reason = verify.Unverifiable, joinReasons(unverifiable)
	}
	return ti
}

func joinReasons(rs []string) string {
	out := rs[0]
	for _, r := range rs[1:] {
		out += "; " + r
	}
	return out
}

// TaskListEntry is one task of a list: the task as 'task show' reads it,
// and its integrity.
type TaskListEntry struct {
	*TaskInfo
	Integrity TaskIntegrity `json:"integrity"`
}

// UnreadableEntry is the list entry of a task whose journal or ledger ref
// cannot be read as one (err, from reading the task, is a
// *refs.BadRefError): the list reads past it and lists it as tampered,
// naming the ref, with nothing of the task rendered (no phase, no
// progress: null). ok is false for any other error, which fails the list.
func UnreadableEntry(task string, err error) (TaskListEntry, bool) {
	var bad *refs.BadRefError
	if !errors.As(err, &bad) {
		return TaskListEntry{}, false
	}
	info := &TaskInfo{ID: task, Evidence: []ledger.Producer{}, Gates: []ledger.Gate{}, Artifacts: map[string]int64{}}
	return TaskListEntry{TaskInfo: info, Integrity: TaskIntegrity{
		State: verify.Tampered, Reason: bad.BadRef.String(), ProgressProof: verify.Tampered,
		JournalIdentity: verify.IdentityUnverifiable, JournalIdentityReason: "not read: " + bad.Ref + " cannot be read as " + refs.KindOf(bad.Ref),
	}}, true
}

// ListVerifier verifies the artifacts of the tasks of one view against the
// view's one spine index (proof.IndexedView), built when first needed: a
// list of n tasks pays for the spines once, then for each task's own
// versions.
type ListVerifier struct {
	v   *ReadView
	ver *verify.Verifier
}

// ListVerifier returns a verifier for the view's tasks.
func (v *ReadView) ListVerifier() *ListVerifier { return &ListVerifier{v: v} }

// Artifacts is ReadView.Artifacts with the shared spine index.
func (l *ListVerifier) Artifacts(task string) (*verify.TaskReport, error) {
	if err := l.v.covers(task); err != nil {
		return nil, err
	}
	if err := requireTask(l.v.snap, task); err != nil {
		return nil, err
	}
	if l.ver == nil {
		env, err := l.v.s.VerifyEnv(l.v.idx)
		if err != nil {
			return nil, err
		}
		if l.ver, err = proof.Verifier(env); err != nil {
			return nil, err
		}
		if l.ver.Logs, err = l.v.s.sync.LogCoverage(l.v.idx); err != nil {
			return nil, err
		}
	}
	return l.ver.Task(task)
}

// Entry reads task and verifies its artifacts: its entry in a list. A
// task whose journal or ledger ref cannot be read is its UnreadableEntry;
// a task deleted since its name was listed is left out (ok false) when
// gone is, as on a page; any other error names the task.
func (l *ListVerifier) Entry(task string, gone bool) (e TaskListEntry, ok bool, err error) {
	info, err := l.v.Task(task)
	if errors.Is(err, ErrUnknownTask) && gone {
		return TaskListEntry{}, false, nil
	}
	if e, ok := UnreadableEntry(task, err); ok {
		return e, true, nil // read past: listed as tampered
	}
	if err != nil {
		return TaskListEntry{}, false, fmt.Errorf("task %s: %w", task, err)
	}
	rep, err := l.Artifacts(task)
	if err != nil {
		return TaskListEntry{}, false, fmt.Errorf("task %s: %w", task, err)
	}
	return TaskListEntry{TaskInfo: info, Integrity: NewTaskIntegrity(info, rep)}, true, nil
}

// TaskList lists every task with its integrity, from one snapshot of the
// refs, sorted by id: what 'task list' and GET /api/v1/tasks show.
func (s *Store) TaskList() ([]TaskListEntry, error) {
	out, _, err := s.TaskListPage(Page{})
	return out, err
}
