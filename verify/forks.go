package verify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Forks. When two hosts write to one task before seeing each other's rows,
// the task's journal or ledger diverges: the remote keeps the rows of the
// host that pushed first, and the other host's spine still seals (and its
// audit mirror still records) rows of its own that the shared chain does
// not hold. That host publishes those rows under
// refs/bernstein/forks/<writer>/<kind>/<task>/<base> (its chain's head; base
// is the rows it shares with the task's chain): a push does while the task
// is diverged, `task adopt` does as it takes the remote's chains as the
// truth. A writer's spine entries, seals and audit entries of a task are
// then explained by its fork, not reported as rolled back, when the fork
// holds the rows they name and truly diverged from the task (the task's
// chain of one of its kinds holds other rows after the shared ones, which
// no one can forge without a trusted key). A divergence so explained is
// pending until the writer's spine holds a supersede entry of the task
// (task adopt), and resolved after.

// ForkChain is a writer's fork of one of a task's chains, read against the
// task's chain of that kind.
type ForkChain struct {
	Ref    string
	Writer string
	Kind   string // journal or ledger
	Task   string
	Head   gitstore.Oid
	// Base is how many rows the fork shares with the task's chain; Rows
	// (with their Hashes and Commits) are the fork's rows after them,
	// oldest first.
	Base    int64
	Rows    []record.Row
	Hashes  []record.Hash
	Commits []gitstore.Oid
	// Diverges is set when the task's chain holds other rows after Base:
	// the fork is not merely ahead of it.
	Diverges bool
	// Err says why the fork cannot explain anything (it does not read as
	// rows of its task, or a row is not signed by its writer's key).
	Err string
}

// row returns the fork's row at index and its hash, if the fork holds one
// there after the shared rows.
func (f *ForkChain) row(index int64) (*record.Row, record.Hash) {
	if f.Err != "" || index < f.Base || index >= f.Base+int64(len(f.Rows)) {
		return nil, ""
	}
	return &f.Rows[index-f.Base], f.Hashes[index-f.Base]
}

// holds reports whether the fork holds a row hashing to h after the shared
// rows.
func (f *ForkChain) holds(h record.Hash) bool {
	return f.Err == "" && slices.Contains(f.Hashes, h)
}

// ReadForkChain reads the fork whose head is head against the task's chain
// of its kind, whose head is main (zero when the task has none): both are
// walked back in step until they meet, so what it costs follows what
// differs. The fork's own rows are proven under env: a row that is
// tampered, or does not chain, makes the whole fork explain nothing.
func ReadForkChain(env *Env, ref string, head, main gitstore.Oid) (*ForkChain, error) {
	writer, kind, task, _, err := refs.ParseFork(ref)
	if err != nil {
		return nil, err
	}
	f := &ForkChain{Ref: ref, Writer: writer, Kind: kind, Task: task, Head: head}
	pos := func(id gitstore.Oid) (int64, error) {
		if id.IsZero() {
			return -1, nil
		}
		cc, err := chain.Read(env.Objects, id)
		if err != nil {
			return 0, err
		}
		r, err := record.ParseRow(cc.Record)
		return r.Index, err
	}
	parent := func(id gitstore.Oid) (gitstore.Oid, error) {
		data, err := env.Objects.ReadType(id, gitstore.TypeCommit)
		if err != nil {
			return gitstore.ZeroOid, err
		}
		c, err := gitstore.ParseCommitLinks(data)
		if err != nil || len(c.Parents) == 0 {
			return gitstore.ZeroOid, err
		}
		return c.Parents[0], nil
	}
	fpos, err := pos(head)
	if err != nil {
		f.Err = err.Error()
		return f, nil
	}
	mpos, err := pos(main)
	if err != nil {
		return nil, fmt.Errorf("%s of %s: %w", kind, task, err)
	}
	var mine []chain.Commit
	fid, mid := head, main
	take := func() bool {
		cc, err := chain.Read(env.Objects, fid)
		if err != nil {
			f.Err = err.Error()
			return false
		}
		mine = append(mine, cc)
		if len(cc.Commit.Parents) == 0 {
			fid = gitstore.ZeroOid
		} else {
			fid = cc.Commit.Parents[0]
		}
		fpos--
		return true
	}
	for fpos > mpos {
		if !take() {
			return f, nil
		}
	}
	for mpos > fpos {
		if mid, err = parent(mid); err != nil {
			return nil, fmt.Errorf("%s of %s: %w", kind, task, err)
		}
		mpos--
		f.Diverges = true
	}
	for fpos >= 0 && fid != mid {
		if !take() {
			return f, nil
		}
		if mid, err = parent(mid); err != nil {
			return nil, fmt.Errorf("%s of %s: %w", kind, task, err)
		}
		mpos--
		f.Diverges = true
	}
	f.Base = fpos + 1
	slices.Reverse(mine)
	proofs := proveCommits(env, mine)
	var prev record.Hash
	for i, cc := range mine {
		row, err := record.ParseRow(cc.Record)
		switch {
		case err != nil:
			f.Err = fmt.Sprintf("row %d: %v", f.Base+int64(i), err)
		case row.TaskID != task || row.Index != f.Base+int64(i) || i > 0 && row.Prev != prev:
			f.Err = fmt.Sprintf("row %d does not chain as a row of %s's %s", f.Base+int64(i), task, kind)
		case proofs[i].State == Tampered:
			f.Err = fmt.Sprintf("row %d: %s", row.Index, proofs[i].Reason)
		}
		if f.Err != "" {
			return f, nil
		}
		prev = record.Sum(cc.Record)
		f.Rows, f.Hashes, f.Commits = append(f.Rows, row), append(f.Hashes, prev), append(f.Commits, cc.ID)
	}
	return f, nil
}

// taskForks are the forks of one task, by writer.
type taskForks map[string][]*ForkChain

// valid reports whether writer's forks of the task truly diverged from it:
// one of them holds rows after the shared ones while the task's chain of
// its kind holds others.
func (tf taskForks) valid(writer string) bool {
	for _, f := range tf[writer] {
		if f.Err == "" && f.Diverges && len(f.Rows) > 0 {
			return true
		}
	}
	return false
}

// row finds, among writer's valid forks of kind, the row at index.
func (tf taskForks) row(writer, kind string, index int64) (*record.Row, record.Hash) {
	if !tf.valid(writer) {
		return nil, ""
	}
	for _, f := range tf[writer] {
		if f.Kind == kind {
			if r, h := f.row(index); r != nil {
				return r, h
			}
		}
	}
	return nil, ""
}

// holds reports whether writer's valid forks of kind hold a row hashing to h.
func (tf taskForks) holds(writer, kind string, h record.Hash) bool {
	if !tf.valid(writer) {
		return false
	}
	for _, f := range tf[writer] {
		if f.Kind == kind && f.holds(h) {
			return true
		}
	}
	return false
}

// forks reads (once per verifier) the forks of task in the verifier's view.
// A view that does not cover refs/bernstein/forks/ has none.
func (v *Verifier) forks(task string) taskForks {
	v.forkMu.Lock()
	defer v.forkMu.Unlock()
	if tf, ok := v.forkCache[task]; ok {
		return tf
	}
	if v.forkCache == nil {
		v.forkCache = map[string]taskForks{}
	}
	tf := taskForks{}
	v.forkCache[task] = tf
	vals, names, err := v.Env.Refs.List(refs.ForksPrefix)
	if err != nil {
		return tf
	}
	for _, name := range names {
		writer, kind, t, _, err := refs.ParseFork(name)
		if err != nil || t != task {
			continue
		}
		main := refs.Journal(task)
		if kind == kindLedger {
			main = refs.Ledger(task)
		}
		mh, err := v.Env.Refs.ReadOptional(main)
		if err != nil {
			continue
		}
		f, err := ReadForkChain(v.Env, name, vals[name], mh)
		if err != nil {
			continue
		}
		tf[writer] = append(tf[writer], f)
	}
	return tf
}

// DivergedRow is a row of a task that a writer's spine entry, seal or audit
// entry names and that the task's chain does not hold, because the writer's
// chain diverged from it: the row is in the writer's fork
// (refs/bernstein/forks/), and the divergence is pending (the writer has
// not run task adopt) or resolved (its supersede entry names the row).
type DivergedRow struct {
	Writer   string `json:"writer"`
	Chain    string `json:"chain"` // journal or ledger
	Index    int64  `json:"index"`
	Kind     string `json:"kind"`
	Key      string `json:"key,omitempty"`
	Version  int64  `json:"version,omitempty"`
	Resolved bool   `json:"resolved"`
}

// explainEntry says whether the artifact spine entry r of task, which the
// journal does not hold, is explained by its writer's fork, and how.
func (v *Verifier) explainEntry(task string, r *SpineRecord) (*DivergedRow, bool) {
	a := r.Artifact
	row, _ := v.forks(task).row(r.Writer, kindJournal, a.JournalIndex)
	if row == nil || row.Kind != record.KindArtifactPosted {
		return nil, false
	}
	var d record.ArtifactPosted
	if row.DecodeData(&d) != nil || d.SpineEntryHash != r.Hash() {
		return nil, false
	}
	return &DivergedRow{Writer: r.Writer, Chain: kindJournal, Index: a.JournalIndex, Kind: row.Kind, Key: a.Key, Version: a.Version,
		Resolved: v.Spine.superseded(r.Writer, task, func(s *record.SpineSupersedeEntry) bool { return slices.Contains(s.Entries, r.Hash()) })}, true
}

// explainSeal says whether seal r of task, whose transition the ledger does
// not hold, is explained by its writer's fork of the ledger.
func (v *Verifier) explainSeal(task string, r *SpineRecord) bool {
	row, _ := v.forks(task).row(r.Writer, kindLedger, r.Seal.LedgerIndex)
	return row != nil && row.Kind == r.Seal.Transition
}

// explainRow says whether the row hashing to h that writer's audit entry
// records, and the task's chain of kind does not hold, is in writer's fork.
func (v *Verifier) explainRow(task, writer, kind string, h record.Hash) (*DivergedRow, bool) {
	tf := v.forks(task)
	if !tf.holds(writer, kind, h) {
		return nil, false
	}
	d := &DivergedRow{Writer: writer, Chain: kind, Index: -1, Resolved: v.Spine.superseded(writer, task, func(s *record.SpineSupersedeEntry) bool {
		c := s.Journal
		if kind == kindLedger {
			c = s.Ledger
		}
		return slices.Contains(c.Dropped, h)
	})}
	for _, f := range tf[writer] {
		if f.Kind == kind {
			if i := slices.Index(f.Hashes, h); i >= 0 {
				d.Index, d.Kind = f.Base+int64(i), f.Rows[i].Kind
			}
		}
	}
	return d, true
}

// superseded reports whether writer's spine holds a supersede entry of
// task, signed by a key that checks, for which match holds.
func (ix *SpineIndex) superseded(writer, task string, match func(*record.SpineSupersedeEntry) bool) bool {
	for _, r := range ix.ofTask(task).sups {
		if r.Writer != writer || r.ChainErr != "" || !match(r.Supersede) {
			continue
		}
		if st, _ := ix.signature(r); st != sigBad {
			return true
		}
	}
	return false
}

// Resolution is a writer's supersede entry of a task, as audit verify
// reports it: the divergence with Remote resolved, Rerecorded rows recorded
// again on top of the remote's, the rows it dropped kept in its forks.
type Resolution struct {
	Task       string `json:"task_id"`
	Writer     string `json:"writer"`
	Seq        int64  `json:"seq"`
	Remote     string `json:"remote"`
	Rerecorded int64  `json:"rerecorded"`
	Dropped    int    `json:"dropped"`
	// Forks are the refs that keep the dropped rows, when this repository
	// has them.
	Forks []string `json:"forks"`
}

func (r Resolution) String() string {
	where := "its forks are not in this repository"
	if len(r.Forks) > 0 {
		where = "kept in " + strings.Join(r.Forks, ", ")
	}
	return fmt.Sprintf("resolved: %d rows of %s re-recorded after a divergence with %s (writer %s, spine seq %d; %d rows dropped, %s)",
		r.Rerecorded, r.Task, r.Remote, r.Writer, r.Seq, r.Dropped, where)
}

// Pending is a writer's divergence from a task that its spine has not
// resolved yet: its fork holds rows its spine or audit mirror names.
type Pending struct {
	Task   string   `json:"task_id"`
	Writer string   `json:"writer"`
	Rows   int      `json:"rows"`
	Forks  []string `json:"forks"`
}

func (p Pending) String() string {
	return fmt.Sprintf("pending: writer %s's %d rows of %s diverged from the task (kept in %s): that host resolves it with 'bernstein task adopt %s'",
		p.Writer, p.Rows, p.Task, strings.Join(p.Forks, ", "), p.Task)
}
