// Package attestation decides what bernstein attests and builds the
// in-toto statements (docs/attest.md): an artifact version verified here,
// at its position in its journal, with the progress vector there; a sealed
// journal whose identity, rows and versions all verify. The local writer's
// key signs them (a DSSE envelope, a Sigstore bundle). Nothing that is not
// verified here is attested.
package attestation

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/attest"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/verify"
)

// ErrNotAttestable reports a version or journal that is not verified here,
// which bernstein never attests.
var ErrNotAttestable = errors.New("not attested")

// Attestation is one signed in-toto statement (docs/attest.md).
type Attestation struct {
	// Statement is the in-toto Statement v1, canonical JSON.
	Statement []byte
	// Envelope is the DSSE envelope of the statement, signed by the local
	// writer's key.
	Envelope []byte
	// Bundle is the envelope in a Sigstore bundle v0.3 (public-key hint,
	// no transparency log).
	Bundle []byte
	// KeyID is the signing key's SSH fingerprint (the bundle's hint).
	KeyID string
	// PublicKey is the signing key, one authorized-key line.
	PublicKey string
	// Subjects says what the statement is about.
	Subjects []attest.Subject
}

// sign signs statement with the local writer's key (identity loads it).
func sign(identity func() (*keys.Identity, error), statement []byte, subjects []attest.Subject) (*Attestation, error) {
	id, err := identity()
	if err != nil {
		return nil, err
	}
	if err := id.Ready(); err != nil {
		return nil, err
	}
	keyID := ssh.FingerprintSHA256(id.PublicKey())
	env, err := attest.Sign(id.SignerVerifier(), statement)
	if err != nil {
		return nil, err
	}
	b, err := attest.Bundle(env, keyID)
	if err != nil {
		return nil, err
	}
	return &Attestation{Statement: statement, Envelope: env, Bundle: b, KeyID: keyID, PublicKey: id.AuthorizedKey(), Subjects: subjects}, nil
}

func notAttestable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotAttestable, fmt.Sprintf(format, args...))
}

// Read is one snapshot's verification and progress fold of a task: what an
// attestation is decided on.
type Read struct {
	Report   *verify.TaskReport
	Verifier *verify.Verifier
	Fold     *fold.Task
}

// Artifact signs, with the local writer's key (identity loads it), an
// in-toto statement about version ver of task's key, as r verified it: the
// subject is its payload (sha256 of the canonical bytes, and the git blob
// id), the predicate (attest.ArtifactPredicate) its journal row, spine
// entry, run position and the progress vector at that position. Only a
// version verified here is attested: anything else is ErrNotAttestable,
// with why, and nothing is signed.
func Artifact(identity func() (*keys.Identity, error), r *Read, task, key string, ver *verify.Version) (*Attestation, error) {
	rep := r.Report
	where := fmt.Sprintf("%s v%d of task %s", key, ver.Version, task)
	if ver.State != verify.Verified {
		return nil, notAttestable("%s is %s: %s", where, ver.State, ver.Reason)
	}
	if _, why := rep.Content(ver); why != "" {
		return nil, notAttestable("%s: %s", where, why)
	}
	i := ver.JournalIndex
	if i < 0 || i >= int64(len(rep.RowList)) || int64(len(rep.RowHashes)) != int64(len(rep.RowList)) {
		return nil, notAttestable("%s: its journal row %d is not in the journal read", where, i)
	}
	// The vector at the version's position counts journal rows up to its
	// own: each of them, and every ledger row, must count.
	for _, rf := range r.Fold.Wire.Proof.RowsAtFault {
		if rf.Chain == "ledger" || rf.Index <= i {
			return nil, notAttestable("%s: %s row %d does not count (%s): %s", where, rf.Chain, rf.Index, rf.State, rf.Reason)
		}
	}
	if r.Fold.Wire.Proof.State == verify.Unverifiable {
		return nil, notAttestable("%s: this host trusts no writer key, so nothing is verified", where)
	}
	var j progress.Journal
	for _, r := range rep.RowList[:i+1] {
		if err := j.Apply(r); err != nil {
			return nil, err
		}
	}
	var st *ledger.State
	if r.Fold.Ledger.Exists() {
		st = r.Fold.Ledger.State
	}
	vec := progress.Project(task, j, st)
	pred := attest.ArtifactPredicate{
		V: 1, TaskID: task, Key: key, Version: ver.Version, Type: ver.Type,
		Row: rep.RowList[i], RowHash: rep.RowHashes[i], RowCommit: ver.Commit.String(),
		SpineEntryHash: ver.SpineEntryHash, Writer: ver.Writer,
		Position: attest.Position{JournalIndex: i, JournalRows: i + 1,
			LedgerRows: r.Fold.Wire.LedgerRows, LedgerHead: r.Fold.Wire.LedgerHead},
		Progress: vec, ProgressHash: vec.Hash(),
	}
	subjects := []attest.Subject{{
		Name:    fmt.Sprintf("bernstein://%s/%s/v%d", task, key, ver.Version),
		SHA256:  strings.TrimPrefix(string(ver.ContentHash), record.HashPrefix),
		GitBlob: ver.Blob,
	}}
	st2, err := attest.Statement(subjects, attest.ArtifactPredicateType, pred)
	if err != nil {
		return nil, err
	}
	return sign(identity, st2, subjects)
}

// Journal signs, with the local writer's key (identity loads it), an
// in-toto statement about task's sealed journal, as r verified it: the
// subject is the journal seal (its spine entry hash, and the commit that
// carries it), the predicate (attest.JournalPredicate) the progress vector
// and every artifact version with its digests. Only a journal whose
// identity is verified (sealed, and exactly what the seal says), with every
// version and every row verified, is attested.
func Journal(identity func() (*keys.Identity, error), r *Read, task string) (*Attestation, error) {
	rep := r.Report
	switch {
	case rep.ChainBroken:
		return nil, notAttestable("task %s: %s", task, rep.ChainReason)
	case rep.JournalIdentity != verify.IdentityVerified:
		return nil, notAttestable("task %s: journal identity %s: %s", task, rep.JournalIdentity, rep.IdentityReason)
	case r.Fold.Wire.Proof.State != verify.Verified:
		n := len(r.Fold.Wire.Proof.RowsAtFault)
		if n > 0 {
			rf := r.Fold.Wire.Proof.RowsAtFault[0]
			return nil, notAttestable("task %s: %s row %d does not count (%s): %s", task, rf.Chain, rf.Index, rf.State, rf.Reason)
		}
		return nil, notAttestable("task %s: progress is %s", task, r.Fold.Wire.Proof.State)
	}
	digests := []attest.VersionDigest{}
	for _, ver := range rep.Versions {
		if ver.State != verify.Verified {
			return nil, notAttestable("task %s: %s v%d is %s: %s", task, ver.Key, ver.Version, ver.State, ver.Reason)
		}
		digests = append(digests, attest.VersionDigest{Key: ver.Key, Version: ver.Version, Type: ver.Type,
			JournalIndex: ver.JournalIndex, ContentHash: ver.ContentHash, Blob: ver.Blob, SpineEntryHash: ver.SpineEntryHash})
	}
	// The seal that decided the identity: the one with the most rows.
	var best *verify.SpineRecord
	for _, r := range r.Verifier.Spine.TaskSeals(task) {
		if best == nil || r.Seal.Rows > best.Seal.Rows {
			best = r
		}
	}
	if best == nil || best.Hash() == "" {
		return nil, notAttestable("task %s: no journal seal", task)
	}
	seal := attest.Seal{SpineEntryHash: best.Hash(), Commit: best.Commit.String(), Writer: best.Writer, Seq: best.Seq,
		Head: best.Seal.Head, Rows: best.Seal.Rows, LedgerIndex: best.Seal.LedgerIndex, Transition: best.Seal.Transition}
	vec := r.Fold.Wire.Vector
	pred := attest.JournalPredicate{V: 1, TaskID: task, Seal: seal, Progress: vec, ProgressHash: vec.Hash(), Artifacts: digests}
	subjects := []attest.Subject{{
		Name:      fmt.Sprintf("bernstein://%s/journal-seal", task),
		SHA256:    strings.TrimPrefix(string(seal.SpineEntryHash), record.HashPrefix),
		GitCommit: seal.Commit,
	}}
	st, err := attest.Statement(subjects, attest.JournalPredicateType, pred)
	if err != nil {
		return nil, err
	}
	return sign(identity, st, subjects)
}
