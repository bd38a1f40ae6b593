package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// cleanEnv is the environment for child processes: no BERNSTEIN_* or GIT_*
// variables of the caller leak into a measurement.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BERNSTEIN_") || strings.HasPrefix(kv, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// gitIn runs git with GIT_DIR set to repo's git directory.
func gitIn(repo string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = cleanEnv("GIT_DIR=" + filepath.Join(repo, ".git"))
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// revCount is the number of commits reachable from ref (0 when it does not
// exist).
func revCount(repo, ref string) (int, error) {
	if _, err := gitIn(repo, nil, "rev-parse", "--verify", "--quiet", ref); err != nil {
		return 0, nil
	}
	out, err := gitIn(repo, nil, "rev-list", "--count", ref)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// counts reads the commit counts of refs.
func counts(repo string, refs ...string) (map[string]int, error) {
	out := map[string]int{}
	for _, ref := range refs {
		n, err := revCount(repo, ref)
		if err != nil {
			return nil, err
		}
		out[ref] = n
	}
	return out, nil
}

// checkCounts compares the commit counts of refs with what a run expects.
func checkCounts(repo string, want map[string]int) error {
	for ref, n := range want {
		got, err := revCount(repo, ref)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("%s has %d commits, want %d", ref, got, n)
		}
	}
	return nil
}

// fsck runs git fsck --strict on repo; any complaint beyond notices fails.
func fsck(repo string) error {
	out, err := gitIn(repo, nil, "fsck", "--strict", "--no-dangling", "--no-progress")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.HasPrefix(line, "notice:") {
			return fmt.Errorf("git fsck --strict: %s", line)
		}
	}
	return nil
}
