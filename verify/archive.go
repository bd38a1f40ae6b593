package verify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// kindArchive is refs/bernstein/archive/<writer>: the writer's archive of
// ended tasks (docs/archive.md).
const kindArchive = "archive"

// Checks of an archive chain.
const (
	CheckArchiveChain     = "archive_chain"     // seq, prev, the record's writer, the first parent
	CheckArchiveSignature = "archive_signature" // the writer's pinned key signed the commit
	CheckArchiveTree      = "archive_tree"      // the tree is the previous one plus add minus remove
	CheckArchiveParents   = "archive_parents"   // the parents are archive.Parents of the previous commit and add
	CheckArchiveRows      = "archive_rows"      // the row counts are the heads' positions plus one
	CheckArchiveSealed    = "archive_sealed"    // each added ledger ends in a terminal transition
)

// ArchiveChain is one archive ref to verify: its commits from a verified
// base (zero: the chain's root) to a head.
type ArchiveChain struct {
	// Env gives the objects and the keys the signatures are checked
	// against (Trust, Published).
	Env *Env
	// RepoID is the identity the chain's first record is rooted in.
	RepoID string
	Ref    string
	Writer string
	// Base names the base head in reasons ("" : "the verified head").
	Base string
	// Rewind says what a head that does not extend the base is.
	Rewind string
}

// ArchiveCommit is one commit of an archive chain, as read.
type ArchiveCommit struct {
	ID      gitstore.Oid
	Record  record.Archive
	Changes []archive.Change // what its tree changes from the previous commit's
	Proof   chain.Proof
	// Bad is set when a check failed at this commit (a missing pin is not
	// one): its entries, and those of every commit after it, are not to be
	// used.
	Bad bool
}

// ArchiveResult is what verifying an archive chain found.
type ArchiveResult struct {
	Commits  []ArchiveCommit // oldest first: those the walk read back to the base
	Problems []Problem
	Read     int  // commits read (archive commits and the chains' heads)
	Broken   bool // the chain itself does not extend the base or does not chain
}

// OK reports whether every commit passed, a missing pin aside.
func (r *ArchiveResult) OK() bool {
	if r.Broken {
		return false
	}
	for _, c := range r.Commits {
		if c.Bad {
			return false
		}
	}
	return true
}

// Verify checks every commit of the chain from base (excluded; zero: from
// the root) to head: the writer's signature, the record (its writer, seq
// running on by one, prev the previous record's hash or, first, the
// genesis that binds the repository), the tree (the previous commit's
// plus the record's add minus its remove, exactly: archive.Diff), the
// parents (archive.Parents of the previous commit and add), and for each
// task added its heads' row counts and its ledger's terminal transition.
// What it reads follows the commits added: the base's tree was checked
// when the base was.
func (a ArchiveChain) Verify(base, head gitstore.Oid) *ArchiveResult {
	w := &archiveWalk{a: a, res: &ArchiveResult{}}
	if base == head {
		return w.res
	}
	baseSeq, baseHash := int64(-1), record.Hash("")
	if !base.IsZero() {
		cc, rec, err := w.read(base)
		if err != nil {
			w.broken(nil, fmt.Sprintf("%s %s: %v", a.base(), short(base), err))
			return w.res
		}
		baseSeq, baseHash = rec.Seq, record.Sum(cc.Record)
	}
	list, ok := w.walk(base, head, baseSeq)
	if !ok {
		return w.res
	}
	prev, prevHash := base, baseHash
	for i := range list {
		c := &list[i]
		w.check(c.cc, &c.ArchiveCommit, prev, prevHash)
		prev, prevHash = c.ID, record.Sum(c.cc.Record)
		w.res.Commits = append(w.res.Commits, c.ArchiveCommit)
	}
	// A bad commit's successors build on it: none of their entries count.
	bad := false
	for i := range w.res.Commits {
		bad = bad || w.res.Commits[i].Bad
		w.res.Commits[i].Bad = bad
	}
	return w.res
}

func (a ArchiveChain) base() string {
	if a.Base != "" {
		return a.Base
	}
	return "the verified head"
}

type archiveWalk struct {
	a   ArchiveChain
	res *ArchiveResult
}

// walked is one commit read by the walk, with its raw commit.
type walked struct {
	ArchiveCommit
	cc chain.Commit
}

func (w *archiveWalk) read(id gitstore.Oid) (chain.Commit, record.Archive, error) {
	w.res.Read++
	cc, err := chain.ReadAnchor(w.a.Env.Objects, id)
	if err != nil {
		return cc, record.Archive{}, err
	}
	rec, err := record.ParseArchive(cc.Record)
	return cc, rec, err
}

func (w *archiveWalk) problem(c *ArchiveCommit, check, reason string) {
	p := Problem{Ref: w.a.Ref, Writer: w.a.Writer, Chain: kindArchive, Check: check, Reason: reason}
	if c != nil {
		p.Index = i64(c.Record.Seq)
		c.Bad = true
	}
	w.res.Problems = append(w.res.Problems, p)
}

func (w *archiveWalk) broken(c *ArchiveCommit, reason string) {
	w.res.Broken = true
	w.problem(c, CheckArchiveChain, reason)
}

func (w *archiveWalk) nonFF(base, head gitstore.Oid, why string) {
	w.res.Broken = true
	rewind := w.a.Rewind
	if rewind == "" {
		rewind = "it was rolled back or rewritten"
	}
	w.res.Problems = append(w.res.Problems, Problem{Ref: w.a.Ref, Writer: w.a.Writer, Check: "non_fast_forward",
		Reason: fmt.Sprintf("%s moves from %s to %s, %s: an archive only grows (%s)", w.a.Ref, short(base), short(head), why, rewind)})
}

// walk reads the commits from head back to base by first parents, each
// record's seq saying how many there are, and returns them oldest first.
func (w *archiveWalk) walk(base, head gitstore.Oid, baseSeq int64) ([]walked, bool) {
	var newest []walked
	want := int64(-1)
	for id := head; base.IsZero() || id != base; {
		cc, rec, err := w.read(id)
		if err != nil {
			w.broken(nil, fmt.Sprintf("commit %s: %v", short(id), err))
			return nil, false
		}
		c := walked{ArchiveCommit: ArchiveCommit{ID: id, Record: rec}, cc: cc}
		if want < 0 {
			if rec.Seq <= baseSeq {
				w.nonFF(base, head, fmt.Sprintf("whose seq is %d, not after %s's %d", rec.Seq, w.a.base(), baseSeq))
				return nil, false
			}
			want = rec.Seq
		}
		if rec.Seq != want {
			w.broken(&c.ArchiveCommit, fmt.Sprintf("commit %s says seq %d where seq %d belongs", short(id), rec.Seq, want))
			return nil, false
		}
		if want == baseSeq {
			w.nonFF(base, head, "which does not contain "+w.a.base())
			return nil, false
		}
		newest = append(newest, c)
		if want == 0 {
			if !base.IsZero() {
				w.nonFF(base, head, "which does not contain "+w.a.base())
				return nil, false
			}
			break
		}
		if len(cc.Commit.Parents) == 0 {
			w.broken(&c.ArchiveCommit, fmt.Sprintf("commit %s at seq %d has no previous archive commit", short(id), want))
			return nil, false
		}
		id = cc.Commit.Parents[0]
		want--
	}
	if !base.IsZero() && want != baseSeq {
		c := &newest[len(newest)-1]
		w.broken(&c.ArchiveCommit, fmt.Sprintf("commit %s says seq %d, but %s has seq %d", short(c.ID), want+1, w.a.base(), baseSeq))
		return nil, false
	}
	slices.Reverse(newest)
	return newest, true
}

// check checks one commit against the previous one (zero: none).
func (w *archiveWalk) check(cc chain.Commit, c *ArchiveCommit, prev gitstore.Oid, prevHash record.Hash) {
	rec := c.Record
	c.Proof = ProveCommit(w.a.Env, cc.Commit, cc.Payload)
	switch committer, _ := CommitWriter(cc.Commit.Committer); {
	case committer != w.a.Writer:
		w.problem(c, CheckArchiveSignature, fmt.Sprintf("commit %s names %s as its committer, not the archive's writer %s", short(c.ID), orNone(committer), w.a.Writer))
	case c.Proof.State == Tampered:
		w.problem(c, CheckArchiveSignature, fmt.Sprintf("commit %s: %s", short(c.ID), c.Proof.Reason))
	case c.Proof.State == Unverifiable:
		w.res.Problems = append(w.res.Problems, Problem{Ref: w.a.Ref, Writer: w.a.Writer, Chain: kindArchive, Index: i64(rec.Seq), Check: CheckArchiveSignature,
			Reason: fmt.Sprintf("commit %s: %s", short(c.ID), c.Proof.Reason), Unverifiable: true})
	}
	if rec.Writer != w.a.Writer {
		w.problem(c, CheckArchiveChain, fmt.Sprintf("commit %s: the record names writer %q, not the archive's writer %s", short(c.ID), rec.Writer, w.a.Writer))
	}
	want := prevHash
	if rec.Seq == 0 {
		want = record.Genesis(w.a.RepoID, record.ChainArchive, w.a.Writer)
	}
	if rec.Prev != want {
		why := "the previous archive record's hash"
		if rec.Seq == 0 {
			why = "this repository's genesis of the writer's archive (the chain was made for another repository)"
		}
		w.problem(c, CheckArchiveChain, fmt.Sprintf("commit %s: prev %s is not %s", short(c.ID), rec.Prev, why))
	}
	adds := make([]archive.Entry, len(rec.Add))
	for i, t := range rec.Add {
		adds[i] = archive.Entry{Task: t.TaskID, Journal: oid(t.Journal), Ledger: oid(t.Ledger)}
	}
	if want := archive.Parents(prev, adds); !slices.Equal(cc.Commit.Parents, want) {
		w.problem(c, CheckArchiveParents, fmt.Sprintf("commit %s: %s", short(c.ID), parentsFault(cc.Commit.Parents, want, prev, adds)))
	}
	w.checkTree(c, prev)
	for _, t := range rec.Add {
		w.checkHeads(c, t)
	}
}

func oid(s string) gitstore.Oid {
	id, _ := gitstore.ParseOid(s)
	return id
}

// parentsFault says how parents differ from the rule's.
func parentsFault(got, want []gitstore.Oid, prev gitstore.Oid, adds []archive.Entry) string {
	if !prev.IsZero() && (len(got) == 0 || got[0] != prev) {
		return fmt.Sprintf("its first parent is not the previous archive commit %s", short(prev))
	}
	for _, e := range adds {
		for _, h := range []gitstore.Oid{e.Journal, e.Ledger} {
			if !slices.Contains(got, h) {
				return fmt.Sprintf("task %s's head %s is not a parent: git would not keep the chain it archives", e.Task, short(h))
			}
		}
	}
	return fmt.Sprintf("it has %d parents; the previous archive commit and the heads it adds are %d", len(got), len(want))
}

// checkTree checks that the tree is the previous one plus add minus
// remove, exactly.
func (w *archiveWalk) checkTree(c *ArchiveCommit, prev gitstore.Oid) {
	changes, err := archive.Diff(w.a.Env.Objects, prev, c.ID)
	if err != nil {
		w.problem(c, CheckArchiveTree, fmt.Sprintf("commit %s: %v", short(c.ID), err))
		return
	}
	c.Changes = changes
	added := map[string]record.ArchivedTask{}
	for _, t := range c.Record.Add {
		added[t.TaskID] = t
	}
	removed := map[string]bool{}
	for _, t := range c.Record.Remove {
		removed[t] = true
	}
	var faults []string
	for _, ch := range changes {
		t, add := added[ch.Task]
		switch {
		case ch.New == nil && removed[ch.Task]:
			delete(removed, ch.Task)
		case ch.New == nil:
			faults = append(faults, fmt.Sprintf("the tree drops task %s, which the record does not remove", ch.Task))
		case !add:
			faults = append(faults, fmt.Sprintf("the tree holds task %s at %s/%s, which the record does not add", ch.Task, short(ch.New.Journal), short(ch.New.Ledger)))
		case t.Journal != ch.New.Journal.String() || t.Ledger != ch.New.Ledger.String():
			faults = append(faults, fmt.Sprintf("the tree holds task %s at %s/%s; the record adds it at %.12s/%.12s", ch.Task, short(ch.New.Journal), short(ch.New.Ledger), t.Journal, t.Ledger))
			delete(added, ch.Task)
		default:
			delete(added, ch.Task)
		}
	}
	for _, t := range c.Record.Add {
		if _, left := added[t.TaskID]; left {
			faults = append(faults, fmt.Sprintf("the record adds task %s, which the tree does not change", t.TaskID))
		}
	}
	for _, t := range c.Record.Remove {
		if removed[t] {
			faults = append(faults, fmt.Sprintf("the record removes task %s, which the tree does not drop", t))
		}
	}
	if len(faults) > 0 {
		w.problem(c, CheckArchiveTree, fmt.Sprintf("commit %s: %s", short(c.ID), strings.Join(faults, "; ")))
	}
}

// checkHeads reads the two heads an entry adds: rows of the task, at the
// positions the record's counts say, the ledger's a terminal transition.
func (w *archiveWalk) checkHeads(c *ArchiveCommit, t record.ArchivedTask) {
	var last record.Row
	for _, h := range []struct {
		kind string
		head string
		rows int64
	}{{kindJournal, t.Journal, t.JournalRows}, {kindLedger, t.Ledger, t.LedgerRows}} {
		w.res.Read++
		cc, err := chain.Read(w.a.Env.Objects, oid(h.head))
		var row record.Row
		if err == nil {
			row, err = record.ParseRow(cc.Record)
		}
		switch {
		case err != nil:
			w.problem(c, CheckArchiveRows, fmt.Sprintf("task %s's %s head %.12s: %v", t.TaskID, h.kind, h.head, err))
			return
		case row.TaskID != t.TaskID:
			w.problem(c, CheckArchiveRows, fmt.Sprintf("task %s's %s head %.12s is a row of task %q", t.TaskID, h.kind, h.head, row.TaskID))
			return
		case row.Index+1 != h.rows:
			w.problem(c, CheckArchiveRows, fmt.Sprintf("task %s's %s head %.12s is row %d: the chain holds %d rows, the record says %d", t.TaskID, h.kind, h.head, row.Index, row.Index+1, h.rows))
		}
		last = row
	}
	if !ledger.Terminal(ledger.PhaseOf(last.Kind)) {
		w.problem(c, CheckArchiveSealed, fmt.Sprintf("task %s's ledger ends in %s, not a terminal transition: only an ended task, its journal sealed, is archived", t.TaskID, last.Kind))
	}
}

// walkArchives verifies every archive chain from its root (audit verify):
// its problems are failures, a missing pin counts as an unpinned signature
// (the walk is then not verified),
// and the result of each archive ref is returned by ref.
func walkArchives(env *Env, rep *Report) (map[string]*ArchiveResult, error) {
	vals, names, err := env.Refs.List(refs.ArchivePrefix)
	if err != nil {
		return nil, err
	}
	id := ""
	if env.Binding != nil {
		id = env.Binding.ID
	}
	out := map[string]*ArchiveResult{}
	for _, ref := range names {
		w := strings.TrimPrefix(ref, refs.ArchivePrefix)
		res := ArchiveChain{Env: env, RepoID: id, Ref: ref, Writer: w, Base: "the archive's root"}.Verify(gitstore.ZeroOid, vals[ref])
		out[ref] = res
		// Not counted in signatures_checked: an archived task's report
		// reads as it did before it was archived.
		for _, p := range res.Problems {
			if p.Unverifiable {
				rep.Counts.SignaturesUnpinned++
				continue
			}
			rep.Failures = append(rep.Failures, Failure{Writer: p.Writer, Seq: p.Index, Check: p.Check, Reason: ref + ": " + p.Reason})
		}
	}
	return out, nil
}
