package bernstein

import (
	"fmt"
	"maps"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// journalState is what the write path needs of a journal: the chain's
// position and, per key, the latest version and its spine entry hash.
type journalState struct {
	Task string
	Rows int64
	Head record.Hash
	Keys map[string]keyState
	// Progress is the journal half of the progress fold.
	Progress progress.Journal
	// LastSpine is the spine entry hash of the latest artifact row.
	LastSpine record.Hash
}

type keyState struct {
	Version   int64
	SpineHash record.Hash
}

func newJournalState(task string) *journalState {
	return &journalState{Task: task, Keys: map[string]keyState{}}
}

func (j *journalState) clone() *journalState {
	c := *j
	c.Keys = maps.Clone(j.Keys)
	c.Progress = j.Progress.Clone()
	return &c
}

// apply folds one row. A row out of chain is an error: bernstein never
// extends a journal it cannot account for.
func (j *journalState) apply(r record.Row, hash record.Hash) error {
	if r.TaskID != j.Task {
		return fmt.Errorf("journal of %s: row %d belongs to task %q", j.Task, r.Index, r.TaskID)
	}
	if r.Index != j.Rows || r.Prev != j.Head {
		return fmt.Errorf("journal of %s is broken at row %d: run 'bernstein audit verify'", j.Task, r.Index)
	}
	if r.Kind == record.KindArtifactPosted {
		var a record.ArtifactPosted
		if err := r.DecodeData(&a); err != nil {
			return err
		}
		if a.Version != j.Keys[a.Key].Version+1 {
			return fmt.Errorf("journal of %s: row %d posts %s version %d after version %d", j.Task, r.Index, a.Key, a.Version, j.Keys[a.Key].Version)
		}
		j.Keys[a.Key] = keyState{Version: a.Version, SpineHash: a.SpineEntryHash}
		j.LastSpine = a.SpineEntryHash
	} else if err := j.Progress.Apply(r); err != nil {
		return fmt.Errorf("journal of %s, row %d: %w", j.Task, r.Index, err)
	}
	j.Rows++
	j.Head = hash
	return nil
}

// journalStateAt folds task's journal up to head, extending a cached fold
// (in memory, else on disk) when head descends from it.
func (s *Store) journalStateAt(task string, head gitstore.Oid) (*journalState, error) {
	s.stateMu.Lock()
	cached, ok := s.journals[task]
	s.stateMu.Unlock()
	if ok && cached.head == head {
		return cached.state, nil
	}
	if !ok {
		if h, st, found := s.loadJournalCache(task); found {
			cached, ok = journalCache{h, st}, true
			if h == head {
				s.stateMu.Lock()
				s.journals[task] = cached
				s.stateMu.Unlock()
				return st, nil
			}
		}
	}
	stop := gitstore.ZeroOid
	if ok {
		stop = cached.head
	}
	commits, met, err := s.walkBack(head, stop)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", task, err)
	}
	st := newJournalState(task)
	if met && ok {
		st = cached.state.clone()
	} else if ok {
		// The cached head is not an ancestor: fold from the root.
		if commits, _, err = s.walkBack(head, gitstore.ZeroOid); err != nil {
			return nil, fmt.Errorf("journal of %s: %w", task, err)
		}
	}
	for _, cc := range commits {
		row, err := record.ParseRow(cc.Record)
		if err != nil {
			return nil, fmt.Errorf("journal of %s, commit %s: %w", task, cc.ID, err)
		}
		if err := st.apply(row, record.Sum(cc.Record)); err != nil {
			return nil, err
		}
	}
	s.stateMu.Lock()
	s.journals[task] = journalCache{head, st}
	s.stateMu.Unlock()
	if len(commits) >= cacheMinRows {
		s.saveJournalCache(task, head, st)
	}
	return st, nil
}

// ledgerStateAt folds task's ledger up to head.
func (s *Store) ledgerStateAt(task string, head gitstore.Oid) (*ledger.State, error) {
	s.stateMu.Lock()
	cached, ok := s.ledgers[task]
	s.stateMu.Unlock()
	if ok && cached.head == head {
		return cached.state, nil
	}
	stop := gitstore.ZeroOid
	if ok {
		stop = cached.head
	}
	commits, met, err := s.walkBack(head, stop)
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: %w", task, err)
	}
	st := &ledger.State{}
	if met && ok {
		c := *cached.state
		st = &c
	} else if ok {
		if commits, _, err = s.walkBack(head, gitstore.ZeroOid); err != nil {
			return nil, fmt.Errorf("ledger of %s: %w", task, err)
		}
	}
	for _, cc := range commits {
		row, err := record.ParseRow(cc.Record)
		if err != nil {
			return nil, fmt.Errorf("ledger of %s, commit %s: %w", task, cc.ID, err)
		}
		if row.TaskID != task {
			return nil, fmt.Errorf("ledger of %s: row %d belongs to task %q", task, row.Index, row.TaskID)
		}
		if err := st.ApplyHashed(row, record.Sum(cc.Record)); err != nil {
			return nil, fmt.Errorf("ledger of %s: %w", task, err)
		}
	}
	s.stateMu.Lock()
	s.ledgers[task] = ledgerCache{head, st}
	s.stateMu.Unlock()
	return st, nil
}
