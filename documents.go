package bernstein

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The documents every surface prints: 'bernstein ... --output-json' writes
// them and the HTTP API (docs/http.md) serves them, so that there is one
// definition of each, not one per surface. A change of a field here changes
// the CLI's output and the API's at once (and its OpenAPI description in
// server/, which the server tests check against these documents).

// TaskListDoc is the document of 'task list --output-json' and of
// GET /api/v1/tasks: each task with its integrity (listing.go).
type TaskListDoc struct {
	Tasks []TaskListEntry `json:"tasks"`
	// NextCursor, on a page that is not the last, is the cursor of the
	// next page (absent on the last page and on an unpaged list).
	NextCursor string `json:"next_cursor,omitempty"`
	// ArchivesReadPast are the archive refs the list's reads could not
	// read as archives and read past (docs/archive.md, Reading): the
	// tasks only they hold are not listed. [] when there are none.
	ArchivesReadPast []ArchiveReadPastDoc `json:"archives_read_past"`
}

// ArchiveReadPastDoc is an archive ref a task list read past: the ref,
// its value, why it cannot be read as an archive, and the message that
// says so ('<ref> (at <value>) cannot be read as an archive: <why>').
type ArchiveReadPastDoc struct {
	Ref     string `json:"ref"`
	At      string `json:"at"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// NewTaskListDoc lists tasks ([] for none, never null), with the archive
// refs the list read past (nil: none).
func NewTaskListDoc(tasks []TaskListEntry, readPast []refs.BadRef) TaskListDoc {
	if tasks == nil {
		tasks = []TaskListEntry{}
	}
	doc := TaskListDoc{Tasks: tasks, ArchivesReadPast: make([]ArchiveReadPastDoc, 0, len(readPast))}
	for _, b := range readPast {
		doc.ArchivesReadPast = append(doc.ArchivesReadPast, ArchiveReadPastDoc{Ref: b.Ref, At: b.At.String(), Reason: b.Reason, Message: b.String()})
	}
	return doc
}

// ArchiveReadPastWarning is what a task list says of an archive ref it
// read past (the CLI on stderr, the task list page in a notice).
func ArchiveReadPastWarning(b refs.BadRef) string {
	return b.String() + "; the tasks only it holds are not listed (run 'bernstein audit verify')"
}

// ArtifactVersionDoc is one artifact version as 'artifact list <task>'
// reports it: where it sits and what verification found.
type ArtifactVersionDoc struct {
	Key             string `json:"key"`
	Version         int64  `json:"version"`
	Type            string `json:"type"`
	LinkKind        string `json:"link_kind"`
	ContentHash     string `json:"content_hash"`
	SpineEntryHash  string `json:"spine_entry_hash"`
	PrevVersionHash string `json:"prev_version_hash"`
	JournalIndex    int64  `json:"journal_index"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	Actor           string `json:"actor"`
	// Writer is whose spine entry seals the version, or (verification
	// having stopped before the entry) whom the row's commit names;
	// WriterSource is "spine_entry", "commit" or "" (no writer known).
	Writer       string `json:"writer"`
	WriterSource string `json:"writer_source"`
	// Commit is the journal commit of the version's row: `git show
	// <commit>:artifacts/<key>/v<version>.json` shows the payload.
	Commit string `json:"commit"`
}

// NewArtifactVersionDoc describes one verified (or not) version.
func NewArtifactVersionDoc(v verify.Version) ArtifactVersionDoc {
	return ArtifactVersionDoc{v.Key, v.Version, v.Type, v.LinkKind, string(v.ContentHash), string(v.SpineEntryHash),
		string(v.PrevVersionHash), v.JournalIndex, v.State, v.Reason, v.Actor, v.Writer, v.WriterSource, v.Commit.String()}
}

// ArtifactListDoc is the document of 'artifact list <task> --output-json'
// and of GET /api/v1/tasks/{id}/artifacts: every version of every key of
// the task, in journal order, each with its verify state.
type ArtifactListDoc struct {
	Task            string               `json:"task"`
	Verified        bool                 `json:"verified"`
	Reason          string               `json:"reason"`
	JournalIdentity string               `json:"journal_identity"`
	IdentityReason  string               `json:"journal_identity_reason"`
	Artifacts       []ArtifactVersionDoc `json:"artifacts"`
	Failures        []verify.Failure     `json:"failures"`
}

// NewArtifactListDoc is the list document of a task's verification.
func NewArtifactListDoc(rep *verify.TaskReport) ArtifactListDoc {
	doc := ArtifactListDoc{Task: rep.Task, Verified: rep.Verified(), Reason: rep.Reason(), JournalIdentity: rep.JournalIdentity,
		IdentityReason: rep.IdentityReason, Artifacts: []ArtifactVersionDoc{}, Failures: rep.Failures}
	for _, v := range rep.Versions {
		doc.Artifacts = append(doc.Artifacts, NewArtifactVersionDoc(v))
	}
	return doc
}

// ProductionsDoc is the document of 'artifact list --output-json' without
// a task and of GET /api/v1/artifacts: the artifact keys the local lineage
// spines carry.
type ProductionsDoc struct {
	Artifacts []verify.Production `json:"artifacts"`
	// NextCursor is as TaskListDoc's.
	NextCursor string `json:"next_cursor,omitempty"`
}

// NewProductionsDoc lists productions ([] for none, never null).
func NewProductionsDoc(ps []verify.Production) ProductionsDoc {
	if ps == nil {
		ps = []verify.Production{}
	}
	return ProductionsDoc{Artifacts: ps}
}

// ArtifactShowDoc is the document of 'artifact show --output-json' and of
// GET /api/v1/tasks/{id}/artifacts/{key}: one version, its payload when it
// may be shown (else null, with content_withheld saying why), and the key's
// history oldest first.
type ArtifactShowDoc struct {
	ArtifactVersionDoc
	Task            string               `json:"task"`
	JournalIdentity string               `json:"journal_identity"`
	Payload         *artifact.Payload    `json:"payload"`
	Withheld        string               `json:"content_withheld"`
	History         []ArtifactVersionDoc `json:"history"`

	// Shown is the version the document shows.
	Shown *verify.Version `json:"-"`
	// PassedOver are the newer versions passed over for it (unverifiable
	// here: see verify.TaskReport.Shown); a surface names them.
	PassedOver []verify.Version `json:"-"`
}

// ShowSelection says which version of a key a show document shows.
type ShowSelection struct {
	Key string
	// Version is the version asked for; nil shows the default one
	// (verify.TaskReport.Shown: the latest, or the latest verified when the
	// latest was written by a writer this reader does not trust).
	Version *int64
	// Strict withholds the content of any version that is not verified.
	Strict bool
}

// ErrUnknownArtifact reports a key, or a version of it, that the task does
// not hold.
var ErrUnknownArtifact = errors.New("unknown artifact")

// UnknownArtifactError names the key (and version) a task does not hold.
type UnknownArtifactError struct {
	Task, Key string
	// Version is the version asked for; 0 when none was.
	Version int64
	// Pinned is set when a version was asked for.
	Pinned bool
}

func (e *UnknownArtifactError) Error() string {
	if e.Pinned {
		return fmt.Sprintf("task %s has no version %d of %s", e.Task, e.Version, e.Key)
	}
	return fmt.Sprintf("task %s has no artifact %s", e.Task, e.Key)
}

// Is makes errors.Is(err, ErrUnknownArtifact) hold.
func (e *UnknownArtifactError) Is(target error) bool { return target == ErrUnknownArtifact }

// NewArtifactShowDoc builds the show document of one version of a key from
// a task's verification. The payload is there only when the version
// re-verified and its journal may be trusted to hold it (verify.TaskReport.
// Content); otherwise it is null and Withheld says why. A key or version the
// task does not hold is an *UnknownArtifactError; a task whose journal ref
// cannot be read as one, a *refs.BadRefError.
func NewArtifactShowDoc(rep *verify.TaskReport, sel ShowSelection) (*ArtifactShowDoc, error) {
	if err := rep.UnreadableError(); err != nil {
		// The journal ref cannot be read as one: the task is tampered,
		// whatever key is asked for (docs/trust.md, Refs that cannot be
		// read).
		return nil, err
	}
	var v *verify.Version
	var passedOver []verify.Version
	if sel.Version != nil {
		if v = rep.Find(sel.Key, *sel.Version); v == nil {
			return nil, &UnknownArtifactError{Task: rep.Task, Key: sel.Key, Version: *sel.Version, Pinned: true}
		}
	} else if v, passedOver = rep.Shown(sel.Key); v == nil {
		return nil, &UnknownArtifactError{Task: rep.Task, Key: sel.Key}
	}
	doc := &ArtifactShowDoc{ArtifactVersionDoc: NewArtifactVersionDoc(*v), Task: rep.Task, JournalIdentity: rep.JournalIdentity,
		Shown: v, PassedOver: passedOver}
	for _, h := range rep.Versions {
		if h.Key == sel.Key {
			doc.History = append(doc.History, NewArtifactVersionDoc(h))
		}
	}
	content, withheld := rep.Content(v)
	if sel.Strict && v.State != verify.Verified && content != nil {
		content, withheld = nil, "not verified ("+v.State+": "+v.Reason+") and --strict shows only verified versions"
	}
	doc.Withheld = withheld
	if content != nil {
		p, err := artifact.Parse(content)
		if err != nil {
			return doc, err
		}
		doc.Payload = &p
	}
	return doc, nil
}

// JournalRowDoc is one journal row as GET /api/v1/tasks/{id}/journal
// gives it: the row's fields, its hash and commit, the proof of its commit
// (verified, unverifiable or tampered: docs/trust.md) and the writer the
// commit names, and its run position: the checkpoint recorded before it
// (null before the first). The field names are those of the event stream's
// row events.
type JournalRowDoc struct {
	JournalIndex int64           `json:"journal_index"`
	Kind         string          `json:"kind"`
	Actor        string          `json:"actor"`
	RowHash      record.Hash     `json:"row_hash"`
	Prev         record.Hash     `json:"prev"`
	Commit       string          `json:"commit"`
	Proof        string          `json:"proof"`
	Writer       string          `json:"writer"`
	Data         json.RawMessage `json:"data"`
	RunPosition  *RunPosition    `json:"run_position"`
}

// JournalDoc is a page of a task's journal: the rows after index After,
// oldest first. NextAfter is the After of the next page, null when this
// page reaches the journal's end.
type JournalDoc struct {
	Task        string          `json:"task"`
	After       int64           `json:"after"`
	JournalRows int64           `json:"journal_rows"`
	Rows        []JournalRowDoc `json:"rows"`
	NextAfter   *int64          `json:"next_after"`
}

// NewJournalDoc pages rows (a whole journal, oldest first): at most limit
// rows after index after (-1 for the first page).
func NewJournalDoc(task string, rows []FeedRow, after int64, limit int) JournalDoc {
	doc := JournalDoc{Task: task, After: after, JournalRows: int64(len(rows)), Rows: []JournalRowDoc{}}
	start := max(after+1, 0)
	for i := start; i < int64(len(rows)); i++ {
		if len(doc.Rows) == limit {
			next := i - 1
			doc.NextAfter = &next
			break
		}
		r := rows[i]
		doc.Rows = append(doc.Rows, JournalRowDoc{JournalIndex: r.Index, Kind: r.Row.Kind, Actor: r.Row.Actor, RowHash: r.Hash,
			Prev: r.Row.Prev, Commit: r.Commit.String(), Proof: r.Proof, Writer: r.Writer, Data: r.Row.Data, RunPosition: r.At})
	}
	return doc
}
