package ledger

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"github.com/bernstein/bernstein/record"
)

// TokenHash is the ledger's record of a claim token.
func TokenHash(token string) record.Hash {
	s := sha256.Sum256([]byte(token))
	return record.Hash(record.HashPrefix + hex.EncodeToString(s[:]))
}

// CheckClaim decides whether agent holding token may post to the task
// whose ledger state is st (nil: the task does not exist): "" reason means
// allowed, else a record.Reason* and what it means.
func CheckClaim(task string, st *State, agent, token string) (reason, detail string) {
	if st == nil {
		return record.ReasonUnclaimedTask, fmt.Sprintf("task %s does not exist", task)
	}
	if st.Claim == nil {
		return record.ReasonUnclaimedTask, fmt.Sprintf("task %s has no live claim (it is %s)", task, st.Phase)
	}
	if st.Claim.Agent != agent {
		return record.ReasonClaimScopeViolation, fmt.Sprintf("task %s is claimed by another agent, not %s", task, agent)
	}
	want := TokenHash(token)
	if subtle.ConstantTimeCompare([]byte(want), []byte(st.Claim.TokenSHA256)) != 1 {
		return record.ReasonClaimScopeViolation, fmt.Sprintf("the claim token does not match the live claim of %s on task %s", agent, task)
	}
	return "", ""
}
