package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// Peak RSS of a child process. Go starts children with vfork (CLONE_VM), so
// at exec the kernel folds the parent's peak RSS into the child's ru_maxrss:
// wait4 would report the bench's own peak for every small git process. A
// probe run therefore starts each child under GNU time, which forks the real
// command from its own small image and reports that process's ru_maxrss.

// findGNUTime returns the path of GNU time if it is installed and works.
func findGNUTime() string {
	for _, p := range []string{"/usr/bin/time", "/bin/time"} {
		out, err := exec.Command(p, "-f", "%M", "true").CombinedOutput()
		if err != nil {
			continue
		}
		if _, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
			return p
		}
	}
	return ""
}

var rssSeq atomic.Int64

// command builds the command for name and args; with probe it runs under GNU
// time, and rss returns the peak RSS in KiB (0 when not probing).
func (b *bench) command(probe bool, name string, args ...string) (cmd *exec.Cmd, rss func() int64) {
	if !probe || b.timeBin == "" {
		return exec.Command(name, args...), func() int64 { return 0 }
	}
	out := filepath.Join(b.tmp, "rss-"+strconv.FormatInt(rssSeq.Add(1), 10))
	cmd = exec.Command(b.timeBin, append([]string{"-f", "%M", "-o", out, name}, args...)...)
	return cmd, func() int64 {
		defer os.Remove(out)
		data, err := os.ReadFile(out)
		if err != nil {
			return 0
		}
		// GNU time may prefix "Command exited with non-zero status N".
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		kib, _ := strconv.ParseInt(strings.TrimSpace(lines[len(lines)-1]), 10, 64)
		return kib
	}
}
