package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/verify"
)

// The verify section (issue 3): `bernstein audit verify` over a whole
// repository against `git fsck --full` on the same repository, in the same
// run, at two sizes, with the peak memory of each process.

var (
	flagVerifyPosts     = flag.String("verify-posts", "1000,2500,10000", "verify: repository sizes, in artifact posts (each a repository; peak memory is compared between the first and the last, and between the last and a size a quarter of it)")
	flagVerifyTaskPosts = flag.Int("verify-task-posts", 100, "verify: posts per task (tasks = posts / this)")
	flagVerifyKeys      = flag.Int("verify-keys", 5, "verify: artifact keys per task (the rest of its posts are reposts)")
)

// verifyTarget is one built repository and what was measured on it.
type verifyTarget struct {
	repo               *builtRepo
	objects            packInfo
	verify, fsck       durations
	verifyCPU, fsckCPU durations
	verifyRSS, fsckRSS []int64
	counts             verify.Counts
	sealedVerified     int
	heapPeak           uint64
}

func runVerify(b *bench) error {
	sizes, err := parseCounts(*flagVerifyPosts)
	if err != nil {
		return fmt.Errorf("-verify-posts: %w", err)
	}
	if *flagVerifyTaskPosts < 1 || *flagVerifyKeys < 1 || *flagBuildWorkers < 1 {
		return fmt.Errorf("-verify-task-posts, -verify-keys and -build-workers must be positive")
	}
	const body, checkpoints, sealEvery = 512, 2, 10
	b.printf("  workload: N artifact posts (report, %d B) over N/%d tasks, %d keys per task, each task claimed by its own agent;\n", body, *flagVerifyTaskPosts, *flagVerifyKeys)
	b.printf("  then %d checkpoints per task, and every %dth task started, gate-run and completed (its journal sealed).\n", checkpoints, sealEvery)
	b.printf("  Built through the library API by %d goroutines on one Store. Measured %d rounds per repository, order\n", *flagBuildWorkers, *flagRounds)
	b.printf("  alternated: `bernstein audit verify --output-json` (BERNSTEIN_HOME of the writer: HMACs checked) and\n")
	b.printf("  `git fsck --full`, each a separate process under %s (wall time, CPU, peak RSS); medians\n\n", orNone(b.timeBin, "no GNU time: RSS not measured"))

	var targets []*verifyTarget
	for _, n := range sizes {
		tasks := max(1, n / *flagVerifyTaskPosts)
		r, err := b.buildRepo(repoSpec{prefix: fmt.Sprintf("v%d", n), tasks: tasks, posts: n, keys: *flagVerifyKeys,
			bodyBytes: body, checkpoints: checkpoints, sealEvery: sealEvery, workers: *flagBuildWorkers})
		if err != nil {
			return fmt.Errorf("build %d posts: %w", n, err)
		}
		po, err := countObjects(r.dir)
		if err != nil {
			return err
		}
		b.printf("  built %d posts over %d tasks in %s (posts %.0f/s); %d journal rows, %d ledger rows, %d sealed; %s\n",
			n, tasks, r.elapsed.Round(10*time.Millisecond), float64(n)/r.postTime.Seconds(), r.journalRows(), r.transitions, r.sealed, po)
		targets = append(targets, &verifyTarget{repo: r, objects: po})
	}
	b.printf("  machine load after building: %s\n\n", machineLoad())

	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	for r := 0; r < *flagRounds; r++ {
		var line []string
		for _, t := range targets {
			steps := []string{"verify", "fsck"}
			if r%2 == 1 {
				steps = []string{"fsck", "verify"}
			}
			for _, st := range steps {
				switch st {
				case "verify":
					run, err := b.runProc(env, false, b.bin, "--repo", t.repo.dir, "audit", "verify", "--output-json")
					if err != nil {
						return err
					}
					if err := t.checkReport(run); err != nil {
						return fmt.Errorf("%d posts: %w", t.repo.posts, err)
					}
					t.verify = append(t.verify, run.wall)
					t.verifyCPU = append(t.verifyCPU, run.cpu)
					t.verifyRSS = append(t.verifyRSS, run.rss)
					line = append(line, fmt.Sprintf("%d: verify %s", t.repo.posts, ms(run.wall)))
				case "fsck":
					run, err := b.runProc(cleanEnv("GIT_DIR="+t.repo.dir+"/.git"), false, "git", "fsck", "--full", "--no-progress")
					if err != nil {
						return err
					}
					if run.exit != 0 {
						return fmt.Errorf("%d posts: git fsck --full exited %d: %s", t.repo.posts, run.exit, run.stderr)
					}
					if bad := fsckComplaints(string(run.stdout) + "\n" + run.stderr); bad != "" {
						return fmt.Errorf("%d posts: git fsck --full: %s", t.repo.posts, bad)
					}
					t.fsck = append(t.fsck, run.wall)
					t.fsckCPU = append(t.fsckCPU, run.cpu)
					t.fsckRSS = append(t.fsckRSS, run.rss)
					line = append(line, fmt.Sprintf("fsck %s", ms(run.wall)))
				}
			}
		}
		b.printf("  round %d: %s\n", r+1, strings.Join(line, ", "))
	}

	b.printf("\n  %-6s %7s %5s %11s %13s %11s %9s %11s %13s %11s %9s %6s %6s\n", "posts", "objects", "packs",
		"verify", "min..max ms", "CPU", "peak RSS", "fsck", "min..max ms", "CPU", "peak RSS", "wall", "CPU")
	for _, t := range targets {
		b.printf("  %-6d %7d %5d %11s %13s %11s %9s %11s %13s %11s %9s %6s %6s\n", t.repo.posts, t.objects.inPack+t.objects.loose, t.objects.packs,
			ms(t.verify.median()), t.verify.span(), ms(t.verifyCPU.median()), mibOr(medianInt(t.verifyRSS)),
			ms(t.fsck.median()), t.fsck.span(), ms(t.fsckCPU.median()), mibOr(medianInt(t.fsckRSS)),
			dratio(t.verify.median(), t.fsck.median()), dratio(t.verifyCPU.median(), t.fsckCPU.median()))
	}
	b.printf("  (wall, CPU: verify / fsck, of medians; CPU = user+sys of the process; objects, packs: git count-objects -v)\n")

	b.printf("\n  what each checked (the last round; verify's counts from its JSON)\n")
	for _, t := range targets {
		c := t.counts
		b.printf("    %d posts: verify: %d signatures (SSH, spine and audit commits), %d HMACs, %d journal rows + %d ledger rows\n",
			t.repo.posts, c.SignaturesChecked, c.HMACsChecked, c.JournalRows, c.LedgerRows)
		b.printf("      (chains, indexes, prev hashes), %d artifact blobs + %d output blobs re-hashed (sha256 and git id), %d spine\n",
			c.Artifacts, t.repo.gates, c.SpineEntries)
		b.printf("      entries bound to rows both ways, %d audit entries against the rows they mirror, %d seal(s) (journal_identity verified)\n",
			c.AuditEntries, t.sealedVerified)
		b.printf("      fsck: %d objects inflated and hashed, links between them followed (connectivity)\n", t.objects.inPack+t.objects.loose)
	}

	first, last := targets[0], targets[len(targets)-1]
	vr, fr := medianInt(first.verifyRSS), medianInt(last.verifyRSS)
	b.printf("\n  memory (peak RSS: median over rounds; it counts the pages of the mapped pack files the process touched)\n")
	b.printf("    %-7s %14s %14s %14s %22s %16s\n", "posts", "verify RSS", "fsck RSS", "pack files", "verify Go heap peak", "in-process wall")
	for _, t := range targets {
		took, heap, err := b.heapOfVerify(t)
		if err != nil {
			return fmt.Errorf("%d posts: %w", t.repo.posts, err)
		}
		t.heapPeak = heap
		b.printf("    %-7d %14s %14s %14s %22s %16s\n", t.repo.posts, mibOr(medianInt(t.verifyRSS)), mibOr(medianInt(t.fsckRSS)),
			mib(int64(t.objects.sizePackKiB)), mibBytes(heap), ms(took))
	}
	b.printf("    verify at %d posts / at %d posts: peak RSS %s, Go heap peak %s; git fsck peak RSS %s\n", last.repo.posts, first.repo.posts,
		ratio(float64(fr), float64(vr)), ratio(float64(last.heapPeak), float64(first.heapPeak)),
		ratio(float64(medianInt(last.fsckRSS)), float64(medianInt(first.fsckRSS))))
	// The goal is stated for four times the history: the last size against
	// one a quarter of it, when the run has one (else the first).
	quarter := first
	for _, t := range targets {
		if 4*t.repo.posts == last.repo.posts {
			quarter = t
		}
	}
	qr := medianInt(quarter.verifyRSS)
	if quarter != first {
		b.printf("    verify at %d posts / at %d posts: peak RSS %s, Go heap peak %s; git fsck peak RSS %s\n", last.repo.posts, quarter.repo.posts,
			ratio(float64(fr), float64(qr)), ratio(float64(last.heapPeak), float64(quarter.heapPeak)),
			ratio(float64(medianInt(last.fsckRSS)), float64(medianInt(quarter.fsckRSS))))
	}
	b.printf("    (Go heap peak: live and unswept objects, sampled every 2 ms during one Store.AuditVerify in this process)\n")

	b.printf("\n  goals (information only; a missed goal does not fail the run)\n")
	goal := func(name string, ok bool, detail string) {
		mark := "not met"
		if ok {
			mark = "met"
		}
		b.printf("    %-52s %-8s %s\n", name, mark, detail)
	}
	for _, t := range targets {
		goal(fmt.Sprintf("verify no slower than git fsck --full (%d posts)", t.repo.posts), t.verify.median() <= t.fsck.median(),
			"verify/fsck = "+dratio(t.verify.median(), t.fsck.median()))
		b.summary(fmt.Sprintf("audit verify / git fsck --full, %d posts", t.repo.posts), ms(t.verify.median()), ms(t.fsck.median()), dratio(t.verify.median(), t.fsck.median()), "<= 1.0x", t.verify.median() <= t.fsck.median())
	}
	if len(targets) > 1 && qr > 0 {
		growth := float64(last.repo.posts) / float64(quarter.repo.posts)
		goal("verify memory flat as the repository grows", float64(fr) <= 1.3*float64(qr),
			fmt.Sprintf("peak RSS x%.2f, Go heap x%.2f for x%.0f posts (flat: within 1.3x for 4x)", float64(fr)/float64(qr),
				float64(last.heapPeak)/float64(quarter.heapPeak), growth))
		b.summary(fmt.Sprintf("verify peak RSS, %d / %d posts", last.repo.posts, quarter.repo.posts), mib(fr), mib(qr), ratio(float64(fr), float64(qr)), "<= 1.3x", float64(fr) <= 1.3*float64(qr))
	}
	b.printf("\n  notes: every verify exited 0 with verified=true, hmac_checked=true and no failures, and its counts matched\n")
	b.printf("  what was built (rows, artifact versions, sealed tasks); every git fsck --full exited 0 with no complaint.\n")
	b.printf("  The OS page cache is warm for both. verify checks signatures and tasks on every core (GOMAXPROCS %d here):\n", runtime.GOMAXPROCS(0))
	b.printf("  its CPU / wall was %.2f at %d posts; git fsck's %.2f. On a loaded machine verify loses the most.\n",
		float64(last.verifyCPU.median())/float64(last.verify.median()), last.repo.posts, float64(last.fsckCPU.median())/float64(last.fsck.median()))

	if err := b.verifySince(env, first, last); err != nil {
		return err
	}

	return b.profileOp(fmt.Sprintf("verify-%d", last.repo.posts), 1, func() error {
		_, err := b.verifyInProcess(last)
		return err
	})
}

var flagVerifySincePosts = flag.Int("verify-since-posts", 10, "verify: posts added after an audit checkpoint for `audit verify --since`")

// verifySince measures incremental verification: on the smallest and the
// largest repository, an audit checkpoint, then the same few posts on a
// new task, then `audit verify --since` (its cost must follow what was
// added, not the history), against the full verify of the same repository.
func (b *bench) verifySince(env []string, targets ...*verifyTarget) error {
	n := *flagVerifySincePosts
	b.printf("\n  incremental: `audit verify --checkpoint bench`, then %d posts on a new task, then `audit verify --since bench`\n", n)
	b.printf("  (%d rounds each, alternated with a full verify of the same repository)\n", *flagRounds)
	type result struct {
		posts             int
		since, full       durations
		sinceCPU, fullCPU durations
		read              int
	}
	var res []result
	for _, t := range targets {
		run, err := b.runProc(env, false, b.bin, "--repo", t.repo.dir, "audit", "verify", "--checkpoint", "bench")
		if err != nil {
			return err
		}
		if run.exit != 0 || !strings.Contains(string(run.stdout), "audit checkpoint bench taken") {
			return fmt.Errorf("%d posts: audit verify --checkpoint exited %d: %s%s", t.repo.posts, run.exit, run.stdout, run.stderr)
		}
		s, err := bernstein.Open(bernstein.Options{Repo: t.repo.dir, Home: b.home})
		if err != nil {
			return err
		}
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: "since-1", Title: "added after the checkpoint"}); err != nil {
			s.Close()
			return err
		}
		tok, err := s.Claim("since-1", "agent-since")
		if err != nil {
			s.Close()
			return err
		}
		for i := range n {
			p := bernstein.PostRequest{Task: "since-1", Key: fmt.Sprintf("k%d", i%3), Agent: "agent-since", ClaimToken: tok,
				Payload: artifact.Payload{Type: artifact.TypeReport, Body: fmt.Sprintf("added after the checkpoint %d", i)}}
			if _, err := s.Post(p); err != nil {
				s.Close()
				return err
			}
		}
		s.Close()
		r := result{posts: t.repo.posts}
		for round := 0; round < *flagRounds; round++ {
			order := []bool{true, false}
			if round%2 == 1 {
				order = []bool{false, true}
			}
			for _, since := range order {
				args := []string{"--repo", t.repo.dir, "audit", "verify", "--output-json"}
				if since {
					args = append(args, "--since", "bench")
				}
				run, err := b.runProc(env, false, b.bin, args...)
				if err != nil {
					return err
				}
				var rep verify.Report
				if err := json.Unmarshal(run.stdout, &rep); err != nil || run.exit != 0 || !rep.Verified {
					return fmt.Errorf("%d posts: audit verify %v exited %d (verified %v, %v): %s", t.repo.posts, args[3:], run.exit, rep.Verified, err, run.stderr)
				}
				if since {
					if rep.Counts.Artifacts != n {
						return fmt.Errorf("%d posts: --since checked %d versions, want %d", t.repo.posts, rep.Counts.Artifacts, n)
					}
					r.since, r.sinceCPU, r.read = append(r.since, run.wall), append(r.sinceCPU, run.cpu), rep.Counts.CommitsRead
				} else {
					r.full, r.fullCPU = append(r.full, run.wall), append(r.fullCPU, run.cpu)
				}
			}
		}
		b.printf("    %6d posts of history: --since %s (CPU %s, %d chain commits read), full verify %s (CPU %s): --since / full %s\n",
			t.repo.posts, ms(r.since.median()), ms(r.sinceCPU.median()), r.read, ms(r.full.median()), ms(r.fullCPU.median()),
			dratio(r.since.median(), r.full.median()))
		res = append(res, r)
	}
	if len(res) > 1 {
		a, z := res[0], res[len(res)-1]
		q := dratio(z.since.median(), a.since.median())
		b.printf("    --since after %d posts, on %d / on %d posts of history: %s wall, %s CPU, commits read %d / %d\n", n, z.posts, a.posts,
			q, dratio(z.sinceCPU.median(), a.sinceCPU.median()), z.read, a.read)
		b.summary(fmt.Sprintf("audit verify --since, %d new posts on %d / on %d posts", n, z.posts, a.posts), ms(z.since.median()), ms(a.since.median()), q, "<= 1.5x",
			float64(z.since.median()) <= 1.5*float64(a.since.median()))
	}
	return nil
}

// verifyInProcess runs Store.AuditVerify on t's repository in this process
// and checks the report like the CLI's.
func (b *bench) verifyInProcess(t *verifyTarget) (time.Duration, error) {
	s, err := bernstein.Open(bernstein.Options{Repo: t.repo.dir, Home: b.home})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	t0 := time.Now()
	rep, err := s.AuditVerify(bernstein.AuditOptions{})
	took := time.Since(t0)
	if err != nil {
		return took, err
	}
	if !rep.Verified || !rep.HMACChecked || len(rep.Failures) > 0 || rep.Counts.Artifacts != t.repo.posts {
		return took, fmt.Errorf("in-process audit verify: verified=%v, %d failures, %d versions", rep.Verified, len(rep.Failures), rep.Counts.Artifacts)
	}
	return took, nil
}

// heapOfVerify measures the Go heap of one in-process audit verify: the
// peak of live and unswept objects above what the bench held before.
func (b *bench) heapOfVerify(t *verifyTarget) (time.Duration, uint64, error) {
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	h := startHeapSampler()
	took, err := b.verifyInProcess(t)
	peak := h.Stop()
	if peak > ms0.HeapAlloc {
		peak -= ms0.HeapAlloc
	}
	return took, peak, err
}

// checkReport checks one `audit verify --output-json` run against what was
// built.
func (t *verifyTarget) checkReport(run procRun) error {
	if run.exit != 0 {
		return fmt.Errorf("audit verify exited %d: %s", run.exit, run.stderr)
	}
	var rep verify.Report
	if err := json.Unmarshal(run.stdout, &rep); err != nil {
		return fmt.Errorf("audit verify printed %q: %w", firstBytes(run.stdout, 200), err)
	}
	r, c := t.repo, rep.Counts
	if !rep.Verified || !rep.HMACChecked || len(rep.Failures) > 0 {
		return fmt.Errorf("audit verify: verified=%v hmac_checked=%v, %d failures (first: %+v)", rep.Verified, rep.HMACChecked, len(rep.Failures), firstFailure(rep.Failures))
	}
	sealed := 0
	for _, tr := range rep.Tasks {
		if tr.JournalIdentity == verify.IdentityVerified {
			sealed++
		}
	}
	switch {
	case c.Tasks != len(r.tasks):
		return fmt.Errorf("audit verify walked %d tasks, want %d", c.Tasks, len(r.tasks))
	case c.JournalRows != r.journalRows() || c.LedgerRows != r.transitions:
		return fmt.Errorf("audit verify counted %d journal and %d ledger rows, want %d and %d", c.JournalRows, c.LedgerRows, r.journalRows(), r.transitions)
	case c.Artifacts != r.posts || c.Verified != r.posts:
		return fmt.Errorf("audit verify: %d artifact versions, %d verified; want %d", c.Artifacts, c.Verified, r.posts)
	case c.SpineEntries != r.posts+r.sealed:
		return fmt.Errorf("audit verify: %d spine entries, want %d posts + %d seals", c.SpineEntries, r.posts, r.sealed)
	case c.HMACsChecked != c.AuditEntries || c.HMACsChecked == 0:
		return fmt.Errorf("audit verify: %d HMACs checked of %d audit entries", c.HMACsChecked, c.AuditEntries)
	case sealed != r.sealed:
		return fmt.Errorf("audit verify: %d tasks with a verified journal identity, want %d sealed", sealed, r.sealed)
	}
	t.counts, t.sealedVerified = c, sealed
	return nil
}

func firstFailure(fs []verify.Failure) any {
	if len(fs) == 0 {
		return nil
	}
	return fs[0]
}

// fsckComplaints returns the first line of git fsck output that is not a
// notice or a dangling object ("" when clean).
func fsckComplaints(out string) string {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "notice:") || strings.HasPrefix(line, "dangling ") || strings.HasPrefix(line, "Checking ") {
			continue
		}
		return line
	}
	return ""
}

func mibOr(kib int64) string {
	if kib <= 0 {
		return "-"
	}
	return mib(kib)
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s + " -f %M"
}
