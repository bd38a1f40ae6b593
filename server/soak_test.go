package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein/server"
)

// The soak test: `bernstein serve` in a child process whose descriptor limit
// is lowered to soakFDs (so that its connection cap is soakFDs/2), under
//   - 200 slowloris connections (headers a byte at a time, or a body that
//     never ends), reconnecting whenever the server drops them;
//   - 3,000 MCP sessions opened with attackers' claim tokens and abandoned;
//   - requests with garbage tokens at full speed, to /mcp and to the API's
//     POST, each of which must be answered 401;
//
// while a real client reads the API and a page, calls MCP tools (posting
// artifacts) and follows the event stream. Every request of the real client
// must get its expected answer (200, an MCP result that is not an error),
// and after each post it waits for that post's event before its next step:
// events keep arriving during the attack, each once. The server's VmRSS
// must stay within soakRSSBound of what it was before; the server must
// never run out of descriptors. BERNSTEIN_SOAK_SECONDS sets how long the
// attack lasts (default 10 s; the sessions flood runs to its end anyway).
const (
	soakFDs       = 256
	soakSlowloris = 200
	soakSessions  = 3000
	soakGarbage   = 8 // goroutines sending garbage tokens
	soakRSSBound  = 64 << 20
)

// soakChild is the server process.
type soakChild struct {
	cmd    *exec.Cmd
	base   string
	stderr *lockedLines
	done   chan struct{}
}

type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *lockedLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func startSoakChild(t *testing.T, repo, home string) *soakChild {
	t.Helper()
	return startServeChild(t, repo, home, soakFDs)
}

// startServeChild runs `bernstein serve` on a free loopback port in a child
// process (with its descriptor limit lowered to fds, unless 0) and waits
// for the URL it prints; the test's cleanup stops it.
func startServeChild(t *testing.T, repo, home string, fds int) *soakChild {
	t.Helper()
	// The shell lowers the limit (soft and hard: Go raises the soft one to
	// the hard one at start) and becomes the server.
	ulimit := ""
	if fds > 0 {
		ulimit = fmt.Sprintf("ulimit -n %d && ", fds)
	}
	cmd := exec.Command("sh", "-c", ulimit+`exec "$0" "$@"`,
		cliBin, "--repo", repo, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+home, "BERNSTEIN_READ_TOKEN=")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &soakChild{cmd: cmd, stderr: &lockedLines{}, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		re := regexp.MustCompile(`serving MCP at (http://\S+)/mcp`)
		for sc.Scan() {
			c.stderr.add(sc.Text())
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-c.done
		}
	})
	select {
	case c.base = <-urlc:
	case <-c.done:
		t.Fatalf("serve exited: %s", c.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve printed no URL: %s", c.stderr)
	}
	return c
}

// status reads a field of /proc/<pid>/status in KiB.
func procStatusKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return -1
}

func openFDs(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

// bearerRT adds a bearer token to every request.
type bearerRT struct {
	token string
	rt    http.RoundTripper
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	attack := 10 * time.Second
	if v := os.Getenv("BERNSTEIN_SOAK_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("BERNSTEIN_SOAK_SECONDS=%q", v)
		}
		attack = time.Duration(n) * time.Second
	}
	tasks := []string{"REAL"}
	for i := range 8 {
		tasks = append(tasks, fmt.Sprintf("ATK-%d", i))
	}
	setup, opts, tokens := limStore(t, tasks...)
	setup.Close()
	child := startSoakChild(t, opts.Repo, opts.Home)
	pid := child.cmd.Process.Pid
	base := child.base
	addr := strings.TrimPrefix(base, "http://")
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, line := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			t.Logf("server: %s", strings.Join(strings.Fields(line), " "))
		}
	}

	// The real client.
	var fail atomic.Int64
	failf := func(format string, args ...any) {
		if fail.Add(1) <= 20 {
			t.Errorf(format, args...)
		}
	}
	realHTTP := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	// (A client Timeout would cut the stream: it covers the body.)
	sres, err := (&http.Client{Transport: &http.Transport{}}).Get(base + server.EventsPath + "?task=REAL")
	if err != nil {
		t.Fatal(err)
	}
	defer sres.Body.Close()
	var evMu sync.Mutex
	seen := map[string]int{} // key@version -> times
	arrived := sync.NewCond(&evMu)
	var streamEnded atomic.Value
	go func() {
		defer func() { streamEnded.Store(time.Now()) }()
		sc := bufio.NewScanner(sres.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		typ := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && typ == server.EventArtifact:
				var d struct {
					Key     string `json:"key"`
					Version int64  `json:"version"`
				}
				json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d)
				evMu.Lock()
				seen[fmt.Sprintf("%s@%d", d.Key, d.Version)]++
				arrived.Broadcast()
				evMu.Unlock()
			}
		}
	}()
	mcpHTTP := &http.Client{Transport: bearerRT{tokens["REAL"], &http.Transport{MaxIdleConnsPerHost: 4}}, Timeout: 30 * time.Second}
	cl := mcp.NewClient(&mcp.Implementation{Name: "real", Version: "1"}, nil)
	ctx := context.Background()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + server.MCPPath, HTTPClient: mcpHTTP, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var posted []string
	var reads, calls, duringAttack atomic.Int64
	var attacking atomic.Bool
	// waitEvent waits for the event of a post (a hang guard, not a time
	// limit: the attack must not stop events).
	waitEvent := func(p string) bool {
		timer := time.AfterFunc(30*time.Second, func() { evMu.Lock(); arrived.Broadcast(); evMu.Unlock() })
		defer timer.Stop()
		deadline := time.Now().Add(30 * time.Second)
		evMu.Lock()
		defer evMu.Unlock()
		for seen[p] == 0 {
			if time.Now().After(deadline) {
				return false
			}
			arrived.Wait()
		}
		return true
	}
	realStep := func(i int) {
		for _, u := range []string{base + "/api/v1/tasks/REAL", base + "/tasks/REAL"} {
			res, err := realHTTP.Get(u)
			if err != nil {
				failf("real client GET %s: %v", u, err)
				continue
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				failf("real client GET %s: %d, want 200", u, res.StatusCode)
			}
			reads.Add(1)
		}
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bernstein_task_handle", Arguments: map[string]any{"task_id": "REAL"}}); err != nil || res.IsError {
			failf("real client task handle: %v %+v", err, res)
		} else {
			calls.Add(1)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bernstein_post_artifact", Arguments: map[string]any{
			"task_id": "REAL", "key": "soak", "artifact_type": "report", "body": fmt.Sprintf("# post %d", i)}})
		if err != nil || res.IsError {
			failf("real client post: %v %+v", err, res)
			return
		}
		calls.Add(1)
		var out struct {
			Key     string `json:"key"`
			Version int64  `json:"version"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		p := fmt.Sprintf("%s@%d", out.Key, out.Version)
		posted = append(posted, p)
		if !waitEvent(p) {
			failf("real client: the event of its post %s did not arrive within 30 s", p)
		} else if attacking.Load() {
			duringAttack.Add(1)
		}
	}
	// After a whole step of the real client (its post's event arrived) the
	// server's caches are warm and its bus runs.
	realStep(0)
	rss0 := procStatusKiB(pid, "VmRSS")

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	var slowDropped, slowDials, garbage, garbageOther, garbageErr, sessOpened, sessRefused atomic.Int64
	var garbageWhy atomic.Value
	var sessWhy atomic.Value
	// dropped is closed (and replaced) each time the server drops a slow
	// connection: a dial that failed waits for a place to free.
	var dropMu sync.Mutex
	dropped := make(chan struct{})
	drop := func() {
		dropMu.Lock()
		close(dropped)
		dropped = make(chan struct{})
		dropMu.Unlock()
	}
	nextDrop := func() <-chan struct{} {
		dropMu.Lock()
		defer dropMu.Unlock()
		return dropped
	}

	// 200 slowloris connections: half trickle headers, half a body that
	// never ends (no token); each redials when the server drops it.
	for i := range soakSlowloris {
		attackers.Add(1)
		go func(i int) {
			defer attackers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				freed := nextDrop()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					select {
					case <-stop:
						return
					case <-freed:
					}
					continue
				}
				slowDials.Add(1)
				head := "GET /api/v1/events HTTP/1.1\r\nHost: " + addr + "\r\n"
				if i%2 == 1 {
					head = "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
				}
				go io.Copy(io.Discard, c)
				_, err = c.Write([]byte(head))
				for err == nil {
					select {
					case <-stop:
						c.Close()
						return
					case <-time.After(200 * time.Millisecond):
					}
					_, err = c.Write([]byte("x"))
				}
				c.Close()
				slowDropped.Add(1)
				drop()
			}
		}(i)
	}
	// Garbage tokens at full speed: half at MCP, half at the API's POST.
	attacking.Store(true)
	for g := range soakGarbage {
		attackers.Add(1)
		go func(g int) {
			defer attackers.Done()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, base+server.MCPPath, strings.NewReader(limInitialize))
				req.Header.Set("Accept", "application/json, text/event-stream")
				if g%2 == 1 {
					req, _ = http.NewRequest(http.MethodPost, base+server.APIPrefix+"/tasks/REAL/artifacts",
						strings.NewReader(`{"key":"garbage","artifact_type":"report","body":"x"}`))
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", fmt.Sprintf("Bearer bct_garbage-%d-%d", g, n))
				res, err := hc.Do(req)
				if err != nil {
					// The connection cap may close an idle kept-alive
					// connection under a request about to be sent.
					garbageErr.Add(1)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusUnauthorized {
					garbage.Add(1)
				} else {
					garbageOther.Add(1)
					garbageWhy.Store(fmt.Sprintf("%s %s", req.URL.Path, res.Status))
				}
			}
		}(g)
	}
	// 3,000 sessions opened with attackers' claim tokens and abandoned.
	var firstMu sync.Mutex
	first := map[string]string{} // session id -> token, the first of each token
	var sessDone sync.WaitGroup
	var next atomic.Int64
	for range 4 {
		sessDone.Add(1)
		go func() {
			defer sessDone.Done()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			for {
				n := next.Add(1)
				if n > soakSessions {
					return
				}
				tok := tokens[fmt.Sprintf("ATK-%d", n%8)]
				req, _ := http.NewRequest(http.MethodPost, base+server.MCPPath, strings.NewReader(limInitialize))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Authorization", "Bearer "+tok)
				res, err := hc.Do(req)
				if err != nil {
					sessRefused.Add(1)
					sessWhy.Store(err.Error())
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				id := res.Header.Get("Mcp-Session-Id")
				if res.StatusCode != http.StatusOK || id == "" {
					sessRefused.Add(1)
					sessWhy.Store(res.Status)
					continue
				}
				sessOpened.Add(1)
				if n <= 8 {
					firstMu.Lock()
					first[id] = tok
					firstMu.Unlock()
				}
			}
		}()
	}

	// Meanwhile: the real client, and the server's memory and descriptors.
	start := time.Now()
	sessionsOver := make(chan struct{})
	go func() { sessDone.Wait(); close(sessionsOver) }()
	rssMax, fdMax := rss0, 0
	for i := 1; ; i++ {
		realStep(i)
		rssMax = max(rssMax, procStatusKiB(pid, "VmRSS"))
		fdMax = max(fdMax, openFDs(pid))
		select {
		case <-sessionsOver:
			if time.Since(start) >= attack {
				goto over
			}
		default:
			if time.Since(start) > 10*attack+2*time.Minute {
				t.Fatal("the sessions flood did not finish")
			}
		}
	}
over:
	took := time.Since(start)
	rss1 := procStatusKiB(pid, "VmRSS")
	attacking.Store(false)
	close(stop)
	attackers.Wait()

	// Every event of the real client's posts arrived, once.
	for _, p := range posted {
		if waitEvent(p) {
			continue
		}
		evMu.Lock()
		missing := 0
		for _, p := range posted {
			if seen[p] == 0 {
				missing++
			}
		}
		evMu.Unlock()
		ended := "still open"
		if e, ok := streamEnded.Load().(time.Time); ok {
			ended = fmt.Sprintf("ended %v after the attack began", e.Sub(start).Round(time.Millisecond))
		}
		t.Errorf("%d of the real client's %d posts never reached its event stream (%s); the server's log:\n%s",
			missing, len(posted), ended, child.stderr)
		break
	}
	evMu.Lock()
	for _, p := range posted {
		if seen[p] > 1 {
			t.Errorf("event %s arrived %d times", p, seen[p])
		}
	}
	evMu.Unlock()
	// The first sessions of each attacker token gave way to later ones.
	evictedFirst := 0
	for id, tok := range first {
		req, _ := http.NewRequest(http.MethodPost, base+server.MCPPath, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Mcp-Session-Id", id)
		if res, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusNotFound {
				evictedFirst++
			}
		}
	}
	if evictedFirst != len(first) {
		t.Errorf("%d of the %d first abandoned sessions still open after %d more", len(first)-evictedFirst, len(first), soakSessions)
	}
	if strings.Contains(child.stderr.String(), "too many open files") {
		t.Errorf("the server ran out of descriptors:\n%s", child.stderr)
	}
	if grow := (rssMax - rss0) << 10; grow > soakRSSBound {
		t.Errorf("VmRSS grew by %d MiB (bound %d MiB)", grow>>20, soakRSSBound>>20)
	}
	if fail.Load() > 0 {
		t.Errorf("the real client failed %d times", fail.Load())
	}
	if duringAttack.Load() < 5 {
		t.Errorf("only %d of the real client's posts had their event while the attack ran", duringAttack.Load())
	}
	if garbage.Load() == 0 || garbageOther.Load() > 0 {
		why, _ := garbageWhy.Load().(string)
		t.Errorf("garbage-token requests: %d answered 401, %d answered otherwise (the last: %s)", garbage.Load(), garbageOther.Load(), why)
	}
	if garbageErr.Load() > garbage.Load()/10 {
		t.Errorf("garbage-token requests: %d failed without an answer, against %d answered", garbageErr.Load(), garbage.Load())
	}
	t.Logf("attack: %v; %d slowloris connections dialled %d times, dropped by the server %d times; %d garbage-token requests answered 401 (%.0f/s; %d other answers, %d without an answer); %d sessions opened and abandoned (%d refused)",
		took.Round(time.Millisecond), soakSlowloris, slowDials.Load(), slowDropped.Load(), garbage.Load(),
		float64(garbage.Load())/took.Seconds(), garbageOther.Load(), garbageErr.Load(), sessOpened.Load(), sessRefused.Load())
	evMu.Lock()
	received := 0
	for _, p := range posted {
		if seen[p] > 0 {
			received++
		}
	}
	evMu.Unlock()
	if why, ok := sessWhy.Load().(string); ok {
		t.Logf("the last session refused: %s", why)
	}
	t.Logf("real client: %d API and page reads, %d MCP calls, %d posts and %d of their events received (%d while the attack ran); failures %d",
		reads.Load(), calls.Load(), len(posted), received, duringAttack.Load(), fail.Load())
	t.Logf("server: VmRSS %d MiB before, %d MiB at most, %d MiB at the end (bound +%d MiB); at most %d descriptors open of %d",
		rss0>>10, rssMax>>10, rss1>>10, soakRSSBound>>20, fdMax, soakFDs)
}
