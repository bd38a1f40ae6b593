package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The remote section (issue 12): `bernstein push` and `bernstein fetch` of a
// repository of N posts against plain `git push` and `git fetch` of the same
// refs (refs/bernstein/*), to and from a bare repository over file://, in
// the same run. Every measurement moves the whole history into an empty
// repository; each is a separate process, and each round measures every
// mode once on fresh targets, in rotated order.

var (
	flagRemotePosts     = flag.Int("remote-posts", 10000, "remote: artifact posts in the repository pushed and fetched")
	flagRemoteTaskPosts = flag.Int("remote-task-posts", 100, "remote: posts per task (tasks = posts / this)")
)

// remoteGoal is the goal: within 1.2x of plain git.
const remoteGoal = 1.2

func runRemote(b *bench) error {
	n := *flagRemotePosts
	if n < 1 || *flagRemoteTaskPosts < 1 || *flagBuildWorkers < 1 {
		return fmt.Errorf("-remote-posts, -remote-task-posts and -build-workers must be positive")
	}
	tasks := max(1, n / *flagRemoteTaskPosts)
	const body, keys = 512, 5
	b.printf("  workload: a repository of %d artifact posts (report, %d B) over %d tasks, %d keys per task, built through\n", n, body, tasks, keys)
	b.printf("  the library API by %d goroutines. Each round, on fresh targets and in rotated order (each a separate process):\n", *flagBuildWorkers)
	b.printf("    bernstein push   `bernstein push R` into an empty bare repository (R its file:// URL, a configured remote)\n")
	b.printf("    git push         `git push URL 'refs/bernstein/*:refs/bernstein/*'` into another empty bare repository\n")
	b.printf("    bernstein fetch  `bernstein fetch origin` into an empty repository whose origin holds the pushed refs\n")
	b.printf("    git fetch        `git fetch origin 'refs/bernstein/*:refs/bernstein/*'` into another empty repository\n")
	b.printf("  Both sides of a pair move the same refs and objects; targets have core.fsync=%s as bernstein init sets it.\n", "pack,derived-metadata,reference")
	b.printf("  %d rounds; medians of wall time and of CPU (the process and its children: git, pack-objects, and for\n", *flagRounds)
	b.printf("  file:// the remote's receive-pack or upload-pack); no wall-clock assert (the goal is printed, not enforced)\n\n")

	src, err := b.buildRepo(repoSpec{prefix: fmt.Sprintf("rm%d", n), tasks: tasks, posts: n, keys: keys, bodyBytes: body, workers: *flagBuildWorkers})
	if err != nil {
		return fmt.Errorf("build %d posts: %w", n, err)
	}
	want, err := bernsteinRefValues(src.dir)
	if err != nil {
		return err
	}
	po, err := countObjects(src.dir)
	if err != nil {
		return err
	}
	b.printf("  built %d posts in %s: %d refs under refs/bernstein/, %s\n", n, src.elapsed.Round(10*time.Millisecond), len(want), po)

	// The remote every fetch reads from: filled once with plain git.
	origin, err := b.bareRepo("origin")
	if err != nil {
		return err
	}
	if _, err := gitIn(src.dir, nil, "push", "-q", "file://"+origin, "refs/bernstein/*:refs/bernstein/*"); err != nil {
		return err
	}
	b.printf("  machine load after building: %s\n\n", machineLoad())

	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	modes := []string{"bernstein push", "git push", "bernstein fetch", "git fetch"}
	times, cpus := map[string]durations{}, map[string]durations{}
	for r := 0; r < *flagRounds; r++ {
		var line []string
		for i := range modes {
			mode := modes[(i+r)%len(modes)]
			var run procRun
			var target string
			switch mode {
			case "bernstein push", "git push":
				if target, err = b.bareRepo("push"); err != nil {
					return err
				}
				if mode == "bernstein push" {
					name := strings.TrimSuffix(filepath.Base(target), ".git")
					if _, err := gitIn(src.dir, nil, "remote", "add", name, "file://"+target); err != nil {
						return err
					}
					run, err = b.runProc(env, false, b.bin, "--repo", src.dir, "push", name)
					if err == nil {
						err = forgetRemote(src.dir, name)
					}
				} else {
					run, err = b.runProc(cleanEnv("GIT_DIR="+filepath.Join(src.dir, ".git")), false, "git", "push", "-q", "file://"+target, "refs/bernstein/*:refs/bernstein/*")
				}
			case "bernstein fetch", "git fetch":
				if target, err = b.fetchTarget(origin); err != nil {
					return err
				}
				if mode == "bernstein fetch" {
					run, err = b.runProc(env, false, b.bin, "--repo", target, "fetch", "origin")
				} else {
					run, err = b.runProc(cleanEnv("GIT_DIR="+filepath.Join(target, ".git")), false, "git", "fetch", "-q", "origin", "refs/bernstein/*:refs/bernstein/*")
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
			if run.exit != 0 {
				return fmt.Errorf("%s exited %d: %s", mode, run.exit, run.stderr)
			}
			// The same refs arrived, whoever moved them.
			got, err := bernsteinRefValues(target)
			if err != nil {
				return err
			}
			if err := sameValues(got, want); err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
			times[mode] = append(times[mode], run.wall)
			cpus[mode] = append(cpus[mode], run.cpu)
			line = append(line, fmt.Sprintf("%s %s", mode, ms(run.wall)))
			os.RemoveAll(target)
		}
		b.printf("  round %d: %s\n", r+1, strings.Join(line, ", "))
	}
	b.printf("\n  %-16s %11s %15s %11s\n", "mode", "median", "min..max ms", "CPU")
	for _, m := range modes {
		b.printf("  %-16s %11s %15s %11s\n", m, ms(times[m].median()), times[m].span(), ms(cpus[m].median()))
	}
	b.printf("\n")
	for _, pair := range [][2]string{{"bernstein push", "git push"}, {"bernstein fetch", "git fetch"}} {
		a, g := times[pair[0]].median(), times[pair[1]].median()
		verdict := "within the goal"
		if float64(a) > remoteGoal*float64(g) {
			verdict = "MISSES the goal"
		}
		b.printf("  %-16s / %-10s %s wall, %s CPU (goal: within %.1fx: %s)\n", pair[0], pair[1], dratio(a, g),
			dratio(cpus[pair[0]].median(), cpus[pair[1]].median()), remoteGoal, verdict)
	}
	return nil
}

// bareRepo makes an empty bare repository for one measurement.
func (b *bench) bareRepo(prefix string) (string, error) {
	dir, err := b.mkrepoDir(prefix + "-")
	if err != nil {
		return "", err
	}
	dir += ".git"
	if _, err := gitPlain("init", "-q", "--bare", dir); err != nil {
		return "", err
	}
	return dir, nil
}

// fetchTarget makes an empty repository whose origin is the bare remote,
// with the core.fsync bernstein init would set.
func (b *bench) fetchTarget(origin string) (string, error) {
	dir, err := b.mkrepoDir("fetch-")
	if err != nil {
		return "", err
	}
	if _, err := gitPlain("init", "-q", dir); err != nil {
		return "", err
	}
	for _, args := range [][]string{
		{"config", "core.fsync", "pack,derived-metadata,reference"},
		{"remote", "add", "origin", "file://" + origin},
	} {
		if _, err := gitIn(dir, nil, args...); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// forgetRemote removes a measured remote and its remote-tracking refs, so
// that later rounds start from the same source repository.
func forgetRemote(repo, name string) error {
	refs, err := gitIn(repo, nil, "for-each-ref", "--format=delete %(refname)", "refs/bernstein-remotes/"+name+"/")
	if err != nil {
		return err
	}
	if refs != "" {
		if _, err := gitIn(repo, []byte(refs), "update-ref", "--stdin"); err != nil {
			return err
		}
	}
	_, err = gitIn(repo, nil, "remote", "remove", name)
	return err
}

// bernsteinRefValues lists refs/bernstein/* of a repository (work tree or
// bare) with their values.
func bernsteinRefValues(dir string) (map[string]string, error) {
	gitDir := filepath.Join(dir, ".git")
	if _, err := os.Stat(gitDir); err != nil {
		gitDir = dir
	}
	out, err := gitPlain("--git-dir", gitDir, "for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, id, ok := strings.Cut(l, " "); ok {
			m[name] = id
		}
	}
	return m, nil
}

// gitPlain runs git with a clean environment (no GIT_DIR).
func gitPlain(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func sameValues(got, want map[string]string) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d refs arrived, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s is %q, want %s", k, got[k], v)
		}
	}
	return nil
}
