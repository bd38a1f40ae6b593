package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bernstein/bernstein"
)

// The scale section's remote part: what a fetch and a push of one post and
// a clone cost at each size, in time and in bytes on the wire, against git
// moving the same refs in the same run:
//
//	bernstein push   one post's refs, `bernstein push` to a bare remote
//	git push         the same, `git push URL 'refs/bernstein/*:refs/bernstein/*'` to a copy of that remote
//	bernstein fetch  the post, `bernstein fetch` into a clone of the remote
//	git fetch        the same, `git fetch URL 'refs/bernstein/*:refs/bernstein/*'` into a plain copy
//	bernstein clone  `bernstein clone URL` of the remote
//	git clone        `git clone` of the remote taking refs/bernstein/* too
//
// Bytes are counted on the wire: every upload-pack and receive-pack runs
// behind this program's own proxy (`bench wire`), configured as the
// remote's uploadpack and receivepack, which counts what passes each way.

var flagScaleParts = flag.String("scale-parts", "reads,remote", "scale: parts to measure: reads (the reads above), remote (fetch, push of one post and clone)")

// wireMain is `bench wire SERVICE PATH`: git runs it in place of `git
// upload-pack PATH` (or receive-pack), and it appends to the file
// $BENCH_WIRE_COUNT the bytes it passed each way: "<to server> <to client>".
func wireMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bench wire upload-pack|receive-pack PATH")
		return 2
	}
	cmd := exec.Command("git", args[0], args[1])
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 1
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var up, down int64
	var mu sync.Mutex
	go func() {
		n, _ := io.Copy(in, os.Stdin)
		mu.Lock()
		up = n
		mu.Unlock()
		in.Close()
	}()
	down, _ = io.Copy(os.Stdout, out)
	err = cmd.Wait()
	mu.Lock()
	line := fmt.Sprintf("%d %d\n", up, down)
	mu.Unlock()
	if f, ferr := os.OpenFile(os.Getenv("BENCH_WIRE_COUNT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
		f.WriteString(line)
		f.Close()
	}
	if err != nil {
		return 1
	}
	return 0
}

// wire counts the bytes of the measured runs through one file.
type wire struct {
	file string
	cmd  string // what git runs for SERVICE: "BENCH_WIRE_COUNT=file bench wire SERVICE"
}

func (b *bench) newWire() (*wire, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := b.mkrepoDir("wire-")
	if err != nil {
		return nil, err
	}
	w := &wire{file: filepath.Join(dir, "count")}
	w.cmd = "BENCH_WIRE_COUNT=" + w.file + " " + self + " wire "
	return w, nil
}

// take returns the bytes counted since the last take, and starts again.
func (w *wire) take() int64 {
	data, _ := os.ReadFile(w.file)
	os.Remove(w.file)
	var n int64
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		for _, f := range strings.Fields(l) {
			v, _ := strconv.ParseInt(f, 10, 64)
			n += v
		}
	}
	return n
}

// remoteFigures holds, by mode and size, the bytes each run moved.
type remoteFigures struct {
	bytes map[string]map[int][]int64
	modes []string
}

func (f *remoteFigures) add(mode string, n int, v int64) {
	if f.bytes[mode] == nil {
		f.bytes[mode] = map[int][]int64{}
		f.modes = append(f.modes, mode)
	}
	f.bytes[mode][n] = append(f.bytes[mode][n], v)
}

func medianBytes(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]int64(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// scaleRemote measures clone, and push and fetch of one post, on the
// repository of n tasks.
func (b *bench) scaleRemote(tab *scaleTable, figs *remoteFigures, r *scaleRepo, home string, n int) error {
	w, err := b.newWire()
	if err != nil {
		return err
	}
	bare, err := b.bareRepo(fmt.Sprintf("scale-origin-%d", n))
	if err != nil {
		return err
	}
	env := cleanEnv("BERNSTEIN_HOME=" + home)
	// The remote, filled by this host's first bernstein push (untimed).
	t0 := time.Now()
	if _, err := gitIn(r.dir, nil, "remote", "add", "scale", "file://"+bare); err != nil {
		return err
	}
	for _, args := range [][]string{{"remote", "setup", "scale"}, {"push", "scale"}} {
		if _, err := b.okProc(env, b.bin, append([]string{"--repo", r.dir}, args...)...); err != nil {
			return err
		}
	}
	if _, err := gitIn(r.dir, nil, "config", "remote.scale.receivepack", w.cmd+"receive-pack"); err != nil {
		return err
	}
	b.printf("  %d tasks: the first bernstein push took %s\n", n, time.Since(t0).Round(10*time.Millisecond))
	// git push's remote: a copy of it.
	bare2 := strings.TrimSuffix(bare, ".git") + "-git.git"
	if _, err := gitPlain("clone", "-q", "--mirror", bare, bare2); err != nil {
		return err
	}
	homeB, err := b.mkrepoDir("home-b-")
	if err != nil {
		return err
	}
	h := &remoteHosts{a: r.dir, bare: bare, bare2: bare2, env: env, envB: cleanEnv("BERNSTEIN_HOME=" + homeB),
		cloneB: filepath.Join(filepath.Dir(bare), fmt.Sprintf("clone-b-%d", n)), cloneG: filepath.Join(filepath.Dir(bare), fmt.Sprintf("clone-g-%d", n))}
	if err := b.scaleClones(tab, h, n); err != nil {
		return err
	}
	if _, err := gitIn(h.cloneB, nil, "config", "remote.origin.uploadpack", w.cmd+"upload-pack"); err != nil {
		return err
	}
	return b.scaleRemoteRounds(tab, figs, w, h, home, n)
}

// remoteHosts are the repositories of the remote part: this host (a), the
// remote and its copy for git push, bernstein's clone and git's.
type remoteHosts struct {
	a, bare, bare2, cloneB, cloneG string
	env, envB                      []string
}

// okProc runs a process that must succeed.
func (b *bench) okProc(env []string, name string, args ...string) (procRun, error) {
	run, err := b.runProc(env, false, name, args...)
	if err != nil {
		return run, err
	}
	if run.exit != 0 {
		return run, fmt.Errorf("%s %s exited %d: %s", name, strings.Join(args, " "), run.exit, run.stderr)
	}
	return run, nil
}

// scaleClones times bernstein clone and git clone of the remote, one each,
// in the order the size gives, and checks they hold the same refs.
func (b *bench) scaleClones(tab *scaleTable, h *remoteHosts, n int) error {
	url := "file://" + h.bare
	const gitName = "git clone (with refs/bernstein/*)"
	clones := []func() error{
		func() error {
			run, err := b.okProc(h.envB, b.bin, "clone", url, h.cloneB)
			if err == nil {
				tab.add("bernstein clone", "list", gitName, n, run.wall, run.cpu)
			}
			return err
		},
		func() error {
			run, err := b.okProc(cleanEnv(), "git", "clone", "-q", "--config", "remote.origin.fetch=refs/bernstein/*:refs/bernstein/*", url, h.cloneG)
			if err == nil {
				tab.add(gitName, "git", "", n, run.wall, run.cpu)
			}
			return err
		},
	}
	if n%2 == 1 {
		clones[0], clones[1] = clones[1], clones[0]
	}
	for _, c := range clones {
		if err := c(); err != nil {
			return err
		}
	}
	want, err := bernsteinRefValues(h.bare)
	if err != nil {
		return err
	}
	for _, dir := range []string{h.cloneB, h.cloneG} {
		got, err := bernsteinRefValues(dir)
		if err != nil {
			return err
		}
		if err := sameValues(got, want); err != nil {
			return fmt.Errorf("clone %s: %w", dir, err)
		}
	}
	loose, packed, err := refStore(h.cloneB)
	if err != nil {
		return err
	}
	b.printf("  %d tasks: bernstein clone holds %d loose refs and %d packed\n", n, loose, packed)
	return nil
}

// scaleRemoteRounds posts one artifact version on this host each round,
// then times its push (bernstein, git) and its fetch (bernstein, git),
// counting the bytes on the wire; once, a full fetch with nothing new.
func (b *bench) scaleRemoteRounds(tab *scaleTable, figs *remoteFigures, w *wire, h *remoteHosts, home string, n int) error {
	s, err := bernstein.Open(bernstein.Options{Repo: h.a, Home: home})
	if err != nil {
		return err
	}
	defer s.Close()
	probe := fmt.Sprintf("rprobe-%d", time.Now().UnixNano())
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: probe, Title: "remote probe"}); err != nil {
		return err
	}
	tok, err := s.Claim(probe, benchAgent)
	if err != nil {
		return err
	}
	gitDir := func(dir string) string { return filepath.Join(dir, ".git") }
	timed := func(name, kind, git string, env []string, bin string, args ...string) error {
		w.take()
		run, err := b.okProc(env, bin, args...)
		if err != nil {
			return err
		}
		tab.add(name, kind, git, n, run.wall, run.cpu)
		figs.add(name, n, w.take())
		return nil
	}
	const gitPush, gitFetch = "git push (the same refs)", "git fetch (the same refs)"
	for i := 0; i < *flagScaleRuns; i++ {
		if _, err := s.Post(bernstein.PostRequest{Task: probe, Key: "remote", Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("remote", i, 256)}); err != nil {
			return err
		}
		steps := []func() error{
			func() error {
				return timed("bernstein push, one post", "const", gitPush, h.env, b.bin, "--repo", h.a, "push", "scale")
			},
			func() error {
				return timed(gitPush, "git", "", cleanEnv(), "git", "--git-dir", gitDir(h.a), "push", "-q", "--receive-pack="+w.cmd+"receive-pack",
					"file://"+h.bare2, "refs/bernstein/*:refs/bernstein/*")
			},
			func() error {
				return timed("bernstein fetch, one post", "const", gitFetch, h.envB, b.bin, "--repo", h.cloneB, "fetch", "origin")
			},
			func() error {
				return timed(gitFetch, "git", "", cleanEnv(), "git", "--git-dir", gitDir(h.cloneG), "fetch", "-q", "--upload-pack="+w.cmd+"upload-pack",
					"file://"+h.bare, "refs/bernstein/*:refs/bernstein/*")
			},
		}
		if i%2 == 1 {
			steps[0], steps[1], steps[2], steps[3] = steps[1], steps[0], steps[3], steps[2]
		}
		for _, st := range steps {
			if err := st(); err != nil {
				return err
			}
		}
		// Every copy holds the post.
		want, err := bernsteinRefValues(h.a)
		if err != nil {
			return err
		}
		for _, dir := range []string{h.bare, h.bare2, h.cloneB, h.cloneG} {
			got, err := bernsteinRefValues(dir)
			if err != nil {
				return err
			}
			j := "refs/bernstein/journal/" + probe
			if got[j] != want[j] {
				return fmt.Errorf("round %d: %s holds %s at %q, this host %s", i+1, dir, j, got[j], want[j])
			}
		}
	}
	return timed("bernstein fetch --full, nothing new", "const", gitFetch, h.envB, b.bin, "--repo", h.cloneB, "fetch", "--full", "origin")
}

// scaleRemoteReport prints the remote part's bytes and its ratios to git
// in the same run.
func (b *bench) scaleRemoteReport(tab *scaleTable, figs *remoteFigures, ns []int) {
	if len(figs.modes) == 0 {
		return
	}
	b.printf("\n  remote part: bytes on the wire (median), and against git in the same run (CPU, wall, bytes)\n")
	for _, mode := range figs.modes {
		m := tab.by[mode]
		b.printf("  %-40s", mode)
		for _, n := range ns {
			v := medianBytes(figs.bytes[mode][n])
			line := fmt.Sprintf("%d: %s", n, kib(v))
			if g := tab.by[m.git]; m.git != "" && g != nil && len(g.wall[n]) > 0 && len(m.wall[n]) > 0 {
				gb := medianBytes(figs.bytes[m.git][n])
				line += fmt.Sprintf(" (%.2fx CPU, %.2fx wall, %s bytes of git's)", float64(m.value(n))/float64(g.value(n)),
					float64(m.wall[n].median())/float64(g.wall[n].median()), ratioBytes(v, gb))
			}
			b.printf("  %s", line)
		}
		b.printf("\n")
	}
	for _, n := range ns {
		c, g := tab.by["bernstein clone"], tab.by["git clone (with refs/bernstein/*)"]
		if c != nil && g != nil && len(c.wall[n]) > 0 && len(g.wall[n]) > 0 {
			b.printf("  bernstein clone / git clone at %d tasks: %.2fx CPU, %.2fx wall\n", n, float64(c.value(n))/float64(g.value(n)),
				float64(c.wall[n].median())/float64(g.wall[n].median()))
		}
	}
}

func kib(v int64) string { return fmt.Sprintf("%.1f KiB", float64(v)/1024) }

func ratioBytes(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}
