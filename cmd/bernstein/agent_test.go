package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/internal/agenttest"
	"github.com/bernstein/bernstein/keys"
)

// startAgent runs a real ssh-agent holding an ECDSA P-256 key on a SoftHSM
// token, loaded with `ssh-add -s` (as a hardware token's key would be), and
// points SSH_AUTH_SOCK at it.
func startAgent(t *testing.T) (*agenttest.Agent, string) {
	t.Helper()
	if m := agenttest.Missing(); m != "" {
		t.Fatalf("missing %s (scripts/deps.sh installs softhsm2 and opensc)", m)
	}
	// A short folder: a unix socket path is at most 108 bytes.
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	a, err := agenttest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	pub, err := a.AddTokenKey("writer")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_AUTH_SOCK", a.Sock)
	return a, pub
}

// refState lists every ref and every pack of the repository: what a write
// would change.
func refState(t *testing.T, e *cliEnv) string {
	t.Helper()
	refs := e.git("for-each-ref", "--format=%(refname) %(objectname)")
	packs, _ := filepath.Glob(filepath.Join(e.repo, ".git", "objects", "pack", "*"))
	sort.Strings(packs)
	return refs + strings.Join(packs, "\n")
}

// TestSSHAgentWriter: a writer whose key lives on a token behind ssh-agent
// posts, verifies, passes git verify-commit, pushes through a guarded remote
// and is pinned by a clone; a missing or locked agent is one error line
// with nothing written.
func TestSSHAgentWriter(t *testing.T) {
	agent, pub := startAgent(t)
	dir := t.TempDir()
	t.Setenv("BERNSTEIN_HOME", filepath.Join(dir, "home"))
	t.Setenv("HOME", dir)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	for _, v := range []string{"BERNSTEIN_REPO", "BERNSTEIN_AGENT", "BERNSTEIN_CLAIM_TOKEN", "BERNSTEIN_ALLOWED_SIGNERS"} {
		t.Setenv(v, "")
	}
	e := &cliEnv{t: t, repo: filepath.Join(dir, "repo")}

	// No agent: one line, and neither the repository nor the home exists.
	t.Setenv("SSH_AUTH_SOCK", "")
	r := e.want(1, "init", "--ssh-agent", "--writer", "hsm")
	oneErrorLine(t, []string{"init", "--ssh-agent"}, r)
	if !strings.Contains(r.err, "SSH_AUTH_SOCK is not set") {
		t.Fatalf("init without an agent: %q", r.err)
	}
	for _, p := range []string{e.repo, filepath.Join(dir, "home")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("init without an agent wrote %s", p)
		}
	}
	t.Setenv("SSH_AUTH_SOCK", agent.Sock)

	var res struct {
		PublicKey string `json:"public_key"`
		SSHAgent  bool   `json:"ssh_agent"`
	}
	if err := json.Unmarshal([]byte(e.ok("init", "--ssh-agent", "--writer", "hsm", "--output-json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.PublicKey != pub || !res.SSHAgent {
		t.Fatalf("init --ssh-agent: %+v, want the token's key %s", res, pub)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "home"))
	for _, de := range ents {
		if de.Name() == "signing.pem" {
			t.Fatal("init --ssh-agent wrote a private key file")
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "home", "hmac.key")); err != nil || len(b) < 64 {
		t.Fatalf("the HMAC key stays in BERNSTEIN_HOME: %v", err)
	}

	e.commit("base")
	token := e.claimed("T-1", "agent-1", "--title", "token")
	e.post("T-1", "summary", "agent-1", token, "--type", "report", "--body", "signed on a token")
	e.ok("task", "start", "T-1")
	e.ok("checkpoint", "T-1", "--commit", "HEAD")
	e.ok("task", "complete", "T-1")
	out := e.ok("audit", "verify", "--strict")
	if !strings.Contains(out, "verified: everything holds") {
		t.Fatalf("audit verify: %s", out)
	}
	if list := e.ok("artifact", "list", "T-1"); !strings.Contains(list, "\tverified\t") {
		t.Fatalf("artifact list: %s", list)
	}

	// Stock git checks the token's signatures, against the published key.
	signers := filepath.Join(dir, "signers")
	keyRef := strings.TrimSpace(e.git("for-each-ref", "--format=%(refname)", "refs/bernstein/writers/hsm.*"))
	if err := os.WriteFile(signers, []byte(e.git("show", keyRef+":allowed_signers")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"refs/bernstein/journal/T-1", "refs/bernstein/ledger/T-1", "refs/bernstein/spine/hsm", "refs/bernstein/audit/hsm", keyRef, "refs/bernstein/repository"} {
		cmd := exec.Command("git", "-C", e.repo, "-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", ref)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "with ECDSA key") {
			t.Fatalf("git verify-commit %s: %v\n%s", ref, err, out)
		}
	}

	// A locked agent lists no key: one line, nothing written.
	before := refState(t, e)
	if err := agent.Lock(); err != nil {
		t.Fatal(err)
	}
	args := []string{"artifact", "post", "T-1", "more", "--type", "report", "--body", "x", "--agent", "agent-1", "--claim-token", token}
	r = e.want(1, "task", "create", "T-2", "--title", "locked")
	oneErrorLine(t, args, r)
	if !strings.Contains(r.err, "does not hold the writer's key") || !strings.Contains(r.err, "ssh-add -X") {
		t.Fatalf("locked agent: %q", r.err)
	}
	if after := refState(t, e); after != before {
		t.Fatalf("a write with a locked agent changed the repository:\n%s\n---\n%s", before, after)
	}
	if err := agent.Unlock(); err != nil {
		t.Fatal(err)
	}

	// A push through a guarded remote: the guard verifies every ECDSA
	// signature and pins the key on first use.
	remote, pinned := guardedRemote(t)
	e.git("remote", "add", "origin", "file://"+remote)
	e.ok("remote", "setup", "origin")
	e.ok("push")
	if list := pinned(); !regexp.MustCompile(`(?m)^hsm\tSHA256:\S+\t\S+\tpinned$`).MatchString(list) {
		t.Fatalf("the guard did not pin hsm's key:\n%s", list)
	}

	// A clone on another host pins the key and verifies everything.
	clone := filepath.Join(dir, "clone")
	t.Setenv("BERNSTEIN_HOME", filepath.Join(dir, "reader-home"))
	t.Setenv("SSH_AUTH_SOCK", "")
	c := &cliEnv{t: t, repo: clone}
	runOK := func(args ...string) string {
		t.Helper()
		r := runBare(args...)
		if r.code != 0 {
			t.Fatalf("%v exited %d: %s%s", args, r.code, r.out, r.err)
		}
		return r.out
	}
	runOK("clone", "file://"+remote, clone)
	if out := c.want(0, "keys", "list").out; !strings.Contains(out, "unpinned") {
		t.Fatalf("keys list before the pin: %s", out)
	}
	c.ok("keys", "pin", "hsm")
	out = c.ok("audit", "verify", "--strict")
	if !strings.Contains(out, "verified: everything holds") {
		t.Fatalf("clone: audit verify: %s", out)
	}
	if show := c.ok("artifact", "show", "T-1", "summary", "--strict"); !strings.Contains(show, "signed on a token") {
		t.Fatalf("clone: artifact show: %s", show)
	}

	// The agent gone: one line, nothing written.
	t.Setenv("BERNSTEIN_HOME", filepath.Join(dir, "home"))
	t.Setenv("SSH_AUTH_SOCK", agent.Sock)
	agent.Stop()
	before = refState(t, e)
	r = e.want(1, args...)
	oneErrorLine(t, args, r)
	if !strings.Contains(r.err, "ssh-agent at "+agent.Sock) {
		t.Fatalf("stopped agent: %q", r.err)
	}
	if after := refState(t, e); after != before {
		t.Fatalf("a post without the agent changed the repository")
	}
}

// TestECDSAWriterBesideEd25519: an ECDSA P-256 writer and an Ed25519 one
// in one repository; audit verify checks both kinds in one batch (the
// ECDSA signatures fall back from the batch ed25519 verification) and
// calls a changed ECDSA signature tampered.
func TestECDSAWriterBesideEd25519(t *testing.T) {
	e := newCLIEnv(t)
	e.commit("base")
	tokA := e.claimed("T-A", "agent-a")
	e.post("T-A", "notes", "agent-a", tokA, "--type", "report", "--body", "by ed25519")
	homeA := os.Getenv("BERNSTEIN_HOME")

	homeB := filepath.Join(t.TempDir(), "home-b")
	if _, _, err := keys.Create(homeB, "ecw"); err != nil {
		t.Fatal(err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ec)
	if err := os.WriteFile(filepath.Join(homeB, "signing.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BERNSTEIN_HOME", homeB)
	if out := e.ok("init"); !strings.Contains(out, "public key: ecdsa-sha2-nistp256 ") {
		t.Fatalf("init with an ECDSA key: %s", out)
	}
	e.ok("keys", "pin", "cli-writer")
	tokB := e.claimed("T-B", "agent-b")
	e.post("T-B", "notes", "agent-b", tokB, "--type", "report", "--body", "by ecdsa")
	e.post("T-B", "notes", "agent-b", tokB, "--type", "report", "--body", "by ecdsa again")

	t.Setenv("BERNSTEIN_HOME", homeA)
	e.ok("keys", "pin", "ecw")
	if out := e.ok("audit", "verify", "--strict"); !strings.Contains(out, "verified: everything holds") {
		t.Fatalf("audit verify: %s", out)
	}

	// One base64 character of the ECDSA signature of T-B's head changed:
	// in the line before the armour's last, which encodes the signature's
	// (r, s), not the key it claims.
	e.forgeHead("refs/bernstein/journal/T-B", func(c string) string {
		lines := strings.Split(c, "\n")
		for i, l := range lines {
			if l == " -----END SSH SIGNATURE-----" {
				b := []byte(lines[i-2])
				if b[20] == 'A' {
					b[20] = 'B'
				} else {
					b[20] = 'A'
				}
				lines[i-2] = string(b)
				break
			}
		}
		return strings.Join(lines, "\n")
	})
	r := e.want(1, "audit", "verify")
	if !strings.Contains(r.out+r.err, "row_signature") || !strings.Contains(r.out+r.err, "T-B") {
		t.Fatalf("audit verify of a changed ECDSA signature:\n%s%s", r.out, r.err)
	}
}
