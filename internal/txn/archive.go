package txn

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The archive of ended tasks (docs/archive.md): each writer's chain of
// signed archive commits at refs/bernstein/archive/<writer>, whose trees
// hold the journal and ledger heads of every task it archived, and whose
// parents keep those chains reachable. Archiving a task moves its two refs
// into the writer's archive in one transaction: the archive commit, the
// archive ref's compare-and-swap, and the deletion of the task's refs
// (each a compare-and-swap from the archived head), after the archive ref
// in the ref transaction's order, so a crash at any instant leaves either
// the refs or the archive naming the same heads.

// ErrNotArchivable reports a task that may not be archived (not ended, not
// sealed, unknown, archived already, or written in the same transaction);
// the error names the task and why.
var ErrNotArchivable = errors.New("cannot be archived")

// ErrNotEnded is the ErrNotArchivable of a task that has not ended, or not
// before the time asked: what archiving every archivable task passes over
// without a word.
var ErrNotEnded = fmt.Errorf("%w: not ended", ErrNotArchivable)

// ErrArchiveFormat refuses to archive in a repository below storage format
// 3.
var ErrArchiveFormat = errors.New("the archive of ended tasks needs storage format 3")

func notArchivable(task, format string, args ...any) error {
	return fmt.Errorf("task %s %w: %s", task, ErrNotArchivable, fmt.Sprintf(format, args...))
}

// notEnded is the error of a task that has not ended (before the time
// asked).
type notEnded struct{ error }

func (notEnded) Is(target error) bool { return target == ErrNotEnded }

func (e notEnded) Unwrap() error { return e.error }

// ErrUnreadableArchive refuses to archive on top of the writer's own
// archive ref when it cannot be read as an archive (not an archive commit,
// a tree of another shape, an object absent): no archive writer wrote it.
var ErrUnreadableArchive = errors.New("the writer's archive cannot be read as an archive")

func unreadableArchive(ref string, head gitstore.Oid, err error) error {
	return fmt.Errorf("%w: %s (at %s): %v; nothing is archived on top of it: run 'bernstein audit verify', and set %s back to this writer's last archive commit", ErrUnreadableArchive, ref, head, err, ref)
}

// CheckArchiveFormat refuses a repository below storage format 3.
func (t *Tx) CheckArchiveFormat() error {
	format, _, err := t.Format()
	if err != nil {
		return err
	}
	if format < record.FormatArchive {
		return fmt.Errorf("%w (the repository is in format %d): run 'bernstein upgrade'", ErrArchiveFormat, format)
	}
	return nil
}

// Archivable checks, under the write lock and from the chains' proven
// folds, that task may be archived, and returns its entry: its last
// ledger row is terminal (complete, fail, abandon) and, when endedBefore
// is set, committed before it; every row of its ledger and journal
// counts; its journal has rows and a seal in the spine that names its
// head, its row count and that last ledger row, and the journal's
// identity is not mismatched; and neither chain was written in this
// transaction (the refs are at the heads the entry names).
func (t *Tx) Archivable(task string, endedBefore time.Time) (record.ArchivedTask, error) {
	// A task without a ledger ref is archived or unknown; its chain is not
	// loaded (a ref gone that this host's writer extended reads as rolled
	// back until a reader looks in the archive).
	if head, err := t.RefValue(refs.Ledger(task)); err != nil || head.IsZero() {
		if err != nil {
			return record.ArchivedTask{}, err
		}
		return record.ArchivedTask{}, t.missingTask(task)
	}
	lc, err := t.LedgerChain(task)
	if err != nil {
		return record.ArchivedTask{}, err
	}
	if !lc.LedgerProof.Whole() {
		return record.ArchivedTask{}, lc.LedgerProof.Unproven("ledger", task)
	}
	st := lc.Ledger
	if st == nil || !ledger.Terminal(st.Phase) {
		phase := "no proven row"
		if st != nil {
			phase = st.Phase
		}
		return record.ArchivedTask{}, notEnded{notArchivable(task, "it has not ended (it is %s): only a task whose last ledger row is complete, fail or abandon is archived", phase)}
	}
	jc, err := t.JournalChain(task)
	if err != nil {
		return record.ArchivedTask{}, err
	}
	if !jc.Journal.Proof.Whole() {
		return record.ArchivedTask{}, jc.Journal.Proof.Unproven("journal", task)
	}
	if jc.head.IsZero() {
		return record.ArchivedTask{}, notArchivable(task, "its journal has no rows (an archive entry names both chains' heads): it keeps its ledger ref")
	}
	if lc.dirty || jc.dirty || lc.head != lc.old && lc.hold == "" || jc.head != jc.old && jc.hold == "" {
		return record.ArchivedTask{}, notArchivable(task, "it is written in the same transaction")
	}
	if err := t.checkSeal(task, jc, st); err != nil {
		return record.ArchivedTask{}, err
	}
	if !endedBefore.IsZero() {
		at, err := t.commitTime(lc.head)
		if err != nil {
			return record.ArchivedTask{}, err
		}
		if !at.Before(endedBefore) {
			return record.ArchivedTask{}, notEnded{notArchivable(task, "it ended at %s, not before %s", at.UTC().Format(time.RFC3339), endedBefore.UTC().Format(time.RFC3339))}
		}
	}
	return record.ArchivedTask{TaskID: task, Journal: jc.head.String(), JournalRows: jc.Journal.Rows,
		Ledger: lc.head.String(), LedgerRows: st.Rows}, nil
}

// missingTask says why a task with no ledger ref cannot be archived: it is
// in a writer's archive already, or unknown.
func (t *Tx) missingTask(task string) error {
	heads, names, err := t.w.c.Refs.List(refs.ArchivePrefix)
	if err != nil {
		return err
	}
	for _, ref := range names {
		if _, ok, err := archive.Lookup(t.w.c.Objects, heads[ref], task); err == nil && ok {
			return notArchivable(task, "it is archived already (%s)", ref)
		}
	}
	return fmt.Errorf("%w: %s", ledger.ErrUnknownTask, task)
}

// checkSeal requires the seal of task's journal in the spine: an entry
// sealing the journal's head and row count at the ledger's last row, and a
// journal identity that is not mismatched.
func (t *Tx) checkSeal(task string, jc *Chain, st *ledger.State) error {
	if t.verifier == nil {
		v, err := proof.Verifier(t.ownSpineEnv(t.env.Env))
		if err != nil {
			return err
		}
		t.verifier = v
	}
	found := false
	for _, s := range t.verifier.Spine.TaskSeals(task) {
		seal := s.Seal
		found = found || s.ChainErr == "" && seal.Rows == jc.Journal.Rows && seal.Head == jc.Journal.Head &&
			seal.LedgerIndex == st.Rows-1 && ledger.PhaseOf(seal.Transition) == st.Phase
	}
	if !found {
		return notArchivable(task, "no spine entry seals its journal at its %d rows and its last ledger row (index %d, %s)", jc.Journal.Rows, st.Rows-1, st.Phase)
	}
	commits, _, err := chain.WalkBack(t.w.c.Objects, jc.head, gitstore.ZeroOid, nil)
	if err != nil {
		return fmt.Errorf("journal of %s: %w", task, err)
	}
	hashes := make([]record.Hash, len(commits))
	for i, cc := range commits {
		hashes[i] = record.Sum(cc.Record)
	}
	if id, reason := t.verifier.JournalIdentity(task, hashes); id == verify.IdentityMismatched {
		return notArchivable(task, "its journal identity is mismatched: %s", reason)
	}
	return nil
}

// commitTime is the committer time of commit id.
func (t *Tx) commitTime(id gitstore.Oid) (time.Time, error) {
	data, err := t.w.c.Objects.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return time.Time{}, err
	}
	c, _, err := gitstore.ParseCommit(data)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit %s: %w", id, err)
	}
	f := strings.Fields(c.Committer)
	if len(f) < 2 {
		return time.Time{}, fmt.Errorf("commit %s: no committer time", id)
	}
	sec, err := strconv.ParseInt(f[len(f)-2], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit %s: committer time: %w", id, err)
	}
	return time.Unix(sec, 0), nil
}

// ArchiveTamper is the writer's own archive ref found holding what the
// writer cannot verify as its own (docs/archive.md, The writer's own
// archive): commits appended with plain git, a value moved back behind
// the head the writer remembers, or no archive at all. The archive is
// built on Base, the writer's last archive commit that verifies, and the
// ref is compared and swapped over At.
type ArchiveTamper struct {
	Ref    string `json:"ref"`
	At     string `json:"at"`   // the ref's value found ("": none)
	Base   string `json:"base"` // the last commit verified as the writer's ("": none, the archive's root)
	Reason string `json:"reason"`
	// Carried are the tasks that commits of the writer's own, built on a
	// forged one by an earlier version, archived: the archive commit
	// built on Base adds them again.
	Carried []string `json:"carried,omitempty"`
}

// String is the warning that reports it.
func (a *ArchiveTamper) String() string {
	at, base := "deleted", "its root (no commit of it verifies)"
	if a.At != "" {
		at = "at " + a.At
	}
	if a.Base != "" {
		base = a.Base
	}
	msg := fmt.Sprintf("%s (%s) was tampered with: it is not this writer's archive past %s (%s); it is moved back there, and archives build on it", a.Ref, at, base, a.Reason)
	if len(a.Carried) > 0 {
		msg += fmt.Sprintf(" (with the %d tasks this writer's own commits past the forgery archived: %s)", len(a.Carried), strings.Join(a.Carried, " "))
	}
	return msg
}

// archiveChain loads the writer's own archive chain at the head it
// verifies as its own (ownArchiveBase): its head record's seq and hash
// (the next record's prev), or the chain's genesis when it has none. The
// compare-and-swap base stays the ref's value, so an archive built on a
// verified head moves the ref over what plain git put there.
func (t *Tx) archiveChain() (*Chain, error) {
	ref := refs.Archive(t.id.Writer)
	if c, ok := t.chains[ref]; ok {
		return c, nil
	}
	found, err := t.w.c.Refs.ReadOptional(ref)
	if err != nil {
		return nil, err
	}
	base, verified, tamper, carry, err := t.ownArchiveBase(ref, found)
	if err != nil {
		return nil, err
	}
	c := &Chain{ref: ref, old: found, head: base, remember: verified, tamper: tamper, carry: carry}
	if base.IsZero() {
		b := t.env.Binding
		if b != nil && b.Problem != "" {
			return nil, fmt.Errorf("%w: no chain is started in a repository whose identity cannot be read: %s", fold.ErrUnproven, b.Problem)
		}
		c.last = b.Genesis(record.ChainArchive, t.id.Writer)
	} else {
		cc, err := chain.ReadArchive(t.w.c.Objects, base)
		if err != nil {
			return nil, unreadableArchive(ref, base, err)
		}
		a, err := record.ParseArchive(cc.Record)
		if err != nil {
			return nil, unreadableArchive(ref, base, err)
		}
		if a.Writer != t.id.Writer {
			return nil, unreadableArchive(ref, base, fmt.Errorf("its record names writer %s", a.Writer))
		}
		c.next, c.last, c.tree = a.Seq+1, string(record.Sum(cc.Record)), cc.Commit.Tree
	}
	if err := t.checkHead(c); err != nil {
		return nil, err
	}
	t.chains[ref] = c
	return c, nil
}

// ownArchiveBase is the head of the writer's own archive that it can
// verify as its own, the ref being at found: the head this host's writer
// remembers (internal/heads) when the ref is there (the common case: no
// read); else the last commit from the remembered head (from the root when
// none is remembered) to found that passes the archive checks with every
// signature the writer's own (verify.ArchiveChain): an archive commit of
// this writer's that its heads memory missed (a write interrupted after
// the ref moved) is built on, and verified is set so it is remembered. A
// head that is not found is reported as tampered (the ref moved over it):
// commits appended with plain git, a ref moved back behind the remembered
// head, or a value that is no archive. Commits of the writer's own after
// the first that fails (an earlier version built on a forged head) are not
// built on either, but the entries they add are returned (carry), for the
// next archive commit to add again: no task the writer archived is lost.
// The remembered head must be in the repository for that: when it is not
// (pruned after the ref moved away), nothing is built
// (ErrUnreadableArchive).
func (t *Tx) ownArchiveBase(ref string, found gitstore.Oid) (base gitstore.Oid, verified bool, tamper *ArchiveTamper, carry []record.ArchivedTask, err error) {
	m, remembered := t.w.heads.Recorded(ref)
	if remembered && found == m.Commit {
		return found, false, nil, nil, nil
	}
	from := gitstore.ZeroOid
	if remembered {
		from = m.Commit
		if !t.w.c.Objects.Has(from) {
			return gitstore.ZeroOid, false, nil, nil, unreadableArchive(ref, found, fmt.Errorf("this writer's last archive commit %s, which it does not contain, is not in the repository", from))
		}
	}
	if found.IsZero() {
		if from.IsZero() {
			return from, false, nil, nil, nil // no archive yet
		}
		return from, false, t.archiveTamper(ref, found, from, "the ref was deleted"), nil, nil
	}
	id := ""
	if t.env.Binding != nil {
		id = t.env.Binding.ID
	}
	res := verify.ArchiveChain{Env: t.env.Env, RepoID: id, Ref: ref, Writer: t.id.Writer,
		Base: "this writer's last archive commit", Rewind: "moved back or rewritten with plain git"}.Verify(from, found)
	// The commits that pass every check are built on (the writer's own
	// key is always trusted here, so none of them is merely unpinned);
	// the first that fails, and those after it, are not.
	base, badSeq := from, int64(-1)
	if !res.Broken {
		for _, c := range res.Commits {
			if c.Bad {
				badSeq = c.Record.Seq
				break
			}
			base = c.ID
		}
	}
	if base == found {
		return found, true, nil, nil, nil
	}
	carry = ownPast(res, badSeq)
	// Why: the first problem of the first commit not built on (of the
	// chain, when it does not read).
	why := ""
	for _, p := range res.Problems {
		if badSeq < 0 || p.Index != nil && *p.Index == badSeq {
			why = p.Check + ": " + p.Reason
			break
		}
	}
	if why == "" {
		why = "it does not verify as this writer's archive"
	}
	tamper = t.archiveTamper(ref, found, base, why)
	for _, e := range carry {
		tamper.Carried = append(tamper.Carried, e.TaskID)
	}
	return base, false, tamper, carry, nil
}

// ownPast is what the writer's own commits after the first that failed
// (at badSeq; none when the chain did not read) archived: the entries
// they add, the last of each task, sorted by task. A commit counts as
// the writer's when no check failed at it: its signature is the writer's
// own key's (always trusted here: a signature by any other key, or none,
// fails archive_signature), its record names the writer, and its tree,
// parents and heads are what the record says (the one built on a forgery
// is chained to it as any commit to its predecessor).
func ownPast(res *verify.ArchiveResult, badSeq int64) []record.ArchivedTask {
	if badSeq < 0 {
		return nil
	}
	faulty := map[int64]bool{}
	for _, p := range res.Problems {
		if p.Index != nil && !p.Unverifiable {
			faulty[*p.Index] = true
		}
	}
	byTask := map[string]record.ArchivedTask{}
	for _, c := range res.Commits {
		if c.Record.Seq <= badSeq || faulty[c.Record.Seq] {
			continue
		}
		for _, e := range c.Record.Add {
			byTask[e.TaskID] = e
		}
		for _, task := range c.Record.Remove {
			delete(byTask, task)
		}
	}
	out := make([]record.ArchivedTask, 0, len(byTask))
	for _, e := range byTask {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TaskID < out[j].TaskID })
	return out
}

func (t *Tx) archiveTamper(ref string, found, base gitstore.Oid, why string) *ArchiveTamper {
	a := &ArchiveTamper{Ref: ref, Reason: why}
	if !found.IsZero() {
		a.At = found.String()
	}
	if !base.IsZero() {
		a.Base = base.String()
	}
	return a
}

// ArchiveTampered is what the writer's own archive ref held that the
// transaction did not build on (nil: nothing), once the archive was
// loaded (Archive, RestoreArchive).
func (t *Tx) ArchiveTampered() *ArchiveTamper {
	if c := t.chains[refs.Archive(t.id.Writer)]; c != nil {
		return c.tamper
	}
	return nil
}

// RestoreArchive moves the writer's own archive ref back to the head it
// verifies as its own, over what it found (ownArchiveBase), and returns
// what it found (nil: the ref is the writer's, and nothing moves). With
// entries carried over, or no commit of the writer's left, it writes an
// archive commit on that head (of those entries; none: the archive's
// empty first commit).
func (t *Tx) RestoreArchive() (*ArchiveTamper, error) {
	if err := t.CheckArchiveFormat(); err != nil {
		return nil, err
	}
	c, err := t.archiveChain()
	if err != nil {
		return nil, err
	}
	if len(c.carry) > 0 || c.tamper != nil && c.head.IsZero() {
		// The entries of the writer's own commits past the forgery go
		// into a commit on the verified head; with no commit of the
		// writer's left, its archive starts again: an empty first commit
		// (a transaction moves a ref to a value, not only deletes).
		if _, _, err := t.Archive(nil, nil); err != nil {
			return nil, err
		}
	} else if c.tamper != nil {
		c.dirty = true
	}
	return c.tamper, nil
}

// Archive appends one commit to the writer's archive: it adds the tasks
// of add (each checked by Archivable in this transaction; at most
// archive.MaxAdd) and removes the tasks of remove, and deletes each added
// task's journal and ledger refs, each a compare-and-swap from the head it
// archives. It returns the commit's record and id.
func (t *Tx) Archive(add []record.ArchivedTask, remove []string) (record.Archive, gitstore.Oid, error) {
	if err := t.CheckArchiveFormat(); err != nil {
		return record.Archive{}, gitstore.ZeroOid, err
	}
	c, err := t.archiveChain()
	if err != nil {
		return record.Archive{}, gitstore.ZeroOid, err
	}
	if c.dirty {
		return record.Archive{}, gitstore.ZeroOid, errors.New("one archive commit per transaction: the writer's archive was written in this one already")
	}
	a := record.Archive{V: record.Version, Writer: t.id.Writer, Seq: c.next, Prev: record.Hash(c.last),
		Add: append([]record.ArchivedTask{}, add...), Remove: append([]string{}, remove...)}
	carried := map[string]bool{}
	for _, e := range c.carry {
		if !slices.ContainsFunc(add, func(x record.ArchivedTask) bool { return x.TaskID == e.TaskID }) {
			a.Add = append(a.Add, e)
			carried[e.TaskID] = true
		}
	}
	sort.Slice(a.Add, func(i, j int) bool { return a.Add[i].TaskID < a.Add[j].TaskID })
	sort.Strings(a.Remove)
	entries, err := t.archivedEntries(a.Add, carried)
	if err != nil {
		return record.Archive{}, gitstore.ZeroOid, err
	}
	var prevTree gitstore.Oid
	if !c.head.IsZero() {
		prevTree = c.tree
	}
	root, objs, err := archive.Build(t.w.c.Objects, prevTree, archive.Update{Add: entries, Remove: a.Remove})
	if err != nil {
		if archive.Unreadable(err) {
			err = unreadableArchive(c.ref, c.head, err)
		}
		return record.Archive{}, gitstore.ZeroOid, err
	}
	b, err := record.Canonical(a)
	if err != nil {
		return record.Archive{}, gitstore.ZeroOid, err
	}
	if _, err := record.ParseArchive(b); err != nil {
		return record.Archive{}, gitstore.ZeroOid, err
	}
	cm := gitstore.Commit{Tree: root, Parents: archive.Parents(c.head, entries), Author: t.ident(t.id.Writer), Committer: t.ident(t.id.Writer),
		Message: record.Message(fmt.Sprintf("archive #%d: %d tasks added, %d removed", a.Seq, len(a.Add), len(a.Remove)), b)}
	sig, err := t.id.SignCommit(gitstore.EncodeCommit(cm))
	if err != nil {
		return record.Archive{}, gitstore.ZeroOid, err
	}
	cm.Signature = sig
	o := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(cm))
	t.objects = append(append(t.objects, objs...), o)
	c.head, c.tree, c.dirty, c.carry = o.ID, root, true, nil
	c.next, c.last = c.next+1, string(record.Sum(b))
	for _, e := range a.Add {
		if !carried[e.TaskID] {
			t.dropTaskRefs(e.TaskID)
		}
	}
	return a, o.ID, nil
}

// archivedEntries are the codec's entries of add, each task's chains as
// Archivable left them in this transaction: at the heads add names, and
// not written in it; a carried task's at the heads its entry names (the
// writer's own commit archived them).
func (t *Tx) archivedEntries(add []record.ArchivedTask, carried map[string]bool) ([]archive.Entry, error) {
	if len(add) > archive.MaxAdd {
		return nil, fmt.Errorf("an archive commit adds at most %d tasks, not %d", archive.MaxAdd, len(add))
	}
	out := make([]archive.Entry, 0, len(add))
	for _, e := range add {
		if carried[e.TaskID] {
			j, jerr := gitstore.ParseOid(e.Journal)
			l, lerr := gitstore.ParseOid(e.Ledger)
			if jerr != nil || lerr != nil {
				return nil, fmt.Errorf("the entry of task %s carried over: %w", e.TaskID, errors.Join(jerr, lerr))
			}
			out = append(out, archive.Entry{Task: e.TaskID, Journal: j, Ledger: l})
			continue
		}
		lc, jc := t.chains[refs.Ledger(e.TaskID)], t.chains[refs.Journal(e.TaskID)]
		if lc == nil || jc == nil || lc.dirty || jc.dirty || lc.head.String() != e.Ledger || jc.head.String() != e.Journal {
			return nil, notArchivable(e.TaskID, "its chains are not at the heads checked for it in this transaction")
		}
		out = append(out, archive.Entry{Task: e.TaskID, Journal: jc.head, Ledger: lc.head})
	}
	return out, nil
}

// dropTaskRefs deletes task's two refs with the batch (compare-and-swap
// from the heads read): the chains read as gone for the rest of the
// transaction, and no head is remembered for them (the heads this host's
// writer left on them stay: the archive holds them).
func (t *Tx) dropTaskRefs(task string) {
	for _, ref := range []string{refs.Ledger(task), refs.Journal(task)} {
		c := t.chains[ref]
		t.own(c)
		c.head, c.tree, c.next, c.last, c.dirty = gitstore.ZeroOid, gitstore.ZeroOid, 0, "", true
		c.Ledger, c.LedgerProof, c.Journal = nil, fold.Proof{}, nil
	}
}

// ArchiveAtRemembered reports whether this host's writer's own archive ref
// stands where the writer left it: at the head its heads memory keeps, or
// absent with none kept. Otherwise a transaction looks at it
// (RestoreArchive): an archive commit of the writer's that the memory
// missed, or a value plain git put there. It reads one ref and one line
// of the heads memory.
func (w *Writer) ArchiveAtRemembered() (bool, error) {
	id, err := w.c.Identity()
	if err != nil {
		return false, err
	}
	ref := refs.Archive(id.Writer)
	found, err := w.c.Refs.ReadOptional(ref)
	if err != nil {
		return false, err
	}
	m, ok := w.heads.Recorded(ref)
	return ok && m.Commit == found || !ok && found.IsZero(), nil
}
