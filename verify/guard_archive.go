package verify

import (
	"fmt"
	"sort"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// checkArchives verifies each archive ref update's commits (ArchiveChain),
// then takes the task chains they move as moved refs: a task ref deleted
// is accepted only when an archive, after the update, names its chain at
// the deleted head or one extending it, and the rows an archive entry adds
// beyond what the refs held are walked and checked as a push's rows are.
// It reports whether it added such segments.
func (c *checker) checkArchives() bool {
	after := map[string]gitstore.Oid{} // each archive ref's usable head after the update
	if vals, names, err := c.g.Refs.List(refs.ArchivePrefix); err == nil {
		for _, n := range names {
			after[n] = vals[n]
		}
	}
	net := map[string]map[string]archive.Change{} // archive ref -> task -> change since the base
	for _, s := range c.segs {
		if s.kind != kindArchive {
			continue
		}
		ac := ArchiveChain{Env: c.env, RepoID: c.binding.ID, Ref: s.u.Ref, Writer: s.writer, Base: c.g.base(), Rewind: c.g.rewind()}
		res := ac.Verify(s.u.Old, s.u.New)
		s.archive = res
		c.res.Stats.Commits += res.Read
		c.res.Problems = append(c.res.Problems, res.Problems...)
		s.ok = res.OK()
		head, changes := usable(s.u.Old, res)
		after[s.u.Ref] = head
		net[s.u.Ref] = changes
	}
	added := len(c.segs)
	for _, d := range c.deleted {
		c.checkDeletion(d, after)
	}
	c.takeEntries(after, net)
	for _, s := range c.segs[added:] {
		c.walk(s)
	}
	return len(c.segs) > added
}

// usable is the last commit of a verified archive chain whose entries may
// be used (the base when none), and the net change of each task from the
// base to it.
func usable(base gitstore.Oid, res *ArchiveResult) (gitstore.Oid, map[string]archive.Change) {
	head := base
	net := map[string]archive.Change{}
	if res.Broken {
		return head, net
	}
	for _, cm := range res.Commits {
		if cm.Bad {
			break
		}
		head = cm.ID
		for _, ch := range cm.Changes {
			n, seen := net[ch.Task]
			if !seen {
				n.Task, n.Old = ch.Task, ch.Old
			}
			n.New = ch.New
			net[ch.Task] = n
		}
	}
	return head, net
}

// entryHeads is what the archives after the update hold for task: each
// archive ref with its entry.
func (c *checker) entryHeads(task string, after map[string]gitstore.Oid) map[string]archive.Entry {
	out := map[string]archive.Entry{}
	for ref, head := range after {
		if head.IsZero() {
			continue
		}
		e, ok, err := archive.Lookup(c.g.Objects, head, task)
		if err == nil && ok {
			out[ref] = e
		}
	}
	return out
}

func entryHead(e archive.Entry, kind string) gitstore.Oid {
	if kind == kindLedger {
		return e.Ledger
	}
	return e.Journal
}

// checkDeletion accepts the deletion of a task ref when an archive names
// the chain at the deleted head, and takes the chain to an archive's head
// that is not the deleted one as a move of the ref (walked: it must extend
// the deleted head).
func (c *checker) checkDeletion(d *segment, after map[string]gitstore.Oid) {
	es := c.entryHeads(d.task, after)
	var names []string
	for ref := range es {
		names = append(names, ref)
	}
	sort.Strings(names)
	var best string
	bestPos := int64(-1)
	for _, ref := range names {
		h := entryHead(es[ref], d.kind)
		if h == d.u.Old {
			// The archive holds the chain where the ref did: after the
			// update, the chain's head is still that commit.
			c.updates[d.u.Ref] = Update{Ref: d.u.Ref, Old: d.u.Old, New: d.u.Old}
			return
		}
		if pos, ok := c.rowPos(h); ok && pos > bestPos {
			best, bestPos = ref, pos
		}
	}
	if best == "" {
		c.problem(Problem{Ref: d.u.Ref, Task: d.task, Check: "deletion",
			Reason: fmt.Sprintf("%s deletes %s (at %s), and no archive (refs/bernstein/archive/*) names task %s's %s at that head or one extending it: a task's refs are deleted only when it is archived", c.g.change(), d.u.Ref, short(d.u.Old), d.task, d.kind)})
		return
	}
	c.move(d, best, entryHead(es[best], d.kind))
}

// move adds the segment of a task chain that an archive entry takes from
// old (the ref's head) to head.
func (c *checker) move(d *segment, via string, head gitstore.Oid) {
	u := Update{Ref: d.u.Ref, Old: d.u.Old, New: head}
	c.updates[u.Ref] = u
	c.segs = append(c.segs, &segment{u: u, kind: d.kind, task: d.task, via: via})
}

// rowPos is the index of the journal or ledger row commit id holds.
func (c *checker) rowPos(id gitstore.Oid) (int64, bool) {
	cc, err := c.read(id)
	if err != nil {
		return 0, false
	}
	row, err := record.ParseRow(cc.Record)
	return row.Index, err == nil
}

// takeEntries checks what the archive updates change for tasks whose refs
// the update leaves alone: an entry added or moved whose chain no ref
// holds is walked from what the base held (the ref, or the archive's
// previous entry, or nothing); an entry dropped must leave a ref that holds
// its chain.
func (c *checker) takeEntries(after map[string]gitstore.Oid, net map[string]map[string]archive.Change) {
	var archives []string
	for ref := range net {
		archives = append(archives, ref)
	}
	sort.Strings(archives)
	for _, via := range archives {
		var tasks []string
		for t := range net[via] {
			tasks = append(tasks, t)
		}
		sort.Strings(tasks)
		for _, t := range tasks {
			ch := net[via][t]
			for _, kind := range []string{kindJournal, kindLedger} {
				c.takeEntry(via, kind, ch, after)
			}
		}
	}
}

func (c *checker) takeEntry(via, kind string, ch archive.Change, after map[string]gitstore.Oid) {
	ref := refs.Journal(ch.Task)
	if kind == kindLedger {
		ref = refs.Ledger(ch.Task)
	}
	if _, moved := c.updates[ref]; moved {
		return // the ref's own update (or its deletion) covers it
	}
	cur, err := c.g.Refs.ReadOptional(ref)
	if err != nil {
		return
	}
	if ch.New == nil {
		// The entry is dropped: a ref, or another archive, must still hold
		// the chain at its head or one extending it.
		old := entryHead(*ch.Old, kind)
		if !cur.IsZero() && c.extends(cur, old) {
			return
		}
		for ref, e := range c.entryHeads(ch.Task, after) {
			if ref != via && c.extends(entryHead(e, kind), old) {
				return
			}
		}
		c.problem(Problem{Ref: via, Task: ch.Task, Check: CheckArchiveTree,
			Reason: fmt.Sprintf("%s drops task %s, whose %s (at %s) no ref and no other archive then holds: the task would be lost", via, ch.Task, kind, short(old))})
		return
	}
	head := entryHead(*ch.New, kind)
	from := cur
	if from.IsZero() && ch.Old != nil {
		from = entryHead(*ch.Old, kind)
	}
	if head == from || !cur.IsZero() && !c.extends(head, cur) {
		// Nothing new, or a ref that holds the chain further (a reopened
		// task): the ref is the head, checked as refs are.
		return
	}
	c.move(&segment{u: Update{Ref: ref, Old: from}, kind: kind, task: ch.Task}, via, head)
}

// extends reports whether chain commit a is b or extends it: b is a's
// ancestor by first parents, as far back as their rows' indexes differ.
func (c *checker) extends(a, b gitstore.Oid) bool {
	if a == b {
		return true
	}
	ia, ok := c.rowPos(a)
	ib, ok2 := c.rowPos(b)
	if !ok || !ok2 || ia < ib {
		return false
	}
	id := a
	for i := ia; i > ib; i-- {
		c.res.Stats.Commits++
		cc, err := chain.Read(c.g.Objects, id)
		if err != nil || len(cc.Commit.Parents) == 0 {
			return false
		}
		id = cc.Commit.Parents[0]
	}
	return id == b
}
