package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// syscallCounts are the durable-write system calls of one post, counted with
// strace over the whole process tree (the bench process, its git children).
type syscallCounts struct {
	fsync   float64 // fsync and fdatasync, files and directories alike
	creates float64 // files created exclusively (temporary and lock files) and directories made
	renames float64 // rename and link (git links loose objects into place)
	execs   float64 // processes started
}

var straceCall = regexp.MustCompile(`^\d+\s+(?:<\.\.\. )?(\w+)\(`)

// countSyscalls reruns this program under strace for one mode at two sizes
// and returns the difference per post, so setup (init, task, claim,
// verification) cancels out.
func (b *bench) countSyscalls(mode string, small, large int) (syscallCounts, error) {
	exe, err := os.Executable()
	if err != nil {
		return syscallCounts{}, err
	}
	count := func(n int) (syscallCounts, error) {
		out := filepath.Join(b.tmp, fmt.Sprintf("strace-%s-%d.txt", mode, n))
		defer os.Remove(out)
		args := []string{"-f", "-qq", "-e", "signal=none", "-o", out,
			"-e", "trace=fsync,fdatasync,open,openat,creat,mkdir,mkdirat,rename,renameat,renameat2,link,linkat,execve",
			exe, "-only", "post", "-modes", mode, "-rounds", "1", "-syscalls=false", "-bin", b.bin,
			"-posts", fmt.Sprint(n), "-cli-posts", fmt.Sprint(n), "-batch-posts", fmt.Sprint(n), "-baseline-posts", fmt.Sprint(n), "-step-posts", "0",
			"-keys", fmt.Sprint(*flagKeys), "-body-bytes", fmt.Sprint(*flagBodyBytes), "-workers", fmt.Sprint(*flagWorkers)}
		cmd := exec.Command("strace", args...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return syscallCounts{}, fmt.Errorf("strace %s: %v: %s", mode, err, lastLines(string(msg), 3))
		}
		f, err := os.Open(out)
		if err != nil {
			return syscallCounts{}, err
		}
		defer f.Close()
		var c syscallCounts
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, " resumed>") {
				continue // the call was counted where it started
			}
			m := straceCall.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			switch m[1] {
			case "fsync", "fdatasync":
				c.fsync++
			case "open", "openat":
				if strings.Contains(line, "O_CREAT") && strings.Contains(line, "O_EXCL") {
					c.creates++
				}
			case "creat", "mkdir", "mkdirat":
				c.creates++
			case "rename", "renameat", "renameat2", "link", "linkat":
				c.renames++
			case "execve":
				c.execs++
			}
		}
		return c, sc.Err()
	}
	a, err := count(small)
	if err != nil {
		return syscallCounts{}, err
	}
	z, err := count(large)
	if err != nil {
		return syscallCounts{}, err
	}
	d := float64(large - small)
	return syscallCounts{
		fsync:   (z.fsync - a.fsync) / d,
		creates: (z.creates - a.creates) / d,
		renames: (z.renames - a.renames) / d,
		execs:   (z.execs - a.execs) / d,
	}, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
