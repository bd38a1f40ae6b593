package keys

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/bernstein/bernstein/refs"
)

// A writer made with `bernstein init --ssh-agent` keeps its signing key in
// ssh-agent (a hardware token, or a PKCS#11 key the agent loaded with
// `ssh-add -s`): BERNSTEIN_HOME holds the key's public half (agent.pub) and
// the HMAC key, never the private key. Every signature (commits, and the
// detached sigstore signatures of seals, key records and audit checkpoints)
// is asked of the agent named by SSH_AUTH_SOCK when it is made.

// ErrAgent reports an ssh-agent that cannot sign for the writer: none is
// running, it does not hold the key, it is locked, or it refused.
var ErrAgent = errors.New("ssh-agent cannot sign")

// agentKey reaches the agent that holds one key. One connection is kept
// and made again after a failure (an agent restarted at the same socket).
type agentKey struct {
	pub ssh.PublicKey

	mu     sync.Mutex
	conn   net.Conn
	client agent.ExtendedAgent
	signer ssh.Signer
}

func agentSocket() (string, error) {
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return "", fmt.Errorf("%w: SSH_AUTH_SOCK is not set; start ssh-agent and add the writer's key (ssh-add, or ssh-add -s PKCS11_LIBRARY for a token)", ErrAgent)
	}
	return sock, nil
}

func dialAgent() (net.Conn, agent.ExtendedAgent, string, error) {
	sock, err := agentSocket()
	if err != nil {
		return nil, nil, "", err
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, sock, fmt.Errorf("%w: ssh-agent at %s: %v", ErrAgent, sock, err)
	}
	return conn, agent.NewClient(conn), sock, nil
}

// AgentKeys lists the keys the running ssh-agent holds that can be writer
// keys (ssh-ed25519, ecdsa-sha2-nistp256), with their comments.
func AgentKeys() ([]*agent.Key, error) {
	conn, client, sock, err := dialAgent()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	all, err := client.List()
	if err != nil {
		return nil, fmt.Errorf("%w: ssh-agent at %s: list keys: %v", ErrAgent, sock, err)
	}
	var out []*agent.Key
	for _, k := range all {
		pub, err := ssh.ParsePublicKey(k.Marshal())
		if err != nil || CheckKeyType(pub) != nil {
			continue
		}
		out = append(out, k)
	}
	return out, nil
}

// reach returns the agent's signer for the key, connecting when needed.
func (a *agentKey) reach() (ssh.Signer, error) {
	if a.signer != nil {
		return a.signer, nil
	}
	conn, client, sock, err := dialAgent()
	if err != nil {
		return nil, err
	}
	signers, err := client.Signers()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: ssh-agent at %s: list keys: %v", ErrAgent, sock, err)
	}
	want := a.pub.Marshal()
	for _, s := range signers {
		if bytes.Equal(s.PublicKey().Marshal(), want) {
			a.conn, a.client, a.signer = conn, client, s
			return s, nil
		}
	}
	conn.Close()
	return nil, fmt.Errorf("%w: ssh-agent at %s does not hold the writer's key %s (add it with ssh-add, or ssh-add -s PKCS11_LIBRARY for a token; a locked agent lists no key: ssh-add -X unlocks it)", ErrAgent, sock, ssh.FingerprintSHA256(a.pub))
}

func (a *agentKey) drop() {
	if a.conn != nil {
		a.conn.Close()
	}
	a.conn, a.client, a.signer = nil, nil, nil
}

// sign asks the agent for an SSH signature of data, reconnecting once.
func (a *agentKey) sign(data []byte) (*ssh.Signature, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var last error
	for try := 0; try < 2; try++ {
		s, err := a.reach()
		if err != nil {
			return nil, err
		}
		sig, err := s.Sign(rand.Reader, data)
		if err == nil {
			return sig, nil
		}
		last = err
		a.drop()
	}
	sock, _ := agentSocket()
	return nil, fmt.Errorf("%w: ssh-agent at %s refused to sign with %s: %v (is the token present and the agent unlocked?)", ErrAgent, sock, ssh.FingerprintSHA256(a.pub), last)
}

// ready checks that the agent holds the key, so a write fails before it
// builds anything rather than halfway.
func (a *agentKey) ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		ks, err := a.client.List()
		if err == nil {
			for _, k := range ks {
				if bytes.Equal(k.Marshal(), a.pub.Marshal()) {
					return nil
				}
			}
		}
		a.drop()
	}
	_, err := a.reach()
	return err
}

// agentSSHSigner is the ssh.Signer of commit signatures through the agent.
type agentSSHSigner struct{ a *agentKey }

func (s agentSSHSigner) PublicKey() ssh.PublicKey { return s.a.pub }
func (s agentSSHSigner) Sign(_ io.Reader, data []byte) (*ssh.Signature, error) {
	return s.a.sign(data)
}

// agentSigner is sigstore's SignerVerifier over the agent: the agent signs,
// sigstore's own verifier of the public key verifies. An Ed25519 signature
// is the agent's signature blob; an ECDSA P-256 one (the agent hashes with
// SHA-256) is re-encoded from SSH's (r, s) to ASN.1 DER, sigstore's form.
type agentSigner struct {
	a        *agentKey
	pub      crypto.PublicKey
	verifier signature.Verifier
}

func (s *agentSigner) PublicKey(...signature.PublicKeyOption) (crypto.PublicKey, error) {
	return s.pub, nil
}

func (s *agentSigner) SignMessage(r io.Reader, _ ...signature.SignOption) ([]byte, error) {
	msg, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	sig, err := s.a.sign(msg)
	if err != nil {
		return nil, err
	}
	switch sig.Format {
	case ssh.KeyAlgoED25519:
		if len(sig.Blob) != ed25519.SignatureSize {
			return nil, fmt.Errorf("%w: an Ed25519 signature of %d bytes", ErrAgent, len(sig.Blob))
		}
		return sig.Blob, nil
	case ssh.KeyAlgoECDSA256:
		var rs struct{ R, S *big.Int }
		if err := ssh.Unmarshal(sig.Blob, &rs); err != nil {
			return nil, fmt.Errorf("%w: ECDSA signature: %v", ErrAgent, err)
		}
		return asn1.Marshal(rs)
	}
	return nil, fmt.Errorf("%w: the agent signed in format %s", ErrAgent, sig.Format)
}

func (s *agentSigner) VerifySignature(sig, msg io.Reader, opts ...signature.VerifyOption) error {
	return s.verifier.VerifySignature(sig, msg, opts...)
}

var _ signature.SignerVerifier = (*agentSigner)(nil)

func newAgentIdentity(home, writer string, pub ssh.PublicKey, hk []byte) (*Identity, error) {
	ck, ok := pub.(ssh.CryptoPublicKey)
	if !ok {
		return nil, fmt.Errorf("key %s has no public key value", ssh.FingerprintSHA256(pub))
	}
	cpub := ck.CryptoPublicKey()
	switch cpub.(type) {
	case ed25519.PublicKey, *ecdsa.PublicKey:
	default:
		return nil, fmt.Errorf("key %s: %w", ssh.FingerprintSHA256(pub), CheckKeyType(pub))
	}
	v, err := signature.LoadVerifier(cpub, detachedHash(cpub))
	if err != nil {
		return nil, fmt.Errorf("load verifier: %w", err)
	}
	a := &agentKey{pub: pub}
	return finishIdentity(&Identity{
		Writer: writer, Home: home,
		signer: &agentSigner{a: a, pub: cpub, verifier: v},
		ssh:    agentSSHSigner{a}, hmacKey: hk, sshPub: pub, agent: a,
	}), nil
}

// InAgent reports whether the identity's signing key lives in ssh-agent.
func (id *Identity) InAgent() bool { return id.agent != nil }

// Ready checks that the identity can sign now: for a key in ssh-agent,
// that the agent runs and holds it (ErrAgent otherwise). A key file is
// always ready.
func (id *Identity) Ready() error {
	if id.agent == nil {
		return nil
	}
	if err := id.agent.ready(); err != nil {
		return fmt.Errorf("writer %s: %w", id.Writer, err)
	}
	return nil
}

// SelectAgentKey picks the writer key among the agent's: want is "" (the
// agent's one key of a writer kind), a fingerprint (SHA256:...), a public
// key file, or an authorized-key line.
func SelectAgentKey(want string) (ssh.PublicKey, error) {
	ks, err := AgentKeys()
	if err != nil {
		return nil, err
	}
	sock, _ := agentSocket()
	if want == "" {
		switch len(ks) {
		case 0:
			return nil, fmt.Errorf("%w: ssh-agent at %s holds no %s or %s key (add one with ssh-add, or ssh-add -s PKCS11_LIBRARY for a token; a locked agent lists none: ssh-add -X)", ErrAgent, sock, ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256)
		case 1:
			return ssh.ParsePublicKey(ks[0].Marshal())
		}
		var names []string
		for _, k := range ks {
			pk, _ := ssh.ParsePublicKey(k.Marshal())
			names = append(names, ssh.FingerprintSHA256(pk)+" "+k.Comment)
		}
		return nil, fmt.Errorf("ssh-agent at %s holds %d writer-capable keys; name one (--ssh-agent KEY, by fingerprint or public key file): %s", sock, len(ks), strings.Join(names, "; "))
	}
	var wantKey ssh.PublicKey
	if !strings.HasPrefix(want, "SHA256:") {
		line := []byte(want)
		if b, err := os.ReadFile(want); err == nil {
			line = b
		} else if !looksLikeKeyType(want) {
			return nil, fmt.Errorf("--ssh-agent %s: not a fingerprint (SHA256:...), a public key file or a key line: %v", want, err)
		}
		pk, _, _, _, err := ssh.ParseAuthorizedKey(line)
		if err != nil {
			return nil, fmt.Errorf("--ssh-agent %s: %v", want, err)
		}
		if err := CheckKeyType(pk); err != nil {
			return nil, fmt.Errorf("--ssh-agent %s: %w", want, err)
		}
		wantKey = pk
	}
	for _, k := range ks {
		pk, err := ssh.ParsePublicKey(k.Marshal())
		if err != nil {
			continue
		}
		if wantKey != nil && bytes.Equal(pk.Marshal(), wantKey.Marshal()) || wantKey == nil && ssh.FingerprintSHA256(pk) == want {
			return pk, nil
		}
	}
	return nil, fmt.Errorf("%w: ssh-agent at %s does not hold the key %s (ssh-add -l lists what it holds)", ErrAgent, sock, want)
}

// CreateAgent makes a new identity in home whose signing key is pub, held
// by the running ssh-agent, or loads the existing one (created reports
// which); an existing identity with another key is refused. The agent must
// sign with the key before anything is written.
func CreateAgent(home, writer string, pub ssh.PublicKey) (id *Identity, created bool, err error) {
	if existing, err := Load(home); err == nil {
		if writer != "" && writer != existing.Writer {
			return nil, false, fmt.Errorf("%s already holds writer %q (asked for %q); use another BERNSTEIN_HOME", home, existing.Writer, writer)
		}
		if !bytes.Equal(existing.PublicKey().Marshal(), pub.Marshal()) {
			return nil, false, fmt.Errorf("%s already holds writer %q with key %s, not %s; use another BERNSTEIN_HOME", home, existing.Writer, ssh.FingerprintSHA256(existing.PublicKey()), ssh.FingerprintSHA256(pub))
		}
		return existing, false, nil
	} else if !errors.Is(err, ErrNoIdentity) {
		return nil, false, err
	}
	if err := CheckKeyType(pub); err != nil {
		return nil, false, err
	}
	if writer == "" {
		writer = DefaultWriter()
	}
	if err := refs.ValidateWriter(writer); err != nil {
		return nil, false, err
	}
	hk := make([]byte, 32)
	if _, err := rand.Read(hk); err != nil {
		return nil, false, err
	}
	id, err = newAgentIdentity(home, writer, pub, hk)
	if err != nil {
		return nil, false, err
	}
	// A signature both ways before anything is written: the agent holds
	// the key, is unlocked, and its signatures verify.
	probe := []byte("bernstein: writer key check")
	sig, err := id.SignDetached(probe)
	if err != nil {
		return nil, false, err
	}
	if err := VerifyDetached(pub, probe, sig); err != nil {
		return nil, false, fmt.Errorf("%w: its signature does not verify: %v", ErrAgent, err)
	}
	if _, err := id.SignCommit(probe); err != nil {
		return nil, false, err
	}
	if err := MkdirDurable(home); err != nil {
		return nil, false, err
	}
	if err := writePrivate(filepath.Join(home, agentFile), ssh.MarshalAuthorizedKey(pub)); err != nil {
		return nil, false, err
	}
	if err := writePrivate(filepath.Join(home, hmacFile), []byte(fmt.Sprintf("%x\n", hk))); err != nil {
		return nil, false, err
	}
	if err := writePrivate(filepath.Join(home, writerFile), []byte(writer+"\n")); err != nil {
		return nil, false, err
	}
	if err := SyncDir(home); err != nil {
		return nil, false, err
	}
	return id, true, nil
}
