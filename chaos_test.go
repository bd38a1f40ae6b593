package bernstein_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein/verify"
)

// TestChaos runs posters in several processes (each with several goroutines)
// while readers verify, list, show and project progress, a maintenance loop
// runs git's repack, gc and pack-refs, and a killer SIGKILLs whole poster
// process groups at random moments. Afterwards every acknowledged post must
// be there, versions contiguous, `audit verify` and `git fsck --strict`
// clean, and no reader may ever have seen "tampered".
//
// `make test` runs it for BERNSTEIN_CHAOS_SECONDS (default 20); `make chaos`
// runs it for ten minutes. BERNSTEIN_TEST_SEED replays a run's choices.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	seconds := 20
	if v := os.Getenv("BERNSTEIN_CHAOS_SECONDS"); v != "" {
		fmt.Sscan(v, &seconds)
	}
	rng := rand.New(rand.NewSource(testSeed(t)))
	f := newFixture(t)
	s := f.open()
	tasks := []string{"CH-1", "ch:2"}
	var tokens []string
	for _, task := range tasks {
		tokens = append(tokens, f.claimed(s, task, "agent"))
	}
	f.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
	ackLog, err := os.OpenFile(filepath.Join(t.TempDir(), "acks"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer ackLog.Close()
	h := &chaos{f: f, rng: rng, ackLog: ackLog, acked: map[string]string{}, stop: make(chan struct{})}

	// Posters: three processes, each posting from four goroutines to both
	// tasks and two keys; the first posts batches (PostBatch) instead.
	const posters = 3
	procs := make([]*chaosPoster, posters)
	for i := range procs {
		procs[i] = h.startPoster(tasks, tokens, i == 0)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.maintain() }()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) { defer wg.Done(); h.read(tasks, r) }(r)
	}
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(20+h.intn(400)) * time.Millisecond)
		i := h.intn(posters)
		procs[i].kill()
		h.kills.Add(1)
		procs[i] = h.startPoster(tasks, tokens, i == 0)
	}
	close(h.stop)
	wg.Wait()
	for _, p := range procs {
		p.kill()
	}

	// The next writer finishes whatever the last kills left.
	s2 := f.open()
	if _, err := s2.Checkpoint(tasks[0], "HEAD", ""); err != nil {
		t.Fatalf("write after the run: %v", err)
	}
	h.mu.Lock()
	acked := h.acked
	h.mu.Unlock()
	for _, task := range tasks {
		rep, err := s2.Artifacts(task)
		if err != nil {
			t.Fatal(err)
		}
		if rep.ChainBroken || !rep.Verified() {
			t.Fatalf("%s after the run: %s %s", task, rep.ChainReason, rep.Reason())
		}
		got := map[string]string{}
		last := map[string]int64{}
		for _, v := range rep.Versions {
			if v.Version != last[v.Key]+1 {
				t.Fatalf("%s/%s: version %d follows %d", task, v.Key, v.Version, last[v.Key])
			}
			last[v.Key] = v.Version
			got[fmt.Sprintf("%s %s %d", task, v.Key, v.Version)] = string(v.SpineEntryHash)
		}
		for k, spine := range acked {
			if strings.HasPrefix(k, task+" ") && got[k] != spine {
				t.Fatalf("acknowledged post %s (spine entry %s) is missing or different: %q", k, spine, got[k])
			}
		}
	}
	out, errOut, code := f.cli("", "audit", "verify", "--output-json")
	if code != 0 {
		t.Fatalf("audit verify after the run: exit %d\n%s%s", code, out, errOut)
	}
	f.fsck()
	s2.Close() // waits for the last write's tidying up (its keep goes after the acknowledgement)
	if left := leftovers(f); len(left) > 0 {
		t.Fatalf("left behind after the next write: %v", left)
	}
	t.Logf("chaos: %ds, %d posts acknowledged, %d kills, maintenance %s, readers %s, false alarms %d",
		seconds, len(acked), h.kills.Load(), h.counts(&h.maint), h.counts(&h.reads), h.alarms.Load())
	fmt.Printf("chaos figures: seconds=%d posts=%d kills=%d maintenance=[%s] readers=[%s] false_alarms=%d\n",
		seconds, len(acked), h.kills.Load(), h.counts(&h.maint), h.counts(&h.reads), h.alarms.Load())
	if h.alarms.Load() > 0 {
		t.Fatalf("%d reader runs saw a false alarm; first: %s", h.alarms.Load(), h.firstAlarm)
	}
	if len(acked) < 20 {
		t.Fatalf("only %d posts were acknowledged: the run tested too little", len(acked))
	}
}

type chaos struct {
	f      *fixture
	rngMu  sync.Mutex
	rng    *rand.Rand
	stop   chan struct{}
	ackLog *os.File

	mu         sync.Mutex
	acked      map[string]string // "task key version" -> spine entry hash
	firstAlarm string

	kills  atomic.Int64
	alarms atomic.Int64
	maint  sync.Map // kind -> *atomic.Int64
	reads  sync.Map
}

func (h *chaos) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Intn(n)
}

func (h *chaos) count(m *sync.Map, kind string) {
	v, _ := m.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (h *chaos) counts(m *sync.Map) string {
	var parts []string
	m.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%s:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

type chaosPoster struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startPoster starts a poster process in its own process group; its
// acknowledgements are logged (and synced) as they arrive. A batch poster
// posts batches of 1 to 8 posts, each with a refusal.
func (h *chaos) startPoster(tasks, tokens []string, batch bool) *chaosPoster {
	cmd := h.f.poster(strings.Join(tasks, ","), "alpha,beta", "agent", strings.Join(tokens, ","), 0)
	cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_GOROUTINES=4")
	if batch {
		cmd.Env = append(cmd.Env, fmt.Sprintf("BERNSTEIN_TEST_BATCH=%d", 1+h.intn(8)), "BERNSTEIN_TEST_INTRUDER=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		h.f.t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		h.f.t.Fatal(err)
	}
	p := &chaosPoster{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var v int64
			var task, key, spine string
			if _, err := fmt.Sscanf(sc.Text(), "ok %d %s %s %s", &v, &task, &key, &spine); err != nil {
				continue
			}
			k := fmt.Sprintf("%s %s %d", task, key, v)
			h.mu.Lock()
			h.acked[k] = spine
			fmt.Fprintf(h.ackLog, "%s %s\n", k, spine)
			h.mu.Unlock()
		}
		h.ackLog.Sync()
		cmd.Wait()
		// A poster that failed on its own (not killed) is a finding.
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() > 0 {
			h.alarm(fmt.Sprintf("poster exited %d: %s", cmd.ProcessState.ExitCode(), stderr.String()))
		}
	}()
	return p
}

func (p *chaosPoster) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func (h *chaos) alarm(what string) {
	if h.alarms.Add(1) == 1 {
		h.mu.Lock()
		h.firstAlarm = what
		h.mu.Unlock()
	}
}

func (h *chaos) stopped() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

// maintain runs git's maintenance commands in turn until the run stops.
func (h *chaos) maintain() {
	jobs := [][]string{
		{"repack", "-a", "-d", "-q"},
		{"pack-refs", "--all"},
		{"repack", "-A", "-d", "-q"},
		{"gc", "-q"},
		{"pack-refs", "--all"},
		{"gc", "--prune=now", "-q"},
		{"maintenance", "run"},
		{"gc", "--aggressive", "-q"},
	}
	for i := 0; !h.stopped(); i++ {
		job := jobs[i%len(jobs)]
		if job[0] == "gc" && job[1] == "--aggressive" && i%(3*len(jobs)) != len(jobs)-1 {
			continue // the slowest one, a third as often
		}
		cmd := exec.Command("git", append([]string{"-C", h.f.dir}, job...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			// git's own maintenance may lose a race with another git (a
			// packfile it had listed was repacked away); that is git's
			// business, not a finding about bernstein.
			h.count(&h.maint, "failed-"+job[0])
			_ = out
			continue
		}
		h.count(&h.maint, strings.Join(job[:min(2, len(job))], " "))
	}
}

// read runs the reading commands in turn and records any false alarm.
func (h *chaos) read(tasks []string, r int) {
	for i := r; !h.stopped(); i++ {
		task := tasks[h.intn(len(tasks))]
		switch i % 4 {
		case 0:
			out, errOut, code := h.f.cliQuiet("audit", "verify", "--task", task, "--output-json")
			h.count(&h.reads, "verify")
			if code != 0 {
				h.alarm(fmt.Sprintf("audit verify --task %s exit %d: %s%s", task, code, head(out), errOut))
			}
		case 1:
			out, errOut, code := h.f.cliQuiet("artifact", "list", task, "--output-json")
			h.count(&h.reads, "list")
			if code == 1 && strings.Contains(errOut, "has no artifacts") {
				continue
			}
			var doc struct {
				Artifacts []verify.VersionState `json:"artifacts"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &doc) != nil {
				h.alarm(fmt.Sprintf("artifact list %s exit %d: %s%s", task, code, head(out), errOut))
				continue
			}
			for _, a := range doc.Artifacts {
				if a.State != verify.Verified {
					h.alarm(fmt.Sprintf("artifact list %s: %s v%d %s: %s", task, a.Key, a.Version, a.State, a.Reason))
				}
			}
		case 2:
			key := []string{"alpha", "beta"}[h.intn(2)]
			_, errOut, code := h.f.cliQuiet("artifact", "show", task, key)
			h.count(&h.reads, "show")
			if code == 1 && strings.Contains(errOut, "has no artifact") {
				continue
			}
			if code != 0 {
				h.alarm(fmt.Sprintf("artifact show %s %s exit %d: %s", task, key, code, errOut))
			}
		case 3:
			out, errOut, code := h.f.cliQuiet("task", "progress", task, "--output-json")
			h.count(&h.reads, "progress")
			if code != 0 {
				h.alarm(fmt.Sprintf("task progress %s exit %d: %s%s", task, code, head(out), errOut))
			}
		}
	}
}

func head(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

// cliQuiet is cli without failing the test on a start error (it may race
// the end of the run).
func (f *fixture) cliQuiet(args ...string) (string, string, int) {
	out, errOut, code, err := f.runCLI("", args...)
	if err != nil {
		return out, errOut + err.Error(), -1
	}
	return out, errOut, code
}

// leftovers lists what a killed writer may leave that the next write must
// have cleared: ref locks, bernstein's temporary files, its keep files.
func leftovers(f *fixture) []string {
	var out []string
	gitDir := filepath.Join(f.dir, ".git")
	filepath.WalkDir(filepath.Join(gitDir, "refs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".lock") {
			out = append(out, p)
		}
		return nil
	})
	tmps, _ := os.ReadDir(filepath.Join(gitDir, "objects", "bernstein-tmp"))
	for _, e := range tmps {
		out = append(out, filepath.Join(gitDir, "objects", "bernstein-tmp", e.Name()))
	}
	ents, _ := os.ReadDir(filepath.Join(gitDir, "objects", "pack"))
	for _, e := range ents {
		p := filepath.Join(gitDir, "objects", "pack", e.Name())
		if strings.HasPrefix(e.Name(), "tmp_bernstein") {
			out = append(out, p)
		}
		if base, ok := strings.CutSuffix(p, ".pack"); ok {
			if _, err := os.Stat(base + ".idx"); err != nil {
				out = append(out, p+" (no index)")
			}
		}
		if strings.HasSuffix(e.Name(), ".keep") {
			if b, _ := os.ReadFile(p); strings.HasPrefix(string(b), "bernstein ") {
				out = append(out, p)
			}
		}
	}
	return out
}
