package archive

import (
	"github.com/bernstein/bernstein/gitstore"
)

// Change is one task whose entry differs between two archive commits: Old
// is nil for a task added, New nil for a task removed, both set for a task
// whose heads changed.
type Change struct {
	Task string
	Old  *Entry
	New  *Entry
}

// Diff returns the entries added, changed and removed from archive commit
// old (zero: the empty archive) to archive commit new, in tree order. It
// reads only what differs: a shard whose tree id is the same in both is
// skipped unread, and so is a task whose tree id is the same, so its cost
// follows what changed, not the size of the archive. The trees it reads are
// checked as List checks them; the ones it skips are the very objects of
// old's tree.
func Diff(repo *gitstore.Repo, old, new gitstore.Oid) ([]Change, error) {
	_, oldDir, err := rootOf(repo, old)
	if err != nil {
		return nil, err
	}
	_, newDir, err := rootOf(repo, new)
	if err != nil {
		return nil, err
	}
	if oldDir == newDir {
		return nil, nil
	}
	a, err := shardList(repo, oldDir)
	if err != nil {
		return nil, err
	}
	b, err := shardList(repo, newDir)
	if err != nil {
		return nil, err
	}
	var out []Change
	err = merge(a, b, func(x, y *gitstore.TreeEntry) error {
		name := pick(x, y).Name
		ta, err := shardTasksOf(repo, name, x)
		if err != nil {
			return err
		}
		tb, err := shardTasksOf(repo, name, y)
		if err != nil {
			return err
		}
		cs, err := diffShard(repo, ta, tb)
		out = append(out, cs...)
		return err
	})
	return out, err
}

func pick(x, y *gitstore.TreeEntry) *gitstore.TreeEntry {
	if x != nil {
		return x
	}
	return y
}

// shardTasksOf is shardTasks of a shard that may be absent on one side.
func shardTasksOf(repo *gitstore.Repo, shard string, e *gitstore.TreeEntry) ([]taskRef, error) {
	if e == nil {
		return nil, nil
	}
	return shardTasks(repo, shard, e.ID)
}

// diffShard compares two versions of a shard's tasks.
func diffShard(repo *gitstore.Repo, a, b []taskRef) ([]Change, error) {
	ea, eb := make([]gitstore.TreeEntry, len(a)), make([]gitstore.TreeEntry, len(b))
	byName := map[string]taskRef{}
	for i, t := range a {
		ea[i] = t.tree
		byName["a"+t.tree.Name] = t
	}
	for i, t := range b {
		eb[i] = t.tree
		byName["b"+t.tree.Name] = t
	}
	var out []Change
	err := merge(ea, eb, func(x, y *gitstore.TreeEntry) error {
		var c Change
		if x != nil {
			e, err := readEntry(repo, byName["a"+x.Name])
			if err != nil {
				return err
			}
			c.Task, c.Old = e.Task, &e
		}
		if y != nil {
			e, err := readEntry(repo, byName["b"+y.Name])
			if err != nil {
				return err
			}
			c.Task, c.New = e.Task, &e
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// merge walks two trees' entries (each in git's order) together and calls
// fn for each name whose id differs, with nil for a side that lacks it.
func merge(a, b []gitstore.TreeEntry, fn func(x, y *gitstore.TreeEntry) error) error {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var x, y *gitstore.TreeEntry
		switch {
		case j == len(b) || i < len(a) && key(a[i]) < key(b[j]):
			x = &a[i]
			i++
		case i == len(a) || key(b[j]) < key(a[i]):
			y = &b[j]
			j++
		default:
			x, y = &a[i], &b[j]
			i, j = i+1, j+1
			if x.ID == y.ID {
				continue
			}
		}
		if err := fn(x, y); err != nil {
			return err
		}
	}
	return nil
}
