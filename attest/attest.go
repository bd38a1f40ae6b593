// Package attest owns bernstein's attestations: in-toto Statements (v1)
// about artifact versions and sealed task journals, with the predicates
// documented in docs/attest.md, signed into DSSE envelopes through
// sigstore's DSSE signer, and optionally wrapped in a Sigstore bundle
// (v0.3, a public-key hint, no transparency log). The functions here are
// pure but for the signature; the store decides what may be attested.
package attest

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	intoto "github.com/in-toto/attestation/go/v1"
	ssldsse "github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	"github.com/sigstore/sigstore/pkg/signature"
	sigdsse "github.com/sigstore/sigstore/pkg/signature/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// The envelope's payload type, the predicate types (docs/attest.md) and
// the bundle's media type.
const (
	PayloadType           = "application/vnd.in-toto+json"
	ArtifactPredicateType = "https://github.com/bernstein/bernstein/blob/main/docs/attest.md#artifact-version-v1"
	JournalPredicateType  = "https://github.com/bernstein/bernstein/blob/main/docs/attest.md#task-journal-v1"
	BundleMediaType       = "application/vnd.dev.sigstore.bundle.v0.3+json"
)

// Subject is what a statement is about, named and identified by digests:
// SHA256 (hex) and, for a git object, its id as GitBlob or GitCommit (the
// in-toto digest set's names).
type Subject struct {
	Name      string
	SHA256    string
	GitBlob   string
	GitCommit string
}

// Position is where in the task's run a version stands: its journal row
// (the prefix of the journal up to and including it) and the ledger the
// progress vector was projected with.
type Position struct {
	JournalIndex int64       `json:"journal_index"`
	JournalRows  int64       `json:"journal_rows"`
	LedgerRows   int64       `json:"ledger_rows"`
	LedgerHead   record.Hash `json:"ledger_head"`
}

// ArtifactPredicate is the predicate of an artifact version's statement
// (ArtifactPredicateType, v 1).
type ArtifactPredicate struct {
	V              int             `json:"v"`
	TaskID         string          `json:"task_id"`
	Key            string          `json:"key"`
	Version        int64           `json:"version"`
	Type           string          `json:"artifact_type"`
	Row            record.Row      `json:"row"`
	RowHash        record.Hash     `json:"row_hash"`
	RowCommit      string          `json:"row_commit"`
	SpineEntryHash record.Hash     `json:"spine_entry_hash"`
	Writer         string          `json:"writer"`
	Position       Position        `json:"position"`
	Progress       progress.Vector `json:"progress"`
	ProgressHash   string          `json:"progress_hash"`
}

// Seal is the journal seal a task journal's statement is about.
type Seal struct {
	SpineEntryHash record.Hash `json:"spine_entry_hash"`
	Commit         string      `json:"commit"`
	Writer         string      `json:"writer"`
	Seq            int64       `json:"seq"`
	Head           record.Hash `json:"head"`
	Rows           int64       `json:"rows"`
	LedgerIndex    int64       `json:"ledger_index"`
	Transition     string      `json:"transition"`
}

// VersionDigest is one artifact version of a sealed journal.
type VersionDigest struct {
	Key            string      `json:"key"`
	Version        int64       `json:"version"`
	Type           string      `json:"artifact_type"`
	JournalIndex   int64       `json:"journal_index"`
	ContentHash    record.Hash `json:"content_hash"`
	Blob           string      `json:"blob"`
	SpineEntryHash record.Hash `json:"spine_entry_hash"`
}

// JournalPredicate is the predicate of a sealed task journal's statement
// (JournalPredicateType, v 1).
type JournalPredicate struct {
	V            int             `json:"v"`
	TaskID       string          `json:"task_id"`
	Seal         Seal            `json:"seal"`
	Progress     progress.Vector `json:"progress"`
	ProgressHash string          `json:"progress_hash"`
	Artifacts    []VersionDigest `json:"artifacts"`
}

// Statement builds the in-toto Statement v1 of subjects and predicate,
// checks it with the in-toto attestation library's own validation, and
// returns its canonical JSON (RFC 8785): one statement, one byte form.
func Statement(subjects []Subject, predicateType string, predicate any) ([]byte, error) {
	pb, err := record.Canonical(predicate)
	if err != nil {
		return nil, fmt.Errorf("predicate: %w", err)
	}
	ps := &structpb.Struct{}
	if err := protojson.Unmarshal(pb, ps); err != nil {
		return nil, fmt.Errorf("predicate: %w", err)
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, PredicateType: predicateType, Predicate: ps}
	for _, s := range subjects {
		d := map[string]string{}
		if s.SHA256 != "" {
			d["sha256"] = s.SHA256
		}
		if s.GitBlob != "" {
			d["gitBlob"] = s.GitBlob
		}
		if s.GitCommit != "" {
			d["gitCommit"] = s.GitCommit
		}
		st.Subject = append(st.Subject, &intoto.ResourceDescriptor{Name: s.Name, Digest: d})
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	j, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	// The predicate's integers went through structpb's doubles: every one
	// bernstein writes is far below 2^53, and canonical form prints them
	// as integers again. The predicate must come back byte for byte.
	out, err := record.CanonicalizeJSON(j)
	if err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	var back struct {
		Predicate json.RawMessage `json:"predicate"`
	}
	if err := json.Unmarshal(out, &back); err != nil || !bytes.Equal(back.Predicate, pb) {
		return nil, errors.New("in-toto statement: the predicate does not survive its JSON form")
	}
	return out, nil
}

// Sign puts statement in a DSSE envelope signed by sv, through sigstore's
// DSSE signer adapter. The envelope names the key as DSSE's Go verifiers
// (go-securesystemslib, sigstore, cosign) compute a key's id, which they
// compare with it (EnvelopeKeyID). It returns the envelope's JSON.
func Sign(sv signature.SignerVerifier, statement []byte) ([]byte, error) {
	pub, err := sv.PublicKey()
	if err != nil {
		return nil, err
	}
	keyID, err := EnvelopeKeyID(pub)
	if err != nil {
		return nil, err
	}
	es, err := ssldsse.NewEnvelopeSigner(&sigdsse.SignerAdapter{SignatureSigner: sv, Pub: pub, PubKeyID: keyID})
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(context.Background(), PayloadType, statement)
	if err != nil {
		return nil, fmt.Errorf("sign the attestation: %w", err)
	}
	return json.Marshal(env)
}

// EnvelopeKeyID is a public key's id in an envelope, as go-securesystemslib
// computes it: the key's SSH fingerprint (SHA256:...).
func EnvelopeKeyID(pub crypto.PublicKey) (string, error) { return ssldsse.SHA256KeyID(pub) }

// Bundle wraps a DSSE envelope in a Sigstore bundle v0.3 whose
// verification material is a public-key hint (hint: the writer key's SSH
// fingerprint) and no transparency log entry, serialised by the
// protobuf-specs types' own JSON mapping.
func Bundle(envelope []byte, hint string) ([]byte, error) {
	var env ssldsse.Envelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if len(env.Signatures) != 1 {
		return nil, fmt.Errorf("envelope: a bundle carries one signature, not %d", len(env.Signatures))
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return nil, fmt.Errorf("envelope payload: %w", err)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		return nil, fmt.Errorf("envelope signature: %w", err)
	}
	b := &protobundle.Bundle{
		MediaType: BundleMediaType,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: hint}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: payload, PayloadType: env.PayloadType,
			Signatures: []*protodsse.Signature{{Sig: sig, Keyid: env.Signatures[0].KeyID}},
		}},
	}
	j, err := protojson.Marshal(b)
	if err != nil {
		return nil, err
	}
	// protojson leaves out the empty list of log entries, which bundle
	// readers expect to find (empty: no transparency log), and varies its
	// spacing on purpose; the bundle is printed in one stable form.
	var doc map[string]any
	if err := json.Unmarshal(j, &doc); err != nil {
		return nil, err
	}
	vm, ok := doc["verificationMaterial"].(map[string]any)
	if !ok {
		return nil, errors.New("bundle: no verification material")
	}
	vm["tlogEntries"] = []any{}
	return json.Marshal(doc)
}

// Verify checks an envelope's signature by pub (through sigstore's DSSE
// verifier) and its payload type, and returns the statement it carries.
func Verify(envelope []byte, pub crypto.PublicKey, hash crypto.Hash) ([]byte, error) {
	v, err := signature.LoadVerifier(pub, hash)
	if err != nil {
		return nil, err
	}
	var statement []byte
	dv := sigdsse.WrapVerifier(v, sigdsse.WithExpectedPayloadType(PayloadType), sigdsse.WithDecodedPayload(&statement))
	if err := dv.VerifySignature(bytes.NewReader(envelope), nil); err != nil {
		return nil, fmt.Errorf("attestation: %w", err)
	}
	return statement, nil
}
