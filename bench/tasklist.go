package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/bernstein/bernstein"
)

// The tasklist section: a list of tasks shows each task's integrity, which
// re-verifies its versions, so a list must cost what verifying each task's
// own versions costs plus the spines once: linear in the tasks. Measured on
// two repositories, the second with four times the tasks (every fourth task
// sealed, which reads the spines), in the same run: Store.TaskList against
// Store.Tasks (the list without integrity) as the baseline. The headline
// is the CPU time (this process and its children): on a shared machine the
// wall time of reading four times the objects also measures the disk.

var flagTaskListTasks = flag.Int("tasklist-tasks", 200, "tasklist: tasks in the smaller repository (the larger has four times as many)")

func runTaskList(b *bench) error {
	type point struct {
		tasks               int
		list, base, listCPU time.Duration
	}
	var pts []point
	for _, n := range []int{*flagTaskListTasks, 4 * *flagTaskListTasks} {
		r, err := b.buildRepo(repoSpec{prefix: "tl", tasks: n, posts: 3 * n, keys: 2, bodyBytes: 256, checkpoints: 1, sealEvery: 4, workers: *flagBuildWorkers})
		if err != nil {
			return err
		}
		s, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: b.home})
		if err != nil {
			return err
		}
		var lists, bases, cpus []float64
		for round := 0; round < *flagRounds; round++ {
			t0 := time.Now()
			self0, kids0 := cpuTimes()
			got, err := s.TaskList()
			if err != nil {
				s.Close()
				return err
			}
			lists = append(lists, time.Since(t0).Seconds())
			self1, kids1 := cpuTimes()
			cpus = append(cpus, (self1 - self0 + kids1 - kids0).Seconds())
			if len(got) != n {
				b.fail("tasklist: %d tasks listed of %d", len(got), n)
			}
			for _, e := range got {
				if !e.Integrity.Verified() && !(e.Integrity.State == "unverifiable" && e.Integrity.Versions.Tampered == 0) {
					b.fail("tasklist: %s reads %s: %s", e.ID, e.Integrity.State, e.Integrity.Reason)
					break
				}
			}
			t0 = time.Now()
			if _, err := s.Tasks(); err != nil {
				s.Close()
				return err
			}
			bases = append(bases, time.Since(t0).Seconds())
		}
		s.Close()
		sec := func(v []float64) time.Duration { return time.Duration(median(v) * float64(time.Second)) }
		p := point{n, sec(lists), sec(bases), sec(cpus)}
		b.printf("  %5d tasks (%d sealed, %d versions): TaskList %v wall, %v CPU (%v a task), Tasks without integrity %v wall\n",
			n, r.sealed, r.posts, p.list.Round(time.Millisecond), p.listCPU.Round(time.Millisecond),
			(p.listCPU / time.Duration(n)).Round(time.Microsecond), p.base.Round(time.Millisecond))
		pts = append(pts, p)
	}
	growth := float64(pts[1].listCPU) / float64(pts[0].listCPU)
	wall := float64(pts[1].list) / float64(pts[0].list)
	baseGrowth := float64(pts[1].base) / float64(pts[0].base)
	b.printf("  four times the tasks: TaskList %.1fx the CPU time, %.1fx the wall time (linear: 4x); Tasks %.1fx the wall time\n", growth, wall, baseGrowth)
	b.summary("task list CPU, 4x tasks", fmt.Sprintf("%.1fx", growth), "4x (linear)", fmt.Sprintf("%.2f", growth/4), "<= 1.5", growth/4 <= 1.5)
	return nil
}
