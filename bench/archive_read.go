package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/refs"
)

var (
	flagArchiveReadTasks = flag.String("archiveread-tasks", "1000,10000", "archiveread: task counts")
	flagArchiveReadRuns  = flag.Int("archiveread-runs", 5, "archiveread: runs of each read (the median is kept)")
)

// runArchiveRead measures reads of a repository whose tasks are refs, then
// of the same repository with 90% of them moved into the archive
// (docs/archive.md, Reading): task show of an archived task and of one
// still a ref, and a page of 50 of task list, each a fresh CLI process.
func runArchiveRead(b *bench) error {
	ns, err := parseCounts(*flagArchiveReadTasks)
	if err != nil {
		return err
	}
	b.printf("  workload: the scale section's N tasks (created, claimed, one report each), read as refs; then 90%% of\n")
	b.printf("  them archived (commits of %d through internal/archive, their refs deleted) and read again. CLI reads\n", archive.MaxAdd)
	b.printf("  as fresh processes, median of %d runs, CPU time (wall beside it).\n\n", *flagArchiveReadRuns)
	type row struct{ name, refs, arch string }
	var rows []row
	for _, n := range ns {
		dir, err := b.mkrepoDir(fmt.Sprintf("archread-%d-", n))
		if err != nil {
			return err
		}
		if _, err := b.buildScale(dir, b.home, n, *flagScaleWorkers); err != nil {
			return err
		}
		archived, kept := scaleTask(n/2), scaleTask(n-1) // tasks 0..9n/10-1 are archived
		reads := func() (map[string]procRun, error) {
			out := map[string]procRun{}
			for _, r := range []struct {
				name string
				args []string
			}{
				{"task show (archived task)", []string{"task", "show", archived, "--output-json"}},
				{"task show (task still a ref)", []string{"task", "show", kept, "--output-json"}},
				{"task list --limit 50 (a page mid-way)", []string{"task", "list", "--limit", "50", "--cursor", archived, "--output-json"}},
			} {
				run, err := b.medianProc(dir, r.args...)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", r.name, err)
				}
				out[r.name] = run
			}
			return out, nil
		}
		before, err := reads()
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := archiveScale(dir, n*9/10); err != nil {
			return err
		}
		b.printf("  %d tasks: %d archived in %s\n", n, n*9/10, time.Since(t0).Round(time.Millisecond))
		after, err := reads()
		if err != nil {
			return err
		}
		names := make([]string, 0, len(before))
		for k := range before {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			x, y := before[k], after[k]
			if string(x.stdout) != string(y.stdout) {
				b.fail("archiveread: %d tasks: %s reads otherwise once archived", n, k)
			}
			rows = append(rows, row{fmt.Sprintf("%s, %d tasks", k, n), fmt.Sprintf("%s (%s)", msOf(x.cpu), msOf(x.wall)),
				fmt.Sprintf("%s (%s) %.2fx", msOf(y.cpu), msOf(y.wall), float64(y.cpu)/float64(x.cpu))})
		}
	}
	b.printf("\n  %-48s %-22s %s\n", "read", "every task as refs", "90% archived")
	for _, r := range rows {
		b.printf("  %-48s %-22s %s\n", r.name, r.refs, r.arch)
	}
	return nil
}

func msOf(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// medianProc runs the CLI on dir -archiveread-runs times and keeps the
// run of median CPU time.
func (b *bench) medianProc(dir string, args ...string) (procRun, error) {
	var runs []procRun
	for i := 0; i < *flagArchiveReadRuns; i++ {
		run, err := b.runProc(cleanEnv("BERNSTEIN_HOME="+b.home), false, b.bin, append([]string{"--repo", dir}, args...)...)
		if err != nil {
			return procRun{}, err
		}
		if run.exit != 0 {
			return procRun{}, fmt.Errorf("exit %d: %s", run.exit, run.stderr)
		}
		runs = append(runs, run)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].cpu < runs[j].cpu })
	return runs[len(runs)/2], nil
}

// archiveScale archives scale tasks 0..k-1: archive commits of MaxAdd
// through internal/archive on refs/bernstein/archive/<benchWriter>, then
// the archive ref set and the tasks' refs deleted in one git ref
// transaction.
func archiveScale(dir string, k int) error {
	gitDir := filepath.Join(dir, ".git")
	repo, err := gitstore.Open(filepath.Join(gitDir, "objects"))
	if err != nil {
		return err
	}
	defer repo.Close()
	r := refs.Reader{Dir: gitDir}
	var prev, prevTree gitstore.Oid
	var del strings.Builder
	for s := 0; s < k; s += archive.MaxAdd {
		var add []archive.Entry
		for i := s; i < min(k, s+archive.MaxAdd); i++ {
			e := archive.Entry{Task: scaleTask(i)}
			if e.Journal, err = r.Read(refs.Journal(e.Task)); err != nil {
				return err
			}
			if e.Ledger, err = r.Read(refs.Ledger(e.Task)); err != nil {
				return err
			}
			fmt.Fprintf(&del, "delete %s %s\ndelete %s %s\n", refs.Journal(e.Task), e.Journal, refs.Ledger(e.Task), e.Ledger)
			add = append(add, e)
		}
		root, objs, err := archive.Build(repo, prevTree, archive.Update{Add: add})
		if err != nil {
			return err
		}
		id := gitstore.Ident(benchWriter, benchWriter+"@bernstein", 1700000000)
		c := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(gitstore.Commit{
			Tree: root, Parents: archive.Parents(prev, add), Author: id, Committer: id, Message: []byte("archive\n"),
		}))
		if _, err := repo.WritePack(append(objs, c)); err != nil {
			return err
		}
		prev, prevTree = c.ID, root
	}
	script := fmt.Sprintf("update %s %s\n%s", refs.Archive(benchWriter), prev, del.String())
	_, err = gitIn(dir, []byte(script), "update-ref", "--stdin")
	return err
}
