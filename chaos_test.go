package bernstein_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestChaos runs posters in several processes (each with several goroutines)
// while readers read through every surface, a maintenance loop runs git's
// repack, gc and pack-refs, and a killer SIGKILLs whole poster process
// groups at random moments. The readers:
//   - the CLI: `audit verify` (the whole repository and --task), `artifact
//     list`, `artifact show` and `task progress`;
//   - one `bernstein mcp` stdio server for the whole run, asked for task
//     handles over JSON-RPC lines;
//   - one `bernstein serve`: its task, artifacts, artifact and journal
//     documents, and its event stream, held open for the whole run.
//
// Nothing a reader returns may claim anything is wrong (a state or proof
// that is not verified, withheld content, a failure), and no read may miss a
// post acknowledged before it started (versions, journal rows). Every
// artifact event comes once, in version order. Each poster logs (and syncs)
// every acknowledgement before it prints it; afterwards every logged post
// must be there, versions contiguous, `audit verify` and `git fsck --strict`
// clean, and the event stream must have delivered every version.
//
// `make test` runs it for BERNSTEIN_CHAOS_SECONDS (default 20), and on
// until it has seen a compaction and 20 acknowledged posts (a loaded machine
// takes longer to get there); `make chaos` runs it for ten minutes.
// BERNSTEIN_TEST_SEED replays a run's choices (which poster is killed after
// how many posts, batch sizes, what each reader reads) as far as the
// machine's timing allows.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	seconds := 20
	if v := os.Getenv("BERNSTEIN_CHAOS_SECONDS"); v != "" {
		if _, err := fmt.Sscan(v, &seconds); err != nil {
			t.Fatalf("BERNSTEIN_CHAOS_SECONDS=%q: %v", v, err)
		}
	}
	seed := testSeed(t)
	replay := fmt.Sprintf("(seed %d: replay with BERNSTEIN_TEST_SEED=%d)", seed, seed)
	f := newFixture(t)
	s := f.open()
	tasks := []string{"CH-1", "ch:2"}
	var tokens []string
	for _, task := range tasks {
		tokens = append(tokens, f.claimed(s, task, "agent"))
	}
	f.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
	h := &chaos{f: f, seed: seed, rng: rand.New(rand.NewSource(seed)), ackDir: t.TempDir(), stop: make(chan struct{}),
		acked: map[string]string{}, latest: map[string]seen{}, shown: map[string]shownAs{}, heads: map[string]string{},
		posted: make(chan struct{}), compacted: make(chan struct{}), enough: make(chan struct{})}
	for _, task := range tasks {
		h.latest[task] = seen{versions: map[string]int64{}, rows: 0}
	}
	defer h.finish()

	// The long-running readers start first, so that the event stream sees
	// every post.
	srv, err := h.startServe()
	if err != nil {
		t.Fatalf("bernstein serve: %v", err)
	}
	t.Cleanup(func() { srv.cmd.Process.Kill() })
	mcpc, err := h.startMCP()
	if err != nil {
		t.Fatalf("bernstein mcp: %v", err)
	}
	t.Cleanup(func() { mcpc.cmd.Process.Kill() })
	stream := newEventCheck(h)
	sseCtx, sseStop := context.WithCancel(context.Background())
	defer sseStop()
	connected := make(chan struct{})
	sseDone := make(chan struct{})
	go func() {
		defer close(sseDone)
		n, err := srv.follow(sseCtx, func() { close(connected) }, stream.on)
		stream.reconnects = n
		if err != nil {
			h.alarm("sse", "GET /api/v1/events", err.Error())
		}
	}()
	select {
	case <-connected:
	case <-time.After(30 * time.Second):
		t.Fatal("the event stream did not open in 30s")
	}

	// Posters: three processes, each posting from four goroutines to both
	// tasks and two keys; the first posts batches (PostBatch) instead.
	const posters = 3
	procs := make([]*chaosPoster, posters)
	for i := range procs {
		procs[i] = h.startPoster(tasks, tokens, i == 0)
	}
	var wg sync.WaitGroup
	run := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	run(h.maintain)
	for r := 0; r < 2; r++ {
		run(func() { h.readCLI(tasks, r) })
	}
	run(func() { h.readMCP(mcpc, tasks) })
	run(func() { h.readHTTP(srv, tasks) })
	// Kills: a poster drawn at random once it has acknowledged a number of
	// posts drawn from 0 (at once: anywhere in its start-up, recovery
	// included) to 3 since it started (its other goroutines are then
	// anywhere in their writes), until the run's time is up.
	// The run lasts its seconds, and then until it has tested enough (a
	// compaction beside git's maintenance, 20 acknowledged posts: on a
	// loaded machine they take longer), at most ten times as long.
	over := make(chan struct{})
	go func() {
		<-time.After(time.Duration(seconds) * time.Second)
		limit := time.After(time.Duration(9*seconds) * time.Second)
		for _, c := range []chan struct{}{h.compacted, h.enough} {
			select {
			case <-c:
			case <-limit:
			}
		}
		close(over)
	}()
run:
	for {
		i := h.intn(posters)
		for want := int64(h.intn(4)); procs[i].acks.Load() < want; {
			select {
			case <-over:
				break run
			case <-procs[i].progress:
			case <-procs[i].done:
				want = 0 // it ended by itself (an alarm): start another
			}
		}
		procs[i].kill()
		h.kills.Add(1)
		procs[i] = h.startPoster(tasks, tokens, i == 0)
		select {
		case <-over:
			break run
		default:
		}
	}
	close(h.stop)
	for _, p := range procs {
		p.kill() // first: the readers' last commands finish sooner
	}
	wg.Wait()

	// The next writer finishes whatever the last kills left.
	s2 := f.open()
	if _, err := s2.Checkpoint(tasks[0], "HEAD", ""); err != nil {
		t.Fatalf("write after the run: %v %s", err, replay)
	}

	// Every post a poster logged as acknowledged, read back from the logs on
	// disk, must be there; so must every one the harness read on a poster's
	// stdout, which the logs must hold.
	acks, torn, err := readAckLogs(h.ackDir)
	if err != nil {
		t.Fatalf("%v %s", err, replay)
	}
	logged := map[string]string{}
	for _, a := range acks {
		if prev, ok := logged[a.id()]; ok && prev != a.spine {
			t.Fatalf("acknowledged twice with different spine entries: %s (%s, %s) %s", a.id(), prev, a.spine, replay)
		}
		logged[a.id()] = a.spine
	}
	h.mu.Lock()
	printed := h.acked
	h.mu.Unlock()
	for k, spine := range printed {
		if logged[k] != spine {
			t.Fatalf("post %s was acknowledged on stdout (spine entry %s) but its log holds %q %s", k, spine, logged[k], replay)
		}
	}
	final := map[string]seen{}
	storeSpines := map[string]string{} // spine entry -> "task key version"
	for _, task := range tasks {
		rep, err := s2.Artifacts(task)
		if err != nil {
			t.Fatalf("%v %s", err, replay)
		}
		if rep.ChainBroken || !rep.Verified() {
			t.Fatalf("%s after the run: %s %s %s", task, rep.ChainReason, rep.Reason(), replay)
		}
		got := map[string]string{}
		fin := seen{versions: map[string]int64{}, rows: rep.Rows}
		for _, v := range rep.Versions {
			if v.Version != fin.versions[v.Key]+1 {
				t.Fatalf("%s/%s: version %d follows %d %s", task, v.Key, v.Version, fin.versions[v.Key], replay)
			}
			fin.versions[v.Key] = v.Version
			got[fmt.Sprintf("%s %s %d", task, v.Key, v.Version)] = string(v.SpineEntryHash)
		}
		final[task] = fin
		for k, spine := range got {
			storeSpines[spine] = k
		}
		h.mu.Lock()
		for id, sa := range h.shown {
			if strings.HasPrefix(id, task+" ") && got[id] != sa.hash {
				h.mu.Unlock()
				t.Fatalf("%s showed %s with spine entry %s; after the run the store holds %q %s", sa.by, id, sa.hash, got[id], replay)
			}
		}
		h.mu.Unlock()
		for k, spine := range logged {
			if strings.HasPrefix(k, task+" ") && got[k] != spine {
				t.Fatalf("acknowledged post %s (spine entry %s) is missing or different: %q %s", k, spine, got[k], replay)
			}
		}
		stream.spines(task, got)
	}

	h.mu.Lock()
	for head, by := range h.heads {
		if _, ok := storeSpines[head]; !ok {
			h.mu.Unlock()
			t.Fatalf("%s named spine head %s, which no version the store holds has %s", by, head, replay)
		}
	}
	nShown, nHeads := len(h.shown), len(h.heads)
	h.mu.Unlock()

	// The servers, after the run: they serve the final state, the stream
	// has delivered every version, and they end cleanly.
	client := &http.Client{Timeout: 2 * time.Minute}
	for _, task := range tasks {
		doc, raw, err := srv.get(client, taskPath(task))
		if err != nil {
			t.Fatalf("GET %s after the run: %v\n%s %s", taskPath(task), err, head(raw), replay)
		}
		if got := seenIn(doc); !sameSeen(got, final[task]) {
			t.Fatalf("GET %s after the run serves %v, the store holds %v %s", taskPath(task), got, final[task], replay)
		}
		res, line, err := mcpc.call("tools/call", handleCall(task))
		if err != nil {
			t.Fatalf("MCP task handle %s after the run: %v\n%s %s", task, err, head(line), replay)
		}
		var hdoc any
		json.Unmarshal(res, &hdoc)
		if got := seenIn(hdoc); got.rows != final[task].rows {
			t.Fatalf("MCP task handle %s after the run counts %d journal rows, the store %d %s", task, got.rows, final[task].rows, replay)
		}
	}
	stream.await(final, 60*time.Second)
	sseStop()
	<-sseDone
	if err := mcpc.close(); err != nil {
		t.Fatalf("bernstein mcp: %v %s", err, replay)
	}
	if err := srv.stop(); err != nil {
		t.Fatalf("bernstein serve: %v %s", err, replay)
	}

	out, errOut, code := f.cli("", "audit", "verify", "--output-json")
	if code != 0 {
		t.Fatalf("audit verify after the run: exit %d\n%s%s %s", code, out, errOut, replay)
	}
	f.fsck()
	s2.Close() // waits for the last write's tidying up (its keep goes after the acknowledgement)
	if left := leftovers(f); len(left) > 0 {
		t.Fatalf("left behind after the next write: %v %s", left, replay)
	}

	fig := fmt.Sprintf("seconds=%d seed=%d posts=%d (logged only: %d, torn: %d) kills=%d maintenance=[%s] maintenance_failed=[%s] maintenance_lock_busy=[%s] maintenance_pack_race=[%s] compactions=%d readers=[%s] sse=[events:%d artifacts:%d reconnects:%d] versions_shown=%d handle_heads=%d false_alarms=%d stale_reads=%d",
		seconds, seed, len(logged), len(logged)-len(printed), torn, h.kills.Load(),
		counts(&h.maint), counts(&h.maintFailed), counts(&h.maintBusy), counts(&h.maintRace), h.compactions.Load(),
		counts(&h.reads), stream.events, stream.artifacts, stream.reconnects, nShown, nHeads, h.alarms.Load(), h.stale.Load())
	t.Logf("chaos: %s", fig)
	fmt.Printf("chaos figures: %s\n", fig)
	if n := h.alarms.Load() + h.stale.Load(); n > 0 {
		t.Fatalf("%d reads were wrong %s; first:\n%s", n, replay, h.alarmList[0])
	}
	if n := total(&h.maintFailed); n > 0 {
		t.Fatalf("%d maintenance runs failed %s: %s (the first are logged above)", n, replay, counts(&h.maintFailed))
	}
	if len(logged) < 20 {
		t.Fatalf("only %d posts were acknowledged: the run tested too little %s", len(logged), replay)
	}
	if h.compactions.Load() == 0 {
		t.Fatalf("no compaction ran beside git's maintenance: the run tested too little %s", replay)
	}
	if stream.artifacts == 0 {
		t.Fatalf("the event stream carried no artifact: the run tested too little %s", replay)
	}
}

type chaos struct {
	f      *fixture
	seed   int64
	rngMu  sync.Mutex
	rng    *rand.Rand
	stop   chan struct{}
	ackDir string // the posters' acknowledgement logs

	mu        sync.Mutex
	acked     map[string]string  // "task key version" -> spine entry hash, as printed
	latest    map[string]seen    // per task, the newest acknowledged versions and journal index
	alarmList []string           // the first alarms, in full
	shown     map[string]shownAs // "task key version" -> the spine entry a reader showed
	heads     map[string]string  // spine heads the MCP task handle named -> the call
	finished  bool               // the test returned: no more logging
	posted    chan struct{}      // closed (and replaced) at each acknowledged post
	compacted chan struct{}      // closed at the first compaction
	enough    chan struct{}      // closed at the 20th acknowledged post
	wasEnough bool               // enough is closed

	kills       atomic.Int64
	alarms      atomic.Int64 // reads that claimed something was wrong
	stale       atomic.Int64 // reads that missed an acknowledged post
	compactions atomic.Int64
	maint       sync.Map // command -> *atomic.Int64
	maintFailed sync.Map
	maintBusy   sync.Map
	maintRace   sync.Map
	reads       sync.Map // surface -> *atomic.Int64
}

func (h *chaos) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Intn(n)
}

// pause lets a server reader leave the cores to the posters until one of
// them acknowledges another post (or the run stops).
func (h *chaos) pause() {
	h.mu.Lock()
	next := h.posted
	h.mu.Unlock()
	select {
	case <-next:
	case <-h.stop:
	}
}

func count(m *sync.Map, kind string) {
	v, _ := m.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func counts(m *sync.Map) string {
	var parts []string
	m.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%s:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func total(m *sync.Map) int64 {
	var n int64
	m.Range(func(_, v any) bool { n += v.(*atomic.Int64).Load(); return true })
	return n
}

const keptAlarms = 5

// alarm records a read that claimed something was wrong: the surface, the
// command and what it returned.
func (h *chaos) alarm(surface, command, output string) {
	h.alarms.Add(1)
	h.keep(fmt.Sprintf("false alarm (%s): %s\n%s", surface, command, head(output)))
}

func (h *chaos) keep(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.alarmList) < keptAlarms {
		h.alarmList = append(h.alarmList, what)
		if !h.finished {
			h.f.t.Log(what)
		}
	}
}

// logf logs from the harness's goroutines until the test returns.
func (h *chaos) logf(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.finished {
		h.f.t.Logf(format, args...)
	}
}

// finish ends the logging from goroutines that may outlive a failed test.
func (h *chaos) finish() {
	h.mu.Lock()
	h.finished = true
	h.mu.Unlock()
}

// before is what a read of task must show at least: every post
// acknowledged before it started.
func (h *chaos) before(task string) seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.latest[task]
	s := seen{versions: make(map[string]int64, len(l.versions)), rows: l.rows}
	for k, v := range l.versions {
		s.versions[k] = v
	}
	return s
}

// check judges one document a reader returned about task, read after the
// acknowledgements in before: it must claim nothing is wrong, and show
// every version and journal row before names (rows -1: it counts none).
func (h *chaos) check(surface, command, task string, doc any, raw string, before seen) {
	if bad := falseAlarms(doc); len(bad) > 0 {
		h.alarm(surface, command, strings.Join(bad, "\n")+"\n"+raw)
		return
	}
	h.fresh(surface, command, task, doc, raw, before)
}

// fresh checks that a read shows every post acknowledged before it started,
// and notes the spine entry of every version it shows.
func (h *chaos) fresh(surface, command, task string, doc any, raw string, before seen) {
	got := seenIn(doc)
	h.noteSpines(surface, command, task, got.spines)
	var missed []string
	for k, v := range before.versions {
		if got.versions[k] < v {
			missed = append(missed, fmt.Sprintf("%s/%s v%d (shows v%d)", task, k, v, got.versions[k]))
		}
	}
	if before.rows >= 0 && got.rows < before.rows {
		missed = append(missed, fmt.Sprintf("%s: %d journal rows, an acknowledged post has index %d", task, got.rows, before.rows-1))
	}
	if len(missed) > 0 {
		sort.Strings(missed)
		h.missed(surface, command, "missed acknowledged posts: "+strings.Join(missed, ", ")+"\n"+raw)
	}
}

// noteSpines remembers which spine entry a reader saw for each version
// ("key version" -> hash): a version shown with two spine entries was
// rewritten; after the run, each must be the store's (a version shown and
// then lost, or replaced, breaks "with the post or without it").
func (h *chaos) noteSpines(surface, command, task string, spines map[string]string) {
	h.mu.Lock()
	var changed []string
	for kv, hash := range spines {
		id := task + " " + kv
		if prev, ok := h.shown[id]; ok && prev.hash != hash {
			changed = append(changed, fmt.Sprintf("%s: %s, shown as %s by %s", id, hash, prev.hash, prev.by))
			continue
		}
		if _, ok := h.shown[id]; !ok {
			h.shown[id] = shownAs{hash, command}
		}
	}
	h.mu.Unlock()
	if len(changed) > 0 {
		sort.Strings(changed)
		h.alarm(surface, command, "a version with another spine entry than before: "+strings.Join(changed, "; "))
	}
}

// shownAs is a version's spine entry as a reader first showed it.
type shownAs struct {
	hash, by string
}

// missed records a read that did not show something it had to: a post
// acknowledged before it started, an event the stream owed.
func (h *chaos) missed(surface, command, output string) {
	h.stale.Add(1)
	h.keep(fmt.Sprintf("stale read (%s): %s\n%s", surface, command, head(output)))
}

type chaosPoster struct {
	cmd      *exec.Cmd
	done     chan struct{}
	acks     atomic.Int64  // posts it acknowledged
	progress chan struct{} // a send (when there is room) after each
}

// startPoster starts a poster process in its own process group. It logs
// and syncs each acknowledgement before printing it (printAck); the
// harness remembers the printed ones too. A batch poster posts batches of
// 1 to 8 posts, each with a refusal.
func (h *chaos) startPoster(tasks, tokens []string, batch bool) *chaosPoster {
	cmd := h.f.poster(strings.Join(tasks, ","), "alpha,beta", "agent", strings.Join(tokens, ","), 0)
	cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_GOROUTINES=4", "BERNSTEIN_TEST_ACKLOG="+h.ackDir, "BERNSTEIN_TEST_COUNT_COMPACTIONS=1")
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
	p := &chaosPoster{cmd: cmd, done: make(chan struct{}), progress: make(chan struct{}, 1)}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "compacted" {
				if h.compactions.Add(1) == 1 {
					close(h.compacted)
				}
				continue
			}
			a, ok := parseAck(sc.Text())
			if !ok {
				continue
			}
			h.mu.Lock()
			h.acked[a.id()] = a.spine
			if len(h.acked) >= 20 && !h.wasEnough {
				h.wasEnough = true
				close(h.enough)
			}
			l := h.latest[a.task]
			l.versions[a.key] = max(l.versions[a.key], a.version)
			l.rows = max(l.rows, a.index+1)
			h.latest[a.task] = l
			close(h.posted)
			h.posted = make(chan struct{})
			h.mu.Unlock()
			p.acks.Add(1)
			select {
			case p.progress <- struct{}{}:
			default:
			}
		}
		cmd.Wait()
		// A poster that failed on its own (not killed) is a finding.
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() > 0 {
			h.alarm("poster", "poster", fmt.Sprintf("exit %d: %s", cmd.ProcessState.ExitCode(), stderr.String()))
		}
	}()
	return p
}

func (p *chaosPoster) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
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
// A run that fails, or prints an error, is logged with its output and
// fails the test, but for two races git loses by its own design, counted
// apart (maintenance_lock_busy, maintenance_pack_race) and printed too:
//
//   - A ref git could not lock because a bernstein writer held its lock
//     (git's own lock-file protocol: ".lock': File exists") or moved it
//     after git read it ("is at X but expected Y"). pack-refs, and gc and
//     maintenance through it, meet it when they prune the loose refs they
//     packed. Git treats that ref exactly as one a concurrent `git
//     update-ref` holds or moves: it keeps the loose ref, which is the newer
//     and takes precedence over the packed copy, and packs it the next time
//     (git 2.39 still exits 0; a git whose gc stops there says "failed to
//     run pack-refs").
//   - A pack git had listed was deleted before it read it: its repack dies
//     ("cannot open pack index", gc's "unable to add recent objects": git
//     2.39's for_each_packed_object fails on a listed pack whose index is
//     gone) and deletes nothing. The store's compaction (and the next
//     writer cleaning up what a killed post left) deletes packs while git
//     runs, as a concurrent `git repack -d` does: one plain git repacking
//     beside another fails the same way. It counts as this race only when a
//     pack present when git started is gone when it ended; the next run
//     repacks.
//
// Neither loses anything: the run checks every acknowledged post, verify
// and fsck afterwards. The first is git's lock protocol doing its work. The
// second the store could make rarer (a compaction could wait while a git
// gc holds gc.pid); until then it is counted, not hidden.
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
		name := strings.Join(job[:min(2, len(job))], " ")
		packs := packIndexes(h.f)
		out, err := exec.Command("git", append([]string{"-C", h.f.dir}, job...)...).CombinedOutput()
		count(&h.maint, name)
		g := gitErrors(string(out))
		switch {
		case err == nil && g.clean():
		case g.busy && g.other == 0 && g.vanished == 0:
			count(&h.maintBusy, name)
			if err == nil {
				break // git 2.39: printed, and went on
			}
			h.logf("git %s: a ref was locked or moved by a writer (counted apart): %s", strings.Join(job, " "), firstLine(string(out)))
		case g.vanished > 0 && g.other == 0 && gone(packs, packIndexes(h.f)):
			count(&h.maintRace, name)
			h.logf("git %s: a pack it had listed was deleted meanwhile (counted apart): %v\n%s", strings.Join(job, " "), err, head(string(out)))
		default:
			count(&h.maintFailed, name)
			h.keep(fmt.Sprintf("git %s failed (seed %d): %v\n%s", strings.Join(job, " "), h.seed, err, head(string(out))))
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// packIndexes lists the pack indexes of the repository.
func packIndexes(f *fixture) map[string]bool {
	names, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "pack", "*.idx"))
	out := map[string]bool{}
	for _, n := range names {
		out[filepath.Base(n)] = true
	}
	return out
}

// gone reports whether a pack of before is not in after.
func gone(before, after map[string]bool) bool {
	for n := range before {
		if !after[n] {
			return true
		}
	}
	return false
}

// refMoved is git's refusal to prune a loose ref that moved since it read it.
var refMoved = regexp.MustCompile(`cannot lock ref '[^']+': is at [0-9a-f]{40} but expected [0-9a-f]{40}$`)

// gitOutput is what git's errors say: a ref locked or moved by another
// process (busy), a pack that vanished under it (vanished lines), the
// steps those stopped (consequences), anything else (other).
type gitOutput struct {
	busy                          bool
	vanished, consequences, other int
}

func (g gitOutput) clean() bool {
	return !g.busy && g.vanished == 0 && g.consequences == 0 && g.other == 0
}

func gitErrors(out string) gitOutput {
	var g gitOutput
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "error:") && !strings.HasPrefix(l, "fatal:") {
			continue
		}
		switch {
		case strings.Contains(l, "cannot lock ref") && (strings.Contains(l, ".lock': File exists") || refMoved.MatchString(l)):
			g.busy = true
		case strings.Contains(l, "cannot open pack index"), strings.Contains(l, "unable to add recent objects"):
			g.vanished++
		case strings.Contains(l, "failed to run pack-refs"), strings.Contains(l, "failed to run repack"),
			strings.Contains(l, "task 'gc' failed"), strings.Contains(l, "task 'pack-refs' failed"):
			g.consequences++
		default:
			g.other++
		}
	}
	if !g.busy && g.vanished == 0 {
		g.other += g.consequences // a step that stopped for no reason given
	}
	return g
}

// readCLI runs the reading commands in turn.
func (h *chaos) readCLI(tasks []string, r int) {
	for i := r; !h.stopped(); i++ {
		task := tasks[h.intn(len(tasks))]
		before := h.before(task)
		var args []string
		var surface string
		switch i % 5 {
		case 0:
			surface, args = "cli verify --task", []string{"audit", "verify", "--task", task, "--output-json"}
		case 1:
			surface, args = "cli verify", []string{"audit", "verify", "--output-json"}
		case 2:
			surface, args = "cli list", []string{"artifact", "list", task, "--output-json"}
			before.rows = -1
		case 3:
			key := []string{"alpha", "beta"}[h.intn(2)]
			surface, args = "cli show", []string{"artifact", "show", task, key, "--output-json"}
			before.versions, before.rows = map[string]int64{key: before.versions[key]}, -1
		case 4:
			surface, args = "cli progress", []string{"task", "progress", task, "--output-json"}
			before.versions = nil
		}
		befores := map[string]seen{task: before}
		if surface == "cli verify" {
			for _, t := range tasks {
				befores[t] = h.before(t)
			}
		}
		cmd := "bernstein " + strings.Join(args, " ")
		out, errOut, code := h.f.cliQuiet(args...)
		if code == -1 && h.stopped() {
			return
		}
		count(&h.reads, surface)
		if code == 1 && strings.Contains(errOut, "has no artifact") && posted(before) == 0 {
			continue // nothing posted yet
		}
		var doc any
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil {
			h.alarm(surface, cmd, fmt.Sprintf("exit %d\n%s%s", code, out, errOut))
			continue
		}
		if bad := falseAlarms(doc); len(bad) > 0 {
			h.alarm(surface, cmd, strings.Join(bad, "\n")+"\n"+out)
			continue
		}
		if !strings.HasPrefix(surface, "cli verify") {
			h.fresh(surface, cmd, task, doc, out, before)
			continue
		}
		// A verify report: each task's result against that task's posts.
		var rep struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		json.Unmarshal([]byte(out), &rep)
		found := 0
		for _, raw := range rep.Tasks {
			var id struct {
				TaskID string `json:"task_id"`
			}
			var one any
			json.Unmarshal(raw, &id)
			json.Unmarshal(raw, &one)
			if b, ok := befores[id.TaskID]; ok && (surface == "cli verify" || id.TaskID == task) {
				found++
				h.fresh(surface, cmd, id.TaskID, one, string(raw), b)
			}
		}
		if want := map[bool]int{true: len(tasks), false: 1}[surface == "cli verify"]; found != want {
			h.alarm(surface, cmd, fmt.Sprintf("%d of the %d tasks in the report\n%s", found, want, out))
		}
	}
}

func handleCall(task string) map[string]any {
	return map[string]any{"name": "bernstein_task_handle", "arguments": map[string]any{"task_id": task}}
}

// readMCP asks the MCP server for task handles until the run stops.
func (h *chaos) readMCP(c *mcpClient, tasks []string) {
	for !h.stopped() {
		task := tasks[h.intn(len(tasks))]
		before := h.before(task)
		before.versions = nil // a handle names no versions, only journal rows
		res, line, err := c.call("tools/call", handleCall(task))
		cmd := fmt.Sprintf("MCP tools/call bernstein_task_handle {task_id: %s}", task)
		count(&h.reads, "mcp handle")
		if err != nil {
			h.alarm("mcp", cmd, err.Error()+"\n"+line+"\n"+c.stderr.String())
			return
		}
		var doc any
		if err := json.Unmarshal(res, &doc); err != nil {
			h.alarm("mcp", cmd, err.Error()+"\n"+line)
			continue
		}
		h.check("mcp", cmd, task, doc, line, before)
		var hd struct {
			StructuredContent struct {
				SpineHead string `json:"spineHead"`
			} `json:"structuredContent"`
		}
		json.Unmarshal(res, &hd)
		if sh := hd.StructuredContent.SpineHead; sh != "" {
			h.mu.Lock()
			if _, ok := h.heads[sh]; !ok {
				h.heads[sh] = cmd
			}
			h.mu.Unlock()
		}
		h.pause()
	}
}

// readHTTP reads the task API of the server until the run stops.
func (h *chaos) readHTTP(srv *serveProc, tasks []string) {
	client := &http.Client{Timeout: 2 * time.Minute}
	for i := 0; !h.stopped(); i++ {
		task := tasks[h.intn(len(tasks))]
		before := h.before(task)
		var path, surface string
		switch i % 4 {
		case 0:
			surface, path = "http task", taskPath(task)
		case 1:
			surface, path = "http artifacts", taskPath(task)+"/artifacts"
			before.rows = -1
		case 2:
			key := []string{"alpha", "beta"}[h.intn(2)]
			surface, path = "http artifact", taskPath(task)+"/artifacts/"+url.PathEscape(key)
			if before.versions[key] == 0 {
				continue // it may not exist yet: a 404
			}
			before.versions, before.rows = map[string]int64{key: before.versions[key]}, -1
		case 3:
			// The latest rows, each with its proof.
			surface, path = "http journal", fmt.Sprintf("%s/journal?after=%d", taskPath(task), max(-1, before.rows-50))
			before.versions = nil
		}
		doc, raw, err := srv.get(client, path)
		count(&h.reads, surface)
		if err != nil {
			h.alarm("http", "GET "+path, err.Error()+"\n"+raw)
			continue
		}
		h.check("http", "GET "+path, task, doc, raw, before)
		h.pause()
	}
}

// eventCheck follows the event stream: every event's data is judged like
// a read, and each key's artifact events must come once each, in version
// order.
type eventCheck struct {
	h *chaos

	mu         sync.Mutex
	first      map[string]int64            // "task/key" -> the first version the stream carried
	last       map[string]int64            // "task/key" -> the latest
	spine      map[string]map[int64]string // "task/key" -> version -> spine entry hash
	events     int
	artifacts  int
	reconnects int
	changed    chan struct{}
}

func newEventCheck(h *chaos) *eventCheck {
	return &eventCheck{h: h, first: map[string]int64{}, last: map[string]int64{}, spine: map[string]map[int64]string{}, changed: make(chan struct{}, 1)}
}

func (e *eventCheck) on(ev sseEvent) {
	cmd := fmt.Sprintf("GET /api/v1/events: event %d %s", ev.id, ev.typ)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events++
	var doc any
	if err := json.Unmarshal([]byte(ev.data), &doc); err != nil {
		e.h.alarm("sse", cmd, err.Error()+"\n"+ev.data)
		return
	}
	switch ev.typ {
	case "task.reset", "stream.reset":
		e.h.alarm("sse", cmd, ev.data)
		return
	}
	if bad := falseAlarms(doc); len(bad) > 0 {
		e.h.alarm("sse", cmd, strings.Join(bad, "\n")+"\n"+ev.data)
		return
	}
	if ev.typ != "task.artifact" {
		return
	}
	var a struct {
		Task    string `json:"task_id"`
		Key     string `json:"key"`
		Version int64  `json:"version"`
		Spine   string `json:"spine_entry_hash"`
	}
	json.Unmarshal([]byte(ev.data), &a)
	k := a.Task + "/" + a.Key
	e.artifacts++
	if last, ok := e.last[k]; ok && a.Version != last+1 {
		e.h.missed("sse", cmd, fmt.Sprintf("%s v%d follows v%d\n%s", k, a.Version, last, ev.data))
	}
	if _, ok := e.first[k]; !ok {
		e.first[k] = a.Version
		e.spine[k] = map[int64]string{}
	}
	e.last[k] = max(e.last[k], a.Version)
	e.spine[k][a.Version] = a.Spine
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// spines checks the spine entries the stream carried for task's versions
// against the store's ("task key version" -> hash).
func (e *eventCheck) spines(task string, store map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, byVersion := range e.spine {
		if !strings.HasPrefix(k, task+"/") {
			continue
		}
		for v, h := range byVersion {
			id := fmt.Sprintf("%s %s %d", task, strings.TrimPrefix(k, task+"/"), v)
			if store[id] != h {
				e.h.alarm("sse", "GET /api/v1/events", fmt.Sprintf("%s carried spine entry %s, the store holds %q", id, h, store[id]))
			}
		}
	}
}

// await waits until the stream has carried each key's final version.
func (e *eventCheck) await(final map[string]seen, timeout time.Duration) {
	deadline := time.After(timeout)
	for {
		var behind []string
		e.mu.Lock()
		for task, s := range final {
			for key, v := range s.versions {
				if e.last[task+"/"+key] < v {
					behind = append(behind, fmt.Sprintf("%s/%s at v%d of %d", task, key, e.last[task+"/"+key], v))
				}
			}
		}
		e.mu.Unlock()
		if len(behind) == 0 {
			return
		}
		select {
		case <-e.changed:
		case <-deadline:
			sort.Strings(behind)
			e.h.missed("sse", "GET /api/v1/events", fmt.Sprintf("%s after the run the stream is behind: %s", timeout, strings.Join(behind, ", ")))
			return
		}
	}
}

// posted is the number of versions before names.
func posted(s seen) int64 {
	var n int64
	for _, v := range s.versions {
		n += v
	}
	return n
}

func sameSeen(a, b seen) bool {
	if a.rows != b.rows || len(a.versions) != len(b.versions) {
		return false
	}
	for k, v := range a.versions {
		if b.versions[k] != v {
			return false
		}
	}
	return true
}

func head(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
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
