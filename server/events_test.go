package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/testbin"
	"github.com/bernstein/bernstein/server"
)

// cliBin is the bernstein binary, built once for every package's tests
// (internal/testbin): posts in the event tests come from other processes,
// as they do in use.
var cliBin string

func TestMain(m *testing.M) {
	if dir := os.Getenv("BERNSTEIN_TEST_EVENTLOG_CHILD"); dir != "" {
		if err := server.EventLogChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "eventlog child:", err)
			os.Exit(1)
		}
		fmt.Println("eventlog child ok")
		os.Exit(0)
	}
	var err error
	if cliBin, err = testbin.Path(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// repo is an initialised repository with a claimed task.
type repo struct {
	t           *testing.T
	dir, home   string
	opts        bernstein.Options
	store       *bernstein.Store
	task, token string
}

func newTaskRepo(t *testing.T, task string) *repo {
	t.Helper()
	root := t.TempDir()
	r := &repo{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home"), task: task}
	r.opts = bernstein.Options{Repo: r.dir, Home: r.home}
	if _, err := bernstein.Init(r.opts, "test-writer"); err != nil {
		t.Fatal(err)
	}
	// Commits with trees of their own: a checkpoint of each earns.
	for _, msg := range []string{"first"} {
		if err := os.WriteFile(filepath.Join(r.dir, "work.txt"), []byte(msg+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.git("add", "work.txt")
		r.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", msg)
	}
	s, err := bernstein.Open(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r.store = s
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: "events"}); err != nil {
		t.Fatal(err)
	}
	if r.token, err = s.Claim(task, "agent-1"); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	out, err := exec.Command("git", append([]string{"-C", r.dir}, args...)...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// cli runs the bernstein binary in another process.
func (r *repo) cli(args ...string) string {
	r.t.Helper()
	cmd := exec.Command(cliBin, append([]string{"--repo", r.dir}, args...)...)
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+r.home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("bernstein %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (r *repo) post(key, body string) {
	r.t.Helper()
	r.cli("artifact", "post", r.task, key, "--type", "report", "--body", body, "--agent", "agent-1", "--claim-token", r.token)
}

// serve starts a server (watching) over a fresh store of the repository.
func (r *repo) serve() (*httptest.Server, func()) {
	r.t.Helper()
	return r.serveWith(server.Options{})
}

// serveWith is serve with options o.
func (r *repo) serveWith(o server.Options) (*httptest.Server, func()) {
	r.t.Helper()
	s, err := bernstein.Open(r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	o.Version = "test"
	srv, err := server.New(s, o)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	hs := httptest.NewServer(srv.Handler())
	return hs, func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		<-done
		srv.Close()
		s.Close()
	}
}

// sse is one client of the event stream.
type sse struct {
	t      *testing.T
	res    *http.Response
	events chan sseEvent
	done   chan struct{}
	// bad lists the events whose data does not match the description
	// (openapi.json), reported when the stream is closed.
	mu  sync.Mutex
	bad []string
}

type sseEvent struct {
	ID   string
	Type string
	Data map[string]any
	Raw  string
}

func connect(t *testing.T, url string, lastID string) *sse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	c := &sse{t: t, res: res, events: make(chan sseEvent, 4096), done: make(chan struct{})}
	valid := loadSpec(t).checkStream(t, res)
	go func() {
		defer close(c.done)
		defer close(c.events)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.Type != "" {
					if err := valid(e.Type, e.Raw); err != nil {
						c.mu.Lock()
						c.bad = append(c.bad, err.Error())
						c.mu.Unlock()
					}
					c.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, ":"):
				if strings.Contains(line, "heartbeat") {
					c.events <- sseEvent{Type: "heartbeat"}
				}
			case strings.HasPrefix(line, "id: "):
				e.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				e.Type = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.Raw = strings.TrimPrefix(line, "data: ")
				json.Unmarshal([]byte(e.Raw), &e.Data)
			}
		}
	}()
	return c
}

func (c *sse) close() {
	c.res.Body.Close()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bad {
		c.t.Errorf("event stream: %s", b)
	}
	c.bad = nil
}

// next waits for the next event of a type in types (others are skipped).
func (c *sse) next(types ...string) sseEvent {
	c.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-c.events:
			if !ok {
				c.t.Fatalf("the stream ended waiting for %v", types)
			}
			for _, t := range types {
				if e.Type == t {
					return e
				}
			}
		case <-timeout:
			c.t.Fatalf("no %v event within 20s", types)
		}
	}
}

// TestEventsFromAnotherProcess: a post, a checkpoint and a transition made
// by other processes (the CLI) reach a subscriber as task.artifact,
// task.work, task.progress and task.transition events, in journal order,
// with the run position an artifact was posted at.
func TestEventsFromAnotherProcess(t *testing.T) {
	r := newTaskRepo(t, "E:1")
	hs, stop := r.serve()
	defer stop()
	c := connect(t, hs.URL+server.EventsPath+"?task=E%3A1", "")
	defer c.close()

	r.post("summary", "first findings")
	a := c.next(server.EventArtifact)
	if a.Data["task_id"] != "E:1" || a.Data["key"] != "summary" || a.Data["version"] != float64(1) || a.Data["journal_index"] != float64(0) ||
		a.Data["run_position"] != nil || a.Data["proof"] != "verified" || !strings.HasPrefix(fmt.Sprint(a.Data["spine_entry_hash"]), "sha256:") ||
		!strings.HasPrefix(fmt.Sprint(a.Data["content_hash"]), "sha256:") || a.Data["type"] != "report" {
		t.Fatalf("task.artifact: %s", a.Raw)
	}
	r.cli("task", "start", "E:1")
	tr := c.next(server.EventTransition)
	if tr.Data["kind"] != "task.started" || tr.Data["ledger_index"] != float64(2) {
		t.Fatalf("task.transition: %s", tr.Raw)
	}
	r.cli("checkpoint", "E:1")
	w := c.next(server.EventWork)
	head := r.git("rev-parse", "HEAD")
	if w.Data["kind"] != "checkpoint" || w.Data["journal_index"] != float64(1) || !strings.Contains(w.Raw, head) {
		t.Fatalf("task.work: %s", w.Raw)
	}
	p := c.next(server.EventProgress)
	if p.Data["checkpoints"] != float64(1) || p.Data["task_id"] != "E:1" {
		t.Fatalf("task.progress: %s", p.Raw)
	}
	// A post after the checkpoint is bound to it; it moves no progress.
	r.post("summary", "second findings")
	a2 := c.next(server.EventArtifact, server.EventProgress)
	if a2.Type != server.EventArtifact {
		t.Fatalf("a post moved progress: %s", a2.Raw)
	}
	pos, _ := a2.Data["run_position"].(map[string]any)
	if a2.Data["version"] != float64(2) || pos["commit"] != head || pos["journal_index"] != float64(1) {
		t.Fatalf("task.artifact after a checkpoint: %s", a2.Raw)
	}
}

// TestEventsResume: a client that drops its connection and comes back with
// Last-Event-ID gets every event it missed, once, in order, also when the
// server was restarted meanwhile.
func TestEventsResume(t *testing.T) {
	r := newTaskRepo(t, "R-1")
	hs, stop := r.serve()
	c := connect(t, hs.URL+server.EventsPath, "")
	r.post("k", "v1")
	first := c.next(server.EventArtifact)
	c.close()

	// Missed while disconnected.
	r.post("k", "v2")
	r.post("k", "v3")
	c = connect(t, hs.URL+server.EventsPath, first.ID)
	got := []float64{c.next(server.EventArtifact).Data["version"].(float64), c.next(server.EventArtifact).Data["version"].(float64)}
	if got[0] != 2 || got[1] != 3 {
		t.Fatalf("resumed versions %v, want [2 3]", got)
	}
	last := ""
	r.post("k", "v4")
	e := c.next(server.EventArtifact)
	if e.Data["version"] != float64(4) {
		t.Fatalf("live after resume: %s", e.Raw)
	}
	last = e.ID
	c.close()
	stop()

	// Missed while the server was down; the new server numbers on.
	r.post("k", "v5")
	r.post("k", "v6")
	hs, stop = r.serve()
	defer stop()
	c = connect(t, hs.URL+server.EventsPath, last)
	defer c.close()
	var seen []float64
	for len(seen) < 2 {
		e := c.next(server.EventArtifact)
		seen = append(seen, e.Data["version"].(float64))
		if id(t, e.ID) <= id(t, last) {
			t.Fatalf("event id %s after the restart does not follow %s", e.ID, last)
		}
	}
	if seen[0] != 5 || seen[1] != 6 {
		t.Fatalf("after the restart the client got versions %v, want [5 6]", seen)
	}
	// Nothing twice: the next event is live.
	r.post("k", "v7")
	if e := c.next(server.EventArtifact); e.Data["version"] != float64(7) {
		t.Fatalf("after the missed events: %s", e.Raw)
	}
}

func id(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("event id %q: %v", s, err)
	}
	return n
}

// TestEventsManyClientsManyPosters: 100 clients while 4 processes post 50
// times each. Every client receives every event exactly once, in journal
// order (journal_index and the ids only grow, each key's versions follow
// one another), and nothing after the last one.
func TestEventsManyClientsManyPosters(t *testing.T) {
	if testing.Short() {
		t.Skip("contention")
	}
	r := newTaskRepo(t, "C-1")
	hs, stop := r.serve()
	defer stop()
	const clients, posters, each = 100, 4, 50
	var cs []*sse
	for i := 0; i < clients; i++ {
		cs = append(cs, connect(t, hs.URL+server.EventsPath+"?task=C-1", ""))
	}
	var wg sync.WaitGroup
	for p := 0; p < posters; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				cmd := exec.Command(cliBin, "--repo", r.dir, "artifact", "post", "C-1", fmt.Sprintf("k%d", p), "--type", "report",
					"--body", fmt.Sprintf("post %d of %d", i, p), "--agent", "agent-1", "--claim-token", r.token)
				cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+r.home)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Run(); err != nil {
					t.Errorf("poster %d: %v %s", p, err, out.String())
					return
				}
			}
		}(p)
	}
	wg.Wait()
	for i, c := range cs {
		last := map[string]float64{}
		lastIndex, lastID := float64(-1), int64(0)
		for n := 0; n < posters*each; n++ {
			// Posts move no progress and no ledger: every event of the
			// stream is one of the posts.
			e := c.next(server.EventArtifact, server.EventWork, server.EventTransition, server.EventProgress, server.EventReset, server.EventStreamGap)
			if e.Type != server.EventArtifact {
				t.Fatalf("client %d: event %d is %s %s", i, n, e.Type, e.Raw)
			}
			if n := id(t, e.ID); n <= lastID {
				t.Fatalf("client %d got event %d after %d", i, n, lastID)
			} else {
				lastID = n
			}
			ji, _ := e.Data["journal_index"].(float64)
			if ji <= lastIndex {
				t.Fatalf("client %d: journal index %v after %v", i, ji, lastIndex)
			}
			lastIndex = ji
			key, v := e.Data["key"].(string), e.Data["version"].(float64)
			if v != last[key]+1 {
				t.Fatalf("client %d: %s v%v after v%v", i, key, v, last[key])
			}
			last[key] = v
		}
		if lastIndex != posters*each-1 {
			t.Fatalf("client %d: the last journal index is %v, want %d", i, lastIndex, posters*each-1)
		}
	}
	// Nothing after the last one: the bus scans again (the marker's scan),
	// and every client's next event is the marker's.
	r.post("marker", "after the last post")
	for _, c := range cs {
		c.nextIs("marker", 1)
		c.close()
	}
}

// TestEventsHeartbeat: an idle stream carries heartbeat comments.
func TestEventsHeartbeat(t *testing.T) {
	r := newTaskRepo(t, "H-1")
	hs, stop := r.serveWith(server.WithHeartbeat(server.Options{}, 50*time.Millisecond))
	defer stop()
	c := connect(t, hs.URL+server.EventsPath, "")
	defer c.close()
	c.next("heartbeat")
	c.next("heartbeat")
}

// TestFirstStartPublishesNoHistory: a bus started for the first time over a
// repository with a history takes it as the starting point: no event for
// what was already there, every event for what comes next, numbered from 1.
func TestFirstStartPublishesNoHistory(t *testing.T) {
	r := newTaskRepo(t, "F-1")
	for i := 0; i < 3; i++ {
		r.post("k", fmt.Sprint("before the server ", i))
	}
	s, err := bernstein.Open(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv, err := server.New(s, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// A new log numbers from the clock (milliseconds), so that an id from
	// an earlier log is never taken for one of this log's.
	base := srv.Bus().LastID()
	if now := time.Now().UnixMilli(); base < now-60_000 || base > now {
		t.Fatalf("a new log starts at event %d, want about %d", base, now)
	}
	if err := srv.Bus().Scan(); err != nil {
		t.Fatal(err)
	}
	if id := srv.Bus().LastID(); id != base {
		t.Fatalf("the first scan published %d events for history", id-base)
	}
	r.post("k", "after the server")
	if err := srv.Bus().Scan(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := srv.Bus().Subscribe("", -1).Next(ctxWithNoWait(ctx))
	if err == nil && len(evs) != 0 {
		t.Fatalf("a subscription from now got old events: %+v", evs)
	}
	if id := srv.Bus().LastID(); id != base+1 {
		t.Fatalf("after one post the bus is at event %d, want %d", id, base+1)
	}
	// A page rendered before any event (at the log's start) gets that first
	// one, and so does a client asking for every event (0).
	for _, from := range []int64{base, 0} {
		evs, err = srv.Bus().Subscribe("F-1", from).Next(ctx)
		if err != nil || len(evs) != 1 || evs[0].ID != base+1 || evs[0].Type != server.EventArtifact {
			t.Fatalf("a subscription after event %d: %+v %v", from, evs, err)
		}
	}
}

// ctxWithNoWait is a context that has already ended: Next returns at once.
func ctxWithNoWait(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	cancel()
	return ctx
}

// TestEventsFromGitFetch: rows another host wrote arrive by a plain `git
// fetch` into the served repository and reach the stream like any other.
func TestEventsFromGitFetch(t *testing.T) {
	a := newTaskRepo(t, "G-1")
	a.post("k", "posted on host a before the clone")
	root := t.TempDir()
	b := filepath.Join(root, "b")
	if out, err := exec.Command("git", "clone", "-q", a.dir, b).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	fetch := func() {
		t.Helper()
		if out, err := exec.Command("git", "-C", b, "fetch", "-q", "origin", "refs/bernstein/*:refs/bernstein/*").CombinedOutput(); err != nil {
			t.Fatalf("fetch: %v %s", err, out)
		}
	}
	fetch()
	rb := &repo{t: t, dir: b, home: filepath.Join(root, "home-b"), task: "G-1"}
	rb.opts = bernstein.Options{Repo: b, Home: rb.home}
	hs, stop := rb.serve()
	defer stop()
	c := connect(t, hs.URL+server.EventsPath+"?task=G-1", "")
	defer c.close()
	a.post("k", "posted on host a, fetched by b")
	fetch()
	e := c.next(server.EventArtifact)
	// Host b trusts no key yet: the row is counted as unverifiable.
	if e.Data["version"] != float64(2) || e.Data["proof"] != "unverifiable" || e.Data["writer"] != "test-writer" {
		t.Fatalf("event of a fetched row: %s", e.Raw)
	}
}
