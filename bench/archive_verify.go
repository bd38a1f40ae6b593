package main

import (
	"flag"
	"fmt"
	"sort"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
)

var (
	flagArchiveVerifyTasks = flag.String("archiveverify-tasks", "1000,10000", "archiveverify: task counts")
	flagArchiveVerifyRuns  = flag.Int("archiveverify-runs", 3, "archiveverify: runs of audit verify --since (the median is kept)")
	flagArchiveVerifyPosts = flag.Int("archiveverify-posts", 5, "archiveverify: posts added after the audit checkpoint")
	flagArchiveVerifyOpen  = flag.Int("archiveverify-open", 0, "archiveverify: tasks left open in every repository (0: 10% of its tasks), the rest ended and archived")
)

// archiveVerifyEnded is how many of n tasks end (and are archived).
func archiveVerifyEnded(n int) int {
	if o := *flagArchiveVerifyOpen; o > 0 {
		return max(0, n-o)
	}
	return n * 9 / 10
}

// runArchiveVerify measures audit verify --since after a few posts on a
// repository of N tasks, 90% of them ended (or all but -archiveverify-open),
// every task as refs; then on
// the same repository once 'bernstein archive' (Store.Archive) moved the
// ended tasks into the archive: the ratio shows what --since's comparison
// of refs costs once it follows the open tasks.
func runArchiveVerify(b *bench) error {
	ns, err := parseCounts(*flagArchiveVerifyTasks)
	if err != nil {
		return err
	}
	ended := "90% of them"
	if *flagArchiveVerifyOpen > 0 {
		ended = fmt.Sprintf("all but %d of them", *flagArchiveVerifyOpen)
	}
	b.printf("  workload: the scale section's N tasks, %s started and completed (sealed); an audit checkpoint,\n", ended)
	b.printf("  %d posts on a new task, then audit verify --since in-process (median of %d); then the ended tasks archived\n", *flagArchiveVerifyPosts, *flagArchiveVerifyRuns)
	b.printf("  (Store.Archive), a new checkpoint, %d more posts and --since again.\n\n", *flagArchiveVerifyPosts)
	b.printf("  %-8s %-28s %-28s %s\n", "tasks", "every task as refs", "ended tasks archived", "ratio")
	var runs [][2]sinceRun
	for _, n := range ns {
		dir, err := b.mkrepoDir(fmt.Sprintf("archverify-%d-", n))
		if err != nil {
			return err
		}
		if _, err := b.buildScale(dir, b.home, n, *flagScaleWorkers); err != nil {
			return err
		}
		s, err := bernstein.Open(bernstein.Options{Repo: dir, Home: b.home})
		if err != nil {
			return err
		}
		refsRun, archRun, err := b.archiveVerifyOne(s, n)
		s.Close()
		if err != nil {
			return err
		}
		b.printf("  %-8d %-28s %-28s %.2fx\n", n, refsRun, archRun, float64(archRun.took)/float64(refsRun.took))
		runs = append(runs, [2]sinceRun{refsRun, archRun})
	}
	if len(runs) > 1 {
		first, last := runs[0], runs[len(runs)-1]
		b.printf("\n  %d → %d tasks: every task as refs %.2fx, ended tasks archived %.2fx (goal for constant work: ≤ 1.5x)\n",
			ns[0], ns[len(ns)-1], float64(last[0].took)/float64(first[0].took), float64(last[1].took)/float64(first[1].took))
	}
	return nil
}

type sinceRun struct {
	took time.Duration
	read int
}

func (r sinceRun) String() string { return fmt.Sprintf("%s (%d commits read)", ms(r.took), r.read) }

func (b *bench) archiveVerifyOne(s *bernstein.Store, n int) (sinceRun, sinceRun, error) {
	ended := archiveVerifyEnded(n)
	t0 := time.Now()
	err := parallel(ended, *flagScaleWorkers, func(i int) error {
		for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
			if _, err := s.Transition(scaleTask(i), k, "", ""); err != nil {
				return fmt.Errorf("%s %s: %w", k, scaleTask(i), err)
			}
		}
		return nil
	})
	if err != nil {
		return sinceRun{}, sinceRun{}, err
	}
	b.printf("  %d tasks: %d ended in %s\n", n, ended, time.Since(t0).Round(time.Millisecond))
	refsRun, err := b.sinceAfterPosts(s, "refs")
	if err != nil {
		return sinceRun{}, sinceRun{}, err
	}
	t0 = time.Now()
	res, err := s.Archive(bernstein.ArchiveRequest{})
	if err != nil {
		return sinceRun{}, sinceRun{}, err
	}
	b.printf("  %d tasks: %d archived in %d commits in %s\n", n, len(res.Archived), len(res.Commits), time.Since(t0).Round(time.Millisecond))
	if len(res.Archived) != ended {
		return sinceRun{}, sinceRun{}, fmt.Errorf("archived %d tasks, want %d", len(res.Archived), ended)
	}
	archRun, err := b.sinceAfterPosts(s, "archived")
	return refsRun, archRun, err
}

// sinceAfterPosts takes audit checkpoint name, adds posts on a new task
// and times audit verify --since name.
func (b *bench) sinceAfterPosts(s *bernstein.Store, name string) (sinceRun, error) {
	rep, err := s.AuditVerify(bernstein.AuditOptions{Checkpoint: name})
	if err != nil {
		return sinceRun{}, err
	}
	if rep.Checkpoint != name {
		return sinceRun{}, fmt.Errorf("audit checkpoint %s not taken: %s %v", name, rep.CheckpointNote, firstFailure(rep.Failures))
	}
	task := "since-" + name
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: "after the checkpoint"}); err != nil {
		return sinceRun{}, err
	}
	tok, err := s.Claim(task, "agent-since")
	if err != nil {
		return sinceRun{}, err
	}
	for i := 0; i < *flagArchiveVerifyPosts; i++ {
		if _, err := s.Post(bernstein.PostRequest{Task: task, Key: "k", Agent: "agent-since", ClaimToken: tok, Payload: reportPayload("since", i, 256)}); err != nil {
			return sinceRun{}, err
		}
	}
	var runs []sinceRun
	for i := 0; i < *flagArchiveVerifyRuns; i++ {
		t0 := time.Now()
		rep, err := s.AuditVerify(bernstein.AuditOptions{Since: name})
		if err != nil {
			return sinceRun{}, err
		}
		took := time.Since(t0)
		if !rep.Verified {
			return sinceRun{}, fmt.Errorf("--since %s: not verified: %v", name, firstFailure(rep.Failures))
		}
		runs = append(runs, sinceRun{took: took, read: rep.Counts.CommitsRead})
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].took < runs[j].took })
	return runs[len(runs)/2], nil
}
