package taskops

import (
	"fmt"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// Post is one artifact post, its input checked: the payload is canonical.
type Post struct {
	Task, Key, Agent, ClaimToken string
	Type, LinkKind               string // the payload's artifact type and link kind
	Payload                      []byte
}

// Posted is what a post wrote: its journal row's data and index, and the
// writer that sealed it in its spine.
type Posted struct {
	record.ArtifactPosted
	JournalIndex int64
	Writer       string
}

// RefusedError is a post refused for want of the task's claim. The refusal
// is recorded in the audit mirror; nothing else is written.
type RefusedError struct {
	Task   string
	Agent  string
	Reason string // record.ReasonUnclaimedTask, ReasonClaimScopeViolation or ReasonClaimUnproven
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused (%s): %s", e.Reason, e.Detail)
}

type refusalDetails struct {
	Reason       string `json:"reason"`
	Key          string `json:"key"`
	ArtifactType string `json:"artifact_type"`
}

type postedDetails struct {
	Key          string      `json:"key"`
	Version      int64       `json:"version"`
	ContentHash  record.Hash `json:"content_hash"`
	JournalIndex int64       `json:"journal_index"`
}

// PostArtifact stores an artifact version for the holder of the task's
// claim: a spine entry, a journal row whose commit holds the payload, and
// their audit mirror. A post without the claim (or on a ledger with rows
// that are not proven) is a *RefusedError, recorded in the audit mirror
// (txn.Keep).
func PostArtifact(t *txn.Tx, p Post) (*Posted, error) {
	lc, err := t.LedgerChain(p.Task)
	if err != nil {
		return nil, err
	}
	reason, detail := ledger.CheckClaim(p.Task, lc.Ledger, p.Agent, p.ClaimToken)
	if !lc.LedgerProof.Whole() {
		f := lc.LedgerProof.Faults[0]
		reason = record.ReasonClaimUnproven
		detail = heads.FaultPhrase("ledger", p.Task, f) + ": no claim in it is honoured until it is repaired"
	}
	if reason != "" {
		d := record.MustCanonical(refusalDetails{Reason: reason, Key: p.Key, ArtifactType: p.Type})
		if err := t.AppendAudit(record.EventArtifactRefused, p.Agent, p.Task, "bernstein://"+p.Task+"/"+p.Key, d); err != nil {
			return nil, err
		}
		return nil, txn.Keep(&RefusedError{Task: p.Task, Agent: p.Agent, Reason: reason, Detail: detail})
	}
	return appendPost(t, p)
}

// appendPost stores an artifact version whose post was allowed: the next
// version of its key, sealed by a spine entry, with its journal row and
// audit mirror entry.
func appendPost(t *txn.Tx, p Post) (*Posted, error) {
	jc, err := t.JournalChain(p.Task)
	if err != nil {
		return nil, err
	}
	prev := jc.Journal.Keys[p.Key]
	version := prev.Version + 1
	index, prevRow, err := t.NextJournalRow(p.Task)
	if err != nil {
		return nil, err
	}
	contentHash := record.Sum(p.Payload)
	hdr, err := t.SpineHeader(record.SpineArtifact)
	if err != nil {
		return nil, err
	}
	entry := record.SpineArtifactEntry{
		SpineHeader: hdr, TaskID: p.Task, Key: p.Key, Version: version,
		ContentHash: contentHash, PrevVersionHash: prev.SpineHash, JournalIndex: index, Actor: p.Agent,
	}
	spineHash, err := t.AppendSpine(entry, fmt.Sprintf("artifact %s/%s v%d", p.Task, p.Key, version), nil)
	if err != nil {
		return nil, err
	}
	data := record.ArtifactPosted{
		Key: p.Key, ArtifactType: p.Type, Version: version, ContentHash: contentHash,
		Blob: gitstore.HashObject(gitstore.TypeBlob, p.Payload).String(), Size: int64(len(p.Payload)), LinkKind: p.LinkKind,
		PrevVersionHash: prev.SpineHash, SpineEntryHash: spineHash,
	}
	row, err := record.NewRow(record.KindArtifactPosted, p.Task, index, prevRow, p.Agent, data)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{record.ArtifactPath(p.Key, version): p.Payload}
	if _, err := t.AppendJournal(p.Task, row, fmt.Sprintf("%s %s v%d", record.KindArtifactPosted, p.Key, version), files); err != nil {
		return nil, err
	}
	details := record.MustCanonical(postedDetails{Key: p.Key, Version: version, ContentHash: contentHash, JournalIndex: index})
	if err := t.AppendAudit(record.EventArtifactPosted, p.Agent, p.Task, string(spineHash), details); err != nil {
		return nil, err
	}
	return &Posted{ArtifactPosted: data, JournalIndex: index, Writer: t.Identity().Writer}, nil
}
