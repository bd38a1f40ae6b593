package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bernstein/bernstein"
)

// The start-up section times whole processes: a hello-world Go binary built
// in the run (CGO_ENABLED=0, as the Makefile builds bernstein), then
// `bernstein --version`, `--help`, a read (`task list` on a small repository)
// and one CLI post against the same post made by git plumbing commands (the
// post section's baseline). It also reads the package initialisation times
// the Go runtime reports (GODEBUG=inittrace=1).

var (
	flagStartupRuns  = flag.Int("startup-runs", 20, "startup: processes per command per round (after one warm-up each)")
	flagStartupPosts = flag.Int("startup-posts", 30, "startup: CLI posts and git plumbing posts per round")
)

// startupCmd is one command line the section times.
type startupCmd struct {
	label string
	name  string
	args  []string
	want  string // stdout must contain this
}

func runStartup(b *bench) error {
	if *flagStartupRuns < 1 || *flagStartupPosts < 1 {
		return errors.New("-startup-runs and -startup-posts must be positive")
	}
	hello, err := b.buildHello()
	if err != nil {
		return fmt.Errorf("hello-world: %w", err)
	}
	dir, err := b.mkrepoDir("startup-read-")
	if err != nil {
		return err
	}
	if err := b.smallRepo(dir, 5); err != nil {
		return err
	}
	b.printf("  CLI binary %s (%s); hello-world built in this run with CGO_ENABLED=0 (%s)\n", b.bin, linkage(b.bin), linkage(hello))
	b.printf("  per round: each command %d times, interleaved, after one warm-up; then %d CLI posts and %d git plumbing\n", *flagStartupRuns, *flagStartupPosts, *flagStartupPosts)
	b.printf("  posts on fresh repositories, in rotated order (the post section's helpers); %d rounds, medians reported\n\n", *flagRounds)

	cmds := []startupCmd{
		{"hello-world Go binary", hello, nil, "hello"},
		{"bernstein --version", b.bin, []string{"--version"}, "bernstein version"},
		{"bernstein --help", b.bin, []string{"--help"}, "Usage:"},
		{"bernstein task list (1 task, 5 posts)", b.bin, []string{"--repo", dir, "task", "list"}, benchTask},
	}
	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	wall := make([]durations, len(cmds)) // per command: the median of each round
	cpu := make([]durations, len(cmds))
	var cliRate, baseRate stats
	var cliP50, baseP50 durations
	for r := 0; r < *flagRounds; r++ {
		for _, c := range cmds { // warm-up: page cache, the fold cache of the read
			if _, _, err := timeProc(env, c); err != nil {
				return err
			}
		}
		w := make([]durations, len(cmds))
		u := make([]durations, len(cmds))
		for i := 0; i < *flagStartupRuns; i++ {
			for j := range cmds {
				k := (j + i + r) % len(cmds)
				d, c, err := timeProc(env, cmds[k])
				if err != nil {
					return err
				}
				w[k], u[k] = append(w[k], d), append(u[k], c)
			}
		}
		var line []string
		for k := range cmds {
			wall[k], cpu[k] = append(wall[k], w[k].median()), append(cpu[k], u[k].median())
			line = append(line, msShort(w[k].median()))
		}
		for i, m := range []string{modeCLI, modeBaseline} {
			var run postRun
			var err error
			if (i+r)%2 == 0 {
				run, err = b.cliPosts(*flagStartupPosts, *flagKeys, *flagBodyBytes, false)
				if err == nil {
					cliRate.add(run.rate())
					cliP50 = append(cliP50, percentile(run.lat, 50))
				}
			} else {
				run, err = b.baselinePosts(*flagStartupPosts, *flagKeys, *flagBodyBytes, false)
				if err == nil {
					baseRate.add(run.rate())
					baseP50 = append(baseP50, percentile(run.lat, 50))
				}
			}
			if err != nil {
				b.fail("round %d, startup %s posts: %v", r+1, m, err)
			}
		}
		b.printf("  round %d: %s ms; posts p50: CLI %s, git plumbing %s\n", r+1, strings.Join(line, " / "),
			lastMS(cliP50), lastMS(baseP50))
	}

	b.printf("\n  %-40s %9s %15s %9s %12s\n", "process (wall from start to exit)", "median", "rounds min..max", "CPU", "/ hello-world")
	for k, c := range cmds {
		b.printf("  %-40s %9s %15s %9s %12s\n", c.label, ms(wall[k].median()), wall[k].span(), ms(cpu[k].median()),
			dratio(wall[k].median(), wall[0].median()))
	}
	perPost := func(s stats) time.Duration {
		if len(s.vals) == 0 {
			return 0
		}
		return time.Duration(float64(time.Second) / s.median())
	}
	cliPer, basePer := perPost(cliRate), perPost(baseRate)
	b.printf("  %-40s %9s %15s %9s %12s\n", "bernstein artifact post (one process)", ms(cliPer), "p50 "+cliP50.span(), "-", dratio(cliPer, wall[0].median()))
	b.printf("  %-40s %9s %15s %9s %12s\n", "git plumbing post (8 git processes)", ms(basePer), "p50 "+baseP50.span(), "-", dratio(basePer, wall[0].median()))
	b.printf("  (medians of the rounds' medians; CPU: user+sys of the process; posts: 1 / median posts/s over %d posts a round)\n", *flagStartupPosts)

	b.printf("\n  ratios (of medians)\n")
	b.printf("    --version / hello-world        %8s   (what start-up costs beyond the Go runtime's own)\n", dratio(wall[1].median(), wall[0].median()))
	b.printf("    task list / --version          %8s\n", dratio(wall[3].median(), wall[1].median()))
	b.printf("    CLI post / --version           %8s   (a post's share that is start-up: %s)\n", dratio(cliPer, wall[1].median()), share(wall[1].median(), cliPer))
	b.printf("    git plumbing post / CLI post   %8s   (goal: at least 5x)\n", dratio(basePer, cliPer))
	mark := "not met"
	if cliPer > 0 && float64(basePer)/float64(cliPer) >= 5 {
		mark = "met"
	}
	b.printf("\n  goal (information only): CLI post at least 5x faster than the git plumbing post: %s\n", mark)
	b.summary("bernstein --version / hello-world", ms(wall[1].median()), ms(wall[0].median()), dratio(wall[1].median(), wall[0].median()), "", false)
	b.summary("git plumbing post / CLI post (one process)", ms(cliPer), ms(basePer), dratio(basePer, cliPer), ">= 5x", mark == "met")

	return b.initTrace(env, hello)
}

// timeProc runs c once and returns its wall and CPU time. The process is
// started directly (not under GNU time), so its wall time is its own.
func timeProc(env []string, c startupCmd) (time.Duration, time.Duration, error) {
	cmd := exec.Command(c.name, c.args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %v: %s", c.label, err, strings.TrimSpace(stderr.String()))
	}
	if !strings.Contains(stdout.String(), c.want) {
		return 0, 0, fmt.Errorf("%s: printed %q, want %q in it", c.label, stdout.String(), c.want)
	}
	return wall, processCPU(cmd.ProcessState), nil
}

// buildHello builds a hello-world Go program with the flags bin/bernstein is
// built with (CGO_ENABLED=0), in its own module under the run's folder.
func (b *bench) buildHello() (string, error) {
	dir, err := b.mkrepoDir("hello-")
	if err != nil {
		return "", err
	}
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// smallRepo sets up dir with the bench task claimed and posts artifacts on
// it through the library, for the read command.
func (b *bench) smallRepo(dir string, posts int) error {
	s, tok, err := b.setupStore(dir)
	if err != nil {
		return err
	}
	for i := 0; i < posts; i++ {
		req := bernstein.PostRequest{Task: benchTask, Key: keyOf(i, *flagKeys), Agent: benchAgent, ClaimToken: tok,
			Payload: reportPayload("startup", i, *flagBodyBytes)}
		if _, err := s.Post(req); err != nil {
			s.Close()
			return fmt.Errorf("post %d: %w", i, err)
		}
	}
	return s.Close()
}

// linkage says whether the ELF file at path asks for a dynamic loader.
func linkage(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "linkage unknown: " + err.Error()
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "dynamically linked"
		}
	}
	return "statically linked"
}

func lastMS(d durations) string {
	if len(d) == 0 {
		return "-"
	}
	return ms(d[len(d)-1])
}

func share(part, whole time.Duration) string {
	if whole <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}

// initTrace runs `bernstein --version` and the hello-world under
// GODEBUG=inittrace=1 and prints the median total of package initialisation
// and the packages that cost most.
func (b *bench) initTrace(env []string, hello string) error {
	const runs = 15
	trace := func(name string, args ...string) (totals []float64, perPkg map[string][]float64, n int, err error) {
		perPkg = map[string][]float64{}
		for i := 0; i < runs; i++ {
			cmd := exec.Command(name, args...)
			cmd.Env = append(append([]string(nil), env...), "GODEBUG=inittrace=1")
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = nil, &stderr
			if err := cmd.Run(); err != nil {
				return nil, nil, 0, fmt.Errorf("%s: %v", name, err)
			}
			var total float64
			n = 0
			for _, line := range strings.Split(stderr.String(), "\n") {
				// init PKG @T ms, C ms clock, B bytes, A allocs
				f := strings.Fields(line)
				if len(f) < 6 || f[0] != "init" || f[5] != "ms" {
					continue
				}
				c, err := strconv.ParseFloat(f[4], 64)
				if err != nil {
					continue
				}
				total += c
				perPkg[f[1]] = append(perPkg[f[1]], c)
				n++
			}
			totals = append(totals, total)
		}
		return totals, perPkg, n, nil
	}
	tb, pkgs, nb, err := trace(b.bin, "--version")
	if err != nil {
		return err
	}
	th, _, nh, err := trace(hello)
	if err != nil {
		return err
	}
	b.printf("\n  package initialisation (GODEBUG=inittrace=1, median of %d runs; the trace itself slows start-up)\n", runs)
	b.printf("    bernstein --version: %.2f ms over %d packages; hello-world: %.2f ms over %d packages\n", median(tb), nb, median(th), nh)
	type pkg struct {
		name string
		ms   float64
	}
	var top []pkg
	for name, v := range pkgs {
		top = append(top, pkg{name, median(v)})
	}
	sort.Slice(top, func(i, j int) bool {
		return top[i].ms > top[j].ms || top[i].ms == top[j].ms && top[i].name < top[j].name
	})
	b.printf("    the costliest:\n")
	for i := 0; i < len(top) && i < 12; i++ {
		b.printf("      %6.3f ms  %s\n", top[i].ms, top[i].name)
	}
	return nil
}
