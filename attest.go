package bernstein

import (
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/attestation"
	"github.com/bernstein/bernstein/verify"
)

// Attestations (internal/attestation; docs/attest.md): signed in-toto
// statements about what this host verified.

// ErrNotAttestable reports a version or journal that is not verified here,
// which bernstein never attests.
var ErrNotAttestable = attestation.ErrNotAttestable

// Attestation is one signed in-toto statement.
type Attestation = attestation.Attestation

// attestRead verifies task and folds it from one snapshot.
func (s *Store) attestRead(task string) (*attestation.Read, error) {
	view, v, rep, err := s.verifyTask(task)
	if err != nil {
		return nil, err
	}
	f, err := s.folds.Task(view, task)
	if err != nil {
		return nil, err
	}
	return &attestation.Read{Report: rep, Verifier: v, Fold: f}, nil
}

// AttestArtifact signs an in-toto statement about version (0: the latest)
// of task's key: the subject is its payload (sha256 of the canonical
// bytes, and the git blob id), the predicate (attest.ArtifactPredicate)
// its journal row, spine entry, run position and the progress vector at
// that position. Only a version verified here is attested: anything else is
// ErrNotAttestable, with why, and nothing is signed.
func (s *Store) AttestArtifact(task, key string, version int64) (*Attestation, error) {
	if err := artifact.ValidateKey(key); err != nil {
		return nil, err
	}
	if version < 0 {
		return nil, &artifact.InputError{Field: "version", Msg: "must be a version number, 1 or more"}
	}
	r, err := s.attestRead(task)
	if err != nil {
		return nil, err
	}
	var ver *verify.Version
	if version == 0 {
		ver = r.Report.Latest(key)
	} else {
		ver = r.Report.Find(key, version)
	}
	if ver == nil {
		return nil, &UnknownArtifactError{Task: task, Key: key, Version: version, Pinned: version != 0}
	}
	return attestation.Artifact(s.Identity, r, task, key, ver)
}

// AttestTask signs an in-toto statement about task's sealed journal: the
// subject is the journal seal (its spine entry hash, and the commit that
// carries it), the predicate (attest.JournalPredicate) the progress vector
// and every artifact version with its digests. Only a journal whose
// identity is verified (sealed, and exactly what the seal says), with every
// version and every row verified, is attested.
func (s *Store) AttestTask(task string) (*Attestation, error) {
	r, err := s.attestRead(task)
	if err != nil {
		return nil, err
	}
	return attestation.Journal(s.Identity, r, task)
}
