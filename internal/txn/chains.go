package txn

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// chain returns ref's chain in this transaction, reading it on first use.
func (t *Tx) chain(ref string, load func(c *Chain) error) (*Chain, error) {
	if c, ok := t.chains[ref]; ok {
		return c, nil
	}
	c, err := t.readHead(ref)
	if err != nil {
		return nil, err
	}
	head := c.head
	if head.IsZero() {
		// A new chain is rooted in this repository's identity (its genesis
		// hash; "" in a format-1 repository).
		if kind, name, ok := rootOf(ref); ok {
			b := t.env.Binding
			if b != nil && b.Problem != "" {
				return nil, fmt.Errorf("%w: no chain is started in a repository whose identity cannot be read: %s", fold.ErrUnproven, b.Problem)
			}
			c.last = b.Genesis(kind, name)
		}
	}
	if !head.IsZero() {
		if err := load(c); err != nil {
			return nil, err
		}
	}
	if err := t.checkHead(c); err != nil {
		return nil, err
	}
	t.chains[ref] = c
	return c, nil
}

// readHead reads ref's head. A task's chain may be archived: its head is
// then the archive entry's when that extends the ref (or there is no ref),
// as every reader takes it (refs.Snapshot). The compare-and-swap base stays
// the ref's own value (zero: the ref is created, "must not exist"), and the
// archive ref is held at the value read, so an archive commit between this
// read and the commit fails the transaction, which is then redone.
func (t *Tx) readHead(ref string) (*Chain, error) {
	if _, task := refs.TaskOf(ref); !task {
		head, err := t.w.c.Refs.ReadOptional(ref)
		if err == nil && head.IsLooseStandIn() && recordedChain(t.id.Writer, ref) {
			// The writer's own spine, audit mirror, archive or anchors whose loose
			// file holds no object id (written by hand; git reads it as no
			// value): the chain goes on from the head this host's writer
			// recorded last (none: a new chain, as for a ref git does not
			// have), and the write replaces the file while it still holds
			// the bytes read (docs/trust.md, Refs that cannot be read).
			c := &Chain{ref: ref, old: head}
			if m, ok := t.w.heads.Recorded(ref); ok {
				c.head = m.Commit
			}
			return c, nil
		}
		if b := t.env.Binding; err == nil && ref == refs.Repository && b != nil && b.Ref != "" && head == b.RefAt {
			// The ref does not name the identity this host's writer
			// recorded, which the repository holds: the chain is the
			// recorded one, and a write moves the ref back to it over the
			// value read (docs/trust.md, A row belongs to one repository).
			return &Chain{ref: ref, old: head, head: b.Head}, nil
		}
		if err == nil {
			if c := t.ownEntryHead(ref, head); c != nil {
				return c, nil
			}
		}
		return &Chain{ref: ref, old: head, head: head}, err
	}
	snap, err := t.w.c.Refs.Snapshot(ref)
	if err != nil {
		return nil, err
	}
	head, err := snap.ReadOptional(ref)
	if err != nil {
		return nil, err
	}
	c := &Chain{ref: ref, old: head, head: head}
	from, archived := snap.FromArchive(ref)
	if !archived {
		return c, nil
	}
	if c.old, err = t.w.c.Refs.ReadOptional(ref); err != nil {
		return nil, err
	}
	if c.holdAt, err = snap.ReadOptional(from); err != nil {
		return nil, err
	}
	c.hold = from
	return c, nil
}

// ownEntryChain reports whether ref is one of the chains only this host's
// writer writes and whose heads it records: its spine, audit mirror and
// archive.
func (t *Tx) ownEntryChain(ref string) bool {
	return ref == refs.Spine(t.id.Writer) || ref == refs.Audit(t.id.Writer) || ref == refs.Archive(t.id.Writer)
}

// recordedChain reports whether ref is one of the chains only writer
// writes whose heads it records (batchHeads): its spine, audit mirror,
// archive and anchors. A write takes such a ref whose loose file holds no
// object id to be at the recorded head (readHead).
func recordedChain(writer, ref string) bool {
	return ref == refs.Spine(writer) || ref == refs.Audit(writer) || ref == refs.Archive(writer) || ref == refs.Anchors(writer) || ref == refs.Checkpoints(writer)
}

// rootOf names the chain ref is (its kind and its task or writer), for the
// chains that are rooted in the repository's identity.
func rootOf(ref string) (kind, name string, ok bool) {
	for _, k := range []struct{ prefix, kind string }{{refs.JournalPrefix, record.ChainJournal}, {refs.LedgerPrefix, record.ChainLedger},
		{refs.SpinePrefix, record.ChainSpine}, {refs.AuditPrefix, record.ChainAudit}, {refs.ArchivePrefix, record.ChainArchive}} {
		if rest, found := strings.CutPrefix(ref, k.prefix); found {
			if k.kind == record.ChainJournal || k.kind == record.ChainLedger {
				task, err := refs.UnescapeTask(rest)
				return k.kind, task, err == nil
			}
			return k.kind, rest, true
		}
	}
	return "", "", false
}

// checkHead refuses to extend a chain that no longer contains the head this
// host's writer left on it (internal/heads). A journal or ledger that still has
// rows carries that as a fault of its fold (journalStateAt, ledgerStateAt);
// here are the rest: one whose ref is gone, and the writer's own spine,
// audit mirror and archive, whose next record would take a sequence number
// already used.
func (t *Tx) checkHead(c *Chain) error {
	task := strings.HasPrefix(c.ref, refs.JournalPrefix) || strings.HasPrefix(c.ref, refs.LedgerPrefix)
	own := t.ownEntryChain(c.ref)
	if !own && !(task && c.head.IsZero()) || c.atRecorded && c.head == c.old {
		return nil
	}
	pos := c.next - 1
	if c.head.IsZero() {
		pos = -1
	}
	name := strings.TrimSuffix(strings.SplitAfterN(strings.TrimPrefix(c.ref, refs.Prefix), "/", 2)[0], "/")
	f, err := t.w.heads.Rollback(name, c.ref, c.head, pos)
	if err != nil || f == nil {
		return err
	}
	return fmt.Errorf("%w: %s cannot be trusted from index %d (%s): nothing is written on top of it; run 'bernstein audit verify'", fold.ErrUnproven, c.ref, f.Index, f.Reason)
}

// Objects is the repository's object store, for operations that read what
// the chains name.
func (t *Tx) Objects() *gitstore.Repo { return t.w.c.Objects }

// RefValue is ref's value as the transaction sees it: moved by an earlier
// operation of the batch, else as the ref stands.
func (t *Tx) RefValue(ref string) (gitstore.Oid, error) {
	if c, ok := t.chains[ref]; ok {
		return c.head, nil
	}
	return t.w.c.Refs.ReadOptional(ref)
}

// Head is c's head commit in the transaction.
func (c *Chain) Head() gitstore.Oid { return c.head }

// AdoptChain makes head (a commit of the remote's chain of task's kind,
// journal or ledger, fetched) the transaction's chain of that ref, in place
// of the one this host has: what follows extends it, and the ref moves
// there with the batch. Its rows are folded and proven, but not checked
// against the heads this host's writer left on the ref, which the adoption
// supersedes (its supersede entry says which; internal/heads). It must come
// before any other use of the ref in the batch.
func (t *Tx) AdoptChain(task, kind string, head gitstore.Oid) (*Chain, error) {
	ref := refs.Journal(task)
	if kind == "ledger" {
		ref = refs.Ledger(task)
	}
	if _, ok := t.chains[ref]; ok {
		return nil, fmt.Errorf("%s was used before it was adopted in this transaction", ref)
	}
	cur, err := t.w.c.Refs.ReadOptional(ref)
	if err != nil {
		return nil, err
	}
	c := &Chain{ref: ref, old: cur, head: head, dirty: cur != head, tree: gitstore.EmptyTree}
	if kind == "ledger" {
		c.Ledger, c.LedgerProof = nil, fold.Proof{}
		if !head.IsZero() {
			f, err := t.w.folds.FoldLedger(t.env, task, head)
			if err != nil {
				return nil, err
			}
			c.LedgerProof = f.Proof
			if f.Exists() {
				c.Ledger = f.State
				c.next, c.last = f.State.Rows, string(f.State.Head)
			}
		}
	} else {
		c.Journal = fold.NewJournal(task)
		if !head.IsZero() {
			st, err := t.w.folds.FoldJournal(t.env, task, head)
			if err != nil {
				return nil, err
			}
			c.Journal = st
			c.next, c.last = st.Rows, string(st.Head)
		}
	}
	t.chains[ref] = c
	return c, nil
}

// ChainProof folds task's chain of kind (journal or ledger) at head, as
// this host proves it, without the heads check: what task adopt drops must
// have verified here before it is recorded again.
func (t *Tx) ChainProof(task, kind string, head gitstore.Oid) (fold.Proof, error) {
	if head.IsZero() {
		return fold.Proof{}, nil
	}
	if kind == "ledger" {
		f, err := t.w.folds.FoldLedger(t.env, task, head)
		if err != nil {
			return fold.Proof{}, err
		}
		return f.Proof, nil
	}
	st, err := t.w.folds.FoldJournal(t.env, task, head)
	if err != nil {
		return fold.Proof{}, err
	}
	return st.Proof, nil
}

// SetRef moves a ref that holds no chain of the transaction's own (a fork)
// from old to head with the batch.
func (t *Tx) SetRef(ref string, old, head gitstore.Oid) {
	t.chains[ref] = &Chain{ref: ref, old: old, head: head, dirty: old != head}
}

// own makes c's states private to the running operation before it mutates
// them, so a failed operation can be rolled back.
func (t *Tx) own(c *Chain) {
	if c.owner == t.op {
		return
	}
	if c.Ledger != nil {
		l := *c.Ledger
		c.Ledger = &l
	}
	if c.Journal != nil {
		c.Journal = c.Journal.Clone()
	}
	c.owner = t.op
}

// LedgerChain loads a task's ledger with its folded state: the rows that
// counted, and the proof of the rest.
func (t *Tx) LedgerChain(task string) (*Chain, error) {
	return t.chain(refs.Ledger(task), func(c *Chain) error {
		fold, err := t.w.folds.LedgerAt(t.env, task, c.head)
		if err != nil {
			return err
		}
		if fold.Exists() {
			c.Ledger = fold.State
		}
		c.LedgerProof = fold.Proof
		c.next, c.last = fold.State.Rows, string(fold.State.Head)
		c.tree = gitstore.EmptyTree
		return nil
	})
}

// JournalChain loads a task's journal with its folded state.
func (t *Tx) JournalChain(task string) (*Chain, error) {
	c, err := t.chain(refs.Journal(task), func(c *Chain) error {
		st, err := t.w.folds.JournalAt(t.env, task, c.head)
		if err != nil {
			return err
		}
		c.Journal = st
		c.next, c.last = st.Rows, string(st.Head)
		return nil
	})
	if err == nil && c.Journal == nil {
		c.Journal = fold.NewJournal(task)
		c.Journal.Head = record.Hash(c.last)
		c.tree = gitstore.EmptyTree
	}
	return c, err
}

// entryChain loads a spine or audit chain: only its head entry matters, and
// it is remembered from the last batch while the ref has not moved.
func (t *Tx) entryChain(ref string, audit bool) (*Chain, error) {
	return t.chain(ref, func(c *Chain) error {
		t.w.mu.Lock()
		h, ok := t.w.entryHeads[ref]
		t.w.mu.Unlock()
		if ok && h.head == c.head {
			c.next, c.last, c.tree = h.next, h.last, h.tree
			return nil
		}
		cc, err := chain.Read(t.w.c.Objects, c.head)
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		if audit {
			a, err := record.ParseAuditEntry(cc.Record)
			if err != nil {
				return fmt.Errorf("%s head: %w", ref, err)
			}
			c.next, c.last = a.Seq+1, a.HMAC
		} else {
			e, err := record.ParseSpineEntry(cc.Record)
			if err != nil {
				return fmt.Errorf("%s head: %w", ref, err)
			}
			c.next, c.last = e.Header.Seq+1, string(e.Hash)
		}
		c.tree = cc.Commit.Tree
		return nil
	})
}

// Anchor keeps the project commits a journal row of task names (a
// checkpoint's commit, a diff's base and head) reachable from the writer's
// anchors ref, in the same transaction as the row, so that they travel with
// the journal on push, fetch and clone: one commit whose first parent is
// the previous anchor and whose other parents are those commits.
func (t *Tx) Anchor(task string, row record.Hash, commits ...gitstore.Oid) error {
	c, err := t.anchorsChain()
	if err != nil {
		return err
	}
	var parents []gitstore.Oid
	if !c.head.IsZero() {
		parents = append(parents, c.head)
	}
	seen := map[gitstore.Oid]bool{}
	for _, id := range commits {
		if !id.IsZero() && !seen[id] {
			seen[id] = true
			parents = append(parents, id)
		}
	}
	a := record.Anchor{V: record.Version, Writer: t.id.Writer, Seq: c.next, TaskID: task, Row: row}
	cm := gitstore.Commit{Tree: gitstore.EmptyTree, Parents: parents, Author: t.ident(t.id.Writer), Committer: t.ident(t.id.Writer),
		Message: record.Message(fmt.Sprintf("anchor %s #%d", task, a.Seq), record.MustCanonical(a))}
	sig, err := t.id.SignCommit(gitstore.EncodeCommit(cm))
	if err != nil {
		return err
	}
	cm.Signature = sig
	o := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(cm))
	t.objects = append(t.objects, o)
	c.head, c.tree, c.dirty = o.ID, gitstore.EmptyTree, true
	c.next++
	return nil
}

// anchorsChain loads the writer's anchors chain: its head and the seq
// its next anchor takes.
func (t *Tx) anchorsChain() (*Chain, error) {
	return t.chain(refs.Anchors(t.id.Writer), nextSeq(t, chain.ReadAnchor, func(rec []byte) (int64, error) {
		a, err := record.ParseAnchor(rec)
		return a.Seq, err
	}))
}

// ident formats a commit identity for name (an agent, actor or writer).
func (t *Tx) ident(name string) string {
	return gitstore.Ident(name, name+"@bernstein", t.now.Unix())
}

// addCommit appends a commit to c.
func (t *Tx) addCommit(c *Chain, tree gitstore.Oid, author string, msg []byte, sign bool) error {
	cm := gitstore.Commit{Tree: tree, Author: t.ident(author), Committer: t.ident(t.id.Writer), Message: msg}
	if !c.head.IsZero() {
		cm.Parents = []gitstore.Oid{c.head}
	}
	if sign {
		sig, err := t.id.SignCommit(gitstore.EncodeCommit(cm))
		if err != nil {
			return err
		}
		cm.Signature = sig
	}
	o := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(cm))
	t.objects = append(t.objects, o)
	c.head, c.tree, c.dirty = o.ID, tree, true
	return nil
}

// addTree stores a tree built in this transaction.
func (t *Tx) addTree(es []gitstore.TreeEntry) gitstore.Oid {
	if len(es) == 0 {
		return gitstore.EmptyTree
	}
	o := gitstore.NewObject(gitstore.TypeTree, gitstore.EncodeTree(es))
	t.objects = append(t.objects, o)
	t.trees[o.ID] = es
	return o.ID
}

func (t *Tx) readTree(id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if es, ok := t.trees[id]; ok {
		return es, nil
	}
	return t.w.c.ReadTree(id)
}

// addBlob stores a blob and returns its id.
func (t *Tx) addBlob(data []byte) gitstore.Oid {
	o := gitstore.NewObject(gitstore.TypeBlob, data)
	t.objects = append(t.objects, o)
	return o.ID
}

// AppendLedger appends a transition row to a task's ledger, refusing an
// illegal transition, and mirrors it into the audit chain.
func (t *Tx) AppendLedger(task, kind, actor string, data any) (record.Row, *Chain, error) {
	c, err := t.LedgerChain(task)
	if err != nil {
		return record.Row{}, nil, err
	}
	if !c.LedgerProof.Whole() {
		return record.Row{}, nil, c.LedgerProof.Unproven("ledger", task)
	}
	phase := ""
	if c.Ledger != nil {
		phase = c.Ledger.Phase
	} else if kind != record.KindTaskCreated {
		// A transition of a task that was never created: the task is
		// unknown, as every reading command says.
		return record.Row{}, nil, fmt.Errorf("%w: %s", ledger.ErrUnknownTask, task)
	}
	if err := ledger.Check(task, phase, kind); err != nil {
		return record.Row{}, nil, err
	}
	row, err := record.NewRow(kind, task, c.next, record.Hash(c.last), actor, data)
	if err != nil {
		return record.Row{}, nil, err
	}
	t.own(c)
	if c.Ledger == nil {
		c.Ledger = &ledger.State{Head: record.Hash(c.last)}
	}
	b := row.Bytes()
	if err := c.Ledger.ApplyHashed(row, record.Sum(b)); err != nil {
		return record.Row{}, nil, err
	}
	c.LedgerProof.Total = c.Ledger.Rows
	if err := t.addCommit(c, gitstore.EmptyTree, actor, record.Message(kind+" "+task, b), true); err != nil {
		return record.Row{}, nil, err
	}
	c.next, c.last = row.Index+1, string(record.Sum(b))
	if err := t.AppendAudit(kind, actor, task, string(record.Sum(b)), row.Data); err != nil {
		return record.Row{}, nil, err
	}
	return row, c, nil
}

// AppendJournal appends a row to a task's journal. The row's commit tree
// holds the row's own files (artifact versions, command outputs, patches) and
// nothing else: a post costs the same whatever the journal holds already, and
// `git show <row commit>:<path>` shows each file.
func (t *Tx) AppendJournal(task string, row record.Row, summary string, files map[string][]byte) (*Chain, error) {
	c, err := t.JournalChain(task)
	if err != nil {
		return nil, err
	}
	t.own(c)
	blobs := make(map[string]gitstore.Oid, len(files))
	for path, data := range files {
		blobs[path] = t.addBlob(data)
	}
	tree, trees, err := gitstore.TreeOf(blobs)
	if err != nil {
		return nil, err
	}
	t.objects = append(t.objects, trees...)
	b := row.Bytes()
	if err := c.Journal.Apply(row, record.Sum(b)); err != nil {
		return nil, err
	}
	if err := t.addCommit(c, tree, row.Actor, record.Message(summary, b), true); err != nil {
		return nil, err
	}
	c.Journal.Proof.Total = c.Journal.Rows
	c.next, c.last = row.Index+1, string(record.Sum(b))
	return c, nil
}

// NextJournalRow returns the index and prev hash a new row of task takes.
// A journal with rows that are not proven takes none.
func (t *Tx) NextJournalRow(task string) (int64, record.Hash, error) {
	c, err := t.JournalChain(task)
	if err != nil {
		return 0, "", err
	}
	if !c.Journal.Proof.Whole() {
		return 0, "", c.Journal.Proof.Unproven("journal", task)
	}
	return c.next, record.Hash(c.last), nil
}

// SpineHeader fills the header the next entry of the writer's spine takes.
func (t *Tx) SpineHeader(kind string) (record.SpineHeader, error) {
	c, err := t.entryChain(refs.Spine(t.id.Writer), false)
	if err != nil {
		return record.SpineHeader{}, err
	}
	return record.SpineHeader{V: record.Version, Writer: t.id.Writer, Seq: c.next, Prev: record.Hash(c.last), Kind: kind}, nil
}

// AppendSpine appends a signed entry (built on SpineHeader) to the spine.
// files go into the spine commit's tree.
func (t *Tx) AppendSpine(entry any, summary string, files map[string][]byte) (record.Hash, error) {
	c, err := t.entryChain(refs.Spine(t.id.Writer), false)
	if err != nil {
		return "", err
	}
	b, err := record.Canonical(entry)
	if err != nil {
		return "", err
	}
	tree := gitstore.EmptyTree
	if len(files) > 0 {
		var es []gitstore.TreeEntry
		for name, data := range files {
			es = append(es, gitstore.TreeEntry{Mode: gitstore.ModeFile, Name: name, ID: t.addBlob(data)})
		}
		tree = t.addTree(es)
	}
	if err := t.addCommit(c, tree, t.id.Writer, record.Message(summary, b), true); err != nil {
		return "", err
	}
	h := record.Sum(b)
	c.next, c.last = c.next+1, string(h)
	return h, nil
}

// AppendAudit appends an HMAC'd, signed entry to the writer's audit mirror.
func (t *Tx) AppendAudit(event, actor, task, resource string, details []byte) error {
	c, err := t.entryChain(refs.Audit(t.id.Writer), true)
	if err != nil {
		return err
	}
	if details == nil {
		details = []byte("{}")
	}
	a := record.AuditEntry{V: record.Version, Writer: t.id.Writer, Seq: c.next, Event: event, Actor: actor,
		TaskID: task, Resource: resource, Details: details, PrevHMAC: c.last}
	a.HMAC = t.id.MAC(a.MACBytes())
	b := a.Bytes()
	summary := event
	if task != "" {
		summary += " " + task
	}
	if err := t.addCommit(c, gitstore.EmptyTree, t.id.Writer, record.Message(summary, b), true); err != nil {
		return err
	}
	c.next, c.last = c.next+1, a.HMAC
	return nil
}

// LogCheckpoint appends the writer's log checkpoint of size spine entries
// to its checkpoints ref: one signed commit whose tree holds the signed
// note (with the witnesses' cosignatures) as record.CheckpointFile.
func (t *Tx) LogCheckpoint(size int64, signed []byte) error {
	c, err := t.checkpointsChain()
	if err != nil {
		return err
	}
	blob := gitstore.NewObject(gitstore.TypeBlob, signed)
	t.objects = append(t.objects, blob)
	tree := t.addTree([]gitstore.TreeEntry{{Mode: gitstore.ModeFile, Name: record.CheckpointFile, ID: blob.ID}})
	a := record.LogCheckpoint{V: record.Version, Writer: t.id.Writer, Seq: c.next, Size: size}
	if err := t.addCommit(c, tree, t.id.Writer, record.Message(fmt.Sprintf("checkpoint #%d: %d entries", a.Seq, size), record.MustCanonical(a)), true); err != nil {
		return err
	}
	c.next++
	return nil
}

// checkpointsChain is the writer's chain of its log's checkpoints.
func (t *Tx) checkpointsChain() (*Chain, error) {
	return t.chain(refs.Checkpoints(t.id.Writer), nextSeq(t, chain.Read, func(rec []byte) (int64, error) {
		a, err := record.ParseLogCheckpoint(rec)
		return a.Seq, err
	}))
}

// nextSeq loads a chain whose records carry a seq: the next record's seq
// follows its head's (read reads the head commit, seq parses its record).
func nextSeq(t *Tx, read func(*gitstore.Repo, gitstore.Oid) (chain.Commit, error), seq func([]byte) (int64, error)) func(*Chain) error {
	return func(c *Chain) error {
		cc, err := read(t.w.c.Objects, c.head)
		if err != nil {
			return fmt.Errorf("%s: %w", c.ref, err)
		}
		n, err := seq(cc.Record)
		if err != nil {
			return fmt.Errorf("%s head: %w", c.ref, err)
		}
		c.next = n + 1
		return nil
	}
}

// OwnHead is the head this host's writer takes its own spine, audit mirror,
// archive or anchors ref to be at when the ref's loose file holds no object id
// (value, a gitstore.LooseStandIn): the head it recorded last, as a write
// takes it (readHead). ok is false for any other ref, and for one it
// recorded no head of.
func (w *Writer) OwnHead(ref string, value gitstore.Oid) (gitstore.Oid, bool) {
	if !value.IsLooseStandIn() {
		return gitstore.ZeroOid, false
	}
	id, err := w.c.Identity()
	if err != nil || !recordedChain(id.Writer, ref) {
		return gitstore.ZeroOid, false
	}
	m, ok := w.heads.Recorded(ref)
	if !ok || m.Commit.IsZero() {
		return gitstore.ZeroOid, false
	}
	return m.Commit, true
}
