package archive

import (
	"fmt"
	"sort"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// Update is what one archive commit changes: the entries it adds (a task
// already archived takes the new heads) and the tasks it removes. The
// commit's record lives in its message, the caller's part.
type Update struct {
	Add    []Entry
	Remove []string
}

// Build returns the root tree of the archive commit that applies u to the
// archive whose root tree is prev (zero: the empty archive), with every
// object it needs that prev's tree does not hold: the tree of each task
// added, the trees of the shards it touches,
// the tree of shards and the root (holding only t/, or the empty tree when
// no task is left), root last. It reads prev's root, its
// tree of shards and the shards it touches, and nothing else, so an update
// costs the shards it touches, not the whole archive. It checks u and every
// tree it reads; the task trees it carries over it does not read (a caller
// builds on an archive commit it has verified, its own).
func Build(repo *gitstore.Repo, prev gitstore.Oid, u Update) (gitstore.Oid, []gitstore.Object, error) {
	touched, err := groupUpdate(u)
	if err != nil {
		return gitstore.ZeroOid, nil, err
	}
	var dir gitstore.Oid
	if !prev.IsZero() {
		if dir, err = shardsDir(repo, prev); err != nil {
			return gitstore.ZeroOid, nil, err
		}
	}
	shards, err := shardList(repo, dir)
	if err != nil {
		return gitstore.ZeroOid, nil, err
	}
	var objs []gitstore.Object
	byShard := map[string]gitstore.Oid{}
	for _, s := range shards {
		byShard[s.Name] = s.ID
	}
	names := make([]string, 0, len(touched))
	for name := range touched {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		id, made, err := buildShard(repo, name, byShard, touched[name])
		if err != nil {
			return gitstore.ZeroOid, nil, err
		}
		objs = append(objs, made...)
		if id.IsZero() {
			delete(byShard, name)
		} else {
			byShard[name] = id
		}
	}
	var rootEs []gitstore.TreeEntry
	if len(byShard) > 0 {
		es := make([]gitstore.TreeEntry, 0, len(byShard))
		for name, id := range byShard {
			es = append(es, gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: name, ID: id})
		}
		t := gitstore.NewObject(gitstore.TypeTree, gitstore.EncodeTree(es))
		objs = append(objs, t)
		rootEs = append(rootEs, gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: TasksDir, ID: t.ID})
	}
	root := gitstore.NewObject(gitstore.TypeTree, gitstore.EncodeTree(rootEs))
	return root.ID, append(objs, root), nil
}

// shardUpdate is an update's part in one shard: the entries added (by
// escaped name) and the escaped names removed.
type shardUpdate struct {
	add    map[string]Entry
	remove map[string]string // escaped name -> task
}

// groupUpdate checks u and splits it by shard.
func groupUpdate(u Update) (map[string]*shardUpdate, error) {
	if len(u.Add) > MaxAdd {
		return nil, fmt.Errorf("archive update adds %d tasks; one archive commit adds at most %d", len(u.Add), MaxAdd)
	}
	out := map[string]*shardUpdate{}
	seen := map[string]bool{}
	at := func(task string) (*shardUpdate, error) {
		if err := refs.ValidateTaskID(task); err != nil {
			return nil, fmt.Errorf("archive update: %w", err)
		}
		if seen[task] {
			return nil, fmt.Errorf("archive update names task %q twice", task)
		}
		seen[task] = true
		s := out[Shard(task)]
		if s == nil {
			s = &shardUpdate{add: map[string]Entry{}, remove: map[string]string{}}
			out[Shard(task)] = s
		}
		return s, nil
	}
	for _, e := range u.Add {
		s, err := at(e.Task)
		if err != nil {
			return nil, err
		}
		if e.Journal.IsZero() || e.Ledger.IsZero() {
			return nil, fmt.Errorf("archive update: task %q has a zero head", e.Task)
		}
		s.add[refs.EscapeTask(e.Task)] = e
	}
	for _, task := range u.Remove {
		s, err := at(task)
		if err != nil {
			return nil, err
		}
		s.remove[refs.EscapeTask(task)] = task
	}
	return out, nil
}

// buildShard applies su to shard name (its tree in byShard, if any) and
// returns the new shard tree's id (zero when it is left empty) with the new
// objects: the added tasks' trees and the shard tree.
func buildShard(repo *gitstore.Repo, name string, byShard map[string]gitstore.Oid, su *shardUpdate) (gitstore.Oid, []gitstore.Object, error) {
	es := map[string]gitstore.Oid{}
	if id, ok := byShard[name]; ok {
		tasks, err := shardTasks(repo, name, id)
		if err != nil {
			return gitstore.ZeroOid, nil, err
		}
		for _, t := range tasks {
			es[t.tree.Name] = t.tree.ID
		}
	}
	for esc, task := range su.remove {
		if _, ok := es[esc]; !ok {
			return gitstore.ZeroOid, nil, fmt.Errorf("archive update removes task %q, which the archive does not hold", task)
		}
		delete(es, esc)
	}
	added := make([]string, 0, len(su.add))
	for esc := range su.add {
		added = append(added, esc)
	}
	sort.Strings(added)
	var objs []gitstore.Object
	for _, esc := range added {
		o := taskTree(su.add[esc])
		objs = append(objs, o)
		es[esc] = o.ID
	}
	if len(es) == 0 {
		return gitstore.ZeroOid, objs, nil
	}
	list := make([]gitstore.TreeEntry, 0, len(es))
	for esc, id := range es {
		list = append(list, gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: esc, ID: id})
	}
	o := gitstore.NewObject(gitstore.TypeTree, gitstore.EncodeTree(list))
	return o.ID, append(objs, o), nil
}
