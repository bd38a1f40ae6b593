package remote

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The archive of ended tasks on a remote (docs/archive.md, Remotes). An
// archived task has no refs: its two chain heads are entries of its
// writer's archive, refs/bernstein/archive/<writer>, a per-writer ref that
// push and fetch move like a spine. What the remotes add:
//
//   - push deletes the remote's refs of a task the archives it leaves on
//     the remote name at that head or one extending it, each with the
//     remote's value as the expected old value, in the atomic push that
//     carries the archive (planDeletions);
//   - push does not send a task ref that an archive this host verified and
//     the remote holds names at that head or one extending it;
//   - fetch deletes a local task ref that an archive it moved names at the
//     same head or one extending it, unless the ref extends the entry (a
//     reopen here), compare-and-swap, with the moves (archivedLocal).

// archiveSet answers, for a set of archive commits, whether one of them
// names a task's chain at a given head or one extending it.
type archiveSet struct {
	s     *Syncer
	heads []gitstore.Oid
	found map[string][]archive.Entry // by task: its entries in heads
	// loaded: found holds every entry (preload), a task missing from it
	// has none.
	loaded      bool
	taskCovered map[string]bool // coversTask's answers
}

func (s *Syncer) archives(heads []gitstore.Oid) *archiveSet {
	return &archiveSet{s: s, heads: heads, found: map[string][]archive.Entry{}}
}

// entries are task's entries in the set's archives.
func (a *archiveSet) entries(task string) ([]archive.Entry, error) {
	if es, ok := a.found[task]; ok || a.loaded {
		return es, nil
	}
	var es []archive.Entry
	for _, h := range a.heads {
		e, ok, err := archive.Lookup(a.s.c.Objects, h, task)
		if archive.Unreadable(err) {
			continue // an archive that cannot be read covers nothing
		}
		if err != nil {
			return nil, err
		}
		if ok {
			es = append(es, e)
		}
	}
	a.found[task] = es
	return es, nil
}

// preload reads every entry of the set's archives at once (each shard and
// task tree once), for a caller about to ask of many tasks.
func (a *archiveSet) preload() error {
	all := map[string][]archive.Entry{}
	for _, h := range a.heads {
		var es []archive.Entry
		err := archive.List(a.s.c.Objects, h, func(e archive.Entry) error {
			es = append(es, e)
			return nil
		})
		if archive.Unreadable(err) {
			continue // an archive that cannot be read covers nothing
		}
		if err != nil {
			return err
		}
		for _, e := range es {
			all[e.Task] = append(all[e.Task], e)
		}
	}
	a.found = all
	a.loaded = true
	return nil
}

// covers reports whether an entry of the set names the chain of ref (a
// task's journal or ledger) at head or at a commit extending it: every
// commit of head is then kept by that archive, and the ref can go.
func (a *archiveSet) covers(ref string, head gitstore.Oid) (bool, error) {
	if len(a.heads) == 0 {
		return false, nil
	}
	in := DescribeRef(ref)
	if in.Kind != "journal" && in.Kind != "ledger" || in.Task == "" {
		return false, nil
	}
	es, err := a.entries(in.Task)
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if entryCovers(a.s, e, in.Kind, head) {
			return true, nil
		}
	}
	return false, nil
}

// entryCovers reports whether e names its kind's chain at head or at a
// commit extending it. A head that extends the entry (a reopen), one that
// diverged from it, or one whose history cannot be read, is not covered.
func entryCovers(s *Syncer, e archive.Entry, kind string, head gitstore.Oid) bool {
	at := e.Journal
	if kind == "ledger" {
		at = e.Ledger
	}
	if at == head {
		return true
	}
	if !s.c.Objects.Has(at) || !s.c.Objects.Has(head) {
		return false
	}
	r, err := s.relate(at, head)
	return err == nil && r.rel == relAhead
}

// isArchiveRef reports whether ref is a writer's archive.
func isArchiveRef(ref string) bool {
	return strings.HasPrefix(ref, refs.ArchivePrefix) && len(ref) > len(refs.ArchivePrefix)
}

// isTaskRef reports whether ref is a task's journal or ledger.
func isTaskRef(ref string) bool {
	in := DescribeRef(ref)
	return in.Task != "" && (in.Kind == "journal" || in.Kind == "ledger")
}

// deletionCost is the bytes of git push's command line a deletion takes:
// its refspec and its lease.
func deletionCost(u refs.Update) int {
	return 2*len(u.Ref) + 2*40 + 24
}

// sharedArchives are the heads of the local archive refs (in mine) that
// remote holds at the same head as last fetched or pushed: archives this
// host verified (fetched through the checks, or its own) and the remote
// has.
func sharedArchives(mine, tracking map[string]gitstore.Oid, remote string) []gitstore.Oid {
	var out []gitstore.Oid
	for _, name := range sortedKeys(mine) {
		if isArchiveRef(name) && !mine[name].IsZero() && tracking[TrackingRef(remote, name)] == mine[name] {
			out = append(out, mine[name])
		}
	}
	return out
}

// planDeletions adds to plan the deletion of each of the remote's task
// refs (as last fetched) that this host has no ref of and that an archive
// standing on the remote after this push names at that head or one
// extending it (this host archived the task), each with the remote's value
// as its expected old value: git push sends it as a lease, so a remote
// that moved the ref since (a reopen pushed from another host) keeps it.
// A push carries as many deletions as half its command line holds;
// res.more says that some were left for the next push.
func (s *Syncer) planDeletions(remote string, res *PushResult, mine, tracking map[string]gitstore.Oid, standing []gitstore.Oid, plan []refs.Update) ([]refs.Update, error) {
	if len(standing) == 0 {
		return plan, nil
	}
	prefix := TrackingPrefix(remote)
	var cands []refs.Update
	for _, t := range sortedKeys(tracking) {
		ref := refs.Prefix + strings.TrimPrefix(t, prefix)
		theirs := tracking[t]
		if !strings.HasPrefix(t, prefix) || !isTaskRef(ref) || !mine[ref].IsZero() || !s.c.Objects.Has(theirs) {
			continue
		}
		cands = append(cands, refs.Update{Ref: ref, Old: theirs})
	}
	if len(cands) == 0 {
		return plan, nil
	}
	ours := s.archives(standing)
	if len(cands) > 64 {
		if err := ours.preload(); err != nil {
			return nil, err
		}
	}
	// A task goes whole: its remote refs are deleted when this host has
	// no ref of it and every one of them is covered, else none is (a
	// reopen pushed from another host keeps the task a ref there).
	type taskDeletion struct {
		us  []refs.Update
		all bool
	}
	var tasks []string
	byTask := map[string]*taskDeletion{}
	for _, u := range cands {
		task := DescribeRef(u.Ref).Task
		td := byTask[task]
		if td == nil {
			td = &taskDeletion{all: mine[refs.Journal(task)].IsZero() && mine[refs.Ledger(task)].IsZero()}
			byTask[task] = td
			tasks = append(tasks, task)
		}
		ok, err := ours.covers(u.Ref, u.Old)
		if err != nil {
			return nil, err
		}
		td.all = td.all && ok
		td.us = append(td.us, u)
	}
	budget, added := s.pushBudget()/2, 0
	for _, task := range tasks {
		td := byTask[task]
		if !td.all {
			continue
		}
		for _, u := range td.us {
			budget -= deletionCost(u)
		}
		if budget < 0 && added > 0 { // one task at least: every push gets on
			res.more = true
			break
		}
		plan = append(plan, td.us...)
		added++
	}
	return plan, nil
}

// archivedTasks adds to tasks every task that an archive of the remote
// added or changed since before (its remote-tracking archive refs as they
// were before this fetch). ok is false past the narrow path's bounds.
func (s *Syncer) archivedTasks(remote string, before map[string]gitstore.Oid, tasks map[string]chains) (bool, error) {
	after, names, err := s.c.Refs.List(TrackingRef(remote, refs.ArchivePrefix))
	if err != nil {
		return false, err
	}
	for _, t := range names {
		if after[t] == before[t] {
			continue
		}
		changes, err := archive.Diff(s.c.Objects, before[t], after[t])
		if err != nil {
			// The checks refuse that archive (nothing moves from it); its
			// tasks are not named.
			continue
		}
		for _, c := range changes {
			if c.New != nil {
				tasks[c.Task] = chains{journal: true, ledger: true}
			}
		}
		if len(tasks) > maxNarrowTasks {
			return false, nil
		}
	}
	return true, nil
}

// archivedLocal is the deletion of the local refs of each task that an
// archive ref the fetch moves names at the same heads or ones extending
// them: the archive then keeps every commit of those refs, and the task
// reads from it. A task goes whole or not at all: when one of its refs
// extends its entry (a reopen here) or diverged from it, or the fetch
// creates or moves one of them (the remote holds it as a ref), both stay.
// The deletions are compare-and-swap from the refs' values as read under
// the writer lock, applied with the moves. Only archive moves that passed
// the checks count: an archive held back deletes nothing.
func (s *Syncer) archivedLocal(p *fetchPlan, moves []refs.Update) ([]refs.Update, error) {
	view := p.view
	if view == nil {
		view = p.local
	}
	moved := map[string]bool{}
	for _, u := range moves {
		moved[u.Ref] = true
	}
	var dels []refs.Update
	seen := map[string]bool{}
	for _, u := range moves {
		if !isArchiveRef(u.Ref) || u.New.IsZero() {
			continue
		}
		changes, err := archive.Diff(s.c.Objects, u.Old, u.New)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", u.Ref, err)
		}
		for _, c := range changes {
			if c.New == nil || seen[c.Task] {
				continue
			}
			seen[c.Task] = true
			task, err := s.coveredTask(view, *c.New, moved)
			if err != nil {
				return nil, err
			}
			dels = append(dels, task...)
		}
	}
	return dels, nil
}

// coveredTask is the deletion of e's task's local refs when every one of
// them is covered by e and none is in moved; none otherwise.
func (s *Syncer) coveredTask(view refs.Source, e archive.Entry, moved map[string]bool) ([]refs.Update, error) {
	var out []refs.Update
	for _, kind := range []string{"journal", "ledger"} {
		ref := refs.Journal(e.Task)
		if kind == "ledger" {
			ref = refs.Ledger(e.Task)
		}
		if moved[ref] {
			return nil, nil
		}
		mine, err := view.ReadOptional(ref)
		if err != nil {
			return nil, err
		}
		if mine.IsZero() {
			continue
		}
		if !entryCovers(s, e, kind, mine) {
			return nil, nil // a reopen here, or a divergence: the task stays
		}
		out = append(out, refs.Update{Ref: ref, Old: mine})
	}
	return out, nil
}

// coversTask reports whether the set (archives the remote holds as this
// host does) archived task as this host has it: the remote has no ref of
// it and every local ref of it (in mine) is covered. A task one of whose refs
// here extends its entry (a reopen) is this host's to push, whole.
func (a *archiveSet) coversTask(task string, mine, tracking map[string]gitstore.Oid, remote string) (bool, error) {
	if len(a.heads) == 0 {
		return false, nil
	}
	if v, ok := a.taskCovered[task]; ok {
		return v, nil
	}
	all := true
	for _, ref := range []string{refs.Journal(task), refs.Ledger(task)} {
		if !tracking[TrackingRef(remote, ref)].IsZero() {
			all = false
			break
		}
		if head := mine[ref]; !head.IsZero() {
			ok, err := a.covers(ref, head)
			if err != nil {
				return false, err
			}
			all = all && ok
		}
	}
	if a.taskCovered == nil {
		a.taskCovered = map[string]bool{}
	}
	a.taskCovered[task] = all
	return all, nil
}

// LeftOut is a local ref push did not send, and why: an archive ref that
// cannot be read as its writer's archive (docs/archive.md, Remotes).
type LeftOut struct {
	RefInfo
	Commit string `json:"commit"` // the local ref's value
	Reason string `json:"reason"`
}

// unsendableArchive says why the archive ref at head cannot go to a
// remote whose copy of it (as last fetched or pushed) is theirs: its
// commits since theirs (since its root when theirs is unknown here or not
// in its history) fail the checks the remote's guard makes of an archive
// (verify.ArchiveChain: the chain, the record's writer, the signature, the
// tree, the parents, the heads), a missing pin aside. "" when it can go.
// Plain git can point an archive ref anywhere; a guard refuses such a ref,
// and with it the whole atomic push, so push leaves it out and sends the
// rest.
func (s *Syncer) unsendableArchive(ref string, head, theirs gitstore.Oid, view refs.Source) (string, error) {
	writer := strings.TrimPrefix(ref, refs.ArchivePrefix)
	if refs.ValidateWriter(writer) != nil {
		return fmt.Sprintf("%q is not a writer's name", writer), nil
	}
	base := gitstore.ZeroOid
	if !theirs.IsZero() && s.c.Objects.Has(theirs) {
		a, err := s.relate(head, theirs)
		if err != nil {
			return "", fmt.Errorf("%s: %w", ref, err)
		}
		switch a.rel {
		case relSame, relBehind:
			return "", nil // nothing of it is sent
		case relAhead:
			base = theirs
		}
	}
	trust, err := s.c.Trust()
	if err != nil {
		return "", err
	}
	env := &verify.Env{Objects: s.c.Objects, Refs: view, Trust: trust}
	res := verify.ArchiveChain{Env: env, RepoID: s.c.IdentityID(), Ref: ref, Writer: writer, Base: "the remote's head"}.Verify(base, head)
	if res.OK() {
		return "", nil
	}
	for _, p := range res.Problems {
		if !p.Unverifiable {
			return p.Check + ": " + p.Reason, nil
		}
	}
	return "it cannot be read as an archive", nil
}
