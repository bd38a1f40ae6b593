package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bernstein/bernstein"
)

// Flags of the post section.
var (
	flagPosts         = flag.Int("posts", 300, "post: API posts per run (sequential run and concurrent run)")
	flagWorkers       = flag.Int("workers", 8, "post: goroutines sharing one Store in the concurrent API run")
	flagCLIPosts      = flag.Int("cli-posts", 100, "post: CLI posts (one process each) per run")
	flagBatchPosts    = flag.Int("batch-posts", 100, "post: posts of the one `artifact post --stdin` process per run")
	flagStepPosts     = flag.Int("step-posts", 200, "post: sequential API posts whose write-path steps are timed (0 to skip)")
	flagBaselinePosts = flag.Int("baseline-posts", 60, "post: git plumbing posts per run")
	flagKeys          = flag.Int("keys", 5, "post: artifact keys the posts rotate over (the rest are reposts)")
	flagBodyBytes     = flag.Int("body-bytes", 512, "post: bytes of each report body")
	flagFsyncIters    = flag.Int("fsync-iters", 200, "post: fsyncs timed per round for the floor")
	flagPhaseIters    = flag.Int("phase-iters", 100, "post: iterations of the write path's durable steps timed alone")
	flagModes         = flag.String("modes", strings.Join(allModes, ","), "post: which measurements to run (to profile one: -modes api-seq -rounds 1 -cpuprofile FILE)")
	flagSyscalls      = flag.Bool("syscalls", true, "post: count fsyncs, file creations, renames and processes per post by rerunning small runs under strace (skipped if strace is missing)")
)

// The measurement modes of the post section.
const (
	modeFloor    = "floor"
	modeBaseline = "baseline"
	modeAPISeq   = "api-seq"
	modeAPIConc  = "api-conc"
	modeCLI      = "cli"
	modeCLIBatch = "cli-batch"
	modePhases   = "phases"
)

var allModes = []string{modeFloor, modeBaseline, modeAPISeq, modeAPIConc, modeCLI, modeCLIBatch, modePhases}

func parseModes(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		ok := false
		for _, a := range allModes {
			ok = ok || a == m
		}
		if !ok {
			return nil, fmt.Errorf("unknown mode %q (have: %s)", m, strings.Join(allModes, ", "))
		}
		out[m] = true
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no mode chosen")
	}
	return out, nil
}

// modeResults gathers the rounds of one mode.
type modeResults struct {
	rates  stats
	cpu    []float64 // CPU per post (ns), per round
	lat    []time.Duration
	maxRSS int64
	posts  int
	self   []float64 // API: CPU of the bench process per post (ns)
	kids   []float64 // CPU of child processes per post (ns)
}

func runPost(b *bench) error {
	modes, err := parseModes(*flagModes)
	if err != nil {
		return err
	}
	if *flagPosts < 1 || *flagCLIPosts < 1 || *flagBatchPosts < 1 || *flagBaselinePosts < 1 || *flagKeys < 1 || *flagWorkers < 1 || *flagFsyncIters < 1 || *flagPhaseIters < 1 {
		return fmt.Errorf("-posts, -cli-posts, -batch-posts, -baseline-posts, -keys, -workers, -fsync-iters and -phase-iters must be positive")
	}
	keys, size := *flagKeys, *flagBodyBytes
	b.printf("  workload: task %s claimed by %s; report artifacts of %d B bodies over %d keys (the rest reposts)\n", benchTask, benchAgent, size, keys)
	b.printf("  per run:  API %d posts (sequential; then %d goroutines on one Store), CLI %d processes, CLI --stdin batch of %d,\n",
		*flagPosts, *flagWorkers, *flagCLIPosts, *flagBatchPosts)
	b.printf("            git plumbing %d posts\n", *flagBaselinePosts)
	b.printf("  %d rounds, measurement order rotated each round; every run on a fresh repository; medians reported\n\n", *flagRounds)

	results := map[string]*modeResults{}
	for _, m := range allModes {
		results[m] = &modeResults{}
	}
	var fs []fsyncCosts
	var ph []phaseCosts
	var heapPeak uint64
	var order []string
	for _, m := range []string{modeBaseline, modeAPISeq, modeAPIConc, modeCLI, modeCLIBatch} {
		if modes[m] {
			order = append(order, m)
		}
	}
	for r := 0; r < *flagRounds; r++ {
		var line []string
		if modes[modeFloor] {
			dir, err := b.mkrepoDir("floor-")
			if err != nil {
				return err
			}
			c, err := measureFsync(dir, *flagFsyncIters)
			os.RemoveAll(dir)
			if err != nil {
				return fmt.Errorf("fsync floor: %w", err)
			}
			fs = append(fs, c)
			results[modeFloor].rates.add(1 / c.newFile.Seconds())
			line = append(line, fmt.Sprintf("fsync %s", ms(c.newFile)))
		}
		for i := range order {
			m := order[(i+r)%len(order)]
			var run postRun
			var err error
			switch m {
			case modeBaseline:
				run, err = b.baselinePosts(*flagBaselinePosts, keys, size, false)
			case modeAPISeq, modeAPIConc:
				h := startHeapSampler()
				if m == modeAPISeq {
					run, err = b.apiSequential(*flagPosts, keys, size)
				} else {
					run, err = b.apiConcurrent(*flagPosts, *flagWorkers, keys, size)
				}
				if p := h.Stop(); p > heapPeak {
					heapPeak = p
				}
			case modeCLI:
				run, err = b.cliPosts(*flagCLIPosts, keys, size, false)
			case modeCLIBatch:
				run, err = b.cliBatch(*flagBatchPosts, keys, size)
			}
			if err != nil {
				b.fail("round %d, %s: %v", r+1, m, err)
				line = append(line, fmt.Sprintf("%s FAILED", m))
				continue
			}
			res := results[m]
			res.rates.add(run.rate())
			res.cpu = append(res.cpu, float64(run.cpuPerPost()))
			res.self = append(res.self, float64(run.cpuSelf)/float64(run.posts))
			res.kids = append(res.kids, float64(run.cpuKids)/float64(run.posts))
			res.lat = append(res.lat, run.lat...)
			res.posts = run.posts
			if run.maxRSS > res.maxRSS {
				res.maxRSS = run.maxRSS
			}
			line = append(line, fmt.Sprintf("%s %.0f/s", m, run.rate()))
		}
		if modes[modePhases] {
			c, err := b.measurePhases(*flagPhaseIters, size)
			if err != nil {
				b.fail("round %d, phases: %v", r+1, err)
			} else {
				ph = append(ph, c)
				line = append(line, fmt.Sprintf("pack %s + refs %s", ms(c.pack), ms(c.refs)))
			}
		}
		b.printf("  round %d: %s\n", r+1, strings.Join(line, ", "))
	}

	// The table.
	b.printf("\n  %-34s %6s %9s %15s %9s %9s %9s %9s\n", "measurement", "posts", "posts/s", "min..max", "per post", "CPU/post", "p50", "p99")
	row := func(m, label string) {
		res := results[m]
		if len(res.rates.vals) == 0 {
			return
		}
		med := res.rates.median()
		posts, cpu, p50, p99 := "-", "-", "-", "-"
		if m != modeFloor {
			posts = fmt.Sprint(res.posts)
			cpu = ms(time.Duration(median(res.cpu)))
			p50, p99 = ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99))
		}
		b.printf("  %-34s %6s %9.1f %15s %9s %9s %9s %9s\n", label, posts, med,
			fmt.Sprintf("%.1f..%.1f", res.rates.min(), res.rates.max()), ms(time.Duration(float64(time.Second)/med)), cpu, p50, p99)
	}
	row(modeFloor, "floor (one fsync per post)")
	row(modeAPISeq, "API sequential (1 goroutine)")
	row(modeAPIConc, fmt.Sprintf("API concurrent (%d goroutines)", *flagWorkers))
	row(modeCLI, "CLI (one process per post)")
	row(modeCLIBatch, fmt.Sprintf("CLI --stdin batch of %d", *flagBatchPosts))
	row(modeBaseline, "git plumbing baseline (unsigned)")
	b.printf("  (per post = 1 / median posts/s; CPU/post: user+sys of the bench process and every child it reaped, over\n")
	b.printf("  the run, divided by posts; p50/p99: latency of one call pooled over rounds, for the CLI the whole process,\n")
	b.printf("  for the batch the whole process of %d posts)\n", *flagBatchPosts)

	var fsMed fsyncCosts
	if len(fs) > 0 {
		var nf, dr, rw, cr []float64
		for _, c := range fs {
			nf = append(nf, float64(c.newFile))
			dr = append(dr, float64(c.dir))
			rw = append(rw, float64(c.rewrite))
			cr = append(cr, float64(c.create))
		}
		fsMed = fsyncCosts{newFile: time.Duration(median(nf)), dir: time.Duration(median(dr)), rewrite: time.Duration(median(rw)), create: time.Duration(median(cr))}
		b.printf("\n  disk primitives on %s (median of %d rounds x %d): fsync of a new small file %s (the floor's unit),\n",
			b.fs.fsType, len(fs), *flagFsyncIters, ms(fsMed.newFile))
		b.printf("  fsync of a directory after a rename %s, fsync of a file rewritten in place %s, creating a file %s\n",
			ms(fsMed.dir), ms(fsMed.rewrite), ms(fsMed.create))
	}

	med := func(m string) float64 {
		if len(results[m].rates.vals) == 0 {
			return math.NaN()
		}
		return results[m].rates.median()
	}
	floor, seq, conc, cli, batch, base := med(modeFloor), med(modeAPISeq), med(modeAPIConc), med(modeCLI), med(modeCLIBatch), med(modeBaseline)
	b.printf("\n  ratios (of medians)\n")
	b.printf("    API seq  / baseline   %8s\n", ratio(seq, base))
	b.printf("    API conc / baseline   %8s\n", ratio(conc, base))
	b.printf("    CLI      / baseline   %8s\n", ratio(cli, base))
	b.printf("    CLI batch / baseline  %8s\n", ratio(batch, base))
	b.printf("    floor / API seq       %8s   (a sequential post takes as long as this many fsyncs)\n", ratio(floor, seq))
	b.printf("    floor / API conc      %8s\n", ratio(floor, conc))
	b.printf("    floor / CLI batch     %8s   (below 1: a batch post costs less than one fsync)\n", ratio(floor, batch))
	b.printf("    API conc / API seq    %8s   (what group commit buys)\n", ratio(conc, seq))

	b.printf("\n  goals (information only; a missed goal does not fail the run)\n")
	goal := func(name string, v float64, ok bool, detail string) {
		mark := "not met"
		if math.IsNaN(v) {
			mark, detail = "not measured", ""
		} else if ok {
			mark = "met"
		}
		b.printf("    %-40s %-13s %s\n", name, mark, detail)
	}
	goal("API within 5x of floor (sequential)", floor/seq, floor/seq <= 5, "floor/API = "+ratio(floor, seq))
	goal("API within 5x of floor (concurrent)", floor/conc, floor/conc <= 5, "floor/API = "+ratio(floor, conc))
	goal("API about 80x baseline (sequential)", seq/base, seq/base >= 80, "API/baseline = "+ratio(seq, base))
	goal("CLI at least 5x baseline", cli/base, cli/base >= 5, "CLI/baseline = "+ratio(cli, base))
	b.summary("CLI post / git plumbing post", fmt.Sprintf("%.1f/s", cli), fmt.Sprintf("%.1f/s", base), ratio(cli, base), ">= 5x", cli/base >= 5)
	b.summary("API post, 1 goroutine: fsync floor / API", fmt.Sprintf("%.0f/s", seq), fmt.Sprintf("%.0f/s", floor), ratio(floor, seq), "<= 5x", floor/seq <= 5)
	b.summary("API post, 1 goroutine / git plumbing post", fmt.Sprintf("%.0f/s", seq), fmt.Sprintf("%.1f/s", base), ratio(seq, base), ">= 80x", seq/base >= 80)
	b.summary(fmt.Sprintf("API post, %d goroutines: fsync floor / API", *flagWorkers), fmt.Sprintf("%.0f/s", conc), fmt.Sprintf("%.0f/s", floor), ratio(floor, conc), "<= 5x", floor/conc <= 5)
	b.summary(fmt.Sprintf("CLI --stdin batch of %d / git plumbing post", *flagBatchPosts), fmt.Sprintf("%.0f/s", batch), fmt.Sprintf("%.1f/s", base), ratio(batch, base), "", false)

	// Where the time of a sequential post goes.
	if modes[modeAPISeq] && len(results[modeAPISeq].rates.vals) > 0 {
		wall := time.Duration(float64(time.Second) / seq)
		self := time.Duration(median(results[modeAPISeq].self))
		b.printf("\n  where the time of one sequential API post goes (medians)\n")
		b.printf("    %-66s %9s\n", "wall time", ms(wall))
		b.printf("    %-66s %9s\n", "  CPU of the bench process (the library, its system calls)", ms(self))
		b.printf("    %-66s %9s\n", "  not on a CPU (waiting for the disk)", ms(wall-self))
		if len(ph) > 0 {
			var pk, rf, sg []float64
			for _, c := range ph {
				pk = append(pk, float64(c.pack))
				rf = append(rf, float64(c.refs))
				sg = append(sg, float64(c.sign))
			}
			pack, move, sign := time.Duration(median(pk)), time.Duration(median(rf)), time.Duration(median(sg))
			b.printf("    the write path's steps timed alone (library packages, objects shaped like a post, %d iterations):\n", *flagPhaseIters)
			b.printf("    %-66s %9s\n", "  gitstore.WritePack: 7 objects -> .pack+.idx, fsynced, renamed, dir", ms(pack))
			b.printf("    %-66s %9s\n", "  refs.Transactor.Apply: 3 refs (lock files, renames), 3 dir fsyncs", ms(move))
			b.printf("    %-66s %9s\n", "  2 SSH commit signatures (spine, audit)", ms(sign))
			b.printf("    %-66s %9s\n", "  rest (wall minus the above: records, JSON, heads, compaction)", ms(wall-pack-move-sign))
		}
	}
	if modes[modeAPISeq] && *flagStepPosts > 0 {
		if err := b.printSteps(*flagStepPosts, keys, size); err != nil {
			b.fail("write-path steps: %v", err)
		}
	}
	if *flagSyscalls && (modes[modeAPISeq] || modes[modeCLI] || modes[modeCLIBatch] || modes[modeBaseline]) {
		if _, err := exec.LookPath("strace"); err != nil {
			b.printf("\n  (strace not found: system calls per post not counted)\n")
		} else {
			b.printf("\n  system calls per post (strace -f over the whole process tree; two run sizes, difference / posts)\n")
			b.printf("    %-34s %7s %9s %9s %9s %20s\n", "measurement", "fsyncs", "creates", "renames", "execs", "est. disk time/post")
			var seqFsyncs float64
			for _, m := range []string{modeAPISeq, modeAPIConc, modeCLI, modeCLIBatch, modeBaseline} {
				if !modes[m] {
					continue
				}
				small, large := 10, 30
				if m == modeAPIConc {
					small, large = 40, 120 // enough posts for batches to form
				}
				c, err := b.countSyscalls(m, small, large)
				if err != nil {
					b.printf("    %-34s (not counted: %v)\n", m, err)
					continue
				}
				est := "-"
				if fsMed.newFile > 0 {
					est = ms(time.Duration(c.fsync*float64(fsMed.newFile) + c.creates*float64(fsMed.create)))
				}
				label := fmt.Sprintf("%s (%d vs %d posts)", m, small, large)
				b.printf("    %-34s %7.1f %9.1f %9.1f %9.1f %20s\n", label, c.fsync, c.creates, c.renames, c.execs, est)
				if m == modeAPISeq {
					seqFsyncs = c.fsync
				}
				if m == modeAPIConc && seqFsyncs > 0 && c.fsync > 0 {
					b.printf("    %-34s implied mean batch under strace: %.1f posts per ref transaction\n", "", seqFsyncs/c.fsync)
				}
			}
			b.printf("    (creates: exclusive file creations and mkdirs; est. disk time = fsyncs x fsync + creates x create;\n")
			b.printf("    cli-batch: what one more post of a batch adds, since a batch syncs once whatever its size)\n")
		}
	}

	b.printf("\n  memory\n")
	if modes[modeAPISeq] || modes[modeAPIConc] {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		b.printf("    API (this process): max RSS %s; Go heap peak %s during API runs, %s in use now (heap sys %s)\n",
			mib(ru.Maxrss), mibBytes(heapPeak), mibBytes(m.HeapInuse), mibBytes(m.HeapSys))
	}
	if modes[modeCLI] || modes[modeBaseline] {
		if b.timeBin == "" {
			b.printf("    CLI, baseline: peak RSS of child processes not measured (GNU time not found; a child's ru_maxrss\n")
			b.printf("    from wait4 also counts the Go parent's peak, since Go starts children with vfork)\n")
		}
		if b.timeBin != "" && modes[modeCLI] {
			if run, err := b.cliPosts(5, keys, size, true); err != nil {
				b.fail("memory probe, cli: %v", err)
			} else {
				b.printf("    CLI: peak RSS of one post process %s (max over 5 posts, each under %s -f %%M: the\n", mib(run.maxRSS), b.timeBin)
				b.printf("    bernstein process and the git children it waited for)\n")
			}
		}
		if b.timeBin != "" && modes[modeBaseline] {
			if run, err := b.baselinePosts(5, keys, size, true); err != nil {
				b.fail("memory probe, baseline: %v", err)
			} else {
				b.printf("    baseline: peak RSS of one git process %s (max over 5 posts' git commands, each under %s -f %%M)\n", mib(run.maxRSS), b.timeBin)
			}
		}
	}
	b.printf("\n  notes: every API and CLI post returned success and was durable when it returned (pack, index and\n")
	b.printf("  keep fsynced, the pack directory fsynced before any ref moved, ref lock files fsynced, the ref\n")
	b.printf("  directories fsynced after the renames; a batch's posts all of it, once). After\n")
	b.printf("  each run, untimed, the commit counts of journal, spine, audit and ledger were checked and git fsck\n")
	b.printf("  --strict run. The baseline's spine and audit commits are unsigned, git does not fsync directories\n")
	b.printf("  after its renames (core.fsync=all covers files only), and git 2.39's mktree writes its trees without\n")
	b.printf("  an fsync (see the baseline's fsyncs per post above), so the baseline does somewhat less work.\n")
	return nil
}

// cliBatch posts n artifacts with one `bernstein artifact post --stdin`
// process: one JSON line a post, all written as one durable write.
func (b *bench) cliBatch(n, keys, size int) (postRun, error) {
	dir, err := b.mkrepoDir("cli-batch-")
	if err != nil {
		return postRun{}, err
	}
	tok, before, err := b.setupRepo(dir)
	if err != nil {
		return postRun{}, err
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for i := 0; i < n; i++ {
		line := map[string]string{"task": benchTask, "key": keyOf(i, keys), "type": "report", "body": bodyOf("cli-batch", i, size)}
		if err := enc.Encode(line); err != nil {
			return postRun{}, err
		}
	}
	cmd := exec.Command(b.bin, "--repo", dir, "artifact", "post", "--stdin", "--agent", benchAgent, "--claim-token", tok)
	cmd.Env = cleanEnv("BERNSTEIN_HOME=" + b.home)
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err = cmd.Run()
	elapsed := time.Since(t0)
	if err != nil {
		return postRun{}, fmt.Errorf("cli batch: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	run := postRun{posts: n, elapsed: elapsed, lat: []time.Duration{elapsed}, cpuKids: processCPU(cmd.ProcessState)}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != n {
		return run, fmt.Errorf("cli batch printed %d lines for %d posts", len(lines), n)
	}
	for i, l := range lines {
		var r struct {
			Line    int    `json:"line"`
			Status  string `json:"status"`
			Key     string `json:"key"`
			Version int64  `json:"version"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Line != i+1 || r.Status != "posted" || r.Key != keyOf(i, keys) || r.Version != int64(i/keys+1) {
			return run, fmt.Errorf("cli batch line %d: %s", i+1, l)
		}
	}
	return run, verifyRepo(dir, before, n)
}

// printSteps times the durable steps of n sequential API posts on a fresh
// repository, through the write path's fault points: for each step, the
// median time from the post's start to the step. Steps of the pack and of
// the ref locks run side by side, so each is timed from the start, not from
// the step before.
func (b *bench) printSteps(n, keys, size int) error {
	dir, err := b.mkrepoDir("steps-")
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var t0 time.Time
	at := map[string][]time.Duration{}
	var order []string
	s, tok, before, err := b.openFreshHook(dir, func(step string) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := at[step]; !ok {
			order = append(order, step)
		}
		at[step] = append(at[step], time.Since(t0))
		return nil
	})
	if err != nil {
		return err
	}
	var total []time.Duration
	for i := 0; i < n; i++ {
		req := bernstein.PostRequest{Task: benchTask, Key: keyOf(i, keys), Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("steps", i, size)}
		mu.Lock()
		t0 = time.Now()
		mu.Unlock()
		_, err := s.Post(req)
		mu.Lock()
		total = append(total, time.Since(t0))
		mu.Unlock()
		if err != nil {
			s.Close()
			return err
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	if err := verifyRepo(dir, before, n); err != nil {
		return err
	}
	b.printf("    a sequential post's steps, median time from its start (%d posts; the pack's and the locks' side by side):\n", n)
	for _, step := range order {
		// Steps of a compaction (after some posts) are not the post's own.
		if len(at[step]) < n/2 {
			continue
		}
		b.printf("    %-66s %9s\n", "  "+stepLabel(step), ms(percentile(at[step], 50)))
	}
	b.printf("    %-66s %9s\n", "  acknowledged (Post returned)", ms(percentile(total, 50)))
	return nil
}

func stepLabel(step string) string {
	labels := map[string]string{
		"intent written":     "intent written (staged keep; records built and signed)",
		"pack temps synced":  "pack and index written and fsynced",
		"locked":             "ref locks created, written and fsynced",
		"checked":            "old values checked under the locks",
		"pack .keep renamed": "keep renamed into the pack directory",
		"pack .pack renamed": "pack renamed in",
		"pack .idx renamed":  "index renamed in",
		"pack dir synced":    "pack directory fsynced",
		"packed":             "(commit point next)",
		"renamed 0":          "first ref renamed: committed",
		"renamed 1":          "second ref renamed",
		"renamed 2":          "third ref renamed",
		"dirs synced":        "ref directories fsynced",
	}
	if l, ok := labels[step]; ok {
		return l
	}
	return step
}
