// Package wlog is a writer's log: a Merkle tree (golang.org/x/mod/sumdb/tlog)
// whose leaves are the writer's spine entries in seq order, and its signed
// checkpoints (C2SP tlog-checkpoint in a signed note, signed by the
// writer's key) that witnesses cosign (docs/trust.md, Witnesses).
package wlog

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/crypto/ssh"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
)

// Origin is the origin line of writer's log in the repository with
// identity id: stable for the life of the repository and the writer.
func Origin(id, writer string) string { return "bernstein.log/" + id + "/" + writer }

// ErrKeyKind: a log is signed with an Ed25519 writer key only (the signed
// note format has no ECDSA signature type witnesses verify).
var ErrKeyKind = errors.New("a writer's log is signed with an Ed25519 key; this writer's key is not one, so its log cannot be witnessed")

func ed25519Of(pub ssh.PublicKey) (ed25519.PublicKey, error) {
	ck, ok := pub.(ssh.CryptoPublicKey)
	if !ok {
		return nil, ErrKeyKind
	}
	k, ok := ck.CryptoPublicKey().(ed25519.PublicKey)
	if !ok {
		return nil, ErrKeyKind
	}
	return k, nil
}

// VerifierKey is the signed-note verifier key of writer's log with the
// given origin: the origin as key name, algorithm 1 (Ed25519), the key.
func VerifierKey(origin string, pub ssh.PublicKey) (string, error) {
	k, err := ed25519Of(pub)
	if err != nil {
		return "", err
	}
	return note.NewEd25519VerifierKey(origin, k)
}

// Verifier checks a checkpoint's signature by the writer key pub.
func Verifier(origin string, pub ssh.PublicKey) (note.Verifier, error) {
	vk, err := VerifierKey(origin, pub)
	if err != nil {
		return nil, err
	}
	return note.NewVerifier(vk)
}

// signer is a note.Signer over the writer's signer (a key file, ssh-agent,
// a PKCS#11 key through the agent): the signature is the raw Ed25519
// signature of the note's text.
type signer struct {
	name string
	hash uint32
	id   *keys.Identity
}

func (s *signer) Name() string    { return s.name }
func (s *signer) KeyHash() uint32 { return s.hash }
func (s *signer) Sign(msg []byte) ([]byte, error) {
	sig, err := s.id.SignDetached(msg)
	if err != nil {
		return nil, err
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("writer %s signed a checkpoint with a %d-byte signature: %w", s.id.Writer, len(sig), ErrKeyKind)
	}
	return sig, nil
}

// NewSigner is the note.Signer of id's log with the given origin.
func NewSigner(origin string, id *keys.Identity) (note.Signer, error) {
	k, err := ed25519Of(id.PublicKey())
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte(origin + "\n"))
	h.Write(append([]byte{1}, k...))
	return &signer{name: origin, hash: binary.BigEndian.Uint32(h.Sum(nil)), id: id}, nil
}

// LeafHash is the leaf of a spine entry: tlog's record hash of the 32
// bytes of the entry's hash (the sha256 of its canonical record).
func LeafHash(entry record.Hash) (tlog.Hash, error) {
	raw, err := hex.DecodeString(strings.TrimPrefix(string(entry), "sha256:"))
	if err != nil || len(raw) != 32 || !strings.HasPrefix(string(entry), "sha256:") {
		return tlog.Hash{}, fmt.Errorf("spine entry hash %q is not sha256:<64 hex>", entry)
	}
	return tlog.RecordHash(raw), nil
}

// Sign makes the signed checkpoint of a log of size leaves with root.
func Sign(origin string, size int64, root tlog.Hash, s note.Signer) ([]byte, error) {
	body := log.Checkpoint{Origin: origin, Size: uint64(size), Hash: root[:]}.Marshal()
	return note.Sign(&note.Note{Text: string(body)}, s)
}

// Checkpoint is a signed checkpoint whose writer signature checked.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
	Note   *note.Note // Sigs: the writer's; UnverifiedSigs: the rest (cosignatures)
	Raw    []byte
}

// Open checks the writer's signature on a signed checkpoint of the log
// with the given origin and reads it.
func Open(raw []byte, origin string, v note.Verifier) (*Checkpoint, error) {
	cp, _, n, err := log.ParseCheckpoint(raw, origin, v)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of %s: %w", origin, err)
	}
	if len(cp.Hash) != tlog.HashSize || cp.Size > 1<<62 {
		return nil, fmt.Errorf("checkpoint of %s: a root of %d bytes, size %d", origin, len(cp.Hash), cp.Size)
	}
	c := &Checkpoint{Origin: cp.Origin, Size: int64(cp.Size), Note: n, Raw: raw}
	copy(c.Root[:], cp.Hash)
	return c, nil
}

// Body is the checkpoint's text, which every signature covers.
func (c *Checkpoint) Body() []byte { return []byte(c.Note.Text) }

// SigLines are the checkpoint's signature lines other than the writer's
// ("— name base64\n"), as witnesses' cosignatures are stored.
func (c *Checkpoint) SigLines() [][]byte {
	var out [][]byte
	for _, s := range c.Note.UnverifiedSigs {
		out = append(out, []byte("— "+s.Name+" "+s.Base64+"\n"))
	}
	return out
}

// WithCosignatures is a signed checkpoint with sig lines appended (each
// "— name base64\n"); lines it carries already are not added twice.
func WithCosignatures(raw []byte, lines [][]byte) []byte {
	out := append([]byte(nil), raw...)
	for _, l := range lines {
		if !strings.HasSuffix(string(l), "\n") {
			l = append(append([]byte(nil), l...), '\n')
		}
		if strings.Contains("\n"+string(out), "\n"+string(l)) {
			continue
		}
		out = append(out, l...)
	}
	return out
}

// keyHashOf is the key hash a signature line names (its first 4 bytes).
func keyHashOf(b64 string) (uint32, bool) {
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) < 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(b), true
}
