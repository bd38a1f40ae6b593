package bernstein

import (
	"fmt"

	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Artifacts verifies every artifact version of task.
func (s *Store) Artifacts(task string) (*verify.TaskReport, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	view, err := s.view(task)
	if err != nil {
		return nil, err
	}
	if err := requireTask(view, task); err != nil {
		return nil, err
	}
	env, err := s.VerifyEnv(view)
	if err != nil {
		return nil, err
	}
	v, err := verify.NewVerifier(env)
	if err != nil {
		return nil, err
	}
	return v.Task(task)
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
	view, err := s.refs.Snapshot(refs.SpinePrefix, refs.Keys, refs.WritersPrefix)
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

// AuditOptions limit `audit verify`.
type AuditOptions struct {
	Task     string
	Progress func(stage string, done, total int)
}

// AuditVerify walks the whole repository (or one task) and reports what
// holds. HMACs are checked for the local writer only: no other writer's
// HMAC key is ever on this host, and none is created.
func (s *Store) AuditVerify(o AuditOptions) (*verify.Report, error) {
	if o.Task != "" {
		if err := validateTask(o.Task); err != nil {
			return nil, err
		}
	}
	view, err := s.view("")
	if err != nil {
		return nil, err
	}
	if o.Task != "" {
		if err := requireTask(view, o.Task); err != nil {
			return nil, err
		}
	}
	env, err := s.VerifyEnv(view)
	if err != nil {
		return nil, err
	}
	macs := map[string]verify.MACChecker{}
	if id, err := s.Identity(); err == nil {
		macs[id.Writer] = id
	}
	return verify.Repository(env, verify.Options{Task: o.Task, MAC: macs, Progress: o.Progress})
}
