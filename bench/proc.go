package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// procRun is one measured child process: its wall time from start to exit,
// its peak RSS (under GNU time, see rss.go; 0 when GNU time is missing), its
// CPU and its exit status.
type procRun struct {
	wall   time.Duration
	rss    int64 // KiB
	cpu    time.Duration
	exit   int
	stdout []byte
	stderr string
}

// runProc runs name with args and env. With discard, stdout goes to
// /dev/null (the process writes it all the same); otherwise it is kept. A
// non-zero exit is not an error: callers check procRun.exit.
func (b *bench) runProc(env []string, discard bool, name string, args ...string) (procRun, error) {
	cmd, rss := b.command(true, name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	if !discard {
		cmd.Stdout = &stdout
	}
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	run := procRun{wall: wall, stdout: stdout.Bytes(), stderr: strings.TrimSpace(stderr.String())}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return run, fmt.Errorf("%s: %w", name, err)
	}
	if cmd.ProcessState != nil {
		run.exit = cmd.ProcessState.ExitCode()
		run.cpu = processCPU(cmd.ProcessState)
		run.rss = rss()
	}
	return run, nil
}

// durations summarises timed rounds.
type durations []time.Duration

func (d durations) median() time.Duration {
	v := make([]float64, len(d))
	for i, x := range d {
		v[i] = float64(x)
	}
	return time.Duration(median(v))
}

func (d durations) span() string {
	if len(d) == 0 {
		return "-"
	}
	lo, hi := d[0], d[0]
	for _, x := range d {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%s..%s", msShort(lo), msShort(hi))
}

func msShort(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	}
	return fmt.Sprintf("%.2f", f)
}

func medianInt(v []int64) int64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return int64(median(f))
}

func dratio(a, b time.Duration) string { return ratio(float64(a), float64(b)) }

// Profiling one operation in-process, for the read-side sections.

var flagProfileDir = flag.String("profile-dir", "", "verify, fold: write a CPU profile of in-process runs of the measured operation (audit verify of the largest repository; the cold fold, 5 times) to this folder and print its top functions")

// profileOp runs fn reps times under the CPU profiler, writes the profile to
// <profile-dir>/<name>.pprof and prints its top functions (go tool pprof).
// It does nothing without -profile-dir.
func (b *bench) profileOp(name string, reps int, fn func() error) error {
	if *flagProfileDir == "" {
		return nil
	}
	if *flagCPUProfile != "" {
		b.printf("  (profile %s skipped: -cpuprofile is already profiling the whole run)\n", name)
		return nil
	}
	if err := os.MkdirAll(*flagProfileDir, 0o755); err != nil {
		return err
	}
	path, err := filepath.Abs(filepath.Join(*flagProfileDir, name+".pprof"))
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	t0 := time.Now()
	var runErr error
	for i := 0; i < reps && runErr == nil; i++ {
		runErr = fn()
	}
	took := time.Since(t0) / time.Duration(reps)
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	b.printf("\n  CPU profile of %s in-process (%d runs, %s wall each, GOMAXPROCS %d): %s\n", name, reps, ms(took), runtime.GOMAXPROCS(0), path)
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, mode := range []struct{ label, flag string }{{"flat", ""}, {"cumulative", "-cum"}} {
		args := []string{"tool", "pprof", "-top", "-nodecount=18"}
		if mode.flag != "" {
			args = append(args, mode.flag)
		}
		out, err := exec.Command(goBin, append(args, path)...).Output()
		if err != nil {
			b.printf("    (go tool pprof: %v)\n", err)
			return nil
		}
		b.printf("    top functions by %s time (go tool pprof %s):\n", mode.label, strings.Join(args[2:], " "))
		printTop(b.out, string(out))
	}
	return nil
}

// printTop copies the table of `go tool pprof -top`, indented, without its
// preamble except the totals line.
func printTop(w io.Writer, out string) {
	table := false
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "Showing nodes") || strings.HasPrefix(line, "Duration:"):
			fmt.Fprintf(w, "      %s\n", strings.TrimSpace(line))
		case strings.HasPrefix(strings.TrimSpace(line), "flat "):
			table = true
			fmt.Fprintf(w, "      %s\n", line)
		case table:
			fmt.Fprintf(w, "      %s\n", line)
		}
	}
}
