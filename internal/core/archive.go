package core

import (
	"errors"
	"fmt"
	"sync"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// archiveIndex is the refs.ArchiveIndex of a repository: archive commits
// read through internal/archive, whose every tree read is checked, and
// chain commits ordered by their rows' positions. An archive read whole
// (List) is kept by its commit id, which names its content: a listing, a
// serve scan and the single-task reads after them read each archive once.
type archiveIndex struct {
	objs *gitstore.Repo

	mu    sync.Mutex
	whole map[gitstore.Oid]map[string]archive.Entry
}

// bad marks err as the archive's own fault (refs.BadArchiveError) when
// the archive cannot be read as an archive (archive.Unreadable): the refs
// reader then reads past that archive ref.
func bad(err error) error {
	if err != nil && archive.Unreadable(err) {
		return &refs.BadArchiveError{Err: err}
	}
	return err
}

// present checks that e's heads are in the repository: an archive
// commit's parents keep every head its tree names (archive.Parents), so
// an absent one is an archive no archive writer wrote, refused as a tree
// of the wrong shape is.
func (x *archiveIndex) present(e archive.Entry) error {
	for _, h := range []struct {
		kind string
		id   gitstore.Oid
	}{{archive.JournalLink, e.Journal}, {archive.LedgerLink, e.Ledger}} {
		if !x.objs.Has(h.id) {
			return fmt.Errorf("task %s's %s head: %w: %s (an archive commit's parents hold the heads it names)", e.Task, h.kind, gitstore.ErrMissing, h.id)
		}
	}
	return nil
}

// archiveKeep is how many archive commits' entries the index keeps.
const archiveKeep = 8

func (x *archiveIndex) cached(commit gitstore.Oid) map[string]archive.Entry {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.whole[commit]
}

// Lookup reads task's entry: from the archive's entries when it was read
// whole, else its four trees (archive.Lookup).
func (x *archiveIndex) Lookup(commit gitstore.Oid, task string) (j, l gitstore.Oid, ok bool, err error) {
	if es := x.cached(commit); es != nil {
		e, ok := es[task]
		return e.Journal, e.Ledger, ok, nil
	}
	e, ok, err := archive.Lookup(x.objs, commit, task)
	if err == nil && ok {
		err = x.present(e)
	}
	if err != nil {
		return gitstore.ZeroOid, gitstore.ZeroOid, false, bad(err)
	}
	return e.Journal, e.Ledger, ok, nil
}

// List reads every entry of the archive (once per commit).
func (x *archiveIndex) List(commit gitstore.Oid, fn func(task string, j, l gitstore.Oid)) error {
	es := x.cached(commit)
	if es == nil {
		es = map[string]archive.Entry{}
		err := archive.List(x.objs, commit, func(e archive.Entry) error {
			es[e.Task] = e
			return x.present(e)
		})
		if err != nil {
			return bad(err)
		}
		x.mu.Lock()
		if len(x.whole) >= archiveKeep {
			x.whole = nil
		}
		if x.whole == nil {
			x.whole = map[gitstore.Oid]map[string]archive.Entry{}
		}
		x.whole[commit] = es
		x.mu.Unlock()
	}
	for t, e := range es {
		fn(t, e.Journal, e.Ledger)
	}
	return nil
}

// Tasks lists the archive's task ids, reading its shards only.
func (x *archiveIndex) Tasks(commit gitstore.Oid, fn func(task string)) error {
	if es := x.cached(commit); es != nil {
		for t := range es {
			fn(t)
		}
		return nil
	}
	return bad(archive.Tasks(x.objs, commit, func(t string) error { fn(t); return nil }))
}

// errNotRow reports a commit that is not a journal or ledger row.
var errNotRow = errors.New("not a task chain commit")

// Order says how two task chain heads stand: each row records its position
// (its index), so the later one's chain is walked back to the earlier's
// position, and there it is the earlier one or the two diverged. The walk
// is as long as the distance between them, not the chain.
func (x *archiveIndex) Order(a, b gitstore.Oid) (refs.ChainOrder, error) {
	if a == b {
		return refs.Same, nil
	}
	ia, err := x.rowIndex(a)
	if err != nil {
		return refs.Diverged, err
	}
	ib, err := x.rowIndex(b)
	if err != nil {
		return refs.Diverged, err
	}
	switch {
	case ia > ib:
		if ok, err := x.reaches(a, b, ia-ib); err != nil || !ok {
			return refs.Diverged, err
		}
		return refs.Ahead, nil
	case ib > ia:
		if ok, err := x.reaches(b, a, ib-ia); err != nil || !ok {
			return refs.Diverged, err
		}
		return refs.Behind, nil
	}
	return refs.Diverged, nil
}

// rowIndex is the index the row of chain commit id records.
func (x *archiveIndex) rowIndex(id gitstore.Oid) (int64, error) {
	cc, err := chain.Read(x.objs, id)
	if err != nil {
		return 0, err
	}
	row, err := record.ParseRow(cc.Record)
	if err != nil {
		return 0, fmt.Errorf("commit %s: %w: %v", id, errNotRow, err)
	}
	return row.Index, nil
}

// reaches reports whether the commit steps first parents back from head is
// target.
func (x *archiveIndex) reaches(head, target gitstore.Oid, steps int64) (bool, error) {
	id := head
	for ; steps > 0; steps-- {
		data, err := x.objs.ReadType(id, gitstore.TypeCommit)
		if err != nil {
			return false, err
		}
		c, err := gitstore.ParseCommitLinks(data)
		if err != nil {
			return false, fmt.Errorf("commit %s: %w", id, err)
		}
		if len(c.Parents) != 1 {
			return false, nil // the root (or not a chain commit) before the position
		}
		id = c.Parents[0]
	}
	return id == target, nil
}
