package main

import (
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/hooks"
	"github.com/bernstein/bernstein/refs"
)

// The guard section (issue 12): the remote guard must check only what a
// push adds. The same push (ten new rows) goes on top of a short and of a
// long history; its cost must not grow with the history. Measured twice:
// the guard's check in-process (hooks.Guard over the push's updates), and a
// real `git push` over file:// to a bare remote whose pre-receive hook is
// the installed guard, against the same push to a copy of that remote with
// no hook.

var (
	flagGuardRows = flag.String("guard-rows", "1000,100000", "guard: rows of history (one task's journal, half posts, half checkpoints) under the push")
	flagGuardNew  = flag.Int("guard-new", 10, "guard: new rows per push (half posts, half checkpoints)")
)

const guardTask = "guard-1"

// guardRepo is a working repository with a long journal, a bare remote that
// holds it with the guard installed, and a copy of that remote without it.
type guardRepo struct {
	rows          int
	dir           string
	guarded, bare string // remotes
	s             *bernstein.Store
	token         string
	build, seed   time.Duration
}

// appendRows writes n rows to guardTask through the library, half posts
// and half checkpoints, from workers goroutines sharing the Store (they
// share group-commit batches).
func (g *guardRepo) appendRows(n, workers int) error {
	return parallel(n, workers, func(i int) error {
		if i%2 == 1 {
			_, err := g.s.Checkpoint(guardTask, "HEAD", "")
			return err
		}
		_, err := g.s.Post(bernstein.PostRequest{Task: guardTask, Key: fmt.Sprintf("k%d", i%16), Agent: "bench-agent", ClaimToken: g.token,
			Payload: artifact.Payload{Type: artifact.TypeReport, Body: fmt.Sprintf("row %d", i)}})
		return err
	})
}

func (b *bench) buildGuardRepo(rows int) (*guardRepo, error) {
	dir, err := b.mkrepoDir("guard-")
	if err != nil {
		return nil, err
	}
	g := &guardRepo{rows: rows, dir: filepath.Join(dir, "work"), guarded: filepath.Join(dir, "guarded.git"), bare: filepath.Join(dir, "plain.git")}
	opts := bernstein.Options{Repo: g.dir, Home: b.home}
	if _, err := bernstein.Init(opts, benchWriter); err != nil {
		return nil, err
	}
	if err := commitWorkTree(g.dir, "work"); err != nil {
		return nil, err
	}
	if g.s, err = bernstein.Open(opts); err != nil {
		return nil, err
	}
	if _, err := g.s.CreateTask(bernstein.TaskSpec{ID: guardTask, Title: "guard benchmark"}); err != nil {
		return nil, err
	}
	if g.token, err = g.s.Claim(guardTask, "bench-agent"); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := g.appendRows(rows, *flagBuildWorkers); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	g.build = time.Since(t0)
	// The remote holds the history before the guard is installed (the
	// guard would check all of it on this first push), then a copy
	// without the hook is the baseline.
	t0 = time.Now()
	if _, err := gitIn(g.dir, nil, "init", "-q", "--bare", g.guarded); err != nil {
		return nil, err
	}
	if _, err := gitIn(g.dir, nil, "push", "-q", "file://"+g.guarded, "refs/bernstein/*:refs/bernstein/*"); err != nil {
		return nil, err
	}
	if out, err := exec.Command("cp", "-a", g.guarded, g.bare).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cp: %v %s", err, out)
	}
	g.seed = time.Since(t0)
	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	for _, args := range [][]string{
		{"--repo", g.guarded, "hooks", "install", "--remote-guard"},
		{"--repo", g.guarded, "keys", "pin", benchWriter},
	} {
		cmd := exec.Command(b.bin, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("bernstein %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return g, nil
}

// heads reads the refs of the task's chains and of the writer in a git
// directory.
func guardHeads(gitDir string) (map[string]gitstore.Oid, error) {
	r := refs.Reader{Dir: gitDir}
	out := map[string]gitstore.Oid{}
	for _, n := range []string{refs.Journal(guardTask), refs.Ledger(guardTask), refs.Spine(benchWriter), refs.Audit(benchWriter), refs.Writer(benchWriter)} {
		v, err := r.ReadOptional(n)
		if err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, nil
}

// checkInProcess runs the guard's check of the local refs over the remote's
// heads, as the hook does, and returns its time and the commits it read.
func (g *guardRepo) checkInProcess() (time.Duration, int, error) {
	old, err := guardHeads(g.guarded)
	if err != nil {
		return 0, 0, err
	}
	nw, err := guardHeads(g.s.GitDir())
	if err != nil {
		return 0, 0, err
	}
	var updates []hooks.Update
	for n, v := range nw {
		if v != old[n] {
			updates = append(updates, hooks.Update{Ref: n, Old: old[n], New: v})
		}
	}
	trust, err := g.s.Trust()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	res := (&hooks.Guard{Objects: g.s.Objects(), Refs: refs.Reader{Dir: g.s.GitDir()}, Trust: trust}).Check(updates)
	d := time.Since(t0)
	if len(res.Problems) > 0 {
		return 0, 0, fmt.Errorf("the guard refused a good push: %s", res.Problems[0])
	}
	return d, res.Stats.Commits, nil
}

// pushTo times a git push of every bernstein ref to remote.
func (b *bench) pushTo(g *guardRepo, remote string) (time.Duration, error) {
	run, err := b.runProc(cleanEnv("GIT_DIR="+filepath.Join(g.dir, ".git")), true, "git", "push", "-q", "--atomic", "file://"+remote, "refs/bernstein/*:refs/bernstein/*")
	if err != nil {
		return 0, err
	}
	if run.exit != 0 {
		return 0, fmt.Errorf("git push to %s exited %d: %s", filepath.Base(remote), run.exit, run.stderr)
	}
	return run.wall, nil
}

func runGuard(b *bench) error {
	sizes, err := parseCounts(*flagGuardRows)
	if err != nil {
		return fmt.Errorf("-guard-rows: %w", err)
	}
	if len(sizes) < 2 || *flagGuardNew < 1 {
		return fmt.Errorf("-guard-rows needs two sizes and -guard-new a positive count")
	}
	newRows := *flagGuardNew
	b.printf("  workload: task %s with a journal of %s rows (half posts, half checkpoints, through the library by %d goroutines\n", guardTask, *flagGuardRows, *flagBuildWorkers)
	b.printf("  on one Store), pushed to a bare remote; then per round %d new rows and the push of them: the guard's check\n", newRows)
	b.printf("  in-process (median of 7 runs a round), and `git push --atomic` over file:// to the guarded remote and to a copy\n")
	b.printf("  without the hook; every size in each round, in rotated order; medians of the rounds\n")
	type result struct {
		g                     *guardRepo
		rows                  int
		check, guarded, plain durations
		commits               int
	}
	var results []*result
	defer func() {
		for _, r := range results {
			r.g.s.Close()
		}
	}()
	for _, n := range sizes {
		g, err := b.buildGuardRepo(n)
		if err != nil {
			return fmt.Errorf("%d rows: %w", n, err)
		}
		results = append(results, &result{g: g, rows: n})
		b.printf("  %d rows built in %s (%.0f rows/s), seeded to the remote in %s\n", n, g.build.Round(10*time.Millisecond), float64(n)/g.build.Seconds(), g.seed.Round(10*time.Millisecond))
	}
	b.printf("  machine load after the builds: %s\n", machineLoad())
	// Each round measures every size, in rotated order, so that a change
	// in the machine's load falls on both sides of the ratio.
	for round := 0; round < *flagRounds; round++ {
		for k := range results {
			r := results[(k+round)%len(results)]
			g := r.g
			if err := g.appendRows(newRows, 1); err != nil {
				return err
			}
			// The check takes milliseconds: the median of several runs of it
			// (the first one warms the page cache) is this round's figure.
			var runs durations
			for i := 0; i < 7; i++ {
				d, commits, err := g.checkInProcess()
				if err != nil {
					return err
				}
				runs = append(runs, d)
				r.commits = commits
			}
			r.check = append(r.check, runs.median())
			// Both remotes receive the same push; which goes first rotates.
			order := []string{g.guarded, g.bare}
			if round%2 == 1 {
				order = []string{g.bare, g.guarded}
			}
			for _, remote := range order {
				d, err := b.pushTo(g, remote)
				if err != nil {
					return err
				}
				if remote == g.guarded {
					r.guarded = append(r.guarded, d)
				} else {
					r.plain = append(r.plain, d)
				}
			}
		}
	}
	for _, r := range results {
		g, n := r.g, r.rows
		if err := fsck(g.dir); err != nil {
			return err
		}
		if out, err := gitIn(g.dir, nil, "--git-dir", g.guarded, "rev-list", "--count", refs.Journal(guardTask)); err != nil {
			return err
		} else if want := fmt.Sprint(n + *flagRounds*newRows); strings.TrimSpace(out) != want {
			return fmt.Errorf("the guarded remote's journal has %s rows, want %s", strings.TrimSpace(out), want)
		}
		b.printf("  %7d rows: check %s (%d commits read), push through the guard %s, push without it %s\n",
			n, ms(r.check.median()), r.commits, ms(r.guarded.median()), ms(r.plain.median()))
	}
	small, big := results[0], results[len(results)-1]
	checkRatio := float64(big.check.median()) / float64(small.check.median())
	pushRatio := float64(big.guarded.median()) / float64(small.guarded.median())
	b.printf("\n  %d new rows on %d rows against on %d rows: check %s, guarded push %s (goal: ~1, no growth with history)\n",
		newRows, big.rows, small.rows, dratio(big.check.median(), small.check.median()), dratio(big.guarded.median(), small.guarded.median()))
	b.printf("  the guard's share of a push at %d rows: %s through the guard against %s without (%s)\n",
		big.rows, ms(big.guarded.median()), ms(big.plain.median()), dratio(big.guarded.median(), big.plain.median()))
	if big.commits != small.commits {
		b.fail("the guard read %d commits on %d rows and %d on %d rows: its reads grow with the history", big.commits, big.rows, small.commits, small.rows)
	}
	b.summary(fmt.Sprintf("guard check, %d new rows on %d / on %d rows", newRows, big.rows, small.rows), ms(big.check.median()), ms(small.check.median()), dratio(big.check.median(), small.check.median()), "<= 1.5x", checkRatio <= 1.5)
	b.summary(fmt.Sprintf("guarded push, %d new rows on %d / on %d rows", newRows, big.rows, small.rows), ms(big.guarded.median()), ms(small.guarded.median()), dratio(big.guarded.median(), small.guarded.median()), "<= 1.5x", pushRatio <= 1.5)
	return nil
}
