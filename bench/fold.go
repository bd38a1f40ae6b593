package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/refs"
)

// The fold section (issue 4): the progress vector of a task whose journal
// has many rows, folded cold (no cache, a fresh process) against git reading
// the same commits (`git log --format=%B` over the journal ref), and folded
// warm after a few new rows (which must cost the new rows only).

var (
	flagFoldRows = flag.Int("fold-rows", 15000, "fold: checkpoint rows in the journal folded cold (the issue's size is 100000: about 5 minutes to build here)")
	flagFoldWarm = flag.String("fold-warm", "1,10,100", "fold: new rows appended (by another Store) before each in-process warm fold")
)

const foldTask = "fold-1"

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no count in %q", s)
	}
	return out, nil
}

// buildJournal makes a repository whose task foldTask has rows checkpoint
// rows, written by workers goroutines on one Store (so they share batches).
// The Store is returned open: it appends the warm rows later.
func (b *bench) buildJournal(rows, workers int) (string, *bernstein.Store, time.Duration, error) {
	dir, err := b.mkrepoDir("fold-")
	if err != nil {
		return "", nil, 0, err
	}
	opts := bernstein.Options{Repo: dir, Home: b.home}
	if _, err := bernstein.Init(opts, benchWriter); err != nil {
		return "", nil, 0, fmt.Errorf("init: %w", err)
	}
	if err := commitWorkTree(dir, "work"); err != nil {
		return "", nil, 0, err
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		return "", nil, 0, err
	}
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: foldTask, Title: "fold benchmark"}); err != nil {
		s.Close()
		return "", nil, 0, err
	}
	t0 := time.Now()
	if err := appendCheckpoints(s, rows, workers); err != nil {
		s.Close()
		return "", nil, 0, err
	}
	return dir, s, time.Since(t0), nil
}

func appendCheckpoints(s *bernstein.Store, n, workers int) error {
	return parallel(n, workers, func(i int) error {
		if _, err := s.Checkpoint(foldTask, "HEAD", ""); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		return nil
	})
}

// checkWire checks a folded vector against the rows the journal holds.
// Every row checkpoints the same commit (HEAD), which progress counts once:
// earned means new work. The fold still reads and proves every row.
func checkWire(w *progress.Wire, rows int) error {
	if w.Checkpoints != 1 || w.JournalRows != int64(rows) || w.TaskID != foldTask {
		return fmt.Errorf("progress of %s: %d checkpoints over %d journal rows, want 1 (one distinct commit) over %d", w.TaskID, w.Checkpoints, w.JournalRows, rows)
	}
	return nil
}

// cachedRows reads how many rows the on-disk fold cache covers (-1 if
// none): derived data, read here only to say what a warm process folds.
func cachedRows(gitDir string) int64 {
	b, err := os.ReadFile(filepath.Join(gitDir, "bernstein", "cache", "journal", refs.EscapeTask(foldTask)+".json"))
	if err != nil {
		return -1
	}
	var f struct {
		State struct{ Rows int64 }
	}
	if json.Unmarshal(b, &f) != nil {
		return -1
	}
	return f.State.Rows
}

func runFold(b *bench) error {
	warm, err := parseCounts(*flagFoldWarm)
	if err != nil {
		return fmt.Errorf("-fold-warm: %w", err)
	}
	if *flagFoldRows < 1 || *flagBuildWorkers < 1 {
		return fmt.Errorf("-fold-rows and -build-workers must be positive")
	}
	b.printf("  workload: task %s with a journal of %d checkpoint rows (each resolves HEAD of the work tree), written\n", foldTask, *flagFoldRows)
	b.printf("  through Store.Checkpoint by %d goroutines on one Store; %d rounds, cold measurements alternated; medians\n", *flagBuildWorkers, *flagRounds)

	if *flagFoldRows < 100000 {
		b.printf("  (the issue asks for 100,000 rows: -fold-rows 100000. Store.Checkpoint runs `git rev-parse` for every row,\n")
		b.printf("  which caps building at a few hundred rows/s on this machine, so the default is the size that builds in\n")
		b.printf("  under a minute; both sides of every ratio grow linearly with the rows)\n")
	}
	dir, w, build, err := b.buildJournal(*flagFoldRows, *flagBuildWorkers)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	gitDir := w.GitDir()
	rows := *flagFoldRows
	if p, err := w.Progress(foldTask); err != nil {
		return err
	} else if err := checkWire(p, rows); err != nil {
		return fmt.Errorf("after build: %w", err)
	}
	po, err := countObjects(dir)
	if err != nil {
		return err
	}
	b.printf("  built in %s (%.0f rows/s); %s\n", build.Round(10*time.Millisecond), float64(rows)/build.Seconds(), po)
	b.printf("  machine load after build: %s\n\n", machineLoad())

	cacheDir := filepath.Join(gitDir, "bernstein", "cache")
	journalRef := refs.Journal(foldTask)
	cliEnv := cleanEnv("BERNSTEIN_HOME=" + b.home)
	gitEnv := cleanEnv("GIT_DIR=" + gitDir)
	cli := func(what string) (procRun, *progress.Wire, error) {
		run, err := b.runProc(cliEnv, false, b.bin, "--repo", dir, "task", "progress", foldTask, "--output-json")
		if err != nil {
			return run, nil, err
		}
		if run.exit != 0 {
			return run, nil, fmt.Errorf("%s: bernstein task progress exited %d: %s", what, run.exit, run.stderr)
		}
		var wire progress.Wire
		if err := json.Unmarshal(run.stdout, &wire); err != nil {
			return run, nil, fmt.Errorf("%s: bernstein task progress printed %q: %w", what, firstBytes(run.stdout, 200), err)
		}
		return run, &wire, checkWire(&wire, rows)
	}

	var cliCold, gitLog, open, inCold, cliWarm durations
	var cliColdRSS, gitLogRSS, cliWarmRSS []int64
	var cliColdCPU, gitLogCPU durations
	warmTimes := make([]durations, len(warm))
	var cliWarmRows []int64
	for r := 0; r < *flagRounds; r++ {
		var line []string
		steps := []string{"cli", "git"}
		if r%2 == 1 {
			steps = []string{"git", "cli"}
		}
		for _, st := range steps {
			switch st {
			case "cli":
				if err := os.RemoveAll(cacheDir); err != nil {
					return err
				}
				run, _, err := cli("cold fold")
				if err != nil {
					return err
				}
				cliCold = append(cliCold, run.wall)
				cliColdCPU = append(cliColdCPU, run.cpu)
				cliColdRSS = append(cliColdRSS, run.rss)
				line = append(line, "cold CLI "+ms(run.wall))
			case "git":
				run, err := b.runProc(gitEnv, true, "git", "log", "--format=%B", journalRef)
				if err != nil {
					return err
				}
				if run.exit != 0 {
					return fmt.Errorf("git log exited %d: %s", run.exit, run.stderr)
				}
				gitLog = append(gitLog, run.wall)
				gitLogCPU = append(gitLogCPU, run.cpu)
				gitLogRSS = append(gitLogRSS, run.rss)
				line = append(line, "git log "+ms(run.wall))
			}
		}

		// In-process cold: a fresh Store, no cache on disk.
		if err := os.RemoveAll(cacheDir); err != nil {
			return err
		}
		t0 := time.Now()
		rd, err := bernstein.Open(bernstein.Options{Repo: dir, Home: b.home})
		if err != nil {
			return err
		}
		t1 := time.Now()
		p, err := rd.Progress(foldTask)
		t2 := time.Now()
		if err == nil {
			err = checkWire(p, rows)
		}
		if err != nil {
			rd.Close()
			return fmt.Errorf("in-process cold fold: %w", err)
		}
		open = append(open, t1.Sub(t0))
		inCold = append(inCold, t2.Sub(t1))
		line = append(line, "cold API "+ms(t2.Sub(t1)))

		// In-process warm: another Store appends k rows, this one folds.
		for i, k := range warm {
			if err := appendCheckpoints(w, k, min(k, *flagBuildWorkers)); err != nil {
				rd.Close()
				return fmt.Errorf("append %d rows: %w", k, err)
			}
			rows += k
			t0 := time.Now()
			p, err := rd.Progress(foldTask)
			took := time.Since(t0)
			if err == nil {
				err = checkWire(p, rows)
			}
			if err != nil {
				rd.Close()
				return fmt.Errorf("warm fold after %d rows: %w", k, err)
			}
			warmTimes[i] = append(warmTimes[i], took)
			line = append(line, fmt.Sprintf("warm+%d %s", k, ms(took)))
		}
		if err := rd.Close(); err != nil {
			return err
		}

		// CLI warm: the fold cache on disk, one new row.
		if err := appendCheckpoints(w, 1, 1); err != nil {
			return err
		}
		rows++
		cached := cachedRows(gitDir)
		run, _, err := cli("warm fold")
		if err != nil {
			return err
		}
		cliWarm = append(cliWarm, run.wall)
		cliWarmRSS = append(cliWarmRSS, run.rss)
		if cached >= 0 {
			cliWarmRows = append(cliWarmRows, int64(rows)-cached)
		}
		line = append(line, "warm CLI "+ms(run.wall))
		b.printf("  round %d: %s\n", r+1, strings.Join(line, ", "))
	}

	n0 := *flagFoldRows
	b.printf("\n  %-58s %10s %17s %9s %9s\n", "measurement (journal of ~"+strconv.Itoa(n0)+" rows)", "median", "min..max ms", "CPU", "peak RSS")
	row := func(label string, d durations, cpu durations, rss []int64) {
		c, m := "-", "-"
		if len(cpu) > 0 {
			c = ms(cpu.median())
		}
		if len(rss) > 0 && medianInt(rss) > 0 {
			m = mib(medianInt(rss))
		}
		b.printf("  %-58s %10s %17s %9s %9s\n", label, ms(d.median()), d.span(), c, m)
	}
	row("git log --format=%B <journal ref> >/dev/null", gitLog, gitLogCPU, gitLogRSS)
	row("cold fold, CLI: bernstein task progress (no cache)", cliCold, cliColdCPU, cliColdRSS)
	row("cold fold, API: Store.Progress on a fresh Store (no cache)", inCold, nil, nil)
	row("  (bernstein.Open before it, not in the fold)", open, nil, nil)
	for i, k := range warm {
		row(fmt.Sprintf("warm fold, API: Store.Progress, %d new row%s", k, plural(k)), warmTimes[i], nil, nil)
	}
	wr := "1 new row"
	if len(cliWarmRows) > 0 {
		n := medianInt(cliWarmRows)
		wr = fmt.Sprintf("%d row%s past the disk cache", n, plural(int(n)))
	}
	row("warm fold, CLI: "+wr, cliWarm, nil, cliWarmRSS)

	cold, glog, api := cliCold.median(), gitLog.median(), inCold.median()
	perRowCold := float64(api) / float64(n0)
	b.printf("\n  ratios (of medians)\n")
	b.printf("    cold fold CLI / git log     %8s\n", dratio(cold, glog))
	b.printf("    cold fold API / git log     %8s   (the fold itself, without process start and Open)\n", dratio(api, glog))
	for i, k := range warm {
		wt := warmTimes[i].median()
		b.printf("    warm+%-4d API / cold API    %8s   %s per new row (cold: %s per row)\n", k,
			fmt.Sprintf("%.4f", float64(wt)/float64(api)), fmt.Sprintf("%.1f µs", float64(wt)/float64(k)/1e3), fmt.Sprintf("%.1f µs", perRowCold/1e3))
	}
	b.printf("    warm CLI / cold CLI         %8s\n", fmt.Sprintf("%.3f", float64(cliWarm.median())/float64(cold)))

	// Is the warm fold proportional to the new rows? Fit t = a + b*k over
	// the warm points: b is the cost of one new row, a the fixed part
	// (reading two refs, the ledger from memory, hashing the vector).
	var slope, icept float64
	if len(warm) >= 2 {
		var sx, sy, sxx, sxy float64
		for i, k := range warm {
			x, y := float64(k), float64(warmTimes[i].median())
			sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		}
		n := float64(len(warm))
		slope = (n*sxy - sx*sy) / (n*sxx - sx*sx)
		icept = (sy - slope*sx) / n
		b.printf("    warm fold fit: %.1f µs + %.1f µs per new row (cold fold: %.1f µs per row)\n", icept/1e3, slope/1e3, perRowCold/1e3)
	}

	b.printf("\n  goals (information only; a missed goal does not fail the run)\n")
	goal := func(name string, ok bool, detail string) {
		mark := "not met"
		if ok {
			mark = "met"
		}
		b.printf("    %-48s %-8s %s\n", name, mark, detail)
	}
	goal("cold fold within 3x of git's walk (CLI)", float64(cold) <= 3*float64(glog), "CLI/git log = "+dratio(cold, glog))
	goal("cold fold within 3x of git's walk (API)", float64(api) <= 3*float64(glog), "API/git log = "+dratio(api, glog))
	b.summary("cold fold, CLI / git log", ms(cold), ms(glog), dratio(cold, glog), "<= 3x", float64(cold) <= 3*float64(glog))
	b.summary("cold fold, API / git log", ms(api), ms(glog), dratio(api, glog), "<= 3x", float64(api) <= 3*float64(glog))
	if len(warm) >= 2 {
		big := warm[len(warm)-1]
		wt := float64(warmTimes[len(warm)-1].median())
		ok := slope <= 3*perRowCold && wt < float64(api)*math.Max(0.05, 3*float64(big)/float64(n0))
		goal("warm fold proportional to the new rows", ok,
			fmt.Sprintf("per new row %.1f µs vs %.1f µs cold; +%d rows cost %.2f%% of a cold fold", slope/1e3, perRowCold/1e3, big, 100*wt/float64(api)))
	}
	b.printf("\n  notes: every fold's vector was checked (journal rows = rows written so far, one distinct checkpointed commit); the OS page\n")
	b.printf("  cache is warm for both sides (\"cold\" means no bernstein fold cache and a fresh process or Store). git log\n")
	b.printf("  reads the same commits (one per row) and prints their messages, which carry the canonical rows.\n")

	return b.profileOp("fold-cold", 5, func() error {
		if err := os.RemoveAll(cacheDir); err != nil {
			return err
		}
		rd, err := bernstein.Open(bernstein.Options{Repo: dir, Home: b.home})
		if err != nil {
			return err
		}
		defer rd.Close()
		p, err := rd.Progress(foldTask)
		if err != nil {
			return err
		}
		return checkWire(p, rows)
	})
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func firstBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
