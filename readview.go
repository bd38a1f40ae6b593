package bernstein

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// A ReadView answers reads from one consistent snapshot of the refs they
// depend on: a task's journal and ledger, every lineage spine and the
// published keys. Its keys name exactly what an answer was computed from:
// those ref values and the reader's trust set (its pins, --allowed-signers
// and its own writer: the proof version the Store keys its folds by), so a
// server can keep an answer for as long as those refs stay where they are
// and no key is pinned or unpinned. What a view answers is what Store.Task,
// Store.Artifacts, Store.TaskFeed and Store.Productions answer for the same
// refs.
type ReadView struct {
	s     *Store
	snap  *refs.Snapshot
	idx   *proof.IndexedView // snap, with its spine index built once
	task  string             // "" for a view of every task
	spine string             // the key of the spines, the published keys and the trust set
	proof string             // the proof version: the published keys and the trust set
	// namesBad are the archive refs whose task names a paged listing could
	// not read when it chose the page (PageView).
	namesBad []refs.BadRef
}

// BadArchives lists the archive refs this view's reads could not read as
// archives and read past (docs/archive.md, Reading): the snapshot's, and
// for a page of a listing those whose task names could not be read when
// the page was chosen. Sorted by ref.
func (v *ReadView) BadArchives() []refs.BadRef {
	out := append([]refs.BadRef(nil), v.snap.BadArchives()...)
	for _, b := range v.namesBad {
		dup := false
		for _, x := range out {
			dup = dup || x.Ref == b.Ref
		}
		if !dup {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// ReadView takes one consistent snapshot for reads of task, or (task "")
// of every task. A task id that is not valid is bad input (field task_id),
// refused before any ref is read.
func (s *Store) ReadView(task string) (*ReadView, error) {
	scope := []string{refs.JournalPrefix, refs.LedgerPrefix, refs.SpinePrefix, refs.Keys, refs.WritersPrefix, refs.Repository, refs.ForksPrefix}
	if task != "" {
		if err := validateTask(task); err != nil {
			return nil, err
		}
		scope = taskScope(task)
	}
	return s.readView(task, scope)
}

// readViewOf is a view of the chains of tasks only (and the spines and
// keys every proof reads): what a page of a listing reads.
func (s *Store) readViewOf(tasks []string) (*ReadView, error) {
	scope := append([]string{refs.SpinePrefix, refs.ForksPrefix, refs.CheckpointsPrefix}, refs.KeyScope...) // forks explain spine entries (verify/forks.go)
	for _, t := range tasks {
		scope = append(scope, refs.Journal(t), refs.Ledger(t))
	}
	return s.readView("", scope)
}

// readView takes the snapshot of scope for a view of task ("" for many).
func (s *Store) readView(task string, scope []string) (*ReadView, error) {
	snap, err := s.core.Refs.Snapshot(scope...)
	if err != nil {
		return nil, err
	}
	v := &ReadView{s: s, snap: snap, task: task, idx: &proof.IndexedView{Source: snap}}
	spines, names, err := snap.List(refs.SpinePrefix)
	if err != nil {
		return nil, err
	}
	// The trust set is read (again, if the pin file changed) as the view
	// is taken, so a pin made before the request is in its keys.
	env, err := s.prover.Env(snap)
	if err != nil {
		return nil, err
	}
	v.proof = env.Version.String()
	h := sha256.New()
	fmt.Fprintf(h, "proof %s\n", v.proof)
	for _, n := range names {
		fmt.Fprintf(h, "%s %s\n", n, spines[n])
	}
	// Forks explain other writers' spine entries of a task (verify/forks.go).
	forks, fnames, err := snap.List(refs.ForksPrefix)
	if err != nil {
		return nil, err
	}
	for _, n := range fnames {
		fmt.Fprintf(h, "%s %s\n", n, forks[n])
	}
	v.spine = hex.EncodeToString(h.Sum(nil))
	return v, nil
}

// covers checks that task's refs are in the view.
func (v *ReadView) covers(task string) error {
	if err := validateTask(task); err != nil {
		return err
	}
	if v.task != "" && v.task != task {
		return fmt.Errorf("a read view of task %s cannot answer for task %s", v.task, task)
	}
	return nil
}

// SpineKey names the spines (and the forks that explain their entries), the
// published keys and the trust set of the view: what Productions depends on.
func (v *ReadView) SpineKey() string { return v.spine }

// TaskKey names what task's answers depend on in this view: its journal
// and ledger heads, the spines, the published keys and the trust set. Two
// views with the same TaskKey give the same answers for task.
func (v *ReadView) TaskKey(task string) (string, error) {
	if err := v.covers(task); err != nil {
		return "", err
	}
	j, err := v.headKey(refs.Journal(task))
	if err != nil {
		return "", err
	}
	l, err := v.headKey(refs.Ledger(task))
	if err != nil {
		return "", err
	}
	return "journal " + j + " ledger " + l + " spines " + v.spine, nil
}

// ListKey names what the answers of every task of ids depend on in this
// view: the ids in their order and each one's TaskKey, hashed. Two views
// with the same ListKey give the same answers for each of those tasks (a
// task with no ledger in both is absent from both), so a server can keep
// a whole list of them under one key.
func (v *ReadView) ListKey(ids []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "spines %s\n", v.spine)
	for _, id := range ids {
		if err := v.covers(id); err != nil {
			return "", err
		}
		j, err := v.headKey(refs.Journal(id))
		if err != nil {
			return "", err
		}
		l, err := v.headKey(refs.Ledger(id))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s journal %s ledger %s\n", id, j, l)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// JournalKey names what task's journal rows depend on in this view: its
// journal and ledger heads, the published keys and the trust set (a row's
// proof reads no spine).
func (v *ReadView) JournalKey(task string) (string, error) {
	if err := v.covers(task); err != nil {
		return "", err
	}
	j, err := v.headKey(refs.Journal(task))
	if err != nil {
		return "", err
	}
	l, err := v.headKey(refs.Ledger(task))
	if err != nil {
		return "", err
	}
	return "journal " + j + " ledger " + l + " proof " + v.proof, nil
}

// headKey is ref's value in the view for a key: its id, or for a ref the
// snapshot read past (a *refs.BadRefError) what it could not read.
func (v *ReadView) headKey(ref string) (string, error) {
	o, err := v.snap.ReadOptional(ref)
	var bad *refs.BadRefError
	if errors.As(err, &bad) {
		return "unreadable " + strconv.Quote(bad.Reason), nil
	}
	if err != nil {
		return "", err
	}
	return o.String(), nil
}

// TaskIDs lists the tasks that have a ledger in the view, sorted (as
// Store.TaskIDs does now).
func (v *ReadView) TaskIDs() ([]string, error) { return refs.TaskIDs(v.snap) }

// Task is Store.Task in the view: ErrUnknownTask when task has no ledger.
func (v *ReadView) Task(task string) (*TaskInfo, error) {
	if err := v.covers(task); err != nil {
		return nil, err
	}
	f, err := v.s.folds.Task(v.idx, task)
	if err != nil {
		return nil, err
	}
	return taskInfoOf(task, f), nil
}

// taskInfoOf is what Store.Task says of a task's folds.
func taskInfoOf(task string, f *fold.Task) *TaskInfo {
	st, js := f.Ledger.State, f.Journal
	// A copy of the projection: an answer kept (a list's, the API memo's)
	// holds it and not the whole fold, which the fold memo keeps or lets
	// go of on its own.
	wire := f.Wire
	info := &TaskInfo{
		ID: task, Title: st.Title, Phase: st.Phase, Terminal: ledger.Terminal(st.Phase),
		LedgerRows: st.Rows, LedgerHead: st.Head, JournalRows: js.Rows, JournalHead: js.Head,
		Attempts: st.Started, Evidence: st.Evidence, Gates: st.Gates, Artifacts: map[string]int64{},
		Progress: &wire,
	}
	if info.Evidence == nil {
		info.Evidence = []ledger.Producer{}
	}
	if info.Gates == nil {
		info.Gates = []ledger.Gate{}
	}
	if st.Claim != nil {
		info.ClaimAgent, info.ClaimID = st.Claim.Agent, st.Claim.ClaimID
	}
	for k, ks := range js.Keys {
		info.Artifacts[k] = ks.Version
	}
	return info
}

// Artifacts is Store.Artifacts in the view: every artifact version of
// task, re-verified; ErrUnknownTask when task has neither ledger nor
// journal.
func (v *ReadView) Artifacts(task string) (*verify.TaskReport, error) {
	if err := v.covers(task); err != nil {
		return nil, err
	}
	if err := requireTask(v.snap, task); err != nil {
		return nil, err
	}
	env, err := v.s.VerifyEnv(v.idx)
	if err != nil {
		return nil, err
	}
	ver, err := proof.Verifier(env)
	if err != nil {
		return nil, err
	}
	return ver.Task(task)
}

// Journal returns every row of task's journal, oldest first, each with its
// row hash, commit, proof and run position, as Store.TaskFeed gives them;
// ErrUnknownTask when task has no ledger.
func (v *ReadView) Journal(task string) ([]FeedRow, error) {
	if err := v.covers(task); err != nil {
		return nil, err
	}
	return v.s.feeds.Journal(v.snap, task)
}

// Productions is Store.Productions in the view.
func (v *ReadView) Productions() ([]verify.Production, error) {
	env, err := v.s.VerifyEnv(v.snap)
	if err != nil {
		return nil, err
	}
	ix, err := verify.BuildSpineIndex(env)
	if err != nil {
		return nil, err
	}
	return ix.Productions(), nil
}
