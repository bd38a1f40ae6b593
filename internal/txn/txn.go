// Package txn is the write transaction: posts from concurrent goroutines
// share a batch (group commit), whose objects go to disk as one pack and
// whose refs move in one compare-and-swap ref transaction under an intent
// kept in the pack's .keep file; writers of concurrent processes queue on
// a lock file; a writer killed mid-commit is finished or undone by the
// next one; small packs are merged beside the writers. A Tx is what an
// operation sees: the chains it reads and extends, and the primitives that
// append rows and entries to them.
package txn

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// A write is a batch of operations. Each operation reads and extends the
// chains of one transaction; the batch's objects go to disk as one pack and
// every ref it moved moves in one compare-and-swap ref transaction. Posts
// from concurrent goroutines share a batch (group commit); posts from
// concurrent processes queue on a lock file so no work is thrown away.

// Writer writes to one repository: it runs the batches of its store's
// operations, one committer goroutine at a time.
type Writer struct {
	c        *core.Repo
	prover   *proof.Prover
	folds    *fold.Folder
	heads    *heads.Keeper
	lockPath string

	mu sync.Mutex
	// entryHeads remembers spine and audit heads this writer wrote.
	entryHeads map[string]entryHead

	qmu     sync.Mutex
	queue   []*pendingOp
	leading bool           // a commit loop is running
	arrived chan struct{}  // nudges the commit loop when a post arrives
	loops   sync.WaitGroup // the commit loop and a compaction beside it

	compacting atomic.Bool  // a compaction of this writer's runs
	maintErr   atomic.Value // last maintenance failure, for diagnostics
}

// entryHead is what a writer needs of a spine or audit head to extend it.
type entryHead struct {
	head gitstore.Oid
	next int64
	last string
	tree gitstore.Oid
}

// NewWriter is the writer of repository c: its operations prove the rows
// they read with p, fold the chains with f and check them against the
// heads h keeps.
func NewWriter(c *core.Repo, p *proof.Prover, f *fold.Folder, h *heads.Keeper) *Writer {
	return &Writer{c: c, prover: p, folds: f, heads: h,
		lockPath:   filepath.Join(c.GitDir, "bernstein", "write.lock"),
		entryHeads: map[string]entryHead{},
		arrived:    make(chan struct{}, 1),
	}
}

// Wait waits for the commit loop and a compaction under way.
func (w *Writer) Wait() { w.loops.Wait() }

// Chain is one ref's linear record chain as the transaction sees it.
type Chain struct {
	ref  string
	old  gitstore.Oid // value when first read: the compare-and-swap base
	head gitstore.Oid
	tree gitstore.Oid
	next int64  // index (rows) or seq (entries) of the next record
	last string // hash of the last row or entry, or the last HMAC

	Ledger      *ledger.State // nil when no row of the ledger counted
	LedgerProof fold.Proof
	Journal     *fold.Journal
	owner       int // op sequence that owns the states (copy on write)
	dirty       bool
	// hold is the archive ref whose entry head was read from (""
	// "" when the ref's own), held at holdAt when the chain moves.
	hold   string
	holdAt gitstore.Oid
	// remember: the head was verified as this writer's own (its archive,
	// past the head remembered) and is remembered with the batch even
	// when it does not move.
	remember bool
	// tamper is what the writer's own archive ref held past what it
	// verifies as its own (nil: nothing).
	tamper *ArchiveTamper
	// forged says what the writer's own spine or audit mirror held past
	// what it verifies as its own (ownEntryHead; "": nothing).
	forged string
	// forgedBase is the writer's last verified head under the forged
	// value, which the transaction builds on.
	forgedBase gitstore.Oid
	// atRecorded: the writer's own spine or audit mirror was found at the
	// head this host's writer recorded (ownEntryHead).
	atRecorded bool
	// carry are the entries of the writer's own commits found past a
	// forged one of its archive (ownArchiveBase): its next archive commit
	// adds them again.
	carry []record.ArchivedTask
}

// Tx is one batch's transaction, as its operations see it.
type Tx struct {
	w       *Writer
	env     *proof.Env // proves the rows the batch reads
	id      *keys.Identity
	now     time.Time
	chains  map[string]*Chain
	objects []gitstore.Object
	trees   map[gitstore.Oid][]gitstore.TreeEntry
	op      int
	// verifier proves journal seals for Archivable, made on first use.
	verifier *verify.Verifier
	// restored is the warning of the identity the committed batch moved
	// back (restoreIdentity; "" for none).
	restored string
}

// Identity is the writer identity the transaction signs with.
func (t *Tx) Identity() *keys.Identity { return t.id }

// Op runs one operation inside a transaction.
type Op func(t *Tx) (any, error)

type pendingOp struct {
	fn   Op
	res  any
	err  error
	done chan struct{}
}

// kept marks an operation error whose transaction changes must still be
// committed (a refused post is recorded in the audit mirror).
type kept struct{ err error }

func (k kept) Error() string { return k.err.Error() }

// Keep marks err, returned by an operation, as one whose changes stand:
// Run returns err itself and keeps what the operation wrote.
func Keep(err error) error { return kept{err} }

const maxBatch = 256

// Submit runs fn in the next batch and waits for its outcome. One committer
// goroutine per writer runs the batches while there is work, so no caller
// serves others' posts at the expense of its own.
func (w *Writer) Submit(fn Op) (any, error) {
	o := &pendingOp{fn: fn, done: make(chan struct{})}
	w.qmu.Lock()
	w.queue = append(w.queue, o)
	if !w.leading {
		w.leading = true
		w.loops.Add(1)
		go w.commitLoop()
	}
	w.qmu.Unlock()
	select {
	case w.arrived <- struct{}{}:
	default:
	}
	<-o.done
	return o.res, o.err
}

// batchWait bounds how long the committer waits for the posters of the last
// batch to come back, so that concurrent posters keep sharing batches rather
// than splitting into groups that alternate.
const batchWait = time.Millisecond

func (w *Writer) commitLoop() {
	defer w.loops.Done()
	last := 0
	for {
		w.qmu.Lock()
		n := len(w.queue)
		if n == 0 {
			w.leading = false
			w.qmu.Unlock()
			return
		}
		w.qmu.Unlock()
		if n < last {
			timer := time.NewTimer(batchWait)
		wait:
			for {
				select {
				case <-w.arrived:
					w.qmu.Lock()
					n = len(w.queue)
					w.qmu.Unlock()
					if n >= last {
						break wait
					}
				case <-timer.C:
					break wait
				}
			}
			timer.Stop()
		}
		w.qmu.Lock()
		n = len(w.queue)
		if n > maxBatch {
			n = maxBatch
		}
		batch := append([]*pendingOp(nil), w.queue[:n]...)
		w.queue = w.queue[n:]
		w.qmu.Unlock()
		w.runBatch(batch)
		last = n
	}
}

func (w *Writer) runBatch(batch []*pendingOp) {
	finish := func(err error) {
		for _, o := range batch {
			if err != nil {
				o.res, o.err = nil, err
			}
			close(o.done)
		}
	}
	id, err := w.c.Identity()
	if err == nil {
		err = id.Ready() // a key in ssh-agent: the agent must hold it before anything is built
	}
	if err != nil {
		finish(err)
		return
	}
	unlock, err := w.lockWriters()
	if err != nil {
		finish(err)
		return
	}
	defer unlock()
	if err := w.finishInterrupted(); err != nil {
		finish(err)
		return
	}
	for attempt := 0; ; attempt++ {
		env, err := w.prover.Env(w.c.Refs)
		if err != nil {
			finish(err)
			return
		}
		if b := env.Binding; b != nil && b.ID != "" && b.Problem == "" && b.Ref == "" && b.Signature == "" {
			// The identity as read whole, which a ref moved later does
			// not take away (docs/trust.md, A row belongs to one
			// repository).
			if err := w.c.RecordIdentity(b.ID, b.Head); err != nil {
				w.c.Warn("record the repository's identity in BERNSTEIN_HOME: %v", err)
			}
		}
		t := &Tx{w: w, env: env, id: id, now: w.c.Now(), chains: map[string]*Chain{}, trees: map[gitstore.Oid][]gitstore.TreeEntry{}}
		for _, o := range batch {
			o.res, o.err = t.Run(o.fn)
		}
		restored := t.restoreIdentity()
		out, staged, err := t.commit()
		if out == refs.NotCommitted && errors.Is(err, refs.ErrConflict) && attempt < 5 {
			// Someone outside bernstein's writer lock moved a ref: redo the batch
			// on the new heads.
			continue
		}
		if out == refs.Committed {
			defer w.heads.Write(t.batchHeads())
			if c := t.chains[refs.Repository]; c != nil && c.dirty && c.head != c.old && t.env.Binding != nil && t.env.Binding.ID != "" {
				// An identity this writer minted, raised or moved back.
				if err := w.c.RecordIdentity(t.env.Binding.ID, c.head); err != nil {
					w.c.Warn("record the repository's identity in BERNSTEIN_HOME: %v", err)
				}
			}
		}
		if out != refs.NotCommitted {
			w.remember(t)
			w.warnForged(t)
			if restored != "" {
				t.restored = restored
				w.c.Warn("%s", restored)
			}
			if err != nil {
				// Past the commit point the write stands: what is left is
				// finished by the next writer, and readers already see it whole.
				w.c.Warn("the write is committed, but finishing it failed (the next write completes it): %v", err)
				err = nil
			}
		}
		finish(err)
		// The posts are durable and acknowledged; what follows only tidies
		// up, under the writer lock, while the posters go on.
		if staged != nil {
			w.retire(staged)
		}
		break
	}
	w.maybeCompact()
}

// Run runs one operation in the transaction. An operation that fails has
// its changes rolled back, unless its error says they stand (Keep: a
// refused post is recorded in the audit mirror).
func (t *Tx) Run(fn Op) (any, error) {
	t.op++
	saved := t.save()
	res, err := fn(t)
	if k, ok := err.(kept); ok {
		return res, k.err
	}
	if err != nil {
		t.restore(saved)
	}
	return res, err
}

// retire finishes a committed write after its posts were acknowledged: the
// pack is mapped for this store's reads, and its keep, whose intent is
// carried out, goes. Neither is needed for durability. A keep that stays
// (a failed removal, a crash) is found by the next writer, which sees every
// ref of its intent moved and removes it.
func (w *Writer) retire(st *gitstore.PackStage) {
	if err := st.Publish(); err != nil {
		w.maintErr.Store(err.Error())
	}
	if err := w.c.Objects.Unkeep(st.Base()); err != nil {
		w.maintErr.Store(err.Error())
	}
}

type savepoint struct {
	chains  map[string]Chain
	objects int
	binding *verify.Binding
}

func (t *Tx) save() savepoint {
	sp := savepoint{chains: make(map[string]Chain, len(t.chains)), objects: len(t.objects), binding: t.env.Binding}
	for k, c := range t.chains {
		sp.chains[k] = *c
	}
	return sp
}

func (t *Tx) restore(sp savepoint) {
	t.objects = t.objects[:sp.objects]
	t.env.Binding = sp.binding
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
func (t *Tx) commit() (refs.Outcome, *gitstore.PackStage, error) {
	var updates []refs.Update
	held := map[string]bool{}
	for _, c := range t.chains {
		if c.dirty && c.head != c.old {
			updates = append(updates, refs.Update{Ref: c.ref, Old: c.old, New: c.head})
			if c.hold != "" && !held[c.hold] && t.chains[c.hold] == nil {
				// The archive still names the head the chain extends.
				held[c.hold] = true
				updates = append(updates, refs.Update{Ref: c.hold, Old: c.holdAt, New: c.holdAt})
			}
		}
	}
	if len(updates) == 0 {
		return refs.Committed, nil, nil
	}
	// Every pack carries the empty tree its commits may use: an object found
	// only in some other, unreferenced pack could be pruned under us.
	objs := append(t.objects, gitstore.NewObject(gitstore.TypeTree, nil))
	st, err := t.w.c.Objects.NewPackStage()
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
	if err := t.w.c.Txr.FaultPoint("intent written"); err != nil {
		<-written
		return refs.NotCommitted, nil, err
	}
	keepSynced := make(chan error, 1)
	go func() { keepSynced <- st.SyncKeep() }()
	prep, perr := t.w.c.Txr.Prepare(updates)
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
	if err := t.w.c.Txr.FaultPoint("packed"); err != nil {
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

// batchHeads is what a committed batch leaves to remember: the head of
// every task chain it moved (a deleted one, archived, keeps the head
// remembered before) and of the writer's own spine, audit mirror, archive
// and anchors.
func (t *Tx) batchHeads() map[string]heads.Mark {
	out := map[string]heads.Mark{}
	for ref, c := range t.chains {
		if !c.remember && (!c.dirty || c.head == c.old) || c.next <= 0 {
			continue
		}
		if strings.HasPrefix(ref, refs.JournalPrefix) || strings.HasPrefix(ref, refs.LedgerPrefix) || recordedChain(t.id.Writer, ref) {
			link := c.last
			if link == "" {
				link = "-" // the anchors chain links by parent alone
			}
			out[ref] = heads.Mark{Pos: c.next - 1, Link: link, Commit: c.head}
		}
	}
	return out
}

// remember keeps the states of the chains a committed batch moved.
func (w *Writer) remember(t *Tx) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ref, c := range t.chains {
		if strings.HasPrefix(ref, refs.SpinePrefix) || strings.HasPrefix(ref, refs.AuditPrefix) {
			w.entryHeads[ref] = entryHead{c.head, c.next, c.last, c.tree}
		}
		if c.Ledger != nil {
			w.folds.Remember(t.env.Version, c.head, &fold.Ledger{State: c.Ledger, Proof: c.LedgerProof}, gitstore.ZeroOid, nil)
		}
		if c.Journal != nil {
			w.folds.Remember(t.env.Version, gitstore.ZeroOid, nil, c.head, c.Journal)
		}
	}
	for id, es := range t.trees {
		w.c.CacheTree(id, es)
	}
}
