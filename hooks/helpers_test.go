package hooks_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/testbin"
)

// cliBin is the bernstein binary, built once for every package's tests
// (internal/testbin): the hooks call it by its absolute path, as installed
// hooks do.
var cliBin string

func TestMain(m *testing.M) {
	var err error
	if cliBin, err = testbin.Path(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// baseEnv is the environment of every child process: no BERNSTEIN_* or
// GIT_* variables of the caller, no user or system git config, a fixed
// identity for plain git commits.
func baseEnv(home string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BERNSTEIN_") || strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=dev", "GIT_AUTHOR_EMAIL=dev@example.com", "GIT_COMMITTER_NAME=dev", "GIT_COMMITTER_EMAIL=dev@example.com")
	return append(env, extra...)
}

// run runs a command and returns its combined output and exit status.
func run(t *testing.T, dir string, env []string, stdin string, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out.String(), code
}

// host is a working repository with its own writer (BERNSTEIN_HOME).
type host struct {
	t      *testing.T
	root   string // a folder of the host's own (HOME)
	dir    string
	home   string
	writer string
	s      *bernstein.Store
	tokens map[string]string
}

func newHost(t *testing.T, writer string) *host {
	t.Helper()
	root := t.TempDir()
	h := &host{t: t, root: root, dir: filepath.Join(root, "work"), home: filepath.Join(root, "home"), writer: writer, tokens: map[string]string{}}
	if _, err := bernstein.Init(bernstein.Options{Repo: h.dir, Home: h.home}, writer); err != nil {
		t.Fatalf("init: %v", err)
	}
	h.git("commit", "-q", "--allow-empty", "-m", "start")
	h.reopen()
	return h
}

// newHostFrom is a host of writer whose repository is a clone of src's,
// its refs/bernstein/* included (the same repository, so the same
// identity), made with plain git before bernstein init.
func newHostFrom(t *testing.T, writer string, src *host) *host {
	t.Helper()
	root := t.TempDir()
	h := &host{t: t, root: root, dir: filepath.Join(root, "work"), home: filepath.Join(root, "home"), writer: writer, tokens: map[string]string{}}
	if out, err := exec.Command("git", "clone", "-q", src.dir, h.dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v %s", err, out)
	}
	h.git("fetch", "-q", src.dir, "refs/bernstein/*:refs/bernstein/*")
	if _, err := bernstein.Init(bernstein.Options{Repo: h.dir, Home: h.home}, writer); err != nil {
		t.Fatalf("init: %v", err)
	}
	h.reopen()
	return h
}

func (h *host) reopen() {
	h.t.Helper()
	if h.s != nil {
		h.s.Close()
	}
	s, err := bernstein.Open(bernstein.Options{Repo: h.dir, Home: h.home})
	if err != nil {
		h.t.Fatalf("open: %v", err)
	}
	h.s = s
	h.t.Cleanup(func() { s.Close() })
}

func (h *host) env(extra ...string) []string {
	return baseEnv(h.root, append([]string{"BERNSTEIN_HOME=" + h.home}, extra...)...)
}

// git runs git in the host's work tree and fails the test on an error.
func (h *host) git(args ...string) string {
	h.t.Helper()
	out, code := run(h.t, h.dir, h.env(), "", "git", args...)
	if code != 0 {
		h.t.Fatalf("git %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return strings.TrimSpace(out)
}

// cli runs the bernstein binary in the host's work tree.
func (h *host) cli(args ...string) (string, int) {
	h.t.Helper()
	return run(h.t, h.dir, h.env(), "", cliBin, args...)
}

// task creates and claims task.
func (h *host) task(task string) {
	h.t.Helper()
	if _, err := h.s.CreateTask(bernstein.TaskSpec{ID: task, Title: "task " + task}); err != nil {
		h.t.Fatalf("create %s: %v", task, err)
	}
	tok, err := h.s.Claim(task, "agent-1")
	if err != nil {
		h.t.Fatalf("claim %s: %v", task, err)
	}
	h.tokens[task] = tok
}

func (h *host) post(task, key, body string) *bernstein.PostResult {
	h.t.Helper()
	res, err := h.s.Post(bernstein.PostRequest{Task: task, Key: key, Agent: "agent-1", ClaimToken: h.tokens[task],
		Payload: artifact.Payload{Type: artifact.TypeReport, Body: body}})
	if err != nil {
		h.t.Fatalf("post %s/%s: %v", task, key, err)
	}
	return res
}

func (h *host) checkpoint(task string) {
	h.t.Helper()
	if _, err := h.s.Checkpoint(task, "HEAD", ""); err != nil {
		h.t.Fatalf("checkpoint %s: %v", task, err)
	}
}

// signers is the allowed_signers line the host's writers ref publishes, as
// plain git shows it: what an operator pins after checking it.
func (h *host) signers() string {
	return h.git("show", h.writerRef()+":allowed_signers") + "\n"
}

// writerRef is the ref that publishes the host's key: named by the writer
// and the key (storage format 2).
func (h *host) writerRef() string {
	h.t.Helper()
	ref := h.git("for-each-ref", "--format=%(refname)", "refs/bernstein/writers/"+h.writer+".*")
	if ref == "" || strings.Contains(ref, "\n") {
		h.t.Fatalf("the writers refs of %s: %q", h.writer, ref)
	}
	return ref
}

// fingerprint is the SHA256 fingerprint of the host's published key, as
// ssh-keygen computes it.
func (h *host) fingerprint() string {
	h.t.Helper()
	return keyFingerprint(h.t, h.git("show", h.writerRef()+":"+h.writer+".pub"))
}

func keyFingerprint(t *testing.T, authorizedKey string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "key.pub")
	if err := os.WriteFile(f, []byte(authorizedKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", f).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -l: %v", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) < 2 {
		t.Fatalf("ssh-keygen -l printed %q", out)
	}
	return fields[1]
}

// copyRepo copies the host's work tree (with its .git) to a fresh folder:
// a place to tamper with, leaving the host as it was.
// copyRepo is another host of the same writer identity: a copy of the
// repository and of BERNSTEIN_HOME (what this host's writer remembers of
// the repository, its heads, goes with the home, so the copy remembers its
// own).
func (h *host) copyRepo() *host {
	h.t.Helper()
	c := *h
	c.dir = filepath.Join(h.t.TempDir(), "copy")
	c.home = filepath.Join(h.t.TempDir(), "home")
	for _, cp := range [][2]string{{h.dir, c.dir}, {h.home, c.home}} {
		if out, err := exec.Command("cp", "-a", cp[0], cp[1]).CombinedOutput(); err != nil {
			h.t.Fatalf("cp: %v %s", err, out)
		}
	}
	c.s = nil
	c.reopen()
	return &c
}

// remote is a bare repository that receives pushes, with the operator's
// own BERNSTEIN_HOME (whose pin file the guard reads).
type remote struct {
	t    *testing.T
	root string
	dir  string
	home string
}

func newRemote(t *testing.T) *remote {
	t.Helper()
	root := t.TempDir()
	r := &remote{t: t, root: root, dir: filepath.Join(root, "srv.git"), home: filepath.Join(root, "operator-home")}
	if out, code := run(t, root, baseEnv(root), "", "git", "init", "-q", "--bare", r.dir); code != 0 {
		t.Fatalf("git init --bare: %s", out)
	}
	return r
}

func (r *remote) url() string { return "file://" + r.dir }

// cli runs bernstein as the remote's operator, inside the bare repository.
func (r *remote) cli(args ...string) (string, int) {
	r.t.Helper()
	return run(r.t, r.dir, baseEnv(r.root, "BERNSTEIN_HOME="+r.home), "", cliBin, args...)
}

func (r *remote) mustCLI(args ...string) string {
	r.t.Helper()
	out, code := r.cli(args...)
	if code != 0 {
		r.t.Fatalf("bernstein %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// pin pins the keys in an allowed_signers text, as the operator does with
// keys handed over out of band.
func (r *remote) pin(writer, signers string) {
	r.t.Helper()
	f := filepath.Join(r.t.TempDir(), "team.allowed_signers")
	if err := os.WriteFile(f, []byte(signers), 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.mustCLI("keys", "pin", writer, "--from", f)
}

// refs lists every ref of the remote with its value, as git sees them.
func (r *remote) refs() string {
	r.t.Helper()
	out, code := run(r.t, r.dir, baseEnv(r.root), "", "git", "for-each-ref", "--format=%(refname) %(objectname)")
	if code != 0 {
		r.t.Fatalf("for-each-ref: %s", out)
	}
	return out
}

// push runs git push from h to the remote, with the host's environment
// (its BERNSTEIN_HOME too: the hook must not use it).
func (h *host) push(r *remote, args ...string) (string, int) {
	h.t.Helper()
	return run(h.t, h.dir, h.env(), "", "git", append([]string{"push", "--porcelain", r.url()}, args...)...)
}

const allBernstein = "refs/bernstein/*:refs/bernstein/*"

// recordOf reads the canonical record a chain commit carries, with plain
// git: the message's last line.
func recordOf(t *testing.T, h *host, rev string) string {
	t.Helper()
	body := h.git("show", "-s", "--format=%B", rev)
	lines := strings.Split(strings.TrimSpace(body), "\n")
	return lines[len(lines)-1]
}

// sha256Hex is "sha256:<hex>" of s, computed here.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// mustContain fails unless out holds every fragment.
func mustContain(t *testing.T, out string, fragments ...string) {
	t.Helper()
	for _, f := range fragments {
		if !strings.Contains(out, f) {
			t.Errorf("output lacks %q:\n%s", f, out)
		}
	}
}
