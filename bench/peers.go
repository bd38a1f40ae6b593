package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/verify"
)

// The peers section: two tools that also keep signed or append-only records
// in a git repository, built from the Go module proxy and timed in the same
// run as bernstein, on fresh repositories.
//
//   - gittuf (github.com/gittuf/gittuf): `gittuf rsl record` appends a
//     signed entry (an SSH-signed commit) to its reference state log;
//     `gittuf verify-ref` verifies a branch's entries against its policy.
//   - git-bug (github.com/git-bug/git-bug): `git-bug bug comment new`
//     appends a comment (one commit) to a bug. It has no verify command.
//
// Each is set up as its documentation says (gittuf's docs/get-started.md,
// git-bug's doc/md), with git's defaults. A peer that cannot be built here is
// skipped with the reason; that never fails the run.

var (
	flagPeerPosts  = flag.Int("peer-posts", 100, "peers: appends per run for gittuf, git-bug and the bernstein CLI (the API runs post 3x as many)")
	flagPeerVerify = flag.String("peer-verify-entries", "100,1000", "peers: entries at which gittuf verify-ref and bernstein audit verify are timed (one growing repository each; marginal cost between the first and the last)")
	flagPeerCache  = flag.String("peer-cache", "", "peers: folder for the peers' binaries, built once (default $XDG_CACHE_HOME/bernstein-bench/peers)")
	flagPeerGittuf = flag.String("peer-gittuf", "v0.15.0", "peers: gittuf version (module github.com/gittuf/gittuf)")
	flagPeerGitBug = flag.String("peer-git-bug", "v0.10.1", "peers: git-bug version (module github.com/git-bug/git-bug)")
)

// The goals for the peers.
const (
	peerAppendGoal = 50.0   // our appends per second, at least this many times theirs
	peerVerifyGoal = 1000.0 // our entries verified per second, at least this many times gittuf's
)

// peerTool is one peer: what to build and what was built.
type peerTool struct {
	name    string   // the command
	modules []string // module paths to try, in order
	version string
	bin     string // the built binary; "" when skipped
	from    string // module@version it was built from, and by which Go
	why     string // why it was skipped
}

// The measurement modes of the section.
const (
	peerGittuf  = "gittuf"
	peerGitBug  = "git-bug"
	peerCLI     = "cli"
	peerAPISeq  = "api-seq"
	peerAPIConc = "api-conc"
)

func runPeers(b *bench) error {
	n := *flagPeerPosts
	sizes, err := parseCounts(*flagPeerVerify)
	if err != nil {
		return fmt.Errorf("-peer-verify-entries: %w", err)
	}
	if n < 1 || *flagKeys < 1 || *flagWorkers < 1 {
		return fmt.Errorf("-peer-posts, -keys and -workers must be positive")
	}
	cache := *flagPeerCache
	if cache == "" {
		if c, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(c, "bernstein-bench", "peers")
		} else {
			cache = filepath.Join(b.tmp, "peers-cache")
		}
	}
	gittuf := &peerTool{name: "gittuf", modules: []string{"github.com/gittuf/gittuf"}, version: *flagPeerGittuf}
	// The proxy serves git-bug's releases since v0.9 under the project's
	// former path too (github.com/MichaelMure/git-bug, whose go.mod names
	// github.com/git-bug/git-bug); the new path is tried first.
	gitbug := &peerTool{name: "git-bug", modules: []string{"github.com/git-bug/git-bug", "github.com/MichaelMure/git-bug"}, version: *flagPeerGitBug}
	for _, p := range []*peerTool{gittuf, gitbug} {
		b.buildPeer(cache, p)
		if p.bin != "" {
			b.printf("  %-8s %s: %s\n", p.name, p.version, p.from)
		} else {
			b.printf("  %-8s %s: SKIPPED: %s\n", p.name, p.version, p.why)
		}
	}
	var keys *gittufKeys
	if gittuf.bin != "" {
		if keys, err = b.makeGittufKeys(); err != nil {
			gittuf.bin, gittuf.why = "", err.Error()
			b.printf("  gittuf SKIPPED: %v\n", err)
		}
	}

	size, nKeys, apiN := *flagBodyBytes, *flagKeys, 3*n
	b.printf("\n  1. appends, each run on a fresh repository: %d gittuf RSL entries (`gittuf rsl record main --local-only`, signed\n", n)
	b.printf("  with an ECDSA SSH key made by ssh-keygen; before each, untimed, a report file of %d B committed with `git commit -S`),\n", size)
	b.printf("  %d git-bug comments of %d B on one bug (`git-bug bug comment new`), %d bernstein CLI posts (one process each) and\n", n, size, n)
	b.printf("  %d API posts (one goroutine; then %d goroutines on one Store) of %d B reports over %d keys; %d rounds, order rotated\n\n", apiN, *flagWorkers, size, nKeys, *flagRounds)

	modes := []string{peerGittuf, peerGitBug, peerCLI, peerAPISeq, peerAPIConc}
	results := map[string]*modeResults{}
	for _, m := range modes {
		results[m] = &modeResults{}
	}
	var commitLat durations                                       // gittuf: the untimed signed commit before each record
	early, late := map[string]durations{}, map[string]durations{} // the first and the last tenth of each run's appends
	for r := 0; r < *flagRounds; r++ {
		var line []string
		for i := range modes {
			m := modes[(i+r)%len(modes)]
			var run postRun
			var err error
			switch m {
			case peerGittuf:
				if gittuf.bin == "" {
					continue
				}
				var commits durations
				run, commits, err = b.gittufAppend(gittuf.bin, keys, n, nKeys, size)
				commitLat = append(commitLat, commits...)
			case peerGitBug:
				if gitbug.bin == "" {
					continue
				}
				run, err = b.gitBugAppend(gitbug.bin, n, size)
			case peerCLI:
				run, err = b.cliPosts(n, nKeys, size, false)
			case peerAPISeq:
				run, err = b.apiSequential(apiN, nKeys, size)
			case peerAPIConc:
				run, err = b.apiConcurrent(apiN, *flagWorkers, nKeys, size)
			}
			if err != nil {
				b.fail("peers round %d, %s: %v", r+1, m, err)
				line = append(line, m+" FAILED")
				continue
			}
			res := results[m]
			res.rates.add(run.rate())
			res.cpu = append(res.cpu, float64(run.cpuPerPost()))
			res.lat = append(res.lat, run.lat...)
			res.posts = run.posts
			k := max(1, len(run.lat)/10)
			early[m], late[m] = append(early[m], run.lat[:k]...), append(late[m], run.lat[len(run.lat)-k:]...)
			line = append(line, fmt.Sprintf("%s %.1f/s", m, run.rate()))
		}
		b.printf("  round %d: %s\n", r+1, strings.Join(line, ", "))
	}

	short := map[string]string{peerCLI: "CLI post", peerAPISeq: "API post, 1 goroutine", peerAPIConc: fmt.Sprintf("API post, %d goroutines", *flagWorkers)}
	labels := map[string]string{
		peerGittuf:  "gittuf rsl record (signed entry)",
		peerGitBug:  "git-bug bug comment new",
		peerCLI:     "bernstein artifact post (CLI process)",
		peerAPISeq:  "bernstein Store.Post, 1 goroutine",
		peerAPIConc: fmt.Sprintf("bernstein Store.Post, %d goroutines", *flagWorkers),
	}
	b.printf("\n  %-40s %7s %9s %15s %10s %10s %9s %9s %11s\n", "append", "entries", "per s", "min..max", "per entry", "CPU/entry", "p50", "p99", "last/first")
	for _, m := range modes {
		res := results[m]
		if len(res.rates.vals) == 0 {
			b.printf("  %-40s %7s\n", labels[m], "skipped")
			continue
		}
		med := res.rates.median()
		b.printf("  %-40s %7d %9.1f %15s %10s %10s %9s %9s %11s\n", labels[m], res.posts, med,
			fmt.Sprintf("%.1f..%.1f", res.rates.min(), res.rates.max()), ms(time.Duration(float64(time.Second)/med)),
			ms(time.Duration(median(res.cpu))), ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), dratio(late[m].median(), early[m].median()))
	}
	b.printf("  (CPU/entry: user+sys of the process and its children, for the API the bench process over the run; p50/p99:\n")
	b.printf("  one append, pooled over rounds; last/first: median time of the last tenth of a run's appends / of the first)\n")
	if len(commitLat) > 0 {
		b.printf("  (gittuf: the `git add` and `git commit -S` before each record are not in its figures: median %s)\n", ms(commitLat.median()))
	}

	rate := func(m string) float64 {
		if len(results[m].rates.vals) == 0 {
			return math.NaN()
		}
		return results[m].rates.median()
	}
	b.printf("\n  ratios: our appends per second / theirs (of medians; goal: at least %.0fx)\n", peerAppendGoal)
	b.printf("    %-40s %10s %10s\n", "", "vs gittuf", "vs git-bug")
	for _, m := range []string{peerCLI, peerAPISeq, peerAPIConc} {
		b.printf("    %-40s %10s %10s\n", labels[m], ratio(rate(m), rate(peerGittuf)), ratio(rate(m), rate(peerGitBug)))
	}
	for _, p := range []string{peerGittuf, peerGitBug} {
		theirs := fmt.Sprintf("%.1f/s", rate(p))
		if math.IsNaN(rate(p)) {
			theirs = "skipped"
		}
		for _, m := range []string{peerCLI, peerAPISeq, peerAPIConc} {
			b.summary(fmt.Sprintf("append: %s / %s", short[m], labels[p]),
				fmt.Sprintf("%.1f/s", rate(m)), theirs, ratio(rate(m), rate(p)), fmt.Sprintf(">= %.0fx", peerAppendGoal), rate(m)/rate(p) >= peerAppendGoal)
		}
	}

	// 2. Verify.
	if gittuf.bin == "" {
		b.printf("\n  2. verify: skipped (gittuf not built)\n")
		b.summary("verify per entry: gittuf verify-ref / audit verify", "-", "skipped", "n/a", fmt.Sprintf(">= %.0fx", peerVerifyGoal), false)
		return nil
	}
	return b.peersVerify(gittuf.bin, keys, sizes, nKeys, size)
}

// peersVerify times a full `gittuf verify-ref main` against a full
// `bernstein audit verify` at the same number of entries (RSL entries,
// posts), each a fresh process, on one repository per tool that grows from
// size to size.
func (b *bench) peersVerify(gittufBin string, keys *gittufKeys, sizes []int, nKeys, size int) error {
	b.printf("\n  2. verify: a full `gittuf verify-ref main` (every RSL entry of main against the policy, no persistent cache) and a\n")
	b.printf("  full `bernstein audit verify --output-json` (every row, signature, HMAC and blob of the repository), each a fresh\n")
	b.printf("  process, at %s entries (RSL entries; posts through the API, one task, %d keys); one repository each, grown from\n", joinInts(sizes), nKeys)
	b.printf("  size to size; %d rounds alternated; per entry = wall / entries; marginal = the difference between sizes / entries added\n\n", *flagRounds)

	gdir, err := b.mkrepoDir("gittuf-verify-")
	if err != nil {
		return err
	}
	genv := peerEnv(b)
	if err := gittufSetup(gdir, genv, gittufBin, keys); err != nil {
		return fmt.Errorf("gittuf setup: %w", err)
	}
	bdir, err := b.mkrepoDir("bernstein-verify-")
	if err != nil {
		return err
	}
	s, tok, err := b.setupStore(bdir)
	if err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	benv := cleanEnv("BERNSTEIN_HOME=" + b.home)

	type point struct {
		n          int
		theirs     durations
		ours       durations
		theirsCPU  durations
		oursCPU    durations
		signatures int
	}
	var pts []*point
	have := 0 // entries in both repositories
	for _, target := range sizes {
		if target <= have {
			continue
		}
		// Grow gittuf's RSL (a signed commit, then a signed entry, each).
		for i := have; i < target; i++ {
			if _, err := gittufCommitAndRecord(gdir, genv, gittufBin, i, nKeys, size, nil); err != nil {
				return fmt.Errorf("gittuf entry %d: %w", i, err)
			}
		}
		if err := peerRSLCount(gdir, target); err != nil {
			return err
		}
		// Grow bernstein's repository by the same number of posts.
		if err := b.postMore(bdir, tok, have, target, nKeys, size); err != nil {
			return err
		}
		have = target
		p := &point{n: target}
		pts = append(pts, p)
		for r := 0; r < *flagRounds; r++ {
			steps := []string{"gittuf", "bernstein"}
			if r%2 == 1 {
				steps = []string{"bernstein", "gittuf"}
			}
			for _, st := range steps {
				if st == "gittuf" {
					wall, cpu, _, err := peerCmd(gdir, genv, gittufBin, "verify-ref", "main")
					if err != nil {
						return fmt.Errorf("at %d entries: %w", target, err)
					}
					p.theirs, p.theirsCPU = append(p.theirs, wall), append(p.theirsCPU, cpu)
					continue
				}
				run, err := b.runProc(benv, false, b.bin, "--repo", bdir, "audit", "verify", "--output-json")
				if err != nil {
					return err
				}
				sigs, err := checkPeerVerify(run, target)
				if err != nil {
					return fmt.Errorf("bernstein audit verify at %d posts: %w", target, err)
				}
				p.ours, p.oursCPU, p.signatures = append(p.ours, run.wall), append(p.oursCPU, run.cpu), sigs
			}
		}
		b.printf("  %d entries: gittuf verify-ref %s, audit verify %s\n", target, ms(p.theirs.median()), ms(p.ours.median()))
	}

	perEntry := func(d time.Duration, n int) time.Duration { return d / time.Duration(n) }
	b.printf("\n  %-8s %22s %12s %12s %22s %12s %12s %9s %9s\n", "entries", "gittuf verify-ref", "per entry", "CPU", "bernstein audit verify", "per entry", "CPU", "ratio", "CPU ratio")
	for _, p := range pts {
		b.printf("  %-8d %22s %12s %12s %22s %12s %12s %9s %9s\n", p.n, ms(p.theirs.median()), ms(perEntry(p.theirs.median(), p.n)), ms(p.theirsCPU.median()),
			ms(p.ours.median()), ms(perEntry(p.ours.median(), p.n)), ms(p.oursCPU.median()), dratio(p.theirs.median(), p.ours.median()),
			dratio(p.theirsCPU.median(), p.oursCPU.median()))
	}
	first, last := pts[0], pts[len(pts)-1]
	theirsPer, oursPer := perEntry(last.theirs.median(), last.n), perEntry(last.ours.median(), last.n)
	var theirsMarg, oursMarg time.Duration
	if len(pts) > 1 {
		added := time.Duration(last.n - first.n)
		theirsMarg, oursMarg = (last.theirs.median()-first.theirs.median())/added, (last.ours.median()-first.ours.median())/added
		if theirsMarg <= 0 || oursMarg <= 0 { // sizes too close for the noise: no marginal cost to compare
			theirsMarg, oursMarg = 0, 0
		}
		b.printf("  %-8s %22s %12s %12s %22s %12s %12s %9s\n", "marginal", fmt.Sprintf("%d -> %d", first.n, last.n), ms(theirsMarg), "",
			"", ms(oursMarg), "", dratio(theirsMarg, oursMarg))
	}
	b.printf("  (ratio: gittuf's time / ours = our entries verified per second / gittuf's; CPU: user+sys of the process and its\n")
	b.printf("  children: gittuf runs git processes, about five per entry; bernstein checked %d signatures at\n", last.signatures)
	b.printf("  %d posts (spine and audit commits) and as many HMACs; gittuf one SSH signature per RSL entry)\n", last.n)

	b.printf("\n  goals (information only; a missed goal does not fail the run)\n")
	goal := func(name string, v float64) {
		mark := "not met"
		if math.IsNaN(v) || math.IsInf(v, 0) {
			mark = "not measured"
		} else if v >= peerVerifyGoal {
			mark = "met"
		}
		b.printf("    %-52s %-13s %.1fx (at least %.0fx)\n", name, mark, v, peerVerifyGoal)
	}
	goal(fmt.Sprintf("verify per entry vs gittuf, %d entries", last.n), float64(theirsPer)/float64(oursPer))
	b.summary(fmt.Sprintf("verify per entry, %d entries: gittuf verify-ref / audit verify", last.n), ms(oursPer), ms(theirsPer),
		dratio(theirsPer, oursPer), fmt.Sprintf(">= %.0fx", peerVerifyGoal), float64(theirsPer) >= peerVerifyGoal*float64(oursPer))
	if len(pts) > 1 {
		goal(fmt.Sprintf("verify marginal per entry vs gittuf, %d -> %d", first.n, last.n), float64(theirsMarg)/float64(oursMarg))
		b.summary(fmt.Sprintf("verify marginal per entry, %d -> %d: gittuf / ours", first.n, last.n), ms(oursMarg), ms(theirsMarg),
			dratio(theirsMarg, oursMarg), fmt.Sprintf(">= %.0fx", peerVerifyGoal), float64(theirsMarg) >= peerVerifyGoal*float64(oursMarg))
	}
	b.printf("\n  notes: every gittuf record added one entry (RSL commits counted) and every verify-ref exited 0; every git-bug\n")
	b.printf("  comment was counted back (`git-bug bug show --format json`); every bernstein post was checked as in the post\n")
	b.printf("  section (versions, journal indexes, chain lengths, git fsck --strict) and every audit verify said verified with\n")
	b.printf("  no failure and the posts' count. Our posts are durable when they return (pack, refs and directories fsynced);\n")
	b.printf("  the peers run with git's defaults, under which loose objects and refs are not fsynced, so they do less work.\n")
	return nil
}

// postMore posts artifacts from index from to index to (exclusive) through
// the API on the repository in dir, as the bench task's agent.
func (b *bench) postMore(dir, tok string, from, to, keys, size int) error {
	s, err := bernstein.Open(bernstein.Options{Repo: dir, Home: b.home})
	if err != nil {
		return err
	}
	for i := from; i < to; i++ {
		res, err := s.Post(bernstein.PostRequest{Task: benchTask, Key: keyOf(i, keys), Agent: benchAgent, ClaimToken: tok, Payload: reportPayload("peers", i, size)})
		if err != nil {
			s.Close()
			return fmt.Errorf("post %d: %w", i, err)
		}
		if want := int64(i/keys + 1); res.Version != want {
			s.Close()
			return fmt.Errorf("post %d: got %s v%d, want v%d", i, res.Key, res.Version, want)
		}
	}
	return s.Close()
}

// checkPeerVerify checks one `audit verify --output-json` run over a
// repository of posts posts and returns the signatures it checked.
func checkPeerVerify(run procRun, posts int) (int, error) {
	if run.exit != 0 {
		return 0, fmt.Errorf("exited %d: %s", run.exit, run.stderr)
	}
	var rep verify.Report
	if err := json.Unmarshal(run.stdout, &rep); err != nil {
		return 0, fmt.Errorf("printed %q: %w", firstBytes(run.stdout, 200), err)
	}
	c := rep.Counts
	switch {
	case !rep.Verified || !rep.HMACChecked || len(rep.Failures) > 0:
		return 0, fmt.Errorf("verified=%v hmac_checked=%v, %d failures (first: %+v)", rep.Verified, rep.HMACChecked, len(rep.Failures), firstFailure(rep.Failures))
	case c.Artifacts != posts || c.Verified != posts || c.SpineEntries != posts:
		return 0, fmt.Errorf("%d artifact versions, %d verified, %d spine entries; want %d each", c.Artifacts, c.Verified, c.SpineEntries, posts)
	case c.HMACsChecked != c.AuditEntries || c.SignaturesChecked < 2*posts:
		return 0, fmt.Errorf("%d HMACs of %d audit entries, %d signatures for %d posts", c.HMACsChecked, c.AuditEntries, c.SignaturesChecked, posts)
	}
	return c.SignaturesChecked, nil
}

// buildPeer makes p.bin: the cached binary for p.version, or one built now
// from the Go module proxy. It downloads the module (`go mod download`) and
// builds it as the main module in its own folder, with its own go.mod and
// go.sum: what `go install module@version` does, without the deprecation
// lookup that needs the proxy's version list (which the proxy may refuse).
// On failure p.why says why.
func (b *bench) buildPeer(cache string, p *peerTool) {
	bin := filepath.Join(cache, p.name+"-"+p.version)
	if from, err := os.ReadFile(bin + ".from"); err == nil {
		if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			p.bin, p.from = bin, strings.TrimSpace(string(from))+", cached in "+cache
			return
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		p.why = "no go command to build it with"
		return
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		p.why = err.Error()
		return
	}
	env := cleanEnv("GOFLAGS=-buildvcs=false", "GOWORK=off", "GOTOOLCHAIN=local")
	var reasons []string
	for _, mod := range p.modules {
		fmt.Fprintf(os.Stderr, "bench: building %s@%s from the Go module proxy into %s (once; a minute or two)\n", mod, p.version, cache)
		dl := exec.Command(goBin, "mod", "download", "-json", mod+"@"+p.version)
		dl.Dir, dl.Env = b.tmp, env
		out, _ := dl.Output() // a failed download prints its Error in the JSON
		var info struct{ Dir, Error string }
		if err := json.Unmarshal(out, &info); err != nil || info.Error != "" || info.Dir == "" {
			msg := info.Error
			if msg == "" {
				msg = "go mod download printed " + firstBytes(bytes.TrimSpace(out), 200)
			}
			reasons = append(reasons, fmt.Sprintf("%s@%s: %s", mod, p.version, strings.TrimSuffix(lastLine(msg), ".")))
			continue
		}
		tmp := bin + ".tmp"
		build := exec.Command(goBin, "build", "-trimpath", "-o", tmp, ".")
		build.Dir, build.Env = info.Dir, env
		if out, err := build.CombinedOutput(); err != nil {
			os.Remove(tmp)
			reasons = append(reasons, fmt.Sprintf("%s@%s does not build with %s: %s", mod, p.version, runtime.Version(), lastLine(string(out))))
			continue
		}
		if err := os.Rename(tmp, bin); err != nil {
			p.why = err.Error()
			return
		}
		from := fmt.Sprintf("built from %s@%s (Go module proxy) with %s", mod, p.version, runtime.Version())
		if err := os.WriteFile(bin+".from", []byte(from+"\n"), 0o644); err != nil {
			p.why = err.Error()
			return
		}
		p.bin, p.from = bin, from+", cached in "+cache
		return
	}
	p.why = strings.Join(reasons, "; ")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// peerEnv is the environment of the peers' processes: no GIT_* or
// BERNSTEIN_* variables of the caller, and a HOME of their own, so no global
// git configuration changes what they do.
func peerEnv(b *bench) []string {
	home := filepath.Join(b.tmp, "peers-home")
	os.MkdirAll(home, 0o755)
	return cleanEnv("HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "GIT_CONFIG_NOSYSTEM=1")
}

// peerCmd runs name in dir; it returns the wall time, the CPU of the
// process and its children, and stdout.
func peerCmd(dir string, env []string, name string, args ...string) (time.Duration, time.Duration, string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return wall, 0, stdout.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, lastLine(stderr.String()+"\n"+stdout.String()))
	}
	return wall, processCPU(cmd.ProcessState), stdout.String(), nil
}

// gittufKeys are the three SSH key pairs of gittuf's get-started guide.
type gittufKeys struct{ root, policy, developer string }

func (b *bench) makeGittufKeys() (*gittufKeys, error) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		return nil, errors.New("ssh-keygen not found (gittuf signs with SSH keys here)")
	}
	dir := filepath.Join(b.tmp, "gittuf-keys")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	k := &gittufKeys{filepath.Join(dir, "root"), filepath.Join(dir, "policy"), filepath.Join(dir, "developer")}
	for _, f := range []string{k.root, k.policy, k.developer} {
		if _, _, _, err := peerCmd(dir, cleanEnv(), "ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", f); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// gittufSetup makes dir a repository protected by gittuf as its
// get-started guide does: SSH signing with the developer key, a root of
// trust, a policy key, a policy with the developer as a person and a rule
// protecting main, staged and applied.
func gittufSetup(dir string, env []string, bin string, k *gittufKeys) error {
	steps := [][]string{
		{"git", "init", "-q", "-b", "main"},
		{"git", "config", "--local", "user.name", "Bench Developer"},
		{"git", "config", "--local", "user.email", "developer@bench.invalid"},
		{"git", "config", "--local", "gpg.format", "ssh"},
		{"git", "config", "--local", "user.signingkey", k.developer},
		{bin, "trust", "init", "-k", k.root},
		{bin, "trust", "add-policy-key", "-k", k.root, "--policy-key", k.policy + ".pub"},
		{bin, "policy", "init", "-k", k.policy, "--policy-name", "targets"},
		{bin, "policy", "add-person", "-k", k.policy, "--person-ID", "developer", "--public-key", k.developer + ".pub"},
		{bin, "policy", "add-rule", "-k", k.policy, "--rule-name", "protect-main", "--rule-pattern", "git:refs/heads/main", "--authorize", "developer"},
		{bin, "policy", "stage", "--local-only"},
		{bin, "policy", "apply", "--local-only"},
	}
	for _, s := range steps {
		if _, _, _, err := peerCmd(dir, env, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// gittufCommitAndRecord commits report i, signed (its wall time goes to
// commits when that is not nil), then records main in the RSL, timed: the
// append.
func gittufCommitAndRecord(dir string, env []string, bin string, i, keys, size int, commits *durations) (procTimes, error) {
	name := filepath.Join(dir, "reports", keyOf(i, keys)+".md")
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return procTimes{}, err
	}
	if err := os.WriteFile(name, []byte(bodyOf("gittuf", i, size)), 0o644); err != nil {
		return procTimes{}, err
	}
	t0 := time.Now()
	if _, _, _, err := peerCmd(dir, env, "git", "add", "reports"); err != nil {
		return procTimes{}, err
	}
	if _, _, _, err := peerCmd(dir, env, "git", "commit", "-q", "-S", "-m", fmt.Sprintf("report %d", i)); err != nil {
		return procTimes{}, err
	}
	if commits != nil {
		*commits = append(*commits, time.Since(t0))
	}
	wall, cpu, _, err := peerCmd(dir, env, bin, "rsl", "record", "main", "--local-only")
	return procTimes{wall, cpu}, err
}

type procTimes struct{ wall, cpu time.Duration }

const rslRef = "refs/gittuf/reference-state-log"

// peerRSLCount checks that main has exactly want entries in the RSL (one per
// record) and that the newest one is a signed commit.
func peerRSLCount(dir string, want int) error {
	out, err := gitIn(dir, nil, "log", "--format=%B", rslRef)
	if err != nil {
		return err
	}
	got := strings.Count(out, "\nref: refs/heads/main\n")
	if got != want {
		return fmt.Errorf("gittuf RSL has %d entries for refs/heads/main, want %d", got, want)
	}
	head, err := gitIn(dir, nil, "cat-file", "commit", rslRef)
	if err != nil {
		return err
	}
	if !strings.Contains(head, "\ngpgsig -----BEGIN SSH SIGNATURE-----") {
		return errors.New("the newest gittuf RSL entry is not SSH-signed")
	}
	return nil
}

// gittufAppend records n signed RSL entries on a fresh gittuf repository,
// timing each `gittuf rsl record` (process start to exit).
func (b *bench) gittufAppend(bin string, k *gittufKeys, n, keys, size int) (postRun, durations, error) {
	dir, err := b.mkrepoDir("gittuf-")
	if err != nil {
		return postRun{}, nil, err
	}
	env := peerEnv(b)
	if err := gittufSetup(dir, env, bin, k); err != nil {
		return postRun{}, nil, fmt.Errorf("setup: %w", err)
	}
	run := postRun{posts: n, lat: make([]time.Duration, 0, n)}
	var commits durations
	for i := 0; i < n; i++ {
		t, err := gittufCommitAndRecord(dir, env, bin, i, keys, size, &commits)
		if err != nil {
			return run, commits, fmt.Errorf("entry %d: %w", i, err)
		}
		run.lat = append(run.lat, t.wall)
		run.elapsed += t.wall
		run.cpuKids += t.cpu
	}
	return run, commits, peerRSLCount(dir, n)
}

// gitBugAppend adds n comments to one bug of a fresh git-bug repository
// (identity and bug made first, untimed), timing each `git-bug bug comment
// new` (process start to exit), and counts them back.
func (b *bench) gitBugAppend(bin string, n, size int) (postRun, error) {
	dir, err := b.mkrepoDir("git-bug-")
	if err != nil {
		return postRun{}, err
	}
	env := peerEnv(b)
	for _, s := range [][]string{
		{"git", "init", "-q", "-b", "main"},
		{"git", "config", "--local", "user.name", "Bench Agent"},
		{"git", "config", "--local", "user.email", "agent@bench.invalid"},
		{bin, "user", "new", "--name", "Bench Agent", "--email", "agent@bench.invalid", "--non-interactive"},
	} {
		if _, _, _, err := peerCmd(dir, env, s[0], s[1:]...); err != nil {
			return postRun{}, fmt.Errorf("setup: %w", err)
		}
	}
	_, _, out, err := peerCmd(dir, env, bin, "bug", "new", "--title", "benchmark task", "--message", "reports follow as comments", "--non-interactive")
	if err != nil {
		return postRun{}, fmt.Errorf("setup: %w", err)
	}
	f := strings.Fields(out)
	if len(f) != 2 || f[1] != "created" {
		return postRun{}, fmt.Errorf("git-bug bug new printed %q, want \"<id> created\"", strings.TrimSpace(out))
	}
	id := f[0]
	run := postRun{posts: n, lat: make([]time.Duration, 0, n)}
	for i := 0; i < n; i++ {
		wall, cpu, _, err := peerCmd(dir, env, bin, "bug", "comment", "new", id, "--message", bodyOf("git-bug", i, size), "--non-interactive")
		if err != nil {
			return run, fmt.Errorf("comment %d: %w", i, err)
		}
		run.lat = append(run.lat, wall)
		run.elapsed += wall
		run.cpuKids += cpu
	}
	_, _, out, err = peerCmd(dir, env, bin, "bug", "show", id, "--format", "json")
	if err != nil {
		return run, err
	}
	var bug struct {
		Comments []struct {
			Message string `json:"message"`
		} `json:"comments"`
	}
	if err := json.Unmarshal([]byte(out), &bug); err != nil {
		return run, fmt.Errorf("git-bug bug show: %w", err)
	}
	if len(bug.Comments) != n+1 || strings.TrimSpace(bug.Comments[n].Message) != strings.TrimSpace(bodyOf("git-bug", n-1, size)) {
		return run, fmt.Errorf("git-bug bug show: %d comments, want %d with the last one's text", len(bug.Comments), n+1)
	}
	return run, nil
}
