package bernstein_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// poster starts this test binary as a separate process posting to task/key.
func (f *fixture) poster(task, key, agent, tok string, posts int) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		"BERNSTEIN_TEST_POSTER=1",
		"BERNSTEIN_REPO="+f.dir, "BERNSTEIN_HOME="+f.home,
		"BERNSTEIN_TEST_TASK="+task, "BERNSTEIN_TEST_KEY="+key,
		"BERNSTEIN_AGENT="+agent, "BERNSTEIN_CLAIM_TOKEN="+tok,
		fmt.Sprintf("BERNSTEIN_TEST_POSTS=%d", posts))
	return cmd
}

// checkVersionChain asserts versions 1..n of key with no gap or duplicate,
// each referencing the previous version's spine entry, all verified.
func checkVersionChain(t *testing.T, s *bernstein.Store, task, key string, n int) *verify.TaskReport {
	t.Helper()
	rep, err := s.Artifacts(task)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ChainBroken {
		t.Fatalf("journal chain broken: %s", rep.ChainReason)
	}
	var vs []verify.Version
	for _, v := range rep.Versions {
		if v.Key == key {
			vs = append(vs, v)
		}
	}
	if len(vs) != n {
		t.Fatalf("%d versions of %s, want %d", len(vs), key, n)
	}
	for i, v := range vs {
		if v.Version != int64(i+1) {
			t.Fatalf("position %d holds version %d: gap or duplicate", i, v.Version)
		}
		want := verify.Version{}.SpineEntryHash
		if i > 0 {
			want = vs[i-1].SpineEntryHash
		}
		if v.PrevVersionHash != want {
			t.Fatalf("version %d does not reference version %d", v.Version, i)
		}
		if v.State != verify.Verified {
			t.Fatalf("version %d is %s: %s", v.Version, v.State, v.Reason)
		}
	}
	return rep
}

// TestConcurrentProcesses: 8 processes posting 50 times each to one task and
// key give versions 1..400 with no gap, no duplicate, no lost post.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process stress")
	}
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "C-1", "agent")
	const procs, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := f.poster("C-1", "summary", "agent", tok, each)
			out, err := cmd.Output()
			if err != nil {
				errs <- fmt.Errorf("poster: %v %s", err, exitStderr(err))
				return
			}
			if n := strings.Count(string(out), "ok "); n != each {
				errs <- fmt.Errorf("poster acknowledged %d posts, want %d", n, each)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkVersionChain(t, s, "C-1", "summary", procs*each)
	f.fsck()
}

// TestConcurrentGoroutines: posts from many goroutines share batches and
// still get versions 1..n.
func TestConcurrentGoroutines(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "G-1", "agent")
	tok2 := f.claimed(s, "G-2", "agent")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				task, tk := "G-1", tok
				if g%4 == 0 {
					task, tk = "G-2", tok2
				}
				if _, err := s.Post(bernstein.PostRequest{Task: task, Key: "k", Agent: "agent", ClaimToken: tk, Payload: report(fmt.Sprintf("g%d i%d", g, i))}); err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
				// A refusal inside a batch must not disturb the others.
				s.Post(bernstein.PostRequest{Task: task, Key: "k", Agent: "intruder", ClaimToken: "bct_x", Payload: report("no")})
			}
		}(g)
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatal(failures[0])
	}
	checkVersionChain(t, s, "G-1", "k", 120)
	checkVersionChain(t, s, "G-2", "k", 40)
	refused := 0
	for _, a := range f.chainRecords("refs/bernstein/audit/test-writer") {
		if a["event"] == "artifact.refused" {
			refused++
		}
	}
	if refused != 160 {
		t.Fatalf("%d refusals audited, want 160", refused)
	}
	f.fsck()
}

// testSeed returns BERNSTEIN_TEST_SEED, else a seed from the clock, and
// logs it so a failing run can be replayed.
func testSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if v := os.Getenv("BERNSTEIN_TEST_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &seed); err != nil {
			t.Fatalf("BERNSTEIN_TEST_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (replay with BERNSTEIN_TEST_SEED=%d)", seed, seed)
	return seed
}

func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// TestKilledPosters: posters killed with SIGKILL at random moments never
// leave a journal row without its spine and audit entries or the reverse, and
// every acknowledged post survives. The moments are events, not delays: odd
// rounds kill as soon as the poster started (anywhere in its start-up,
// recovery included); even rounds once it has acknowledged a post, when it
// says it reached a step of the write path drawn at random, the k-th time
// (k from 1 to 3), while it goes on past it.
func TestKilledPosters(t *testing.T) {
	if testing.Short() {
		t.Skip("kill stress")
	}
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "K-1", "agent")
	rng := rand.New(rand.NewSource(testSeed(t)))
	acked := map[int]bool{}
	kills := 0
	for kills < 60 {
		cmd := f.poster("K-1", "summary", "agent", tok, 0)
		step := writeSteps[rng.Intn(len(writeSteps))].step
		nth := 1 + rng.Intn(3)
		if kills%2 == 0 {
			cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_REACHED="+step)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan int, 1<<16)
		reached := make(chan struct{}, 1<<16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var v int
				if _, err := fmt.Sscanf(sc.Text(), "ok %d", &v); err == nil {
					lines <- v
				} else if sc.Text() == "reached "+step {
					reached <- struct{}{}
				}
			}
			close(lines)
		}()
		if kills%2 == 0 {
			// The first acknowledged post, then the step's k-th time.
			v, ok := <-lines
			if !ok {
				t.Fatalf("the poster acknowledged nothing")
			}
			acked[v] = true
			// (The first post's steps came before its acknowledgement.)
		drain:
			for {
				select {
				case <-reached:
				default:
					break drain
				}
			}
			for n := 0; n < nth; {
				select {
				case <-reached:
					n++
				case v, ok := <-lines:
					if !ok {
						t.Fatal("the poster exited by itself")
					}
					acked[v] = true
				}
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		for v := range lines {
			acked[v] = true
		}
		cmd.Wait()
		kills++
	}
	// A survivor must find the repository consistent and writable.
	s2 := f.open()
	res, err := s2.Post(bernstein.PostRequest{Task: "K-1", Key: "summary", Agent: "agent", ClaimToken: tok, Payload: report("after the storm")})
	if err != nil {
		t.Fatalf("post after kills: %v", err)
	}
	n := int(res.Version)
	rep := checkVersionChain(t, s2, "K-1", "summary", n)
	for v := range acked {
		if v > n {
			t.Fatalf("acknowledged version %d is gone (latest %d)", v, n)
		}
	}
	t.Logf("%d kills, %d acknowledged posts, %d versions", kills, len(acked), n)
	if len(acked) == 0 {
		t.Fatalf("no post was acknowledged: the kills came too early to test anything")
	}
	// Journal rows, spine entries and audit entries correspond one to one.
	spine := map[string]bool{}
	for _, e := range f.chainRecords("refs/bernstein/spine/test-writer") {
		if e["kind"] == "artifact" {
			spine[fmt.Sprint(e["task_id"], "/", e["key"], "/", e["version"])] = true
		}
	}
	audited := map[string]bool{}
	for _, a := range f.chainRecords("refs/bernstein/audit/test-writer") {
		if a["event"] == "artifact.posted" {
			audited[a["resource"].(string)] = true
		}
	}
	if len(spine) != n || len(audited) != n {
		t.Fatalf("journal has %d versions, spine %d, audit %d", n, len(spine), len(audited))
	}
	for _, v := range rep.Versions {
		if !audited[string(v.SpineEntryHash)] {
			t.Fatalf("version %d has no audit entry", v.Version)
		}
	}
	f.fsck()
}

// TestPlainGitLockRespected: while a plain git process holds the journal
// ref's lock, a post waits or fails cleanly and never overwrites it.
func TestPlainGitLockRespected(t *testing.T) {
	f := newFixture(t)
	o := f.opts
	o.LockWait = 300 * time.Millisecond
	h := &faults{}
	o.FaultHook = h.hook
	s, err := bernstein.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tok := f.claimed(s, "X-1", "agent")
	f.post(s, "X-1", "k", "agent", tok, report("one"))
	journal := refs.Journal("X-1")
	head := strings.TrimSpace(f.git("rev-parse", journal))

	// A plain git transaction takes the journal's lock and holds it.
	holder := exec.Command("git", "-C", f.dir, "update-ref", "--stdin")
	in, _ := holder.StdinPipe()
	out, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(in, "start\nupdate %s %s %s\nprepare\n", journal, head, head)
	rd := bufio.NewReader(out)
	for _, want := range []string{"start: ok", "prepare: ok"} {
		line, _ := rd.ReadString('\n')
		if strings.TrimSpace(line) != want {
			t.Fatalf("holder said %q", line)
		}
	}
	if _, err := os.Stat(f.dir + "/.git/" + journal + ".lock"); err != nil {
		t.Fatalf("git holds no lock file: %v", err)
	}
	before := f.refsSnapshot()
	start := time.Now()
	_, err = s.Post(bernstein.PostRequest{Task: "X-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("two")})
	if !errors.Is(err, refs.ErrLocked) {
		t.Fatalf("post under a held lock: %v", err)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("post gave up after %v without waiting for the lock", time.Since(start))
	}
	if after := f.refsSnapshot(); after != before {
		t.Fatalf("a post under a held lock moved refs:\n%s\n%s", before, after)
	}
	// The lock holder commits its own transaction untouched.
	fmt.Fprintf(in, "commit\n")
	if line, _ := rd.ReadString('\n'); strings.TrimSpace(line) != "commit: ok" {
		t.Fatalf("holder commit: %q", line)
	}
	in.Close()
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}

	// A post that starts while the lock is held and outlives it succeeds.
	holder2 := exec.Command("git", "-C", f.dir, "update-ref", "--stdin")
	in2, _ := holder2.StdinPipe()
	out2, _ := holder2.StdoutPipe()
	holder2.Start()
	fmt.Fprintf(in2, "start\nupdate %s %s %s\nprepare\n", journal, head, head)
	rd2 := bufio.NewReader(out2)
	rd2.ReadString('\n')
	rd2.ReadString('\n')
	// The holder lets go while the post waits for the lock (the store's
	// hook says when it waits).
	released := false
	h.set(func(step string) error {
		if step == "waiting for "+journal && !released {
			released = true
			fmt.Fprintf(in2, "abort\n")
			in2.Close()
			holder2.Wait()
		}
		return nil
	})
	res, err := s.Post(bernstein.PostRequest{Task: "X-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("three")})
	h.set(nil)
	if !released {
		t.Fatal("the post did not wait for the lock")
	}
	if err != nil {
		t.Fatalf("post that waited for the lock: %v", err)
	}
	if res.Version != 2 {
		t.Fatalf("version %d, want 2", res.Version)
	}
	checkVersionChain(t, s, "X-1", "k", 2)
}
