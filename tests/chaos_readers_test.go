package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The chaos harness's readers (chaos_test.go): how it judges what they
// return, and its clients of the long-running servers.

// Judging what a reader saw.

// falseAlarms lists what in a document a reader returned would claim
// something is wrong: a state or proof that is not verified (a journal
// identity may be unverifiable: the tasks stay open), withheld content,
// "verified": false, failures or rows at fault, a tool error. The run
// writes nothing that is not verified, so each of them is false.
func falseAlarms(doc any) []string {
	var out []string
	flagged := map[string]bool{}
	flag := func(path, what string) {
		if !flagged[path] {
			flagged[path] = true
			out = append(out, path+" = "+what)
		}
	}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				p := path + "." + k
				switch k {
				case "content_withheld":
					if s, _ := c.(string); s != "" {
						flag(p, s)
					}
				case "verified":
					if b, ok := c.(bool); ok && !b {
						flag(p, "false")
					}
				case "isError":
					if b, _ := c.(bool); b {
						flag(p, "true")
					}
				case "failures", "rows_at_fault":
					if a, ok := c.([]any); ok && len(a) > 0 {
						b, _ := json.Marshal(a)
						flag(p, head(string(b)))
					}
				case "tampered", "unverifiable":
					if n, ok := c.(float64); ok && n > 0 {
						flag(p, fmt.Sprint(n))
					}
				case "state", "proof":
					// An artifact version's state, a proof (string or
					// {state, rows_at_fault}).
					_, isVersion := v["version"]
					_, isProof := v["rows_at_fault"]
					if s, ok := c.(string); ok && (isVersion || isProof || k == "proof") && s != "verified" {
						flag(p, fmt.Sprintf("%s (reason: %v)", s, v["reason"]))
					}
				}
				walk(c, p)
			}
		case []any:
			for i, c := range v {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case string:
			if v == "tampered" {
				flag(path, "tampered")
			}
		}
	}
	walk(doc, "")
	sort.Strings(out)
	return out
}

// seen is what a read showed of one task: the latest version of each key,
// the most journal rows it counted (-1: none), and the spine entry of each
// version it named one for ("key version" -> hash).
type seen struct {
	versions map[string]int64
	rows     int64
	spines   map[string]string
}

// seenIn collects, from a document about task, every object carrying a key
// and a version (and its spine entry), and every journal_rows count.
func seenIn(doc any) seen {
	s := seen{versions: map[string]int64{}, rows: -1, spines: map[string]string{}}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			k, kok := v["key"].(string)
			n, nok := v["version"].(float64)
			if kok && nok && int64(n) > s.versions[k] {
				s.versions[k] = int64(n)
			}
			if h, ok := v["spine_entry_hash"].(string); ok && kok && nok && h != "" {
				s.spines[fmt.Sprintf("%s %d", k, int64(n))] = h
			}
			if r, ok := v["journal_rows"].(float64); ok && int64(r) > s.rows {
				s.rows = int64(r)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	return s
}

// The long-running readers: an MCP stdio server and `bernstein serve`.

// mcpClient speaks JSON-RPC lines to a `bernstein mcp` stdio server.
type mcpClient struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
	done   chan struct{}
	next   int
}

func (h *chaos) startMCP() (*mcpClient, error) {
	c := &mcpClient{lines: make(chan string, 16), done: make(chan struct{})}
	c.cmd = exec.Command(cliBin, "--repo", h.f.dir, "mcp")
	c.cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+h.f.home, "BERNSTEIN_AGENT=", "BERNSTEIN_CLAIM_TOKEN=")
	c.cmd.Stderr = &c.stderr
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.cmd.Wait()
	}()
	if _, _, err := c.call("initialize", map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "chaos", "version": "1"},
	}); err != nil {
		c.close()
		return nil, err
	}
	if _, err := fmt.Fprintln(c.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// call sends one request and returns its result and the response line.
func (c *mcpClient) call(method string, params any) (json.RawMessage, string, error) {
	c.next++
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.next, "method": method, "params": params})
	if _, err := c.in.Write(append(req, '\n')); err != nil {
		return nil, "", fmt.Errorf("write to the server: %w", err)
	}
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return nil, "", errors.New("the server closed its output")
			}
			var resp struct {
				ID     *int            `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal([]byte(line), &resp); err != nil {
				return nil, line, fmt.Errorf("not JSON-RPC: %w", err)
			}
			if resp.ID == nil || *resp.ID != c.next {
				continue // a notification, or an answer to nothing we sent
			}
			if resp.Error != nil {
				return nil, line, fmt.Errorf("JSON-RPC error %s", resp.Error)
			}
			return resp.Result, line, nil
		case <-timeout:
			return nil, "", fmt.Errorf("no answer to %s in 2m", method)
		}
	}
}

// close ends the session as a client does (its input ends) and returns the
// server's exit.
func (c *mcpClient) close() error {
	c.in.Close()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
		return errors.New("the server did not exit within 30s of its input ending")
	}
	if !c.cmd.ProcessState.Success() {
		return fmt.Errorf("exit %d: %s", c.cmd.ProcessState.ExitCode(), c.stderr.String())
	}
	return nil
}

// serveProc is a `bernstein serve` on a free loopback port.
type serveProc struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}

	mu     sync.Mutex
	stderr []string
}

var serveURL = regexp.MustCompile(`serving MCP at (http://\S+)/mcp`)

func (h *chaos) startServe() (*serveProc, error) {
	p := &serveProc{done: make(chan struct{})}
	p.cmd = exec.Command(cliBin, "--repo", h.f.dir, "serve", "--addr", "127.0.0.1:0")
	p.cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+h.f.home, "BERNSTEIN_READ_TOKEN=")
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	urlc := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr = append(p.stderr, line)
			p.mu.Unlock()
			if m := serveURL.FindStringSubmatch(line); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			} else if strings.Contains(line, "level=") {
				if strings.Contains(line, "msg=scan") || strings.Contains(line, "msg=feed") || strings.Contains(line, `msg="event log"`) {
					// A scan of the refs, a task's feed or the event log
					// failed while the store was busy: the stream would
					// miss what it was reading.
					h.alarm("serve", "bernstein serve (its log)", line)
				} else {
					h.logf("bernstein serve: %s", line) // the watcher: the machine's, not the store's
				}
			}
		}
		p.cmd.Wait()
	}()
	select {
	case p.base = <-urlc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("serve exited: %s", p.log())
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		return nil, fmt.Errorf("serve printed no URL in 30s: %s", p.log())
	}
}

func (p *serveProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// stop ends the server as an operator does (SIGINT) and returns its exit.
func (p *serveProc) stop() error {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return errors.New("serve did not exit within 30s of SIGINT")
	}
	if !p.cmd.ProcessState.Success() {
		return fmt.Errorf("exit %d: %s", p.cmd.ProcessState.ExitCode(), p.log())
	}
	return nil
}

// get reads path from the server and decodes its JSON.
func (p *serveProc) get(client *http.Client, path string) (any, string, error) {
	resp, err := client.Get(p.base + path)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, string(b), err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, string(b), fmt.Errorf("status %d", resp.StatusCode)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, string(b), err
	}
	return doc, string(b), nil
}

func taskPath(task string) string { return "/api/v1/tasks/" + url.PathEscape(task) }

// sseEvent is one event of /api/v1/events.
type sseEvent struct {
	id   int64
	typ  string
	data string
}

// follow holds the event stream open until ctx ends, reconnecting with
// Last-Event-ID when the server drops it, and hands each event to on; it
// calls connected once the stream first answers.
// It returns the number of reconnections.
func (p *serveProc) follow(ctx context.Context, connected func(), on func(sseEvent)) (int, error) {
	var last int64 = -1
	var once sync.Once
	reconnects := 0
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/api/v1/events", nil)
		if last >= 0 {
			req.Header.Set("Last-Event-ID", fmt.Sprint(last))
		}
		resp, err := http.DefaultClient.Do(req)
		if ctx.Err() != nil {
			return reconnects, nil
		}
		if err != nil {
			return reconnects, err
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return reconnects, fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		once.Do(connected)
		r := bufio.NewReaderSize(resp.Body, 1<<16)
		var ev sseEvent
		var data strings.Builder
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if ev.typ != "" || data.Len() > 0 {
					ev.data = data.String()
					last = ev.id
					on(ev)
				}
				ev, data = sseEvent{}, strings.Builder{}
			case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
			case strings.HasPrefix(line, "id: "):
				fmt.Sscan(strings.TrimPrefix(line, "id: "), &ev.id)
			case strings.HasPrefix(line, "event: "):
				ev.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data.WriteString(strings.TrimPrefix(line, "data: "))
			}
		}
		resp.Body.Close()
		if ctx.Err() != nil {
			return reconnects, nil
		}
		reconnects++
	}
}

// TestChaosJudges: the harness's judges flag what they must, on documents
// as the readers return them, and pass what is sound (a judge that cannot
// fail checks nothing).
func TestChaosJudges(t *testing.T) {
	sound := []string{
		// audit verify --output-json of an open task
		`{"verified":true,"hmac_checked":true,"tasks":[{"task_id":"T-1","journal_identity":"unverifiable","journal_identity_reason":"no journal seal: the task has not reached a terminal transition","journal_rows":3,"artifacts":[{"key":"k","version":1,"journal_index":0,"state":"verified","reason":""}]}],"failures":[],"counts":{"tasks":1,"verified":1,"tampered":0,"unverifiable":0,"failures":0}}`,
		// the MCP task handle
		`{"taskId":"T-1","status":"working","progress":{"journal_rows":3,"proof":{"state":"verified","rows_at_fault":[]}}}`,
		// an artifact event
		`{"key":"k","kind":"artifact_posted","proof":"verified","version":4,"task_id":"T-1"}`,
	}
	for _, doc := range sound {
		var v any
		decodeJSON(t, doc, &v)
		if bad := falseAlarms(v); len(bad) > 0 {
			t.Errorf("%s: flagged %v", doc, bad)
		}
	}
	wrong := map[string]string{
		`{"artifacts":[{"key":"k","version":2,"state":"tampered","reason":"x"}]}`:               ".artifacts[0].state",
		`{"artifacts":[{"key":"k","version":2,"state":"unverifiable","reason":"x"}]}`:           ".artifacts[0].state",
		`{"payload":null,"content_withheld":"journal lacks rows its spine seals","history":[]}`: ".content_withheld",
		`{"task":"T","verified":false,"reason":"chain broken"}`:                                 ".verified",
		`{"progress":{"proof":{"state":"tampered","rows_at_fault":[{"index":3}]}}}`:             ".progress.proof.state",
		`{"progress":{"proof":{"state":"verified","rows_at_fault":[{"index":3}]}}}`:             ".progress.proof.rows_at_fault",
		`{"content":[{"type":"text","text":"invalid task_id"}],"isError":true}`:                 ".isError",
		`{"proof":"unverifiable","version":3}`:                                                  ".proof",
		`{"failures":[{"check":"spine_binding"}],"verified":true}`:                              ".failures",
		`{"counts":{"tampered":1}}`:                                                             ".counts.tampered",
		`{"journal_identity":"tampered"}`:                                                       ".journal_identity",
	}
	for doc, path := range wrong {
		var v any
		decodeJSON(t, doc, &v)
		bad := falseAlarms(v)
		if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), path) {
			t.Errorf("%s: flagged %v, want %s", doc, bad, path)
		}
	}

	var v any
	decodeJSON(t, `{"tasks":[{"task_id":"T","journal_rows":7,"artifacts":[{"key":"a","version":1,"spine_entry_hash":"sha256:1"},{"key":"a","version":2},{"key":"b","version":1}]}]}`, &v)
	if got := seenIn(v); got.rows != 7 || got.versions["a"] != 2 || got.versions["b"] != 1 || len(got.spines) != 1 || got.spines["a 1"] != "sha256:1" {
		t.Errorf("seenIn: %+v", got)
	}

	// git 2.39's output when a writer holds or moved a ref pack-refs prunes
	// (exit 0), when a pack it listed vanished, and failures of other kinds.
	busy := "error: cannot lock ref 'refs/bernstein/journal/T-1': Unable to create '/r/.git/refs/bernstein/journal/T-1.lock': File exists.\n\nAnother git process seems to be running in this repository, e.g.\n" +
		"error: cannot lock ref 'refs/bernstein/audit/w': is at ea0c990ad41d3b6b13ca7c1f27e19af54aa76700 but expected c428bd32d586df06620d121a7be16f8c9a54d5fb\n"
	if g := gitErrors(busy); !g.busy || g.other != 0 || g.vanished != 0 {
		t.Errorf("lock contention read as %+v", g)
	}
	if g := gitErrors(busy + "fatal: failed to run pack-refs\n"); !g.busy || g.other != 0 {
		t.Errorf("gc stopped by lock contention read as %+v", g)
	}
	if g := gitErrors(busy + "fatal: unable to add recent objects\nfatal: failed to run repack\n"); g.vanished != 1 || g.other != 0 {
		t.Errorf("gc stopped by a vanished pack read as %+v", g)
	}
	if g := gitErrors("fatal: cannot open pack index\n"); g.vanished != 1 || g.other != 0 {
		t.Errorf("repack stopped by a vanished pack read as %+v", g)
	}
	for _, out := range []string{
		busy + "fatal: packfile .git/objects/pack/pack-1.pack does not match index\n",
		"fatal: failed to run pack-refs\n",
		"fatal: failed to run repack\n",
		"error: cannot lock ref 'refs/heads/x': reference already exists\n",
	} {
		if g := gitErrors(out); g.other == 0 {
			t.Errorf("%q: no error counted (%+v)", out, g)
		}
	}
	if !gone(map[string]bool{"a.idx": true, "b.idx": true}, map[string]bool{"b.idx": true, "c.idx": true}) || gone(map[string]bool{"b.idx": true}, map[string]bool{"b.idx": true, "c.idx": true}) {
		t.Error("gone")
	}
}
