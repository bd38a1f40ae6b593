package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/server"
)

// The serve section: what `bernstein serve` costs its clients. How long a
// post takes to reach the SSE clients listening on its task (a post in the
// server's own process, and a CLI post from another process, with 1 and
// with 100 subscribers), what 1,000 idle subscribers cost the server in
// memory, and the task detail API on a long history against the CLI's
// `artifact list`. Every figure is set against a baseline of the same run
// (1 subscriber, the server with no subscriber, the CLI); no wall-clock
// limit is asserted. A post that fails, or an event that does not arrive
// (or arrives twice, or out of order), fails the run.

var (
	flagServePosts    = flag.Int("serve-posts", 200, "serve: in-process posts (Store.Post) timed to their SSE event per measurement")
	flagServeCLIPosts = flag.Int("serve-cli-posts", 200, "serve: CLI posts (`bernstein artifact post`, a process each) timed to their SSE event per measurement")
	flagServeSubs     = flag.String("serve-subscribers", "1,100", "serve: SSE clients listening while posts are timed (ratios: last / first)")
	flagServeIdle     = flag.Int("serve-idle", 1000, "serve: idle SSE subscribers whose memory the server's VmRSS shows")
	flagServeVersions = flag.Int("serve-versions", 1000, "serve: versions of the task whose detail API is timed against `artifact list --output-json`")
	flagServeGets     = flag.Int("serve-gets", 5, "serve: warm API requests and CLI runs per round")
)

const (
	serveLatencyGoal = 50 * time.Millisecond // p99, post to event, at the largest subscriber count
	eventTimeout     = 15 * time.Second      // an event later than this is missing
)

// sseEvent is one event as a client dispatched it.
type sseEvent struct {
	id   int64
	typ  string
	data []byte
	at   time.Time // when its terminating blank line was read
}

// sseClient is a real HTTP event-stream reader: it parses the stream's
// id:, event: and data: lines (comments and retry: too) and dispatches an
// event at each blank line, stamped with the time it was read.
type sseClient struct {
	cancel context.CancelFunc
	events chan sseEvent
	ready  chan struct{} // closed at the stream's first comment (the server has subscribed it)
	done   chan struct{} // closed when the stream ended
	err    error         // why it ended (after done)
	last   int64         // the last id seen (the consumer's)
}

func openSSE(hc *http.Client, url string) (*sseClient, error) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("GET %s: %s, %s: %q", url, resp.Status, resp.Header.Get("Content-Type"), body)
	}
	c := &sseClient{cancel: cancel, events: make(chan sseEvent, 64), ready: make(chan struct{}), done: make(chan struct{})}
	go c.read(resp.Body)
	return c, nil
}

func (c *sseClient) read(body io.ReadCloser) {
	defer close(c.done)
	defer body.Close()
	rd := bufio.NewReaderSize(body, 2048)
	var ev sseEvent
	var data []byte
	seen, ready := false, false
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				c.err = err
			}
			return
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) == 0 { // dispatch
			if seen {
				ev.at = time.Now()
				ev.data = data
				c.events <- ev
			}
			ev, data, seen = sseEvent{}, nil, false
			continue
		}
		if line[0] == ':' { // a comment: the preamble or a heartbeat
			if !ready {
				ready = true
				close(c.ready)
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			ev.id, _ = strconv.ParseInt(string(value), 10, 64)
			seen = true
		case "event":
			ev.typ = string(value)
			seen = true
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(append([]byte{}, data...), value...)
			seen = true
		case "retry":
		}
	}
}

func (c *sseClient) close() {
	c.cancel()
	<-c.done
}

// artifactEvent is what a task.artifact event says of its post.
type artifactEvent struct {
	Task         string `json:"task_id"`
	Key          string `json:"key"`
	Version      int64  `json:"version"`
	JournalIndex int64  `json:"journal_index"`
}

// await returns the arrival time of the task.artifact event of key's
// version, which must be the next artifact event on the stream (an earlier
// version again, or a later one first, is a failure).
func (c *sseClient) await(key string, version, index int64, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-c.events:
			if ev.id <= c.last {
				return time.Time{}, fmt.Errorf("event id %d after id %d", ev.id, c.last)
			}
			c.last = ev.id
			if ev.typ != server.EventArtifact {
				continue
			}
			var a artifactEvent
			if err := json.Unmarshal(ev.data, &a); err != nil {
				return time.Time{}, fmt.Errorf("event %d: data %q: %w", ev.id, firstBytes(ev.data, 200), err)
			}
			if a.Task != benchTask || a.Key != key || a.Version != version || a.JournalIndex != index {
				return time.Time{}, fmt.Errorf("event %d is %s %s v%d at journal index %d, want %s %s v%d at %d", ev.id, a.Task, a.Key, a.Version, a.JournalIndex, benchTask, key, version, index)
			}
			return ev.at, nil
		case <-c.done:
			return time.Time{}, fmt.Errorf("the stream ended waiting for %s v%d: %v", key, version, c.err)
		case <-t.C:
			return time.Time{}, fmt.Errorf("no event for %s v%d in %s", key, version, timeout)
		}
	}
}

// openMany opens n clients on url, par at a time, each subscribed (its
// preamble read) when it returns.
func openMany(hc *http.Client, url string, n, par int) ([]*sseClient, error) {
	cs := make([]*sseClient, n)
	err := parallel(n, par, func(i int) error {
		c, err := openSSE(hc, url)
		if err != nil {
			return err
		}
		cs[i] = c
		select {
		case <-c.ready:
			return nil
		case <-c.done:
			return fmt.Errorf("the stream ended before its preamble: %v", c.err)
		case <-time.After(eventTimeout):
			return fmt.Errorf("no preamble in %s", eventTimeout)
		}
	})
	if err != nil {
		closeAll(cs)
		return nil, err
	}
	return cs, nil
}

func closeAll(cs []*sseClient) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.close() }()
		}
	}
	wg.Wait()
}

func sseHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}}
}

// inServer is the server in the bench's own process: server.New over a
// Store, srv.Run watching the refs, server.Serve on a loopback listener.
type inServer struct {
	url  string
	bus  *server.Bus
	stop func() error
}

func startInProcess(s *bernstein.Store) (*inServer, error) {
	srv, err := server.New(s, server.Options{Version: "bench"})
	if err != nil {
		return nil, err
	}
	l, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		srv.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone, serveDone := make(chan error, 1), make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	go func() { serveDone <- server.Serve(ctx, l, srv.Handler()) }()
	return &inServer{url: server.URL(l), bus: srv.Bus(), stop: func() error {
		cancel()
		err := <-serveDone
		if e := <-runDone; err == nil {
			err = e
		}
		if e := srv.Close(); err == nil {
			err = e
		}
		return err
	}}, nil
}

// childServer is `bernstein serve --addr 127.0.0.1:0` in its own process.
type childServer struct {
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	stderr []string
	exited chan struct{}
}

func (b *bench) startServe(dir string) (*childServer, error) {
	cmd := exec.Command(b.bin, "--repo", dir, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = cleanEnv("BERNSTEIN_HOME=" + b.home)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	cs := &childServer{cmd: cmd, exited: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			cs.mu.Lock()
			cs.stderr = append(cs.stderr, line)
			cs.mu.Unlock()
			if _, rest, ok := strings.Cut(line, "serving MCP at "); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					select {
					case urlc <- strings.TrimSuffix(f[0], server.MCPPath):
					default:
					}
				}
			}
		}
		cmd.Wait() // after every read of the pipe
		close(cs.exited)
	}()
	select {
	case cs.url = <-urlc:
		return cs, nil
	case <-cs.exited:
		return nil, fmt.Errorf("bernstein serve exited: %s: %s", cmd.ProcessState, cs.errText())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-cs.exited
		return nil, fmt.Errorf("bernstein serve printed no URL in 30 s: %s", cs.errText())
	}
}

func (c *childServer) errText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.stderr, "; ")
}

// stop ends the server with SIGTERM, as a terminal's ^C would.
func (c *childServer) stop() error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("bernstein serve did not exit 15 s after SIGTERM")
	}
	if !c.cmd.ProcessState.Success() {
		return fmt.Errorf("bernstein serve: %s: %s", c.cmd.ProcessState, c.errText())
	}
	return nil
}

// latRun is one measurement of post to event.
type latRun struct {
	mode      string
	subs      int
	posts     int
	delivered []time.Duration // every (post, subscriber): event arrival - post return (negative: the event came first)
	lastSub   []time.Duration // per post: the last subscriber's
	early     int             // deliveries that arrived before the post returned
	printed   []time.Duration // CLI: every delivery against the moment the CLI's "posted" line was read
	published []time.Duration // per post: the bus publishing its event (an in-process subscriber woken) - post return
	fanout    []time.Duration // every delivery: arrival at the SSE client - the bus publishing it
	post      durations       // the posts' own time
	openSubs  time.Duration   // opening the subscribers
}

// stampWriter keeps what a process prints and when it first printed.
type stampWriter struct {
	buf   bytes.Buffer
	first time.Time
}

func (w *stampWriter) Write(p []byte) (int, error) {
	if w.first.IsZero() {
		w.first = time.Now()
	}
	return w.buf.Write(p)
}

// serveLatency makes posts (in-process or through the CLI) on a fresh
// repository served in this process, subs SSE clients listening to the
// task, and times each post's return to its event's arrival at every client.
// Posts go one at a time, the next when every client has the last.
//
// With follow, the clients read a second server over the same repository
// (a second Store in this process): it follows the first one's event log
// (server/bus.go), so each event goes through the leader's scan, its log
// and the follower's read of it.
func (b *bench) serveLatency(cli, follow bool, subs, posts int) (latRun, error) {
	run := latRun{mode: "in-process", subs: subs, posts: posts}
	if cli {
		run.mode = "CLI"
	}
	if follow {
		run.mode = "follower"
	}
	dir, err := b.mkrepoDir("serve-lat-")
	if err != nil {
		return run, err
	}
	s, tok, err := b.setupStore(dir)
	if err != nil {
		return run, err
	}
	defer s.Close()
	before, err := counts(dir, chainRefs()...)
	if err != nil {
		return run, err
	}
	srv, err := startInProcess(s)
	if err != nil {
		return run, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.stop()
		}
	}()
	url := srv.url
	if follow {
		s2, err := bernstein.Open(bernstein.Options{Repo: dir, Home: b.home})
		if err != nil {
			return run, err
		}
		defer s2.Close()
		fsrv, err := startInProcess(s2)
		if err != nil {
			return run, err
		}
		defer fsrv.stop()
		if fsrv.bus.Leader() || !srv.bus.Leader() {
			return run, fmt.Errorf("the second server leads the event bus: it should follow the first")
		}
		url = fsrv.url
	}
	hc := sseHTTPClient()
	t0 := time.Now()
	clients, err := openMany(hc, url+server.EventsPath+"?task="+benchTask, subs, 32)
	if err != nil {
		return run, fmt.Errorf("%d subscribers: %w", subs, err)
	}
	run.openSubs = time.Since(t0)
	defer closeAll(clients)
	// Where the time goes: a subscriber of the bus itself, in this process,
	// stamps when each event is published (the end of the bus's scan).
	var pubMu sync.Mutex
	pubAt := map[int64]time.Time{}
	pubCtx, pubStop := context.WithCancel(context.Background())
	pubDone := make(chan struct{})
	defer func() { pubStop(); <-pubDone }()
	go func() {
		defer close(pubDone)
		sub := srv.bus.Subscribe(benchTask, -1) // from now on
		for {
			evs, err := sub.Next(pubCtx)
			now := time.Now()
			if err != nil {
				return
			}
			for _, ev := range evs {
				var a artifactEvent
				if ev.Type == server.EventArtifact && json.Unmarshal(ev.Data, &a) == nil {
					pubMu.Lock()
					pubAt[a.Version] = now
					pubMu.Unlock()
				}
			}
		}
	}()
	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	var printedAt time.Time // CLI: when the post's line was read
	post := func(v int) (int64, error) {
		body := bodyOf("serve-"+run.mode, v, histBody)
		if !cli {
			res, err := s.Post(bernstein.PostRequest{Task: benchTask, Key: histKey, Agent: benchAgent, ClaimToken: tok,
				Payload: reportPayload("serve", v, histBody)})
			if err != nil {
				return 0, err
			}
			if res.Version != int64(v) {
				return 0, fmt.Errorf("got v%d, want v%d", res.Version, v)
			}
			return res.JournalIndex, nil
		}
		cmd := exec.Command(b.bin, "--repo", dir, "artifact", "post", benchTask, histKey, "--type", "report",
			"--body", body, "--agent", benchAgent, "--claim-token", tok)
		cmd.Env = env
		var stdout stampWriter
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("bernstein artifact post: %v: %s", err, strings.TrimSpace(stderr.String()))
		}
		if p := fmt.Sprintf("posted %s v%d to %s ", histKey, v, benchTask); !strings.HasPrefix(stdout.buf.String(), p) {
			return 0, fmt.Errorf("bernstein artifact post printed %q, want %q...", strings.TrimSpace(stdout.buf.String()), p)
		}
		printedAt = stdout.first
		return int64(before[chainRefs()[0]] + v - 1), nil
	}
	// Every journal row of the repository so far is the post's index base.
	for v := 1; v <= posts+1; v++ { // version 1 warms up, untimed
		p0 := time.Now()
		index, err := post(v)
		ret := time.Now()
		if err != nil {
			return run, fmt.Errorf("%s post v%d: %w", run.mode, v, err)
		}
		if want := int64(before[chainRefs()[0]] + v - 1); index != want {
			return run, fmt.Errorf("%s post v%d at journal index %d, want %d", run.mode, v, index, want)
		}
		ats := make([]time.Time, len(clients))
		for i, c := range clients {
			at, err := c.await(histKey, int64(v), index, eventTimeout)
			if err != nil {
				return run, fmt.Errorf("%s post v%d, subscriber %d of %d: %w", run.mode, v, i+1, subs, err)
			}
			ats[i] = at
		}
		// The bus published before any client had the event, so its
		// subscriber has stamped it by now (or is about to).
		var pub time.Time
		for wait := time.Now().Add(eventTimeout); pub.IsZero(); time.Sleep(time.Millisecond) {
			pubMu.Lock()
			pub = pubAt[int64(v)]
			pubMu.Unlock()
			if pub.IsZero() && time.Now().After(wait) {
				return run, fmt.Errorf("%s post v%d: the bus's own subscriber never saw it", run.mode, v)
			}
		}
		if v == 1 {
			continue
		}
		var last time.Duration
		for i, at := range ats {
			d := at.Sub(ret)
			if d < 0 {
				run.early++
			}
			if i == 0 || d > last {
				last = d
			}
			run.delivered = append(run.delivered, d)
			run.fanout = append(run.fanout, at.Sub(pub))
			if cli {
				run.printed = append(run.printed, at.Sub(printedAt))
			}
		}
		run.published = append(run.published, pub.Sub(ret))
		run.lastSub = append(run.lastSub, last)
		run.post = append(run.post, ret.Sub(p0))
	}
	closeAll(clients)
	clients = nil
	stopped = true
	if err := srv.stop(); err != nil {
		return run, fmt.Errorf("server: %w", err)
	}
	return run, verifyRepo(dir, before, posts+1)
}

// idleRun is the memory of one child server before and after n idle
// subscribers (KiB).
type idleRun struct {
	n                    int
	base, idle, afterEv  int64 // VmRSS
	hwmBase, hwmIdle     int64 // VmHWM
	open, deliver        time.Duration
	baseHeap, clientHeap uint64 // the bench process's own heap before and after opening (the clients' side)
}

// idleMemory starts `bernstein serve` on a fresh repository, reads its VmRSS
// with no subscriber, opens n SSE connections that stay idle and reads it
// again; then one post (from this process) must reach all n.
func (b *bench) idleMemory(n int) (idleRun, error) {
	r := idleRun{n: n}
	dir, err := b.mkrepoDir("serve-idle-")
	if err != nil {
		return r, err
	}
	s, tok, err := b.setupStore(dir)
	if err != nil {
		return r, err
	}
	defer s.Close()
	before, err := counts(dir, chainRefs()...)
	if err != nil {
		return r, err
	}
	cs, err := b.startServe(dir)
	if err != nil {
		return r, err
	}
	stopped := false
	defer func() {
		if !stopped {
			cs.stop()
		}
	}()
	pid := cs.cmd.Process.Pid
	url := cs.url + server.EventsPath + "?task=" + benchTask
	hc := sseHTTPClient()
	post := func(v int) (int64, error) {
		res, err := s.Post(bernstein.PostRequest{Task: benchTask, Key: histKey, Agent: benchAgent, ClaimToken: tok,
			Payload: reportPayload("serve-idle", v, histBody)})
		if err != nil {
			return 0, fmt.Errorf("post v%d: %w", v, err)
		}
		return res.JournalIndex, nil
	}
	// Warm-up: one subscriber gets one event, so the code paths a stream
	// uses are in memory before the baseline is read.
	warm, err := openMany(hc, url, 1, 1)
	if err != nil {
		return r, err
	}
	index, err := post(1)
	if err != nil {
		closeAll(warm)
		return r, err
	}
	_, err = warm[0].await(histKey, 1, index, eventTimeout)
	closeAll(warm)
	if err != nil {
		return r, fmt.Errorf("warm-up subscriber: %w", err)
	}
	time.Sleep(time.Second)
	if r.base, r.hwmBase, err = procMemory(pid); err != nil {
		return r, err
	}
	r.baseHeap = heapInUse()
	t0 := time.Now()
	clients, err := openMany(hc, url, n, 50)
	if err != nil {
		return r, fmt.Errorf("%d subscribers: %w", n, err)
	}
	r.open = time.Since(t0)
	defer func() { closeAll(clients) }()
	time.Sleep(time.Second) // idle
	if r.idle, r.hwmIdle, err = procMemory(pid); err != nil {
		return r, err
	}
	r.clientHeap = heapInUse()
	// Every one of them is live: one post reaches all n.
	if index, err = post(2); err != nil {
		return r, err
	}
	t1 := time.Now()
	missing := 0
	var first error
	var mu sync.Mutex
	parallel(n, 64, func(i int) error {
		if _, err := clients[i].await(histKey, 2, index, eventTimeout); err != nil {
			mu.Lock()
			missing++
			if first == nil {
				first = fmt.Errorf("subscriber %d: %w", i+1, err)
			}
			mu.Unlock()
		}
		return nil
	})
	r.deliver = time.Since(t1)
	if missing > 0 {
		return r, fmt.Errorf("%d of %d idle subscribers did not get the post's event (first: %v)", missing, n, first)
	}
	if r.afterEv, _, err = procMemory(pid); err != nil {
		return r, err
	}
	closeAll(clients)
	clients = nil
	stopped = true
	if err := cs.stop(); err != nil {
		return r, err
	}
	return r, verifyRepo(dir, before, 2)
}

// heapInUse is this process's heap in use: the clients' side of the idle
// subscribers.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// apiEndpoint is the API the third measurement times: the task detail, or
// (until it has landed) the task's artifact listing.
type apiEndpoint struct {
	path string
	body []byte // the first answer
}

// findAPI asks the server for the detail of the task, then for its
// artifacts; the first that answers 200 is the one timed. A 404 from the
// mux (no such route) means not landed; anything else is a failure.
func findAPI(hc *http.Client, base string) (*apiEndpoint, []string, error) {
	var tried []string
	for _, p := range []string{"/api/v1/tasks/" + benchTask, "/api/v1/tasks/" + benchTask + "/artifacts"} {
		status, body, _, err := apiGet(hc, base+p)
		if err != nil {
			return nil, tried, err
		}
		switch {
		case status == http.StatusOK:
			return &apiEndpoint{path: p, body: body}, tried, nil
		case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
			tried = append(tried, fmt.Sprintf("GET %s: %d %s", p, status, strings.TrimSpace(string(firstBytes(body, 80)))))
		default:
			return nil, tried, fmt.Errorf("GET %s: %d: %s", p, status, firstBytes(body, 300))
		}
	}
	return nil, tried, nil
}

func apiGet(hc *http.Client, url string) (int, []byte, time.Duration, error) {
	t0 := time.Now()
	resp, err := hc.Get(url)
	if err != nil {
		return 0, nil, 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, body, time.Since(t0), err
}

// versionsIn finds, anywhere in a JSON document, the objects naming key
// and a version, and returns each version's state ("" when it names none).
func versionsIn(doc []byte, key string) (map[int64]string, error) {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("not JSON (%q): %w", firstBytes(doc, 200), err)
	}
	out := map[int64]string{}
	var walk func(any)
	walk = func(x any) {
		switch t := x.(type) {
		case map[string]any:
			if k, _ := t["key"].(string); k == key {
				if ver, ok := t["version"].(float64); ok {
					st, _ := t["state"].(string)
					if st == "" {
						st, _ = t["verify_state"].(string)
					}
					if out[int64(ver)] == "" {
						out[int64(ver)] = st
					}
				}
			}
			for _, y := range t {
				walk(y)
			}
		case []any:
			for _, y := range t {
				walk(y)
			}
		}
	}
	walk(v)
	return out, nil
}

// checkAPIDoc checks an API answer on the task of n versions: the artifact
// listing must hold every version, verified; the detail must hold the key,
// verified (it may list only the latest version of each key, or name the
// key without a version object). It returns
// how many versions the document lists.
func checkAPIDoc(path string, doc []byte, n int) (int, error) {
	vs, err := versionsIn(doc, histKey)
	if err != nil {
		return 0, err
	}
	detail := !strings.HasSuffix(path, "/artifacts")
	if len(vs) == 0 && (!detail || !bytes.Contains(doc, []byte(`"`+histKey+`"`))) {
		return 0, fmt.Errorf("no version of %s in %d bytes: %q", histKey, len(doc), firstBytes(doc, 200))
	}
	for v, st := range vs {
		if v < 1 || v > int64(n) || (st != "" && st != "verified") {
			return len(vs), fmt.Errorf("%s v%d is %q (want v1..v%d, verified)", histKey, v, st, n)
		}
	}
	if !detail && len(vs) != n {
		return len(vs), fmt.Errorf("%d versions of %s, want %d", len(vs), histKey, n)
	}
	return len(vs), nil
}

// apiRun is one round of the third measurement.
type apiRun struct {
	cold   time.Duration
	warm   durations
	cli    durations
	cliRSS []int64
}

func runServe(b *bench) error {
	subs, err := parseCounts(*flagServeSubs)
	if err != nil {
		return fmt.Errorf("-serve-subscribers: %w", err)
	}
	sort.Ints(subs)
	if *flagServePosts < 1 || *flagServeCLIPosts < 1 || *flagServeIdle < 1 || *flagServeVersions < 1 || *flagServeGets < 1 || *flagBuildWorkers < 1 {
		return fmt.Errorf("-serve-posts, -serve-cli-posts, -serve-idle, -serve-versions, -serve-gets and -build-workers must be positive")
	}
	b.printf("  workload: task %s claimed by %s, one key %s, report bodies of %d B. %d rounds; medians of the rounds.\n", benchTask, benchAgent, histKey, histBody, *flagRounds)
	b.printf("  SSE clients are real HTTP readers in this process (GET %s?task=%s, parsing id:/event:/data: lines),\n", server.EventsPath, benchTask)
	b.printf("  each event stamped when its blank line is read.\n\n")

	type verdict struct {
		name string
		ok   bool
		text string
	}
	var goals []verdict

	// 1. Post to event.
	modes := []bool{false, true}
	lat := map[string][]latRun{} // by "mode/subs"
	keyOfRun := func(cli bool, n int) string { return fmt.Sprintf("%v/%d", cli, n) }
	for round := 0; round < *flagRounds; round++ {
		var line []string
		for mi := range modes {
			cli := modes[(mi+round)%len(modes)]
			for si := range subs {
				n := subs[si]
				if round%2 == 1 {
					n = subs[len(subs)-1-si]
				}
				posts := *flagServePosts
				if cli {
					posts = *flagServeCLIPosts
				}
				r, err := b.serveLatency(cli, false, n, posts)
				if err != nil {
					return fmt.Errorf("post to event: %w", err)
				}
				lat[keyOfRun(cli, n)] = append(lat[keyOfRun(cli, n)], r)
				line = append(line, fmt.Sprintf("%s/%d p99 %s", r.mode, n, msShort(percentile(r.delivered, 99))))
			}
		}
		b.printf("  round %d (post to event, ms): %s\n", round+1, strings.Join(line, ", "))
	}
	b.printf("\n  1. post to event: from the post's return (Store.Post returning in this process; the CLI process exiting, as a\n")
	b.printf("  script sees it) to the event's arrival at each SSE client; negative when the event came first. The server runs\n")
	b.printf("  in this process (server.New, srv.Run, server.Serve on 127.0.0.1:0) over the Store the in-process posts use.\n")
	b.printf("  Posts one at a time, each to every client before the next; percentiles over every (post, subscriber)\n")
	b.printf("  delivery; 'last p99': per post its slowest subscriber; 'before': deliveries ahead of the return. Median of rounds.\n")
	b.printf("    %-11s %5s %6s %9s %10s %10s %9s %9s %7s %9s\n", "post", "subs", "posts", "post p50", "event p50", "event p99", "last p99", "max", "before", "x p99")
	medDur := func(rs []latRun, f func(latRun) time.Duration) time.Duration {
		var d durations
		for _, r := range rs {
			d = append(d, f(r))
		}
		return d.median()
	}
	p99s := map[string]time.Duration{}
	for _, cli := range modes {
		for _, n := range subs {
			rs := lat[keyOfRun(cli, n)]
			p50 := medDur(rs, func(r latRun) time.Duration { return percentile(r.delivered, 50) })
			p99 := medDur(rs, func(r latRun) time.Duration { return percentile(r.delivered, 99) })
			p99s[keyOfRun(cli, n)] = p99
			last99 := medDur(rs, func(r latRun) time.Duration { return percentile(r.lastSub, 99) })
			mx := medDur(rs, func(r latRun) time.Duration { return maxDuration(r.delivered) })
			pp := medDur(rs, func(r latRun) time.Duration { return r.post.median() })
			early, all := 0, 0
			for _, r := range rs {
				early, all = early+r.early, all+len(r.delivered)
			}
			x := "(base)"
			if n != subs[0] {
				x = dratio(p99, p99s[keyOfRun(cli, subs[0])])
			}
			b.printf("    %-11s %5d %6d %9s %10s %10s %9s %9s %6.0f%% %9s\n", rs[0].mode, n, rs[0].posts, msShort(pp), msShort(p50), msShort(p99),
				msShort(last99), msShort(mx), 100*float64(early)/float64(all), x)
		}
	}
	b.printf("    (ms; x p99: against %d subscriber(s), same kind of post, same run)\n", subs[0])
	b.printf("    CLI posts from the moment their 'posted' line was read (the post returned inside the process, which then\n")
	b.printf("    closes its store and exits):")
	var sep string
	for _, n := range subs {
		rs := lat[keyOfRun(true, n)]
		b.printf("%s %d subs p50 %s, p99 %s", sep, n, msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.printed, 50) })),
			msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.printed, 99) })))
		sep = ";"
	}
	b.printf(" ms\n    where the time goes (a subscriber of the bus in this process stamps each event as the bus publishes it,\n")
	b.printf("    at the end of the scan its ref watch started): post return -> published, per post; published -> SSE client,\n")
	b.printf("    per delivery (the fan-out: wake, write, flush, the client's read)\n")
	for _, cli := range modes {
		for _, n := range subs {
			rs := lat[keyOfRun(cli, n)]
			b.printf("      %-11s %4d subs: published p50 %6s p99 %6s max %6s; fan-out p50 %6s p99 %6s max %6s ms\n", rs[0].mode, n,
				msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.published, 50) })),
				msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.published, 99) })),
				msShort(medDur(rs, func(r latRun) time.Duration { return maxDuration(r.published) })),
				msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.fanout, 50) })),
				msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.fanout, 99) })),
				msShort(medDur(rs, func(r latRun) time.Duration { return maxDuration(r.fanout) })))
		}
	}
	b.printf("    in-process p99 / CLI p99:")
	sep = ""
	for _, n := range subs {
		b.printf("%s %s with %d", sep, dratio(p99s[keyOfRun(false, n)], p99s[keyOfRun(true, n)]), n)
		sep = ","
	}
	b.printf("\n")
	for _, cli := range modes {
		n := subs[len(subs)-1]
		p99, bp99 := p99s[keyOfRun(cli, n)], p99s[keyOfRun(cli, subs[0])]
		goals = append(goals, verdict{fmt.Sprintf("post to event p99, %s post, %d subscribers", lat[keyOfRun(cli, n)][0].mode, n), p99 < serveLatencyGoal,
			fmt.Sprintf("%s (under %s); %s the p99 with %d", ms(p99), ms(serveLatencyGoal), dratio(p99, bp99), subs[0])})
		b.summary(fmt.Sprintf("post to event p99, %s, %d / %d subscribers", lat[keyOfRun(cli, n)][0].mode, n, subs[0]), ms(p99), ms(bp99), dratio(p99, bp99), "p99 < "+ms(serveLatencyGoal), p99 < serveLatencyGoal)
	}

	// 1b. Through a follower.
	fol := map[int][]latRun{}
	for round := 0; round < *flagRounds; round++ {
		var line []string
		for si := range subs {
			n := subs[si]
			if round%2 == 1 {
				n = subs[len(subs)-1-si]
			}
			r, err := b.serveLatency(false, true, n, *flagServePosts)
			if err != nil {
				return fmt.Errorf("post to event through a follower: %w", err)
			}
			fol[n] = append(fol[n], r)
			line = append(line, fmt.Sprintf("%d p99 %s", n, msShort(percentile(r.delivered, 99))))
		}
		b.printf("  round %d (through a follower, ms): %s\n", round+1, strings.Join(line, ", "))
	}
	b.printf("\n  1b. post to event through a follower: the same in-process posts, the clients on a second server over the same\n")
	b.printf("  repository (another Store in this process), which follows the first one's event log: the leader's scan, its\n")
	b.printf("  write of the batch, the follower's read of it and its own read of the rows, then the fan-out.\n")
	b.printf("    %5s %10s %10s %9s %9s %12s\n", "subs", "event p50", "event p99", "last p99", "max", "vs leader p99")
	for _, n := range subs {
		rs := fol[n]
		p99 := medDur(rs, func(r latRun) time.Duration { return percentile(r.delivered, 99) })
		b.printf("    %5d %10s %10s %9s %9s %12s\n", n, msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.delivered, 50) })),
			msShort(p99), msShort(medDur(rs, func(r latRun) time.Duration { return percentile(r.lastSub, 99) })),
			msShort(medDur(rs, func(r latRun) time.Duration { return maxDuration(r.delivered) })), dratio(p99, p99s[keyOfRun(false, n)]))
	}
	b.printf("    (ms; vs leader p99: against the clients of the leader itself, in-process posts, same subscribers, same run)\n")
	nf := subs[len(subs)-1]
	fp99 := medDur(fol[nf], func(r latRun) time.Duration { return percentile(r.delivered, 99) })
	b.summary(fmt.Sprintf("post to event p99 through a follower / the leader, %d subscribers", nf), ms(fp99), ms(p99s[keyOfRun(false, nf)]),
		dratio(fp99, p99s[keyOfRun(false, nf)]), "p99 < "+ms(serveLatencyGoal), fp99 < serveLatencyGoal)

	// 1c. Garbage tokens at the API's POST.
	if err := b.serveGarbage(); err != nil {
		return fmt.Errorf("garbage tokens: %w", err)
	}

	// 2. Memory of idle subscribers.
	var idles []idleRun
	for round := 0; round < *flagRounds; round++ {
		r, err := b.idleMemory(*flagServeIdle)
		if err != nil {
			return fmt.Errorf("idle subscribers: %w", err)
		}
		idles = append(idles, r)
		b.printf("  round %d (idle subscribers): VmRSS %s -> %s with %d\n", round+1, mib(r.base), mib(r.idle), r.n)
	}
	medI := func(f func(idleRun) int64) int64 {
		var v []int64
		for _, r := range idles {
			v = append(v, f(r))
		}
		return medianInt(v)
	}
	n := *flagServeIdle
	base, idle, afterEv := medI(func(r idleRun) int64 { return r.base }), medI(func(r idleRun) int64 { return r.idle }), medI(func(r idleRun) int64 { return r.afterEv })
	per := medI(func(r idleRun) int64 { return (r.idle - r.base) * 1024 / int64(r.n) })
	b.printf("\n  2. %d idle subscribers: `bernstein serve --addr 127.0.0.1:0` as a child process, its VmRSS from /proc/<pid>/status\n", n)
	b.printf("  (baseline: the same server with no subscriber, after one subscriber got one event and left, 1 s idle); then %d\n", n)
	b.printf("  SSE connections opened (50 at a time) from this process, 1 s idle; then one post must reach all of them.\n")
	b.printf("    %-34s %10s %10s\n", "", "VmRSS", "VmHWM")
	b.printf("    %-34s %10s %10s\n", "no subscriber (baseline)", mib(base), mib(medI(func(r idleRun) int64 { return r.hwmBase })))
	b.printf("    %-34s %10s %10s\n", fmt.Sprintf("%d idle subscribers", n), mib(idle), mib(medI(func(r idleRun) int64 { return r.hwmIdle })))
	b.printf("    %-34s %10s\n", "after one event to all of them", mib(afterEv))
	b.printf("    per subscriber: %.1f KiB (VmRSS rise / %d); %s the baseline; opening them took %s, the event reached all\n",
		float64(per)/1024, n, ratio(float64(idle), float64(base)), ms(medDur2(idles, func(r idleRun) time.Duration { return r.open })))
	b.printf("    in %s after the post returned; the clients' side (this process's heap in use) grew by %s\n",
		ms(medDur2(idles, func(r idleRun) time.Duration { return r.deliver })),
		mibBytes(uint64(medI(func(r idleRun) int64 { return int64(r.clientHeap) - int64(r.baseHeap) }))))

	// 3. The task detail API against the CLI.
	if err := b.serveAPI(func(name string, ok bool, text string) { goals = append(goals, verdict{name, ok, text}) }); err != nil {
		return err
	}

	b.printf("\n  goals (information only; a missed goal does not fail the run)\n")
	for _, g := range goals {
		mark := "not met"
		if g.ok {
			mark = "met"
		}
		b.printf("    %-52s %-8s %s\n", g.name, mark, g.text)
	}
	b.printf("\n  notes: every post's version and journal index checked, and every event's (task, key, version, journal index),\n")
	b.printf("  each the next artifact event of its stream, ids increasing; chain lengths and git fsck --strict afterwards. The\n")
	b.printf("  machine is shared, and the clients share its CPUs with the server: only ratios within this run mean anything.\n")
	return nil
}

// serveGarbage times requests with a garbage bearer token, answered 401, at
// the API's POST (which, before its 401, looks in the memoized fold of the
// task posted to for ledger rows at fault, where a forged claim's token
// would be) against the same at /mcp (the token index alone).
func (b *bench) serveGarbage() error {
	const n = 2000
	dir, err := b.mkrepoDir("serve-garbage-")
	if err != nil {
		return err
	}
	s, _, err := b.setupStore(dir)
	if err != nil {
		return err
	}
	defer s.Close()
	srv, err := startInProcess(s)
	if err != nil {
		return err
	}
	defer srv.stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	type target struct {
		name, path, body string
	}
	targets := []target{
		{"POST /mcp", server.MCPPath, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`},
		{"POST /api/v1/tasks/T/artifacts", server.APIPrefix + "/tasks/" + benchTask + "/artifacts", `{"key":"k","artifact_type":"report","body":"x"}`},
	}
	per := map[string][]time.Duration{}
	for round := 0; round < *flagRounds; round++ {
		for ti := range targets {
			tg := targets[(ti+round)%len(targets)]
			t0 := time.Now()
			for i := 0; i < n; i++ {
				req, _ := http.NewRequest(http.MethodPost, srv.url+tg.path, strings.NewReader(tg.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Authorization", fmt.Sprintf("Bearer bct_garbage-%d-%d", round, i))
				res, err := hc.Do(req)
				if err != nil {
					return err
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusUnauthorized {
					return fmt.Errorf("%s with a garbage token: %d, want 401", tg.name, res.StatusCode)
				}
			}
			per[tg.name] = append(per[tg.name], time.Since(t0)/n)
		}
	}
	med := func(name string) time.Duration { return durations(per[name]).median() }
	mcp, api := med(targets[0].name), med(targets[1].name)
	b.printf("\n  1c. garbage bearer tokens, %d requests one after another on one connection (in-process server, a healthy\n", n)
	b.printf("  task), each answered 401: per request, median of rounds. The API's POST first looks in the memoized fold of the\n")
	b.printf("  task for ledger rows at fault (where a forged claim's token would be: it is then refused and audited).\n")
	b.printf("    %-34s %10s\n", targets[0].name+" (the token index)", fmt.Sprintf("%.1f µs", float64(mcp)/float64(time.Microsecond)))
	b.printf("    %-34s %10s  %s /mcp\n", targets[1].name, fmt.Sprintf("%.1f µs", float64(api)/float64(time.Microsecond)), dratio(api, mcp))
	b.summary("garbage-token 401: API POST / MCP", ms(api), ms(mcp), dratio(api, mcp), "", true)
	return nil
}

func medDur2[T any](rs []T, f func(T) time.Duration) time.Duration {
	var d durations
	for _, r := range rs {
		d = append(d, f(r))
	}
	return d.median()
}

// serveAPI times the task API on a task of -serve-versions versions: a
// fresh `bernstein serve` per round, its first request (cold) and the next
// ones (warm), against `bernstein artifact list T --output-json` (a fresh
// process each run) on the same repository.
func (b *bench) serveAPI(goal func(name string, ok bool, text string)) error {
	nv := *flagServeVersions
	r, err := b.buildHistory(nv, nil, 0, *flagBuildWorkers)
	if err != nil {
		return fmt.Errorf("build %d versions: %w", nv, err)
	}
	b.printf("\n  3. the task API on %s with %d versions of %s (built in %s): a fresh `bernstein serve` each round, its first\n", benchTask, nv, histKey, r.build.Round(10*time.Millisecond))
	b.printf("  request (cold) and %d more (warm, median), against `bernstein artifact list %s --output-json` (fresh process each\n", *flagServeGets, benchTask)
	b.printf("  run, %d per round) on the same repository, with the server stopped.\n", *flagServeGets)
	env := cleanEnv("BERNSTEIN_HOME=" + b.home)
	list := func() (procRun, error) {
		pr, err := b.runProc(env, false, b.bin, "--repo", r.dir, "artifact", "list", benchTask, "--output-json")
		if err != nil {
			return pr, err
		}
		if pr.exit != 0 {
			return pr, fmt.Errorf("artifact list exited %d: %s", pr.exit, pr.stderr)
		}
		return pr, checkHistList(pr.stdout, nv)
	}
	// Untimed: one CLI run and one server that answers once, so both start
	// from the same state (the fold cache, the bus's log, the page cache).
	if _, err := list(); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	cs, err := b.startServe(r.dir)
	if err != nil {
		return err
	}
	ep, tried, err := findAPI(sseHTTPClient(), cs.url)
	if err == nil && ep != nil {
		var listed int
		if listed, err = checkAPIDoc(ep.path, ep.body, nv); err == nil {
			b.printf("  GET %s: %d bytes, %d versions of %s listed\n", ep.path, len(ep.body), listed, histKey)
		}
	}
	time.Sleep(300 * time.Millisecond) // the bus's first scan writes its log
	if e := cs.stop(); err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("task API: %w", err)
	}
	if ep == nil {
		b.printf("    skipped: the API has not landed (%s)\n", strings.Join(tried, "; "))
		return nil
	}
	var runs []apiRun
	for round := 0; round < *flagRounds; round++ {
		var ar apiRun
		server := func() error {
			cs, err := b.startServe(r.dir)
			if err != nil {
				return err
			}
			defer cs.stop()
			time.Sleep(300 * time.Millisecond) // let it settle: the bus's start-up scan
			hc := sseHTTPClient()
			for i := 0; i <= *flagServeGets; i++ {
				status, body, took, err := apiGet(hc, cs.url+ep.path)
				if err != nil {
					return err
				}
				if status != http.StatusOK {
					return fmt.Errorf("GET %s: %d: %s", ep.path, status, firstBytes(body, 300))
				}
				if _, err := checkAPIDoc(ep.path, body, nv); err != nil {
					return fmt.Errorf("GET %s: %w", ep.path, err)
				}
				if i == 0 {
					ar.cold = took
				} else {
					ar.warm = append(ar.warm, took)
				}
			}
			return cs.stop()
		}
		cli := func() error {
			for i := 0; i < *flagServeGets; i++ {
				pr, err := list()
				if err != nil {
					return err
				}
				ar.cli, ar.cliRSS = append(ar.cli, pr.wall), append(ar.cliRSS, pr.rss)
			}
			return nil
		}
		steps := []func() error{server, cli}
		if round%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("task API: %w", err)
			}
		}
		runs = append(runs, ar)
		b.printf("  round %d (task API): cold %s, warm %s, CLI %s ms\n", round+1, msShort(ar.cold), msShort(ar.warm.median()), msShort(ar.cli.median()))
	}
	cold := medDur2(runs, func(a apiRun) time.Duration { return a.cold })
	warm := medDur2(runs, func(a apiRun) time.Duration { return a.warm.median() })
	cliT := medDur2(runs, func(a apiRun) time.Duration { return a.cli.median() })
	var rss []int64
	for _, a := range runs {
		rss = append(rss, a.cliRSS...)
	}
	b.printf("    %-44s %10s %8s\n", "", "time", "vs CLI")
	b.printf("    %-44s %10s %8s\n", "GET "+strings.Replace(ep.path, benchTask, "T", 1)+", first request (cold)", ms(cold), dratio(cold, cliT))
	b.printf("    %-44s %10s %8s\n", "GET "+strings.Replace(ep.path, benchTask, "T", 1)+", warm", ms(warm), dratio(warm, cliT))
	b.printf("    %-44s %10s %8s   (peak RSS %s)\n", "artifact list T --output-json (process)", ms(cliT), "(base)", mibOr(medianInt(rss)))
	goal(fmt.Sprintf("GET %s warm vs artifact list", strings.Replace(ep.path, benchTask, "T", 1)), warm < cliT,
		fmt.Sprintf("%s (cold %s)", dratio(warm, cliT), dratio(cold, cliT)))
	b.summary(fmt.Sprintf("GET %s warm: artifact list process / GET", strings.Replace(ep.path, benchTask, "T", 1)), ms(warm), ms(cliT), dratio(cliT, warm), "> 1x", warm < cliT)
	return nil
}
