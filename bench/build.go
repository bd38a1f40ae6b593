package main

import (
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
)

// Repositories for the read-side sections (verify, fold) are built through
// the library API, fast: many goroutines share one Store, so their writes
// share group-commit batches (one pack and one ref transaction for many
// rows) instead of paying the fsyncs of one post each.

var flagBuildWorkers = flag.Int("build-workers", 16, "verify, fold: goroutines sharing one Store while building a repository")

// repoSpec describes a repository to build: posts spread round-robin over
// tasks (each task claimed by its own agent), then per task a few
// checkpoints, and for some tasks start, a gate run and complete, which
// seals their journal in the spine.
type repoSpec struct {
	prefix      string // task ids are <prefix>-<n>
	tasks       int
	posts       int // artifact posts in all
	keys        int // keys per task (the rest of a task's posts are reposts)
	bodyBytes   int
	checkpoints int // checkpoint rows per task
	sealEvery   int // every sealEvery-th task is started, gate-run and completed (0: none)
	workers     int
}

// builtRepo is what was built, for the measurements to check against.
type builtRepo struct {
	dir         string
	tasks       []string
	posts       int
	checkpoints int
	gates       int
	sealed      int
	transitions int // ledger rows in all (created, claimed, started, completed)
	elapsed     time.Duration
	postTime    time.Duration
}

func (r *builtRepo) journalRows() int { return r.posts + r.checkpoints + r.gates }

// commitWorkTree makes an empty commit on the work tree's branch, so that a
// checkpoint has a real commit to resolve (a project identity: a
// <name@bernstein> committer is the record's, refused as a checkpoint).
func commitWorkTree(dir, msg string) error {
	cmd := exec.Command("git", "-C", dir, "-c", "user.name=bench", "-c", "user.email=bench@example.com",
		"-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "--no-verify", "-m", msg)
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git commit: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	if workers > n {
		workers = n
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				mu.Lock()
				stop := first != nil
				mu.Unlock()
				if stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// buildRepo builds a repository as spec says, on a fresh folder, and checks
// what every call returned: journal indexes and versions with no gap or
// duplicate, every row accounted for.
func (b *bench) buildRepo(spec repoSpec) (*builtRepo, error) {
	if spec.tasks < 1 || spec.posts < 0 || spec.keys < 1 || spec.workers < 1 {
		return nil, errors.New("build: tasks, keys and workers must be positive")
	}
	dir, err := b.mkrepoDir(spec.prefix + "-")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	opts := bernstein.Options{Repo: dir, Home: b.home}
	if _, err := bernstein.Init(opts, benchWriter); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if err := commitWorkTree(dir, "work"); err != nil {
		return nil, err
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r := &builtRepo{dir: dir}
	for t := 0; t < spec.tasks; t++ {
		r.tasks = append(r.tasks, fmt.Sprintf("%s-%d", spec.prefix, t))
	}
	tokens := make([]string, spec.tasks)
	if err := parallel(spec.tasks, spec.workers, func(t int) error {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: r.tasks[t], Title: "bench task " + r.tasks[t]}); err != nil {
			return fmt.Errorf("create %s: %w", r.tasks[t], err)
		}
		tok, err := s.Claim(r.tasks[t], agentOf(t))
		if err != nil {
			return fmt.Errorf("claim %s: %w", r.tasks[t], err)
		}
		tokens[t] = tok
		return nil
	}); err != nil {
		return nil, err
	}
	r.transitions = 2 * spec.tasks

	// Posts: post i goes to task i%tasks, key (i/tasks)%keys.
	type outcome struct{ version, index int64 }
	outs := make([]outcome, spec.posts)
	t0 := time.Now()
	if err := parallel(spec.posts, spec.workers, func(i int) error {
		t := i % spec.tasks
		key := keyOf(i/spec.tasks, spec.keys)
		res, err := s.Post(bernstein.PostRequest{Task: r.tasks[t], Key: key, Agent: agentOf(t), ClaimToken: tokens[t],
			Payload: reportPayload(spec.prefix, i, spec.bodyBytes)})
		if err != nil {
			return fmt.Errorf("post %d to %s: %w", i, r.tasks[t], err)
		}
		outs[i] = outcome{res.Version, res.JournalIndex}
		return nil
	}); err != nil {
		return nil, err
	}
	r.postTime = time.Since(t0)
	r.posts = spec.posts
	indexes := map[int][]int64{}
	versions := map[string][]int64{}
	for i, o := range outs {
		t := i % spec.tasks
		indexes[t] = append(indexes[t], o.index)
		k := r.tasks[t] + "/" + keyOf(i/spec.tasks, spec.keys)
		versions[k] = append(versions[k], o.version)
	}
	for t, ix := range indexes {
		if err := consecutive("journal indexes of "+r.tasks[t], ix, 0); err != nil {
			return nil, err
		}
	}
	for k, vs := range versions {
		if err := consecutive("versions of "+k, vs, 1); err != nil {
			return nil, err
		}
	}

	// Checkpoints, then for every sealEvery-th task: start, gate, complete.
	if err := parallel(spec.tasks*spec.checkpoints, spec.workers, func(i int) error {
		task := r.tasks[i%spec.tasks]
		if _, err := s.Checkpoint(task, "HEAD", ""); err != nil {
			return fmt.Errorf("checkpoint %s: %w", task, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	r.checkpoints = spec.tasks * spec.checkpoints
	var sealed []string
	for t := 0; spec.sealEvery > 0 && t < spec.tasks; t += spec.sealEvery {
		sealed = append(sealed, r.tasks[t])
	}
	if err := parallel(len(sealed), spec.workers, func(i int) error {
		task := sealed[i]
		if _, err := s.Transition(task, record.KindTaskStarted, "", "bench"); err != nil {
			return fmt.Errorf("start %s: %w", task, err)
		}
		if _, err := s.RunGate(task, "check", []string{"true"}, bernstein.RunOptions{}); err != nil {
			return fmt.Errorf("gate %s: %w", task, err)
		}
		if _, err := s.Transition(task, record.KindTaskCompleted, "", "bench"); err != nil {
			return fmt.Errorf("complete %s: %w", task, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	r.sealed, r.gates = len(sealed), len(sealed)
	r.transitions += 2 * len(sealed)

	// Every row is where it should be.
	perTask := map[string]int64{}
	for i := 0; i < spec.posts; i++ {
		perTask[r.tasks[i%spec.tasks]]++
	}
	isSealed := map[string]bool{}
	for _, t := range sealed {
		isSealed[t] = true
	}
	for _, task := range r.tasks {
		info, err := s.Task(task)
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", task, err)
		}
		want := perTask[task] + int64(spec.checkpoints)
		wantLedger := int64(2)
		if isSealed[task] {
			want++
			wantLedger += 2
		}
		// Every checkpoint names HEAD: progress counts one new commit.
		wantCheckpoints := int64(min(spec.checkpoints, 1))
		if info.JournalRows != want || info.LedgerRows != wantLedger || info.Progress.Checkpoints != wantCheckpoints {
			return nil, fmt.Errorf("task %s: %d journal rows, %d ledger rows, %d checkpoints; want %d, %d, %d",
				task, info.JournalRows, info.LedgerRows, info.Progress.Checkpoints, want, wantLedger, wantCheckpoints)
		}
		if isSealed[task] != info.Terminal {
			return nil, fmt.Errorf("task %s: terminal %v, want %v", task, info.Terminal, isSealed[task])
		}
	}
	r.elapsed = time.Since(start)
	return r, nil
}

func agentOf(t int) string { return fmt.Sprintf("agent-%d", t) }

// packInfo is what `git count-objects -v` says of a repository.
type packInfo struct {
	loose, inPack, packs int
	sizePackKiB          int
}

func countObjects(dir string) (packInfo, error) {
	out, err := gitIn(dir, nil, "count-objects", "-v")
	if err != nil {
		return packInfo{}, err
	}
	var p packInfo
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		var n int
		fmt.Sscan(v, &n)
		switch k {
		case "count":
			p.loose = n
		case "in-pack":
			p.inPack = n
		case "packs":
			p.packs = n
		case "size-pack":
			p.sizePackKiB = n
		}
	}
	return p, nil
}

func (p packInfo) String() string {
	return fmt.Sprintf("%d objects in %d packs (%.1f MiB), %d loose", p.inPack, p.packs, float64(p.sizePackKiB)/1024, p.loose)
}
