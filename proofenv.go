package bernstein

import (
	"fmt"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// proofEnv is what proving rows needs: the trusted keys, the published ones,
// the objects.
type proofEnv struct {
	*verify.Env
	// proofVersion names what a row's proof depends on besides the row: the
	// published keys (their refs' heads) and the trust set (pins, the
	// --allowed-signers file, the local writer). Folds remembered under one
	// version are not reused under another, so a pin or unpin takes effect
	// at once, also in a long-running server.
	proofVersion gitstore.Oid
}

// VerifyEnv assembles what verification reads: the refs of view (one
// consistent snapshot), the pinned keys, the published keys.
func (s *Store) VerifyEnv(view refs.Source) (*verify.Env, error) {
	env, err := s.proofEnv(view)
	if err != nil {
		return nil, err
	}
	return env.Env, nil
}

// proofEnv reads the published keys as view has them; they are parsed once
// per keys commit.
func (s *Store) proofEnv(view refs.Source) (*proofEnv, error) {
	trust, err := s.Trust()
	if err != nil {
		return nil, err
	}
	head, err := keysVersion(view)
	if err != nil {
		return nil, fmt.Errorf("published keys: %w", err)
	}
	s.pubMu.Lock()
	pub, ok := s.pub[head]
	s.pubMu.Unlock()
	if !ok {
		published, err := s.publishedKeys(view)
		if err != nil {
			return nil, fmt.Errorf("published keys: %w", err)
		}
		pub = map[string]ssh.PublicKey{}
		for w, line := range published {
			k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
			if err != nil {
				continue // a malformed published key is as good as none
			}
			pub[w] = k
		}
		s.pubMu.Lock()
		s.pub = map[gitstore.Oid]map[string]ssh.PublicKey{head: pub}
		s.pubMu.Unlock()
	}
	version := gitstore.HashObject(gitstore.TypeBlob, []byte(head.String()+"\n"+trust.Fingerprint()))
	return &proofEnv{Env: &verify.Env{Objects: s.objects, Refs: view, Trust: trust, Published: pub}, proofVersion: version}, nil
}
