package keys

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/gitstore"
)

// git runs git in dir with no user or system configuration.
func git(t *testing.T, dir string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir, "LC_ALL=C")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func needGit(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"git", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// signedCommit builds a commit whose gpgsig header is id's SSH signature over
// the commit without it, exactly as bernstein writes spine and audit commits.
func signedCommit(t *testing.T, id *Identity, msg string) (signed, payload []byte) {
	t.Helper()
	c := gitstore.Commit{
		Tree:      gitstore.EmptyTree,
		Author:    gitstore.Ident(id.Writer, Principal(id.Writer), 1700000000),
		Committer: gitstore.Ident(id.Writer, Principal(id.Writer), 1700000000),
		Message:   []byte(msg),
	}
	payload = gitstore.EncodeCommit(c)
	c.Signature = mustSignCommit(t, id, payload)
	return gitstore.EncodeCommit(c), payload
}

func TestSignCommitVerifiesWithGit(t *testing.T) {
	needGit(t)
	repo := t.TempDir()
	if out, err := git(t, repo, nil, "init", "-q", "--bare", "."); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if out, err := git(t, repo, []byte{}, "hash-object", "-t", "tree", "-w", "--stdin"); err != nil || out != gitstore.EmptyTree.String() {
		t.Fatalf("empty tree: %q, %v", out, err)
	}
	id := newTestIdentity(t, "host-a")
	other := newTestIdentity(t, "host-b")
	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(allowed, []byte(AllowedSignersLine(id.Writer, id.AuthorizedKey())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherAllowed := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(otherAllowed, []byte(AllowedSignersLine(other.Writer, other.AuthorizedKey())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(obj []byte) string {
		t.Helper()
		oid, err := git(t, repo, obj, "hash-object", "-t", "commit", "-w", "--stdin")
		if err != nil {
			t.Fatalf("hash-object: %v\n%s", err, oid)
		}
		if want := gitstore.HashObject(gitstore.TypeCommit, obj).String(); oid != want {
			t.Fatalf("git stored %s, gitstore computes %s", oid, want)
		}
		return oid
	}
	verify := func(oid, allowedFile string) (string, error) {
		return git(t, repo, nil, "-c", "gpg.ssh.allowedSignersFile="+allowedFile, "verify-commit", "--raw", oid)
	}

	signed, payload := signedCommit(t, id, "artifact.posted proj:42\n\n{\"v\":1}\n")
	oid := write(signed)
	if out, err := verify(oid, allowed); err != nil {
		t.Fatalf("git verify-commit refused a bernstein signature: %v\n%s\ncommit:\n%s", err, out, signed)
	} else if !strings.Contains(out, "Good \"git\" signature for host-a@bernstein") {
		t.Errorf("git verify-commit output does not name the principal:\n%s", out)
	}
	if out, err := verify(oid, otherAllowed); err == nil {
		t.Errorf("git verify-commit accepted a key that is not in allowed_signers:\n%s", out)
	}
	// The signed payload is what git strips the gpgsig header to.
	parsed, gotPayload, err := gitstore.ParseCommit(signed)
	if err != nil || !bytes.Equal(gotPayload, payload) || len(parsed.Signature) == 0 {
		t.Fatalf("ParseCommit: %v", err)
	}

	// A signature moved onto another commit does not verify, for git nor for us.
	forged, forgedPayload := signedCommit(t, id, "artifact.posted proj:42\n\n{\"v\":2}\n")
	fc, _, _ := gitstore.ParseCommit(forged)
	fc.Signature = parsed.Signature
	forged = gitstore.EncodeCommit(fc)
	if out, err := verify(write(forged), allowed); err == nil {
		t.Errorf("git verify-commit accepted a signature over another payload:\n%s", out)
	}
	if err := VerifyCommit(forgedPayload, parsed.Signature, id.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("VerifyCommit(moved signature) = %v", err)
	}
}

func TestVerifyCommit(t *testing.T) {
	id := newTestIdentity(t, "w")
	other := newTestIdentity(t, "v")
	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a> 0 +0000\ncommitter a <a> 0 +0000\n\nmsg\n")
	sig := mustSignCommit(t, id, payload)
	if !bytes.HasPrefix(sig, []byte("-----BEGIN SSH SIGNATURE-----\n")) || !bytes.HasSuffix(bytes.TrimSpace(sig), []byte("-----END SSH SIGNATURE-----")) {
		t.Fatalf("signature is not armored SSHSIG:\n%s", sig)
	}
	if err := VerifyCommit(payload, sig, id.PublicKey()); err != nil {
		t.Fatalf("VerifyCommit = %v", err)
	}
	pub, parsed, err := CommitSigner(sig)
	if err != nil || !bytes.Equal(pub.Marshal(), id.PublicKey().Marshal()) || parsed.Namespace != Namespace || parsed.HashAlgorithm != sshsig.HashSHA512 {
		t.Fatalf("CommitSigner = %v, %+v", err, parsed)
	}
	modified := append(append([]byte(nil), payload...), ' ')
	if err := VerifyCommit(modified, sig, id.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("modified payload: %v", err)
	}
	if err := VerifyCommit(payload[:len(payload)-1], sig, id.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("truncated payload: %v", err)
	}
	if err := VerifyCommit(payload, sig, other.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("other key: %v", err)
	}
	for name, bad := range map[string][]byte{
		"garbage":   []byte("not a signature"),
		"empty":     nil,
		"truncated": sig[:len(sig)/2],
		"other sig": mustSignCommit(t, other, payload),
	} {
		if err := VerifyCommit(payload, bad, id.PublicKey()); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: VerifyCommit = %v", name, err)
		}
	}
	if _, _, err := CommitSigner([]byte("junk")); !errors.Is(err, ErrBadSignature) {
		t.Errorf("CommitSigner(junk) = %v", err)
	}
	// The same key signing in another namespace is not a commit signature.
	fileSig, err := sshsig.Sign(bytes.NewReader(payload), id.ssh, sshsig.HashSHA512, "file")
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyCommit(payload, sshsig.Armor(fileSig), id.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("namespace file accepted as a commit signature: %v", err)
	}
}

func authorizedKey(t *testing.T, pub any) string {
	t.Helper()
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func TestParseAllowedSigners(t *testing.T) {
	a := newTestIdentity(t, "host-a")
	b := newTestIdentity(t, "host-b")
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, rsaKey := authorizedKey(t, &ec.PublicKey), authorizedKey(t, &rk.PublicKey)
	file := strings.Join([]string{
		"# allowed signers for bernstein",
		"",
		AllowedSignersLine("host-a", a.AuthorizedKey()),
		"   # indented comment",
		`"host-b@bernstein,host-b,ops team@example.com" ` + b.AuthorizedKey() + " host-b key comment",
		`alice@example.com namespaces="git,file",valid-after="20240101" ` + ecKey,
		"bob@example.com\tNAMESPACES=\"file\"\t" + rsaKey + " bob",
		"  carol@example.com " + a.AuthorizedKey() + "  ",
		"",
	}, "\n")
	got, err := ParseAllowedSigners([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		principals []string
		namespaces []string
		key        string
	}{
		{[]string{"host-a@bernstein"}, []string{"git"}, a.AuthorizedKey()},
		{[]string{"host-b@bernstein", "host-b", "ops team@example.com"}, nil, b.AuthorizedKey()},
		{[]string{"alice@example.com"}, []string{"git", "file"}, ecKey},
		{[]string{"bob@example.com"}, []string{"file"}, rsaKey},
		{[]string{"carol@example.com"}, nil, a.AuthorizedKey()},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d signers, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if !reflect.DeepEqual(g.Principals, w.principals) || !reflect.DeepEqual(g.Namespaces, w.namespaces) {
			t.Errorf("line %d: principals %q namespaces %q, want %q %q", i, g.Principals, g.Namespaces, w.principals, w.namespaces)
		}
		if k := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(g.Key))); k != w.key {
			t.Errorf("line %d: key %s, want %s", i, k, w.key)
		}
	}

	// ssh-keygen reads the same file the same way.
	if _, err := exec.LookPath("ssh-keygen"); err == nil {
		dir := t.TempDir()
		path := filepath.Join(dir, "allowed_signers")
		os.WriteFile(path, []byte(file), 0o644)
		sigPath := filepath.Join(dir, "sig")
		os.WriteFile(sigPath, mustSignCommit(t, b, []byte("x")), 0o644)
		// stdout only: ssh-keygen 9.2 complains about blank lines on stderr.
		out, err := exec.Command("ssh-keygen", "-Y", "find-principals", "-s", sigPath, "-f", path).Output()
		if err != nil {
			t.Fatalf("ssh-keygen find-principals: %v\n%s", err, out)
		}
		if got := strings.Split(strings.TrimSpace(string(out)), "\n"); !reflect.DeepEqual(got, want[1].principals) {
			t.Errorf("ssh-keygen finds principals %q", got)
		}
	}

	bad := map[string]string{
		"cert-authority":         "*@example.com cert-authority " + a.AuthorizedKey(),
		"cert-authority with ns": `*@example.com namespaces="git",cert-authority ` + a.AuthorizedKey(),
		"CERT-AUTHORITY":         "x@y CERT-AUTHORITY " + a.AuthorizedKey(),
		"no key":                 "host-a@bernstein",
		"bad key data":           "host-a@bernstein ssh-ed25519 AAAAnotbase64!!",
		"options without key":    `host-a@bernstein namespaces="git"`,
		"unknown key type":       "host-a@bernstein ssh-foo AAAAC3NzaC1lZDI1NTE5",
	}
	for name, line := range bad {
		if got, err := ParseAllowedSigners([]byte("# ok\n" + AllowedSignersLine("host-a", a.AuthorizedKey()) + "\n" + line + "\n")); err == nil {
			t.Errorf("%s: accepted as %+v", name, got)
		} else if !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%s: error %q does not name line 3", name, err)
		}
	}
	if got, err := ParseAllowedSigners([]byte("\n# only comments\n\n")); err != nil || len(got) != 0 {
		t.Errorf("comments only: %+v, %v", got, err)
	}
}

func TestReadAllowedSigners(t *testing.T) {
	a := newTestIdentity(t, "host-a")
	path := filepath.Join(t.TempDir(), "allowed_signers")
	if _, err := ReadAllowedSigners(path); err == nil {
		t.Error("missing file accepted")
	}
	os.WriteFile(path, []byte(AllowedSignersLine("host-a", a.AuthorizedKey())+"\n"), 0o644)
	got, err := ReadAllowedSigners(path)
	if err != nil || len(got) != 1 || got[0].Principals[0] != "host-a@bernstein" {
		t.Fatalf("ReadAllowedSigners = %+v, %v", got, err)
	}
	os.WriteFile(path, []byte("x cert-authority "+a.AuthorizedKey()+"\n"), 0o644)
	if _, err := ReadAllowedSigners(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad file: %v, want the path named", err)
	}
}

func TestAllowedSignersLine(t *testing.T) {
	if got := AllowedSignersLine("w", "ssh-ed25519 AAAAX"); got != `w@bernstein namespaces="git" ssh-ed25519 AAAAX` {
		t.Errorf("AllowedSignersLine = %q", got)
	}
	if Principal("host-1") != "host-1@bernstein" {
		t.Errorf("Principal = %q", Principal("host-1"))
	}
}

func TestTrustSet(t *testing.T) {
	a := newTestIdentity(t, "host-a")
	b := newTestIdentity(t, "host-b")
	c := newTestIdentity(t, "host-c")
	local := newTestIdentity(t, "me")
	file := strings.Join([]string{
		AllowedSignersLine("host-a", a.AuthorizedKey()),
		"host-b " + b.AuthorizedKey(),                                 // bare writer name
		`host-c@bernstein namespaces="file" ` + c.AuthorizedKey(),     // not for git: ignored
		`"host-c@example.com,other@bernstein" ` + c.AuthorizedKey(),   // binds "host-c@example.com" and "other"
		`host-a@bernstein namespaces="file,git" ` + b.AuthorizedKey(), // second key for host-a
	}, "\n")
	pinned, err := ParseAllowedSigners([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	ts := NewTrustSet(pinned, local)
	cases := []struct {
		writer string
		id     *Identity
		want   bool
	}{
		{"host-a", a, true},
		{"host-a", b, true},
		{"host-a", c, false},
		{"host-b", b, true},
		{"host-b", a, false},
		{"host-c", c, false},
		{"other", c, true},
		{"host-c@example.com", c, true},
		{"me", local, true},
		{"me", a, false},
		{"nobody", a, false},
		{"host-a@bernstein", a, false},
	}
	for _, tc := range cases {
		if got := ts.IsTrusted(tc.writer, tc.id.PublicKey()); got != tc.want {
			t.Errorf("IsTrusted(%s, key of %s) = %v, want %v", tc.writer, tc.id.Writer, got, tc.want)
		}
	}
	if n := len(ts.Trusted("host-a")); n != 2 {
		t.Errorf("host-a has %d trusted keys, want 2", n)
	}
	var none *TrustSet
	if none.Trusted("host-a") != nil || none.IsTrusted("host-a", a.PublicKey()) {
		t.Error("a nil trust set trusts something")
	}
	empty := NewTrustSet(nil, nil)
	if empty.IsTrusted("me", local.PublicKey()) {
		t.Error("an empty trust set trusts the local key")
	}
}

func FuzzParseAllowedSigners(f *testing.F) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOq0zDAsBlF5Ir0sHxHHCdVZqSoPfEy7GHX0SXuHwlyb"
	for _, s := range []string{
		"w@bernstein namespaces=\"git\" " + key,
		"\"a,b c\" " + key + " comment",
		"# c\n\nx cert-authority " + key,
		"x namespaces=\"git,file\",valid-after=\"2024\" " + key,
		"\"unterminated " + key,
		"x \"" + key,
		"x,,y\t" + key,
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseAllowedSigners(data)
		if err != nil {
			return
		}
		for _, s := range got {
			if s.Key == nil || len(s.Principals) == 0 {
				t.Fatalf("signer without key or principals: %+v", s)
			}
		}
		ts := NewTrustSet(got, nil)
		for _, s := range got {
			trusted := false
			for _, p := range s.Principals {
				trusted = trusted || ts.IsTrusted(strings.TrimSuffix(p, "@bernstein"), s.Key)
			}
			if !trusted && (len(s.Namespaces) == 0 || contains(s.Namespaces, Namespace)) {
				t.Fatalf("pinned git key not trusted: %+v", s)
			}
		}
	})
}
