package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bernstein/bernstein"
)

// The history section: what a read, a post and a long-running server cost
// as one key of one task gathers versions. Every figure is a ratio against a
// baseline measured in the same run (the same commands on a shorter
// history, the same post at an early version, the same server after fewer
// posts), so no wall-clock limit is asserted.

var (
	flagHistVersions   = flag.String("history-versions", "1000,4000", "history: versions of the one key in each repository the CLI reads (ratios: last / first)")
	flagHistRuns       = flag.Int("history-runs", 3, "history: timed CLI runs of each command on each repository per round")
	flagHistBytesAt    = flag.String("history-bytes-at", "10,1000,4000", "history: versions whose post's added objects and pack are measured")
	flagHistTimedPosts = flag.Int("history-timed-posts", 5, "history: sequential API posts timed up to each measured version")
	flagHistMCPPosts   = flag.Int("history-mcp-posts", 3000, "history: posts through one `bernstein mcp` stdio server per round")
	flagHistMCPSamples = flag.String("history-mcp-samples", "500,1000,2000,3000", "history: post counts after which the MCP server's VmRSS is read (RSS ratio: last / the one nearest a third of it)")
	flagHistServePosts = flag.Int("history-serve-posts", 3000, "history: posts through the API of one `bernstein serve` per round (one event-stream client follows the task)")
	flagHistServeSamp  = flag.String("history-serve-samples", "500,1000,2000,3000", "history: post counts after which serve's VmRSS is read (RSS ratio: last / the one nearest a third of it)")
)

const (
	histKey      = "k0" // keyOf(i, 1): the one key every post of the section goes to
	histBody     = 512
	histReadGoal = 1.125 // reads may cost linear growth plus 12% (4.5x for 4x the versions)
	histRSSGoal  = 1.3   // the server's RSS: flat, within 1.3x
)

// postAdd is what one post added to a repository.
type postAdd struct {
	version   int
	objects   map[string]int // objects added, by type
	size      int64          // their uncompressed sizes, summed
	disk      int64          // their sizes in the packs (compressed or delta), summed
	packBytes int64          // the .pack file(s) the post wrote
	packs     int            // how many .pack files appeared
	compacted bool           // a pack disappeared: the post merged packs (packBytes is then the merged pack's size)
	post      durations      // the sequential API posts timed up to this version
}

func (a postAdd) count() int {
	n := 0
	for _, c := range a.objects {
		n += c
	}
	return n
}

func (a postAdd) kinds() string {
	var ks []string
	for k := range a.objects {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var out []string
	for _, k := range ks {
		out = append(out, fmt.Sprintf("%d %s", a.objects[k], k))
	}
	return strings.Join(out, ", ")
}

// historyRepo is one repository whose task benchTask has versions versions
// of histKey and nothing else in its journal.
type historyRepo struct {
	dir      string
	versions int
	build    time.Duration
	adds     []postAdd
	objects  packInfo
	before   map[string]int // chain counts before the first post
	cliPosts int            // versions added later by timed CLI posts
	token    string         // the bench agent's claim token
}

// histCommand is one timed CLI read and the check of what it printed.
type histCommand struct {
	label string
	args  []string
	check func(out []byte, versions int) error
}

var histCommands = []histCommand{
	{"artifact list T --output-json", []string{"artifact", "list", benchTask, "--output-json"}, checkHistList},
	{"artifact show T k --output-json", []string{"artifact", "show", benchTask, histKey, "--output-json"}, checkHistShow},
	{"audit verify --task T --output-json", []string{"audit", "verify", "--task", benchTask, "--output-json"}, checkHistVerify},
	{"task progress T --output-json", []string{"task", "progress", benchTask, "--output-json"}, checkHistProgress},
}

func runHistory(b *bench) error {
	sizes, err := parseCounts(*flagHistVersions)
	if err != nil {
		return fmt.Errorf("-history-versions: %w", err)
	}
	at, err := parseCounts(*flagHistBytesAt)
	if err != nil {
		return fmt.Errorf("-history-bytes-at: %w", err)
	}
	samples, err := parseCounts(*flagHistMCPSamples)
	if err != nil {
		return fmt.Errorf("-history-mcp-samples: %w", err)
	}
	serveSamples, err := parseCounts(*flagHistServeSamp)
	if err != nil {
		return fmt.Errorf("-history-serve-samples: %w", err)
	}
	sort.Ints(sizes)
	sort.Ints(at)
	sort.Ints(samples)
	sort.Ints(serveSamples)
	if len(sizes) < 2 || *flagHistRuns < 1 || *flagHistTimedPosts < 1 || *flagHistMCPPosts < samples[len(samples)-1] || *flagHistServePosts < serveSamples[len(serveSamples)-1] || *flagBuildWorkers < 1 {
		return fmt.Errorf("-history-versions needs two sizes; -history-runs, -history-timed-posts and -build-workers must be positive; -history-mcp-posts and -history-serve-posts must reach their last sample")
	}
	b.printf("  workload: task %s claimed by %s, one key %s, report bodies of %d B; every post a new version of that key.\n", benchTask, benchAgent, histKey, histBody)
	b.printf("  Repositories of %s versions built through the library API (%d goroutines on one Store; the posts up to\n", joinInts(sizes), *flagBuildWorkers)
	b.printf("  versions %s one at a time, %d timed each, the last one's added objects measured). Then %d rounds: each\n", joinInts(at), *flagHistTimedPosts, *flagRounds)
	b.printf("  read command %d times on each repository (fresh CLI process each, order alternated), and one `bernstein mcp`\n", *flagHistRuns)
	b.printf("  stdio server on a fresh repository taking %d posts, and one `bernstein serve` on another taking %d posts\n", *flagHistMCPPosts, *flagHistServePosts)
	b.printf("  through its API while an event-stream client follows the task. Medians.\n\n")

	var repos []*historyRepo
	for _, n := range sizes {
		r, err := b.buildHistory(n, at, *flagHistTimedPosts, *flagBuildWorkers)
		if err != nil {
			return fmt.Errorf("build %d versions: %w", n, err)
		}
		b.printf("  built %d versions in %s (%.0f posts/s); %s\n", n, r.build.Round(10*time.Millisecond), float64(n)/r.build.Seconds(), r.objects)
		repos = append(repos, r)
	}
	b.printf("  machine load after building: %s\n\n", machineLoad())

	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	read := func(r *historyRepo, c histCommand) (procRun, error) {
		run, err := b.runProc(env, false, b.bin, append([]string{"--repo", r.dir}, c.args...)...)
		if err != nil {
			return run, err
		}
		if run.exit != 0 {
			return run, fmt.Errorf("%d versions: bernstein %s exited %d: %s", r.versions, c.label, run.exit, run.stderr)
		}
		if err := c.check(run.stdout, r.versions); err != nil {
			return run, fmt.Errorf("%d versions: bernstein %s: %w", r.versions, c.label, err)
		}
		return run, nil
	}
	// One untimed run of every command on every repository first, so both
	// start from the same state (the fold cache on disk, the page cache).
	for _, r := range repos {
		for _, c := range histCommands {
			if _, err := read(r, c); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
	}

	times := make([][]durations, len(histCommands)) // [command][repo]
	cpus := make([][]durations, len(histCommands))
	rss := make([][][]int64, len(histCommands))
	for i := range histCommands {
		times[i] = make([]durations, len(repos))
		cpus[i] = make([]durations, len(repos))
		rss[i] = make([][]int64, len(repos))
	}
	var mcps, serves []mcpRun
	for round := 0; round < *flagRounds; round++ {
		var line []string
		for run := 0; run < *flagHistRuns; run++ {
			for ci, c := range histCommands {
				for j := range repos {
					ri := j
					if (round+run+ci)%2 == 1 {
						ri = len(repos) - 1 - j
					}
					pr, err := read(repos[ri], c)
					if err != nil {
						return err
					}
					times[ci][ri] = append(times[ci][ri], pr.wall)
					cpus[ci][ri] = append(cpus[ci][ri], pr.cpu)
					rss[ci][ri] = append(rss[ci][ri], pr.rss)
				}
			}
		}
		for ci, c := range histCommands {
			name, _, _ := strings.Cut(c.label, " --")
			name = strings.TrimSuffix(strings.TrimSuffix(name, " T k"), " T")
			last := times[ci][len(repos)-1]
			first := times[ci][0]
			line = append(line, fmt.Sprintf("%s %s", name, dratio(durations(last[len(last)-*flagHistRuns:]).median(), durations(first[len(first)-*flagHistRuns:]).median())))
		}
		m, err := b.mcpRSS(*flagHistMCPPosts, samples)
		if err != nil {
			return fmt.Errorf("mcp server: %w", err)
		}
		mcps = append(mcps, m)
		line = append(line, fmt.Sprintf("mcp RSS %s at %d -> %s at %d posts", mib(m.rss[m.base]), samples[m.base], mib(m.rss[len(samples)-1]), samples[len(samples)-1]))
		sv, err := b.serveRSS(*flagHistServePosts, serveSamples)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		serves = append(serves, sv)
		line = append(line, fmt.Sprintf("serve RSS %s at %d -> %s at %d posts", mib(sv.rss[sv.base]), serveSamples[sv.base], mib(sv.rss[len(serveSamples)-1]), serveSamples[len(serveSamples)-1]))
		b.printf("  round %d: %s\n", round+1, strings.Join(line, ", "))
	}

	// A post as a fresh CLI process on each repository, after the reads
	// (each adds a version, so the reads above saw exactly n).
	cliPost := make([]durations, len(repos))
	cliPostCPU := make([]durations, len(repos))
	for i := 0; i < 3**flagHistRuns**flagRounds; i++ {
		for j := range repos {
			ri := j
			if i%2 == 1 {
				ri = len(repos) - 1 - j
			}
			r := repos[ri]
			want := r.versions + r.cliPosts + 1
			pr, err := b.runProc(env, false, b.bin, "--repo", r.dir, "artifact", "post", benchTask, histKey, "--type", "report",
				"--body", bodyOf("history-cli", want, histBody), "--agent", benchAgent, "--claim-token", r.token)
			if err != nil {
				return err
			}
			if pr.exit != 0 {
				return fmt.Errorf("%d versions: CLI post exited %d: %s", r.versions, pr.exit, pr.stderr)
			}
			if p := fmt.Sprintf("posted %s v%d to %s ", histKey, want, benchTask); !strings.HasPrefix(string(pr.stdout), p) {
				return fmt.Errorf("%d versions: CLI post printed %q, want %q...", r.versions, strings.TrimSpace(string(pr.stdout)), p)
			}
			r.cliPosts++
			cliPost[ri] = append(cliPost[ri], pr.wall)
			cliPostCPU[ri] = append(cliPostCPU[ri], pr.cpu)
		}
	}
	for _, r := range repos {
		if err := verifyRepo(r.dir, r.before, r.versions+r.cliPosts); err != nil {
			return fmt.Errorf("%d versions after the CLI posts: %w", r.versions, err)
		}
	}

	first, last := repos[0], repos[len(repos)-1]
	growth := float64(last.versions) / float64(first.versions)
	readGoal := histReadGoal * growth

	// 1. Reads.
	b.printf("\n  CLI commands on task %s (fresh process each, under GNU time; reads: median of %d runs, posts: of %d;\n", benchTask, *flagRounds**flagHistRuns, 3**flagRounds**flagHistRuns)
	b.printf("  ratio: wall time at %d versions / at %d, and the same for CPU = user+sys; peak RSS: median)\n", last.versions, first.versions)
	b.printf("    %-38s %10s %13s %10s %13s %7s %7s %7s %9s %9s\n", "command", fmt.Sprintf("%d ver.", first.versions), "min..max ms",
		fmt.Sprintf("%d ver.", last.versions), "min..max ms", "ratio", "CPU", "goal", "RSS "+kShort(first.versions), "RSS "+kShort(last.versions))
	type verdict struct {
		name string
		ok   bool
		text string
	}
	var goals []verdict
	for ci, c := range histCommands {
		t0, t1 := times[ci][0], times[ci][len(repos)-1]
		q := float64(t1.median()) / float64(t0.median())
		qc := float64(cpus[ci][len(repos)-1].median()) / float64(cpus[ci][0].median())
		b.printf("    %-38s %10s %13s %10s %13s %6.2fx %6.2fx %6.2fx %9s %9s\n", c.label, ms(t0.median()), t0.span(),
			ms(t1.median()), t1.span(), q, qc, readGoal, mibOr(medianInt(rss[ci][0])), mibOr(medianInt(rss[ci][len(repos)-1])))
		goals = append(goals, verdict{fmt.Sprintf("%s at %d / at %d", strings.Fields(c.label)[0]+" "+strings.Fields(c.label)[1], last.versions, first.versions),
			q <= readGoal, fmt.Sprintf("%.2fx (at most %.2fx: linear plus %.0f%%); CPU %.2fx", q, readGoal, 100*(histReadGoal-1), qc)})
		b.summary(fmt.Sprintf("%s, %d / %d versions", strings.Join(strings.Fields(c.label)[:2], " "), last.versions, first.versions), ms(t1.median()), ms(t0.median()), fmt.Sprintf("%.2fx", q), fmt.Sprintf("<= %.2fx", readGoal), q <= readGoal)
	}
	t0, t1 := cliPost[0], cliPost[len(repos)-1]
	b.printf("    %-38s %10s %13s %10s %13s %6.2fx %6.2fx %7s\n", "artifact post T k (version n+1, ...)", ms(t0.median()), t0.span(),
		ms(t1.median()), t1.span(), float64(t1.median())/float64(t0.median()),
		float64(cliPostCPU[len(repos)-1].median())/float64(cliPostCPU[0].median()), "flat")
	b.printf("    (goal: reads at most %.2fx, linear plus %.0f%%; a post flat. A post that finds more than %d packs merges the\n", readGoal, 100*(histReadGoal-1), 16)
	b.printf("    smallest first, so single posts vary; the median is the steady cost)\n")

	// 2. What a post adds.
	b.printf("\n  what one post adds (the objects: `git rev-list --objects <refs after> --not <refs before>`, their sizes from\n")
	b.printf("  `git cat-file --batch-check`, uncompressed and as stored in the pack; the pack: the new .pack file's size)\n")
	b.printf("    %-8s %-9s %8s %10s %9s %10s  %-40s %12s\n", "version", "repo", "objects", "bytes", "in pack", "pack file", "objects by type", "API post")
	byVersion := map[int]postAdd{}
	var order []int
	for _, r := range repos {
		for _, a := range r.adds {
			pack := fmt.Sprintf("%d B", a.packBytes)
			if a.compacted {
				pack += "*"
			}
			b.printf("    %-8d %-9s %8d %8d B %7d B %10s  %-40s %12s\n", a.version, fmt.Sprintf("%d ver.", r.versions), a.count(), a.size, a.disk, pack, a.kinds(), ms(a.post.median()))
			if _, ok := byVersion[a.version]; !ok {
				order = append(order, a.version)
			}
			byVersion[a.version] = a // the largest repository's, the last built
		}
	}
	b.printf("    (* the post merged packs, so its pack file holds more than its own objects; API post: median of the %d\n", *flagHistTimedPosts)
	b.printf("    sequential Store.Post calls up to that version, each durable when it returns)\n")
	if len(order) >= 2 {
		sort.Ints(order)
		lo, hi := byVersion[order[0]], byVersion[order[len(order)-1]]
		b.printf("    version %d / version %d: objects %s, bytes %.3fx, in pack %.3fx, API post %s\n", hi.version, lo.version,
			fmt.Sprintf("%d/%d", hi.count(), lo.count()), float64(hi.size)/float64(lo.size), float64(hi.disk)/float64(lo.disk), dratio(hi.post.median(), lo.post.median()))
		// Equal up to the digits of the numbers the post writes (version
		// and index in paths and records): within 1%.
		okBytes := hi.count() == lo.count() && float64(hi.size) <= 1.01*float64(lo.size) && float64(hi.disk) <= 1.01*float64(lo.disk)
		goals = append(goals, verdict{fmt.Sprintf("bytes a post adds at v%d = at v%d", hi.version, lo.version), okBytes,
			fmt.Sprintf("%d vs %d objects, %.3fx bytes, %.3fx in pack (equal: same objects, within 1%%)", hi.count(), lo.count(), float64(hi.size)/float64(lo.size), float64(hi.disk)/float64(lo.disk))})
		goals = append(goals, verdict{fmt.Sprintf("API post at v%d vs at v%d", hi.version, lo.version), float64(hi.post.median()) <= 1.3*float64(lo.post.median()),
			"ratio " + dratio(hi.post.median(), lo.post.median()) + " (flat: within 1.3x; fsync-bound, noisy)"})
	}
	goals = append(goals, verdict{fmt.Sprintf("CLI post at %d vs at %d versions", last.versions, first.versions), float64(t1.median()) <= 1.3*float64(t0.median()),
		"ratio " + dratio(t1.median(), t0.median()) + " (flat: within 1.3x)"})
	b.summary(fmt.Sprintf("CLI post at %d / at %d versions", last.versions, first.versions), ms(t1.median()), ms(t0.median()), dratio(t1.median(), t0.median()), "<= 1.3x", float64(t1.median()) <= 1.3*float64(t0.median()))

	// 3. The servers' memory.
	for _, srv := range []struct {
		name, what string
		runs       []mcpRun
		samples    []int
		posts      int
	}{
		{"MCP server", fmt.Sprintf("one `bernstein mcp` stdio server, %d posts to %s/%s", *flagHistMCPPosts, benchTask, histKey), mcps, samples, *flagHistMCPPosts},
		{"serve", fmt.Sprintf("one `bernstein serve`, %d posts to %s/%s through POST /api/v1/tasks/{id}/artifacts, one event-stream\n  client following the task", *flagHistServePosts, benchTask, histKey), serves, serveSamples, *flagHistServePosts},
	} {
		ok, text, base, last, early, late := b.printServerMemory(srv.what, srv.runs, srv.samples, srv.posts)
		n := srv.samples
		goals = append(goals, verdict{fmt.Sprintf("%s RSS after %d / after %d posts", srv.name, n[len(n)-1], n[srv.runs[0].base]), ok, text})
		b.summary(fmt.Sprintf("%s VmRSS after %d / %d posts", srv.name, n[len(n)-1], n[srv.runs[0].base]), mib(last), mib(base), ratio(float64(last), float64(base)), fmt.Sprintf("<= %.1fx", histRSSGoal), ok)
		goals = append(goals, verdict{srv.name + " post latency, last posts / first posts", float64(late.median()) <= 1.3*float64(early.median()),
			"ratio " + dratio(late.median(), early.median()) + " (flat: within 1.3x)"})
	}

	b.printf("\n  goals (information only; a missed goal does not fail the run)\n")
	for _, g := range goals {
		mark := "not met"
		if g.ok {
			mark = "met"
		}
		b.printf("    %-52s %-8s %s\n", g.name, mark, g.text)
	}
	b.printf("\n  notes: every read exited 0 and its JSON was checked (list and show: every version present and verified, the\n")
	b.printf("  latest = n; verify: verified, no failures, n journal rows and artifacts; progress: n journal rows); every\n")
	b.printf("  post's version and journal index were checked, and for serve its event on the stream; chain lengths and\n")
	b.printf("  git fsck --strict checked afterwards.\n")
	b.printf("  The page cache is warm for every read; the machine is shared, so only ratios within this run mean anything.\n")

	// With -profile-dir: where a read's time goes, in-process (a fresh
	// Store each run, as the CLI opens one), at both lengths.
	for _, r := range []*historyRepo{first, last} {
		want := r.versions + r.cliPosts
		open := func(fn func(s *bernstein.Store) error) func() error {
			return func() error {
				s, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: b.home})
				if err != nil {
					return err
				}
				defer s.Close()
				return fn(s)
			}
		}
		if err := b.profileOp(fmt.Sprintf("history-list-%d", r.versions), 5, open(func(s *bernstein.Store) error {
			rep, err := s.Artifacts(benchTask)
			if err == nil && len(rep.Versions) != want {
				err = fmt.Errorf("in-process list: %d versions, want %d", len(rep.Versions), want)
			}
			return err
		})); err != nil {
			return err
		}
		if err := b.profileOp(fmt.Sprintf("history-verify-%d", r.versions), 5, open(func(s *bernstein.Store) error {
			rep, err := s.AuditVerify(bernstein.AuditOptions{Task: benchTask})
			if err == nil && (!rep.Verified || rep.Counts.Artifacts != want) {
				err = fmt.Errorf("in-process verify: verified=%v, %d versions, want %d", rep.Verified, rep.Counts.Artifacts, want)
			}
			return err
		})); err != nil {
			return err
		}
	}
	return nil
}

// printServerMemory prints the memory table of a long-running server's
// runs (one per round), and, for the first round, the posts that merged
// packs and where the peak rose. It returns whether VmRSS stayed flat, the
// goal's text, VmRSS at the base sample and at the last, and the post
// latencies of the first and last posts.
func (b *bench) printServerMemory(what string, runs []mcpRun, samples []int, posts int) (bool, string, int64, int64, durations, durations) {
	m := runs[0]
	b.printf("\n  %s (VmRSS and VmHWM from /proc/<pid>/status; median of %d rounds)\n", what, len(runs))
	b.printf("    %-12s %10s", "after posts", "0")
	for _, s := range samples {
		b.printf(" %10d", s)
	}
	b.printf("\n")
	med := func(get func(mcpRun) int64) int64 {
		var v []int64
		for _, r := range runs {
			v = append(v, get(r))
		}
		return medianInt(v)
	}
	for _, row := range []struct {
		label string
		get   func(mcpRun, int) int64
		first func(mcpRun) int64
	}{
		{"VmRSS", func(r mcpRun, i int) int64 { return r.rss[i] }, func(r mcpRun) int64 { return r.rss0 }},
		{"VmHWM", func(r mcpRun, i int) int64 { return r.hwm[i] }, func(r mcpRun) int64 { return r.hwm0 }},
	} {
		b.printf("    %-12s %10s", row.label, mib(med(row.first)))
		for i := range samples {
			b.printf(" %10s", mib(med(func(r mcpRun) int64 { return row.get(r, i) })))
		}
		b.printf("\n")
	}
	rssBase, rssLast := med(func(r mcpRun) int64 { return r.rss[r.base] }), med(func(r mcpRun) int64 { return r.rss[len(samples)-1] })
	var early, late durations
	for _, r := range runs {
		k := min(len(r.lat)/6, 500)
		early = append(early, r.lat[:k]...)
		late = append(late, r.lat[len(r.lat)-k:]...)
	}
	b.printf("    post latency (request to answer): first %d posts p50 %s, last %d p50 %s (%s); %.0f posts/s overall\n",
		len(early)/len(runs), ms(early.median()), len(late)/len(runs), ms(late.median()), dratio(late.median(), early.median()),
		float64(posts)/time.Duration(med(func(r mcpRun) int64 { return int64(r.elapsed) })).Seconds())
	b.printf("    VmRSS after %d / after %d posts: %s (goal: at most %.1fx); VmHWM: %s\n", samples[len(samples)-1], samples[m.base],
		ratio(float64(rssLast), float64(rssBase)), histRSSGoal,
		ratio(float64(med(func(r mcpRun) int64 { return r.hwm[len(samples)-1] })), float64(med(func(r mcpRun) int64 { return r.hwm[r.base] }))))
	// Where the peak rose, and what the post did then (the first round).
	var mergeLat, plainLat durations
	isMerge := map[int]bool{}
	for _, p := range m.merges {
		isMerge[p] = true
	}
	for i, l := range m.lat {
		if isMerge[i+1] {
			mergeLat = append(mergeLat, l)
		} else {
			plainLat = append(plainLat, l)
		}
	}
	b.printf("    round 1: %d of %d posts merged packs (more than 16 pack files); their latency p50 %s, max %s; the others' p50 %s\n",
		len(m.merges), len(m.lat), ms(mergeLat.median()), ms(maxDuration(mergeLat)), ms(plainLat.median()))
	var riseMerge, riseOther int64
	var nMerge, nOther int
	for _, r := range m.rises {
		if r.merged {
			riseMerge, nMerge = riseMerge+r.to-r.from, nMerge+1
		} else {
			riseOther, nOther = riseOther+r.to-r.from, nOther+1
		}
	}
	b.printf("    round 1: VmHWM rose from %s (before the first post) to %s: by %s at %d posts that merged packs or came at most %d\n",
		mib(m.hwm0), mib(m.hwm[len(m.hwm)-1]), mib(riseMerge), nMerge, mergeWake)
	b.printf("    after one, by %s at %d others\n", mib(riseOther), nOther)
	big := append([]hwmRise(nil), m.rises...)
	sort.Slice(big, func(i, j int) bool { return big[i].to-big[i].from > big[j].to-big[j].from })
	b.printf("    round 1: the largest rises:\n")
	for _, r := range big[:min(3, len(big))] {
		what := "no merge near it"
		if r.merged {
			what = "at or after a merge; all packs " + mib(r.packBytes/1024) + " before it"
		}
		b.printf("      post %d: %s -> %s (%s)\n", r.post, mib(r.from), mib(r.to), what)
	}
	ok := float64(rssLast) <= histRSSGoal*float64(rssBase)
	return ok, fmt.Sprintf("%.2fx (flat: at most %.1fx)", float64(rssLast)/float64(rssBase), histRSSGoal), rssBase, rssLast, early, late
}

// buildHistory makes a repository whose task has n versions of histKey: in
// bulk (workers goroutines on one Store, sharing batches), except that the
// k posts up to each version in at are made one at a time and timed, and
// the last of them is measured (the objects and pack it added).
func (b *bench) buildHistory(n int, at []int, k, workers int) (*historyRepo, error) {
	dir, err := b.mkrepoDir(fmt.Sprintf("history-%d-", n))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s, tok, err := b.setupStore(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	r := &historyRepo{dir: dir, versions: n, token: tok}
	if r.before, err = counts(dir, chainRefs()...); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var versions, indexes []int64
	post := func(v int) (*bernstein.PostResult, error) {
		res, err := s.Post(bernstein.PostRequest{Task: benchTask, Key: histKey, Agent: benchAgent, ClaimToken: tok,
			Payload: reportPayload("history", v, histBody)})
		if err != nil {
			return nil, fmt.Errorf("post (version %d): %w", v, err)
		}
		mu.Lock()
		versions = append(versions, res.Version)
		indexes = append(indexes, res.JournalIndex)
		mu.Unlock()
		return res, nil
	}
	next := 1 // the next version to post
	bulk := func(upto int) error {
		from := next
		if upto < from {
			return nil
		}
		next = upto + 1
		return parallel(upto-from+1, workers, func(i int) error {
			_, err := post(from + i)
			return err
		})
	}
	for _, p := range at {
		if p > n || p < next {
			continue
		}
		if err := bulk(p - k); err != nil {
			return nil, err
		}
		add := postAdd{version: p}
		for v := next; v <= p; v++ {
			var refsBefore []string
			var packsBefore map[string]int64
			if v == p {
				if refsBefore, err = bernsteinRefs(dir); err != nil {
					return nil, err
				}
				if packsBefore, err = packFiles(dir); err != nil {
					return nil, err
				}
			}
			t0 := time.Now()
			res, err := post(v)
			took := time.Since(t0)
			if err != nil {
				return nil, err
			}
			if res.Version != int64(v) || res.JournalIndex != int64(v-1) {
				return nil, fmt.Errorf("sequential post: got v%d at journal index %d, want v%d at %d", res.Version, res.JournalIndex, v, v-1)
			}
			add.post = append(add.post, took)
			if v == p {
				if err := measureAdd(dir, refsBefore, packsBefore, &add); err != nil {
					return nil, fmt.Errorf("version %d: %w", v, err)
				}
			}
		}
		next = p + 1
		r.adds = append(r.adds, add)
	}
	if err := bulk(n); err != nil {
		return nil, err
	}
	if len(versions) != n {
		return nil, fmt.Errorf("%d posts returned, want %d", len(versions), n)
	}
	if err := consecutive("versions of "+histKey, versions, 1); err != nil {
		return nil, err
	}
	if err := consecutive("journal indexes", indexes, 0); err != nil {
		return nil, err
	}
	err = s.Close()
	s = nil
	if err != nil {
		return nil, err
	}
	r.build = time.Since(start)
	if err := verifyRepo(dir, r.before, n); err != nil {
		return nil, err
	}
	r.objects, err = countObjects(dir)
	return r, err
}

// bernsteinRefs lists the object ids refs/bernstein/* point at.
func bernsteinRefs(dir string) ([]string, error) {
	out, err := gitIn(dir, nil, "for-each-ref", "--format=%(objectname)", "refs/bernstein/")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// packFiles maps the repository's .pack files to their sizes.
func packFiles(dir string) (map[string]int64, error) {
	paths, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "*.pack"))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			out[filepath.Base(p)] = fi.Size()
		}
	}
	return out, nil
}

// measureAdd fills add with the objects reachable from the refs now and
// not from refsBefore, and the pack files that appeared.
func measureAdd(dir string, refsBefore []string, packsBefore map[string]int64, add *postAdd) error {
	after, err := bernsteinRefs(dir)
	if err != nil {
		return err
	}
	args := append([]string{"rev-list", "--objects"}, after...)
	args = append(args, "--not")
	args = append(args, refsBefore...)
	out, err := gitIn(dir, nil, args...)
	if err != nil {
		return err
	}
	var ids bytes.Buffer
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			ids.WriteString(f[0] + "\n")
		}
	}
	out, err = gitIn(dir, ids.Bytes(), "cat-file", "--batch-check=%(objecttype) %(objectsize) %(objectsize:disk)")
	if err != nil {
		return err
	}
	add.objects = map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return fmt.Errorf("git cat-file --batch-check printed %q", line)
		}
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		disk, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("git cat-file --batch-check printed %q", line)
		}
		add.objects[f[0]]++
		add.size += size
		add.disk += disk
	}
	if add.count() == 0 {
		return fmt.Errorf("the post added no object")
	}
	packs, err := packFiles(dir)
	if err != nil {
		return err
	}
	for name, size := range packs {
		if _, ok := packsBefore[name]; !ok {
			add.packs++
			add.packBytes += size
		}
	}
	for name := range packsBefore {
		if _, ok := packs[name]; !ok {
			add.compacted = true
		}
	}
	if add.packs == 0 {
		return fmt.Errorf("the post wrote no pack file")
	}
	return nil
}

// The checks of what each read printed.

func checkHistList(out []byte, n int) error {
	var doc struct {
		Verified  bool `json:"verified"`
		Artifacts []struct {
			Key     string `json:"key"`
			Version int64  `json:"version"`
			State   string `json:"state"`
		} `json:"artifacts"`
		Failures []json.RawMessage `json:"failures"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return fmt.Errorf("printed %q: %w", firstBytes(out, 200), err)
	}
	if len(doc.Artifacts) != n || len(doc.Failures) != 0 {
		return fmt.Errorf("%d versions and %d failures, want %d and 0", len(doc.Artifacts), len(doc.Failures), n)
	}
	seen := make([]bool, n+1)
	for _, a := range doc.Artifacts {
		if a.Key != histKey || a.Version < 1 || a.Version > int64(n) || seen[a.Version] || a.State != "verified" {
			return fmt.Errorf("version %s v%d is %s (want each of v1..v%d once, verified)", a.Key, a.Version, a.State, n)
		}
		seen[a.Version] = true
	}
	return nil
}

func checkHistShow(out []byte, n int) error {
	var doc struct {
		Version int64           `json:"version"`
		State   string          `json:"state"`
		Payload json.RawMessage `json:"payload"`
		History []struct {
			Version int64 `json:"version"`
		} `json:"history"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return fmt.Errorf("printed %q: %w", firstBytes(out, 200), err)
	}
	if doc.Version != int64(n) || doc.State != "verified" || len(doc.History) != n || len(doc.Payload) == 0 || string(doc.Payload) == "null" {
		return fmt.Errorf("showed v%d (%s) with %d versions of history, want v%d verified with %d and its payload", doc.Version, doc.State, len(doc.History), n, n)
	}
	return nil
}

func checkHistVerify(out []byte, n int) error {
	var doc struct {
		Verified bool              `json:"verified"`
		Failures []json.RawMessage `json:"failures"`
		Counts   struct {
			Tasks       int `json:"tasks"`
			JournalRows int `json:"journal_rows"`
			Artifacts   int `json:"artifacts"`
			Verified    int `json:"verified"`
		} `json:"counts"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return fmt.Errorf("printed %q: %w", firstBytes(out, 200), err)
	}
	c := doc.Counts
	if !doc.Verified || len(doc.Failures) != 0 || c.Tasks != 1 || c.JournalRows != n || c.Artifacts != n || c.Verified != n {
		return fmt.Errorf("verified=%v, %d failures, %d tasks, %d journal rows, %d artifacts (%d verified); want true, 0, 1, %d, %d (%d)",
			doc.Verified, len(doc.Failures), c.Tasks, c.JournalRows, c.Artifacts, c.Verified, n, n, n)
	}
	return nil
}

func checkHistProgress(out []byte, n int) error {
	var doc struct {
		TaskID      string `json:"task_id"`
		JournalRows int64  `json:"journal_rows"`
		LedgerRows  int64  `json:"ledger_rows"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return fmt.Errorf("printed %q: %w", firstBytes(out, 200), err)
	}
	if doc.JournalRows != int64(n) || doc.LedgerRows != 2 {
		return fmt.Errorf("%d journal rows, %d ledger rows; want %d and 2", doc.JournalRows, doc.LedgerRows, n)
	}
	return nil
}

// mcpRun is one `bernstein mcp` server taking posts.
type mcpRun struct {
	rss0, hwm0 int64   // KiB after initialize, before any post
	rss, hwm   []int64 // KiB after each sample's post count
	base       int     // the sample the last is compared with (nearest a third of the last)
	lat        durations
	elapsed    time.Duration
	merges     []int     // the posts (1-based) after which fewer pack files were left: the post merged packs
	rises      []hwmRise // the posts after which VmHWM had risen
}

// memTrack reads a server's memory and the repository's packs after each
// post: VmRSS and VmHWM at the sample points, each rise of VmHWM, and the
// posts that merged packs.
type memTrack struct {
	m       *mcpRun
	pid     int
	dir     string
	samples []int
	next    int
	hwm     int64
	packs   map[string]int64
}

func newMemTrack(m *mcpRun, pid int, dir string, samples []int) (*memTrack, error) {
	packs, err := packFiles(dir)
	if err != nil {
		return nil, err
	}
	return &memTrack{m: m, pid: pid, dir: dir, samples: samples, hwm: m.hwm0, packs: packs}, nil
}

// afterPost records what post (1-based) left.
func (t *memTrack) afterPost(post int) error {
	m := t.m
	rss, h, err := procMemory(t.pid)
	if err != nil {
		return err
	}
	after, err := packFiles(t.dir)
	if err != nil {
		return err
	}
	merged := len(after) < len(t.packs)
	if merged {
		m.merges = append(m.merges, post)
	}
	if len(m.merges) > 0 && post-m.merges[len(m.merges)-1] <= mergeWake {
		merged = true
	}
	if h > t.hwm {
		var total int64
		for _, n := range t.packs {
			total += n
		}
		m.rises = append(m.rises, hwmRise{post: post, from: t.hwm, to: h, merged: merged, packBytes: total})
	}
	t.hwm, t.packs = h, after
	if t.next < len(t.samples) && post == t.samples[t.next] {
		m.rss, m.hwm = append(m.rss, rss), append(m.hwm, h)
		t.next++
	}
	return nil
}

// mergeWake is how many posts after one that merged packs a rise of the
// peak RSS is still put down to the merge (the Go runtime grows into the
// pages the merge freed before it returns them).
const mergeWake = 64

// hwmRise is a post that raised the server's peak RSS.
type hwmRise struct {
	post      int
	from, to  int64 // VmHWM, KiB
	merged    bool  // the post merged packs, or one of the mergeWake posts before it did
	packBytes int64 // the .pack files' bytes before the post
}

// mcpRSS starts one stdio MCP server as the bench agent on a fresh
// repository, makes posts tools/call posts to histKey one after the other,
// and reads the server's VmRSS after each sample count.
func (b *bench) mcpRSS(posts int, samples []int) (mcpRun, error) {
	var m mcpRun
	dir, err := b.mkrepoDir("history-mcp-")
	if err != nil {
		return m, err
	}
	tok, before, err := b.setupRepo(dir)
	if err != nil {
		return m, err
	}
	cmd := exec.Command(b.bin, "--repo", dir, "mcp", "--agent", benchAgent, "--claim-token", tok)
	cmd.Env = cleanEnv("BERNSTEIN_HOME=" + b.home)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return m, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return m, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return m, err
	}
	lines := make(chan []byte, 16)
	go func() {
		defer close(lines)
		rd := bufio.NewReaderSize(stdout, 1<<16)
		for {
			line, err := rd.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	done := false
	defer func() {
		if !done {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	send := func(msg any) error {
		data, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		_, err = stdin.Write(append(data, '\n'))
		return err
	}
	type response struct {
		ID     *int64 `json:"id"`
		Result *struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Key          string `json:"key"`
				Version      int64  `json:"version"`
				JournalIndex int64  `json:"journal_index"`
			} `json:"structuredContent"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	recv := func(id int64) (*response, error) {
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					return nil, fmt.Errorf("the server closed its output waiting for response %d: %s", id, strings.TrimSpace(stderr.String()))
				}
				var r response
				if err := json.Unmarshal(line, &r); err != nil {
					return nil, fmt.Errorf("the server printed %q: %w", firstBytes(line, 200), err)
				}
				if r.ID == nil { // a notification
					continue
				}
				if *r.ID != id {
					return nil, fmt.Errorf("response %d while waiting for %d", *r.ID, id)
				}
				if r.Error != nil {
					return nil, fmt.Errorf("request %d: JSON-RPC error %d: %s", id, r.Error.Code, r.Error.Message)
				}
				if r.Result == nil {
					return nil, fmt.Errorf("request %d: no result", id)
				}
				return &r, nil
			case <-timeout:
				return nil, fmt.Errorf("no response %d in 2 minutes", id)
			}
		}
	}
	pid := cmd.Process.Pid
	if err := send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "bench", "version": "1"}}}); err != nil {
		return m, err
	}
	if _, err := recv(1); err != nil {
		return m, fmt.Errorf("initialize: %w", err)
	}
	if err := send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); err != nil {
		return m, err
	}
	if m.rss0, m.hwm0, err = procMemory(pid); err != nil {
		return m, err
	}
	m.lat = make(durations, 0, posts)
	track, err := newMemTrack(&m, pid, dir, samples)
	if err != nil {
		return m, err
	}
	start := time.Now()
	for i := 0; i < posts; i++ {
		id := int64(i + 2)
		t0 := time.Now()
		if err := send(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{
			"name": "bernstein_post_artifact", "arguments": map[string]any{"task_id": benchTask, "key": histKey,
				"artifact_type": "report", "body": bodyOf("history-mcp", i, histBody)}}}); err != nil {
			return m, fmt.Errorf("post %d: %w", i, err)
		}
		r, err := recv(id)
		if err != nil {
			return m, fmt.Errorf("post %d: %w", i, err)
		}
		m.lat = append(m.lat, time.Since(t0))
		sc := r.Result.StructuredContent
		if r.Result.IsError {
			text := ""
			if len(r.Result.Content) > 0 {
				text = r.Result.Content[0].Text
			}
			return m, fmt.Errorf("post %d: tool error: %s", i, text)
		}
		if sc.Key != histKey || sc.Version != int64(i+1) || sc.JournalIndex != int64(i) {
			return m, fmt.Errorf("post %d: got %s v%d at journal index %d, want %s v%d at %d", i, sc.Key, sc.Version, sc.JournalIndex, histKey, i+1, i)
		}
		if err := track.afterPost(i + 1); err != nil {
			return m, err
		}
	}
	m.elapsed = time.Since(start)
	if err := stdin.Close(); err != nil {
		return m, err
	}
	for range lines { // drain until the server closes its output
	}
	done = true
	if err := cmd.Wait(); err != nil {
		return m, fmt.Errorf("the server exited: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	// The sample nearest a third of the last (1000 of 3000) is the base.
	third := samples[len(samples)-1] / 3
	for i, s := range samples {
		if abs(s-third) < abs(samples[m.base]-third) {
			m.base = i
		}
	}
	return m, verifyRepo(dir, before, posts)
}

// procMemory reads VmRSS and VmHWM (KiB) of a running process.
func procMemory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			rss, _ = strconv.ParseInt(f[0], 10, 64)
		case "VmHWM":
			hwm, _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return rss, hwm, nil
}

func maxDuration(d durations) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func kShort(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
