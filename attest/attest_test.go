package attest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"
)

// pae is DSSE's pre-authentication encoding, written here from the DSSE
// protocol's definition ("DSSEv1" SP LEN(type) SP type SP LEN(body) SP body),
// not from the library under test.
func pae(typ string, body []byte) []byte {
	return append([]byte(fmt.Sprintf("DSSEv1 %d %s %d ", len(typ), typ, len(body))), body...)
}

// TestSignedStatement: the statement is the in-toto Statement v1 layout, the
// envelope's signature is Ed25519 over DSSE's PAE (checked with
// crypto/ed25519), the bundle carries the same envelope, and Verify refuses
// a changed byte.
func TestSignedStatement(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	sv, err := signature.LoadSignerVerifier(priv, crypto.Hash(0))
	if err != nil {
		t.Fatal(err)
	}
	st, err := Statement([]Subject{{Name: "bernstein://T/k/v1", SHA256: strings.Repeat("ab", 32), GitBlob: strings.Repeat("cd", 20)}},
		ArtifactPredicateType, map[string]any{"v": 1, "n": 12345678901, "s": "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"_type":"https://in-toto.io/Statement/v1","predicate":{"n":12345678901,"s":"x","v":1},"predicateType":"` + ArtifactPredicateType +
		`","subject":[{"digest":{"gitBlob":"` + strings.Repeat("cd", 20) + `","sha256":"` + strings.Repeat("ab", 32) + `"},"name":"bernstein://T/k/v1"}]}`
	if string(st) != want {
		t.Fatalf("statement:\n%s\nwant\n%s", st, want)
	}
	env, err := Sign(sv, st)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			KeyID string `json:"keyid"`
			Sig   string `json:"sig"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	body, _ := base64.StdEncoding.DecodeString(e.Payload)
	sig, _ := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	sshPub, _ := ssh.NewPublicKey(pub)
	if e.PayloadType != PayloadType || string(body) != string(st) || e.Signatures[0].KeyID != ssh.FingerprintSHA256(sshPub) || !ed25519.Verify(pub, pae(PayloadType, body), sig) {
		t.Fatalf("envelope: %s", env)
	}
	if got, err := Verify(env, pub, crypto.Hash(0)); err != nil || string(got) != string(st) {
		t.Fatalf("Verify: %v", err)
	}
	bad := strings.Replace(string(env), e.Payload[:8], "AAAAAAAA", 1)
	if _, err := Verify([]byte(bad), pub, crypto.Hash(0)); err == nil {
		t.Fatal("Verify accepts a changed payload")
	}
	b, err := Bundle(env, "SHA256:key")
	if err != nil {
		t.Fatal(err)
	}
	var bd struct {
		MediaType            string `json:"mediaType"`
		VerificationMaterial struct {
			PublicKey   struct{ Hint string } `json:"publicKey"`
			TlogEntries []any                 `json:"tlogEntries"`
		} `json:"verificationMaterial"`
		DsseEnvelope struct {
			Payload    string `json:"payload"`
			Signatures []struct {
				Sig string `json:"sig"`
			} `json:"signatures"`
		} `json:"dsseEnvelope"`
	}
	if err := json.Unmarshal(b, &bd); err != nil {
		t.Fatal(err)
	}
	if bd.MediaType != BundleMediaType || bd.VerificationMaterial.PublicKey.Hint != "SHA256:key" || bd.VerificationMaterial.TlogEntries == nil ||
		len(bd.VerificationMaterial.TlogEntries) != 0 || bd.DsseEnvelope.Payload != e.Payload || bd.DsseEnvelope.Signatures[0].Sig != e.Signatures[0].Sig {
		t.Fatalf("bundle: %s", b)
	}
	if _, err := Statement(nil, ArtifactPredicateType, map[string]any{"v": 1}); err == nil {
		t.Fatal("a statement without a subject")
	}
}
