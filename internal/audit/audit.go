// Package audit is `audit verify` over one repository: the full walk
// (verify.Repository), the incremental check of what was added since an
// audit checkpoint, the rollbacks only this host can see (internal/heads),
// and the taking of a checkpoint when everything was found whole.
package audit

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/keys/auditcheckpoint"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Auditor runs audit verify on one repository.
type Auditor struct {
	c      *core.Repo
	prover *proof.Prover
	heads  *heads.Keeper
	// Logs checks the writers' logs as a view holds them against this
	// host's witnesses (nil, or a nil coverage: no witness configured).
	Logs func(view refs.Source) (*verify.LogCoverage, error)
}

// New is the auditor of repository c.
func New(c *core.Repo, p *proof.Prover, h *heads.Keeper) *Auditor {
	return &Auditor{c: c, prover: p, heads: h}
}

// checkpoints is where this repository's audit checkpoints are kept.
func (a *Auditor) checkpoints() auditcheckpoint.Dir {
	return auditcheckpoint.For(a.c.Home, a.c.RepoID(), a.c.GitDir)
}

// macs are the HMAC keys audit verify checks with: the local writer's
// only. No other writer's HMAC key is ever on this host, and none is
// created.
func (a *Auditor) macs() map[string]verify.MACChecker {
	macs := map[string]verify.MACChecker{}
	if id, err := a.c.Identity(); err == nil {
		macs[id.Writer] = id
	}
	return macs
}

// Full walks the whole repository as view has it (or one task), and
// reports what holds.
func (a *Auditor) Full(view *refs.Snapshot, task string, progress func(stage string, done, total int)) (*verify.Report, error) {
	env, err := a.prover.Env(view)
	if err != nil {
		return nil, err
	}
	var logs *verify.LogCoverage
	if a.Logs != nil {
		if logs, err = a.Logs(view); err != nil {
			return nil, err
		}
	}
	return verify.Repository(env.Env, verify.Options{Task: task, MAC: a.macs(), Progress: progress, Logs: logs})
}

// AddRollbacks adds to rep the chains (of task, or every one) this host's
// writer extended that no longer hold the heads it wrote.
func (a *Auditor) AddRollbacks(view *refs.Snapshot, task string, rep *verify.Report) error {
	heads, err := a.heads.Failures(view, task)
	if err != nil {
		return err
	}
	addFailures(rep, heads)
	return nil
}

func addFailures(rep *verify.Report, fails []verify.Failure) {
	if len(fails) > 0 {
		rep.Failures = append(rep.Failures, fails...)
		rep.Counts.Failures = len(rep.Failures)
		rep.Verified = false
	}
}

// ErrEmpty is a repository with no refs/bernstein/* at all.
var ErrEmpty = errors.New("no refs/bernstein/*")

// Position is where this host's writer's heads file stands: a checkpoint
// taken of refs read after it records it (TakeCheckpoint).
func (a *Auditor) Position() (string, error) { return a.heads.Position() }

// Since checks what the repository gained since audit checkpoint name,
// with the remote guard's checks (verify.Guard) run on every ref's change
// from its value at the checkpoint to its value now, plus the HMACs and the
// audit mirrors of what was added, and the rollbacks of the chains that
// changed. Its cost follows what was added and the refs themselves (an
// archived task is not read unless its archive changed). With checkpoint,
// it records the refs as that audit checkpoint when everything holds.
func (a *Auditor) Since(name, checkpoint string) (*verify.Report, error) {
	// The heads file's position before the refs are read: a head written
	// after it is checked next time, its refs having moved after it.
	pos, err := a.heads.Position()
	if err != nil {
		return nil, err
	}
	// The refs themselves, archived tasks not resolved: an archived task
	// moved when its archive ref did (the guard's checks follow it), so
	// the comparison costs the refs, not the archive.
	raw, err := a.c.Refs.WithoutArchive().Snapshot(refs.Prefix)
	if err != nil {
		return nil, err
	}
	vals, names, err := raw.List(refs.Prefix)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, ErrEmpty
	}
	cp, err := a.checkpoints().Load(a.c.Identity, name)
	if err != nil {
		return nil, err
	}
	trust, err := a.c.Trust()
	if err != nil {
		return nil, err
	}
	if why := auditcheckpoint.TrustNarrowed(cp, trust); why != "" {
		return nil, fmt.Errorf("%w: %s: it was taken trusting %s, which this host no longer trusts: what it covered is proven under that key only; run a full 'bernstein audit verify'", auditcheckpoint.ErrBadCheckpoint, name, why)
	}
	base := staticRefs{}
	for ref, v := range cp.Refs {
		base[ref], _ = gitstore.ParseOid(v)
	}
	var updates []verify.Update
	for _, ref := range names {
		if old := base[ref]; old != vals[ref] {
			updates = append(updates, verify.Update{Ref: ref, Old: old, New: vals[ref]})
		}
	}
	for ref, old := range base {
		if _, ok := vals[ref]; !ok {
			updates = append(updates, verify.Update{Ref: ref, Old: old})
		}
	}
	updates = a.fromArchived(base, updates)
	g := &verify.Guard{Objects: a.c.Objects, Refs: base, Trust: trust, Local: true, MAC: a.macs(), Mirror: true, Since: name}
	res := g.Check(updates)
	rep := sinceReport(name, res)
	if err := a.sinceRollbacks(cp, updates, rep); err != nil {
		return nil, err
	}
	if checkpoint != "" {
		if err := a.TakeCheckpoint(raw, pos, checkpoint, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// sinceRollbacks adds to rep the rollbacks of the chains that may have
// changed since checkpoint cp: those whose ref moved (or whose archive
// entry did) and those this host's writer wrote after cp's position in its
// heads file. Every other chain holds what it held when cp was taken, and
// cp was taken only when no chain was rolled back. When cp's position
// cannot tell (a checkpoint from before positions were kept, the heads
// file rewritten since), every head is checked against every ref.
func (a *Auditor) sinceRollbacks(cp *auditcheckpoint.Checkpoint, updates []verify.Update, rep *verify.Report) error {
	chains, ok, err := a.heads.ChangedSince(cp.Heads)
	if err != nil {
		return err
	}
	tasks := map[string]bool{}
	for _, c := range chains {
		if kind, rest, _ := strings.Cut(c, "/"); kind == "journal" || kind == "ledger" {
			if t, err := refs.UnescapeTask(rest); err == nil {
				tasks[t] = true
			}
		}
	}
	for _, u := range updates {
		if !ok {
			break
		}
		if t, isTask := refs.TaskOf(u.Ref); isTask {
			tasks[t] = true
			continue
		}
		if !strings.HasPrefix(u.Ref, refs.ArchivePrefix) {
			continue
		}
		// The tasks whose entries the archive's change touched; a change
		// the archive reader cannot follow is read the whole way.
		old, now := u.Old, u.New
		if now.IsZero() {
			old, now = gitstore.Oid{}, u.Old
		}
		cs, err := archive.Diff(a.c.Objects, old, now)
		if err != nil {
			ok = false
			break
		}
		for _, c := range cs {
			tasks[c.Task] = true
		}
	}
	if !ok {
		view, err := a.c.Refs.Snapshot(refs.Prefix)
		if err != nil {
			return err
		}
		if err := a.AddRollbacks(view, "", rep); err != nil {
			return err
		}
		AddDivergences(view, "", rep)
		return nil
	}
	scope := []string{refs.SpinePrefix, refs.AuditPrefix, refs.ArchivePrefix}
	for t := range tasks {
		scope = append(scope, refs.Journal(t), refs.Ledger(t))
		chains = append(chains, "journal/"+refs.EscapeTask(t), "ledger/"+refs.EscapeTask(t))
	}
	if id, err := a.c.Identity(); err == nil {
		for _, kind := range []string{"spine", "audit", record.ChainArchive} {
			chains = append(chains, kind+"/"+id.Writer)
		}
	}
	view, err := a.c.Refs.Snapshot(scope...)
	if err != nil {
		return err
	}
	fails, err := a.heads.FailuresOf(view, chains)
	if err != nil {
		return err
	}
	addFailures(rep, fails)
	AddDivergences(view, "", rep)
	return nil
}

// AddDivergences adds to rep the task chains (of task, or every one) whose
// ref and archive entries view found diverged.
func AddDivergences(view *refs.Snapshot, task string, rep *verify.Report) {
	for _, d := range view.Divergences() {
		if t, _ := refs.TaskOf(d.Ref); task == "" || t == task {
			rep.ArchiveDivergences = append(rep.ArchiveDivergences, verify.ArchiveDivergence{Ref: d.Ref, Kept: d.Kept.String(),
				KeptFrom: d.KeptFrom, Other: d.Other.String(), OtherFrom: d.OtherFrom})
		}
	}
}

// fromArchived takes a task ref created since the checkpoint on top of a
// chain an archive held at the checkpoint (a reopen of an archived task)
// as moved from that entry's head: the rows up to it were checked with
// that archive, and only those added after it are the ref's (its audit
// entries, among them, were added since). A ref created at the entry's
// head itself adds nothing. Only an archive ref the checkpoint held, and
// an entry its chain extends (by first parents, as far back as their
// rows' indexes differ), count; any other creation is walked from the
// chain's root as before.
func (a *Auditor) fromArchived(base staticRefs, updates []verify.Update) []verify.Update {
	_, archives, _ := base.List(refs.ArchivePrefix)
	out := updates[:0]
	for _, u := range updates {
		task, isTask := refs.TaskOf(u.Ref)
		if isTask && u.Old.IsZero() && !u.New.IsZero() {
			if head, ok := a.archivedBelow(base, archives, task, strings.HasPrefix(u.Ref, refs.LedgerPrefix), u.New); ok {
				if head == u.New {
					continue
				}
				u.Old = head
			}
		}
		out = append(out, u)
	}
	return out
}

// archivedBelow returns the head of task's journal (or ledger) that an
// archive of the checkpoint names and that head extends or is.
func (a *Auditor) archivedBelow(base staticRefs, archives []string, task string, ledger bool, head gitstore.Oid) (gitstore.Oid, bool) {
	for _, ref := range archives {
		e, ok, err := archive.Lookup(a.c.Objects, base[ref], task)
		if err != nil || !ok {
			continue
		}
		at := e.Journal
		if ledger {
			at = e.Ledger
		}
		if at == head || a.extends(head, at) {
			return at, true
		}
	}
	return gitstore.ZeroOid, false
}

// extends reports whether chain commit head extends chain commit at: at is
// head's ancestor by first parents, as many steps back as their rows'
// indexes differ.
func (a *Auditor) extends(head, at gitstore.Oid) bool {
	index := func(id gitstore.Oid) (int64, bool) {
		cc, err := chain.Read(a.c.Objects, id)
		if err != nil {
			return 0, false
		}
		row, err := record.ParseRow(cc.Record)
		return row.Index, err == nil
	}
	ih, ok := index(head)
	ia, ok2 := index(at)
	if !ok || !ok2 || ih <= ia {
		return false
	}
	id := head
	for i := ih; i > ia; i-- {
		cc, err := chain.Read(a.c.Objects, id)
		if err != nil || len(cc.Commit.Parents) == 0 {
			return false
		}
		id = cc.Commit.Parents[0]
	}
	return id == at
}

// sinceReport is the audit verify report of an incremental check.
func sinceReport(name string, res *verify.Result) *verify.Report {
	rep := &verify.Report{Since: name, Tasks: []verify.TaskResult{}, Failures: []verify.Failure{}, NotChecked: []verify.NotChecked{},
		Resolutions: []verify.Resolution{}, Pending: []verify.Pending{}}
	unpinned := 0
	for _, p := range res.Problems {
		if p.Unverifiable {
			unpinned++
			continue
		}
		rep.Failures = append(rep.Failures, problemFailure(p))
	}
	var tasks []string
	for t := range res.TaskRows {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	c := &rep.Counts
	for _, t := range tasks {
		rows := res.TaskRows[t]
		tr := verify.TaskResult{TaskID: t, JournalIdentity: verify.IdentityUnverifiable,
			IdentityReason: "audit verify --since checks what was added since the checkpoint, not a journal's identity as a whole",
			JournalRows:    rows[0], LedgerRows: rows[1], Artifacts: append([]verify.VersionState{}, res.Versions[t]...)}
		for _, v := range tr.Artifacts {
			c.Artifacts++
			switch v.State {
			case verify.Verified:
				c.Verified++
			case verify.Tampered:
				c.Tampered++
			default:
				c.Unverifiable++
			}
		}
		rep.Tasks = append(rep.Tasks, tr)
	}
	c.Tasks = len(tasks)
	c.JournalRows, c.LedgerRows = res.Added["journal"], res.Added["ledger"]
	c.SpineEntries, c.AuditEntries = res.Added["spine"], res.Added["audit"]
	c.SignaturesChecked, c.SignaturesUnpinned = res.SignaturesChecked, res.SignaturesUnpinned
	c.HMACsChecked, c.HMACsNotChecked = res.HMACsChecked, res.HMACsNotChecked
	c.CommitsRead = res.Stats.Commits
	c.Failures = len(rep.Failures)
	rep.HMACChecked = res.HMACsNotChecked == 0
	rep.NotChecked = []verify.NotChecked{}
	if !rep.HMACChecked {
		rep.NotChecked = append(rep.NotChecked, verify.HMACsNotChecked(res.HMACsNotChecked, nil))
		rep.HMACNote = fmt.Sprintf("%d HMACs not checked: their writers' HMAC keys are not on this host", res.HMACsNotChecked)
	}
	rep.Verified = len(rep.Failures) == 0 && c.Unverifiable == 0 && c.SignaturesUnpinned == 0 && unpinned == 0
	if !rep.Verified && len(rep.Failures) == 0 {
		rep.Note = fmt.Sprintf("unverifiable: %d artifact versions and %d signatures added since audit checkpoint %s are by writers whose keys are not pinned here (see 'bernstein keys list', then 'bernstein keys pin')",
			c.Unverifiable, c.SignaturesUnpinned, name)
	}
	return rep
}

// problemFailure is a guard's problem as an audit verify failure.
func problemFailure(p verify.Problem) verify.Failure {
	f := verify.Failure{TaskID: p.Task, Writer: p.Writer, Check: p.Check, Reason: p.Reason}
	if p.Index != nil {
		switch p.Chain {
		case "journal":
			f.JournalIndex = p.Index
		case "spine", "audit":
			f.Seq = p.Index
		case "ledger":
			f.Reason = fmt.Sprintf("ledger of %s at index %d: %s", p.Task, *p.Index, p.Reason)
		}
	}
	if p.Task == "" && p.Writer == "" || (strings.HasPrefix(p.Ref, refs.ArchivePrefix) || writerChain[p.Check]) && p.Ref != "" && !strings.Contains(f.Reason, p.Ref) {
		// A writer's chain's problem names its writer, and the ref too
		// (as the full walk's do for archives and refs that cannot be
		// read): a writer has several chains.
		f.Reason = p.Ref + ": " + f.Reason
	}
	return f
}

// writerChain lists the checks of a writer's chain as a whole, whose
// problems name the ref.
var writerChain = map[string]bool{"spine_chain": true, "audit_chain": true, "key_record": true, "checkpoints_chain": true,
	"anchors_chain": true, verify.CheckFork: true, "fork_base": true}

// TakeCheckpoint records the view's refs as audit checkpoint name when rep
// found everything whole and verified; otherwise it says why not in the
// report and records nothing.
// pos is where the heads file stood before view was read (Position).
func (a *Auditor) TakeCheckpoint(view *refs.Snapshot, pos, name string, rep *verify.Report) error {
	if !rep.Verified {
		why := "something is tampered"
		if !rep.Tampered() {
			why = "not everything is verified"
		}
		rep.CheckpointNote = fmt.Sprintf("audit checkpoint %s not taken: %s (a checkpoint records only what was found whole)", name, why)
		return nil
	}
	trust, err := a.c.Trust()
	if err != nil {
		return err
	}
	vals, names, err := view.List(refs.Prefix)
	if err != nil {
		return err
	}
	cp := &auditcheckpoint.Checkpoint{Name: name, Time: a.c.Now().Unix(), Refs: map[string]string{}, Trust: auditcheckpoint.TrustRecord(trust), Heads: pos}
	for _, n := range names {
		if _, archived := view.FromArchive(n); archived {
			// An archive entry's head, not a ref: the checkpoint holds the
			// archive ref that names it.
			continue
		}
		cp.Refs[n] = vals[n].String()
	}
	if err := a.checkpoints().Save(a.c.Identity, cp); err != nil {
		return fmt.Errorf("take audit checkpoint %s: %w", name, err)
	}
	rep.Checkpoint = name
	return nil
}

// staticRefs is a fixed set of ref values (an audit checkpoint's).
type staticRefs map[string]gitstore.Oid

func (r staticRefs) ReadOptional(ref string) (gitstore.Oid, error) { return r[ref], nil }

func (r staticRefs) List(prefix string) (map[string]gitstore.Oid, []string, error) {
	out := map[string]gitstore.Oid{}
	var names []string
	for n, v := range r {
		if strings.HasPrefix(n, prefix) {
			out[n] = v
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return out, names, nil
}
