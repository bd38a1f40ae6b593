package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
)

// buildArchive archives the first ended tasks, batch a commit, through
// internal/archive: each commit's trees from archive.Build over the previous
// commit's tree, its parents from archive.Parents, a record naming the
// tasks in its message, its objects written as one pack through gitstore,
// as a write transaction would.
func (b *bench) buildArchive(p *protoRepo, ended, batch int) error {
	repo, err := gitstore.Open(filepath.Join(p.src, "objects"))
	if err != nil {
		return err
	}
	defer repo.Close()
	t0 := time.Now()
	var build time.Duration
	var prev, prevTree gitstore.Oid
	var treeBytes, trees, commits int
	for s := 0; s < ended; s += batch {
		add, rec, err := p.archiveBatch(s, min(ended, s+batch))
		if err != nil {
			return err
		}
		tb := time.Now()
		root, objs, err := archive.Build(repo, prevTree, archive.Update{Add: add})
		if err != nil {
			return err
		}
		id := gitstore.Ident("b", "b@example.org", 1700000000)
		c := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(gitstore.Commit{
			Tree: root, Parents: archive.Parents(prev, add), Author: id, Committer: id, Message: append([]byte("archive\n\n"), rec...),
		}))
		build += time.Since(tb)
		if _, err := repo.WritePack(append(objs, c)); err != nil {
			return err
		}
		treeBytes, trees = 0, 0
		for _, o := range objs {
			if o.Type == gitstore.TypeTree {
				treeBytes, trees = treeBytes+len(o.Data), trees+1
			}
		}
		if !prev.IsZero() {
			p.prev = prev.String()
		}
		prev, prevTree, p.lastN = c.ID, root, len(add)
		commits++
	}
	p.arch = prev.String()
	b.printf("  %d of them archived in %d commits of %d through internal/archive: %s (archive.Build and the commits: %s; the rest is writing one synced pack a commit)\n",
		ended, commits, batch, time.Since(t0).Round(time.Millisecond), build.Round(time.Millisecond))
	b.printf("  the last commit, at %d archived tasks, wrote %d trees of %d bytes (the touched shards, the tasks' trees, t/ and the root)\n",
		ended, trees, treeBytes)
	return nil
}

// archiveBatch is tasks s to e as archive entries, with a record naming them
// (the commit's message, as an archive commit carries its record).
func (p *protoRepo) archiveBatch(s, e int) ([]archive.Entry, []byte, error) {
	var add []archive.Entry
	var rec strings.Builder
	for i := s; i < e; i++ {
		j, err := gitstore.ParseOid(p.heads[protoRef("journal", i)])
		if err != nil {
			return nil, nil, err
		}
		l, err := gitstore.ParseOid(p.heads[protoRef("ledger", i)])
		if err != nil {
			return nil, nil, err
		}
		task := fmt.Sprintf("T-%d", i)
		add = append(add, archive.Entry{Task: task, Journal: j, Ledger: l})
		fmt.Fprintf(&rec, "%s journal %s ledger %s\n", task, j, l)
	}
	return add, []byte(rec.String()), nil
}

// checkArchiveReads reads the archive back through the package: Lookup of
// an archived task gives its journal head, List every archived task once,
// Diff of the last commit the tasks it added; and times List and Diff.
func (b *bench) checkArchiveReads(p *protoRepo, ended int) error {
	repo, err := gitstore.Open(filepath.Join(p.src, "objects"))
	if err != nil {
		return err
	}
	defer repo.Close()
	head, err := gitstore.ParseOid(p.arch)
	if err != nil {
		return err
	}
	e, ok, err := archive.Lookup(repo, head, "T-0")
	if err != nil || !ok || e.Journal.String() != p.sample {
		b.fail("archive: Lookup(T-0) = %s, %v, %v; want %s", e.Journal, ok, err, p.sample)
	}
	t0 := time.Now()
	seen := map[string]bool{}
	err = archive.List(repo, head, func(e archive.Entry) error {
		if seen[e.Task] || e.Journal.String() != p.heads["refs/bernstein/journal/"+e.Task] || e.Ledger.String() != p.heads["refs/bernstein/ledger/"+e.Task] {
			return fmt.Errorf("List: %s listed twice or at other heads", e.Task)
		}
		seen[e.Task] = true
		return nil
	})
	list := time.Since(t0)
	if err != nil || len(seen) != ended {
		b.fail("archive: List gave %d of %d tasks: %v", len(seen), ended, err)
	}
	var prev gitstore.Oid
	if p.prev != "" {
		if prev, err = gitstore.ParseOid(p.prev); err != nil {
			return err
		}
	}
	t1 := time.Now()
	cs, err := archive.Diff(repo, prev, head)
	diff := time.Since(t1)
	if err != nil || len(cs) != p.lastN {
		b.fail("archive: Diff of the last archive commit gave %d changes, want %d (%v)", len(cs), p.lastN, err)
	}
	b.printf("  in-process through internal/archive: List of %d archived tasks %s; Diff of the last commit (%d tasks added) %s\n",
		ended, list.Round(time.Microsecond), len(cs), diff.Round(time.Microsecond))
	return nil
}
