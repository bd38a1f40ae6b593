package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Version is the record format version written in every record's "v".
const Version = 1

// Journal row kinds.
const (
	KindArtifactPosted = "artifact_posted"
	KindCheckpoint     = "checkpoint"
	KindDiffCaptured   = "diff_captured"
	KindGateAttempt    = "gate_attempt"
	KindEvidenceResult = "evidence_result"
)

// Ledger row kinds.
const (
	KindTaskCreated   = "task.created"
	KindTaskClaimed   = "task.claimed"
	KindTaskReleased  = "task.released"
	KindTaskStarted   = "task.started"
	KindTaskSuspended = "task.suspended"
	KindTaskResumed   = "task.resumed"
	KindTaskCompleted = "task.completed"
	KindTaskFailed    = "task.failed"
	KindTaskAbandoned = "task.abandoned"
	KindTaskReopened  = "task.reopened"
)

// Row is one entry of a task journal or a task ledger. Rows are chained: Index
// is 0-based and Prev is the Hash of the previous row ("" for the first).
type Row struct {
	V      int             `json:"v"`
	Kind   string          `json:"kind"`
	TaskID string          `json:"task_id"`
	Index  int64           `json:"index"`
	Prev   Hash            `json:"prev"`
	Actor  string          `json:"actor"`
	Data   json.RawMessage `json:"data"`
}

// NewRow builds a row whose data is the canonical form of data.
func NewRow(kind, task string, index int64, prev Hash, actor string, data any) (Row, error) {
	d, err := Canonical(data)
	if err != nil {
		return Row{}, fmt.Errorf("%s data: %w", kind, err)
	}
	return Row{V: Version, Kind: kind, TaskID: task, Index: index, Prev: prev, Actor: actor, Data: d}, nil
}

// Bytes returns the canonical bytes of the row.
func (r Row) Bytes() []byte { return MustCanonical(r) }

// Hash returns the row hash: sha256 over the canonical bytes.
func (r Row) Hash() Hash { return Sum(r.Bytes()) }

// DecodeData decodes the row's data into v: exactly the members of v's type,
// nothing unknown, nothing missing.
func (r Row) DecodeData(v any) error {
	if err := decodeExact(r.Data, v); err != nil {
		return fmt.Errorf("%s row %d data: %w", r.Kind, r.Index, err)
	}
	return nil
}

// ParseRow parses canonical row bytes. The bytes must be exactly canonical, so
// the hash of what was read is the hash of what was written.
func ParseRow(b []byte) (Row, error) {
	r, ok := parseRowFast(b)
	// Exact decoding checks canonical form as it goes: one byte form per
	// row, so the hash of what was read is the hash of what was written.
	if !ok {
		if err := decodeExact(b, &r); err != nil {
			if errors.Is(err, ErrNotCanonical) {
				return Row{}, err
			}
			return Row{}, fmt.Errorf("row: %w", err)
		}
	}
	if r.V != Version {
		return Row{}, fmt.Errorf("row: unsupported version %d", r.V)
	}
	if r.Kind == "" || r.TaskID == "" || r.Index < 0 || len(r.Data) == 0 {
		return Row{}, errors.New("row: missing kind, task_id, index or data")
	}
	return r, nil
}

// parseRowFast reads a canonical row member by member in the one order its
// canonical form allows. It accepts exactly what decodeExact accepts for a
// Row; anything else (including every error) goes the general way.
func parseRowFast(b []byte) (Row, bool) {
	var r Row
	s := scanner{b: b}
	lit := func(l string) bool {
		if len(b)-s.i < len(l) || string(b[s.i:s.i+len(l)]) != l {
			return false
		}
		s.i += len(l)
		return true
	}
	str := func(dst *string) bool {
		start := s.i
		if s.str() != nil {
			return false
		}
		v, err := unquote(b[start:s.i])
		*dst = v
		return err == nil
	}
	num := func(dst *int64) bool {
		start := s.i
		if start >= len(b) || (b[start] != '-' && (b[start] < '0' || b[start] > '9')) || s.num() != nil {
			return false
		}
		n, err := strconv.ParseInt(string(b[start:s.i]), 10, 64)
		*dst = n
		return err == nil
	}
	var prev string
	var v int64
	ok := lit(`{"actor":`) && str(&r.Actor) && lit(`,"data":`)
	if !ok {
		return r, false
	}
	start := s.i
	if s.value(1) != nil {
		return r, false
	}
	r.Data = append(json.RawMessage(nil), b[start:s.i]...)
	ok = lit(`,"index":`) && num(&r.Index) && lit(`,"kind":`) && str(&r.Kind) && lit(`,"prev":`) && str(&prev) &&
		lit(`,"task_id":`) && str(&r.TaskID) && lit(`,"v":`) && num(&v) && lit(`}`) && s.i == len(b)
	if !ok || v != int64(int(v)) {
		return r, false
	}
	r.Prev, r.V = Hash(prev), int(v)
	return r, true
}

// ArtifactPosted is the data of an artifact_posted journal row.
type ArtifactPosted struct {
	Key             string `json:"key"`
	ArtifactType    string `json:"artifact_type"`
	Version         int64  `json:"version"`
	ContentHash     Hash   `json:"content_hash"`
	Blob            string `json:"blob"`
	Size            int64  `json:"size"`
	LinkKind        string `json:"link_kind"`
	PrevVersionHash Hash   `json:"prev_version_hash"`
	SpineEntryHash  Hash   `json:"spine_entry_hash"`
}

// Spine entry kinds.
const (
	SpineArtifact    = "artifact"
	SpineJournalSeal = "journal_seal"
	// SpineSupersede records that this writer took a remote's chains of a
	// task as the truth after they diverged from its own (task adopt).
	SpineSupersede = "supersede"
)

// SealSignatureFile names the detached signature of a seal entry in its
// spine commit's tree.
const SealSignatureFile = "seal.sig"

// SpineHeader is the part every spine entry shares.
type SpineHeader struct {
	V      int    `json:"v"`
	Writer string `json:"writer"`
	Seq    int64  `json:"seq"`
	Prev   Hash   `json:"prev"`
	Kind   string `json:"kind"`
}

// SpineArtifactEntry seals one artifact version.
type SpineArtifactEntry struct {
	SpineHeader
	TaskID          string `json:"task_id"`
	Key             string `json:"key"`
	Version         int64  `json:"version"`
	ContentHash     Hash   `json:"content_hash"`
	PrevVersionHash Hash   `json:"prev_version_hash"`
	JournalIndex    int64  `json:"journal_index"`
	Actor           string `json:"actor"`
}

// SpineSealEntry seals a task journal at a terminal ledger transition: its
// head row hash and row count. LedgerIndex is the index of that transition.
type SpineSealEntry struct {
	SpineHeader
	TaskID      string `json:"task_id"`
	Head        Hash   `json:"head"`
	Rows        int64  `json:"rows"`
	LedgerIndex int64  `json:"ledger_index"`
	Transition  string `json:"transition"`
}

// SupersededChain is what a supersede entry says of one of the task's
// chains (its journal or its ledger): the rows this writer had that the
// remote's chain lacked, dropped from the chain (they stay in the writer's
// fork ref), the remote's head taken instead, and the head after this
// writer's rows were recorded again on top of it. Rows counts are the
// chain's lengths; a count of 0 has the empty hash.
type SupersededChain struct {
	// Dropped are the hashes of the rows dropped, oldest first; DroppedRows
	// is the length of the chain they ended (its head is the last of them).
	Dropped     []Hash `json:"dropped"`
	DroppedRows int64  `json:"dropped_rows"`
	// Adopted is the head row of the remote's chain, AdoptedRows its length.
	Adopted     Hash  `json:"adopted"`
	AdoptedRows int64 `json:"adopted_rows"`
	// Head is the head row once the writer's rows were recorded again on
	// top of the remote's, Rows the chain's length then.
	Head Hash  `json:"head"`
	Rows int64 `json:"rows"`
}

// SpineSupersedeEntry resolves a divergence of one task: the writer took
// Remote's journal and ledger of the task as the truth, recorded its own
// rows the remote lacked again on top of them (Rerecorded rows), and
// supersedes its spine entries that sealed the rows it dropped (Entries).
type SpineSupersedeEntry struct {
	SpineHeader
	TaskID     string          `json:"task_id"`
	Remote     string          `json:"remote"`
	Journal    SupersededChain `json:"journal"`
	Ledger     SupersededChain `json:"ledger"`
	Entries    []Hash          `json:"entries"`
	Rerecorded int64           `json:"rerecorded"`
}

// SpineEntry is a decoded spine entry of any kind, with its identity.
type SpineEntry struct {
	Header    SpineHeader
	Artifact  *SpineArtifactEntry
	Seal      *SpineSealEntry
	Supersede *SpineSupersedeEntry
	Hash      Hash
	Bytes     []byte
}

// ParseSpineEntry parses canonical spine entry bytes.
func ParseSpineEntry(b []byte) (SpineEntry, error) {
	var buf [16]member
	ms, err := membersInto(b, buf[:0])
	if err != nil {
		return SpineEntry{}, err
	}
	kind := ""
	for _, m := range ms {
		if m.name == "kind" {
			if err := decodeExact(m.raw, &kind); err != nil {
				return SpineEntry{}, fmt.Errorf("spine entry kind: %w", err)
			}
		}
	}
	e := SpineEntry{Hash: Sum(b), Bytes: b}
	// The object is split once: its members are decoded into the entry
	// type its kind names, as decodeExact would after splitting it again.
	switch kind {
	case SpineArtifact:
		e.Artifact = &SpineArtifactEntry{}
		err = decodeStruct(b, ms, reflect.ValueOf(e.Artifact).Elem())
		e.Header = e.Artifact.SpineHeader
	case SpineJournalSeal:
		e.Seal = &SpineSealEntry{}
		err = decodeStruct(b, ms, reflect.ValueOf(e.Seal).Elem())
		e.Header = e.Seal.SpineHeader
	case SpineSupersede:
		e.Supersede = &SpineSupersedeEntry{}
		err = decodeStruct(b, ms, reflect.ValueOf(e.Supersede).Elem())
		e.Header = e.Supersede.SpineHeader
		if err == nil {
			err = e.Supersede.check()
		}
	default:
		return SpineEntry{}, fmt.Errorf("spine entry: unknown kind %q", kind)
	}
	if err != nil {
		return SpineEntry{}, fmt.Errorf("spine %s entry: %w", kind, err)
	}
	if e.Header.V != Version {
		return SpineEntry{}, fmt.Errorf("spine entry: unsupported version %d", e.Header.V)
	}
	return e, nil
}

// check refuses a supersede entry whose counts cannot be a chain's.
func (s *SpineSupersedeEntry) check() error {
	if s.TaskID == "" || s.Entries == nil {
		return errors.New("supersede entry: missing task_id or entries")
	}
	for _, c := range []SupersededChain{s.Journal, s.Ledger} {
		if c.Dropped == nil || c.DroppedRows < int64(len(c.Dropped)) || c.AdoptedRows < 0 || c.Rows < c.AdoptedRows ||
			(c.AdoptedRows == 0) != (c.Adopted == "") || (c.Rows == 0) != (c.Head == "") {
			return errors.New("supersede entry: a chain's counts do not fit its rows")
		}
	}
	return nil
}

// Audit events that are not ledger transitions.
const (
	EventArtifactPosted  = "artifact.posted"
	EventArtifactRefused = "artifact.refused"
	EventWriterKey       = "writer.key_published"
	// EventTaskAdopted mirrors a supersede spine entry (resource: its hash).
	EventTaskAdopted = "task.adopted"
)

// Anchor is the record of an anchors commit: the commit keeps the project
// commits the journal row Row of task TaskID names reachable (they are its
// parents after the first, which is the writer's previous anchor). Seq
// counts the writer's anchors from 0.
type Anchor struct {
	V      int    `json:"v"`
	Writer string `json:"writer"`
	Seq    int64  `json:"seq"`
	TaskID string `json:"task_id"`
	Row    Hash   `json:"row"`
}

// ParseAnchor parses canonical anchor record bytes.
func ParseAnchor(b []byte) (Anchor, error) {
	var a Anchor
	if err := decodeExact(b, &a); err != nil {
		if errors.Is(err, ErrNotCanonical) {
			return Anchor{}, err
		}
		return Anchor{}, fmt.Errorf("anchor: %w", err)
	}
	if a.V != Version {
		return Anchor{}, fmt.Errorf("anchor: unsupported version %d", a.V)
	}
	if a.Seq < 0 || a.TaskID == "" || a.Writer == "" {
		return Anchor{}, errors.New("anchor: missing writer or task_id, or a negative seq")
	}
	return a, nil
}

// Archive is the record of an archive commit (docs/archive.md): commit
// number Seq (from 0) of Writer's archive of ended tasks, whose tree holds
// every task the writer archived. Prev is the Hash of the previous archive
// commit's record; the first's is Genesis(repository id, ChainArchive,
// Writer), which binds the chain to its repository. Add lists the tasks
// this commit archives (or archives again at other heads), Remove those it
// drops (a reopened task its ref now holds); both sorted by task id, no
// task twice, each list non-nil.
type Archive struct {
	V      int            `json:"v"`
	Writer string         `json:"writer"`
	Seq    int64          `json:"seq"`
	Prev   Hash           `json:"prev"`
	Add    []ArchivedTask `json:"add"`
	Remove []string       `json:"remove"`
}

// ArchivedTask is one task an archive commit adds: the heads of its journal
// and ledger (commit ids, lowercase hex) and how many rows each holds.
type ArchivedTask struct {
	TaskID      string `json:"task_id"`
	Journal     string `json:"journal"`
	JournalRows int64  `json:"journal_rows"`
	Ledger      string `json:"ledger"`
	LedgerRows  int64  `json:"ledger_rows"`
}

// ParseArchive parses canonical archive record bytes and checks its shape:
// version, writer, seq, the lists sorted with no task twice, heads of 40
// lowercase hex digits and row counts of at least one. That Prev, the heads
// and the commit's tree agree is the verifier's to check.
func ParseArchive(b []byte) (Archive, error) {
	var a Archive
	if err := decodeExact(b, &a); err != nil {
		if errors.Is(err, ErrNotCanonical) {
			return Archive{}, err
		}
		return Archive{}, fmt.Errorf("archive record: %w", err)
	}
	if a.V != Version {
		return Archive{}, fmt.Errorf("archive record: unsupported version %d", a.V)
	}
	if a.Seq < 0 || a.Writer == "" || a.Add == nil || a.Remove == nil {
		return Archive{}, errors.New("archive record: missing writer, add or remove, or a negative seq")
	}
	seen := map[string]bool{}
	for i, t := range a.Add {
		if t.TaskID == "" || seen[t.TaskID] || i > 0 && t.TaskID < a.Add[i-1].TaskID {
			return Archive{}, fmt.Errorf("archive record: add: task %q empty, repeated or out of order", t.TaskID)
		}
		seen[t.TaskID] = true
		if !isCommitHex(t.Journal) || !isCommitHex(t.Ledger) || t.JournalRows < 1 || t.LedgerRows < 1 {
			return Archive{}, fmt.Errorf("archive record: task %q: heads must be 40 lowercase hex digits and row counts at least 1", t.TaskID)
		}
	}
	for i, id := range a.Remove {
		if id == "" || seen[id] || i > 0 && id < a.Remove[i-1] {
			return Archive{}, fmt.Errorf("archive record: remove: task %q empty, repeated, out of order or also added", id)
		}
		seen[id] = true
	}
	return a, nil
}

func isCommitHex(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != strings.Repeat("0", 40)
}

// LogCheckpoint is the record of a checkpoints commit: the writer's log
// checkpoint number Seq (from 0), of Size spine entries. The commit's tree
// holds the signed checkpoint with its cosignatures (CheckpointFile).
type LogCheckpoint struct {
	V      int    `json:"v"`
	Writer string `json:"writer"`
	Seq    int64  `json:"seq"`
	Size   int64  `json:"size"`
}

// CheckpointFile is the one file of a checkpoints commit's tree: the
// signed note, the writer's signature first, then the cosignatures.
const CheckpointFile = "checkpoint"

// ParseLogCheckpoint parses canonical log checkpoint record bytes.
func ParseLogCheckpoint(b []byte) (LogCheckpoint, error) {
	var a LogCheckpoint
	if err := decodeExact(b, &a); err != nil {
		if errors.Is(err, ErrNotCanonical) {
			return LogCheckpoint{}, err
		}
		return LogCheckpoint{}, fmt.Errorf("log checkpoint: %w", err)
	}
	if a.V != Version {
		return LogCheckpoint{}, fmt.Errorf("log checkpoint: unsupported version %d", a.V)
	}
	if a.Seq < 0 || a.Size < 0 || a.Writer == "" {
		return LogCheckpoint{}, errors.New("log checkpoint: missing writer, or a negative seq or size")
	}
	return a, nil
}

// Refusal reasons recorded with artifact.refused.
const (
	ReasonUnclaimedTask       = "unclaimed_task"
	ReasonClaimScopeViolation = "claim_scope_violation"
	// ReasonClaimUnproven: the task's ledger holds rows no trusted writer
	// signed, so no claim in it can be honoured.
	ReasonClaimUnproven = "claim_unproven"
)

// AuditEntry is one entry of a writer's HMAC audit mirror. HMAC is computed
// over the canonical bytes of the entry with the hmac field removed.
type AuditEntry struct {
	V        int             `json:"v"`
	Writer   string          `json:"writer"`
	Seq      int64           `json:"seq"`
	Event    string          `json:"event"`
	Actor    string          `json:"actor"`
	TaskID   string          `json:"task_id"`
	Resource string          `json:"resource"`
	Details  json.RawMessage `json:"details"`
	PrevHMAC string          `json:"prev_hmac"`
	HMAC     string          `json:"hmac"`
}

// auditUnsigned is AuditEntry without its hmac: the bytes the HMAC covers.
type auditUnsigned struct {
	V        int             `json:"v"`
	Writer   string          `json:"writer"`
	Seq      int64           `json:"seq"`
	Event    string          `json:"event"`
	Actor    string          `json:"actor"`
	TaskID   string          `json:"task_id"`
	Resource string          `json:"resource"`
	Details  json.RawMessage `json:"details"`
	PrevHMAC string          `json:"prev_hmac"`
}

// MACBytes returns the canonical bytes the entry's HMAC is computed over.
func (a AuditEntry) MACBytes() []byte {
	return MustCanonical(auditUnsigned{a.V, a.Writer, a.Seq, a.Event, a.Actor, a.TaskID, a.Resource, a.Details, a.PrevHMAC})
}

// Bytes returns the canonical bytes of the whole entry, hmac included.
func (a AuditEntry) Bytes() []byte { return MustCanonical(a) }

// ParseAuditEntry parses canonical audit entry bytes.
func ParseAuditEntry(b []byte) (AuditEntry, error) {
	var a AuditEntry
	if err := decodeExact(b, &a); err != nil {
		if errors.Is(err, ErrNotCanonical) {
			return AuditEntry{}, err
		}
		return AuditEntry{}, fmt.Errorf("audit entry: %w", err)
	}
	if a.V != Version {
		return AuditEntry{}, fmt.Errorf("audit entry: unsupported version %d", a.V)
	}
	return a, nil
}

// Message builds a chain commit message: a one-line summary, a blank line and
// the canonical record on one line.
func Message(summary string, canonical []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(summary) + len(canonical) + 3)
	b.WriteString(summary)
	b.WriteString("\n\n")
	b.Write(canonical)
	b.WriteByte('\n')
	return b.Bytes()
}

// ErrNoRecord reports a chain commit message that carries no record.
var ErrNoRecord = errors.New("commit message carries no record")

// RecordFromMessage returns the canonical record bytes a chain commit message
// carries.
func RecordFromMessage(msg []byte) ([]byte, error) {
	i := bytes.Index(msg, []byte("\n\n"))
	if i < 0 {
		return nil, ErrNoRecord
	}
	body := msg[i+2:]
	if len(body) < 2 || body[len(body)-1] != '\n' || bytes.IndexByte(body[:len(body)-1], '\n') >= 0 {
		return nil, ErrNoRecord
	}
	return body[:len(body)-1], nil
}
