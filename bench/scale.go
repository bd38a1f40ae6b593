package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/server"
)

// The scale section: what the number of tasks costs. Repositories of 1k and
// 10k tasks (100k with -scale-tasks), each task created, claimed and given
// one artifact version through the library (two refs a task, as a team's
// repository holds them). On each, in the same run:
//
//   - constant work, which must cost the same at every size (within 1.5x
//     from the smallest to the largest): a post (library and CLI), a post's
//     event reaching an SSE subscriber, task show, artifact show, audit
//     verify --since after a few posts; against git's own constant work, a
//     `git cat-file -p` of one task's journal ref;
//   - listings, which must be linear (at most 10x for 10x the tasks): task
//     list (whole, and a page of 100), artifact list with no task, the
//     index page, GET /api/v1/tasks (whole, and a page of 100); against `git for-each-ref
//     refs/bernstein/`;
//   - the same reads again after `git pack-refs --all`, `git gc` and `git
//     maintenance run`, whose ref stores (packed-refs) must keep them so.
//
// Every CLI read is a fresh process; its CPU time (user+sys) is the
// headline on a shared machine, its wall time is printed beside it. A read
// that fails, or a list that misses a task, fails the run; a missed goal is
// printed.

var (
	flagScaleTasks   = flag.String("scale-tasks", "1000,10000", "scale: task counts of the repositories (e.g. 1000,10000,100000)")
	flagScaleWorkers = flag.Int("scale-workers", 64, "scale: goroutines on one Store building a repository")
	flagScaleRuns    = flag.Int("scale-runs", 5, "scale: runs of each constant-work measure per repository")
	flagScaleLists   = flag.Int("scale-list-runs", 3, "scale: runs of each listing per repository (1 beyond 10,000 tasks)")
	flagScalePosts   = flag.Int("scale-posts", 20, "scale: in-process posts timed to their SSE event per repository")
	flagScaleStates  = flag.String("scale-ref-states", "loose,pack-refs,gc,maintenance", "scale: ref stores to measure in turn (git pack-refs --all, git gc, git maintenance run)")
)

// scaleMeasure is one figure per repository size.
type scaleMeasure struct {
	name  string
	kind  string // "const" or "list"
	git   string // the git figure it is set against
	wall  map[int]durations
	cpu   map[int]durations
	extra map[int]string
}

type scaleTable struct {
	order []string
	by    map[string]*scaleMeasure
}

func (t *scaleTable) add(name, kind, git string, n int, wall, cpu time.Duration) {
	m := t.by[name]
	if m == nil {
		m = &scaleMeasure{name: name, kind: kind, git: git, wall: map[int]durations{}, cpu: map[int]durations{}, extra: map[int]string{}}
		t.by[name] = m
		t.order = append(t.order, name)
	}
	m.wall[n] = append(m.wall[n], wall)
	if cpu > 0 {
		m.cpu[n] = append(m.cpu[n], cpu)
	}
}

// value is what a measure's ratio is taken of: CPU time when it was
// measured (processes), else wall time.
func (m *scaleMeasure) value(n int) time.Duration {
	if len(m.cpu[n]) > 0 {
		return m.cpu[n].median()
	}
	return m.wall[n].median()
}

func runScale(b *bench) error {
	ns, err := parseCounts(*flagScaleTasks)
	if err != nil {
		return fmt.Errorf("-scale-tasks: %w", err)
	}
	sort.Ints(ns)
	if len(ns) < 2 || *flagScaleRuns < 1 || *flagScaleLists < 1 || *flagScalePosts < 1 {
		return errors.New("-scale-tasks needs two sizes; -scale-runs, -scale-list-runs and -scale-posts must be positive")
	}
	states := strings.Split(*flagScaleStates, ",")
	home := b.home
	b.printf("  workload: N tasks s-000000.., each created, claimed by its own agent and given one report (256 B) by\n")
	b.printf("  %d goroutines on one Store; a probe task created and claimed for each run's posts. Reads: %d runs of\n", *flagScaleWorkers, *flagScaleRuns)
	b.printf("  each constant measure, %d of each listing (1 beyond 10,000 tasks), CLI reads as fresh processes (CPU\n", *flagScaleLists)
	b.printf("  time, wall beside it); the server in this process. Ref stores in turn: %s.\n\n", strings.Join(states, ", "))
	parts := map[string]bool{}
	for _, p := range strings.Split(*flagScaleParts, ",") {
		if p != "reads" && p != "remote" {
			return fmt.Errorf("-scale-parts: %q is not reads or remote", p)
		}
		parts[p] = true
	}
	tab := &scaleTable{by: map[string]*scaleMeasure{}}
	figs := &remoteFigures{bytes: map[string]map[int][]int64{}}
	for _, n := range ns {
		r, err := b.scaleRepoAt(home, n)
		if err != nil {
			return fmt.Errorf("%d tasks: %w", n, err)
		}
		for _, st := range states {
			if !parts["reads"] {
				break
			}
			// A failed measure fails the run, but what was measured
			// before it and in the other stores and sizes is still
			// printed: a long run at 100,000 tasks is not lost whole.
			if err := b.scaleMeasure(tab, r, home, n, st); err != nil {
				b.fail("section scale: %d tasks, %s: %v", n, st, err)
			}
		}
		if parts["remote"] {
			if err := b.scaleRemote(tab, figs, r, home, n); err != nil {
				b.fail("section scale: %d tasks, remote: %v", n, err)
			}
		}
	}
	b.scaleReport(tab, ns)
	b.scaleRemoteReport(tab, figs, ns)
	return nil
}

// scaleRepoAt builds the repository of n tasks and takes the audit
// checkpoint its --since runs start from.
func (b *bench) scaleRepoAt(home string, n int) (*scaleRepo, error) {
	dir, err := b.mkrepoDir(fmt.Sprintf("tasks-%d-", n))
	if err != nil {
		return nil, err
	}
	r, err := b.buildScale(dir, home, n, *flagScaleWorkers)
	if err != nil {
		return nil, err
	}
	// The audit checkpoint --since starts from: one full verify, untimed.
	run, err := b.runProc(cleanEnv("BERNSTEIN_HOME="+home), true, b.bin, "--repo", dir, "audit", "verify", "--checkpoint", "scale")
	if err != nil {
		return nil, err
	}
	if run.exit != 0 {
		return nil, fmt.Errorf("audit verify --checkpoint scale exited %d: %s", run.exit, run.stderr)
	}
	b.printf("  built %d tasks in %s (%.0f tasks/s); the first full audit verify took %s\n", n, r.elapsed.Round(10*time.Millisecond),
		float64(n)/r.elapsed.Seconds(), run.wall.Round(10*time.Millisecond))
	return r, nil
}

// scaleMeasure takes every figure of one repository in one ref store.
func (b *bench) scaleMeasure(tab *scaleTable, r *scaleRepo, home string, n int, state string) error {
	switch state {
	case "loose":
	case "pack-refs":
		if _, err := gitIn(r.dir, nil, "pack-refs", "--all"); err != nil {
			return err
		}
	case "gc":
		if _, err := gitIn(r.dir, nil, "gc", "--quiet"); err != nil {
			return err
		}
	case "maintenance":
		if _, err := gitIn(r.dir, nil, "maintenance", "run"); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-scale-ref-states: %q is not loose, pack-refs, gc or maintenance", state)
	}
	loose, packed, err := refStore(r.dir)
	if err != nil {
		return err
	}
	b.printf("  %d tasks, %s: %d loose refs, %d packed\n", n, state, loose, packed)
	suffix := ""
	if state != "loose" {
		suffix = " [" + state + "]"
	}
	env := cleanEnv("BERNSTEIN_HOME=" + home)
	mid := scaleTask(n / 2)
	lists := *flagScaleLists
	if n > 10000 {
		lists = 1
	}
	proc := func(name, kind, git string, runs int, check func([]byte) error, name0 string, args ...string) error {
		for i := 0; i < runs; i++ {
			var run procRun
			var err error
			if name0 == "git" {
				cmd := append([]string{"-C", r.dir}, args...)
				run, err = b.runProc(env, check == nil, "git", cmd...)
			} else {
				run, err = b.runProc(env, check == nil, b.bin, append([]string{"--repo", r.dir}, args...)...)
			}
			if err != nil {
				return err
			}
			if run.exit != 0 {
				return fmt.Errorf("%s exited %d: %s", name, run.exit, run.stderr)
			}
			if check != nil {
				if err := check(run.stdout); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			g := git
			if g != "" {
				g += suffix
			}
			tab.add(name+suffix, kind, g, n, run.wall, run.cpu)
		}
		return nil
	}
	gitConst, gitList := "git cat-file -p (a journal ref)", "git for-each-ref refs/bernstein/"
	if err := proc(gitConst, "git", "", *flagScaleRuns, nil, "git", "cat-file", "-p", "refs/bernstein/journal/"+mid); err != nil {
		return err
	}
	if err := proc(gitList, "git", "", lists, nil, "git", "for-each-ref", "refs/bernstein/"); err != nil {
		return err
	}
	if err := proc("task show", "const", gitConst, *flagScaleRuns, nil, "", "task", "show", mid, "--output-json"); err != nil {
		return err
	}
	if err := proc("artifact show", "const", gitConst, *flagScaleRuns, nil, "", "artifact", "show", mid, "summary", "--output-json"); err != nil {
		return err
	}
	if err := proc("task list", "list", gitList, lists, func(out []byte) error { return countTasks(out, n) }, "", "task", "list", "--output-json"); err != nil {
		return err
	}
	if err := proc("task list --limit 100 (a page)", "list", gitList, lists, func(out []byte) error { return countTasks(out, 100) }, "", "task", "list", "--limit", "100", "--cursor", mid, "--output-json"); err != nil {
		return err
	}
	if state != "loose" {
		return nil // the rest reads no ref store of its own
	}
	if err := proc("artifact list (no task)", "list", gitList, lists, nil, "", "artifact", "list", "--output-json"); err != nil {
		return err
	}

	s, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: home})
	if err != nil {
		return err
	}
	defer s.Close()
	probe := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: probe, Title: "scale probe"}); err != nil {
		return err
	}
	tok, err := s.Claim(probe, benchAgent)
	if err != nil {
		return err
	}
	// audit verify --since: move the checkpoint to now, post a few, check.
	if err := proc("audit verify --since (move the checkpoint)", "setup", "", 1, nil, "", "audit", "verify", "--since", "scale", "--checkpoint", "scale"); err != nil {
		return err
	}
	for i := 0; i < 10; i++ {
		if _, err := s.Post(bernstein.PostRequest{Task: probe, Key: "since", Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("since", i, 256)}); err != nil {
			return err
		}
	}
	if err := proc("audit verify --since, 10 posts", "const", gitConst, *flagScaleRuns, nil, "", "audit", "verify", "--since", "scale"); err != nil {
		return err
	}
	// A CLI post, a process each.
	for i := 0; i < *flagScaleRuns; i++ {
		run, err := b.runProc(env, true, b.bin, "--repo", r.dir, "artifact", "post", probe, "cli", "--type", "report",
			"--body", bodyOf("scale-cli", i, 256), "--agent", benchAgent, "--claim-token", tok)
		if err != nil {
			return err
		}
		if run.exit != 0 {
			return fmt.Errorf("artifact post exited %d: %s", run.exit, run.stderr)
		}
		tab.add("CLI post", "const", gitConst, n, run.wall, run.cpu)
	}
	// Library posts, one after the other.
	for i := 0; i < *flagScaleRuns*4; i++ {
		t0 := time.Now()
		if _, err := s.Post(bernstein.PostRequest{Task: probe, Key: "api", Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("api", i, 256)}); err != nil {
			return err
		}
		tab.add("library post", "const", "", n, time.Since(t0), 0)
	}
	return b.scaleServe(tab, s, n, probe, tok)
}

// scaleServe starts the server in this process on the repository and times
// its start, a post's event and the listings it answers.
func (b *bench) scaleServe(tab *scaleTable, s *bernstein.Store, n int, probe, tok string) error {
	// Start-up: the server and its bus's first scan, which takes the
	// repository as it is (a post before it would publish nothing).
	t0 := time.Now()
	srv, err := server.New(s, server.Options{Version: "bench"})
	if err != nil {
		return err
	}
	if err := srv.Bus().Scan(); err != nil {
		srv.Close()
		return err
	}
	tab.add("serve start (the bus's first scan)", "const", "", n, time.Since(t0), 0)
	l, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		srv.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone, serveDone := make(chan error, 1), make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	go func() { serveDone <- server.Serve(ctx, l, srv.Handler()) }()
	defer func() { cancel(); <-serveDone; <-runDone; srv.Close() }()
	url := server.URL(l)
	hc := sseHTTPClient()
	c, err := openSSE(hc, url+server.EventsPath+"?task="+probe)
	if err != nil {
		return err
	}
	defer c.close()
	<-c.ready
	post := func(i int) (int64, error) {
		res, err := s.Post(bernstein.PostRequest{Task: probe, Key: "sse", Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("sse", i, 256)})
		if err != nil {
			return 0, err
		}
		return res.Version, nil
	}
	await := func(version int64) (time.Time, error) {
		deadline := time.NewTimer(10 * time.Minute)
		defer deadline.Stop()
		for {
			select {
			case ev := <-c.events:
				if ev.typ != server.EventArtifact {
					continue
				}
				var a artifactEvent
				if err := json.Unmarshal(ev.data, &a); err != nil {
					return time.Time{}, err
				}
				if a.Task == probe && a.Key == "sse" && a.Version == version {
					return ev.at, nil
				}
			case <-c.done:
				return time.Time{}, fmt.Errorf("the event stream ended: %v", c.err)
			case <-deadline.C:
				return time.Time{}, fmt.Errorf("no event for v%d", version)
			}
		}
	}
	// From the post's call to its event: the bus may publish before the
	// post returns, so the time from its return can be negative.
	for i := 1; i <= *flagScalePosts; i++ {
		t0 := time.Now()
		v, err := post(i)
		if err != nil {
			return err
		}
		at, err := await(v)
		if err != nil {
			return err
		}
		tab.add("post to SSE event (from the post's call)", "const", "", n, at.Sub(t0), 0)
	}
	get := func(name, kind, path string, runs int, check func([]byte) error) error {
		for i := 0; i < runs; i++ {
			t0 := time.Now()
			resp, err := hc.Get(url + path)
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			d := time.Since(t0)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s: %s", path, resp.Status, firstBytes(body, 200))
			}
			if check != nil {
				if err := check(body); err != nil {
					return fmt.Errorf("GET %s: %w", path, err)
				}
			}
			tab.add(name, kind, "git for-each-ref refs/bernstein/", n, d, 0)
		}
		return nil
	}
	lists := *flagScaleLists
	if n > 10000 {
		lists = 1
	}
	// Cold: the first request after a post moved a ref every answer keys on.
	if _, err := post(*flagScalePosts + 1); err != nil {
		return err
	}
	if err := get("GET /api/v1/tasks, cold", "list", "/api/v1/tasks", 1, func(body []byte) error { return countTasks(body, n+1) }); err != nil {
		return err
	}
	if err := get("GET /api/v1/tasks, warm", "list", "/api/v1/tasks", lists, nil); err != nil {
		return err
	}
	if err := get("GET /api/v1/tasks?limit=100", "list", "/api/v1/tasks?limit=100", lists, nil); err != nil {
		return err
	}
	if _, err := post(*flagScalePosts + 2); err != nil {
		return err
	}
	if err := get("index page, cold", "list", "/", 1, nil); err != nil {
		return err
	}
	return get("index page, warm", "list", "/", lists, nil)
}

// countTasks checks that a task list (a JSON array, or an object with a
// "tasks" array) holds at least n tasks.
func countTasks(out []byte, n int) error {
	var arr []json.RawMessage
	if err := json.Unmarshal(out, &arr); err != nil {
		var obj struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err2 := json.Unmarshal(out, &obj); err2 != nil {
			return fmt.Errorf("not a task list: %v", err)
		}
		arr = obj.Tasks
	}
	if len(arr) < n {
		return fmt.Errorf("%d tasks listed, want at least %d", len(arr), n)
	}
	return nil
}

// refStore counts the loose refs under refs/bernstein/ and the lines of
// packed-refs.
func refStore(dir string) (loose, packed int, err error) {
	gd := filepath.Join(dir, ".git")
	err = filepath.WalkDir(filepath.Join(gd, "refs", "bernstein"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			loose++
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	data, err := os.ReadFile(filepath.Join(gd, "packed-refs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" && l[0] != '#' && l[0] != '^' {
			packed++
		}
	}
	return loose, packed, nil
}

// scaleReport prints every measure at every size, the growth from each size
// to the next against git's, and the headline ratios.
func (b *bench) scaleReport(tab *scaleTable, ns []int) {
	b.printf("\n  %-52s", "measure (median; CPU for processes)")
	for _, n := range ns {
		b.printf(" %12s", fmt.Sprintf("%d", n))
	}
	for i := 1; i < len(ns); i++ {
		b.printf(" %10s", fmt.Sprintf("x%d→%d", ns[i-1], ns[i]))
	}
	b.printf("  goal\n")
	lo, hi := ns[0], ns[len(ns)-1]
	for _, name := range tab.order {
		m := tab.by[name]
		if m.kind == "setup" {
			continue
		}
		b.printf("  %-52s", name)
		for _, n := range ns {
			if len(m.wall[n]) == 0 {
				b.printf(" %12s", "-")
				continue
			}
			s := msShort(m.value(n))
			if len(m.cpu[n]) > 0 {
				s += " (" + msShort(m.wall[n].median()) + ")"
			}
			b.printf(" %12s", s)
		}
		for i := 1; i < len(ns); i++ {
			if len(m.wall[ns[i]]) == 0 || len(m.wall[ns[i-1]]) == 0 {
				b.printf(" %10s", "-")
				continue
			}
			b.printf(" %10s", fmt.Sprintf("%.2fx", float64(m.value(ns[i]))/float64(m.value(ns[i-1]))))
		}
		goal := ""
		switch m.kind {
		case "const":
			goal = "≤ 1.5x overall"
		case "list":
			goal = "≤ 10x per 10x"
		}
		b.printf("  %s\n", goal)
		if len(m.wall[lo]) == 0 || len(m.wall[hi]) == 0 {
			continue
		}
		growth := float64(m.value(hi)) / float64(m.value(lo))
		var gitGrowth float64
		if g := tab.by[m.git]; g != nil && len(g.wall[lo]) > 0 && len(g.wall[hi]) > 0 {
			gitGrowth = float64(g.value(hi)) / float64(g.value(lo))
		}
		gitS := "-"
		if gitGrowth > 0 {
			gitS = fmt.Sprintf("git %.2fx", gitGrowth)
		}
		switch m.kind {
		case "const":
			b.summary(fmt.Sprintf("%s, %d → %d tasks", name, lo, hi), fmt.Sprintf("%.2fx", growth), gitS, fmt.Sprintf("%.2fx", growth), "≤ 1.5x", growth <= 1.5)
		case "list":
			per := float64(hi) / float64(lo)
			b.summary(fmt.Sprintf("%s, %d → %d tasks", name, lo, hi), fmt.Sprintf("%.2fx", growth), gitS, fmt.Sprintf("%.2fx", growth), fmt.Sprintf("≤ %.0fx", per), growth <= per)
		}
	}
}
