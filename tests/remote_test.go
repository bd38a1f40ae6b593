package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/remote"
)

// host is one machine of a multi-host test: its own BERNSTEIN_HOME and its
// own clone, driven through the bernstein binary.
type host struct {
	t       *testing.T
	name    string // also its writer id
	home    string // BERNSTEIN_HOME
	dir     string // work tree
	signers string // BERNSTEIN_ALLOWED_SIGNERS, when set
}

type hostResult struct {
	out, err string
	code     int
}

func newHost(t *testing.T, root, name string) *host {
	return &host{t: t, name: name, home: filepath.Join(root, name+"-home"), dir: filepath.Join(root, name)}
}

// runIn runs the bernstein binary in dir with the host's environment.
func (h *host) runIn(dir string, args ...string) hostResult {
	h.t.Helper()
	cmd := exec.Command(cliBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+h.home, "BERNSTEIN_FORCE_TTY=0", "BERNSTEIN_ALLOWED_SIGNERS="+h.signers)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("run bernstein: %v", err)
	}
	return hostResult{stdout.String(), stderr.String(), code}
}

// run runs bernstein against the host's repository.
func (h *host) run(args ...string) hostResult {
	h.t.Helper()
	return h.runIn(filepath.Dir(h.dir), append([]string{"--repo", h.dir}, args...)...)
}

func (h *host) ok(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("%s: bernstein %s exited %d\n%s%s", h.name, strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

func (h *host) want(code int, args ...string) hostResult {
	h.t.Helper()
	r := h.run(args...)
	if r.code != code {
		h.t.Fatalf("%s: bernstein %s exited %d, want %d\n%s%s", h.name, strings.Join(args, " "), r.code, code, r.out, r.err)
	}
	return r
}

func (h *host) git(args ...string) string {
	h.t.Helper()
	return gitRun(h.t, h.dir, args...)
}

// refsOf lists the refs under prefix of a repository (work tree or bare).
func refsOf(t *testing.T, dir, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(gitRun(t, dir, "for-each-ref", "--format=%(refname) %(objectname)", prefix)), "\n") {
		if name, id, ok := strings.Cut(l, " "); ok {
			out[name] = id
		}
	}
	return out
}

func (h *host) refs() map[string]string { return refsOf(h.t, h.dir, refs.Prefix) }

// writerRef is the ref that publishes h's key, named by the writer and
// the key (storage format 2).
func (h *host) writerRef() string {
	h.t.Helper()
	var ref string
	for r := range h.refs() {
		if strings.HasPrefix(r, refs.WritersPrefix+h.name+".") {
			if ref != "" {
				h.t.Fatalf("two key refs for %s: %s, %s", h.name, ref, r)
			}
			ref = r
		}
	}
	if ref == "" {
		h.t.Fatalf("no key ref for %s", h.name)
	}
	return ref
}

// authorizedKey is the host's public key, read from its identity.
func (h *host) authorizedKey() string {
	h.t.Helper()
	id, err := keys.Load(h.home)
	if err != nil {
		h.t.Fatalf("%s: %v", h.name, err)
	}
	return id.AuthorizedKey()
}

// writeSigners writes an allowed_signers file pinning hosts' keys, as their
// users would exchange them out of band.
func writeSigners(t *testing.T, path string, hosts ...*host) string {
	t.Helper()
	var b strings.Builder
	for _, h := range hosts {
		b.WriteString(keys.AllowedSignersLine(h.name, h.authorizedKey()) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func sameRefs(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
		t.Fatalf("%s differ:\n got  %v\n want %v", what, sorted(got), sorted(want))
	}
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// newOrigin makes a bare remote on srv with one branch, and host a's clone
// of it, set up with bernstein init --remote origin.
func newOrigin(t *testing.T, srv *gitServer, root string) (string, *host) {
	t.Helper()
	url := srv.newRemote(t, "tasks.git")
	a := newHost(t, root, "host-a")
	gitRun(t, root, "clone", "-q", url, a.dir)
	a.git("commit", "-q", "--allow-empty", "-m", "start")
	a.git("push", "-q", "origin", "HEAD:refs/heads/main")
	a.ok("init", "--writer", a.name, "--remote", "origin")
	return url, a
}

// cloneHost makes host name with `bernstein clone URL` and `bernstein init`.
func cloneHost(t *testing.T, url, root, name string) (*host, hostResult) {
	t.Helper()
	h := newHost(t, root, name)
	r := h.runIn(root, "clone", url, h.dir)
	if r.code != 0 {
		t.Fatalf("%s: bernstein clone exited %d\n%s%s", name, r.code, r.out, r.err)
	}
	h.ok("init", "--writer", name, "--remote", "origin")
	return h, r
}

// work creates task, claims it and posts n reports to key.
func (h *host) work(task, key string, n int) string {
	h.t.Helper()
	h.ok("task", "create", task, "--title", "task of "+h.name)
	tok := strings.TrimSpace(h.ok("task", "claim", task, "--agent", "agent-"+h.name))
	h.post(task, key, "agent-"+h.name, tok, n)
	return tok
}

func (h *host) post(task, key, agent, tok string, n int) {
	h.t.Helper()
	for i := 0; i < n; i++ {
		h.ok("artifact", "post", task, key, "--type", "report", "--body", fmt.Sprintf("%s: post %d on %s", task, i, h.name),
			"--agent", agent, "--claim-token", tok)
	}
}

// verifyPinned runs audit verify --strict with hosts' keys pinned.
func verifyPinned(t *testing.T, h *host, signers string) {
	t.Helper()
	r := h.run("--allowed-signers", signers, "audit", "verify", "--strict")
	if r.code != 0 || !strings.Contains(r.out, "verified: everything holds") {
		t.Fatalf("%s: audit verify --strict exited %d\n%s%s", h.name, r.code, r.out, r.err)
	}
}

// TestRemoteTwoHosts: two hosts (two BERNSTEIN_HOMEs, two clones, each its
// own writer) work different tasks and push in both orders, over file://,
// git daemon and smart HTTP. Both fetch; then both and the remote hold the
// same refs, and audit verify --strict passes on both and on a third fresh
// clone with both keys pinned, by an allowed_signers file and then by keys
// pin (the pin file). The clone lists both writers with their keys'
// fingerprints.
func TestRemoteTwoHosts(t *testing.T) {
	for _, kind := range gitServerKinds {
		for _, order := range []string{"a-first", "b-first"} {
			t.Run(kind+"/"+order, func(t *testing.T) {
				isolateGit(t)
				srv := newGitServer(t, kind)
				root := t.TempDir()
				url, a := newOrigin(t, srv, root)
				b, _ := cloneHost(t, url, root, "host-b")

				a.work("T-A", "notes", 2)
				b.work("T-B", "notes", 3)
				first, second := a, b
				if order == "b-first" {
					first, second = b, a
				}
				for _, h := range []*host{first, second} {
					out := h.ok("push")
					if !strings.Contains(out, "pushed to origin (atomic)") {
						t.Fatalf("%s push: %s", h.name, out)
					}
				}
				for _, h := range []*host{a, b} {
					h.ok("fetch")
				}
				remote := refsOf(t, srv.dir("tasks.git"), refs.Prefix)
				sameRefs(t, "host-a's and the remote's refs", a.refs(), remote)
				sameRefs(t, "host-b's and the remote's refs", b.refs(), remote)
				for _, ref := range []string{refs.Journal("T-A"), refs.Journal("T-B"), refs.Spine("host-a"), refs.Spine("host-b")} {
					if remote[ref] == "" {
						t.Fatalf("the remote lacks %s: %v", ref, sorted(remote))
					}
				}
				// Nothing left to move either way.
				if out := a.ok("push"); !strings.Contains(out, "nothing to push") {
					t.Fatalf("second push of host-a: %s", out)
				}
				if out := b.ok("fetch"); !strings.Contains(out, "0 refs created, 0 fast-forwarded") {
					t.Fatalf("second fetch of host-b: %s", out)
				}

				// Both pushes went through the remote guard, which pinned
				// each writer's first key.
				pinned := guardPinned(t, srv.dir("tasks.git"))
				for _, h := range []*host{a, b} {
					if !regexp.MustCompile(`(?m)^` + h.name + `\t\S+\t\S+\tpinned$`).MatchString(pinned) {
						t.Fatalf("the remote guard did not pin %s:\n%s", h.name, pinned)
					}
				}

				signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
				verifyPinned(t, a, signers)
				verifyPinned(t, b, signers)
				c := newHost(t, root, "host-c")
				r := c.runIn(root, "clone", url, c.dir)
				if r.code != 0 {
					t.Fatalf("clone: exit %d\n%s%s", r.code, r.out, r.err)
				}
				fps := map[*host]string{}
				for _, h := range []*host{a, b} {
					pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.authorizedKey()))
					if err != nil {
						t.Fatal(err)
					}
					fps[h] = ssh.FingerprintSHA256(pk)
					line := regexp.MustCompile(`(?m)^  ` + h.name + ` +` + regexp.QuoteMeta(fps[h]) + ` ssh-ed25519$`)
					if !line.MatchString(r.out) {
						t.Fatalf("clone does not list %s with its fingerprint:\n%s", h.name, r.out)
					}
				}
				if !strings.Contains(r.out, "none is trusted yet") || !strings.Contains(r.out, "bernstein keys pin") {
					t.Fatalf("clone does not say how to pin:\n%s", r.out)
				}
				sameRefs(t, "the clone's and the remote's refs", c.refs(), remote)
				// Unpinned, the clone proves nothing: --strict fails.
				if r := c.run("audit", "verify", "--strict"); r.code != 1 {
					t.Fatalf("unpinned clone: audit verify --strict exited %d\n%s%s", r.code, r.out, r.err)
				}
				verifyPinned(t, c, signers)
				if _, err := os.Stat(c.home); !os.IsNotExist(err) {
					t.Fatalf("clone created %s: %v", c.home, err)
				}
				// The same clone pinned the way its user would: keys pin,
				// once the fingerprints clone listed are checked with their
				// owners. The pin file alone (no --allowed-signers) makes
				// --strict pass.
				out := c.ok("keys", "pin", "host-a", "host-b")
				for _, h := range []*host{a, b} {
					if !strings.Contains(out, "pinned "+h.name+" "+fps[h]+"\n") {
						t.Fatalf("keys pin did not pin %s %s:\n%s", h.name, fps[h], out)
					}
				}
				if pins, _ := filepath.Glob(filepath.Join(c.home, "pins", "*.allowed_signers")); len(pins) != 1 {
					t.Fatalf("pin files under %s: %v", c.home, pins)
				}
				if r := c.run("audit", "verify", "--strict"); r.code != 0 || !strings.Contains(r.out, "verified: everything holds") {
					t.Fatalf("clone pinned with keys pin: audit verify --strict exited %d\n%s%s", r.code, r.out, r.err)
				}
			})
		}
	}
}

// TestRemoteSameTaskDivergence: two hosts write to one task (one agent's
// claim used on both). Whichever pushes first wins; the other's push exits
// 5 naming the task and both heads, and so does its fetch; nothing moves on
// either host, and each keeps every row it wrote.
func TestRemoteSameTaskDivergence(t *testing.T) {
	for _, kind := range gitServerKinds {
		for _, order := range []string{"a-first", "b-first"} {
			t.Run(kind+"/"+order, func(t *testing.T) {
				isolateGit(t)
				srv := newGitServer(t, kind)
				root := t.TempDir()
				url, a := newOrigin(t, srv, root)
				tok := a.work("T-1", "notes", 1)
				a.ok("push")
				b, _ := cloneHost(t, url, root, "host-b")
				signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
				a.signers, b.signers = signers, signers
				srv.operatorPin(t, "tasks.git", signers, a, b)

				// Both hosts post to T-1 with the same claim.
				a.post("T-1", "notes", "agent-host-a", tok, 1)
				b.post("T-1", "notes", "agent-host-a", tok, 2)
				winner, loser := a, b
				if order == "b-first" {
					winner, loser = b, a
				}
				before := loser.refs()
				winner.ok("push")
				remote := refsOf(t, srv.dir("tasks.git"), refs.Prefix)
				r := loser.want(5, "push")
				journal := refs.Journal("T-1")
				checkDivergence(t, "push", r, "task T-1 (journal)", before[journal], remote[journal])
				if remote[journal] != winner.refs()[journal] {
					t.Fatalf("the remote's T-1 journal is %s, not the winner's %s", remote[journal], winner.refs()[journal])
				}
				// The diverged task blocks only itself: the task's refs stay
				// the winner's, the loser's rows of it went to its fork, and
				// nothing else of the remote moved but the loser's own chains.
				fork := "refs/bernstein/forks/" + loser.name + "/journal/T-1/1"
				for ref, id := range refsOf(t, srv.dir("tasks.git"), refs.Prefix) {
					switch {
					case ref == fork:
						if id != before[journal] {
							t.Fatalf("the remote's %s is %s, not the loser's journal %s", fork, id, before[journal])
						}
					case ref == refs.Spine(loser.name) || ref == refs.Audit(loser.name) || strings.HasPrefix(ref, refs.WritersPrefix+loser.name):
					case id != remote[ref]:
						t.Fatalf("the loser's push moved %s on the remote", ref)
					}
				}
				if refsOf(t, srv.dir("tasks.git"), refs.Prefix)[fork] == "" {
					t.Fatalf("the loser's push did not publish its fork %s", fork)
				}
				sameRefs(t, "the loser's refs after its rejected push", loser.refs(), before)

				r = loser.want(5, "fetch")
				checkDivergence(t, "fetch", r, "task T-1 (journal)", before[journal], remote[journal])
				for _, ref := range []string{journal, refs.Ledger("T-1")} {
					if got := loser.refs()[ref]; got != before[ref] {
						t.Fatalf("the loser's fetch moved %s", ref)
					}
				}
				winner.ok("fetch")

				// Nothing lost: each host still shows every version it wrote,
				// verified, and verifies whole.
				for _, h := range []*host{winner, loser} {
					out := h.ok("artifact", "list", "T-1")
					want := 2
					if h == b {
						want = 3
					}
					if n := strings.Count(out, "\tverified\t"); n != want {
						t.Fatalf("%s lists %d verified versions of T-1, want %d:\n%s", h.name, n, want, out)
					}
					verifyPinned(t, h, signers)
				}
			})
		}
	}
}

func checkDivergence(t *testing.T, what string, r hostResult, name, local, remote string) {
	t.Helper()
	for _, want := range []string{"diverged: " + name, "this host: " + local, "the remote: " + remote, "two hosts wrote to task T-1"} {
		if !strings.Contains(r.err, want) {
			t.Fatalf("%s: stderr lacks %q:\n%s", what, want, r.err)
		}
	}
	if !strings.Contains(r.err, "\nbernstein: ") {
		t.Fatalf("%s: no closing error line:\n%s", what, r.err)
	}
}

// TestRemoteSetup: the refspecs, set up once whatever the number of runs; an
// unknown remote refused by remote setup and by init --remote (before any
// key is made); forced refspecs named.
func TestRemoteSetup(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	_ = url
	fetch := strings.Fields(a.git("config", "--get-all", "remote.origin.fetch"))
	push := strings.Fields(a.git("config", "--get-all", "remote.origin.push"))
	if fmt.Sprint(fetch) != "[+refs/heads/*:refs/remotes/origin/* refs/bernstein/*:refs/bernstein-remotes/origin/*]" ||
		fmt.Sprint(push) != "[HEAD refs/bernstein/*:refs/bernstein/*]" {
		t.Fatalf("refspecs after init --remote: fetch %v, push %v", fetch, push)
	}
	out := a.ok("remote", "setup")
	if strings.Contains(out, "added") || strings.Count(out, "present:") != 2 {
		t.Fatalf("second setup: %s", out)
	}
	if f2, p2 := a.git("config", "--get-all", "remote.origin.fetch"), a.git("config", "--get-all", "remote.origin.push"); len(strings.Fields(f2)) != 2 || len(strings.Fields(p2)) != 2 {
		t.Fatalf("setup is not idempotent: fetch %q push %q", f2, p2)
	}

	r := a.want(1, "remote", "setup", "upstream")
	if !strings.HasPrefix(r.err, "bernstein: unknown remote \"upstream\"") || !strings.Contains(r.err, "git remote add upstream URL") || strings.Count(r.err, "\n") != 1 {
		t.Fatalf("unknown remote: %q", r.err)
	}
	fresh := newHost(t, root, "host-x")
	gitRun(t, root, "init", "-q", fresh.dir)
	r = fresh.want(1, "init", "--remote", "upstream")
	if !strings.Contains(r.err, "unknown remote \"upstream\"") {
		t.Fatalf("init --remote upstream: %q", r.err)
	}
	if _, err := os.Stat(fresh.home); !os.IsNotExist(err) {
		t.Fatalf("init --remote with an unknown remote created %s", fresh.home)
	}

	// A remote with a push refspec of its own keeps it, and gets no HEAD.
	a.git("remote", "add", "mirror", url)
	a.git("config", "--add", "remote.mirror.push", "refs/heads/main:refs/heads/main")
	a.git("config", "--add", "remote.mirror.fetch", "+refs/bernstein/*:refs/bernstein/*")
	r = a.want(0, "remote", "setup", "mirror")
	if got := strings.Fields(a.git("config", "--get-all", "remote.mirror.push")); fmt.Sprint(got) != "[refs/heads/main:refs/heads/main refs/bernstein/*:refs/bernstein/*]" {
		t.Fatalf("push refspecs of mirror: %v", got)
	}
	if !strings.Contains(r.err, "warning: remote.mirror.fetch +refs/bernstein/*:refs/bernstein/* writes into refs/bernstein/ directly") {
		t.Fatalf("no warning about the forced fetch refspec: %q", r.err)
	}
}

// TestRemotePlainGit: with the refspecs set up, plain git does the safe
// thing. `git push` pushes the current branch and refs/bernstein/*; `git
// fetch` (also --prune) moves only the remote-tracking refs and deletes no
// local ref; `bernstein fetch` then moves the local refs forward.
func TestRemotePlainGit(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	tok := a.work("T-A", "notes", 1)
	a.git("checkout", "-q", "-b", "feature")
	a.git("commit", "-q", "--allow-empty", "-m", "feature work")
	a.git("push", "-q")
	remote := refsOf(t, srv.dir("tasks.git"), "refs/")
	if remote["refs/heads/feature"] != strings.TrimSpace(a.git("rev-parse", "HEAD")) {
		t.Fatalf("plain git push did not push the current branch: %v", sorted(remote))
	}
	sameRefs(t, "refs/bernstein/* after a plain git push", refsOf(t, srv.dir("tasks.git"), refs.Prefix), a.refs())

	// A plain git clone has none of refs/bernstein/*: init --remote takes
	// them (the repository's identity above all) from the remote before it
	// publishes host-b's key, rather than mint a rival identity.
	b := newHost(t, root, "host-b")
	gitRun(t, root, "clone", "-q", url, b.dir)
	if len(b.refs()) != 0 {
		t.Fatalf("a plain clone holds %v", sorted(b.refs()))
	}
	b.ok("init", "--writer", "host-b", "--remote", "origin")
	for ref, id := range a.refs() {
		if b.refs()[ref] != id {
			t.Fatalf("after init --remote, host-b's %s is %q, host-a's %s", ref, b.refs()[ref], id)
		}
	}
	mine := b.refs()
	b.git("fetch", "-q", "--prune")
	if tracking := refsOf(t, b.dir, bernstein.TrackingPrefix("origin")); len(tracking) != len(a.refs()) {
		t.Fatalf("plain git fetch: tracking refs %v", sorted(tracking))
	}
	sameRefs(t, "host-b's refs after a plain git fetch --prune", b.refs(), mine)
	out := b.ok("fetch")
	if !strings.Contains(out, "0 refs created") {
		t.Fatalf("bernstein fetch after git fetch: %s", out)
	}
	ownKey := false
	for ref := range b.refs() {
		ownKey = ownKey || strings.HasPrefix(ref, refs.WritersPrefix+"host-b.")
	}
	if !ownKey {
		t.Fatal("host-b lost its own key ref")
	}
	// More work on a, seen by b's plain fetch in the tracking refs only.
	a.post("T-A", "notes", "agent-host-a", tok, 1)
	a.ok("push")
	before := b.refs()
	b.git("fetch", "-q")
	sameRefs(t, "host-b's refs after a plain git fetch", b.refs(), before)
	if out := b.ok("fetch"); !strings.Contains(out, "forwarded task T-A (journal)") {
		t.Fatalf("bernstein fetch: %s", out)
	}
}

// TestPushFinishesInterruptedWrite: a poster killed right after the commit
// point leaves a post half renamed; bernstein push finishes it first and
// pushes it whole.
func TestPushFinishesInterruptedWrite(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	url := srv.newRemote(t, "tasks.git")
	f := newFixture(t)
	f.git("remote", "add", "origin", url)
	s := f.open()
	tok := f.claimed(s, "I-1", "agent")
	f.post(s, "I-1", "k", "agent", tok, report("one"))
	cmd := f.poster("I-1", "k", "agent", tok, 1)
	cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_CRASH=renamed 0")
	cmd.Run()
	keeps, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "pack", "*.keep"))
	if len(keeps) != 1 {
		t.Fatalf("the killed poster left %d intents, want 1", len(keeps))
	}
	out, errOut, code := f.cli("", "push")
	if code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, errOut)
	}
	if keeps, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "pack", "*.keep")); len(keeps) != 0 {
		t.Fatalf("push left the intent %v", keeps)
	}
	remote := refsOf(t, srv.dir("tasks.git"), refs.Prefix)
	sameRefs(t, "the remote's and the local refs", remote, refsOf(t, f.dir, refs.Prefix))
	if n := strings.TrimSpace(gitRun(t, srv.dir("tasks.git"), "rev-list", "--count", refs.Journal("I-1"))); n != "2" {
		t.Fatalf("the remote's journal holds %s rows, want 2", n)
	}
}

// TestPushNonAtomicRemote: a remote that does not advertise atomic pushes
// gets the refs one by one, and the user is told.
func TestPushNonAtomicRemote(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	_, a := newOrigin(t, srv, root)
	gitRun(t, srv.dir("tasks.git"), "config", "receive.advertiseAtomic", "false")
	a.work("T-A", "notes", 1)
	r := a.want(0, "push")
	if !strings.Contains(r.err, "does not support atomic pushes") || !strings.Contains(r.out, "one by one") {
		t.Fatalf("non-atomic push not reported:\n%s%s", r.out, r.err)
	}
	sameRefs(t, "the remote's refs", refsOf(t, srv.dir("tasks.git"), refs.Prefix), a.refs())
}

// TestPushRefusedByRemote: a pre-receive hook's refusal is exit 1 with the
// remote's own words, printed once, and a last line that does not repeat
// them.
func TestPushRefusedByRemote(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	_, a := newOrigin(t, srv, root)
	hook := filepath.Join(srv.dir("tasks.git"), "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'guard: T-A journal index 0 is not signed' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// init --remote pushed the repository's identity and the key already.
	before := refsOf(t, srv.dir("tasks.git"), refs.Prefix)
	a.work("T-A", "notes", 1)
	r := a.want(1, "push")
	if !strings.Contains(r.err, "remote: guard: T-A journal index 0 is not signed\n") || !strings.Contains(r.err, "bernstein: origin refused") ||
		!strings.HasSuffix(r.err, ": its reasons are above; nothing was pushed\n") {
		t.Fatalf("refusal not explained: %q", r.err)
	}
	if n := strings.Count(r.err, "is not signed"); n != 1 {
		t.Fatalf("the remote's words are printed %d times:\n%s", n, r.err)
	}
	sameRefs(t, "the remote's refs after a refused push", refsOf(t, srv.dir("tasks.git"), refs.Prefix), before)
}

// TestFetchWriterDivergence: one writer identity used on two hosts makes its
// own chains diverge: push and fetch name the writer, exit 5, move nothing.
func TestFetchWriterDivergence(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	a.ok("push")
	twin := newHost(t, root, "twin")
	// A copied BERNSTEIN_HOME: the same writer identity, on another host
	// (which remembers the heads it writes on its own).
	if out, err := exec.Command("cp", "-a", a.home, twin.home).CombinedOutput(); err != nil {
		t.Fatalf("copy the home: %v %s", err, out)
	}
	if r := twin.runIn(root, "clone", url, twin.dir); r.code != 0 {
		t.Fatalf("clone: %s%s", r.out, r.err)
	}
	twin.work("T-TWIN", "notes", 1)
	a.work("T-A", "notes", 1)
	a.ok("push")
	before := twin.refs()
	r := twin.want(5, "push")
	if !strings.Contains(r.err, "diverged: writer host-a (audit)") && !strings.Contains(r.err, "diverged: writer host-a (spine)") {
		t.Fatalf("push does not name the writer: %s", r.err)
	}
	if !strings.Contains(r.err, "in use on two hosts") {
		t.Fatalf("push does not say what a writer divergence means: %s", r.err)
	}
	r = twin.want(5, "fetch")
	if !strings.Contains(r.err, "writer host-a") {
		t.Fatalf("fetch does not name the writer: %s", r.err)
	}
	sameRefs(t, "the twin's refs", twin.refs(), before)
}

// TestFetchWhilePosting: a poster process keeps posting on host b while b
// fetches what host a pushes, again and again: every post lands, with no gap,
// and every fetch moves b to a's heads.
func TestFetchWhilePosting(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	isolateGit(t)
	srv := newGitServer(t, "file")
	url := srv.newRemote(t, "tasks.git")
	root := t.TempDir()
	mk := func(name string) *fixture {
		f := &fixture{t: t, dir: filepath.Join(root, name), home: filepath.Join(root, name+"-home")}
		f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
		gitRun(t, root, "init", "-q", f.dir)
		gitRun(t, f.dir, "remote", "add", "origin", url)
		// init --remote: host-a gives the repository its identity and
		// pushes it, host-b takes it from the remote.
		o := f.opts
		o.Remote = "origin"
		if _, err := bernstein.Init(o, name); err != nil {
			t.Fatal(err)
		}
		if _, err := bernstein.RemoteSetup(f.opts, "origin"); err != nil {
			t.Fatal(err)
		}
		return f
	}
	fa, fb := mk("host-a"), mk("host-b")
	sa, sb := fa.open(), fb.open()
	tokA := fa.claimed(sa, "T-A", "agent-a")
	tokB := fb.claimed(sb, "T-B", "agent-b")
	const posts = 60
	poster := fb.poster("T-B", "k", "agent-b", tokB, posts)
	var pout bytes.Buffer
	poster.Stdout = &pout
	if err := poster.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- poster.Wait() }()
	rounds := 0
	for running := true; running || rounds < 3; rounds++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("poster: %v", err)
			}
			running = false
		default:
		}
		fa.post(sa, "T-A", "k", "agent-a", tokA, report(fmt.Sprintf("round %d", rounds)))
		if _, err := sa.Push("origin"); err != nil {
			t.Fatalf("push of host-a: %v", err)
		}
		if _, err := sb.Fetch("origin"); err != nil {
			t.Fatalf("fetch of host-b, round %d: %v", rounds, err)
		}
		aRefs, bRefs := refsOf(t, fa.dir, refs.Prefix), refsOf(t, fb.dir, refs.Prefix)
		for _, ref := range []string{refs.Journal("T-A"), refs.Spine("host-a"), refs.Audit("host-a")} {
			if bRefs[ref] != aRefs[ref] {
				t.Fatalf("round %d: host-b's %s is %s, host-a's %s", rounds, ref, bRefs[ref], aRefs[ref])
			}
		}
		if rounds > 200 {
			t.Fatal("the poster does not finish")
		}
	}
	if n := strings.Count(pout.String(), "ok "); n != posts {
		t.Fatalf("the poster acknowledged %d posts, want %d", n, posts)
	}
	if _, err := sb.Push("origin"); err != nil {
		t.Fatalf("push of host-b: %v", err)
	}
	if _, err := sa.Fetch("origin"); err != nil {
		t.Fatalf("fetch of host-a: %v", err)
	}
	signers := filepath.Join(root, "signers")
	var lines string
	for _, f := range []*fixture{fa, fb} {
		id, err := keys.Load(f.home)
		if err != nil {
			t.Fatal(err)
		}
		lines += keys.AllowedSignersLine(id.Writer, id.AuthorizedKey()) + "\n"
	}
	if err := os.WriteFile(signers, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*fixture{fa, fb} {
		o := f.opts
		o.AllowedSigners = signers
		s, err := bernstein.Open(o)
		if err != nil {
			t.Fatal(err)
		}
		checkVersionChain(t, s, "T-B", "k", posts)
		checkVersionChain(t, s, "T-A", "k", rounds)
		s.Close()
		if out, errOut, code := f.cli("", "--allowed-signers", signers, "audit", "verify", "--strict"); code != 0 {
			t.Fatalf("%s: audit verify: exit %d\n%s%s", f.dir, code, out, errOut)
		}
	}
}

// TestFetchFastForwardAPI: Store.FastForward refuses an update that is not a
// fast-forward and one whose old value is stale, moving nothing.
func TestFetchFastForwardAPI(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "F-1", "agent")
	f.post(s, "F-1", "k", "agent", tok, report("one"))
	v1 := strings.TrimSpace(f.git("rev-parse", refs.Journal("F-1")))
	f.post(s, "F-1", "k", "agent", tok, report("two"))
	v2 := strings.TrimSpace(f.git("rev-parse", refs.Journal("F-1")))
	o1, _ := gitstore.ParseOid(v1)
	o2, _ := gitstore.ParseOid(v2)
	err := s.FastForward([]refs.Update{{Ref: refs.Journal("F-1"), Old: o2, New: o1}})
	if !errors.Is(err, bernstein.ErrNotFastForward) {
		t.Fatalf("backward move: %v", err)
	}
	err = s.FastForward([]refs.Update{{Ref: refs.Journal("F-1"), Old: o1, New: o2}})
	if !errors.Is(err, refs.ErrConflict) {
		t.Fatalf("stale old value: %v", err)
	}
	if got := strings.TrimSpace(f.git("rev-parse", refs.Journal("F-1"))); got != v2 {
		t.Fatalf("the journal moved to %s", got)
	}
	// A fast-forward from the past: move back by hand (as a repair would),
	// then forward through the store.
	f.git("update-ref", refs.Journal("F-1"), v1)
	if err := s.FastForward([]refs.Update{{Ref: refs.Journal("F-1"), Old: o1, New: o2}}); err != nil {
		t.Fatalf("fast-forward: %v", err)
	}
	if got := strings.TrimSpace(f.git("rev-parse", refs.Journal("F-1"))); got != v2 {
		t.Fatalf("the journal is at %s, want %s", got, v2)
	}
	if keeps, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "pack", "*.keep")); len(keeps) != 0 {
		t.Fatalf("the fast-forward left its intent: %v", keeps)
	}
}

// TestRemoteReadmeTwoHosts runs the README's "Two hosts" block as written,
// each host's lines in one shell (so `cd` holds) with its own
// BERNSTEIN_HOME, every line required to exit 0; a bare repository's
// file:// URL stands in for the example's. The signers file the last line
// reads is written from both hosts' keys first, as their users would
// exchange them.
func TestRemoteReadmeTwoHosts(t *testing.T) {
	isolateGit(t)
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	at := strings.Index(text, "\n## Two hosts\n")
	if at < 0 {
		t.Fatal(`README.md has no "## Two hosts" section`)
	}
	text = text[at:]
	start := strings.Index(text, "\n```sh\n")
	end := strings.Index(text[start+7:], "\n```")
	if start < 0 || end < 0 {
		t.Fatal(`README.md's "## Two hosts" section has no sh block`)
	}
	type segment struct {
		host  string
		lines []string
	}
	var segs []segment
	for _, l := range strings.Split(text[start+7:start+7+end], "\n") {
		l = strings.TrimSpace(l)
		if m := regexp.MustCompile(`^# host (\w+)`).FindStringSubmatch(l); m != nil {
			segs = append(segs, segment{host: m[1]})
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if len(segs) == 0 {
			t.Fatalf("README line %q comes before any '# host' line", l)
		}
		segs[len(segs)-1].lines = append(segs[len(segs)-1].lines, l)
	}
	if len(segs) != 3 || segs[0].host != "a" || segs[1].host != "b" || segs[2].host != "a" {
		t.Fatalf("README two-host block: segments %+v", segs)
	}

	srv := newGitServer(t, "file")
	root := t.TempDir()
	url := srv.newRemote(t, "tasks.git")
	a := newHost(t, root, "host-a")
	gitRun(t, root, "clone", "-q", url, a.dir)
	a.git("commit", "-q", "--allow-empty", "-m", "start")
	a.git("push", "-q", "origin", "HEAD:refs/heads/main")
	b := newHost(t, root, "host-b")
	bDir := filepath.Join(root, "b")
	if err := os.MkdirAll(bDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b.dir = filepath.Join(bDir, "tasks")

	var last string
	for _, seg := range segs {
		h, dir := a, a.dir
		if seg.host == "b" {
			h, dir = b, bDir
		}
		script := "set -e\n"
		for _, l := range seg.lines {
			script += strings.ReplaceAll(l, "https://git.example.com/tasks.git", url) + "\n"
		}
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(),
			"PATH="+filepath.Dir(cliBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
			"BERNSTEIN_HOME="+h.home, "BERNSTEIN_FORCE_TTY=0")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		t.Logf("host %s:\n%s\n%s%s", seg.host, script, stdout.String(), stderr.String())
		if err != nil {
			t.Fatalf("README two-host block, host %s: %v\n%s%s", seg.host, err, stdout.String(), stderr.String())
		}
		last = stdout.String()
	}
	if !strings.Contains(last, "verified: everything holds") {
		t.Fatalf("the block's last line did not verify: %s", last)
	}
	remote := refsOf(t, srv.dir("tasks.git"), refs.Prefix)
	sameRefs(t, "host a's and the remote's refs", a.refs(), remote)
	if remote[refs.Ledger("T-A")] == "" || remote[refs.Ledger("T-B")] == "" {
		t.Fatalf("the remote lacks a task: %v", sorted(remote))
	}
}

// TestFetchInterruptedAtCommitPoint: a fetch stopped right after its first
// ref moved (as a crash would stop it) reads as whole to every reader, and
// the next writer (here Settle, as push runs it) finishes it.
func TestFetchInterruptedAtCommitPoint(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	url := srv.newRemote(t, "tasks.git")
	root := t.TempDir()
	h := &faults{}
	mk := func(name string) (*fixture, *bernstein.Store) {
		f := &fixture{t: t, dir: filepath.Join(root, name), home: filepath.Join(root, name+"-home")}
		f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
		gitRun(t, root, "init", "-q", f.dir)
		gitRun(t, f.dir, "remote", "add", "origin", url)
		o := f.opts
		o.Remote = "origin" // one repository: host-b takes host-a's identity
		if _, err := bernstein.Init(o, name); err != nil {
			t.Fatal(err)
		}
		return f, f.openFaults(h)
	}
	fa, sa := mk("host-a")
	fb, sb := mk("host-b")
	tok := fa.claimed(sa, "T-A", "agent")
	fa.post(sa, "T-A", "k", "agent", tok, report("one"))
	if _, err := sa.Push("origin"); err != nil {
		t.Fatal(err)
	}
	before := refsOf(t, fb.dir, refs.Prefix)
	h.set(func(step string) error {
		if step == "renamed 0" {
			return refs.ErrFault
		}
		return nil
	})
	_, err := sb.Fetch("origin")
	h.set(nil)
	if !errors.Is(err, refs.ErrFault) {
		t.Fatalf("fetch: %v", err)
	}
	raw := refsOf(t, fb.dir, refs.Prefix)
	moved := 0
	for ref, id := range raw {
		if before[ref] != id {
			moved++
		}
	}
	if moved != 1 {
		t.Fatalf("%d refs moved before the simulated crash, want 1", moved)
	}
	// Readers see the fetch whole.
	snap, err := (refs.Reader{Dir: filepath.Join(fb.dir, ".git")}).Snapshot(refs.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	want := refsOf(t, fa.dir, refs.Prefix)
	for ref, id := range want {
		if got, _ := snap.ReadOptional(ref); got.String() != id {
			t.Fatalf("a reader sees %s at %s, want %s", ref, got, id)
		}
	}
	if err := sb.Settle(); err != nil {
		t.Fatal(err)
	}
	after := refsOf(t, fb.dir, refs.Prefix)
	for ref, id := range want {
		if after[ref] != id {
			t.Fatalf("after Settle %s is %s, want %s", ref, after[ref], id)
		}
	}
	if keeps, _ := filepath.Glob(filepath.Join(fb.dir, ".git", "objects", "pack", "*.keep")); len(keeps) != 0 {
		t.Fatalf("intent left after Settle: %v", keeps)
	}
	if res, err := sb.Fetch("origin"); err != nil || res.Moved() {
		t.Fatalf("fetch after Settle: %+v %v", res, err)
	}
}

// TestPushViaTemporaryRefs: a push of more refs than a command line holds
// goes through temporary refs (refs/bernstein-push/<pid>/*) and one
// pattern, through the remote guard like every push; it lands every ref
// and leaves no temporary ref behind, nor those of a push whose process
// died.
func TestPushViaTemporaryRefs(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	url := srv.newRemote(t, "remote.git")
	root := t.TempDir()
	opts := bernstein.Options{Repo: filepath.Join(root, "repo"), Home: filepath.Join(root, "home")}
	if _, err := bernstein.Init(opts, "test-writer"); err != nil {
		t.Fatal(err)
	}
	gitRun(t, opts.Repo, "remote", "add", "origin", url)
	opts.PushArgBudget = 100 // two refspecs
	s, err := bernstein.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 20 {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: fmt.Sprintf("T-%02d", i), Title: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// A dead push's leftovers (pid 1 is alive; a pid past pid_max is not).
	audit := refs.Audit("test-writer")
	gitRun(t, opts.Repo, "update-ref", remote.PushTempRoot+"99999999/audit/test-writer", strings.TrimSpace(gitRun(t, opts.Repo, "rev-parse", audit)))
	res, err := s.Push("origin")
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	local := refsOf(t, opts.Repo, refs.Prefix)
	if len(res.Pushed) != len(local) {
		t.Fatalf("pushed %d refs, have %d", len(res.Pushed), len(local))
	}
	bare := srv.dir("remote.git")
	sameRefs(t, "the remote's and the local refs", refsOf(t, bare, "refs/"), local)
	if tmp := strings.TrimSpace(gitRun(t, opts.Repo, "for-each-ref", remote.PushTempRoot)); tmp != "" {
		t.Fatalf("temporary refs left: %s", tmp)
	}
	// It went through the guard, which pinned the writer on first use.
	if pinned := guardPinned(t, bare); !regexp.MustCompile(`(?m)^test-writer\t\S+\t\S+\tpinned$`).MatchString(pinned) {
		t.Fatalf("the remote guard did not pin test-writer:\n%s", pinned)
	}
	// The remote-tracking refs follow what was pushed: nothing is left to push.
	res, err = s.Push("origin")
	if err != nil || len(res.Pushed) != 0 || res.UpToDate != len(local) {
		t.Fatalf("second push: %+v %v", res, err)
	}
}
