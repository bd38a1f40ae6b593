package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// MACChecker recomputes the HMACs of one writer's audit mirror.
type MACChecker interface {
	CheckMAC(data []byte, mac string) bool
}

// Options limit and instrument a repository walk.
type Options struct {
	Task string                // only this task's journal and ledger ("" for all)
	MAC  map[string]MACChecker // writers whose HMAC key is on this host
	// Progress, when set, is told how far each stage has come.
	Progress func(stage string, done, total int)
	// Logs is what the checks of the writers' logs found (nil: this host
	// configures no witness).
	Logs *LogCoverage
}

// VersionState is one artifact version's verdict.
type VersionState struct {
	Key          string `json:"key"`
	Version      int64  `json:"version"`
	JournalIndex int64  `json:"journal_index"`
	State        string `json:"state"`
	Reason       string `json:"reason"`
}

// TaskResult is one task's verdict.
type TaskResult struct {
	TaskID          string         `json:"task_id"`
	JournalIdentity string         `json:"journal_identity"`
	IdentityReason  string         `json:"journal_identity_reason"`
	JournalRows     int64          `json:"journal_rows"`
	LedgerRows      int64          `json:"ledger_rows"`
	Artifacts       []VersionState `json:"artifacts"`
	// Diverged are rows of other writers' diverged chains that their
	// spines and audit mirrors name (forks.go): not failures.
	Diverged []DivergedRow `json:"diverged,omitempty"`
}

// Counts summarises a walk.
type Counts struct {
	Tasks              int `json:"tasks"`
	JournalRows        int `json:"journal_rows"`
	LedgerRows         int `json:"ledger_rows"`
	Artifacts          int `json:"artifacts"`
	Verified           int `json:"verified"`
	Tampered           int `json:"tampered"`
	Unverifiable       int `json:"unverifiable"`
	SpineEntries       int `json:"spine_entries"`
	AuditEntries       int `json:"audit_entries"`
	SignaturesChecked  int `json:"signatures_checked"`
	SignaturesUnpinned int `json:"signatures_unpinned"`
	HMACsChecked       int `json:"hmacs_checked"`
	HMACsNotChecked    int `json:"hmacs_not_checked"`
	// CommitsChecked counts the project commits work rows name that were
	// checked (present, the project's, with the recorded trees);
	// CommitsNotChecked those this repository does not hold.
	CommitsChecked    int `json:"commits_checked"`
	CommitsNotChecked int `json:"commits_not_checked"`
	Failures          int `json:"failures"`
	// CommitsRead is the number of chain commits an incremental verify
	// (--since) read: what it costs, which follows what was added.
	CommitsRead int `json:"commits_read,omitempty"`
}

// Report is the outcome of `bernstein audit verify`.
type Report struct {
	Verified    bool         `json:"verified"`
	HMACChecked bool         `json:"hmac_checked"`
	HMACNote    string       `json:"hmac_note"`
	Note        string       `json:"note"`
	Tasks       []TaskResult `json:"tasks"`
	Failures    []Failure    `json:"failures"`
	Counts      Counts       `json:"counts"`
	// Since names the audit checkpoint an incremental verify started from.
	Since string `json:"since,omitempty"`
	// Checkpoint names the audit checkpoint this verify recorded;
	// CheckpointNote says why none was, when one was asked for.
	Checkpoint     string `json:"checkpoint,omitempty"`
	CheckpointNote string `json:"checkpoint_note,omitempty"`
	// NotChecked says what this walk could not check on this host, and
	// why; never a failure, and never empty of reasons when it is not
	// empty.
	NotChecked []NotChecked `json:"not_checked"`
	// Resolutions are the divergences writers resolved (task adopt), and
	// Pending those not resolved yet: neither is a failure.
	Resolutions []Resolution `json:"resolutions"`
	Pending     []Pending    `json:"pending"`
	// ArchiveDivergences are task chains whose ref and archive entry (or
	// two archives' entries) diverge (docs/archive.md, Reading): two
	// hosts' chains of one task, not a failure; the task reads as Kept.
	ArchiveDivergences []ArchiveDivergence `json:"archive_divergences,omitempty"`
}

// ArchiveDivergence is one chain whose heads diverge between a ref and an
// archive entry (From "" is the ref), or between two archives' entries.
type ArchiveDivergence struct {
	Ref       string `json:"ref"`
	Kept      string `json:"kept"`
	KeptFrom  string `json:"kept_from"`
	Other     string `json:"other"`
	OtherFrom string `json:"other_from"`
}

func (d ArchiveDivergence) String() string {
	from := d.KeptFrom
	if from == "" {
		from = "its ref"
	}
	return fmt.Sprintf("diverged: %s reads %s (%s); %s names %s, which neither extends it nor is extended by it", d.Ref, d.Kept, from, d.OtherFrom, d.Other)
}

// NotChecked is one kind of check a walk could not make on this host.
type NotChecked struct {
	Check   string   `json:"check"` // audit_hmac, work_commit
	Count   int      `json:"count"`
	Writers []string `json:"writers,omitempty"`
	Reason  string   `json:"reason"`
}

// String is the item as one line of a summary.
func (n NotChecked) String() string { return fmt.Sprintf("%d %s", n.Count, n.Reason) }

// HMACsNotChecked is the NotChecked item of n HMACs of writers (when known)
// whose HMAC key is not on this host.
func HMACsNotChecked(n int, writers []string) NotChecked { return hmacsNotChecked(n, writers) }

// hmacsNotChecked is the NotChecked item of the HMACs of writers whose HMAC
// key is not on this host.
func hmacsNotChecked(n int, writers []string) NotChecked {
	whose := "other writers"
	if len(writers) > 0 {
		whose = "writer " + strings.Join(writers, ", ")
	}
	return NotChecked{Check: "audit_hmac", Count: n, Writers: writers,
		Reason: fmt.Sprintf("audit entry HMACs of %s: an HMAC key never leaves its writer's host, so only that host checks them (their signatures were checked here)", whose)}
}

// commitsNotChecked is the NotChecked item of the project commits work
// rows name that this repository does not hold.
func commitsNotChecked(n int) NotChecked {
	return NotChecked{Check: "work_commit", Count: n,
		Reason: "commits named by checkpoint and diff rows: not in this repository (rows recorded before anchors, or refs/bernstein/anchors/* not fetched: 'bernstein fetch')"}
}

// Tampered reports whether any check failed.
func (r *Report) Tampered() bool { return len(r.Failures) > 0 }

// auditIndex is what the audit mirrors say was done.
type auditIndex struct {
	// A post's resource, its spine entry hash, is marked on the spine
	// entry it names; seen holds the other (event, resource) pairs whose
	// resource is a hash in canonical form, by event code and hash bytes;
	// other the rest.
	spine  *SpineIndex
	seen   map[auditKey]struct{}
	other  map[string]map[string]bool // event -> resource -> seen
	codes  map[string]uint16
	strs   interner
	byTask map[string][]auditRecord // entries that name a post, a transition or a work row
	// unchecked are the writers whose HMACs were not checked (no key here).
	unchecked []string
}

type auditKey struct {
	event uint16
	hash  [32]byte
}

func newAuditIndex(ix *SpineIndex) *auditIndex {
	return &auditIndex{spine: ix, seen: map[auditKey]struct{}{}, other: map[string]map[string]bool{}, codes: map[string]uint16{}, strs: interner{}, byTask: map[string][]auditRecord{}}
}

// add records that an audit entry names resource under event.
func (a *auditIndex) add(event, resource string) {
	if event == record.EventArtifactPosted {
		if r := a.spine.lookup(record.Hash(resource)); r != nil {
			r.posted = true
			return
		}
	}
	code, ok := a.codes[event]
	if !ok && len(a.codes) < 1<<16-1 {
		code, ok = uint16(len(a.codes)), true
		a.codes[a.strs.of(event)] = code
	}
	if b, canon := hashBytes(resource); canon && ok {
		a.seen[auditKey{code, b}] = struct{}{}
		return
	}
	if a.other[event] == nil {
		a.other[event] = map[string]bool{}
	}
	a.other[event][resource] = true
}

// auditRecord is one audit entry whose resource must exist elsewhere: the
// spine entry of a post, the ledger row of a transition, the journal row
// of a work row. Its details are read again from its commit when a failure
// needs them.
type auditRecord struct {
	writer   string
	seq      int64
	event    string
	task     string
	resource hash32
	commit   gitstore.Oid
}

// ledgerEvents and workEvents are the audit events that mirror a ledger row
// or a journal work row; their resource is the row hash.
var (
	ledgerEvents = map[string]bool{
		record.KindTaskCreated: true, record.KindTaskClaimed: true, record.KindTaskReleased: true,
		record.KindTaskStarted: true, record.KindTaskSuspended: true, record.KindTaskResumed: true,
		record.KindTaskCompleted: true, record.KindTaskFailed: true, record.KindTaskAbandoned: true,
		record.KindTaskReopened: true,
	}
	workEvents = map[string]bool{
		record.KindCheckpoint: true, record.KindDiffCaptured: true, record.KindGateAttempt: true, record.KindEvidenceResult: true,
	}
)

func (a *auditIndex) has(event, resource string) bool {
	if event == record.EventArtifactPosted {
		if r := a.spine.lookup(record.Hash(resource)); r != nil && r.posted {
			return true
		}
	}
	if code, ok := a.codes[event]; ok {
		if b, canon := hashBytes(resource); canon {
			if _, in := a.seen[auditKey{code, b}]; in {
				return true
			}
		}
	}
	return a.other[event][resource]
}

// Repository walks every chain under refs/bernstein and checks everything
// `audit verify` promises (docs/cli.md, docs/trust.md).
func Repository(env *Env, o Options) (*Report, error) {
	rep := &Report{Tasks: []TaskResult{}, Failures: []Failure{}}
	stage := func(name string, done, total int) {
		if o.Progress != nil {
			o.Progress(name, done, total)
		}
	}
	pool := newSigPool()
	defer pool.close()

	// 1. Spines: chains, signatures (all cores), seals.
	stage("spines", 0, 0)
	ix, err := buildSpineIndex(env, pool)
	if err != nil {
		return nil, err
	}
	rep.Counts.SpineEntries = ix.Entries
	if b := env.Binding; b != nil && b.Problem != "" {
		rep.Failures = append(rep.Failures, Failure{Check: CheckRepositoryIdentity, Reason: b.Problem})
	} else if b != nil && b.Signature != "" {
		rep.Failures = append(rep.Failures, Failure{Check: CheckRepositoryIdentity, Reason: b.Signature})
	}
	if b := env.Binding; b != nil && b.Ref != "" {
		rep.Failures = append(rep.Failures, Failure{Check: CheckRepositoryIdentity, Reason: b.Ref})
	}
	rep.Failures = append(rep.Failures, ix.Problems...)
	if o.Logs != nil {
		rep.Failures = append(rep.Failures, o.Logs.failures()...)
	}
	for _, w := range ix.Writers {
		for _, r := range ix.writerRecords(w) {
			if !r.parsed {
				continue
			}
			rep.Counts.SignaturesChecked++
			if r.sigState == sigUnpinned || r.sigState == sigNoKey {
				rep.Counts.SignaturesUnpinned++
			}
			if r.sigState == sigBad {
				f := Failure{Writer: w, Seq: i64(r.Seq), Check: "spine_signature", Reason: fmt.Sprintf("spine entry %s/%d: %s", w, r.Seq, r.sigReason)}
				if a := r.Artifact; a != nil {
					f.TaskID, f.Key, f.Version, f.JournalIndex = a.TaskID, a.Key, i64(a.Version), i64(a.JournalIndex)
				}
				rep.Failures = append(rep.Failures, f)
			}
		}
	}

	// 2. Audit mirrors: chains, signatures, HMACs.
	stage("audit", 0, 0)
	audits, err := walkAudits(env, ix, o, pool, rep)
	if err != nil {
		return nil, err
	}

	// 3. Archives: each writer's archive chain, commit by commit.
	stage("archives", 0, 0)
	if _, err := walkArchives(env, rep); err != nil {
		return nil, err
	}

	// The refs that cannot be read as their kind, named.
	bad, err := unreadableRefs(env)
	if err != nil {
		return nil, err
	}
	rep.Failures = append(rep.Failures, bad...)

	// 4. Tasks: journals, ledgers, bindings both ways.
	tasks, err := taskSet(env, ix, audits, o.Task)
	if err != nil {
		return nil, err
	}
	results := make([]TaskResult, len(tasks))
	failures := make([][]Failure, len(tasks))
	counts := make([]Counts, len(tasks))
	var next sync.Mutex
	i, done := 0, 0
	var wg sync.WaitGroup
	var walkErr error
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := &Verifier{Env: env, Spine: ix, Logs: o.Logs, trees: map[gitstore.Oid][]gitstore.TreeEntry{}}
			for {
				next.Lock()
				k := i
				i++
				next.Unlock()
				if k >= len(tasks) {
					return
				}
				res, fs, c, err := v.checkTask(tasks[k], audits)
				next.Lock()
				if err != nil && walkErr == nil {
					walkErr = err
				}
				results[k], failures[k], counts[k] = res, fs, c
				done++
				stage("tasks", done, len(tasks))
				next.Unlock()
			}
		}()
	}
	wg.Wait()
	if walkErr != nil {
		return nil, walkErr
	}
	for k := range tasks {
		rep.Tasks = append(rep.Tasks, results[k])
		rep.Failures = append(rep.Failures, failures[k]...)
		c := counts[k]
		rep.Counts.JournalRows += c.JournalRows
		rep.Counts.LedgerRows += c.LedgerRows
		rep.Counts.Artifacts += c.Artifacts
		rep.Counts.Verified += c.Verified
		rep.Counts.Tampered += c.Tampered
		rep.Counts.Unverifiable += c.Unverifiable
		rep.Counts.SignaturesChecked += c.SignaturesChecked
		rep.Counts.SignaturesUnpinned += c.SignaturesUnpinned
		rep.Counts.CommitsChecked += c.CommitsChecked
		rep.Counts.CommitsNotChecked += c.CommitsNotChecked
	}
	rep.Counts.Tasks = len(tasks)
	rep.Counts.Failures = len(rep.Failures)
	rep.Resolutions, rep.Pending = divergences(env, ix, rep.Tasks)
	rep.NotChecked = []NotChecked{}
	if len(audits.unchecked) > 0 {
		rep.NotChecked = append(rep.NotChecked, hmacsNotChecked(rep.Counts.HMACsNotChecked, audits.unchecked))
	}
	if n := rep.Counts.CommitsNotChecked; n > 0 {
		rep.NotChecked = append(rep.NotChecked, commitsNotChecked(n))
	}
	rep.Verified = len(rep.Failures) == 0 && rep.Counts.Unverifiable == 0 && rep.Counts.SignaturesUnpinned == 0
	if !rep.Verified && len(rep.Failures) == 0 {
		rep.Note = fmt.Sprintf("unverifiable: %d artifact versions and %d signatures are by writers whose keys are not pinned here (see 'bernstein keys list', then 'bernstein keys pin')",
			rep.Counts.Unverifiable, rep.Counts.SignaturesUnpinned)
	}
	return rep, nil
}

// checkMirrored checks the audit mirrors the other way round: every post
// they record is sealed by a spine entry of its task, every transition and
// work row they record is still in the task's ledger or journal. A ledger,
// journal or spine rolled back with plain git leaves the mirror ahead of it.
// Only the walked tasks are checked (all of them, or the --task one).
func (v *Verifier) checkMirrored(entries []auditRecord, journalHeld, ledgerHeld map[[32]byte]bool) ([]Failure, []DivergedRow) {
	ix := v.Spine
	var fs []Failure
	var diverged []DivergedRow
	for _, e := range entries {
		// Row and spine entry hashes are all canonical: a resource in
		// another form names none of them.
		held := false
		switch {
		case e.event == record.EventArtifactPosted:
			r := ix.find(e.resource.b)
			held = e.resource.canon && r != nil && r.Artifact != nil && r.Artifact.TaskID == e.task
		case ledgerEvents[e.event]:
			held = e.resource.canon && ledgerHeld[e.resource.b]
		case workEvents[e.event]:
			held = e.resource.canon && journalHeld[e.resource.b]
		default:
			continue
		}
		if held {
			continue
		}
		// A row of the writer's own chain that diverged from the task's
		// is in its fork: pending or resolved, not lost.
		if e.resource.canon && (ledgerEvents[e.event] || workEvents[e.event]) {
			kind := kindJournal
			if ledgerEvents[e.event] {
				kind = kindLedger
			}
			if d, ok := v.explainRow(e.task, e.writer, kind, e.resource.Hash()); ok {
				diverged = append(diverged, *d)
				continue
			}
		}
		where := fmt.Sprintf("audit entry %s/%d records %s", e.writer, e.seq, e.event)
		f := Failure{TaskID: e.task, Writer: e.writer, Seq: i64(e.seq), Check: "audit_mirror"}
		resource := e.resource.Hash()
		switch {
		case e.event == record.EventArtifactPosted:
			var d struct {
				Key          string `json:"key"`
				Version      *int64 `json:"version"`
				JournalIndex *int64 `json:"journal_index"`
			}
			json.Unmarshal(auditDetails(ix.env.Objects, e.commit), &d)
			f.Key, f.Version, f.JournalIndex = d.Key, d.Version, d.JournalIndex
			f.Reason = fmt.Sprintf("%s of %s: no spine entry %s of task %s seals it", where, describePost(d.Key, d.Version, d.JournalIndex), resource, e.task)
		case ledgerEvents[e.event]:
			f.Reason = fmt.Sprintf("%s %s: the ledger of %s does not hold that row", where, resource, e.task)
		case workEvents[e.event]:
			f.Reason = fmt.Sprintf("%s %s: the journal of %s does not hold that row", where, resource, e.task)
		}
		fs = append(fs, f)
	}
	sortFailures(fs)
	return fs, diverged
}

// auditDetails reads the details of the audit entry commit id carries
// again (the walk read it once and kept only its place).
func auditDetails(objs *gitstore.Repo, id gitstore.Oid) json.RawMessage {
	cc, err := chain.Read(objs, id)
	if err != nil {
		return nil
	}
	a, err := record.ParseAuditEntry(cc.Record)
	if err != nil {
		return nil
	}
	return a.Details
}

// sortFailures orders writer-level failures by writer, seq and check.
func sortFailures(fs []Failure) {
	seq := func(f Failure) int64 {
		if f.Seq == nil {
			return -1
		}
		return *f.Seq
	}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Writer != b.Writer {
			return a.Writer < b.Writer
		}
		if seq(a) != seq(b) {
			return seq(a) < seq(b)
		}
		return a.Check < b.Check
	})
}

func describePost(key string, version, index *int64) string {
	s := key
	if version != nil {
		s += fmt.Sprintf(" v%d", *version)
	}
	if index != nil {
		s += fmt.Sprintf(" at journal index %d", *index)
	}
	return s
}

// taskSet is every task that has a journal, a ledger or a spine entry, or
// that an audit mirror records a post, transition or work row of.
func taskSet(env *Env, ix *SpineIndex, audits *auditIndex, only string) ([]string, error) {
	if only != "" {
		return []string{only}, nil
	}
	set := map[string]bool{}
	for _, prefix := range []string{refs.JournalPrefix, refs.LedgerPrefix} {
		_, names, err := env.Refs.List(prefix)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if id, err := refs.UnescapeTask(strings.TrimPrefix(n, prefix)); err == nil {
				set[id] = true
			}
		}
	}
	for _, w := range ix.Writers {
		for _, r := range ix.writerRecords(w) {
			if r.Artifact != nil {
				set[r.Artifact.TaskID] = true
			}
			if r.Seal != nil {
				set[r.Seal.TaskID] = true
			}
		}
	}
	for t := range audits.byTask {
		if t != "" {
			set[t] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

// walkAudits checks every audit mirror and indexes what it carries.
func walkAudits(env *Env, ix *SpineIndex, o Options, pool *sigPool, rep *Report) (*auditIndex, error) {
	vals, names, err := env.Refs.List(refs.AuditPrefix)
	if err != nil {
		return nil, err
	}
	ai := newAuditIndex(ix)
	first := len(rep.Failures)
	var mu sync.Mutex
	var unchecked []string
	checked := true
	for _, name := range names {
		writer := strings.TrimPrefix(name, refs.AuditPrefix)
		mac := o.MAC[writer]
		if mac == nil {
			checked = false
			unchecked = append(unchecked, writer)
		}
		var newer *record.AuditEntry
		broken := false
		fail := func(seq int64, check, reason string) {
			mu.Lock()
			rep.Failures = append(rep.Failures, Failure{Writer: writer, Seq: i64(seq), Check: check, Reason: fmt.Sprintf("audit entry %s/%d: %s", writer, seq, reason)})
			mu.Unlock()
		}
		// Signatures are checked in batches on the pool.
		var batch []sigJob
		var seqs []int64
		flush := func() {
			if len(batch) == 0 {
				return
			}
			jobs, at := batch, seqs
			batch, seqs = nil, nil
			pool.do(func() {
				checkSignatures(env, jobs)
				for i, j := range jobs {
					mu.Lock()
					rep.Counts.SignaturesChecked++
					if j.state == sigUnpinned || j.state == sigNoKey {
						rep.Counts.SignaturesUnpinned++
					}
					mu.Unlock()
					if j.state == sigBad {
						fail(at[i], "audit_signature", j.reason)
					}
				}
			})
		}
		n := 0
		chain.Walk(env.Objects, vals[name], func(cc chain.Commit) bool {
			n++
			if cc.Err != nil {
				seq := int64(-1)
				if newer != nil {
					seq = newer.Seq - 1
				}
				fail(seq, "audit_chain", cc.Err.Error())
				broken = true
				return false
			}
			a, err := record.ParseAuditEntry(cc.Record)
			if err != nil {
				seq := int64(-1)
				if newer != nil {
					seq = newer.Seq - 1
				}
				fail(seq, "audit_chain", err.Error())
				broken = true
				newer = nil
				return true
			}
			if a.Writer != writer {
				fail(a.Seq, "audit_chain", fmt.Sprintf("entry names writer %q", a.Writer))
			}
			if newer != nil && !broken {
				if newer.Seq != a.Seq+1 {
					fail(newer.Seq, "audit_chain", fmt.Sprintf("seq %d follows seq %d: an entry is missing or out of place", newer.Seq, a.Seq))
					broken = true
				} else if newer.PrevHMAC != a.HMAC {
					fail(newer.Seq, "audit_chain", "prev_hmac does not link to the entry before it")
					broken = true
				}
			}
			if len(cc.Commit.Parents) == 0 {
				if a.Seq != 0 {
					fail(a.Seq, "audit_chain", "first entry does not have seq 0")
				} else if why := env.Binding.CheckRoot(record.ChainAudit, writer, cc.ID, a.PrevHMAC); why != "" {
					fail(a.Seq, CheckRepositoryBinding, why)
				}
			}
			if mac != nil {
				mu.Lock()
				rep.Counts.HMACsChecked++
				mu.Unlock()
				if !mac.CheckMAC(a.MACBytes(), a.HMAC) {
					fail(a.Seq, "audit_hmac", "HMAC does not recompute")
				}
			} else {
				mu.Lock()
				rep.Counts.HMACsNotChecked++
				mu.Unlock()
			}
			batch = append(batch, sigJob{writer: writer, payload: cc.Payload, armored: cc.Commit.Signature, when: CommitTime(cc.Commit.Committer)})
			seqs = append(seqs, a.Seq)
			if len(batch) == sigBatch {
				flush()
			}
			ai.add(a.Event, a.Resource)
			// A post sealed by a spine entry of its task needs nothing more
			// (checkMirrored passes it); any other entry that names a post,
			// a transition or a work row is kept for its task.
			sealed := false
			if a.Event == record.EventArtifactPosted {
				r := ix.lookup(record.Hash(a.Resource))
				sealed = r != nil && r.Artifact != nil && r.Artifact.TaskID == a.TaskID
			}
			if !sealed && (a.Event == record.EventArtifactPosted || ledgerEvents[a.Event] || workEvents[a.Event]) {
				task := ai.strs.of(a.TaskID)
				ai.byTask[task] = append(ai.byTask[task], auditRecord{writer, a.Seq, ai.strs.of(a.Event), task, toHash32(record.Hash(a.Resource)), cc.ID})
			}
			entry := a
			newer = &entry
			return true
		})
		flush()
		rep.Counts.AuditEntries += n
	}
	pool.wait()
	// Signature failures arrive from the pool in any order: the report
	// lists the audit failures by writer and seq, the same on every run.
	sortFailures(rep.Failures[first:])
	rep.HMACChecked = checked
	ai.unchecked = unchecked
	if !checked {
		rep.HMACNote = fmt.Sprintf("HMAC not checked for writer %s: the writer's HMAC key is not on this host", strings.Join(unchecked, ", "))
	}
	return ai, nil
}

// checkTask verifies one task's journal (every version, work outputs,
// bindings, seal) and ledger, and that the audit mirrors carry them.
func (v *Verifier) checkTask(task string, audits *auditIndex) (TaskResult, []Failure, Counts, error) {
	var c Counts
	res := TaskResult{TaskID: task, Artifacts: []VersionState{}}
	tr, err := v.Task(task)
	if err != nil {
		return res, nil, c, err
	}
	fs := tr.Failures
	c.SignaturesChecked, c.SignaturesUnpinned = tr.Signatures, tr.Unpinned
	res.JournalIdentity, res.IdentityReason, res.JournalRows = tr.JournalIdentity, tr.IdentityReason, tr.Rows
	if tr.JournalIdentity == IdentityMismatched {
		fs = append(fs, Failure{TaskID: task, Check: "journal_seal", Reason: tr.IdentityReason})
	}
	for _, ver := range tr.Versions {
		if ver.State != Tampered && !audits.has(record.EventArtifactPosted, string(ver.SpineEntryHash)) {
			reason := fmt.Sprintf("%s v%d at journal index %d: no artifact.posted entry in any audit mirror", ver.Key, ver.Version, ver.JournalIndex)
			fs = append(fs, Failure{TaskID: task, Key: ver.Key, Version: i64(ver.Version), JournalIndex: i64(ver.JournalIndex), Check: "audit_mirror", Reason: reason})
			ver.State, ver.Reason = Tampered, reason
		}
		res.Artifacts = append(res.Artifacts, VersionState{Key: ver.Key, Version: ver.Version, JournalIndex: ver.JournalIndex, State: ver.State, Reason: ver.Reason})
		c.Artifacts++
		switch ver.State {
		case Verified:
			c.Verified++
		case Tampered:
			c.Tampered++
		case Unverifiable:
			c.Unverifiable++
		}
	}
	for i, row := range tr.RowList {
		switch row.Kind {
		case record.KindCheckpoint, record.KindDiffCaptured, record.KindGateAttempt, record.KindEvidenceResult:
			if !audits.has(row.Kind, string(tr.RowHashes[i])) {
				fs = append(fs, Failure{TaskID: task, JournalIndex: i64(row.Index), Check: "audit_mirror", Reason: fmt.Sprintf("%s row at journal index %d: no audit entry carries it", row.Kind, row.Index)})
			}
		}
	}
	wfs, checked, missing := v.workCommits(task, tr.RowList)
	fs = append(fs, wfs...)
	c.CommitsChecked, c.CommitsNotChecked = checked, missing
	c.JournalRows = int(tr.Rows)
	journalHeld := make(map[[32]byte]bool, len(tr.RowHashes))
	for _, h := range tr.RowHashes {
		if b, ok := hashBytes(string(h)); ok {
			journalHeld[b] = true
		}
	}
	lfs, rows, ledgerHeld, sigs, unpinned := v.checkLedger(task, audits)
	fs = append(fs, lfs...)
	c.SignaturesChecked += sigs
	c.SignaturesUnpinned += unpinned
	// The other way round: what the audit mirrors say of this task must be
	// in its chains.
	mfs, diverged := v.checkMirrored(audits.byTask[task], journalHeld, ledgerHeld)
	fs = append(fs, mfs...)
	res.Diverged = append(append([]DivergedRow{}, tr.Diverged...), diverged...)
	res.LedgerRows, c.LedgerRows = rows, int(rows)
	return res, fs, c, nil
}

// checkLedger walks a task's ledger: chain, legal transitions, row
// signatures, audit mirror. It also returns the hashes of the rows it holds,
// and how many row signatures it checked and found only unpinned.
func (v *Verifier) checkLedger(task string, audits *auditIndex) ([]Failure, int64, map[[32]byte]bool, int, int) {
	head, err := v.Env.Refs.ReadOptional(refs.Ledger(task))
	if bad := (*refs.BadRefError)(nil); errors.As(err, &bad) {
		// Read past (docs/trust.md, Refs that cannot be read): named.
		return []Failure{{TaskID: task, Check: "ledger_chain", Reason: bad.BadRef.String()}}, 0, nil, 0, 0
	}
	if err != nil {
		return []Failure{{TaskID: task, Check: "ledger_chain", Reason: err.Error()}}, 0, nil, 0, 0
	}
	held := map[[32]byte]bool{}
	if head.IsZero() {
		return nil, 0, held, 0, 0
	}
	sigs, unpinned := 0, 0
	var fs []Failure
	st := ledger.State{Head: record.Hash(v.Env.Binding.Genesis(record.ChainLedger, task))}
	broken := false
	commits := chain.WalkAll(v.Env.Objects, head)
	proofs := proveCommits(v.Env, commits)
	for i, cc := range commits {
		fail := func(check, reason string) {
			fs = append(fs, Failure{TaskID: task, Check: check, Reason: fmt.Sprintf("ledger of %s at index %d: %s", task, i, reason)})
		}
		if cc.Err != nil {
			// The ref cannot be read as a ledger (docs/trust.md, Refs that
			// cannot be read): named, as every reader names it.
			fail("ledger_chain", refs.BadRef{Ref: refs.Ledger(task), At: head, Reason: cc.Err.Error()}.String())
			broken = true
			continue
		}
		row, err := record.ParseRow(cc.Record)
		if err != nil {
			fail("ledger_chain", err.Error())
			broken = true
			continue
		}
		if i == 0 && row.TaskID == task {
			if why := v.Env.Binding.CheckRoot(record.ChainLedger, task, cc.ID, string(row.Prev)); why != "" {
				fail(CheckRepositoryBinding, why)
				broken = true
			} else {
				st.Head = row.Prev // a bound format-1 ledger starts at ""
			}
		}
		if !broken {
			if row.TaskID != task {
				fail("ledger_chain", fmt.Sprintf("row belongs to task %q", row.TaskID))
				broken = true
			} else if err := st.ApplyHashed(row, record.Sum(cc.Record)); err != nil {
				fail("ledger_chain", err.Error())
				broken = true
			}
		}
		h := string(record.Sum(cc.Record))
		if b, ok := hashBytes(h); ok {
			held[b] = true
		}
		if !audits.has(row.Kind, h) {
			fail("audit_mirror", fmt.Sprintf("%s: no audit entry carries it", row.Kind))
		}
		sigs++
		switch p := proofs[i]; p.State {
		case Tampered:
			fail("row_signature", fmt.Sprintf("%s: %s", row.Kind, p.Reason))
		case Unverifiable:
			unpinned++
		}
	}
	return fs, int64(len(commits)), held, sigs, unpinned
}

// workOutput is the part of a work row's data that names a stored output.
type workOutput struct {
	Output *record.Output `json:"output"`
	Patch  *record.Output `json:"patch"`
}

// checkOutput re-hashes a work row's stored output.
func (v *Verifier) checkOutput(rep *TaskReport, row record.Row) {
	if reason := outputFault(v.Env.Objects, row); reason != "" {
		rep.Failures = append(rep.Failures, Failure{TaskID: rep.Task, JournalIndex: i64(row.Index), Check: "output", Reason: reason})
	}
}

// outputFault re-hashes the output a work row stores and says what does not
// hold ("" when it does, or when the row stores none).
func outputFault(objs *gitstore.Repo, row record.Row) string {
	o := rowOutput(row)
	if o == nil {
		return ""
	}
	fail := func(reason string) string {
		return fmt.Sprintf("%s row at journal index %d: output %s %s", row.Kind, row.Index, o.Path, reason)
	}
	id, err := gitstore.ParseOid(o.Blob)
	if err != nil {
		return fail("has a bad blob id")
	}
	t, data, err := objs.Read(id)
	switch {
	case err != nil:
		return fail("is unreadable: " + err.Error())
	case t != gitstore.TypeBlob || gitstore.HashObject(gitstore.TypeBlob, data) != id:
		return fail("does not hash to its blob id")
	case record.Sum(data) != o.Hash || int64(len(data)) != o.Size:
		return fail("does not hash to the row's hash")
	}
	return ""
}

// rowOutput returns the stored output a work row names, or nil.
func rowOutput(row record.Row) *record.Output {
	var w workOutput
	if json.Unmarshal(row.Data, &w) != nil {
		return nil
	}
	if w.Output != nil {
		return w.Output
	}
	return w.Patch
}

// workCommits checks, on any host, the project commits a journal's
// checkpoint and diff rows name: each must be in the repository (they
// travel with the journal through the writer's anchors ref), be a commit of
// the project (not one of bernstein's own record commits), and have the
// trees the row records (its tree, its first parent's tree). A commit this
// repository does not hold is counted as not checked here, never as a
// failure: a row written before anchors existed, or a repository that did
// not fetch refs/bernstein/anchors/*.
func (v *Verifier) workCommits(task string, rows []record.Row) (fs []Failure, checked, missing int) {
	for _, row := range rows {
		type named struct{ commit, tree, parentTree string }
		var ns []named
		switch row.Kind {
		case record.KindCheckpoint:
			var d record.Checkpoint
			if row.DecodeData(&d) != nil {
				continue // the row's own checks report it
			}
			ns = append(ns, named{d.Commit, d.Tree, d.ParentTree})
		case record.KindDiffCaptured:
			var d record.DiffCaptured
			if row.DecodeData(&d) != nil {
				continue
			}
			ns = append(ns, named{d.Base, d.BaseTree, ""}, named{d.Head, d.HeadTree, ""})
		default:
			continue
		}
		for _, n := range ns {
			id, err := gitstore.ParseOid(n.commit)
			if err != nil {
				continue // not a commit id: the fold refuses the row
			}
			if !v.Env.Objects.Has(id) {
				missing++
				continue
			}
			checked++
			if reason := workCommitFault(v.Env.Objects, id, n.tree, n.parentTree); reason != "" {
				fs = append(fs, Failure{TaskID: task, JournalIndex: i64(row.Index), Check: "work_commit",
					Reason: fmt.Sprintf("%s row at journal index %d: commit %s %s", row.Kind, row.Index, n.commit, reason)})
			}
		}
	}
	return fs, checked, missing
}

// workCommitFault says what does not hold of commit id as a work row names
// it with tree and parentTree ("" when unrecorded): "" when all holds.
func workCommitFault(objs *gitstore.Repo, id gitstore.Oid, tree, parentTree string) string {
	data, err := objs.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return "is not a readable commit: " + err.Error()
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return "does not parse: " + err.Error()
	}
	if why, err := chain.RecordShape(objs, c); err != nil || why != "" {
		if err != nil {
			return "cannot be read: " + err.Error()
		}
		return "is one of bernstein's own record commits, not the project's (" + why + ")"
	}
	if tree != "" && c.Tree.String() != tree {
		return fmt.Sprintf("has tree %s, the row records %s", c.Tree, tree)
	}
	if parentTree == "" {
		return ""
	}
	want := gitstore.EmptyTree
	if len(c.Parents) > 0 {
		pd, err := objs.ReadType(c.Parents[0], gitstore.TypeCommit)
		if err != nil {
			return fmt.Sprintf("has a first parent %s this repository cannot read: %v", c.Parents[0], err)
		}
		p, err := gitstore.ParseCommitLinks(pd)
		if err != nil {
			return fmt.Sprintf("has a first parent %s that does not parse: %v", c.Parents[0], err)
		}
		want = p.Tree
	}
	if want.String() != parentTree {
		return fmt.Sprintf("has a first parent with tree %s, the row records %s", want, parentTree)
	}
	return ""
}

// divergences sums up, for a report, the supersede entries the spines hold
// and the diverged rows the tasks' checks explained by forks that no
// supersede entry resolves yet.
func divergences(env *Env, ix *SpineIndex, tasks []TaskResult) ([]Resolution, []Pending) {
	forkRefs := map[[2]string][]string{} // (task, writer) -> fork refs
	if _, names, err := env.Refs.List(refs.ForksPrefix); err == nil {
		for _, n := range names {
			if w, _, t, _, err := refs.ParseFork(n); err == nil {
				forkRefs[[2]string{t, w}] = append(forkRefs[[2]string{t, w}], n)
			}
		}
	}
	res := []Resolution{}
	var taskIDs []string
	// audit verify walks every spine (it reads no kept index): the walked
	// supersede entries are all of them.
	for t := range ix.walkedSups {
		taskIDs = append(taskIDs, t)
	}
	sort.Strings(taskIDs)
	for _, t := range taskIDs {
		for _, r := range ix.walkedSups[t] {
			if r.ChainErr != "" {
				continue
			}
			if st, _ := ix.signature(r); st == sigBad {
				continue
			}
			e := r.Supersede
			res = append(res, Resolution{Task: t, Writer: r.Writer, Seq: r.Seq, Remote: e.Remote, Rerecorded: e.Rerecorded,
				Dropped: len(e.Journal.Dropped) + len(e.Ledger.Dropped), Forks: append([]string{}, forkRefs[[2]string{t, r.Writer}]...)})
		}
	}
	pending := []Pending{}
	for _, tr := range tasks {
		n := map[string]int{}
		var writers []string
		for _, d := range tr.Diverged {
			if d.Resolved {
				continue
			}
			if n[d.Writer] == 0 {
				writers = append(writers, d.Writer)
			}
			n[d.Writer]++
		}
		sort.Strings(writers)
		for _, w := range writers {
			pending = append(pending, Pending{Task: tr.TaskID, Writer: w, Rows: n[w], Forks: append([]string{}, forkRefs[[2]string{tr.TaskID, w}]...)})
		}
	}
	return res, pending
}
