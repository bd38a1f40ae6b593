package bernstein

import (
	"github.com/bernstein/bernstein/artifact"
)

// PostAsCaller is Post for a caller whose identity a transport established
// (the MCP server's agent, or the agent a bearer claim token stands for)
// rather than flags a user typed. Such a caller may hold no claim token for
// the task at all: an empty ClaimToken is then not bad input but a post
// without the claim, refused as Post refuses one (unclaimed_task or
// claim_scope_violation) and recorded in the audit mirror with the caller
// and the reason. Nothing else is written.
func (s *Store) PostAsCaller(req PostRequest) (*PostResult, error) {
	if req.ClaimToken != "" {
		return s.Post(req)
	}
	if err := validateTask(req.Task); err != nil {
		return nil, err
	}
	if err := artifact.ValidateKey(req.Key); err != nil {
		return nil, err
	}
	if err := ValidateAgent(req.Agent); err != nil {
		return nil, err
	}
	payload, err := req.Payload.Canonical()
	if err != nil {
		return nil, err
	}
	// The empty token's hash matches no claim: every claim token is random.
	res, err := s.submit(func(t *tx) (any, error) { return t.post(req, payload) })
	if err != nil {
		return nil, err
	}
	return res.(*PostResult), nil
}
