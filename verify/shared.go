package verify

import "github.com/bernstein/bernstein/gitstore"

// NewVerifierWith is NewVerifier over an index already built from env's
// spines (the same refs, the same trust), so that many tasks read from one
// snapshot share one walk of the spines.
func NewVerifierWith(env *Env, ix *SpineIndex) *Verifier {
	return &Verifier{Env: env, Spine: ix, trees: map[gitstore.Oid][]gitstore.TreeEntry{}}
}
