package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/attest"
	"github.com/bernstein/bernstein/keys"
)

// cosignVersion is the cosign the opt-in test builds from the Go module
// proxy (minutes of CPU, so once: the binary is kept in the user's cache).
const cosignVersion = "v3.1.3"

func cosignBinary(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "bernstein", "cosign-"+cosignVersion)
	bin := filepath.Join(dir, "cosign")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "install", "github.com/sigstore/cosign/v3/cmd/cosign@"+cosignVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cosign %s: %v\n%s", cosignVersion, err, out)
	}
	return bin
}

// TestCosignVerifiesAttestation (opt-in: BERNSTEIN_COSIGN=1): cosign's
// verify-blob-attestation, with the writer's ECDSA key as PEM (converted by
// ssh-keygen) and no transparency log, accepts `artifact attest`'s envelope
// for the version's payload and refuses a changed byte.
func TestCosignVerifiesAttestation(t *testing.T) {
	if os.Getenv("BERNSTEIN_COSIGN") != "1" {
		t.Skip("opt-in: BERNSTEIN_COSIGN=1 builds cosign " + cosignVersion + " (slow, once) and runs it")
	}
	cosign := cosignBinary(t)
	e := newCLIEnv(t)
	home := filepath.Join(t.TempDir(), "home-ec")
	if _, _, err := keys.Create(home, "ecw"); err != nil {
		t.Fatal(err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ec)
	if err := os.WriteFile(filepath.Join(home, "signing.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BERNSTEIN_HOME", home)
	e.ok("init")
	e.commit("base")
	tok := e.claimed("T-1", "agent-1")
	e.post("T-1", "notes", "agent-1", tok, "--type", "report", "--body", "checked by cosign")

	dir := t.TempDir()
	envelope := filepath.Join(dir, "notes.intoto.json")
	e.ok("artifact", "attest", "T-1", "notes", "-o", envelope)
	payload := filepath.Join(dir, "notes.json")
	commit := strings.TrimSpace(e.git("rev-parse", "refs/bernstein/journal/T-1"))
	if err := os.WriteFile(payload, []byte(e.git("cat-file", "blob", commit+":artifacts/notes/v1.json")), 0o644); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "writer.pub")
	if err := os.WriteFile(pub, []byte(e.git("show", strings.TrimSpace(e.git("for-each-ref", "--format=%(refname)", "refs/bernstein/writers/ecw.*"))+":ecw.pub")), 0o644); err != nil {
		t.Fatal(err)
	}
	pemOut, err := exec.Command("ssh-keygen", "-e", "-m", "PKCS8", "-f", pub).Output()
	if err != nil {
		t.Fatal(err)
	}
	pemFile := filepath.Join(dir, "writer.pem")
	var verifyWith func(env, blob string) (string, error)
	os.WriteFile(pemFile, pemOut, 0o644)

	verifyBlob := func(blob string) (string, error) {
		return verifyWith(envelope, blob)
	}
	verifyWith = func(env, blob string) (string, error) {
		cmd := exec.Command(cosign, "verify-blob-attestation", "--key", pemFile, "--insecure-ignore-tlog",
			"--type", attest.ArtifactPredicateType, "--signature", env, blob)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := verifyBlob(payload); err != nil {
		t.Fatalf("cosign refuses the attestation: %v\n%s", err, out)
	}
	changed := filepath.Join(dir, "changed.json")
	b, _ := os.ReadFile(payload)
	b[len(b)/2] ^= 1
	os.WriteFile(changed, b, 0o644)
	if out, err := verifyBlob(changed); err == nil {
		t.Fatalf("cosign accepts a changed payload:\n%s", out)
	}
	// One byte of the signature changed.
	var env map[string]any
	eb, _ := os.ReadFile(envelope)
	if err := json.Unmarshal(eb, &env); err != nil {
		t.Fatal(err)
	}
	sigs := env["signatures"].([]any)
	sig, _ := base64.StdEncoding.DecodeString(sigs[0].(map[string]any)["sig"].(string))
	sig[len(sig)/2] ^= 1
	sigs[0].(map[string]any)["sig"] = base64.StdEncoding.EncodeToString(sig)
	eb, _ = json.Marshal(env)
	badEnv := filepath.Join(dir, "bad.intoto.json")
	os.WriteFile(badEnv, eb, 0o644)
	if out, err := verifyWith(badEnv, payload); err == nil {
		t.Fatalf("cosign accepts a changed signature:\n%s", out)
	}
}
