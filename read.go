package bernstein

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/audit"
	"github.com/bernstein/bernstein/internal/feed"
	"github.com/bernstein/bernstein/keys/auditcheckpoint"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/remote"
	"github.com/bernstein/bernstein/verify"
)

// Artifacts verifies every artifact version of task.
func (s *Store) Artifacts(task string) (*verify.TaskReport, error) {
	_, _, rep, err := s.verifyTask(task)
	return rep, err
}

// verifyTask verifies task from one snapshot of its refs, which it returns
// with the verifier for reads that go on from the same snapshot.
func (s *Store) verifyTask(task string) (*refs.Snapshot, *verify.Verifier, *verify.TaskReport, error) {
	if err := validateTask(task); err != nil {
		return nil, nil, nil, err
	}
	view, err := s.view(task)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := requireTask(view, task); err != nil {
		return nil, nil, nil, err
	}
	env, err := s.VerifyEnv(view)
	if err != nil {
		return nil, nil, nil, err
	}
	v, err := verify.NewVerifier(env)
	if err != nil {
		return nil, nil, nil, err
	}
	if v.Logs, err = s.sync.LogCoverage(view); err != nil {
		return nil, nil, nil, err
	}
	rep, err := v.Task(task)
	return view, v, rep, err
}

// requireTask returns ErrUnknownTask unless task has a ledger or a journal.
func requireTask(view refs.Source, task string) error {
	for _, ref := range []string{refs.Ledger(task), refs.Journal(task)} {
		o, err := view.ReadOptional(ref)
		if err != nil {
			return err
		}
		if !o.IsZero() {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrUnknownTask, task)
}

// Productions lists the artifact keys the local lineage spines carry.
func (s *Store) Productions() ([]verify.Production, error) {
	view, err := s.core.Refs.Snapshot(refs.SpinePrefix, refs.Keys, refs.WritersPrefix, refs.Repository)
	if err != nil {
		return nil, err
	}
	env, err := s.VerifyEnv(view)
	if err != nil {
		return nil, err
	}
	ix, err := verify.BuildSpineIndex(env)
	if err != nil {
		return nil, err
	}
	return ix.Productions(), nil
}

// AuditCheckpoint is a signed record of what an audit verify found whole
// (keys/auditcheckpoint).
type AuditCheckpoint = auditcheckpoint.Checkpoint

// ErrNoCheckpoint reports an audit checkpoint that does not exist.
var ErrNoCheckpoint = auditcheckpoint.ErrNoCheckpoint

// ErrBadCheckpoint reports an audit checkpoint that cannot be used: not
// signed by this host's writer, of another repository, or taken under
// trust this host no longer gives.
var ErrBadCheckpoint = auditcheckpoint.ErrBadCheckpoint

// ValidateCheckpointName checks the name of an audit checkpoint.
func ValidateCheckpointName(name string) error { return auditcheckpoint.ValidateName(name) }

// auditor runs audit verify on this repository (internal/audit).
func (s *Store) auditor() *audit.Auditor {
	a := audit.New(s.core, s.prover, s.heads)
	a.Logs = s.sync.LogCoverage
	return a
}

// AuditOptions limit `audit verify`.
type AuditOptions struct {
	Task     string
	Progress func(stage string, done, total int)
	// Since checks only what was added after the audit checkpoint of that
	// name, and that nothing it covered was taken away (audit verify
	// --since).
	Since string
	// Checkpoint records what the walk found whole as the audit checkpoint
	// of that name, when everything holds and is verified.
	Checkpoint string
}

// AuditVerify walks the whole repository (or one task) and reports what
// holds. HMACs are checked for the local writer only: no other writer's
// HMAC key is ever on this host, and none is created. With Since it checks
// what was added after an audit checkpoint; with Checkpoint it records one.
func (s *Store) AuditVerify(o AuditOptions) (*verify.Report, error) {
	if o.Task != "" {
		if err := validateTask(o.Task); err != nil {
			return nil, err
		}
		if o.Since != "" || o.Checkpoint != "" {
			return nil, &artifact.InputError{Field: "task", Msg: "an audit checkpoint covers the whole repository: --task cannot be given with --since or --checkpoint"}
		}
	}
	for _, name := range []string{o.Since, o.Checkpoint} {
		if name != "" {
			if err := ValidateCheckpointName(name); err != nil {
				return nil, err
			}
		}
	}
	a := s.auditor()
	if o.Since != "" {
		rep, err := a.Since(o.Since, o.Checkpoint)
		if errors.Is(err, audit.ErrEmpty) {
			return nil, s.nothingToVerify()
		}
		return rep, err
	}
	// Where the heads file stands before the refs are read, for a
	// checkpoint (audit.Auditor.Since).
	pos, err := a.Position()
	if err != nil {
		return nil, err
	}
	view, err := s.view("")
	if err != nil {
		return nil, err
	}
	if _, names, err := view.List(refs.Prefix); err != nil {
		return nil, err
	} else if len(names) == 0 {
		return nil, s.nothingToVerify()
	}
	if o.Task != "" {
		if err := requireTask(view, o.Task); err != nil {
			return nil, err
		}
	}
	rep, err := a.Full(view, o.Task, o.Progress)
	if err != nil {
		return nil, err
	}
	if err := a.AddRollbacks(view, o.Task, rep); err != nil {
		return nil, err
	}
	audit.AddDivergences(view, o.Task, rep)
	if o.Checkpoint != "" {
		if err := a.TakeCheckpoint(view, pos, o.Checkpoint, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// ErrNothingToVerify reports a repository with no refs/bernstein/* at all:
// a plain git clone, which fetches only branches and tags. audit verify
// refuses it rather than report an empty walk as everything holding.
var ErrNothingToVerify = errors.New("nothing to verify")

// nothingToVerify says how to get the refs: fetch them when a remote's
// copies are here already, else clone with bernstein or fetch them by hand.
func (s *Store) nothingToVerify() error {
	if _, names, err := s.core.Refs.List(remote.TrackingRoot); err == nil && len(names) > 0 {
		r, _, _ := strings.Cut(strings.TrimPrefix(names[0], remote.TrackingRoot), "/")
		return fmt.Errorf("%w: this repository has no refs/bernstein/*, only %s's copies of them: run 'bernstein fetch %s'", ErrNothingToVerify, r, r)
	}
	return fmt.Errorf("%w: this repository has no refs/bernstein/* (a plain 'git clone' does not fetch them): clone with 'bernstein clone URL', or run \"git fetch origin 'refs/bernstein/*:refs/bernstein/*'\"", ErrNothingToVerify)
}

// Feeds (internal/feed): what a task's chains hold beyond what a reader has
// seen, for the event stream of `bernstein serve`.

// Heads is where a reader of a task's chains stands.
type Heads = feed.Heads

// RunPosition is a point of a task's run: a checkpoint row and the commit
// it recorded. A journal row was recorded at the checkpoint before it.
type RunPosition = feed.RunPosition

// FeedRow is one row of a feed.
type FeedRow = feed.Row

// Feed is a task's rows beyond some Heads, read from one consistent view.
type Feed = feed.Feed

// TaskFeed returns what task's chains hold beyond since (the zero Heads:
// everything).
func (s *Store) TaskFeed(task string, since Heads) (*Feed, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	view, err := s.core.Refs.Snapshot(taskScope(task)...)
	if err != nil {
		return nil, err
	}
	return s.taskFeed(view, task, since)
}

// FeedsView takes one consistent view of every task's chains and of what
// proving them reads (keys, writers, spines, checkpoints): a reader of
// many tasks' feeds (the first scan of `bernstein serve`) reads the refs
// once, not once per task.
func (s *Store) FeedsView() (*refs.Snapshot, error) {
	scope := []string{refs.JournalPrefix, refs.LedgerPrefix}
	for _, sc := range taskScope("") {
		// Every ref but the task's own chains, which the prefixes cover (a
		// read outside the view is an error, never a zero).
		if !strings.HasPrefix(sc, refs.JournalPrefix) && !strings.HasPrefix(sc, refs.LedgerPrefix) {
			scope = append(scope, sc)
		}
	}
	return s.core.Refs.Snapshot(scope...)
}

// TaskFeedIn is TaskFeed read from view, a FeedsView.
func (s *Store) TaskFeedIn(view *refs.Snapshot, task string, since Heads) (*Feed, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	return s.taskFeed(view, task, since)
}

// taskFeed is TaskFeed of view.
func (s *Store) taskFeed(view *refs.Snapshot, task string, since Heads) (*Feed, error) {
	f, err := s.feeds.Since(view, task, since)
	if err != nil {
		return nil, err
	}
	tf, err := s.folds.Task(view, task)
	if err != nil {
		return nil, err
	}
	f.Progress = tf.Wire
	return f, nil
}

// Snapshot takes one consistent view of the refs scope names (a name ending
// in '/' is a prefix).
func (s *Store) Snapshot(scope ...string) (*refs.Snapshot, error) {
	return s.core.Refs.Snapshot(scope...)
}

// FeedRowAt reads the row at index of task's chain ("journal" or
// "ledger") as the chain holds it now, proven, with its run position.
func (s *Store) FeedRowAt(task, chainName string, index int64) (FeedRow, error) {
	view, err := s.core.Refs.Snapshot(taskScope(task)...)
	if err != nil {
		return FeedRow{}, err
	}
	return s.feeds.RowAt(view, task, chainName, index)
}
