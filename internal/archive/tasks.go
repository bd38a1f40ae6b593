package archive

import "github.com/bernstein/bernstein/gitstore"

// Tasks calls fn with the id of every task archive commit commit holds,
// shard by shard in the tree's order, reading the root, the tree of shards
// and each shard (checked as List checks them) but no task's tree: what a
// listing reads to choose a page.
func Tasks(repo *gitstore.Repo, commit gitstore.Oid, fn func(task string) error) error {
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
			if err := fn(t.task); err != nil {
				return err
			}
		}
	}
	return nil
}
