// Package keys owns a writer's identity: its id, its signing key (Ed25519
// or ECDSA P-256, in a file or in ssh-agent) and its HMAC key, kept under
// BERNSTEIN_HOME (never in a repository), signing through sigstore's
// signature package; SSH signatures for commits; and the trust a reader
// places in published keys (git's allowed_signers format).
package keys

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/refs"
)

// ErrNoIdentity reports a BERNSTEIN_HOME without a writer identity.
var ErrNoIdentity = errors.New("no writer identity: run 'bernstein init' first")

// Home returns the directory that holds the writer identity: BERNSTEIN_HOME,
// else $XDG_STATE_HOME/bernstein, else ~/.local/state/bernstein.
func Home() (string, error) {
	if h := os.Getenv("BERNSTEIN_HOME"); h != "" {
		return filepath.Abs(h)
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "bernstein"), nil
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot locate BERNSTEIN_HOME: %w", err)
	}
	return filepath.Join(u, ".local", "state", "bernstein"), nil
}

// Identity is one writer: id, signing key and HMAC key.
type Identity struct {
	Writer string
	Home   string

	signer   signature.SignerVerifier
	ssh      ssh.Signer
	hmacKey  []byte
	sshPub   ssh.PublicKey
	authLine string
	agent    *agentKey // the key lives in ssh-agent (agent.go); nil for a key file
}

const (
	writerFile  = "writer"
	signingFile = "signing.pem"
	hmacFile    = "hmac.key"
	agentFile   = "agent.pub" // the public half of a key held by ssh-agent
)

// Load reads the identity in home without creating anything.
func Load(home string) (*Identity, error) {
	wb, err := os.ReadFile(filepath.Join(home, writerFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoIdentity
	}
	if err != nil {
		return nil, err
	}
	writer := strings.TrimSpace(string(wb))
	if err := refs.ValidateWriter(writer); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(home, writerFile), err)
	}
	files := []string{signingFile, hmacFile}
	agentPub, err := os.ReadFile(filepath.Join(home, agentFile))
	switch {
	case err == nil:
		files = []string{hmacFile}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("writer %s: %w", writer, err)
	}
	for _, f := range files {
		fi, err := os.Stat(filepath.Join(home, f))
		if err != nil {
			return nil, fmt.Errorf("writer %s: %w", writer, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%s is readable by others (mode %o): chmod 600 it", filepath.Join(home, f), fi.Mode().Perm())
		}
	}
	hb, err := os.ReadFile(filepath.Join(home, hmacFile))
	if err != nil {
		return nil, err
	}
	hk, err := hex.DecodeString(strings.TrimSpace(string(hb)))
	if err != nil || len(hk) < 32 {
		return nil, fmt.Errorf("%s: not a 256-bit hex key", filepath.Join(home, hmacFile))
	}
	if agentPub != nil {
		pub, _, _, _, err := ssh.ParseAuthorizedKey(agentPub)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(home, agentFile), err)
		}
		if err := CheckKeyType(pub); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(home, agentFile), err)
		}
		return newAgentIdentity(home, writer, pub, hk)
	}
	pb, err := os.ReadFile(filepath.Join(home, signingFile))
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(pb)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM private key", filepath.Join(home, signingFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(home, signingFile), err)
	}
	var priv crypto.Signer
	switch k := k.(type) {
	case ed25519.PrivateKey:
		priv = k
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("%s: an ECDSA key on %s; writer keys are Ed25519 or ECDSA P-256", filepath.Join(home, signingFile), k.Curve.Params().Name)
		}
		priv = k
	default:
		return nil, fmt.Errorf("%s: not an Ed25519 or ECDSA P-256 key", filepath.Join(home, signingFile))
	}
	return newIdentity(home, writer, priv, hk)
}

// newIdentity makes the identity of a key file's private key (Ed25519 or
// ECDSA P-256).
func newIdentity(home, writer string, priv crypto.Signer, hk []byte) (*Identity, error) {
	sv, err := signature.LoadSignerVerifier(priv, detachedHash(priv.Public()))
	if err != nil {
		return nil, fmt.Errorf("load signing key: %w", err)
	}
	ss, err := ssh.NewSignerFromSigner(priv)
	if err != nil {
		return nil, fmt.Errorf("ssh signer: %w", err)
	}
	return finishIdentity(&Identity{Writer: writer, Home: home, signer: sv, ssh: ss, hmacKey: hk, sshPub: ss.PublicKey()}), nil
}

func finishIdentity(id *Identity) *Identity {
	id.authLine = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(id.sshPub)))
	return id
}

// detachedHash is the digest a sigstore signature by pub is made over: none
// for Ed25519 (which signs the message itself), SHA-256 for ECDSA P-256 (as
// ssh-agent's ecdsa-sha2-nistp256 signatures are).
func detachedHash(pub crypto.PublicKey) crypto.Hash {
	if _, ok := pub.(*ecdsa.PublicKey); ok {
		return crypto.SHA256
	}
	return crypto.Hash(0)
}

// CheckKeyType refuses a writer key of a kind bernstein does not sign or
// verify with: writer keys are ssh-ed25519 or ecdsa-sha2-nistp256.
func CheckKeyType(pub ssh.PublicKey) error {
	switch pub.Type() {
	case ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256:
		return nil
	}
	return fmt.Errorf("a %s key: writer keys are %s or %s", pub.Type(), ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256)
}

// Create makes a new identity in home for writer, or loads the existing one
// (created reports which). Key files are written with mode 0600.
func Create(home, writer string) (id *Identity, created bool, err error) {
	if existing, err := Load(home); err == nil {
		if writer != "" && writer != existing.Writer {
			return nil, false, fmt.Errorf("%s already holds writer %q (asked for %q); use another BERNSTEIN_HOME", home, existing.Writer, writer)
		}
		return existing, false, nil
	} else if !errors.Is(err, ErrNoIdentity) {
		return nil, false, err
	}
	if writer == "" {
		writer = DefaultWriter()
	}
	if err := refs.ValidateWriter(writer); err != nil {
		return nil, false, err
	}
	if err := MkdirDurable(home); err != nil {
		return nil, false, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, false, err
	}
	hk := make([]byte, 32)
	if _, err := rand.Read(hk); err != nil {
		return nil, false, err
	}
	if err := writePrivate(filepath.Join(home, signingFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
		return nil, false, err
	}
	if err := writePrivate(filepath.Join(home, hmacFile), []byte(hex.EncodeToString(hk)+"\n")); err != nil {
		return nil, false, err
	}
	// The writer file goes last: its presence marks a complete identity.
	if err := writePrivate(filepath.Join(home, writerFile), []byte(writer+"\n")); err != nil {
		return nil, false, err
	}
	// The renames are made durable before the key is used: init publishes
	// it next, and a published key whose private half a power loss took
	// back could never sign again under that writer id.
	if err := SyncDir(home); err != nil {
		return nil, false, err
	}
	id, err = newIdentity(home, writer, priv, hk)
	return id, true, err
}

// WritePrivate writes a file whole with mode 0600: a temporary file, synced,
// then renamed into place (the caller syncs the directory, SyncDir).
func WritePrivate(path string, data []byte) error { return writePrivate(path, data) }

// SyncDir makes the creations and renames in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// MkdirDurable creates dir (mode 0700) and the missing folders above it,
// each made durable in its parent.
func MkdirDurable(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return SyncDir(parent)
}

func writePrivate(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// DefaultWriter derives a writer id from the host name plus a random suffix,
// so two hosts with the same name still get distinct writers.
func DefaultWriter() string {
	h, _ := os.Hostname()
	var b strings.Builder
	for _, c := range strings.ToLower(h) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 48 {
			break
		}
	}
	base := strings.Trim(b.String(), "-")
	if base == "" {
		base = "writer"
	}
	var r [3]byte
	rand.Read(r[:])
	return base + "-" + hex.EncodeToString(r[:])
}

// PublicKey returns the writer's SSH public key.
func (id *Identity) PublicKey() ssh.PublicKey { return id.sshPub }

// AuthorizedKey returns the public key as one "ssh-ed25519 AAAA..." (or
// "ecdsa-sha2-nistp256 AAAA...") line.
func (id *Identity) AuthorizedKey() string { return id.authLine }

// Principal is the allowed_signers principal of a writer.
func Principal(writer string) string { return writer + "@bernstein" }

// SignCommit returns the armored SSH signature (namespace "git") of a commit
// payload, as git's gpgsig header carries it.
func (id *Identity) SignCommit(payload []byte) ([]byte, error) {
	return signSSH(id.ssh, payload)
}

// SignDetached signs data through the sigstore signer.
func (id *Identity) SignDetached(data []byte) ([]byte, error) {
	return id.signer.SignMessage(bytes.NewReader(data))
}

// SignerVerifier is the writer's sigstore signer (a key file's, or the
// agent's), for signatures in other formats (DSSE).
func (id *Identity) SignerVerifier() signature.SignerVerifier { return id.signer }

// MAC returns the hex HMAC-SHA256 of data under the writer's HMAC key.
func (id *Identity) MAC(data []byte) string {
	m := hmac.New(sha256.New, id.hmacKey)
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

// CheckMAC reports whether mac is the HMAC of data under the writer's key.
func (id *Identity) CheckMAC(data []byte, mac string) bool {
	want, err := hex.DecodeString(mac)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, id.hmacKey)
	m.Write(data)
	return hmac.Equal(m.Sum(nil), want)
}

// VerifyDetached checks a sigstore detached signature of data by pub.
func VerifyDetached(pub ssh.PublicKey, data, sig []byte) error {
	ck, ok := pub.(ssh.CryptoPublicKey)
	if !ok {
		return errors.New("key cannot verify detached signatures")
	}
	v, err := signature.LoadVerifier(ck.CryptoPublicKey(), detachedHash(ck.CryptoPublicKey()))
	if err != nil {
		return err
	}
	return v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(data))
}
