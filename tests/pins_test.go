package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
)

// secondHome initialises another writer identity on the fixture's
// repository and returns options for it: another host reading (and writing
// to) the same history.
func (f *fixture) secondHome(writer string) bernstein.Options {
	f.t.Helper()
	o := bernstein.Options{Repo: f.dir, Home: filepath.Join(f.t.TempDir(), "home-"+writer)}
	if _, err := bernstein.Init(o, writer); err != nil {
		f.t.Fatalf("init %s: %v", writer, err)
	}
	return o
}

func openWith(t *testing.T, o bernstein.Options) *bernstein.Store {
	t.Helper()
	s, err := bernstein.Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func trustOf(t *testing.T, s *bernstein.Store, writer string) bernstein.WriterTrust {
	t.Helper()
	wks, err := s.WriterKeys()
	if err != nil {
		t.Fatalf("WriterKeys: %v", err)
	}
	for _, wk := range wks {
		if wk.Writer == writer {
			return wk
		}
	}
	t.Fatalf("writer %s not listed in %+v", writer, wks)
	return bernstein.WriterTrust{}
}

// trustOfKey is the trust s gives the key with fingerprint fp published
// under writer's name.
func trustOfKey(t *testing.T, s *bernstein.Store, writer, fp string) bernstein.WriterTrust {
	t.Helper()
	wks, err := s.WriterKeys()
	if err != nil {
		t.Fatalf("WriterKeys: %v", err)
	}
	for _, wk := range wks {
		if wk.Writer == writer && wk.Fingerprint == fp {
			return wk
		}
	}
	t.Fatalf("writer %s's key %s not listed in %+v", writer, fp, wks)
	return bernstein.WriterTrust{}
}

// publishedKeyLine reads a writer's published key with plain git.
func (f *fixture) publishedKeyLine(writer string) string {
	f.t.Helper()
	return strings.TrimSpace(f.git("show", f.writerRef(writer)+":"+writer+".pub"))
}

// sshKeygenFingerprint computes a public key file's SHA256 fingerprint
// with ssh-keygen: an independent source.
func sshKeygenFingerprint(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", path).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -l %s: %v", path, err)
	}
	fields := strings.Fields(string(out))
	if len(fields) < 2 || !strings.HasPrefix(fields[1], "SHA256:") {
		t.Fatalf("ssh-keygen -l: %q", out)
	}
	return fields[1]
}

// cliWith runs the binary as the host whose BERNSTEIN_HOME is home.
func (f *fixture) cliWith(home, stdin string, args ...string) (string, string, int) {
	f.t.Helper()
	g := *f
	g.home = home
	return g.cli(stdin, args...)
}

// A reader on another host trusts a writer once it pins the writer's key,
// and not before: the published key alone proves nothing. The pin is a
// line of git's allowed_signers format in the pin file, and a Store already
// open sees a pin made by another process.
func TestPinTrustsAWriter(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T-1", "agent")
	f.post(s, "T-1", "summary", "agent", tok, report("# done"))

	ro := f.secondHome("reader")
	reader := openWith(t, ro)
	wk := trustOf(t, reader, "test-writer")
	want := sshKeygenFingerprint(t, writeTemp(t, f.publishedKeyLine("test-writer")+"\n"))
	if wk.Trust != bernstein.TrustUnpinned || wk.Fingerprint != want || wk.Source != f.writerRef("test-writer") {
		t.Fatalf("before pinning: %+v, want unpinned %s from %s", wk, want, f.writerRef("test-writer"))
	}
	if own := trustOf(t, reader, "reader"); own.Trust != bernstein.TrustOwn {
		t.Fatalf("own writer: %+v", own)
	}
	rep, err := reader.AuditVerify(bernstein.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tampered() || rep.Verified || rep.Counts.Unverifiable == 0 {
		t.Fatalf("unpinned writer: tampered=%v verified=%v unverifiable=%d, want unverifiable, not tampered", rep.Tampered(), rep.Verified, rep.Counts.Unverifiable)
	}

	// Pin from a second Store (another process, as far as the pin file
	// goes): the first one sees it on its next read.
	pinner := openWith(t, bernstein.Options{Repo: f.dir, Home: ro.Home})
	done, err := pinner.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].Fingerprint != want {
		t.Fatalf("pinned %+v, want test-writer %s", done, want)
	}
	b, err := os.ReadFile(pinner.PinFile())
	if err != nil {
		t.Fatal(err)
	}
	line := `test-writer@bernstein namespaces="git" ` + f.publishedKeyLine("test-writer")
	if !containsLine(string(b), line) {
		t.Fatalf("pin file %s:\n%s\nwant the line %q", pinner.PinFile(), b, line)
	}
	if fi, err := os.Stat(pinner.PinFile()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("pin file mode: %v %v", fi.Mode(), err)
	}
	if !strings.HasPrefix(pinner.PinFile(), filepath.Join(ro.Home, "pins")+string(filepath.Separator)) {
		t.Fatalf("pin file %s is not under BERNSTEIN_HOME/pins", pinner.PinFile())
	}
	rep, err = reader.AuditVerify(bernstein.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Verified {
		t.Fatalf("after pinning: not verified: %s (%+v)", rep.Note, rep.Counts)
	}
	if wk := trustOf(t, reader, "test-writer"); wk.Trust != bernstein.TrustPinned {
		t.Fatalf("after pinning: %+v", wk)
	}
	// The pin file also serves plain git: verify-commit with it checks the
	// writer's spine commit.
	spine := strings.TrimSpace(f.git("rev-parse", "refs/bernstein/spine/test-writer"))
	f.git("-c", "gpg.ssh.allowedSignersFile="+pinner.PinFile(), "verify-commit", spine)

	// Pinning again changes nothing; unpinning takes the trust away.
	before, _ := os.ReadFile(pinner.PinFile())
	if _, err := pinner.PinKeys(bernstein.PinOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	if err := pinner.UnpinKeys([]string{"test-writer"}); err != nil {
		t.Fatal(err)
	}
	if wk := trustOf(t, reader, "test-writer"); wk.Trust != bernstein.TrustUnpinned {
		t.Fatalf("after unpinning: %+v (pin file before: %s)", wk, before)
	}
	if err := pinner.UnpinKeys([]string{"test-writer"}); !errors.Is(err, bernstein.ErrNotPinned) {
		t.Fatalf("unpin twice: %v, want ErrNotPinned", err)
	}
}

// A key published under a pinned writer's name by someone else is loud and
// grants nothing: the listing says CHANGED, a pin of it is refused without
// --replace, and the history the real key signed still verifies.
func TestChangedKeyIsLoudAndGrantsNothing(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T-1", "agent")
	f.post(s, "T-1", "summary", "agent", tok, report("# done"))
	ro := f.secondHome("reader")
	reader := openWith(t, ro)
	if _, err := reader.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}}); err != nil {
		t.Fatal(err)
	}
	pinned := f.publishedKeyLine("test-writer")
	pinnedFP := sshKeygenFingerprint(t, writeTemp(t, pinned+"\n"))

	// The attacker (push access, not the writer's key) publishes a key of
	// its own under test-writer's name, with plain git: from storage format
	// 2 on a ref of its own, named for its key, beside the writer's.
	attackerHome := filepath.Join(t.TempDir(), "attacker")
	other := bernstein.Options{Repo: filepath.Join(t.TempDir(), "scratch"), Home: attackerHome}
	if _, err := bernstein.Init(other, "test-writer"); err != nil {
		t.Fatal(err)
	}
	scratch := &fixture{t: t, dir: other.Repo}
	attackerRef := scratch.writerRef("test-writer")
	f.git("fetch", "-q", other.Repo, attackerRef+":"+attackerRef)
	newKey := strings.TrimSpace(f.git("show", attackerRef+":test-writer.pub"))
	newFP := sshKeygenFingerprint(t, writeTemp(t, newKey+"\n"))
	if newKey == pinned {
		t.Fatal("the scratch writer has the same key")
	}

	if wk := trustOfKey(t, reader, "test-writer", pinnedFP); wk.Trust != bernstein.TrustPinned {
		t.Fatalf("the pinned key after another was published under its name: %+v", wk)
	}
	if wk := trustOfKey(t, reader, "test-writer", newFP); wk.Trust != bernstein.TrustChanged || len(wk.Pinned) != 1 || wk.Pinned[0] != pinnedFP {
		t.Fatalf("the attacker's key: %+v, want CHANGED with the writer's key pinned", wk)
	}
	// The writer itself sees another key under its name.
	if own := trustOfKey(t, s, "test-writer", newFP); own.Trust != bernstein.TrustChanged {
		t.Fatalf("the writer's own view of the other key: %+v, want CHANGED", own)
	}
	// Pinning again keeps the pinned key (a fetch, push or clone never
	// replaces it; neither does pin --all).
	if _, err := reader.PinKeys(bernstein.PinOptions{All: true}); err != nil {
		t.Fatalf("pin --all with a second key under a pinned writer's name: %v", err)
	}
	if b, _ := os.ReadFile(reader.PinFile()); !containsLine(string(b), `test-writer@bernstein namespaces="git" `+pinned) || strings.Contains(string(b), newKey) {
		t.Fatalf("pin --all changed the pinned key:\n%s", b)
	}
	// A reader that pinned nobody must choose: both keys are listed.
	fresh := openWith(t, bernstein.Options{Repo: f.dir, Home: filepath.Join(t.TempDir(), "fresh")})
	_, err := fresh.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}})
	if !errors.Is(err, bernstein.ErrAmbiguous) || !strings.Contains(err.Error(), pinnedFP) || !strings.Contains(err.Error(), newFP) || !strings.Contains(err.Error(), "--key") {
		t.Fatalf("pin of a name with two keys: %v, want ErrAmbiguous listing both fingerprints", err)
	}
	if _, err := fresh.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}, Key: pinnedFP}); err != nil {
		t.Fatalf("pin by fingerprint: %v", err)
	}
	rep, err := reader.AuditVerify(bernstein.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Verified {
		t.Fatalf("the other key broke verification of the real history: %s %+v", rep.Note, rep.Failures)
	}

	// The CLI prints it on stderr, as ssh does a changed host key.
	stdout, stderr, code := f.cliWith(ro.Home, "", "keys", "list")
	if code != 0 || !strings.Contains(stdout, "CHANGED") || !strings.Contains(stderr, "WARNING: the published key of writer test-writer CHANGED") {
		t.Fatalf("keys list: %d\n%s\n%s", code, stdout, stderr)
	}

	// With --replace (and the key named) the other key is pinned, and then
	// the real writer's signatures no longer verify: pinning decides.
	if _, err := reader.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}, Replace: true}); !errors.Is(err, bernstein.ErrAmbiguous) {
		t.Fatalf("--replace with two keys published and none named: %v", err)
	}
	if _, err := reader.PinKeys(bernstein.PinOptions{Writers: []string{"test-writer"}, Replace: true, Key: newFP}); err != nil {
		t.Fatal(err)
	}
	rep, err = reader.AuditVerify(bernstein.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Tampered() || !strings.Contains(fmt.Sprint(rep.Failures), "not the pinned key of writer test-writer") {
		t.Fatalf("commits by a key that is no longer pinned: %+v", rep.Failures)
	}
}

// Keys handed over out of band: --from reads an allowed_signers file, skips
// entries for other namespaces and refuses a writer it does not name.
func TestPinFromFile(t *testing.T) {
	f := newFixture(t)
	reader := openWith(t, f.secondHome("reader"))
	key := f.publishedKeyLine("test-writer")
	file := writeTemp(t, "# handed over by test-writer's owner\n"+
		`other@bernstein namespaces="file" `+key+"\n"+
		"test-writer "+key+"\n")
	done, err := reader.PinKeys(bernstein.PinOptions{All: true, From: file})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].Writer != "test-writer" {
		t.Fatalf("pinned %+v, want test-writer only (other's entry is for another namespace)", done)
	}
	_, err = reader.PinKeys(bernstein.PinOptions{Writers: []string{"nobody"}, From: file})
	if err == nil || !strings.Contains(err.Error(), "nobody") || !strings.Contains(err.Error(), file) {
		t.Fatalf("pin of a writer the file does not name: %v", err)
	}
	if _, err := reader.PinKeys(bernstein.PinOptions{Writers: []string{"Bad Name"}}); err == nil {
		t.Fatal("an invalid writer id was pinned")
	}
}

// Pins made at once by several processes are all kept.
func TestConcurrentPinsAreAllKept(t *testing.T) {
	f := newFixture(t)
	writers := []string{"w-a", "w-b", "w-c", "w-d", "w-e", "w-f"}
	for _, w := range writers {
		f.secondHome(w)
	}
	home := f.secondHome("reader").Home
	var wg sync.WaitGroup
	errs := make(chan error, len(writers))
	for _, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := bernstein.Open(bernstein.Options{Repo: f.dir, Home: home})
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			_, err = s.PinKeys(bernstein.PinOptions{Writers: []string{w}})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	reader := openWith(t, bernstein.Options{Repo: f.dir, Home: home})
	for _, w := range writers {
		if wk := trustOf(t, reader, w); wk.Trust != bernstein.TrustPinned {
			t.Errorf("writer %s: %+v", w, wk)
		}
	}
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A long-running reader (the HTTP server holds one Store) follows pins made
// by another process at once: a claim by a newly pinned writer is found by
// its token and honoured, and after an unpin it no longer is, with no ref
// having moved in between.
func TestPinTakesEffectInAnOpenStore(t *testing.T) {
	f := newFixture(t)
	bo := f.secondHome("host-b")
	b := openWith(t, bo)
	tok := f.claimed(b, "T-B", "agent-b")

	server := f.open() // test-writer, which has not pinned host-b
	// The refs have settled (their modification times a minute back), so
	// that the token index trusts its signal and would answer without
	// listing the ledgers again.
	for _, p := range []string{"packed-refs", "refs/bernstein/ledger", "refs/bernstein", "refs/bernstein/writers"} {
		old := time.Now().Add(-time.Minute)
		if err := os.Chtimes(filepath.Join(f.dir, ".git", filepath.FromSlash(p)), old, old); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if _, err := server.ClaimByToken(tok); err == nil {
		t.Fatal("a claim by an unpinned writer was honoured")
	}
	_, err := server.Post(bernstein.PostRequest{Task: "T-B", Key: "k", Agent: "agent-b", ClaimToken: tok, Payload: report("x")})
	if err == nil || !strings.Contains(err.Error(), "claim_unproven") {
		t.Fatalf("a post under a claim by an unpinned writer: %v, want claim_unproven", err)
	}

	pinner := openWith(t, f.opts)
	if _, err := pinner.PinKeys(bernstein.PinOptions{Writers: []string{"host-b"}}); err != nil {
		t.Fatal(err)
	}
	c, err := server.ClaimByToken(tok)
	if err != nil || c.Task != "T-B" || c.Agent != "agent-b" {
		t.Fatalf("after the pin: %+v, %v", c, err)
	}
	if _, err := server.Post(bernstein.PostRequest{Task: "T-B", Key: "k", Agent: "agent-b", ClaimToken: tok, Payload: report("x")}); err != nil {
		t.Fatalf("post after the pin: %v", err)
	}

	if err := pinner.UnpinKeys([]string{"host-b"}); err != nil {
		t.Fatal(err)
	}
	if c, err := server.ClaimByToken(tok); err == nil {
		t.Fatalf("after the unpin the claim is still honoured: %+v", c)
	}
	_, err = server.Post(bernstein.PostRequest{Task: "T-B", Key: "k2", Agent: "agent-b", ClaimToken: tok, Payload: report("y")})
	if err == nil || !strings.Contains(err.Error(), "claim_unproven") {
		t.Fatalf("after the unpin, a post under host-b's claim: %v, want claim_unproven", err)
	}
}
