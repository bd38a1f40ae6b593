package bernstein

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/heads"
	"github.com/bernstein/bernstein/internal/ident"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// PostRequest is one artifact post by the holder of a task's claim.
type PostRequest struct {
	Task       string
	Key        string
	Agent      string
	ClaimToken string
	Payload    artifact.Payload
}

// PostResult is the receipt of a post.
type PostResult struct {
	Task            string      `json:"task"`
	Key             string      `json:"key"`
	Version         int64       `json:"version"`
	Type            string      `json:"type"`
	LinkKind        string      `json:"link_kind"`
	ContentHash     record.Hash `json:"content_hash"`
	Blob            string      `json:"blob"`
	Size            int64       `json:"size"`
	SpineEntryHash  record.Hash `json:"spine_entry_hash"`
	PrevVersionHash record.Hash `json:"prev_version_hash"`
	JournalIndex    int64       `json:"journal_index"`
	Writer          string      `json:"writer"`
	Agent           string      `json:"agent"`
}

// RefusedError is a post refused for want of the task's claim. The refusal is
// recorded in the audit mirror; nothing else is written.
type RefusedError struct {
	Task   string
	Agent  string
	Reason string // record.ReasonUnclaimedTask, ReasonClaimScopeViolation or ReasonClaimUnproven
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused (%s): %s", e.Reason, e.Detail)
}

func (e *RefusedError) keepChanges() bool { return true }

// ValidateAgent checks an agent name.
func ValidateAgent(a string) error {
	if a == "" {
		return &artifact.InputError{Field: "agent", Msg: "is empty: pass --agent or set BERNSTEIN_AGENT"}
	}
	if !ident.Match(a, 128, "_.@:+-", false) {
		return &artifact.InputError{Field: "agent", Msg: fmt.Sprintf("%q is invalid: use 1 to 128 of letters, digits and _ . @ : + - starting with a letter or digit", a)}
	}
	return nil
}

func validateTask(task string) error {
	if err := refs.ValidateTaskID(task); err != nil {
		return &artifact.InputError{Field: "task_id", Msg: strings.TrimPrefix(err.Error(), "task id ")}
	}
	return nil
}

// TokenHash is the ledger's record of a claim token.
func TokenHash(token string) record.Hash { return ledger.TokenHash(token) }

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

// Post stores an artifact version for the holder of the task's claim. Bad
// input is refused before anything is written; a post without the claim is
// refused and the refusal is recorded in the audit mirror.
func (s *Store) Post(req PostRequest) (*PostResult, error) {
	return s.postAs(req, true)
}

// PostAsCaller is Post for a caller whose identity a transport established
// (the MCP server's agent, or the agent a bearer claim token stands for)
// rather than flags a user typed. Such a caller may hold no claim token for
// the task at all: an empty ClaimToken is then not bad input but a post
// without the claim, refused as Post refuses one (unclaimed_task or
// claim_scope_violation) and recorded in the audit mirror with the caller
// and the reason. Nothing else is written.
func (s *Store) PostAsCaller(req PostRequest) (*PostResult, error) {
	return s.postAs(req, false)
}

func (s *Store) postAs(req PostRequest, needToken bool) (*PostResult, error) {
	payload, err := checkPost(req, needToken)
	if err != nil {
		return nil, err
	}
	// An empty token's hash matches no claim: every claim token is random.
	res, err := s.submit(func(t *tx) (any, error) { return t.post(req, payload) })
	if err != nil {
		return nil, err
	}
	return res.(*PostResult), nil
}

// checkPost validates a post's input and returns its canonical payload.
func checkPost(req PostRequest, needToken bool) ([]byte, error) {
	if err := validateTask(req.Task); err != nil {
		return nil, err
	}
	if err := artifact.ValidateKey(req.Key); err != nil {
		return nil, err
	}
	if err := ValidateAgent(req.Agent); err != nil {
		return nil, err
	}
	if needToken && req.ClaimToken == "" {
		return nil, &artifact.InputError{Field: "claim_token", Msg: "is empty: pass --claim-token or set BERNSTEIN_CLAIM_TOKEN"}
	}
	if req.Payload.Type == artifact.TypeTable {
		// A CSV header loses a leading byte-order mark (artifact.TableFromCSV);
		// a name given as such that starts with one is refused rather than
		// changed: the mark is invisible, yet "\ufeffa" is not "a". Only new
		// posts are held to this: versions already stored still read.
		for i, c := range req.Payload.Columns {
			if strings.HasPrefix(c, "\ufeff") {
				return nil, &artifact.InputError{Field: fmt.Sprintf("columns[%d]", i), Msg: "starts with a byte-order mark (U+FEFF), which does not show but makes it another name: remove it"}
			}
		}
	}
	return req.Payload.Canonical()
}

// Limits of one PostBatch: the posts it holds, and their canonical payloads
// together (a batch is written as one pack, built in memory).
const (
	MaxBatchPosts = 10000
	MaxBatchBytes = 64 << 20
)

// PostOutcome is what became of one post of a batch: its receipt, or the
// error that stopped it. A *RefusedError is a post refused for want of the
// claim, recorded in the audit mirror as Post records it; any other error
// left nothing of that post written.
type PostOutcome struct {
	Result *PostResult
	Err    error
}

// BatchInputError is bad input in one post of a batch; nothing of the batch
// was written.
type BatchInputError struct {
	Index int   // the post's position in the batch, from 0
	Err   error // what is wrong (an *artifact.InputError names the field)
}

func (e *BatchInputError) Error() string { return fmt.Sprintf("post %d: %v", e.Index+1, e.Err) }
func (e *BatchInputError) Unwrap() error { return e.Err }

// PostBatch posts reqs, in order, as one write: one pack, one ref
// transaction, one round of syncs, so a crash leaves all of its posts or
// none, and a post acknowledged is durable. Every request is validated
// first: bad input in any of them (or a batch beyond MaxBatchPosts or
// MaxBatchBytes) writes nothing and is a *BatchInputError. Then each post
// is posted or refused on its own, as Post would do it, seeing the posts
// before it (two posts of one key make two versions). The error is non-nil
// only when the write failed as a whole, and then nothing was written.
func (s *Store) PostBatch(reqs []PostRequest) ([]PostOutcome, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if len(reqs) > MaxBatchPosts {
		return nil, &BatchInputError{Index: MaxBatchPosts, Err: &artifact.InputError{Field: "batch", Msg: fmt.Sprintf("holds more than %d posts: split it", MaxBatchPosts)}}
	}
	payloads := make([][]byte, len(reqs))
	total := 0
	for i, req := range reqs {
		p, err := checkPost(req, true)
		if err != nil {
			return nil, &BatchInputError{Index: i, Err: err}
		}
		if total += len(p); total > MaxBatchBytes {
			return nil, &BatchInputError{Index: i, Err: &artifact.InputError{Field: "batch", Msg: fmt.Sprintf("payloads add up to more than %d bytes: split it", MaxBatchBytes)}}
		}
		payloads[i] = p
	}
	res, err := s.submit(func(t *tx) (any, error) {
		outs := make([]PostOutcome, len(reqs))
		for i, req := range reqs {
			r, err := t.run(func(t *tx) (any, error) { return t.post(req, payloads[i]) })
			outs[i].Err = err
			if err == nil {
				outs[i].Result = r.(*PostResult)
			}
		}
		return outs, nil
	})
	if err != nil {
		return nil, err
	}
	return res.([]PostOutcome), nil
}

func (t *tx) post(req PostRequest, payload []byte) (*PostResult, error) {
	lc, err := t.ledgerChain(req.Task)
	if err != nil {
		return nil, err
	}
	reason, detail := ledger.CheckClaim(req.Task, lc.ledger, req.Agent, req.ClaimToken)
	if !lc.ledgerProof.Whole() {
		f := lc.ledgerProof.Faults[0]
		reason = record.ReasonClaimUnproven
		detail = heads.FaultPhrase("ledger", req.Task, f) + ": no claim in it is honoured until it is repaired"
	}
	if reason != "" {
		d := record.MustCanonical(refusalDetails{Reason: reason, Key: req.Key, ArtifactType: req.Payload.Type})
		if err := t.appendAudit(record.EventArtifactRefused, req.Agent, req.Task, "bernstein://"+req.Task+"/"+req.Key, d); err != nil {
			return nil, err
		}
		return nil, &RefusedError{Task: req.Task, Agent: req.Agent, Reason: reason, Detail: detail}
	}
	jc, err := t.journalChain(req.Task)
	if err != nil {
		return nil, err
	}
	prev := jc.journal.Keys[req.Key]
	version := prev.Version + 1
	index, prevRow, err := t.nextJournalRow(req.Task)
	if err != nil {
		return nil, err
	}
	contentHash := record.Sum(payload)
	hdr, err := t.spineHeader(record.SpineArtifact)
	if err != nil {
		return nil, err
	}
	entry := record.SpineArtifactEntry{
		SpineHeader: hdr, TaskID: req.Task, Key: req.Key, Version: version,
		ContentHash: contentHash, PrevVersionHash: prev.SpineHash, JournalIndex: index, Actor: req.Agent,
	}
	spineHash, err := t.appendSpine(entry, fmt.Sprintf("artifact %s/%s v%d", req.Task, req.Key, version), nil)
	if err != nil {
		return nil, err
	}
	blob := gitBlobID(payload)
	data := record.ArtifactPosted{
		Key: req.Key, ArtifactType: req.Payload.Type, Version: version, ContentHash: contentHash,
		Blob: blob, Size: int64(len(payload)), LinkKind: req.Payload.LinkKind,
		PrevVersionHash: prev.SpineHash, SpineEntryHash: spineHash,
	}
	row, err := record.NewRow(record.KindArtifactPosted, req.Task, index, prevRow, req.Agent, data)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{ArtifactPath(req.Key, version): payload}
	if _, err := t.appendJournal(req.Task, row, fmt.Sprintf("%s %s v%d", record.KindArtifactPosted, req.Key, version), files); err != nil {
		return nil, err
	}
	details := record.MustCanonical(postedDetails{Key: req.Key, Version: version, ContentHash: contentHash, JournalIndex: index})
	if err := t.appendAudit(record.EventArtifactPosted, req.Agent, req.Task, string(spineHash), details); err != nil {
		return nil, err
	}
	return &PostResult{
		Task: req.Task, Key: req.Key, Version: version, Type: req.Payload.Type, LinkKind: req.Payload.LinkKind,
		ContentHash: contentHash, Blob: blob, Size: int64(len(payload)), SpineEntryHash: spineHash,
		PrevVersionHash: prev.SpineHash, JournalIndex: index, Writer: t.id.Writer, Agent: req.Agent,
	}, nil
}

// ArtifactPath is where version n of key sits in the tree of the journal
// commit that posts it.
func ArtifactPath(key string, version int64) string { return record.ArtifactPath(key, version) }

func gitBlobID(b []byte) string {
	return gitstore.HashObject(gitstore.TypeBlob, b).String()
}
