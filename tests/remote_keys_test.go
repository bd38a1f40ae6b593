package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
)

// Keys across hosts, through a shared remote and `bernstein keys pin`
// (not --allowed-signers): a clone pins what it checked, a fetch names the
// writers it brings that nothing pins, and a key published on the remote
// under a pinned writer's name is loud on the next fetch and grants nothing.
func TestRemoteKeysPinnedAndChanged(t *testing.T) {
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	a.work("T-A", "summary", 1)
	a.ok("push")

	b, cl := cloneHost(t, url, root, "host-b")
	aFP := sshKeygenFingerprint(t, writeTemp(t, a.authorizedKey()+"\n"))
	if !strings.Contains(cl.out, "host-a") || !strings.Contains(cl.out, aFP) {
		t.Fatalf("clone did not list host-a with %s:\n%s", aFP, cl.out)
	}
	r := b.want(1, "audit", "verify", "--strict")
	if !strings.Contains(r.out, "unverifiable") {
		t.Fatalf("before pinning, verify --strict:\n%s%s", r.out, r.err)
	}
	// host-b pins host-a after comparing the fingerprint with ssh-keygen's.
	if out := b.ok("keys", "pin", "host-a"); !strings.Contains(out, "pinned host-a "+aFP) {
		t.Fatalf("keys pin: %s", out)
	}
	if out := b.ok("audit", "verify", "--strict"); !strings.Contains(out, "verified: everything holds") {
		t.Fatalf("after pinning: %s", out)
	}

	// A third host joins: host-b's fetch names it as a new, unpinned writer.
	c, _ := cloneHost(t, url, root, "host-c")
	c.work("T-C", "summary", 1)
	c.ok("push")
	r = b.want(0, "fetch")
	cFP := sshKeygenFingerprint(t, writeTemp(t, c.authorizedKey()+"\n"))
	if !strings.Contains(r.err, "new writer host-c publishes key "+cFP+", not pinned here") {
		t.Fatalf("fetch bringing host-c's key:\n%s%s", r.out, r.err)
	}
	if strings.Contains(r.err, "WARNING") {
		t.Fatalf("false alarm on fetch:\n%s", r.err)
	}

	// Someone with push access (not host-a's key) publishes another key
	// under host-a's name, with plain git on the remote: a commit on top of
	// host-a's key ref, a fast-forward.
	bare := srv.dir("tasks.git")
	other, _, err := keys.Create(filepath.Join(root, "mallory-home"), "host-a")
	if err != nil {
		t.Fatal(err)
	}
	// From storage format 2 on each key has a ref of its own, named by the
	// writer and the key: the attacker's key sits beside host-a's.
	own := a.writerRef()
	ref := refs.WriterKey("host-a", refs.KeyHex(other.PublicKey().Marshal()))
	tree := gitRun(t, bare, "rev-parse", own+"^{tree}")
	blob := strings.TrimSpace(gitStdin(t, bare, other.AuthorizedKey()+"\n", "hash-object", "-w", "--stdin"))
	var entries []string
	for _, l := range strings.Split(strings.TrimSpace(gitRun(t, bare, "ls-tree", strings.TrimSpace(tree))), "\n") {
		if strings.HasSuffix(l, "\thost-a.pub") {
			l = "100644 blob " + blob + "\thost-a.pub"
		}
		entries = append(entries, l)
	}
	newTree := strings.TrimSpace(gitStdin(t, bare, strings.Join(entries, "\n")+"\n", "mktree"))
	// The message (the key record) is copied: only the .pub file changes.
	_, msg, _ := strings.Cut(gitRun(t, bare, "cat-file", "commit", own), "\n\n")
	forged := strings.TrimSpace(gitStdin(t, bare, msg, "commit-tree", newTree))
	gitRun(t, bare, "update-ref", ref, forged)

	// A fetch moves a ref only to commits that verify: the forged key ref
	// (not signed by the key it publishes, beside a pinned key) is held
	// back and named, as tampering on the remote; it never reaches the
	// local refs, so nothing here can pin it by mistake.
	r = b.want(2, "fetch")
	newFP := sshKeygenFingerprint(t, writeTemp(t, other.AuthorizedKey()+"\n"))
	mustHave(t, "fetch of a substituted key", r.out+r.err, "held back: writer host-a (key)", ref, newFP)
	if b.refs()[ref] != "" {
		t.Fatalf("the fetch took the forged key ref %s", ref)
	}
	b.ok("keys", "pin", "--all")
	if out := b.ok("keys", "list"); !strings.Contains(out, aFP) || strings.Contains(out, newFP) {
		t.Fatalf("keys list after pin --all:\n%s", out)
	}
	// The substitution grants nothing: everything host-a signed still
	// verifies against the pinned key.
	if r := b.run("audit", "verify"); r.code != 0 || strings.Contains(r.out, "TAMPERED") {
		t.Fatalf("after the substitution: exit %d\n%s%s", r.code, r.out, r.err)
	}
	// A key ref rewritten into something that publishes no key is held
	// back too.
	junk := strings.TrimSpace(gitStdin(t, bare, "not a key record\n", "commit-tree", newTree, "-p", forged))
	gitRun(t, bare, "update-ref", ref, junk)
	r = b.want(2, "fetch")
	mustHave(t, "fetch of an unreadable key ref", r.out+r.err, "held back: writer host-a (key)")
	if b.refs()[ref] != "" {
		t.Fatalf("the fetch took the unreadable key ref %s", ref)
	}
	if _, err := os.Stat(filepath.Join(b.home, "pins")); err != nil {
		t.Fatalf("no pins folder under host-b's BERNSTEIN_HOME: %v", err)
	}
}

// gitStdin runs git in dir with stdin and returns its stdout.
func gitStdin(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}
