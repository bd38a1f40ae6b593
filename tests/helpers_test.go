package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/testbin"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// cliBin is the bernstein binary, built once for every package's tests
// (internal/testbin).
var cliBin string

func TestMain(m *testing.M) {
	// Poster mode: this test binary re-executed as a separate posting process.
	if os.Getenv("BERNSTEIN_TEST_POSTER") != "" {
		os.Exit(posterMain())
	}
	// Archiver mode: bernstein archive of the tasks named, in a process
	// the test kills at a step.
	if tasks := os.Getenv("BERNSTEIN_TEST_ARCHIVE"); tasks != "" {
		os.Exit(archiverMain(strings.Split(tasks, ",")))
	}
	// Init mode: bernstein init as a separate process (traced by strace).
	if w := os.Getenv("BERNSTEIN_TEST_INIT"); w != "" {
		if _, err := bernstein.Init(bernstein.Options{Repo: os.Getenv("BERNSTEIN_REPO"), Home: os.Getenv("BERNSTEIN_HOME")}, w); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var err error
	if cliBin, err = testbin.Path(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// posterMain posts BERNSTEIN_TEST_POSTS reports (or forever when 0) and prints
// "ok <version> <task> <key> <spine entry hash> <journal index>" after each
// acknowledged post (printAck, which also logs it for the chaos harness). BERNSTEIN_TEST_TASK and BERNSTEIN_CLAIM_TOKEN may list several tasks
// and their tokens (comma separated), BERNSTEIN_TEST_KEY several keys, and
// BERNSTEIN_TEST_GOROUTINES posters run side by side, poster i on task i and
// key i (modulo the lists).
func posterMain() int {
	// BERNSTEIN_TEST_REACHED names a step of the write path the poster
	// reports on stdout ("reached <step>") each time it reaches it, before
	// it goes on. BERNSTEIN_TEST_CRASH names a step at which the poster
	// kills itself, as a power cut or the OOM killer would stop it.
	hook := chaosPosterHook()
	if step := os.Getenv("BERNSTEIN_TEST_REACHED"); step != "" {
		hook = func(s string) error {
			if s == step {
				ackOut.Lock()
				os.Stdout.WriteString("reached " + step + "\n")
				ackOut.Unlock()
			}
			return nil
		}
	}
	if step := os.Getenv("BERNSTEIN_TEST_CRASH"); step != "" {
		hook = func(s string) error {
			if s == step {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return nil
		}
	}
	n, workers := 0, 1
	fmt.Sscan(os.Getenv("BERNSTEIN_TEST_POSTS"), &n)
	fmt.Sscan(os.Getenv("BERNSTEIN_TEST_GOROUTINES"), &workers)
	s, err := bernstein.Open(bernstein.Options{Repo: os.Getenv("BERNSTEIN_REPO"), Home: os.Getenv("BERNSTEIN_HOME"), FaultHook: hook})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	if os.Getenv("BERNSTEIN_TEST_BATCH") != "" {
		return batchPosterMain(s)
	}
	tasks := strings.Split(os.Getenv("BERNSTEIN_TEST_TASK"), ",")
	tokens := strings.Split(os.Getenv("BERNSTEIN_CLAIM_TOKEN"), ",")
	keys := strings.Split(os.Getenv("BERNSTEIN_TEST_KEY"), ",")
	var mu sync.Mutex
	var wg sync.WaitGroup
	code := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			task, tok, key := tasks[w%len(tasks)], tokens[w%len(tokens)], keys[w%len(keys)]
			for i := 0; n == 0 || i < n; i++ {
				res, err := s.Post(bernstein.PostRequest{
					Task: task, Key: key, Agent: os.Getenv("BERNSTEIN_AGENT"), ClaimToken: tok,
					Payload: artifact.Payload{Type: artifact.TypeReport, Body: fmt.Sprintf("post %d of poster %d of pid %d", i, w, os.Getpid())},
				})
				if err != nil {
					mu.Lock()
					fmt.Fprintln(os.Stderr, err)
					code = 1
					mu.Unlock()
					return
				}
				printAck(res) // serialized there (and the acknowledgement log's syncs shared)
			}
		}(w)
	}
	wg.Wait()
	return code
}

// fixture is an initialised repository with a writer identity.
type fixture struct {
	t    *testing.T
	dir  string // the work tree
	home string // BERNSTEIN_HOME
	opts bernstein.Options
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home")}
	f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
	if _, err := bernstein.Init(f.opts, "test-writer"); err != nil {
		t.Fatalf("init: %v", err)
	}
	return f
}

func (f *fixture) open() *bernstein.Store {
	f.t.Helper()
	return f.openFaults(nil)
}

// openFaults opens the store with h as its fault hook (nil: none).
func (f *fixture) openFaults(h *faults) *bernstein.Store {
	f.t.Helper()
	o := f.opts
	if h != nil {
		o.FaultHook = h.hook
	}
	s, err := bernstein.Open(o)
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	f.t.Cleanup(func() { s.Close() })
	return s
}

// faults is a store's fault hook that a test arms (set) around the writes
// it means and disarms (set(nil)) after.
type faults struct {
	mu sync.Mutex
	fn func(step string) error
}

func (h *faults) set(fn func(step string) error) {
	h.mu.Lock()
	h.fn = fn
	h.mu.Unlock()
}

func (h *faults) hook(step string) error {
	h.mu.Lock()
	fn := h.fn
	h.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(step)
}

// claimed creates task and claims it for agent, returning the token.
func (f *fixture) claimed(s *bernstein.Store, task, agent string) string {
	f.t.Helper()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: "test task " + task}); err != nil {
		f.t.Fatalf("create %s: %v", task, err)
	}
	tok, err := s.Claim(task, agent)
	if err != nil {
		f.t.Fatalf("claim %s: %v", task, err)
	}
	return tok
}

// startedTask creates task declaring the gate build and the required
// evidence producer tests (both the command true), claims it for agent and
// starts it, returning the token.
func (f *fixture) startedTask(s *bernstein.Store, task string) string {
	f.t.Helper()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Gates: []ledger.Gate{{Name: "build", Command: "true"}},
		Evidence: []ledger.Producer{{Name: "tests", Command: "true", Required: true}}}); err != nil {
		f.t.Fatal(err)
	}
	tok, err := s.Claim(task, "agent")
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := s.Transition(task, record.KindTaskStarted, "", ""); err != nil {
		f.t.Fatal(err)
	}
	return tok
}

func (f *fixture) post(s *bernstein.Store, task, key, agent, tok string, p artifact.Payload) *bernstein.PostResult {
	f.t.Helper()
	res, err := s.Post(bernstein.PostRequest{Task: task, Key: key, Agent: agent, ClaimToken: tok, Payload: p})
	if err != nil {
		f.t.Fatalf("post %s/%s: %v", task, key, err)
	}
	return res
}

func report(body string) artifact.Payload {
	return artifact.Payload{Type: artifact.TypeReport, Body: body}
}

// git runs git in the fixture's repository and returns stdout.
func (f *fixture) git(args ...string) string {
	f.t.Helper()
	out, err := f.gitErr(args...)
	if err != nil {
		f.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (f *fixture) gitErr(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", f.dir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// cli runs the bernstein binary against the fixture; it returns stdout,
// stderr and the exit status.
func (f *fixture) cli(stdin string, args ...string) (string, string, int) {
	f.t.Helper()
	out, errOut, code, err := f.runCLI(stdin, args...)
	if err != nil {
		f.t.Fatalf("run bernstein: %v", err)
	}
	return out, errOut, code
}

// runCLI runs the binary and reports a failure to start it as an error.
func (f *fixture) runCLI(stdin string, args ...string) (string, string, int, error) {
	cmd := exec.Command(cliBin, append([]string{"--repo", f.dir}, args...)...)
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+f.home, "BERNSTEIN_FORCE_TTY=0")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code, err = ee.ExitCode(), nil
	}
	return stdout.String(), stderr.String(), code, err
}

// refsSnapshot returns every ref under refs/bernstein with its value.
func (f *fixture) refsSnapshot() string {
	return f.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/")
}

// objectFiles lists the files of the object directory (loose objects, packs).
func (f *fixture) objectFiles() []string {
	var out []string
	root := filepath.Join(f.dir, ".git", "objects")
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, strings.TrimPrefix(p, root))
		}
		return nil
	})
	return out
}

// fsck runs git fsck --strict and fails on anything but the unborn-HEAD note.
func (f *fixture) fsck() {
	f.t.Helper()
	out, err := f.gitErr("fsck", "--strict", "--no-dangling")
	if err != nil {
		f.t.Fatalf("git fsck --strict: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.Contains(line, "unborn branch") {
			f.t.Fatalf("git fsck --strict reported: %s", out)
		}
	}
}

func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

// chainRecords returns the canonical records carried by the commits of ref,
// oldest first, as plain git reads them.
func (f *fixture) chainRecords(ref string) []map[string]any {
	f.t.Helper()
	out := f.git("log", "--reverse", "--format=%H", ref)
	var recs []map[string]any
	for _, id := range strings.Fields(out) {
		body := f.git("show", "-s", "--format=%B", id)
		parts := strings.SplitN(strings.TrimRight(body, "\n"), "\n\n", 2)
		if len(parts) != 2 {
			f.t.Fatalf("commit %s of %s carries no record: %q", id, ref, body)
		}
		var m map[string]any
		decodeJSON(f.t, parts[1], &m)
		recs = append(recs, m)
	}
	return recs
}

// execGitStdin prepares git in dir reading stdin from data.
func execGitStdin(dir string, data []byte, args ...string) *exec.Cmd {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Stdin = bytes.NewReader(data)
	return cmd
}

func mustOutput(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v %s", cmd.Args, err, exitStderr(err))
	}
	return out
}

// publishedSigners reads, with plain git, the allowed_signers line every
// writer's ref publishes (refs/bernstein/writers/*), joined into one file's
// content: what a user pins after checking the fingerprints.
func (f *fixture) publishedSigners() string {
	f.t.Helper()
	var b strings.Builder
	for _, ref := range strings.Fields(f.git("for-each-ref", "--format=%(refname)", "refs/bernstein/writers/")) {
		b.WriteString(f.git("show", ref+":allowed_signers"))
	}
	return b.String()
}

// repositoryID is the repository's identity, read with plain git from
// refs/bernstein/repository ("" when it has none).
func (f *fixture) repositoryID() string {
	f.t.Helper()
	out, err := exec.Command("git", "-C", f.dir, "log", "-1", "--format=%B", refs.Repository).Output()
	if err != nil {
		return ""
	}
	_, rec, _ := strings.Cut(strings.TrimSpace(string(out)), "\n\n")
	r, err := record.ParseRepositoryRecord([]byte(rec))
	if err != nil {
		f.t.Fatalf("refs/bernstein/repository: %v", err)
	}
	return r.ID
}

// writerRef is the ref that publishes writer's key (one ref per key, named
// by the writer and the key, from storage format 2 on).
func (f *fixture) writerRef(writer string) string {
	f.t.Helper()
	ref := strings.TrimSpace(f.git("for-each-ref", "--format=%(refname)", refs.WritersPrefix+writer+".*"))
	if ref == "" || strings.Contains(ref, "\n") {
		f.t.Fatalf("the writers refs of %s: %q", writer, ref)
	}
	return ref
}
