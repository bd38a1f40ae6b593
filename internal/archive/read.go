package archive

import (
	"fmt"
	"sort"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// key is an entry's place in git's tree order.
func key(e gitstore.TreeEntry) string {
	if e.IsTree() {
		return e.Name + "/"
	}
	return e.Name
}

// readTree reads and parses tree id and checks that its entries are in
// git's order with no name twice (a reader that stopped at the first match
// and one that read them all would otherwise disagree).
func readTree(repo *gitstore.Repo, id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	typ, data, err := repo.Read(id)
	if err != nil {
		return nil, fmt.Errorf("archive tree %s: %w", id, err)
	}
	if typ != gitstore.TypeTree {
		return nil, malformed(id, "it is a %s, not a tree", typ)
	}
	es, err := gitstore.ParseTree(data)
	if err != nil {
		return nil, malformed(id, "%v", err)
	}
	for i := 1; i < len(es); i++ {
		if key(es[i-1]) >= key(es[i]) || es[i-1].Name == es[i].Name {
			return nil, malformed(id, "entries %q and %q are out of git's order or repeated", es[i-1].Name, es[i].Name)
		}
	}
	return es, nil
}

// rootOf reads an archive commit and its root tree, checks the root's shape
// (only t, a tree, or nothing when the archive is empty)
// and returns the commit's tree and the tree of shards (zero when empty).
func rootOf(repo *gitstore.Repo, commit gitstore.Oid) (root, shards gitstore.Oid, err error) {
	if commit.IsZero() {
		return root, shards, nil
	}
	typ, data, err := repo.Read(commit)
	if err != nil {
		return root, shards, fmt.Errorf("archive commit %s: %w", commit, err)
	}
	if typ != gitstore.TypeCommit {
		return root, shards, &MalformedError{Tree: commit, Commit: true, What: fmt.Sprintf("it is a %s, not a commit", typ)}
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return root, shards, &MalformedError{Tree: commit, Commit: true, What: err.Error()}
	}
	shards, err = shardsDir(repo, c.Tree)
	return c.Tree, shards, err
}

// shardsDir checks root tree id's shape and returns its t entry.
func shardsDir(repo *gitstore.Repo, id gitstore.Oid) (gitstore.Oid, error) {
	es, err := readTree(repo, id)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	var shards gitstore.Oid
	for _, e := range es {
		if e.Name != TasksDir || e.Mode != gitstore.ModeTree {
			return gitstore.ZeroOid, malformed(id, "the root holds %q (mode %s): an archive root holds only the tree %s/", e.Name, e.Mode, TasksDir)
		}
		shards = e.ID
	}
	return shards, nil
}

// shardList reads the tree of shards (none when id is zero) and checks that
// every entry is a non-empty tree named by two lowercase hex digits.
func shardList(repo *gitstore.Repo, id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if id.IsZero() {
		return nil, nil
	}
	es, err := readTree(repo, id)
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return nil, malformed(id, "%s/ is empty (an archive with no task has no %s/)", TasksDir, TasksDir)
	}
	for _, e := range es {
		if !isShardName(e.Name) || e.Mode != gitstore.ModeTree {
			return nil, malformed(id, "%s/%s (mode %s) is not a shard: a shard is a tree named by two lowercase hex digits", TasksDir, e.Name, e.Mode)
		}
	}
	return es, nil
}

func isShardName(s string) bool {
	if len(s) != 2 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// taskRef is one task's entry in a shard tree, its name checked.
type taskRef struct {
	task string
	tree gitstore.TreeEntry
}

// shardTasks reads shard tree id and checks that each entry is a tree named
// by an escaped task id whose shard is this one.
func shardTasks(repo *gitstore.Repo, shard string, id gitstore.Oid) ([]taskRef, error) {
	es, err := readTree(repo, id)
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return nil, malformed(id, "shard %s is empty", shard)
	}
	out := make([]taskRef, len(es))
	for i, e := range es {
		if out[i], err = checkTaskName(id, shard, e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func checkTaskName(shardTree gitstore.Oid, shard string, e gitstore.TreeEntry) (taskRef, error) {
	task, err := refs.UnescapeTask(e.Name)
	if err != nil {
		return taskRef{}, malformed(shardTree, "%s/%s/%s is not an escaped task id: %v", TasksDir, shard, e.Name, err)
	}
	if e.Mode != gitstore.ModeTree {
		return taskRef{}, malformed(shardTree, "%s/%s/%s has mode %s, not a tree", TasksDir, shard, e.Name, e.Mode)
	}
	if got := Shard(task); got != shard {
		return taskRef{}, malformed(shardTree, "task %q is under shard %s; its shard is %s", task, shard, got)
	}
	return taskRef{task: task, tree: e}, nil
}

// readEntry reads a task's tree: exactly the gitlinks journal and ledger.
func readEntry(repo *gitstore.Repo, t taskRef) (Entry, error) {
	es, err := readTree(repo, t.tree.ID)
	if err != nil {
		return Entry{}, err
	}
	if len(es) != 2 || !isLink(es[0], JournalLink) || !isLink(es[1], LedgerLink) {
		return Entry{}, malformed(t.tree.ID, "task %q's tree holds %s; want exactly the gitlinks %s and %s", t.task, describe(es), JournalLink, LedgerLink)
	}
	return Entry{Task: t.task, Journal: es[0].ID, Ledger: es[1].ID}, nil
}

func isLink(e gitstore.TreeEntry, name string) bool {
	return e.Name == name && e.Mode == gitstore.ModeGitlink && !e.ID.IsZero()
}

func describe(es []gitstore.TreeEntry) string {
	if len(es) == 0 {
		return "nothing"
	}
	s := ""
	for i, e := range es {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s (mode %s, %s)", e.Name, e.Mode, e.ID)
	}
	return s
}

// find returns the entry named name in es, sorted in git's order, all of
// kind tree (the shard and task levels).
func find(es []gitstore.TreeEntry, name string) (gitstore.TreeEntry, bool) {
	k := name + "/"
	i := sort.Search(len(es), func(i int) bool { return key(es[i]) >= k })
	if i < len(es) && es[i].Name == name {
		return es[i], true
	}
	return gitstore.TreeEntry{}, false
}

// Lookup returns the entry of task in archive commit commit, and false when
// the archive does not hold it. It reads the commit, the root, the tree of
// shards, the task's shard and the task's tree, and checks each.
func Lookup(repo *gitstore.Repo, commit gitstore.Oid, task string) (Entry, bool, error) {
	if err := refs.ValidateTaskID(task); err != nil {
		return Entry{}, false, err
	}
	_, dir, err := rootOf(repo, commit)
	if err != nil {
		return Entry{}, false, err
	}
	shards, err := shardList(repo, dir)
	if err != nil {
		return Entry{}, false, err
	}
	shard := Shard(task)
	se, ok := find(shards, shard)
	if !ok {
		return Entry{}, false, nil
	}
	tasks, err := shardTasks(repo, shard, se.ID)
	if err != nil {
		return Entry{}, false, err
	}
	name := refs.EscapeTask(task)
	for _, t := range tasks {
		if t.tree.Name == name {
			e, err := readEntry(repo, t)
			return e, err == nil, err
		}
	}
	return Entry{}, false, nil
}

// List calls fn with every entry of archive commit commit, shard by shard in
// the tree's order, checking every tree it reads; it stops at fn's first
// error and returns it.
func List(repo *gitstore.Repo, commit gitstore.Oid, fn func(Entry) error) error {
	_, dir, err := rootOf(repo, commit)
	if err != nil {
		return err
	}
	shards, err := shardList(repo, dir)
	if err != nil {
		return err
	}
	for _, s := range shards {
		tasks, err := shardTasks(repo, s.Name, s.ID)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			e, err := readEntry(repo, t)
			if err != nil {
				return err
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}
