package verify

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Failure is one check that did not hold, with its position. Position fields
// that do not apply are null.
type Failure struct {
	TaskID       string `json:"task_id"`
	Key          string `json:"key"`
	Version      *int64 `json:"version"`
	JournalIndex *int64 `json:"journal_index"`
	Writer       string `json:"writer,omitempty"`
	Seq          *int64 `json:"seq,omitempty"`
	Check        string `json:"check"`
	Reason       string `json:"reason"`
}

// Where a version's writer was read (Version.WriterSource).
const (
	WriterFromSpineEntry = "spine_entry" // the spine entry the row names
	WriterFromCommit     = "commit"      // the row commit's committer
)

// Version is one artifact version as verification found it.
type Version struct {
	Key             string      `json:"key"`
	Version         int64       `json:"version"`
	Type            string      `json:"type"`
	LinkKind        string      `json:"link_kind"`
	ContentHash     record.Hash `json:"content_hash"`
	SpineEntryHash  record.Hash `json:"spine_entry_hash"`
	PrevVersionHash record.Hash `json:"prev_version_hash"`
	JournalIndex    int64       `json:"journal_index"`
	State           string      `json:"state"`
	Reason          string      `json:"reason"`
	Actor           string      `json:"actor"`
	// Writer is whose spine entry seals the version; when verification
	// stopped before it reached the entry, the writer the row's commit
	// names. WriterSource says which ("" when neither names one).
	Writer       string       `json:"writer"`
	WriterSource string       `json:"writer_source"`
	Blob         string       `json:"blob"`
	Size         int64        `json:"size"`
	Commit       gitstore.Oid `json:"-"`
	// Payload holds the verified canonical bytes; it is nil when tampered.
	Payload []byte `json:"-"`
}

// TaskReport is the verification of one task's journal.
type TaskReport struct {
	Task        string      `json:"task"`
	Rows        int64       `json:"rows"`
	Head        record.Hash `json:"head"`
	ChainBroken bool        `json:"chain_broken"`
	ChainReason string      `json:"chain_reason"`
	// Unreadable is set when the journal ref cannot be read as a journal
	// (docs/trust.md, Refs that cannot be read): the task is tampered, and
	// a read of one of its artifacts is Tampered's error.
	Unreadable      *refs.BadRef `json:"-"`
	JournalIdentity string       `json:"journal_identity"`
	IdentityReason  string       `json:"identity_reason"`
	Versions        []Version    `json:"artifacts"`
	Failures        []Failure    `json:"failures"`
	// Rows are the journal rows in order, when the chain could be read.
	RowList []record.Row `json:"-"`
	// RowHashes are the rows' hashes, computed from the bytes read.
	RowHashes []record.Hash `json:"-"`
	// Signatures counts the row commits whose signatures were checked, and
	// Unpinned those that check only against an unpinned published key.
	Signatures, Unpinned int `json:"-"`
	// Anchored is set when the reader trusts some key (its own writer's or
	// a pinned one), so that an unverifiable version is one a writer it
	// does not trust wrote, not merely one it cannot check.
	Anchored bool `json:"-"`
	// Diverged are the versions other writers' spines seal that the journal
	// does not hold because their chains diverged from it: each is in its
	// writer's fork (refs/bernstein/forks/), pending or resolved (forks.go).
	Diverged []DivergedRow `json:"diverged,omitempty"`
}

// Verified reports whether every version is verified and the chain holds.
func (r *TaskReport) Verified() bool {
	if r.ChainBroken {
		return false
	}
	for _, v := range r.Versions {
		if v.State != Verified {
			return false
		}
	}
	return true
}

// Reason summarises why the report is not verified ("" when it is).
func (r *TaskReport) Reason() string {
	if r.ChainBroken {
		return r.ChainReason
	}
	n, un := 0, 0
	for _, v := range r.Versions {
		switch v.State {
		case Tampered:
			n++
		case Unverifiable:
			un++
		}
	}
	switch {
	case n > 0:
		return fmt.Sprintf("%d of %d versions tampered", n, len(r.Versions))
	case un > 0:
		return fmt.Sprintf("%d of %d versions unverifiable: no pinned key for their writer", un, len(r.Versions))
	}
	return ""
}

// Content returns the payload of ver that a surface may render, or nil and
// why it is withheld: the version does not verify, or the journal it sits in
// is broken, rolled back behind its spine or cut back behind its seal, so
// that what it calls the latest version may not be.
func (r *TaskReport) Content(ver *Version) ([]byte, string) {
	switch {
	case ver.State == Tampered:
		return nil, ver.Reason
	case r.ChainBroken:
		return nil, r.ChainReason
	case r.JournalIdentity == IdentityMismatched:
		return nil, "journal identity mismatched: " + r.IdentityReason
	case ver.Payload == nil:
		return nil, "content unavailable"
	}
	return ver.Payload, ""
}

// Shown picks the version of key that show renders by default: the latest,
// unless it is unverifiable to a reader that trusts some key (a writer it
// has not pinned wrote it), in which case the latest verified one; newer
// lists the versions passed over. Without any verified version it is the
// latest.
func (r *TaskReport) Shown(key string) (shown *Version, newer []Version) {
	latest := r.Latest(key)
	if latest == nil || latest.State != Unverifiable || !r.Anchored {
		return latest, nil
	}
	for i := len(r.Versions) - 1; i >= 0; i-- {
		v := &r.Versions[i]
		if v.Key != key {
			continue
		}
		if v.State == Verified {
			return v, newer
		}
		newer = append(newer, *v)
	}
	return latest, nil
}

// Latest returns the latest version of key, or nil.
func (r *TaskReport) Latest(key string) *Version {
	var out *Version
	for i := range r.Versions {
		if r.Versions[i].Key == key && (out == nil || r.Versions[i].Version > out.Version) {
			out = &r.Versions[i]
		}
	}
	return out
}

// Find returns version n of key, or nil.
func (r *TaskReport) Find(key string, n int64) *Version {
	for i := range r.Versions {
		if r.Versions[i].Key == key && r.Versions[i].Version == n {
			return &r.Versions[i]
		}
	}
	return nil
}

// Verifier checks tasks against one spine index.
type Verifier struct {
	Env   *Env
	Spine *SpineIndex
	// Logs, when this host configures witnesses, is what the checks of
	// the writers' logs found: a journal's identity is verified only when
	// a cosigned checkpoint covers its seal (nil: no witness configured).
	Logs  *LogCoverage
	trees map[gitstore.Oid][]gitstore.TreeEntry

	forkMu    sync.Mutex
	forkCache map[string]taskForks // the forks of each task read so far
}

// NewVerifier indexes the spines of env.
func NewVerifier(env *Env) (*Verifier, error) {
	ix, err := BuildSpineIndex(env)
	if err != nil {
		return nil, err
	}
	return &Verifier{Env: env, Spine: ix, trees: map[gitstore.Oid][]gitstore.TreeEntry{}}, nil
}

func (v *Verifier) fail(rep *TaskReport, ver *Version, check, reason string) {
	f := Failure{TaskID: rep.Task, Check: check, Reason: reason}
	if ver != nil {
		f.Key, f.Version, f.JournalIndex = ver.Key, i64(ver.Version), i64(ver.JournalIndex)
		if ver.State != Tampered {
			ver.State, ver.Reason = Tampered, reason
		}
	}
	rep.Failures = append(rep.Failures, f)
}

// Task verifies every artifact version of task's journal.
func (v *Verifier) Task(task string) (*TaskReport, error) {
	v.Spine.proveTask(task)
	rep, err := v.task(task)
	if err != nil || !v.Spine.Poisoned() {
		return rep, err
	}
	if err := v.walkSpines(); err != nil {
		return nil, err
	}
	return v.task(task)
}

// walkSpines drops a kept spine index that did not hold (spinecache.go) for
// one walked from the spines.
func (v *Verifier) walkSpines() error {
	ix, err := buildSpineIndexWith(v.Env, nil, false)
	if err != nil {
		return err
	}
	if v.Spine.cached {
		ix.keepWalked() // the kept index did not hold: keep the walked one instead
	}
	v.Spine = ix
	return nil
}

func (v *Verifier) task(task string) (*TaskReport, error) {
	rep := &TaskReport{Task: task, Versions: []Version{}, Failures: []Failure{}, Anchored: v.Env.Anchored()}
	head, err := v.Env.Refs.ReadOptional(refs.Journal(task))
	var bad *refs.BadRefError
	if errors.As(err, &bad) {
		// Read past (docs/trust.md, Refs that cannot be read): the chain
		// is broken at its head, named as every reader names it.
		rep.ChainBroken, rep.ChainReason = true, fmt.Sprintf("journal chain of %s is broken at index 0: %s", task, bad.BadRef)
		rep.Unreadable = &bad.BadRef
		rep.Failures = append(rep.Failures, Failure{TaskID: task, JournalIndex: i64(0), Check: "journal_chain", Reason: rep.ChainReason})
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	var commits []chain.Commit
	if !head.IsZero() {
		commits = chain.WalkAll(v.Env.Objects, head)
	}
	proofs := proveCommits(v.Env, commits)
	for i := range commits {
		// Proven: the signed bytes are no longer needed.
		commits[i].Payload, commits[i].Commit.Signature = nil, nil
	}
	type latest struct {
		version int64
		spine   record.Hash
	}
	keys := map[string]latest{}
	prev := record.Hash("")
	brokenAt := int64(-1)
	foreign := false // rooted in another repository: its reason is every version's
	breakChain := func(i int64, reason string) {
		if !rep.ChainBroken {
			rep.ChainBroken = true
			rep.ChainReason = fmt.Sprintf("journal chain of %s is broken at index %d: %s", task, i, reason)
			brokenAt = i
			rep.Failures = append(rep.Failures, Failure{TaskID: task, JournalIndex: i64(i), Check: "journal_chain", Reason: rep.ChainReason})
		}
	}
	for i, cc := range commits {
		idx := int64(i)
		if cc.Err != nil {
			b := refs.BadRef{Ref: refs.Journal(task), At: head, Reason: cc.Err.Error()}
			breakChain(idx, b.String())
			if rep.Unreadable == nil && unreadableObject(cc.Err) {
				rep.Unreadable = &b
			}
			continue
		}
		row, err := record.ParseRow(cc.Record)
		if err != nil {
			breakChain(idx, err.Error())
			continue
		}
		if idx == 0 && row.TaskID == task {
			if why := v.Env.Binding.CheckRoot(record.ChainJournal, task, cc.ID, string(row.Prev)); why != "" {
				v.foreign(rep, why)
				brokenAt, foreign = 0, true
			}
			prev = row.Prev
		}
		switch {
		case row.TaskID != task:
			breakChain(idx, fmt.Sprintf("row belongs to task %q", row.TaskID))
		case row.Index != idx:
			breakChain(idx, fmt.Sprintf("row says index %d", row.Index))
		case row.Prev != prev:
			breakChain(idx, "row's prev does not link to the row before it")
		}
		prev = record.Sum(cc.Record)
		rep.RowList = append(rep.RowList, row)
		rep.RowHashes = append(rep.RowHashes, prev)
		treeErr := checkRowTree(row, cc.Commit.Tree)
		proof := proofs[i]
		rep.Signatures++
		if proof.State == Unverifiable {
			rep.Unpinned++
		}
		if row.Kind != record.KindArtifactPosted {
			if treeErr != nil {
				rep.Failures = append(rep.Failures, Failure{TaskID: task, JournalIndex: i64(idx), Check: "journal_tree",
					Reason: fmt.Sprintf("%s row at journal index %d: %v", row.Kind, idx, treeErr)})
			}
			if proof.State == Tampered {
				rep.Failures = append(rep.Failures, Failure{TaskID: task, JournalIndex: i64(idx), Check: "row_signature",
					Reason: fmt.Sprintf("%s row at journal index %d: %s", row.Kind, idx, proof.Reason)})
			}
			v.checkOutput(rep, row)
			continue
		}
		var a record.ArtifactPosted
		if err := row.DecodeData(&a); err != nil {
			breakChain(idx, err.Error())
			continue
		}
		ver := Version{
			Key: a.Key, Version: a.Version, Type: a.ArtifactType, LinkKind: a.LinkKind, ContentHash: a.ContentHash,
			SpineEntryHash: a.SpineEntryHash, PrevVersionHash: a.PrevVersionHash, JournalIndex: row.Index,
			Actor: row.Actor, Blob: a.Blob, Size: a.Size, Commit: cc.ID, State: Verified,
		}
		want := keys[a.Key]
		v.checkVersion(rep, &ver, &row, treeErr, proof, want.version, want.spine)
		keys[a.Key] = latest{a.Version, a.SpineEntryHash}
		if foreign || brokenAt >= 0 && ver.State != Tampered {
			ver.State, ver.Reason = Tampered, rep.ChainReason
			ver.Payload = nil
		}
		rep.Versions = append(rep.Versions, ver)
	}
	rep.Rows = int64(len(commits))
	rep.Head = prev
	v.checkSpineCoverage(rep)
	rep.JournalIdentity, rep.IdentityReason = v.identity(rep)
	return rep, nil
}

// UnreadableError is the *refs.BadRefError of a task whose journal ref cannot be
// read as a journal (Unreadable), as every read of the task answers it
// (task show, the task's API reads); nil otherwise.
func (r *TaskReport) UnreadableError() error {
	if r.Unreadable == nil {
		return nil
	}
	return &refs.BadRefError{BadRef: *r.Unreadable, Err: errors.New(r.Unreadable.Reason)}
}

// foreign breaks a journal rooted in another repository: no row of it
// counts, and the failure says so.
func (v *Verifier) foreign(rep *TaskReport, why string) {
	rep.ChainBroken = true
	rep.ChainReason = fmt.Sprintf("journal of %s is %s", rep.Task, why)
	rep.Failures = append(rep.Failures, Failure{TaskID: rep.Task, JournalIndex: i64(0), Check: CheckRepositoryBinding, Reason: rep.ChainReason})
}

// checkVersion applies every per-version check; the first failure makes the
// version tampered and withholds its content.
func (v *Verifier) checkVersion(rep *TaskReport, ver *Version, row *record.Row, treeErr error, proof chain.Proof, prevVersion int64, prevSpine record.Hash) {
	where := fmt.Sprintf("%s v%d at journal index %d", ver.Key, ver.Version, ver.JournalIndex)
	// The writer the row's commit names, until its spine entry says more:
	// a version that fails an earlier check still shows who wrote it.
	ver.Writer, ver.WriterSource = proof.Writer, ""
	if proof.Writer != "" {
		ver.WriterSource = WriterFromCommit
	}
	if ver.Version != prevVersion+1 {
		v.fail(rep, ver, "version_chain", fmt.Sprintf("%s: follows version %d", where, prevVersion))
	} else if ver.PrevVersionHash != prevSpine {
		v.fail(rep, ver, "version_chain", fmt.Sprintf("%s: prev_version_hash does not name version %d's spine entry", where, prevVersion))
	}
	// The payload: re-hashed, never trusting the object store's name for it.
	data, check, reason := checkPayload(v.Env.Objects, ver, where)
	if check != "" {
		v.fail(rep, ver, check, reason)
		return
	}
	// What plain git shows at the row's commit must be exactly this version.
	if treeErr != nil {
		v.fail(rep, ver, "journal_tree", fmt.Sprintf("%s: %v", where, treeErr))
		return
	}
	// The spine entry must seal exactly this row.
	rec := v.Spine.lookup(ver.SpineEntryHash)
	if rec == nil {
		v.Spine.missing()
	}
	if !v.Spine.prove(rec) {
		return // the kept index does not hold: Task walks the spines
	}
	if rec == nil || rec.Artifact == nil {
		why := fmt.Sprintf("%s: no spine entry %s", where, ver.SpineEntryHash)
		for _, b := range v.Spine.Unreadable {
			why += fmt.Sprintf(" (%s)", b) // where it may be
		}
		v.fail(rep, ver, "spine_binding", why)
		return
	}
	ver.Writer, ver.WriterSource = rec.Writer, WriterFromSpineEntry
	// The index keeps a digest of what the entry binds: a row that binds
	// the same is compared field by field with itself (only the writer can
	// differ), any other with the entry read again.
	e := &record.SpineArtifactEntry{TaskID: rep.Task, Key: ver.Key, Version: ver.Version, ContentHash: ver.ContentHash,
		PrevVersionHash: ver.PrevVersionHash, JournalIndex: ver.JournalIndex, Actor: row.Actor}
	if entryDigest(e) != rec.Artifact.binding {
		full, err := v.Spine.artifactEntry(rec)
		if err != nil {
			v.fail(rep, ver, "spine_binding", fmt.Sprintf("%s: spine entry %s/%d: %v", where, rec.Writer, rec.Seq, err))
			return
		}
		e = full
	}
	diff := BindingDiff(rep.Task, ver, row.Actor, proof.Writer, e, rec.Writer)
	if len(diff) > 0 {
		reason := fmt.Sprintf("%s: spine entry %s/%d binds a different %s", where, rec.Writer, rec.Seq, strings.Join(diff, ", "))
		if slices.Contains(diff, "writer") {
			reason += fmt.Sprintf(" (the row's commit names %s)", proof.Writer)
		}
		v.fail(rep, ver, "spine_binding", reason)
		return
	}
	if rec.ChainErr != "" {
		v.fail(rep, ver, "spine_chain", fmt.Sprintf("%s: %s", where, rec.ChainErr))
		return
	}
	switch st, reason := v.Spine.signature(rec); st {
	case sigBad:
		v.fail(rep, ver, "spine_signature", fmt.Sprintf("%s: spine entry %s/%d: %s", where, rec.Writer, rec.Seq, reason))
		return
	case sigUnpinned, sigNoKey:
		ver.State, ver.Reason = Unverifiable, reason
	}
	// The row's own commit: signed by the writer that recorded it.
	switch proof.State {
	case Tampered:
		v.fail(rep, ver, "row_signature", fmt.Sprintf("%s: the row's commit: %s", where, proof.Reason))
		return
	case Unverifiable:
		if ver.State == Verified {
			ver.State, ver.Reason = Unverifiable, proof.Reason
		}
	}
	ver.Payload = data
}

// rowFiles is what a journal row's commit tree holds: the artifact version
// it posts, or the output it stored.
func rowFiles(row record.Row) (map[string]gitstore.Oid, error) {
	files := map[string]gitstore.Oid{}
	add := func(path, blob string) error {
		id, err := gitstore.ParseOid(blob)
		if err != nil {
			return fmt.Errorf("bad blob id for %s", path)
		}
		files[path] = id
		return nil
	}
	if row.Kind == record.KindArtifactPosted {
		var a record.ArtifactPosted
		if err := row.DecodeData(&a); err != nil {
			return nil, err
		}
		return files, add(record.ArtifactPath(a.Key, a.Version), a.Blob)
	}
	if o := rowOutput(row); o != nil {
		return files, add(o.Path, o.Blob)
	}
	return files, nil
}

// checkRowTree checks that a row's commit tree is exactly the tree of the
// row's own files, so `git show <commit>:<path>` shows what the row says and
// nothing else rides along.
func checkRowTree(row record.Row, tree gitstore.Oid) error {
	files, err := rowFiles(row)
	if err != nil {
		return err
	}
	want, _, err := gitstore.TreeOf(files)
	if err != nil {
		return err
	}
	if want != tree {
		names := make([]string, 0, len(files))
		for p := range files {
			names = append(names, p)
		}
		sort.Strings(names)
		if len(names) == 0 {
			return fmt.Errorf("the row's commit tree is not empty, though the row stores no file")
		}
		return fmt.Errorf("the row's commit tree is not exactly its own %s", strings.Join(names, ", "))
	}
	return nil
}

// checkSpineCoverage reports spine entries of the task whose rows the
// journal does not hold: a journal rolled back behind its spine.
func (v *Verifier) checkSpineCoverage(rep *TaskReport) {
	have := map[record.Hash]bool{}
	for _, ver := range rep.Versions {
		have[ver.SpineEntryHash] = true
	}
	// ByTask lists writers in name order and each spine in chain order.
	for _, r := range v.Spine.ofTask(rep.Task).arts {
		a := r.Artifact
		if have[r.Hash()] {
			continue
		}
		if d, ok := v.explainEntry(rep.Task, r); ok {
			rep.Diverged = append(rep.Diverged, *d)
			continue
		}
		w := r.Writer
		reason := fmt.Sprintf("spine entry %s/%d seals %s v%d at journal index %d, which the journal does not hold", w, r.Seq, a.Key, a.Version, a.JournalIndex)
		rep.Failures = append(rep.Failures, Failure{TaskID: rep.Task, Key: a.Key, Version: i64(a.Version), JournalIndex: i64(a.JournalIndex), Writer: w, Seq: i64(r.Seq), Check: "spine_binding", Reason: reason})
		if !rep.ChainBroken {
			rep.ChainBroken, rep.ChainReason = true, "journal lacks rows its spine seals: "+reason
		}
	}
}

// JournalIdentity decides journal_identity for a journal whose rows hash to
// hashes (oldest first), without re-verifying its artifacts.
func (v *Verifier) JournalIdentity(task string, hashes []record.Hash) (string, string) {
	v.Spine.proveTask(task)
	if v.Spine.Poisoned() {
		if err := v.walkSpines(); err != nil {
			return IdentityUnverifiable, err.Error()
		}
	}
	rep := &TaskReport{Task: task, RowList: make([]record.Row, len(hashes)), RowHashes: hashes, Rows: int64(len(hashes))}
	if n := len(hashes); n > 0 {
		rep.Head = hashes[n-1]
	}
	return v.identity(rep)
}

// identity decides journal_identity from the task's seals.
func (v *Verifier) identity(rep *TaskReport) (string, string) {
	// A seal whose transition is in its writer's fork of the ledger (the
	// writer's chain diverged from the task's) seals that fork, not the task.
	var seals []*SpineRecord
	for _, s := range v.Spine.ofTask(rep.Task).seals {
		if !v.explainSeal(rep.Task, s) {
			seals = append(seals, s)
		}
	}
	// The ledger and the seals must agree: a terminal transition and its
	// seal are written in one transaction, so a terminal transition without
	// a seal (a spine rolled back) or a seal whose transition the ledger
	// lacks (a ledger rolled back) is tampering, never "still open".
	lrows := v.ledgerRows(rep.Task)
	for _, row := range lrows {
		if !ledger.Terminal(ledger.PhaseOf(row.Kind)) {
			continue
		}
		sealed := false
		for _, s := range seals {
			sealed = sealed || (s.Seal.LedgerIndex == row.Index && s.Seal.Transition == row.Kind)
		}
		if !sealed {
			return IdentityMismatched, fmt.Sprintf("the ledger records %s at index %d, but no spine entry seals the journal there", row.Kind, row.Index)
		}
	}
	for _, s := range seals {
		if i := s.Seal.LedgerIndex; i < 0 || i >= int64(len(lrows)) || lrows[i].Kind != s.Seal.Transition {
			return IdentityMismatched, fmt.Sprintf("seal %s/%d names %s at ledger index %d, which the ledger does not hold", s.Writer, s.Seq, s.Seal.Transition, i)
		}
	}
	if len(seals) == 0 {
		return IdentityUnverifiable, "no journal seal: the task has not reached a terminal transition"
	}
	best := seals[0]
	for _, s := range seals[1:] {
		if s.Seal.Rows > best.Seal.Rows {
			best = s
		}
	}
	seal := best.Seal
	where := fmt.Sprintf("seal %s/%d", best.Writer, best.Seq)
	if best.ChainErr != "" {
		return IdentityMismatched, where + ": " + best.ChainErr
	}
	st, reason := v.Spine.signature(best)
	if st == sigBad {
		return IdentityMismatched, where + ": " + reason
	}
	if best.sealErr != nil && *best.sealErr != nil {
		return IdentityMismatched, where + ": " + (*best.sealErr).Error()
	}
	rows := int64(len(rep.RowList))
	// A journal of no rows has its genesis as head: what its first row
	// would link to, and what a seal of it records.
	empty := record.Hash(v.Env.Binding.Genesis(record.ChainJournal, rep.Task))
	head := rep.Head
	if rows == 0 {
		head = empty
	}
	switch {
	case rep.ChainBroken:
		return IdentityMismatched, where + ": " + rep.ChainReason
	case rows < seal.Rows:
		return IdentityMismatched, fmt.Sprintf("%s: journal has %d rows, the seal says %d", where, rows, seal.Rows)
	case rows == seal.Rows && head != seal.Head:
		return IdentityMismatched, fmt.Sprintf("%s: journal head differs from the sealed head", where)
	case rows > seal.Rows:
		at := empty
		if seal.Rows > 0 {
			at = rep.RowHashes[seal.Rows-1]
		}
		if at != seal.Head {
			return IdentityMismatched, fmt.Sprintf("%s: journal rows before index %d differ from the sealed ones", where, seal.Rows)
		}
		if reopenedAfter(lrows, seal.LedgerIndex) {
			return IdentityUnverifiable, fmt.Sprintf("%s covers %d of %d rows: the task was reopened after it", where, seal.Rows, rows)
		}
		return IdentityMismatched, fmt.Sprintf("%s: journal has %d rows after its seal of %d", where, rows, seal.Rows)
	}
	if st != sigTrusted {
		return IdentityUnverifiable, where + ": " + reason
	}
	if v.Logs != nil {
		if ok, why := v.Logs.covers(best.Writer, best.Seq); !ok {
			return IdentityUnverifiable, where + ": " + why
		}
	}
	return IdentityVerified, ""
}

// ledgerRows reads the task's ledger rows, up to the first row that does
// not sit where the chain says (checkLedger reports why).
func (v *Verifier) ledgerRows(task string) []record.Row {
	head, err := v.Env.Refs.ReadOptional(refs.Ledger(task))
	if err != nil || head.IsZero() {
		return nil
	}
	var out []record.Row
	for _, cc := range chain.WalkAll(v.Env.Objects, head) {
		if cc.Err != nil {
			break
		}
		row, err := record.ParseRow(cc.Record)
		if err != nil || row.TaskID != task || row.Index != int64(len(out)) {
			break
		}
		out = append(out, row)
	}
	return out
}

// reopenedAfter reports whether the ledger has a task.reopened row after
// ledger index i.
func reopenedAfter(rows []record.Row, i int64) bool {
	for _, row := range rows {
		if row.Index > i && row.Kind == record.KindTaskReopened {
			return true
		}
	}
	return false
}

// treePath resolves a slash-separated path in tree to a blob id.
func (v *Verifier) treePath(tree gitstore.Oid, path string) (gitstore.Oid, error) {
	parts := strings.Split(path, "/")
	cur := tree
	for i, p := range parts {
		es, ok := v.trees[cur]
		if !ok {
			var err error
			if es, err = readTree(v.Env.Objects, cur); err != nil {
				return gitstore.ZeroOid, fmt.Errorf("is unreadable: %v", err)
			}
			if len(v.trees) > 256 {
				v.trees = map[gitstore.Oid][]gitstore.TreeEntry{}
			}
			v.trees[cur] = es
		}
		found := false
		for _, e := range es {
			if e.Name == p {
				if (i < len(parts)-1) != e.IsTree() {
					return gitstore.ZeroOid, errors.New("has the wrong mode")
				}
				cur, found = e.ID, true
				break
			}
		}
		if !found {
			return gitstore.ZeroOid, errors.New("is missing")
		}
	}
	return cur, nil
}
