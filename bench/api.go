package main

import (
	"bytes"
	"fmt"
	"runtime/metrics"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/refs"
)

// The workload every mode shares: one task, one agent holding its claim,
// report artifacts rotating over a few keys (so most posts are reposts).
const (
	benchTask   = "bench-1"
	benchAgent  = "agent-1"
	benchWriter = "bench"
)

// postRun is one measured run of one mode.
type postRun struct {
	posts   int
	elapsed time.Duration
	lat     []time.Duration // per post (per process for the CLI)
	maxRSS  int64           // KiB: the largest child process (CLI, baseline), in probe runs only
	cpuSelf time.Duration   // CPU of this process during the run (API)
	cpuKids time.Duration   // CPU of child processes (git co-process, CLI processes, git plumbing)
}

func (r postRun) cpuPerPost() time.Duration { return (r.cpuSelf + r.cpuKids) / time.Duration(r.posts) }

func (r postRun) rate() float64 { return float64(r.posts) / r.elapsed.Seconds() }

func keyOf(i, keys int) string { return fmt.Sprintf("k%d", i%keys) }

// bodyOf is a markdown report of about size bytes, different for every post.
func bodyOf(mode string, i, size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark report %s #%d\n\n", mode, i)
	line := "Measured the planner on q1..q9; the hash join wins on every large input.\n"
	for b.Len() < size {
		b.WriteString(line)
	}
	return b.String()[:size]
}

func reportPayload(mode string, i, size int) artifact.Payload {
	return artifact.Payload{Type: "report", Body: bodyOf(mode, i, size)}
}

// chainRefs are the chains a post extends (journal, spine, audit) and one
// it must leave alone (the ledger).
func chainRefs() []string {
	return []string{refs.Journal(benchTask), refs.Spine(benchWriter), refs.Audit(benchWriter), refs.Ledger(benchTask)}
}

// expectCounts is what the chains must hold after posts on top of before:
// each post adds one journal row, one spine entry and one audit entry.
func expectCounts(before map[string]int, posts int) map[string]int {
	want := map[string]int{}
	for ref, n := range before {
		want[ref] = n
	}
	want[refs.Journal(benchTask)] += posts
	want[refs.Spine(benchWriter)] += posts
	want[refs.Audit(benchWriter)] += posts
	return want
}

// setupRepo creates a fresh repository with the bench task claimed by the
// bench agent and returns the claim token and the chain counts a run starts
// from. The store it used is closed, so a measured run starts on a fresh
// Store (and a fresh git co-process).
func (b *bench) setupRepo(dir string) (string, map[string]int, error) {
	s, tok, err := b.setupStore(dir)
	if err != nil {
		return "", nil, err
	}
	if err := s.Close(); err != nil {
		return "", nil, err
	}
	before, err := counts(dir, chainRefs()...)
	return tok, before, err
}

func (b *bench) setupStore(dir string) (*bernstein.Store, string, error) {
	opts := bernstein.Options{Repo: dir, Home: b.home}
	if _, err := bernstein.Init(opts, benchWriter); err != nil {
		return nil, "", fmt.Errorf("init: %w", err)
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		return nil, "", fmt.Errorf("open: %w", err)
	}
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: benchTask, Title: "benchmark task"}); err != nil {
		s.Close()
		return nil, "", fmt.Errorf("create task: %w", err)
	}
	tok, err := s.Claim(benchTask, benchAgent)
	if err != nil {
		s.Close()
		return nil, "", fmt.Errorf("claim: %w", err)
	}
	return s, tok, nil
}

// openFresh sets up dir and opens a new Store on it for the measured run.
func (b *bench) openFresh(dir string) (*bernstein.Store, string, map[string]int, error) {
	return b.openFreshHook(dir, nil)
}

// openFreshHook is openFresh with the store's fault hook (which times the
// steps of a write).
func (b *bench) openFreshHook(dir string, hook func(step string) error) (*bernstein.Store, string, map[string]int, error) {
	tok, before, err := b.setupRepo(dir)
	if err != nil {
		return nil, "", nil, err
	}
	s, err := bernstein.Open(bernstein.Options{Repo: dir, Home: b.home, FaultHook: hook})
	return s, tok, before, err
}

// verifyRepo checks the chain lengths and runs git fsck (outside any timing).
func verifyRepo(dir string, before map[string]int, posts int) error {
	if err := checkCounts(dir, expectCounts(before, posts)); err != nil {
		return err
	}
	return fsck(dir)
}

// apiSequential posts n artifacts one after the other from one goroutine.
func (b *bench) apiSequential(n, keys, size int) (postRun, error) {
	dir, err := b.mkrepoDir("api-seq-")
	if err != nil {
		return postRun{}, err
	}
	s, tok, before, err := b.openFresh(dir)
	if err != nil {
		return postRun{}, err
	}
	reqs := make([]bernstein.PostRequest, n)
	for i := range reqs {
		reqs[i] = bernstein.PostRequest{Task: benchTask, Key: keyOf(i, keys), Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("api-seq", i, size)}
	}
	run := postRun{posts: n, lat: make([]time.Duration, 0, n)}
	self0, kids0 := cpuTimes()
	start := time.Now()
	for i, req := range reqs {
		t0 := time.Now()
		res, err := s.Post(req)
		run.lat = append(run.lat, time.Since(t0))
		if err != nil {
			s.Close()
			return run, fmt.Errorf("post %d: %w", i, err)
		}
		want, index := int64(i/keys+1), int64(before[refs.Journal(benchTask)]+i)
		if res.Version != want || res.JournalIndex != index {
			s.Close()
			return run, fmt.Errorf("post %d: got %s v%d at journal index %d, want v%d at %d", i, res.Key, res.Version, res.JournalIndex, want, index)
		}
	}
	run.elapsed = time.Since(start)
	if err := s.Close(); err != nil { // reaps the git co-process: its CPU joins RUSAGE_CHILDREN
		return run, fmt.Errorf("close: %w", err)
	}
	self1, kids1 := cpuTimes()
	run.cpuSelf, run.cpuKids = self1-self0, kids1-kids0
	return run, verifyRepo(dir, before, n)
}

// apiConcurrent posts n artifacts from workers goroutines sharing one Store,
// all to the same task, so that posts share batches (group commit).
func (b *bench) apiConcurrent(n, workers, keys, size int) (postRun, error) {
	dir, err := b.mkrepoDir("api-conc-")
	if err != nil {
		return postRun{}, err
	}
	s, tok, before, err := b.openFresh(dir)
	if err != nil {
		return postRun{}, err
	}
	type outcome struct {
		key     string
		version int64
		index   int64
		lat     time.Duration
		err     error
	}
	outs := make([]outcome, n)
	reqs := make([]bernstein.PostRequest, n)
	for i := range reqs {
		reqs[i] = bernstein.PostRequest{Task: benchTask, Key: keyOf(i, keys), Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("api-conc", i, size)}
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-gate
			for i := w; i < n; i += workers {
				t0 := time.Now()
				res, err := s.Post(reqs[i])
				o := outcome{key: reqs[i].Key, lat: time.Since(t0), err: err}
				if err == nil {
					o.version, o.index = res.Version, res.JournalIndex
				}
				outs[i] = o
			}
		}(w)
	}
	self0, kids0 := cpuTimes()
	start := time.Now()
	close(gate)
	wg.Wait()
	run := postRun{posts: n, elapsed: time.Since(start), lat: make([]time.Duration, 0, n)}
	if err := s.Close(); err != nil {
		return run, fmt.Errorf("close: %w", err)
	}
	self1, kids1 := cpuTimes()
	run.cpuSelf, run.cpuKids = self1-self0, kids1-kids0
	versions := map[string][]int64{}
	indexes := make([]int64, 0, n)
	for i, o := range outs {
		if o.err != nil {
			return run, fmt.Errorf("post %d: %w", i, o.err)
		}
		run.lat = append(run.lat, o.lat)
		versions[o.key] = append(versions[o.key], o.version)
		indexes = append(indexes, o.index)
	}
	if err := consecutive("journal indexes", indexes, int64(before[refs.Journal(benchTask)])); err != nil {
		return run, err
	}
	for k, vs := range versions {
		if err := consecutive("versions of "+k, vs, 1); err != nil {
			return run, err
		}
	}
	return run, verifyRepo(dir, before, n)
}

// consecutive checks that vs are exactly from, from+1, ... with no gap or
// duplicate.
func consecutive(what string, vs []int64, from int64) error {
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	for i, v := range vs {
		if v != from+int64(i) {
			return fmt.Errorf("%s: gap or duplicate at %d (got %d)", what, from+int64(i), v)
		}
	}
	return nil
}

// cliPosts runs one `bernstein artifact post` process per post. A probe run
// wraps each process in GNU time to read its peak RSS (see rss.go).
func (b *bench) cliPosts(n, keys, size int, probe bool) (postRun, error) {
	dir, err := b.mkrepoDir("cli-")
	if err != nil {
		return postRun{}, err
	}
	tok, before, err := b.setupRepo(dir)
	if err != nil {
		return postRun{}, err
	}
	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	run := postRun{posts: n, lat: make([]time.Duration, 0, n)}
	start := time.Now()
	for i := 0; i < n; i++ {
		key := keyOf(i, keys)
		cmd, rss := b.command(probe, b.bin, "--repo", dir, "artifact", "post", benchTask, key,
			"--type", "report", "--body", bodyOf("cli", i, size), "--agent", benchAgent, "--claim-token", tok)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		t0 := time.Now()
		err := cmd.Run()
		run.lat = append(run.lat, time.Since(t0))
		if err != nil {
			return run, fmt.Errorf("cli post %d: %v: %s", i, err, strings.TrimSpace(stderr.String()))
		}
		if kib := rss(); kib > run.maxRSS {
			run.maxRSS = kib
		}
		run.cpuKids += processCPU(cmd.ProcessState)
		want := fmt.Sprintf("posted %s v%d to %s ", key, i/keys+1, benchTask)
		if !strings.HasPrefix(stdout.String(), want) {
			return run, fmt.Errorf("cli post %d: printed %q, want %q...", i, strings.TrimSpace(stdout.String()), want)
		}
	}
	run.elapsed = time.Since(start)
	return run, verifyRepo(dir, before, n)
}

// heapSampler records the peak of the Go heap (bytes of live and not yet
// swept objects) while the API runs, without stopping the world.
type heapSampler struct {
	stop, done chan struct{}
	peak       uint64
}

const heapMetric = "/memory/classes/heap/objects:bytes"

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		sample := []metrics.Sample{{Name: heapMetric}}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if v := sample[0].Value.Uint64(); v > h.peak {
					h.peak = v
				}
			}
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	return h.peak
}
