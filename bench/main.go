// Command bench measures bernstein against the disk it runs on and against
// plain git plumbing. `make bench` runs every section; `go run ./bench -only
// post` runs one. Each section is a named function in the sections table, so
// later benchmarks are added by appending to it (and, if they need any, by
// registering their own flags).
//
// Every measurement runs on its own fresh repository in a temporary folder
// (os.MkdirTemp in the default TMPDIR, so set TMPDIR to benchmark another
// filesystem), with a temporary BERNSTEIN_HOME. The program exits non-zero
// only when something failed (a post errored, a count did not add up, fsck
// complained); a missed performance goal is information, not a failure.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// section is one benchmark: later ones are appended here.
type section struct {
	name string
	desc string
	run  func(b *bench) error
}

var sections = []section{
	{"post", "artifact posts per second: disk floor, library API (sequential and concurrent), CLI, git plumbing baseline", runPost},
	{"verify", "audit verify of a whole repository (1,000, 2,500 and 10,000 posts) against git fsck --full: time and peak memory", runVerify},
	{"fold", "progress fold of a long journal: cold (fresh process, no cache) against git log over the same ref; warm after new rows", runFold},
	{"history", "cost against history length: CLI reads at 1,000 and 4,000 versions of one key, bytes a post adds, MCP server RSS over 3,000 posts", runHistory},
	{"serve", "bernstein serve: post to SSE event p50/p99 (in-process and CLI posts, 1 and 100 subscribers), RSS of 1,000 idle subscribers, task API vs artifact list", runServe},
	{"remote", "bernstein push and fetch of 10,000 posts to and from a file:// bare repository against plain git push and git fetch of the same refs", runRemote},
	{"startup", "process start-up: bernstein --version, --help, task list and one CLI post against a hello-world Go binary and a git plumbing post", runStartup},
	{"guard", "remote guard: a push of 10 new rows on top of 1,000 and of 100,000 rows, checked in-process and pushed through the pre-receive hook (ratio ~1: no growth with history)", runGuard},
	{"growth", "costs that must not grow with what a repository holds: a Store's live heap after 3,000 / 1,000 posts, objects compactions rewrite against n log n, Compact's heap against what it merges, a garbage token lookup against a fold of every ledger", runGrowth},
	{"scale", "task count: constant work (post, post to SSE event, task show, artifact show, audit verify --since) and listings (task list, artifact list, the index page, GET /api/v1/tasks) at 1k, 10k (and 100k) tasks, against git's own figures", runScale},
	{"tasklist", "task list with integrity (every task's versions re-verified) at N and 4N tasks, a quarter sealed: linear in the tasks, against the list without integrity", runTaskList},
	{"attest", "per post: signing through ssh-agent (an Ed25519 key, and an ECDSA key on a SoftHSM token) and attesting (artifact attest --bundle) against the file-key post", runAttest},
	{"witness", "witnesses: a push of 10 new posts with litewitness cosigning the writer's checkpoint, and a fetch checking the log, against the same push and fetch without witnesses", runWitness},
	{"archive", "ended tasks archived into one ref per writer (docs/archive.md), the archive commits built by internal/archive: a push and a fetch of one row and a listing, against every task as refs", runArchive},
	{"archiveread", "reads of archived tasks (docs/archive.md, Reading): task show and a page of task list at 1k and 10k tasks with 90% archived, against the same repository with every task as refs", runArchiveRead},
	{"archiveverify", "audit verify --since after a few posts at 1k and 10k tasks, 90% of them ended: every task as refs, then the ended tasks archived", runArchiveVerify},
	{"autoarchive", "push's automatic archive with nothing due at 1k and 10k tasks, 90% of them ended just now: the explicit archive (every task checked) against the automatic one (the spine entries since its last run)", runAutoArchive},
	{"peers", "gittuf (signed RSL entries, verify-ref) and git-bug (comments), built from the Go module proxy, against bernstein posts and audit verify", runPeers},
}

var (
	flagOnly       = flag.String("only", "all", "comma-separated sections to run (or 'all'); -list shows them")
	flagList       = flag.Bool("list", false, "list the sections and exit")
	flagRounds     = flag.Int("rounds", 3, "rounds per section; each round measures every mode once on fresh repositories, in rotated order")
	flagKeep       = flag.Bool("keep", false, "keep the temporary folder (repositories, home) for inspection")
	flagBin        = flag.String("bin", "", "bernstein CLI binary, with bernstein-serve beside it (default bin/bernstein under the module root, built with bin/bernstein-serve if missing)")
	flagCPUProfile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flagMemProfile = flag.String("memprofile", "", "write a heap profile at the end of the run to this file")
)

// bench is what every section gets.
type bench struct {
	root    string // module root (the repository under test)
	tmp     string // the temporary folder every repository of the run lives in
	home    string // BERNSTEIN_HOME for the whole run
	bin     string // the CLI binary
	timeBin string // GNU time, for the peak RSS of child processes ("" if missing)
	fs      fsInfo
	out     io.Writer
	failed  []string
	started time.Time
	section string       // the section running now
	sum     []summaryRow // headlines for the table at the end (see summary)
}

// fail records a failure; the run goes on and exits non-zero at the end.
func (b *bench) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.failed = append(b.failed, msg)
	fmt.Fprintf(os.Stderr, "bench: FAILED: %s\n", msg)
}

func (b *bench) printf(format string, args ...any) { fmt.Fprintf(b.out, format, args...) }

// mkrepoDir returns a fresh empty folder for one measurement.
func (b *bench) mkrepoDir(prefix string) (string, error) {
	return os.MkdirTemp(b.tmp, prefix)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "wire" {
		os.Exit(wireMain(os.Args[2:]))
	}
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench [flags]\n\nsections:\n")
		for _, s := range sections {
			fmt.Fprintf(flag.CommandLine.Output(), "  %-8s %s\n", s.name, s.desc)
		}
		fmt.Fprintf(flag.CommandLine.Output(), "\nflags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *flagList {
		for _, s := range sections {
			fmt.Printf("%-8s %s\n", s.name, s.desc)
		}
		return
	}
	os.Exit(run())
}

func run() int {
	chosen, err := chooseSections(*flagOnly)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 2
	}
	if *flagRounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -rounds must be at least 1")
		return 2
	}
	if *flagCPUProfile != "" {
		f, err := os.Create(*flagCPUProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	b := &bench{out: os.Stdout, started: time.Now()}
	if b.root, err = moduleRoot(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	if b.tmp, err = os.MkdirTemp("", "bernstein-bench-"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	if *flagKeep {
		defer fmt.Printf("\nkept %s\n", b.tmp)
	} else {
		defer os.RemoveAll(b.tmp)
	}
	b.home = filepath.Join(b.tmp, "home")
	b.fs = filesystemOf(b.tmp)
	b.timeBin = findGNUTime()
	if b.bin, err = cliBinary(b.root, *flagBin); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}

	b.printf("bernstein bench  %s\n", time.Now().Format(time.RFC3339))
	b.printf("  host:        %s/%s, %d CPUs, %s, %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), gitVersion())
	b.printf("  temp folder: %s\n", b.tmp)
	b.printf("  filesystem:  %s\n", b.fs)
	b.printf("  CLI binary:  %s\n", b.bin)
	for _, s := range chosen {
		b.printf("\n== section %s: %s ==\n", s.name, s.desc)
		b.printf("  machine load before: %s\n", machineLoad())
		b.section = s.name
		if err := s.run(b); err != nil {
			b.fail("section %s: %v", s.name, err)
		}
		b.printf("  machine load after:  %s\n", machineLoad())
	}
	if *flagMemProfile != "" {
		if err := writeHeapProfile(*flagMemProfile); err != nil {
			b.fail("memprofile: %v", err)
		}
	}
	b.printSummary()
	b.printf("\nwall time %s\n", time.Since(b.started).Round(100*time.Millisecond))
	if len(b.failed) > 0 {
		b.printf("\nFAILED (%d):\n", len(b.failed))
		for _, f := range b.failed {
			b.printf("  - %s\n", f)
		}
		return 1
	}
	b.printf("all checks passed (every post returned success, counts match, git fsck --strict clean)\n")
	return 0
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func chooseSections(only string) ([]section, error) {
	if only == "" || only == "all" {
		return sections, nil
	}
	byName := map[string]section{}
	for _, s := range sections {
		byName[s.name] = s
	}
	var out []section
	for _, n := range strings.Split(only, ",") {
		n = strings.TrimSpace(n)
		s, ok := byName[n]
		if !ok {
			names := make([]string, 0, len(sections))
			for _, s := range sections {
				names = append(names, s.name)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("unknown section %q (have: %s)", n, strings.Join(names, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

// moduleRoot walks up from the working directory to bernstein's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			sc := bufio.NewScanner(f)
			ok := sc.Scan() && strings.TrimSpace(sc.Text()) == "module github.com/bernstein/bernstein"
			f.Close()
			if ok {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the benchmark inside the bernstein module (go.mod of github.com/bernstein/bernstein not found)")
		}
		dir = parent
	}
}

// cliBinary returns the CLI to benchmark, building bin/bernstein and
// bin/bernstein-serve (which 'bernstein serve' runs) if either is missing.
func cliBinary(root, flagged string) (string, error) {
	if flagged != "" {
		return filepath.Abs(flagged)
	}
	bin := filepath.Join(root, "bin", "bernstein")
	_, err := os.Stat(bin)
	if _, err2 := os.Stat(bin + "-serve"); err == nil && err2 == nil {
		return bin, nil
	}
	fmt.Fprintf(os.Stderr, "bench: %s or %s-serve missing: CGO_ENABLED=0 go build -o bin/ ./cmd/...\n", bin, bin)
	cmd := exec.Command("go", "build", "-o", "bin/", "./cmd/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as the Makefile builds them
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build bin/bernstein and bin/bernstein-serve: %w", err)
	}
	return bin, nil
}

// machineLoad describes how busy the machine is (other processes make the
// numbers noisy): the load averages and the I/O pressure.
func machineLoad() string {
	out := "load average unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			out = fmt.Sprintf("load average %s %s %s on %d CPUs", f[0], f[1], f[2], runtime.NumCPU())
		}
	}
	if b, err := os.ReadFile("/proc/pressure/io"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if strings.HasPrefix(line, "some ") {
			out += ", I/O pressure " + strings.TrimPrefix(line, "some ")
		}
	}
	return out
}

func gitVersion() string {
	out, err := exec.Command("git", "--version").Output()
	if err != nil {
		return "git: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}

// summaryRow is one headline of a section.
type summaryRow struct {
	section, measure, ours, base, ratio, goal, met string
}

// summary records a headline of the running section for the table printed
// after all sections: what was measured, our figure and the same-run
// baseline's (as printed, with units), their ratio, the goal ("" for none)
// and whether the ratio meets it. A ratio that could not be computed ("n/a")
// meets nothing.
func (b *bench) summary(measure, ours, base, ratio, goal string, met bool) {
	r := summaryRow{section: b.section, measure: measure, ours: ours, base: base, ratio: ratio, goal: goal, met: "-"}
	switch {
	case goal == "":
	case ratio == "n/a" || ratio == "":
		r.met = "not measured"
	case met:
		r.met = "met"
	default:
		r.met = "not met"
	}
	b.sum = append(b.sum, r)
}

// printSummary prints every section's headlines as one table.
func (b *bench) printSummary() {
	if len(b.sum) == 0 {
		return
	}
	head := summaryRow{"section", "measure", "ours", "baseline", "ratio", "goal", "met"}
	cols := func(r summaryRow) []string {
		return []string{r.section, r.measure, r.ours, r.base, r.ratio, r.goal, r.met}
	}
	width := make([]int, 7)
	for _, r := range append([]summaryRow{head}, b.sum...) {
		for i, c := range cols(r) {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r summaryRow) {
		var sb strings.Builder
		sb.WriteString(" ")
		for i, c := range cols(r) {
			sb.WriteString(" ")
			if i >= 2 && i <= 4 { // figures: right-aligned
				sb.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)) + c)
			} else {
				sb.WriteString(c + strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
			}
			sb.WriteString(" ")
		}
		b.printf("%s\n", strings.TrimRight(sb.String(), " "))
	}
	b.printf("\n== summary: the headline of every section (medians of %d rounds; each ratio of two figures from this run) ==\n", *flagRounds)
	line(head)
	met, missed := 0, 0
	for _, r := range b.sum {
		line(r)
		switch r.met {
		case "met":
			met++
		case "not met":
			missed++
		}
	}
	b.printf("  goals: %d met, %d not met (information only: a missed goal does not fail the run)\n", met, missed)
}
