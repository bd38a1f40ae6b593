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
	flagAutoArchiveTasks = flag.String("autoarchive-tasks", "1000,10000", "autoarchive: task counts")
	flagAutoArchiveRuns  = flag.Int("autoarchive-runs", 5, "autoarchive: runs of each measure (the median is kept)")
)

// runAutoArchive measures what push's automatic archive (docs/archive.md,
// Automatic archiving) costs when nothing is old enough to archive: the
// scale section's N tasks, 90% of them started and completed just now,
// with the default policy (7 days). In-process: the explicit archive
// (Store.Archive with --ended-before 7 days, which checks every task), the
// automatic archive's first run (no position kept: it reads the writer's
// spine whole), then its runs with nothing new, and after one post and
// one task ended.
func runAutoArchive(b *bench) error {
	ns, err := parseCounts(*flagAutoArchiveTasks)
	if err != nil {
		return err
	}
	b.printf("  workload: the scale section's N tasks, 90%% of them started and completed just now; policy 7d (nothing due).\n")
	b.printf("  In-process, median of %d: Store.Archive{EndedBefore: 7d}; Store.AutoArchive's first run (no position), its\n", *flagAutoArchiveRuns)
	b.printf("  runs with nothing new, and after one post and one task ended. Spine entries read and tasks checked in ().\n\n")
	b.printf("  %-8s %-24s %-26s %-24s %s\n", "tasks", "Store.Archive 7d", "auto: first run", "auto: nothing new", "auto: 1 post + 1 ended")
	var nothing []time.Duration
	var explicit []time.Duration
	for _, n := range ns {
		dir, err := b.mkrepoDir(fmt.Sprintf("autoarch-%d-", n))
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
		row, ex, no, err := b.autoArchiveOne(s, n)
		s.Close()
		if err != nil {
			return err
		}
		b.printf("  %-8d %s\n", n, row)
		explicit, nothing = append(explicit, ex), append(nothing, no)
	}
	if len(ns) > 1 {
		l := len(ns) - 1
		b.printf("\n  %d → %d tasks: Store.Archive %.2fx, automatic archive with nothing new %.2fx (goal for constant work: ≤ 1.5x)\n",
			ns[0], ns[l], float64(explicit[l])/float64(explicit[0]), float64(nothing[l])/float64(nothing[0]))
	}
	return nil
}

func (b *bench) autoArchiveOne(s *bernstein.Store, n int) (string, time.Duration, time.Duration, error) {
	ended := n * 9 / 10
	if err := parallel(ended, *flagScaleWorkers, func(i int) error {
		for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
			if _, err := s.Transition(scaleTask(i), k, "", ""); err != nil {
				return fmt.Errorf("%s %s: %w", k, scaleTask(i), err)
			}
		}
		return nil
	}); err != nil {
		return "", 0, 0, err
	}
	pol := bernstein.ArchivePolicy{EndedBefore: bernstein.DefaultArchiveAge}
	runs := *flagAutoArchiveRuns
	var ex []time.Duration
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		res, err := s.Archive(bernstein.ArchiveRequest{EndedBefore: bernstein.DefaultArchiveAge})
		if err != nil {
			return "", 0, 0, err
		}
		ex = append(ex, time.Since(t0))
		if len(res.Archived) != 0 {
			return "", 0, 0, fmt.Errorf("Store.Archive archived %d tasks, want none", len(res.Archived))
		}
	}
	auto := func() (time.Duration, *bernstein.AutoArchive, error) {
		t0 := time.Now()
		a := s.AutoArchive(pol)
		took := time.Since(t0)
		if a == nil || a.Error != "" || len(a.Archived) != 0 {
			return 0, nil, fmt.Errorf("automatic archive: %+v", a)
		}
		return took, a, nil
	}
	first, fa, err := auto()
	if err != nil {
		return "", 0, 0, err
	}
	var no []time.Duration
	var na *bernstein.AutoArchive
	for i := 0; i < runs; i++ {
		took, a, err := auto()
		if err != nil {
			return "", 0, 0, err
		}
		no, na = append(no, took), a
	}
	// One post on a new task and one more task ended: two spine entries
	// (the post's and the seal).
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "auto-new", Title: "after the first run"}); err != nil {
		return "", 0, 0, err
	}
	tok, err := s.Claim("auto-new", "agent-auto")
	if err != nil {
		return "", 0, 0, err
	}
	if _, err := s.Post(bernstein.PostRequest{Task: "auto-new", Key: "more", Agent: "agent-auto", ClaimToken: tok, Payload: reportPayload("auto", 0, 256)}); err != nil {
		return "", 0, 0, err
	}
	for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
		if _, err := s.Transition(scaleTask(n-2), k, "", ""); err != nil {
			return "", 0, 0, err
		}
	}
	after, aa, err := auto()
	if err != nil {
		return "", 0, 0, err
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	row := fmt.Sprintf("%-24s %-26s %-24s %s",
		fmt.Sprintf("%s (%d tasks)", ms(med(ex)), n),
		fmt.Sprintf("%s (%d, %d)", ms(first), fa.SpineRead, fa.Checked),
		fmt.Sprintf("%s (%d, %d)", ms(med(no)), na.SpineRead, na.Checked),
		fmt.Sprintf("%s (%d, %d)", ms(after), aa.SpineRead, aa.Checked))
	return row, med(ex), med(no), nil
}

func med(ds []time.Duration) time.Duration {
	c := append([]time.Duration(nil), ds...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[len(c)/2]
}
