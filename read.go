package bernstein

import (
	"fmt"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys/auditcheckpoint"

	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Artifacts verifies every artifact version of task.
func (s *Store) Artifacts(task string) (*verify.TaskReport, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	view, err := s.view(task)
	if err != nil {
		return nil, err
	}
	if err := requireTask(view, task); err != nil {
		return nil, err
	}
	env, err := s.VerifyEnv(view)
	if err != nil {
		return nil, err
	}
	v, err := verify.NewVerifier(env)
	if err != nil {
		return nil, err
	}
	return v.Task(task)
}

// requireTask returns ErrUnknownTask unless task has a ledger or a journal.
func requireTask(view refs.Source, task string) error {
	for _, ref := range []string{refs.Ledger(task), refs.Journal(task)} {
		o, err := view.ReadOptional(ref)
		if err != nil {
			return err
		}
		if !o.IsZero() {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrUnknownTask, task)
}

// Productions lists the artifact keys the local lineage spines carry.
func (s *Store) Productions() ([]verify.Production, error) {
	view, err := s.refs.Snapshot(refs.SpinePrefix, refs.Keys, refs.WritersPrefix)
	if err != nil {
		return nil, err
	}
	env, err := s.VerifyEnv(view)
	if err != nil {
		return nil, err
	}
	ix, err := verify.BuildSpineIndex(env)
	if err != nil {
		return nil, err
	}
	return ix.Productions(), nil
}

// AuditCheckpoint is a signed record of what an audit verify found whole
// (keys/auditcheckpoint).
type AuditCheckpoint = auditcheckpoint.Checkpoint

// ErrNoCheckpoint reports an audit checkpoint that does not exist.
var ErrNoCheckpoint = auditcheckpoint.ErrNoCheckpoint

// ErrBadCheckpoint reports an audit checkpoint that cannot be used: not
// signed by this host's writer, of another repository, or taken under
// trust this host no longer gives.
var ErrBadCheckpoint = auditcheckpoint.ErrBadCheckpoint

// ValidateCheckpointName checks the name of an audit checkpoint.
func ValidateCheckpointName(name string) error { return auditcheckpoint.ValidateName(name) }

// checkpoints is where this repository's audit checkpoints are kept.
func (s *Store) checkpoints() auditcheckpoint.Dir {
	return auditcheckpoint.For(s.home, s.core.RepoID(), s.gitDir)
}

// AuditOptions limit `audit verify`.
type AuditOptions struct {
	Task     string
	Progress func(stage string, done, total int)
	// Since checks only what was added after the audit checkpoint of that
	// name, and that nothing it covered was taken away (audit verify
	// --since).
	Since string
	// Checkpoint records what the walk found whole as the audit checkpoint
	// of that name, when everything holds and is verified.
	Checkpoint string
}

// AuditVerify walks the whole repository (or one task) and reports what
// holds. HMACs are checked for the local writer only: no other writer's
// HMAC key is ever on this host, and none is created. With Since it checks
// what was added after an audit checkpoint; with Checkpoint it records one.
func (s *Store) AuditVerify(o AuditOptions) (*verify.Report, error) {
	if o.Task != "" {
		if err := validateTask(o.Task); err != nil {
			return nil, err
		}
		if o.Since != "" || o.Checkpoint != "" {
			return nil, &artifact.InputError{Field: "task", Msg: "an audit checkpoint covers the whole repository: --task cannot be given with --since or --checkpoint"}
		}
	}
	for _, name := range []string{o.Since, o.Checkpoint} {
		if name != "" {
			if err := ValidateCheckpointName(name); err != nil {
				return nil, err
			}
		}
	}
	view, err := s.view("")
	if err != nil {
		return nil, err
	}
	if o.Task != "" {
		if err := requireTask(view, o.Task); err != nil {
			return nil, err
		}
	}
	macs := map[string]verify.MACChecker{}
	if id, err := s.Identity(); err == nil {
		macs[id.Writer] = id
	}
	var rep *verify.Report
	if o.Since != "" {
		rep, err = s.auditSince(view, o.Since, macs)
	} else {
		env, eerr := s.VerifyEnv(view)
		if eerr != nil {
			return nil, eerr
		}
		rep, err = verify.Repository(env, verify.Options{Task: o.Task, MAC: macs, Progress: o.Progress})
	}
	if err != nil {
		return nil, err
	}
	heads, err := s.heads.Failures(view, o.Task)
	if err != nil {
		return nil, err
	}
	if len(heads) > 0 {
		rep.Failures = append(rep.Failures, heads...)
		rep.Counts.Failures = len(rep.Failures)
		rep.Verified = false
	}
	if o.Checkpoint != "" {
		if err := s.takeCheckpoint(view, o.Checkpoint, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// auditSince checks what the repository gained since audit checkpoint name,
// with the remote guard's checks (verify.Guard) run on every ref's change
// from its value at the checkpoint to its value now, plus the HMACs and the
// audit mirrors of what was added. Its cost follows what was added.
func (s *Store) auditSince(view *refs.Snapshot, name string, macs map[string]verify.MACChecker) (*verify.Report, error) {
	cp, err := s.checkpoints().Load(s.Identity, name)
	if err != nil {
		return nil, err
	}
	trust, err := s.Trust()
	if err != nil {
		return nil, err
	}
	if why := auditcheckpoint.TrustNarrowed(cp, trust); why != "" {
		return nil, fmt.Errorf("%w: %s: it was taken trusting %s, which this host no longer trusts: what it covered is proven under that key only; run a full 'bernstein audit verify'", ErrBadCheckpoint, name, why)
	}
	vals, names, err := view.List(refs.Prefix)
	if err != nil {
		return nil, err
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
	g := &verify.Guard{Objects: s.objects, Refs: base, Trust: trust, Local: true, MAC: macs, Mirror: true, Since: name}
	res := g.Check(updates)
	return sinceReport(name, res), nil
}

// sinceReport is the audit verify report of an incremental check.
func sinceReport(name string, res *verify.Result) *verify.Report {
	rep := &verify.Report{Since: name, Tasks: []verify.TaskResult{}, Failures: []verify.Failure{}}
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
	if !rep.HMACChecked {
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
	if p.Task == "" && p.Writer == "" {
		f.Reason = p.Ref + ": " + f.Reason
	}
	return f
}

// takeCheckpoint records the view's refs as audit checkpoint name when rep
// found everything whole and verified; otherwise it says why not in the
// report and records nothing.
func (s *Store) takeCheckpoint(view *refs.Snapshot, name string, rep *verify.Report) error {
	if !rep.Verified {
		why := "something is tampered"
		if !rep.Tampered() {
			why = "not everything is verified"
		}
		rep.CheckpointNote = fmt.Sprintf("audit checkpoint %s not taken: %s (a checkpoint records only what was found whole)", name, why)
		return nil
	}
	trust, err := s.Trust()
	if err != nil {
		return err
	}
	vals, names, err := view.List(refs.Prefix)
	if err != nil {
		return err
	}
	cp := &AuditCheckpoint{Name: name, Time: s.now().Unix(), Refs: map[string]string{}, Trust: auditcheckpoint.TrustRecord(trust)}
	for _, n := range names {
		cp.Refs[n] = vals[n].String()
	}
	if err := s.checkpoints().Save(s.Identity, cp); err != nil {
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
