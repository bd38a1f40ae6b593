package bernstein

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The archive of ended tasks (docs/archive.md): Store.Archive moves ended
// tasks' two refs into the writer's archive, refs/bernstein/archive/<writer>.

// ErrNotArchivable reports a task that may not be archived; the error names
// the task and why.
var ErrNotArchivable = txn.ErrNotArchivable

// ErrArchiveFormat refuses to archive in a repository below storage format
// 3 ('bernstein upgrade' raises it).
var ErrArchiveFormat = txn.ErrArchiveFormat

// ArchiveRequest says what to archive: the tasks named (every one must be
// archivable, or nothing is written and the error names the first that is
// not), or every archivable task when none is named. EndedBefore, when
// set, keeps only tasks whose last ledger row was written at least that
// long ago.
type ArchiveRequest struct {
	Tasks       []string
	EndedBefore time.Duration
}

// ArchiveResult is what Archive did: the tasks archived, in the order of
// their commits, the archive commits made (oldest first), and, when no
// task was named, the ended tasks passed over and why.
type ArchiveResult struct {
	Ref      string        `json:"ref"`
	Archived []string      `json:"archived"`
	Commits  []string      `json:"commits"`
	Skipped  []ArchiveSkip `json:"skipped"`
	// Tampered is what the writer's archive ref held that it could not
	// verify as its own (plain git moved it): the archive was built on the
	// writer's last verified archive commit instead, over that value, and
	// a warning said so. Nil when the ref was the writer's.
	Tampered *ArchiveTamper `json:"tampered,omitempty"`
}

// ArchiveTamper is the writer's own archive ref found holding what the
// writer cannot verify as its own (docs/archive.md, The writer's own
// archive).
type ArchiveTamper = txn.ArchiveTamper

// ArchiveSkip is an ended task Archive passed over, and why.
type ArchiveSkip struct {
	Task   string `json:"task_id"`
	Reason string `json:"reason"`
}

// archiveMu keeps two archives of one store out of one write batch: each
// archive commit builds on the previous one's trees as they are on disk.
var archiveMu sync.Mutex

// Archive archives ended tasks (docs/archive.md, What is archived): a task
// whose last ledger row is terminal, whose chains are proven, whose
// journal's seal is in the spine and whose refs are at those heads. Each
// archive commit (at most 256 tasks) is one write transaction: the commit,
// the move of the archive ref and the deletion of the tasks' refs, each a
// compare-and-swap. It refuses a repository below storage format 3.
func (s *Store) Archive(req ArchiveRequest) (*ArchiveResult, error) {
	if req.EndedBefore < 0 {
		return nil, fmt.Errorf("ended-before %s: want a duration of zero or more", req.EndedBefore)
	}
	seen := map[string]bool{}
	for _, task := range req.Tasks {
		if err := validateTask(task); err != nil {
			return nil, err
		}
		if seen[task] {
			return nil, fmt.Errorf("task %s is named twice", task)
		}
		seen[task] = true
	}
	id, err := s.core.Identity()
	if err != nil {
		return nil, err
	}
	var cutoff time.Time
	if req.EndedBefore > 0 {
		cutoff = s.core.Now().Add(-req.EndedBefore)
	}
	archiveMu.Lock()
	defer archiveMu.Unlock()
	res := &ArchiveResult{Ref: refs.Archive(id.Writer), Archived: []string{}, Commits: []string{}, Skipped: []ArchiveSkip{}}
	if res.Tampered, err = s.restoreOwnArchive(); err != nil {
		return nil, err
	}
	if len(req.Tasks) > 0 {
		return res, s.archiveNamed(req.Tasks, cutoff, res)
	}
	return res, s.archiveAll(cutoff, res)
}

// archiveNamed archives the tasks named, MaxAdd a commit; the first
// transaction checks every one of them before it writes.
func (s *Store) archiveNamed(tasks []string, cutoff time.Time, res *ArchiveResult) error {
	for i := 0; i < len(tasks); i += archive.MaxAdd {
		chunk, check := tasks[i:min(len(tasks), i+archive.MaxAdd)], tasks[i:]
		if i > 0 {
			check = chunk
		}
		out, err := s.w.Submit(func(t *txn.Tx) (any, error) {
			if err := t.CheckArchiveFormat(); err != nil {
				return nil, err
			}
			var add []record.ArchivedTask
			for _, task := range check {
				e, err := t.Archivable(task, cutoff)
				if err != nil {
					return nil, err
				}
				if len(add) < len(chunk) {
					add = append(add, e)
				}
			}
			return archiveCommit(t, add)
		})
		if err != nil {
			if i > 0 {
				return fmt.Errorf("%w (the first %d tasks were archived in %d commits)", err, len(res.Archived), len(res.Commits))
			}
			return err
		}
		s.noteArchived(res, out.(archived))
	}
	return nil
}

// archiveAll archives every archivable task, MaxAdd a commit, passing
// over those that have not ended (before cutoff) and reporting the other
// ended tasks it passes over.
func (s *Store) archiveAll(cutoff time.Time, res *ArchiveResult) error {
	tasks, err := refs.TaskIDs(s.core.Refs)
	if err != nil {
		return err
	}
	for next := 0; ; {
		var skipped []ArchiveSkip
		out, err := s.w.Submit(func(t *txn.Tx) (any, error) {
			skipped = skipped[:0]
			if err := t.CheckArchiveFormat(); err != nil {
				return nil, err
			}
			var add []record.ArchivedTask
			i := next
			for ; i < len(tasks) && len(add) < archive.MaxAdd; i++ {
				e, err := t.Archivable(tasks[i], cutoff)
				ok, passed, err := archiveCandidate(e, err, nil)
				switch {
				case err != nil:
					return nil, err
				case ok:
					add = append(add, e)
				case passed != "":
					skipped = append(skipped, ArchiveSkip{Task: tasks[i], Reason: passed})
				}
			}
			if len(add) == 0 {
				return archived{next: i}, nil
			}
			a, err := archiveCommit(t, add)
			a.next = i
			return a, err
		})
		if err != nil {
			return err
		}
		res.Skipped = append(res.Skipped, skipped...)
		a := out.(archived)
		s.noteArchived(res, a)
		if next = a.next; next >= len(tasks) {
			return nil
		}
	}
}

// restoreOwnArchive moves this writer's archive ref back to the last
// archive commit it verifies as its own when plain git moved it
// (Tx.RestoreArchive), warns of what it found, and returns it (nil: the
// ref is where the writer left it, which costs a ref read and a line of
// the heads memory). Called with archiveMu held, before an archive: what
// follows builds on the writer's own head, and a push sends it.
func (s *Store) restoreOwnArchive() (*ArchiveTamper, error) {
	if ok, err := s.w.ArchiveAtRemembered(); err != nil || ok {
		return nil, err
	}
	out, err := s.w.Submit(func(t *txn.Tx) (any, error) { return t.RestoreArchive() })
	if err != nil {
		return nil, err
	}
	tamper := out.(*ArchiveTamper)
	if tamper != nil {
		s.core.Warn("%s", tamper)
	}
	return tamper, nil
}

// archiveCandidate sorts what Tx.Archivable said of a task (its entry e,
// or err) for an archive of every archivable task, Store.Archive's and
// the automatic one's: add it (ok) when it is archivable and keep, if
// set, takes its entry; pass over it without a word when it has not
// ended, is unknown, or keep refuses it; pass over it saying why
// (passed) when it ended but cannot be archived (ErrNotArchivable,
// ErrUnproven); stop on any other error (stop).
func archiveCandidate(e record.ArchivedTask, err error, keep func(record.ArchivedTask) bool) (ok bool, passed string, stop error) {
	switch {
	case err == nil:
		return keep == nil || keep(e), "", nil
	case errors.Is(err, txn.ErrNotEnded), errors.Is(err, ErrUnknownTask):
		return false, "", nil
	case errors.Is(err, ErrNotArchivable), errors.Is(err, ErrUnproven):
		return false, err.Error(), nil
	}
	return false, "", err
}

// archived is what one archive transaction wrote (no commit: none), and
// where archiveAll goes on.
type archived struct {
	tasks  []string
	commit string
	next   int
	// tamper: the writer's archive ref held what it could not verify as
	// its own, and the commit was built on its last verified head.
	tamper *ArchiveTamper
}

// archiveCommit writes one archive commit of add in t.
func archiveCommit(t *txn.Tx, add []record.ArchivedTask) (archived, error) {
	a, id, err := t.Archive(add, nil)
	if err != nil {
		return archived{}, err
	}
	out := archived{commit: id.String(), tamper: t.ArchiveTampered()}
	for _, e := range a.Add {
		out.tasks = append(out.tasks, e.TaskID)
	}
	return out, nil
}

// noteArchived notes a committed transaction's archive commit in r, and
// warns of a tampered archive ref it was built past.
func (s *Store) noteArchived(r *ArchiveResult, a archived) {
	if a.tamper != nil {
		r.Tampered = a.tamper
		s.core.Warn("%s", a.tamper)
	}
	if a.commit != "" {
		r.Archived = append(r.Archived, a.tasks...)
		r.Commits = append(r.Commits, a.commit)
	}
}
