package keys

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// serveKeyring serves x/crypto's in-memory agent on a socket and points
// SSH_AUTH_SOCK at it.
func serveKeyring(t *testing.T, keys ...crypto.PrivateKey) agent.Agent {
	t.Helper()
	kr := agent.NewKeyring()
	for _, k := range keys {
		if err := kr.Add(agent.AddedKey{PrivateKey: k, Comment: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "kr")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); os.RemoveAll(dir) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); agent.ServeAgent(kr, c) }()
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)
	return kr
}

func sshPub(t *testing.T, k crypto.Signer) ssh.PublicKey {
	t.Helper()
	p, err := ssh.NewPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAgentIdentity: for an Ed25519 and an ECDSA P-256 key held by an
// agent, the identity's detached signatures verify with crypto's own
// verifiers (ed25519.Verify, ecdsa.VerifyASN1 over SHA-256), its commit
// signatures with sshsig, and Load finds the same key again.
func TestAgentIdentity(t *testing.T) {
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serveKeyring(t, edPriv, ecPriv)
	msg := []byte("a spine entry")
	for _, k := range []crypto.Signer{edPriv, ecPriv} {
		pub := sshPub(t, k)
		t.Run(pub.Type(), func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "home")
			id, created, err := CreateAgent(home, "hsm", pub)
			if err != nil || !created {
				t.Fatalf("CreateAgent: %v %v", created, err)
			}
			if _, err := os.Stat(filepath.Join(home, signingFile)); !os.IsNotExist(err) {
				t.Fatal("an agent identity wrote a private key file")
			}
			sig, err := id.SignDetached(msg)
			if err != nil {
				t.Fatal(err)
			}
			switch p := k.Public().(type) {
			case ed25519.PublicKey:
				if !ed25519.Verify(p, msg, sig) {
					t.Fatal("ed25519.Verify refuses the agent's detached signature")
				}
			case *ecdsa.PublicKey:
				d := sha256.Sum256(msg)
				if !ecdsa.VerifyASN1(p, d[:], sig) {
					t.Fatal("ecdsa.VerifyASN1 refuses the agent's detached signature")
				}
			}
			if err := VerifyDetached(pub, msg, sig); err != nil {
				t.Fatal(err)
			}
			if err := VerifyDetached(pub, append(msg, '.'), sig); err == nil {
				t.Fatal("VerifyDetached accepts a changed message")
			}
			armored, err := id.SignCommit(msg)
			if err != nil {
				t.Fatal(err)
			}
			s, err := sshsig.Unarmor(armored)
			if err != nil {
				t.Fatal(err)
			}
			if err := sshsig.Verify(bytes.NewReader(msg), s, pub, s.HashAlgorithm, Namespace); err != nil {
				t.Fatalf("sshsig refuses the agent's commit signature: %v", err)
			}
			if err := VerifyCommit(msg, armored, pub); err != nil {
				t.Fatal(err)
			}
			loaded, err := Load(home)
			if err != nil || !loaded.InAgent() || loaded.AuthorizedKey() != id.AuthorizedKey() {
				t.Fatalf("Load: %v", err)
			}
			if loaded.MAC(msg) != id.MAC(msg) {
				t.Fatal("Load has another HMAC key")
			}
		})
	}
}

// TestAgentRefusals: no agent, a locked one, and one without the key are
// ErrAgent, and CreateAgent writes nothing then.
func TestAgentRefusals(t *testing.T) {
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	kr := serveKeyring(t, ecPriv)
	pub := sshPub(t, ecPriv)
	home := filepath.Join(t.TempDir(), "home")

	if err := kr.Lock([]byte("pw")); err != nil {
		t.Fatal(err)
	}
	_, _, err := CreateAgent(home, "hsm", pub)
	if !errors.Is(err, ErrAgent) || !strings.Contains(err.Error(), "ssh-add -X") {
		t.Fatalf("locked agent: %v", err)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Fatal("CreateAgent with a locked agent wrote the home")
	}
	if _, err := SelectAgentKey(""); !errors.Is(err, ErrAgent) {
		t.Fatalf("SelectAgentKey on a locked agent: %v", err)
	}
	if err := kr.Unlock([]byte("pw")); err != nil {
		t.Fatal(err)
	}
	if got, err := SelectAgentKey(""); err != nil || !bytes.Equal(got.Marshal(), pub.Marshal()) {
		t.Fatalf("SelectAgentKey: %v", err)
	}
	if got, err := SelectAgentKey(ssh.FingerprintSHA256(pub)); err != nil || !bytes.Equal(got.Marshal(), pub.Marshal()) {
		t.Fatalf("SelectAgentKey by fingerprint: %v", err)
	}
	id, _, err := CreateAgent(home, "hsm", pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Ready(); err != nil {
		t.Fatal(err)
	}
	kr.Lock([]byte("pw"))
	if err := id.Ready(); !errors.Is(err, ErrAgent) {
		t.Fatalf("Ready on a locked agent: %v", err)
	}
	if _, err := id.SignDetached([]byte("x")); !errors.Is(err, ErrAgent) {
		t.Fatalf("SignDetached on a locked agent: %v", err)
	}
	t.Setenv("SSH_AUTH_SOCK", "")
	if err := id.Ready(); !errors.Is(err, ErrAgent) || !strings.Contains(err.Error(), "SSH_AUTH_SOCK is not set") {
		t.Fatalf("Ready without an agent: %v", err)
	}
}

// TestLoadECDSAKeyFile: an ECDSA P-256 key file is a writer key; P-384 is
// refused with one line.
func TestLoadECDSAKeyFile(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if _, _, err := Create(home, "ec"); err != nil {
		t.Fatal(err)
	}
	write := func(k crypto.PrivateKey) {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, signingFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	write(ec)
	id, err := Load(home)
	if err != nil || !strings.HasPrefix(id.AuthorizedKey(), "ecdsa-sha2-nistp256 ") {
		t.Fatalf("Load of a P-256 key: %v", err)
	}
	sig, err := id.SignDetached([]byte("m"))
	if err != nil {
		t.Fatal(err)
	}
	d := sha256.Sum256([]byte("m"))
	if !ecdsa.VerifyASN1(&ec.PublicKey, d[:], sig) {
		t.Fatal("ecdsa.VerifyASN1 refuses the file key's detached signature")
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	write(p384)
	if _, err := Load(home); err == nil || !strings.Contains(err.Error(), "P-384") {
		t.Fatalf("Load of a P-384 key: %v", err)
	}
}
