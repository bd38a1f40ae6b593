package bernstein

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// A write is a batch of operations. Each operation reads and extends the
// chains of one transaction; the batch's objects go to disk as one pack and
// every ref it moved moves in one compare-and-swap ref transaction. Posts
// from concurrent goroutines share a batch (group commit); posts from
// concurrent processes queue on a lock file so no work is thrown away.

// chain is one ref's linear record chain as the transaction sees it.
type chainState struct {
	ref  string
	old  gitstore.Oid // value when first read: the compare-and-swap base
	head gitstore.Oid
	tree gitstore.Oid
	next int64  // index (rows) or seq (entries) of the next record
	last string // hash of the last row or entry, or the last HMAC

	ledger      *ledger.State // nil when no row of the ledger counted
	ledgerProof chainProof
	journal     *journalState
	owner       int // op sequence that owns the states (copy on write)
	dirty       bool
}

type tx struct {
	s       *Store
	env     *proofEnv // proves the rows the batch reads
	id      *keys.Identity
	now     time.Time
	chains  map[string]*chainState
	objects []gitstore.Object
	trees   map[gitstore.Oid][]gitstore.TreeEntry
	op      int
}

// opFunc runs one operation inside a transaction.
type opFunc func(t *tx) (any, error)

type pendingOp struct {
	fn   opFunc
	res  any
	err  error
	done chan struct{}
}

// keepChanges marks an operation error whose transaction changes must still
// be committed (a refused post is recorded in the audit mirror).
type keepChanges interface{ keepChanges() bool }

const maxBatch = 256

// submit runs fn in the next batch and waits for its outcome. One committer
// goroutine per store runs the batches while there is work, so no caller
// serves others' posts at the expense of its own.
func (s *Store) submit(fn opFunc) (any, error) {
	o := &pendingOp{fn: fn, done: make(chan struct{})}
	s.qmu.Lock()
	s.queue = append(s.queue, o)
	if !s.leading {
		s.leading = true
		s.loops.Add(1)
		go s.commitLoop()
	}
	s.qmu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	<-o.done
	return o.res, o.err
}

// batchWait bounds how long the committer waits for the posters of the last
// batch to come back, so that concurrent posters keep sharing batches rather
// than splitting into groups that alternate.
const batchWait = time.Millisecond

func (s *Store) commitLoop() {
	defer s.loops.Done()
	last := 0
	for {
		s.qmu.Lock()
		n := len(s.queue)
		if n == 0 {
			s.leading = false
			s.qmu.Unlock()
			return
		}
		s.qmu.Unlock()
		if n < last {
			timer := time.NewTimer(batchWait)
		wait:
			for {
				select {
				case <-s.arrived:
					s.qmu.Lock()
					n = len(s.queue)
					s.qmu.Unlock()
					if n >= last {
						break wait
					}
				case <-timer.C:
					break wait
				}
			}
			timer.Stop()
		}
		s.qmu.Lock()
		n = len(s.queue)
		if n > maxBatch {
			n = maxBatch
		}
		batch := append([]*pendingOp(nil), s.queue[:n]...)
		s.queue = s.queue[n:]
		s.qmu.Unlock()
		s.runBatch(batch)
		last = n
	}
}

func (s *Store) runBatch(batch []*pendingOp) {
	finish := func(err error) {
		for _, o := range batch {
			if err != nil {
				o.res, o.err = nil, err
			}
			close(o.done)
		}
	}
	id, err := s.Identity()
	if err == nil {
		err = id.Ready() // a key in ssh-agent: the agent must hold it before anything is built
	}
	if err != nil {
		finish(err)
		return
	}
	unlock, err := s.lockWriters()
	if err != nil {
		finish(err)
		return
	}
	defer unlock()
	if err := s.finishInterrupted(); err != nil {
		finish(err)
		return
	}
	for attempt := 0; ; attempt++ {
		env, err := s.proofEnv(s.refs)
		if err != nil {
			finish(err)
			return
		}
		t := &tx{s: s, env: env, id: id, now: s.now(), chains: map[string]*chainState{}, trees: map[gitstore.Oid][]gitstore.TreeEntry{}}
		for _, o := range batch {
			o.res, o.err = t.run(o.fn)
		}
		out, staged, err := t.commit()
		if out == refs.NotCommitted && errors.Is(err, refs.ErrConflict) && attempt < 5 {
			// Someone outside bernstein's writer lock moved a ref: redo the batch
			// on the new heads.
			continue
		}
		if out == refs.Committed {
			defer s.writeHeads(t.batchHeads())
		}
		if out != refs.NotCommitted {
			s.remember(t)
			if err != nil {
				// Past the commit point the write stands: what is left is
				// finished by the next writer, and readers already see it whole.
				s.warn("the write is committed, but finishing it failed (the next write completes it): %v", err)
				err = nil
			}
		}
		finish(err)
		// The posts are durable and acknowledged; what follows only tidies
		// up, under the writer lock, while the posters go on.
		if staged != nil {
			s.retire(staged)
		}
		break
	}
	s.maybeCompact()
}

// run runs one operation in the transaction. An operation that fails has
// its changes rolled back, unless its error says they stand (a refused post
// is recorded in the audit mirror).
func (t *tx) run(fn opFunc) (any, error) {
	t.op++
	saved := t.save()
	res, err := fn(t)
	if err != nil {
		if k, ok := err.(keepChanges); !ok || !k.keepChanges() {
			t.restore(saved)
		}
	}
	return res, err
}

// retire finishes a committed write after its posts were acknowledged: the
// pack is mapped for this store's reads, and its keep, whose intent is
// carried out, goes. Neither is needed for durability. A keep that stays
// (a failed removal, a crash) is found by the next writer, which sees every
// ref of its intent moved and removes it.
func (s *Store) retire(st *gitstore.PackStage) {
	if err := st.Publish(); err != nil {
		s.maintErr.Store(err.Error())
	}
	if err := s.objects.Unkeep(st.Base()); err != nil {
		s.maintErr.Store(err.Error())
	}
}

// finishInterrupted completes or discards the transactions of writers that
// were killed mid-commit, then clears what they left in the pack and
// temporary directories. A writer killed before its pack was in place left
// its intent in a staged keep (and perhaps ref locks, which go); one killed
// later left it in the .keep file of its pack, and the refs it names are
// moved or left as the intent's commit point says. It runs under the writer
// lock before every batch, so a write never builds on a transaction half
// moved; when the scan finds nothing, that is all it costs.
func (s *Store) finishInterrupted() error {
	left, err := s.objects.Leftovers()
	if err != nil {
		return fmt.Errorf("read interrupted writes: %w", err)
	}
	if left.MergeTemps > 0 {
		s.clearDeadCompactions()
	}
	if left.Empty() {
		return nil
	}
	for _, path := range left.StagedKeeps {
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read interrupted writes: %w", err)
		}
		// An intent that does not parse was cut short while it was written,
		// before any lock was taken: there is nothing to undo.
		if in, ok, perr := refs.ParseIntent(data); ok && perr == nil {
			if err := s.recover(refs.Pending{Keep: path, Intent: in}); err != nil {
				return err
			}
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if len(left.Keeps) > 0 {
		pending, err := refs.PendingIntents(s.packDir())
		if err != nil {
			return fmt.Errorf("read interrupted writes: %w", err)
		}
		for _, p := range pending {
			if err := s.recover(p); err != nil {
				return err
			}
			if err := os.Remove(p.Keep); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	if _, err := s.objects.CleanStale(); err != nil {
		s.warn("clean the pack directory: %v", err)
	}
	return nil
}

// clearDeadCompactions removes what killed compactions left, when no
// compaction runs (a live one, of this process or another, holds the lock).
func (s *Store) clearDeadCompactions() {
	unlock, ok := s.tryLockCompaction()
	if !ok {
		return
	}
	defer unlock()
	if err := s.objects.CleanMergeTemps(); err != nil {
		s.warn("clean the temporary directory: %v", err)
	}
}

// recover finishes or discards one interrupted transaction.
func (s *Store) recover(p refs.Pending) error {
	committed, err := s.txr.Recover(p)
	if !committed && strings.HasSuffix(p.Keep, ".keep") {
		// A pack cut off before its index was renamed in is invisible to
		// git and to us: nothing can rely on it, so it goes too.
		base := strings.TrimSuffix(p.Keep, ".keep")
		if _, err := os.Stat(base + ".idx"); os.IsNotExist(err) {
			os.Remove(base + ".pack")
		}
	}
	if err != nil {
		if !errors.Is(err, refs.ErrConflict) {
			return fmt.Errorf("finish the write interrupted in %s: %w", filepath.Base(p.Keep), err)
		}
		// Someone else moved a ref the interrupted write meant to move:
		// finishing it would undo their move. The rest of it stands.
		s.warn("an interrupted write could not be finished: %v", err)
	}
	return nil
}

func (s *Store) packDir() string { return filepath.Join(s.objects.Dir(), "pack") }

// lockWriters serializes bernstein writers across processes on this
// repository. The lock dies with its process, so a killed writer never
// wedges the others.
func (s *Store) lockWriters() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(s.lockPath), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", s.lockPath, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

type savepoint struct {
	chains  map[string]chainState
	objects int
}

func (t *tx) save() savepoint {
	sp := savepoint{chains: make(map[string]chainState, len(t.chains)), objects: len(t.objects)}
	for k, c := range t.chains {
		sp.chains[k] = *c
	}
	return sp
}

func (t *tx) restore(sp savepoint) {
	t.objects = t.objects[:sp.objects]
	for k := range t.chains {
		if c, ok := sp.chains[k]; ok {
			*t.chains[k] = c
		} else {
			delete(t.chains, k)
		}
	}
}

// commit writes the batch's objects as one kept pack whose .keep file holds
// the transaction's intent, and moves its refs at once. Every step is
// ordered by what a crash at any instant must leave:
//
//   - the pack and its index are written and synced from the start, beside
//     everything else: nothing needs them before the pack goes into place;
//   - the intent is written (in the stage's keep, not yet synced) before any
//     ref lock is taken, so that a writer killed while it holds locks leaves
//     them to the next writer, which knows them by the intent;
//   - the keep is synced while the ref locks are taken, written and synced:
//     neither needs the other, and the disk takes the flushes together;
//   - the keep, the pack and the index are renamed into place (the keep
//     first: the pack is never visible without it, so git's maintenance
//     leaves it alone) and the pack directory is synced, before the first
//     ref moves: no ref can name an object that a crash could lose;
//   - the refs move (the commit point is the first rename) and their
//     directories are synced before the write is acknowledged.
//
// On success it returns the stage, whose keep the caller removes once the
// write is acknowledged (retire).
func (t *tx) commit() (refs.Outcome, *gitstore.PackStage, error) {
	var updates []refs.Update
	for _, c := range t.chains {
		if c.dirty && c.head != c.old {
			updates = append(updates, refs.Update{Ref: c.ref, Old: c.old, New: c.head})
		}
	}
	if len(updates) == 0 {
		return refs.Committed, nil, nil
	}
	// Every pack carries the empty tree its commits may use: an object found
	// only in some other, unreferenced pack could be pruned under us.
	objs := append(t.objects, gitstore.NewObject(gitstore.TypeTree, nil))
	st, err := t.s.objects.NewPackStage()
	if err != nil {
		return refs.NotCommitted, nil, fmt.Errorf("write objects: %w", err)
	}
	// The pack and its index are written and synced from here on, beside
	// the intent and the ref locks.
	written := make(chan error, 1)
	go func() { written <- st.Write(objs) }()
	if err := st.Keep(refs.Intent{Updates: updates}.Encode()); err != nil {
		if werr := <-written; !errors.Is(werr, refs.ErrFault) {
			st.Abort()
		}
		return refs.NotCommitted, nil, fmt.Errorf("write objects: %w", err)
	}
	if err := t.s.txr.FaultPoint("intent written"); err != nil {
		<-written
		return refs.NotCommitted, nil, err
	}
	keepSynced := make(chan error, 1)
	go func() { keepSynced <- st.SyncKeep() }()
	prep, perr := t.s.txr.Prepare(updates)
	kerr := <-keepSynced
	werr := <-written
	if errors.Is(werr, refs.ErrFault) || errors.Is(perr, refs.ErrFault) {
		return refs.NotCommitted, nil, refs.ErrFault
	}
	if werr != nil || kerr != nil || perr != nil {
		prep.Abort()
		st.Abort()
		if err := errors.Join(werr, kerr); err != nil {
			return refs.NotCommitted, nil, fmt.Errorf("write objects: %w", err)
		}
		return refs.NotCommitted, nil, perr
	}
	if _, err := st.Install(); err != nil {
		if errors.Is(err, refs.ErrFault) {
			return refs.NotCommitted, nil, err
		}
		prep.Abort()
		return refs.NotCommitted, nil, fmt.Errorf("write objects: %w", err)
	}
	if err := t.s.txr.FaultPoint("packed"); err != nil {
		return refs.NotCommitted, nil, err
	}
	out, err := prep.Commit()
	if errors.Is(err, refs.ErrFault) {
		return out, nil, err
	}
	switch out {
	case refs.NotCommitted:
		// Nothing moved: the pack is garbage for git's gc.
		st.Abort()
		return out, nil, err
	case refs.CommittedPending:
		return out, nil, err
	}
	return refs.Committed, st, nil
}

// remember caches the states of the chains a committed batch moved.
func (s *Store) remember(t *tx) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	for ref, c := range t.chains {
		if strings.HasPrefix(ref, refs.SpinePrefix) || strings.HasPrefix(ref, refs.AuditPrefix) {
			s.entryHeads[ref] = entryHead{c.head, c.next, c.last, c.tree}
		}
		if c.ledger != nil {
			s.ledgers[c.ledger.TaskID] = ledgerCache{foldCacheKey{c.head, t.env.proofVersion}, &ledgerFold{State: c.ledger, Proof: c.ledgerProof}}
		}
		if c.journal != nil {
			s.journals[c.journal.Task] = journalCache{foldCacheKey{c.head, t.env.proofVersion}, c.journal}
		}
	}
	for id, es := range t.trees {
		s.cacheTree(id, es)
	}
}

// chain returns ref's chain in this transaction, reading it on first use.
func (t *tx) chain(ref string, load func(c *chainState) error) (*chainState, error) {
	if c, ok := t.chains[ref]; ok {
		return c, nil
	}
	head, err := t.s.refs.ReadOptional(ref)
	if err != nil {
		return nil, err
	}
	c := &chainState{ref: ref, old: head, head: head}
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

// checkHead refuses to extend a chain that no longer contains the head this
// host's writer left on it (heads.go). A journal or ledger that still has
// rows carries that as a fault of its fold (journalStateAt, ledgerStateAt);
// here are the rest: one whose ref is gone, and the writer's own spine and
// audit mirror, whose next entry would take a sequence number already used.
func (t *tx) checkHead(c *chainState) error {
	task := strings.HasPrefix(c.ref, refs.JournalPrefix) || strings.HasPrefix(c.ref, refs.LedgerPrefix)
	own := c.ref == refs.Spine(t.id.Writer) || c.ref == refs.Audit(t.id.Writer)
	if !own && !(task && c.head.IsZero()) {
		return nil
	}
	pos := c.next - 1
	if c.head.IsZero() {
		pos = -1
	}
	name := strings.TrimSuffix(strings.SplitAfterN(strings.TrimPrefix(c.ref, refs.Prefix), "/", 2)[0], "/")
	f, err := t.s.rollback(name, c.ref, c.head, pos)
	if err != nil || f == nil {
		return err
	}
	return fmt.Errorf("%w: %s cannot be trusted from index %d (%s): nothing is written on top of it; run 'bernstein audit verify'", ErrUnproven, c.ref, f.Index, f.Reason)
}

// own makes c's states private to the running operation before it mutates
// them, so a failed operation can be rolled back.
func (t *tx) own(c *chainState) {
	if c.owner == t.op {
		return
	}
	if c.ledger != nil {
		l := *c.ledger
		c.ledger = &l
	}
	if c.journal != nil {
		c.journal = c.journal.clone()
	}
	c.owner = t.op
}

// ledgerChain loads a task's ledger with its folded state: the rows that
// counted, and the proof of the rest.
func (t *tx) ledgerChain(task string) (*chainState, error) {
	return t.chain(refs.Ledger(task), func(c *chainState) error {
		fold, err := t.s.ledgerStateAt(t.env, task, c.head)
		if err != nil {
			return err
		}
		if fold.exists() {
			c.ledger = fold.State
		}
		c.ledgerProof = fold.Proof
		c.next, c.last = fold.State.Rows, string(fold.State.Head)
		c.tree = gitstore.EmptyTree
		return nil
	})
}

// journalChain loads a task's journal with its folded state.
func (t *tx) journalChain(task string) (*chainState, error) {
	c, err := t.chain(refs.Journal(task), func(c *chainState) error {
		st, err := t.s.journalStateAt(t.env, task, c.head)
		if err != nil {
			return err
		}
		c.journal = st
		c.next, c.last = st.Rows, string(st.Head)
		return nil
	})
	if err == nil && c.journal == nil {
		c.journal = newJournalState(task)
		c.tree = gitstore.EmptyTree
	}
	return c, err
}

// entryChain loads a spine or audit chain: only its head entry matters, and
// it is remembered from the last batch while the ref has not moved.
func (t *tx) entryChain(ref string, audit bool) (*chainState, error) {
	return t.chain(ref, func(c *chainState) error {
		t.s.stateMu.Lock()
		h, ok := t.s.entryHeads[ref]
		t.s.stateMu.Unlock()
		if ok && h.head == c.head {
			c.next, c.last, c.tree = h.next, h.last, h.tree
			return nil
		}
		cc, err := t.s.readChainCommit(c.head)
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

// ident formats a commit identity for name (an agent, actor or writer).
func (t *tx) ident(name string) string {
	return gitstore.Ident(name, name+"@bernstein", t.now.Unix())
}

// addCommit appends a commit to c.
func (t *tx) addCommit(c *chainState, tree gitstore.Oid, author string, msg []byte, sign bool) error {
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
func (t *tx) addTree(es []gitstore.TreeEntry) gitstore.Oid {
	if len(es) == 0 {
		return gitstore.EmptyTree
	}
	o := gitstore.NewObject(gitstore.TypeTree, gitstore.EncodeTree(es))
	t.objects = append(t.objects, o)
	t.trees[o.ID] = es
	return o.ID
}

func (t *tx) readTree(id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if es, ok := t.trees[id]; ok {
		return es, nil
	}
	return t.s.readTree(id)
}

// addBlob stores a blob and returns its id.
func (t *tx) addBlob(data []byte) gitstore.Oid {
	o := gitstore.NewObject(gitstore.TypeBlob, data)
	t.objects = append(t.objects, o)
	return o.ID
}

// appendLedger appends a transition row to a task's ledger, refusing an
// illegal transition, and mirrors it into the audit chain.
func (t *tx) appendLedger(task, kind, actor string, data any) (record.Row, *chainState, error) {
	c, err := t.ledgerChain(task)
	if err != nil {
		return record.Row{}, nil, err
	}
	if !c.ledgerProof.whole() {
		return record.Row{}, nil, c.ledgerProof.unproven("ledger", task)
	}
	phase := ""
	if c.ledger != nil {
		phase = c.ledger.Phase
	} else if kind != record.KindTaskCreated {
		// A transition of a task that was never created: the task is
		// unknown, as every reading command says.
		return record.Row{}, nil, fmt.Errorf("%w: %s", ErrUnknownTask, task)
	}
	if err := ledger.Check(task, phase, kind); err != nil {
		return record.Row{}, nil, err
	}
	row, err := record.NewRow(kind, task, c.next, record.Hash(c.last), actor, data)
	if err != nil {
		return record.Row{}, nil, err
	}
	t.own(c)
	if c.ledger == nil {
		c.ledger = &ledger.State{}
	}
	b := row.Bytes()
	if err := c.ledger.ApplyHashed(row, record.Sum(b)); err != nil {
		return record.Row{}, nil, err
	}
	c.ledgerProof.Total = c.ledger.Rows
	if err := t.addCommit(c, gitstore.EmptyTree, actor, record.Message(kind+" "+task, b), true); err != nil {
		return record.Row{}, nil, err
	}
	c.next, c.last = row.Index+1, string(record.Sum(b))
	if err := t.appendAudit(kind, actor, task, string(record.Sum(b)), row.Data); err != nil {
		return record.Row{}, nil, err
	}
	return row, c, nil
}

// appendJournal appends a row to a task's journal. The row's commit tree
// holds the row's own files (artifact versions, command outputs, patches) and
// nothing else: a post costs the same whatever the journal holds already, and
// `git show <row commit>:<path>` shows each file.
func (t *tx) appendJournal(task string, row record.Row, summary string, files map[string][]byte) (*chainState, error) {
	c, err := t.journalChain(task)
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
	if err := c.journal.apply(row, record.Sum(b)); err != nil {
		return nil, err
	}
	if err := t.addCommit(c, tree, row.Actor, record.Message(summary, b), true); err != nil {
		return nil, err
	}
	c.journal.Proof.Total = c.journal.Rows
	c.next, c.last = row.Index+1, string(record.Sum(b))
	return c, nil
}

// nextJournalRow returns the index and prev hash a new row of task takes.
// A journal with rows that are not proven takes none.
func (t *tx) nextJournalRow(task string) (int64, record.Hash, error) {
	c, err := t.journalChain(task)
	if err != nil {
		return 0, "", err
	}
	if !c.journal.Proof.whole() {
		return 0, "", c.journal.Proof.unproven("journal", task)
	}
	return c.next, record.Hash(c.last), nil
}

// spineHeader fills the header the next entry of the writer's spine takes.
func (t *tx) spineHeader(kind string) (record.SpineHeader, error) {
	c, err := t.entryChain(refs.Spine(t.id.Writer), false)
	if err != nil {
		return record.SpineHeader{}, err
	}
	return record.SpineHeader{V: record.Version, Writer: t.id.Writer, Seq: c.next, Prev: record.Hash(c.last), Kind: kind}, nil
}

// appendSpine appends a signed entry (built on spineHeader) to the spine.
// files go into the spine commit's tree.
func (t *tx) appendSpine(entry any, summary string, files map[string][]byte) (record.Hash, error) {
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

// appendAudit appends an HMAC'd, signed entry to the writer's audit mirror.
func (t *tx) appendAudit(event, actor, task, resource string, details []byte) error {
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

const compactAbove = 16

// maybeCompact merges small packs once there are more than compactAbove, in
// the background: posts go on meanwhile (the merged pack is made from packs
// no write touches any more, and written under names no writer clears). A
// compaction lock serializes compactions across processes; when another
// process holds it, this one leaves the work to it. A failure leaves the
// packs as they were. Close waits for a compaction under way.
func (s *Store) maybeCompact() {
	if s.objects.PackCount() <= compactAbove || s.gitMaintains() || !s.compacting.CompareAndSwap(false, true) {
		return
	}
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		defer s.compacting.Store(false)
		unlock, ok := s.tryLockCompaction()
		if !ok {
			return
		}
		defer unlock()
		if err := s.objects.CleanMergeTemps(); err != nil {
			s.maintErr.Store(err.Error())
		}
		if _, err := s.objects.Compact(compactAbove); err != nil {
			s.maintErr.Store(err.Error())
		}
	}()
}

// gitMaintains reports whether git's own maintenance is running on this
// repository: a `git gc` (its gc.pid names a live process of this host) or
// a `git maintenance run` (its lock is recent). A merge of packs then waits
// for a later write: git 2.39's repack gives up ("unable to add recent
// objects") when a pack it listed at its start loses its index before it
// reads it, which a compaction beside it does. Nothing is lost either way;
// this only keeps git's maintenance from failing. A bare `git repack` leaves
// no such mark.
func (s *Store) gitMaintains() bool {
	if b, err := os.ReadFile(filepath.Join(s.gitDir, "gc.pid")); err == nil {
		var pid int
		var host string
		if n, _ := fmt.Sscan(string(b), &pid, &host); n == 2 && pid > 0 {
			if me, err := os.Hostname(); err == nil && me == host && syscall.Kill(pid, 0) == nil {
				return true
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(s.objects.Dir(), "maintenance.lock")); err == nil && time.Since(fi.ModTime()) < time.Hour {
		return true
	}
	return false
}

// tryLockCompaction takes the cross-process compaction lock if no one holds
// it. Like the writer lock, it dies with its process.
func (s *Store) tryLockCompaction() (func(), bool) {
	path := filepath.Join(filepath.Dir(s.lockPath), "compact.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, true
}
