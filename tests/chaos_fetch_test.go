package tests

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestChaosFetch: a pushing host and a fetching host share a guarded remote
// (file://). Host A posts to two tasks and pushes after every few posts;
// host B fetches in a loop while git's maintenance (repack, gc, pack-refs)
// runs in B's repository and readers read B through the CLI (audit verify,
// artifact list and show, task progress) and a `bernstein serve` (task,
// artifacts, artifact and journal documents). A fetch moves B's refs as a
// post does, in one transaction: no reader may ever claim anything is wrong
// (B fetches only what A signed, and B trusts A), no fetch may fail or hold
// anything back, and no read may miss what a fetch that ended before it
// began brought. Afterwards B verifies --strict and fsck is clean.
//
// It runs for BERNSTEIN_CHAOS_SECONDS (default 20), and on until B's
// fetches moved refs 10 times, at most ten times as long.
func TestChaosFetch(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	seconds := 20
	if v := os.Getenv("BERNSTEIN_CHAOS_SECONDS"); v != "" {
		if _, err := fmt.Sscan(v, &seconds); err != nil {
			t.Fatalf("BERNSTEIN_CHAOS_SECONDS=%q: %v", v, err)
		}
	}
	seed := testSeed(t)
	replay := fmt.Sprintf("(seed %d: replay with BERNSTEIN_TEST_SEED=%d)", seed, seed)
	isolateGit(t)
	srv := newGitServer(t, "file")
	url := srv.newRemote(t, "tasks.git")

	hostFixture := func(writer string) *fixture { // a repository of its own, with origin
		root := t.TempDir()
		f := &fixture{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home")}
		f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
		if _, err := bernstein.Init(f.opts, writer); err != nil {
			t.Fatalf("init %s: %v", writer, err)
		}
		f.git("remote", "add", "origin", url)
		if _, err := bernstein.RemoteSetup(f.opts, "origin"); err != nil {
			t.Fatalf("remote setup: %v", err)
		}
		return f
	}
	fa := hostFixture("host-a")
	sa := fa.open()
	tasks := []string{"CH-1", "ch:2"}
	var tokens []string
	for _, task := range tasks {
		tokens = append(tokens, fa.claimed(sa, task, "agent"))
	}
	if _, err := sa.Push("origin"); err != nil {
		t.Fatalf("first push: %v", err)
	}
	// Host B clones the same repository (the same identity), then inits
	// its own writer.
	rootB := t.TempDir()
	fb := &fixture{t: t, dir: filepath.Join(rootB, "repo"), home: filepath.Join(rootB, "home")}
	fb.opts = bernstein.Options{Repo: fb.dir, Home: fb.home}
	if _, err := bernstein.Clone(url, fb.dir, bernstein.Options{Home: fb.home}); err != nil {
		t.Fatalf("clone: %v", err)
	}
	if _, err := bernstein.Init(fb.opts, "host-b"); err != nil {
		t.Fatalf("init host-b: %v", err)
	}
	sb := fb.open()
	if _, err := sb.Fetch("origin"); err != nil {
		t.Fatalf("first fetch: %v", err)
	}
	if out, errOut, code := fb.cli("", "keys", "pin", "host-a"); code != 0 {
		t.Fatalf("keys pin host-a: exit %d\n%s%s", code, out, errOut)
	}

	h := &chaos{f: fb, seed: seed, rng: rand.New(rand.NewSource(seed)), ackDir: t.TempDir(), stop: make(chan struct{}),
		acked: map[string]string{}, latest: map[string]seen{}, shown: map[string]shownAs{}, heads: map[string]string{},
		posted: make(chan struct{}), compacted: make(chan struct{}), enough: make(chan struct{})}
	for _, task := range tasks {
		h.latest[task] = seen{versions: map[string]int64{}, rows: 0}
	}
	defer h.finish()
	serve, err := h.startServe()
	if err != nil {
		t.Fatalf("bernstein serve: %v", err)
	}
	t.Cleanup(func() { serve.cmd.Process.Kill() })

	var wg sync.WaitGroup
	run := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	var posts, pushes, fetches, moved atomic.Int64
	var failMu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		failMu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		failMu.Unlock()
	}
	// Host A: posts, and a push after every one to three of them.
	run(func() {
		keys := []string{"alpha", "beta"}
		for i := 0; !h.stopped(); i++ {
			task, tok := tasks[i%len(tasks)], tokens[i%len(tokens)]
			if _, err := sa.Post(bernstein.PostRequest{Task: task, Key: keys[(i/2)%2], Agent: "agent", ClaimToken: tok,
				Payload: artifact.Payload{Type: artifact.TypeReport, Body: fmt.Sprintf("post %d", i)}}); err != nil {
				fail("host-a post %d: %v", i, err)
				return
			}
			posts.Add(1)
			if h.intn(3) == 0 {
				if _, err := sa.Push("origin"); err != nil {
					fail("host-a push: %v", err)
					return
				}
				pushes.Add(1)
			}
		}
	})
	// Host B: fetches; after each, what it brought is what every later
	// read must show at least.
	run(func() {
		for !h.stopped() {
			res, err := sb.Fetch("origin")
			fetches.Add(1)
			if err != nil {
				h.alarm("fetch", "Store.Fetch", err.Error())
				continue
			}
			for _, task := range tasks {
				rep, err := sb.Artifacts(task)
				if err != nil {
					h.alarm("fetch", "Store.Artifacts "+task, err.Error())
					continue
				}
				s := seen{versions: map[string]int64{}, rows: rep.Rows}
				for _, v := range rep.Versions {
					s.versions[v.Key] = max(s.versions[v.Key], v.Version)
				}
				h.mu.Lock()
				h.latest[task] = s
				h.mu.Unlock()
			}
			if res.Moved() {
				moved.Add(1)
				h.mu.Lock() // wakes the server reader
				close(h.posted)
				h.posted = make(chan struct{})
				h.mu.Unlock()
			}
		}
	})
	run(h.maintain)
	run(func() { h.readCLI(tasks, 0) })
	run(func() { h.readHTTP(serve, tasks) })

	deadline := time.After(time.Duration(seconds) * time.Second)
	limit := time.After(time.Duration(10*seconds) * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for over := false; ; {
		select {
		case <-deadline:
			over = true
		case <-limit:
			break wait
		case <-tick.C:
		}
		failMu.Lock()
		stop := len(failures) > 0
		failMu.Unlock()
		if stop || over && moved.Load() >= 10 {
			break
		}
	}
	close(h.stop)
	wg.Wait()
	if err := serve.stop(); err != nil {
		t.Fatalf("bernstein serve: %v %s", err, replay)
	}
	if len(failures) > 0 {
		t.Fatalf("%s %s", failures[0], replay)
	}

	// The last fetch brings everything A pushed; B then verifies whole.
	if _, err := sa.Push("origin"); err != nil {
		t.Fatalf("last push: %v %s", err, replay)
	}
	if _, err := sb.Fetch("origin"); err != nil {
		t.Fatalf("last fetch: %v %s", err, replay)
	}
	if got, want := fb.git("for-each-ref", "refs/bernstein/journal/"), fa.git("for-each-ref", "refs/bernstein/journal/"); got != want {
		t.Fatalf("after the last fetch host-b's journals are\n%swant host-a's\n%s %s", got, want, replay)
	}
	if out, errOut, code := fb.cli("", "audit", "verify", "--strict"); code != 0 {
		t.Fatalf("host-b: audit verify --strict exited %d\n%s%s %s", code, out, errOut, replay)
	}
	if out, err := exec.Command("git", "-C", fb.dir, "fsck", "--strict", "--no-progress").CombinedOutput(); err != nil {
		t.Fatalf("git fsck on host-b: %v\n%s %s", err, out, replay)
	}
	fig := fmt.Sprintf("seconds=%d seed=%d posts=%d pushes=%d fetches=%d fetches_moved=%d maintenance=[%s] maintenance_failed=[%s] readers=[%s] false_alarms=%d stale_reads=%d",
		seconds, seed, posts.Load(), pushes.Load(), fetches.Load(), moved.Load(), counts(&h.maint), counts(&h.maintFailed), counts(&h.reads), h.alarms.Load(), h.stale.Load())
	t.Logf("chaos fetch: %s", fig)
	if n := h.alarms.Load() + h.stale.Load(); n > 0 {
		t.Fatalf("%d reads were wrong %s; first:\n%s", n, replay, strings.TrimSpace(h.alarmList[0]))
	}
	if moved.Load() < 10 {
		t.Fatalf("host-b's fetches moved refs only %d times: the run tested too little %s", moved.Load(), replay)
	}
}
