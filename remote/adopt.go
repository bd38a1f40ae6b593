package remote

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/taskops"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// ErrNotDiverged: task adopt was asked to resolve a task whose chains did
// not diverge from the remote's (fetch and push move them).
var ErrNotDiverged = errors.New("has not diverged")

// AdoptResult says what Adopt did.
type AdoptResult struct {
	Remote string `json:"remote"`
	Task   string `json:"task_id"`
	// Journal and Ledger say what became of each chain.
	Journal AdoptedChain `json:"journal"`
	Ledger  AdoptedChain `json:"ledger"`
	// Rerecorded are this host's dropped journal rows recorded again on
	// top of the remote's chain; NotRerecorded the ones that were not
	// (a ledger row, work that no longer holds, another writer's row), with
	// why. Both name the dropped row.
	Rerecorded    []DroppedRow `json:"rerecorded"`
	NotRerecorded []DroppedRow `json:"not_rerecorded"`
	// Forks are the refs that keep the dropped rows, readable and pushable.
	Forks []string `json:"forks"`
	// Superseded are this writer's spine entries that sealed dropped rows;
	// SpineSeq is the seq of the supersede entry that names them.
	Superseded int   `json:"superseded"`
	SpineSeq   int64 `json:"spine_seq"`
}

// AdoptedChain is one of the task's chains after Adopt.
type AdoptedChain struct {
	Diverged bool   `json:"diverged"`
	Dropped  int    `json:"dropped"` // this host's rows after the shared ones
	Base     int64  `json:"base"`    // the rows both shared
	Remote   string `json:"remote"`  // the remote's head commit taken ("" none)
	Head     string `json:"head"`    // the chain's head commit afterwards
}

// DroppedRow is a row of this host's chain that the adoption dropped.
type DroppedRow struct {
	Chain   string `json:"chain"` // journal or ledger
	Index   int64  `json:"index"`
	Kind    string `json:"kind"`
	Key     string `json:"key,omitempty"`
	Version int64  `json:"version,omitempty"`
	// NewIndex is where the row was recorded again (-1 when it was not);
	// Why says why it was not.
	NewIndex int64  `json:"new_index"`
	Why      string `json:"why,omitempty"`
}

func (r AdoptResult) String() string {
	return fmt.Sprintf("resolved: %d rows of %s re-recorded after a divergence with %s", len(r.Rerecorded), r.Task, r.Remote)
}

// Adopt resolves a divergence of task with remote (bernstein task adopt):
// it fetches the remote's heads, takes the remote's journal and ledger of
// the task as the truth (they must verify here: every row signed by a key
// this host trusts), keeps this host's own chains of the task in its fork
// refs (refs/bernstein/forks/, where every host reads them), records its
// own journal rows the remote lacks again on top (artifact versions as new
// versions of their keys, work rows as work again where the work still
// holds), and signs, in its spine and audit mirror, a supersede entry that
// names the dropped rows and the spine entries that sealed them. All in
// one transaction: readers see the task before or after, never between.
func (s *Syncer) Adopt(remote, task string) (*AdoptResult, error) {
	if err := Check(s.c.GitDir, remote); err != nil {
		return nil, err
	}
	if err := s.fetchTracking(remote, []string{"+" + refs.Prefix + "*:" + TrackingPrefix(remote) + "*"}, true); err != nil {
		return nil, err
	}
	out, err := s.w.Submit(func(t *txn.Tx) (any, error) { return s.adopt(t, remote, task) })
	if err != nil {
		return nil, err
	}
	return out.(*AdoptResult), nil
}

// adoptSide is one of the task's chains, this host's and the remote's.
type adoptSide struct {
	kind, ref    string
	mine, theirs gitstore.Oid
	a            ancestry
	base         int64          // rows both share
	dropped      []chain.Commit // this host's rows after them, oldest first
	hashes       []record.Hash
}

func (s *Syncer) adopt(t *txn.Tx, remote, task string) (*AdoptResult, error) {
	me := t.Identity().Writer
	res := &AdoptResult{Remote: remote, Task: task, Rerecorded: []DroppedRow{}, NotRerecorded: []DroppedRow{}, Forks: []string{}}
	var sides []*adoptSide
	diverged := false
	for _, kind := range []string{"ledger", "journal"} {
		ref := refs.Journal(task)
		if kind == "ledger" {
			ref = refs.Ledger(task)
		}
		sd := &adoptSide{kind: kind, ref: ref}
		var err error
		if sd.mine, err = t.RefValue(ref); err != nil {
			return nil, err
		}
		if sd.theirs, err = s.c.Refs.ReadOptional(TrackingRef(remote, ref)); err != nil {
			return nil, err
		}
		if sd.theirs.IsZero() {
			return nil, fmt.Errorf("%s holds no %s of task %s: nothing to adopt", remote, kind, task)
		}
		if sd.mine.IsZero() {
			sd.a = ancestry{rel: relBehind}
		} else if sd.a, err = s.relate(sd.mine, sd.theirs); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		if sd.a.rel == relDiverged {
			diverged = true
			if err := s.dropped(sd); err != nil {
				return nil, err
			}
		}
		sides = append(sides, sd)
	}
	if !diverged {
		return nil, fmt.Errorf("task %s %w from %s: 'bernstein fetch %s' and 'bernstein push %s' move it", task, ErrNotDiverged, remote, remote, remote)
	}
	// The remote's chains first (AdoptChain must precede any other use of
	// their refs), each only if every row verifies here.
	for _, sd := range sides {
		if sd.a.rel != relDiverged && sd.a.rel != relBehind {
			continue
		}
		c, err := t.AdoptChain(task, sd.kind, sd.theirs)
		if err != nil {
			return nil, fmt.Errorf("%s's %s of %s: %w", remote, sd.kind, task, err)
		}
		proof := c.LedgerProof
		if sd.kind == "journal" {
			proof = c.Journal.Proof
		}
		if !proof.Whole() {
			f := proof.Faults[0]
			return nil, fmt.Errorf("%s's %s of task %s does not verify here at index %d (%s: %s): only a chain whose every row a trusted key signed is adopted; pin its writers ('bernstein keys pin') if that is what is missing", remote, sd.kind, task, f.Index, f.State, f.Reason)
		}
	}
	// What the adopted chains lean on (the other writers' spine entries and
	// audit entries of their rows) moves with them, as a fetch would move
	// it, checked against the task as adopted.
	if err := s.fetchWith(t, remote, task, sides); err != nil {
		return nil, err
	}
	// What is recorded again must not be tampered with here.
	for _, sd := range sides {
		if sd.a.rel != relDiverged {
			continue
		}
		proof, err := t.ChainProof(task, sd.kind, sd.mine)
		if err != nil {
			return nil, err
		}
		for _, f := range proof.Faults {
			if f.State != verify.Tampered {
				continue // a row only unverifiable here: the remote's chain was checked above
			}
			return nil, fmt.Errorf("this host's %s of task %s does not verify at index %d (%s: %s): nothing is recorded again from it; run 'bernstein audit verify'", sd.kind, task, f.Index, f.State, f.Reason)
		}
	}
	// This host's own chains go to its forks, where every host reads them.
	for _, sd := range sides {
		if sd.a.rel != relDiverged {
			continue
		}
		fork := refs.Fork(me, sd.kind, task, sd.base)
		cur, err := t.RefValue(fork)
		if err != nil {
			return nil, err
		}
		if !cur.IsZero() && cur != sd.mine {
			if a, err := s.relate(cur, sd.mine); err != nil || a.rel != relBehind {
				return nil, fmt.Errorf("%s already holds %s, which %s does not extend", fork, cur, sd.mine)
			}
		}
		t.SetRef(fork, cur, sd.mine)
		res.Forks = append(res.Forks, fork)
	}
	var ledgerSide, journalSide *adoptSide
	for _, sd := range sides {
		if sd.kind == "ledger" {
			ledgerSide = sd
		} else {
			journalSide = sd
		}
	}
	var entries []record.Hash
	// The ledger's dropped rows are transitions made on a state the
	// remote's ledger decides otherwise: kept in the fork, not made again.
	for i, cc := range ledgerSide.dropped {
		row, _ := record.ParseRow(cc.Record)
		res.NotRerecorded = append(res.NotRerecorded, DroppedRow{Chain: "ledger", Index: ledgerSide.base + int64(i), Kind: row.Kind, NewIndex: -1,
			Why: "a ledger transition is not made again: the remote's ledger holds the task's state"})
	}
	for i, cc := range journalSide.dropped {
		row, err := record.ParseRow(cc.Record)
		if err != nil {
			return nil, fmt.Errorf("%s row %d: %w", journalSide.ref, journalSide.base+int64(i), err)
		}
		d := DroppedRow{Chain: "journal", Index: row.Index, Kind: row.Kind, NewIndex: -1}
		var ap record.ArtifactPosted
		if row.Kind == record.KindArtifactPosted && row.DecodeData(&ap) == nil {
			d.Key, d.Version = ap.Key, ap.Version
		}
		if !writtenBy(cc, me) {
			d.Why = "written by another writer, which records it again itself"
			res.NotRerecorded = append(res.NotRerecorded, d)
			continue
		}
		if row.Kind == record.KindArtifactPosted {
			entries = append(entries, ap.SpineEntryHash)
		}
		next, _, err := t.NextJournalRow(task)
		if err != nil {
			return nil, err
		}
		ok, why, err := taskops.Rerecord(t, s.c.Objects, task, row)
		if err != nil {
			return nil, fmt.Errorf("record row %d of %s again: %w", row.Index, task, err)
		}
		if !ok {
			d.Why = why
			res.NotRerecorded = append(res.NotRerecorded, d)
			continue
		}
		d.NewIndex = next
		res.Rerecorded = append(res.Rerecorded, d)
	}
	seals, err := s.sealsOf(t, me, task, journalSide, ledgerSide)
	if err != nil {
		return nil, err
	}
	entries = append(entries, seals...)
	if entries == nil {
		entries = []record.Hash{}
	}
	jc, err := s.superseded(t, task, journalSide)
	if err != nil {
		return nil, err
	}
	lc, err := s.superseded(t, task, ledgerSide)
	if err != nil {
		return nil, err
	}
	hdr, err := t.SpineHeader(record.SpineSupersede)
	if err != nil {
		return nil, err
	}
	e := record.SpineSupersedeEntry{SpineHeader: hdr, TaskID: task, Remote: remote, Journal: jc, Ledger: lc, Entries: entries, Rerecorded: int64(len(res.Rerecorded))}
	h, err := t.AppendSpine(e, fmt.Sprintf("supersede %s: adopted %s's chains, %d rows re-recorded", task, remote, len(res.Rerecorded)), nil)
	if err != nil {
		return nil, err
	}
	details := record.MustCanonical(struct {
		Remote     string `json:"remote"`
		Rerecorded int64  `json:"rerecorded"`
		Dropped    int    `json:"dropped"`
	}{remote, int64(len(res.Rerecorded)), len(jc.Dropped) + len(lc.Dropped)})
	if err := t.AppendAudit(record.EventTaskAdopted, me, task, string(h), details); err != nil {
		return nil, err
	}
	res.Superseded, res.SpineSeq = len(entries), hdr.Seq
	for _, sd := range sides {
		ac := AdoptedChain{Diverged: sd.a.rel == relDiverged, Dropped: len(sd.dropped), Base: sd.base, Remote: sd.theirs.String()}
		if head, err := t.RefValue(sd.ref); err == nil {
			ac.Head = head.String()
		}
		if sd.kind == "journal" {
			res.Journal = ac
		} else {
			res.Ledger = ac
		}
	}
	return res, nil
}

// dropped reads this host's rows of sd's chain after the ones it shares
// with the remote's.
func (s *Syncer) dropped(sd *adoptSide) error {
	stop := sd.a.base
	cs, _, err := chain.WalkBack(s.c.Objects, sd.mine, stop, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", sd.ref, err)
	}
	if !stop.IsZero() {
		at, ok := s.position(sd.ref, stop)
		if !ok {
			return fmt.Errorf("%s: cannot read the commit it shares with the remote", sd.ref)
		}
		sd.base = at + 1
	}
	sd.dropped = cs
	for _, cc := range cs {
		sd.hashes = append(sd.hashes, record.Sum(cc.Record))
	}
	return nil
}

// superseded is what the supersede entry says of sd's chain, as the
// transaction leaves it.
func (s *Syncer) superseded(t *txn.Tx, task string, sd *adoptSide) (record.SupersededChain, error) {
	sc := record.SupersededChain{Dropped: append([]record.Hash{}, sd.hashes...)}
	rows := func(id gitstore.Oid) (int64, record.Hash, error) {
		if id.IsZero() {
			return 0, "", nil
		}
		cc, err := chain.Read(s.c.Objects, id)
		if err != nil {
			return 0, "", err
		}
		r, err := record.ParseRow(cc.Record)
		return r.Index + 1, record.Sum(cc.Record), err
	}
	var err error
	if sc.DroppedRows, _, err = rows(sd.mine); err != nil {
		return sc, err
	}
	if sc.AdoptedRows, sc.Adopted, err = rows(sd.theirs); err != nil {
		return sc, err
	}
	if sd.kind == "journal" {
		next, last, err := t.NextJournalRow(task)
		if err != nil {
			return sc, err
		}
		sc.Rows, sc.Head = next, last
		return sc, nil
	}
	c, err := t.LedgerChain(task)
	if err != nil {
		return sc, err
	}
	if c.Ledger != nil {
		sc.Rows, sc.Head = c.Ledger.Rows, c.Ledger.Head
	}
	return sc, nil
}

// sealsOf finds the seals in writer's spine of task's dropped rows: a seal
// follows a terminal ledger transition, so the spine is read only when the
// dropped ledger rows hold one, and back only to the first seal older than
// them.
func (s *Syncer) sealsOf(t *txn.Tx, writer, task string, journal, led *adoptSide) ([]record.Hash, error) {
	terminal := false
	for _, cc := range led.dropped {
		if r, err := record.ParseRow(cc.Record); err == nil && ledger.Terminal(ledger.PhaseOf(r.Kind)) {
			terminal = true
		}
	}
	if !terminal {
		return nil, nil
	}
	head, err := t.RefValue(refs.Spine(writer))
	if err != nil {
		return nil, err
	}
	droppedJournal := map[record.Hash]bool{}
	for _, h := range journal.hashes {
		droppedJournal[h] = true
	}
	var out []record.Hash
	var werr error
	chain.Walk(s.c.Objects, head, func(cc chain.Commit) bool {
		if cc.Err != nil {
			werr = cc.Err
			return false
		}
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil {
			werr = err
			return false
		}
		if se := e.Seal; se != nil && se.TaskID == task {
			if se.LedgerIndex < led.base {
				return false // older than the divergence: so is the rest
			}
			if droppedJournal[se.Head] || se.LedgerIndex < led.base+int64(len(led.dropped)) {
				out = append(out, e.Hash)
			}
		}
		return true
	})
	return out, werr
}

// writtenBy reports whether writer wrote the chain commit cc (it is its
// committer).
func writtenBy(cc chain.Commit, writer string) bool {
	return strings.HasPrefix(cc.Commit.Committer, writer+" <")
}

// fetchWith moves, in the adoption's transaction, every other ref a fetch
// of remote would move, checked as a fetch checks them but against the
// task's refs at the remote's heads.
func (s *Syncer) fetchWith(t *txn.Tx, remote, task string, sides []*adoptSide) error {
	p, err := s.planFetch(remote, nil)
	if err != nil {
		return err
	}
	over := map[string]gitstore.Oid{}
	for _, sd := range sides {
		if sd.a.rel == relDiverged || sd.a.rel == relBehind {
			over[sd.ref] = sd.theirs
		}
	}
	var cands []refs.Update
	for _, u := range p.cands {
		if u.Ref != refs.Journal(task) && u.Ref != refs.Ledger(task) && !ownRef(u.Ref, t.Identity().Writer) {
			cands = append(cands, u)
		}
	}
	p.cands, p.view = cands, overlay{p.local, over}
	moves, _, err := s.verifyMoves(remote, p)
	if err != nil {
		return err
	}
	for _, u := range moves {
		t.SetRef(u.Ref, u.Old, u.New)
	}
	return nil
}

// overlay is a view of refs with some refs at other values.
type overlay struct {
	refs.Source
	over map[string]gitstore.Oid
}

func (o overlay) ReadOptional(ref string) (gitstore.Oid, error) {
	if v, ok := o.over[ref]; ok {
		return v, nil
	}
	return o.Source.ReadOptional(ref)
}

func (o overlay) List(prefix string) (map[string]gitstore.Oid, []string, error) {
	vals, names, err := o.Source.List(prefix)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]gitstore.Oid, len(vals))
	for k, v := range vals {
		out[k] = v
	}
	for ref, v := range o.over {
		if !strings.HasPrefix(ref, prefix) {
			continue
		}
		if _, ok := out[ref]; !ok {
			names = append(names, ref)
		}
		out[ref] = v
	}
	sort.Strings(names)
	return out, names, nil
}
