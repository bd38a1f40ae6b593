package bernstein

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/ident"
	"github.com/bernstein/bernstein/internal/taskops"
	"github.com/bernstein/bernstein/internal/txn"
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
	// Tampered are the warnings of the writer's own spine or audit mirror
	// found holding what the writer could not verify as its own (commits
	// appended with plain git): the post was built on the writer's last
	// verified entry, over them (docs/trust.md). Empty when none.
	Tampered []string `json:"tampered,omitempty"`
}

// RefusedError is a post refused for want of the task's claim. The refusal is
// recorded in the audit mirror; nothing else is written.
type RefusedError = taskops.RefusedError

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
	var tx *txn.Tx // the transaction that ran last: the one committed
	res, err := s.w.Submit(func(t *txn.Tx) (any, error) {
		tx = t
		return taskops.PostArtifact(t, postOf(req, payload))
	})
	if err != nil {
		return nil, err
	}
	r := postResult(req, res.(*taskops.Posted))
	r.Tampered = tx.ForgedOwnChains()
	return r, nil
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
// before it (two posts of one key make two versions). Each posted
// receipt's Tampered names, as Post's does, the writer's own spine or audit
// mirror the batch found forged and built past. The error is non-nil only
// when the write failed as a whole, and then nothing was written.
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
	var tx *txn.Tx // the transaction that ran last: the one committed
	res, err := s.w.Submit(func(t *txn.Tx) (any, error) {
		tx = t
		outs := make([]PostOutcome, len(reqs))
		for i, req := range reqs {
			r, err := t.Run(func(t *txn.Tx) (any, error) { return taskops.PostArtifact(t, postOf(req, payloads[i])) })
			outs[i].Err = err
			if err == nil {
				outs[i].Result = postResult(req, r.(*taskops.Posted))
			}
		}
		return outs, nil
	})
	if err != nil {
		return nil, err
	}
	// Every post of the batch was built on the same heads: each receipt
	// carries the warnings of the writer's own chains the batch built
	// past, and of the identity it moved back, as Post's does.
	forged := tx.ForgedOwnChains()
	for i, o := range res.([]PostOutcome) {
		if o.Result != nil {
			res.([]PostOutcome)[i].Result.Tampered = forged
		}
	}
	return res.([]PostOutcome), nil
}

// postOf is the transaction's view of a checked post.
func postOf(req PostRequest, payload []byte) taskops.Post {
	return taskops.Post{Task: req.Task, Key: req.Key, Agent: req.Agent, ClaimToken: req.ClaimToken,
		Type: req.Payload.Type, LinkKind: req.Payload.LinkKind, Payload: payload}
}

// postResult is the receipt of what a post wrote.
func postResult(req PostRequest, p *taskops.Posted) *PostResult {
	return &PostResult{
		Task: req.Task, Key: req.Key, Version: p.Version, Type: p.ArtifactType, LinkKind: p.LinkKind,
		ContentHash: p.ContentHash, Blob: p.Blob, Size: p.Size, SpineEntryHash: p.SpineEntryHash,
		PrevVersionHash: p.PrevVersionHash, JournalIndex: p.JournalIndex, Writer: p.Writer, Agent: req.Agent,
	}
}

// ArtifactPath is where version n of key sits in the tree of the journal
// commit that posts it.
func ArtifactPath(key string, version int64) string { return record.ArtifactPath(key, version) }
