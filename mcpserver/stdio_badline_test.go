package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bernstein/bernstein/mcpserver"
)

// wireReply is one line the server wrote.
type wireReply struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw string
}

// stdioSession is a client speaking raw lines to a stdio server.
type stdioSession struct {
	t    *testing.T
	in   io.WriteCloser
	out  *bufio.Reader
	done chan error
}

func (c *stdioSession) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatalf("write %.80q: %v", line, err)
	}
}

// next reads the next line the server writes (notifications skipped).
func (c *stdioSession) next() wireReply {
	c.t.Helper()
	type res struct {
		line string
		err  error
	}
	for {
		ch := make(chan res, 1)
		go func() {
			l, err := c.out.ReadString('\n')
			ch <- res{l, err}
		}()
		var r res
		select {
		case r = <-ch:
		case <-time.After(20 * time.Second):
			c.t.Fatal("no answer from the server in 20 s")
		}
		if r.err != nil {
			c.t.Fatalf("reading the server: %v (got %q)", r.err, r.line)
		}
		var m wireReply
		if err := json.Unmarshal([]byte(r.line), &m); err != nil {
			c.t.Fatalf("server wrote a line that is not JSON: %q", r.line)
		}
		m.raw = strings.TrimSpace(r.line)
		if m.Method != "" && len(m.ID) == 0 {
			continue // a notification
		}
		return m
	}
}

// call sends a request and returns its answer, failing on anything else.
func (c *stdioSession) call(id int, method, params string) wireReply {
	c.t.Helper()
	line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q}`, id, method)
	if params != "" {
		line = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
	}
	c.send(line)
	m := c.next()
	if string(m.ID) != fmt.Sprint(id) {
		c.t.Fatalf("%s %d: answered %s", method, id, m.raw)
	}
	return m
}

func (c *stdioSession) initialize(version string) {
	c.t.Helper()
	m := c.call(1, "initialize", `{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), `"protocolVersion":"`+version+`"`) {
		c.t.Fatalf("initialize: %s", m.raw)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// close ends the input and waits for the session to end.
func (c *stdioSession) close() {
	c.t.Helper()
	c.in.Close()
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		c.t.Fatal("the session did not end after the input closed")
	}
}

// startStdio runs the stdio server in process over pipes.
func startStdio(t *testing.T, r *repo, agent, tok string) *stdioSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity(agent, tok)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(ctx, mcpserver.StdioTransport(inR, outW))
		outW.Close()
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
	})
	return &stdioSession{t: t, in: inW, out: bufio.NewReader(outR), done: done}
}

// TestStdioMalformedLinesAnswered: a line that is not JSON gets exactly one
// -32700 parse error with id null, JSON that is not a JSON-RPC message one
// -32600, and the server goes on serving the next line; blank lines are
// skipped without an answer.
func TestStdioMalformedLinesAnswered(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	c := startStdio(t, r, "agent-1", tok)
	c.initialize("2025-11-25")

	deep := strings.Repeat("[", 1001) + strings.Repeat("]", 1001)
	cases := []struct {
		line string
		code int
		id   string
	}{
		{`{oops`, -32700, "null"},
		{`not json`, -32700, "null"},
		{`]`, -32700, "null"},
		{`{`, -32700, "null"},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list"`, -32700, "null"},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list"} trailing`, -32700, "null"},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list"}{"jsonrpc":"2.0","id":6,"method":"tools/list"}`, -32700, "null"},
		{"\xff\xfe{}", -32700, "null"},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list",}`, -32700, "null"},
		{`{}`, -32600, "null"},
		{`42`, -32600, "null"},
		{`"tools/list"`, -32600, "null"},
		{`null`, -32600, "null"},
		{`[]`, -32600, "null"},
		{`[1,2]`, -32600, "null"},
		{`{"jsonrpc":"1.0","id":9,"method":"tools/list"}`, -32600, "9"},
		{`{"id":"x","method":"tools/list"}`, -32600, `"x"`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`, -32600, "null"},
		{`{"jsonrpc":"2.0","id":7,"method":5}`, -32600, "7"},
		{`{"jsonrpc":"2.0"}`, -32600, "null"},
		{deep, -32600, "null"},
		// Batches left MCP in 2025-06-18: the SDK would end the session.
		{`[{"jsonrpc":"2.0","id":20,"method":"tools/list"}]`, -32600, "null"},
	}
	id := 100
	for _, tc := range cases {
		c.send(tc.line)
		m := c.next()
		if m.Error == nil || m.Error.Code != tc.code || string(m.ID) != tc.id {
			t.Fatalf("%.60q: answered %s, want error %d with id %s", tc.line, m.raw, tc.code, tc.id)
		}
		if strings.Contains(m.Error.Message, "\n") || m.Error.Message == "" {
			t.Errorf("%.60q: message %q", tc.line, m.Error.Message)
		}
		// Exactly one answer: the next line is the next call's.
		id++
		if a := c.call(id, "tools/list", ""); a.Error != nil || !strings.Contains(string(a.Result), "bernstein_post_artifact") {
			t.Fatalf("after %.60q: tools/list answered %s", tc.line, a.raw)
		}
	}

	// Blank lines are no messages: nothing is answered.
	for _, blank := range []string{"", "   ", "\t", "\r"} {
		c.send(blank)
	}
	if a := c.call(200, "tools/list", ""); a.Error != nil {
		t.Fatalf("after blank lines: %s", a.raw)
	}
	// A line with spaces around a message is that message.
	c.send(`  {"jsonrpc":"2.0","id":201,"method":"tools/list"}  ` + "\r")
	if a := c.next(); string(a.ID) != "201" || a.Error != nil {
		t.Fatalf("padded line: %s", a.raw)
	}

	// The session still writes.
	post := c.call(300, "tools/call", `{"name":"bernstein_post_artifact","arguments":{"task_id":"T-1","key":"k","artifact_type":"report","body":"after the garbage"}}`)
	if !strings.Contains(string(post.Result), `"version":1`) || strings.Contains(string(post.Result), `"isError":true`) {
		t.Fatalf("post: %s", post.raw)
	}
	c.close()
}

// TestStdioMalformedLineInAPipe is the case: initialize, a bad
// line and a request written at once and the input closed: the bad line
// gets its parse error, the request its answer, and the session ends.
func TestStdioMalformedLineInAPipe(t *testing.T) {
	r := newRepo(t)
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`,
		`{oops`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`not json`,
		``,
		`]`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"`, // cut off at the end of input
	}, "\n")
	var out bytes.Buffer
	srv := mcpserver.New(r.store, mcpserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := srv.Run(ctx, mcpserver.StdioTransport(strings.NewReader(in), &out))
	if ctx.Err() != nil {
		t.Fatalf("the session did not end (%v)", err)
	}
	parseErrors, answered := 0, map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m wireReply
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		switch {
		case m.Error != nil && m.Error.Code == -32700 && string(m.ID) == "null":
			parseErrors++
		case m.Error == nil && len(m.Result) > 0:
			answered[string(m.ID)] = true
		default:
			t.Errorf("unexpected line %s", line)
		}
	}
	if parseErrors != 4 || !answered["1"] || !answered["2"] || len(answered) != 2 {
		t.Fatalf("%d parse errors and answers to %v, want 4 and 1, 2:\n%s", parseErrors, answered, out.String())
	}
}

// TestStdioBatchesBeforeMCP20250618: a session on a protocol version that
// still has batches gets a batch of calls answered as one array; batches
// the SDK cannot answer are refused, and the session goes on.
func TestStdioBatchesBeforeMCP20250618(t *testing.T) {
	r := newRepo(t)
	c := startStdio(t, r, "", "")
	c.initialize("2025-03-26")

	c.send(`[{"jsonrpc":"2.0","id":10,"method":"tools/list"},{"jsonrpc":"2.0","id":"eleven","method":"ping"}]`)
	line, err := c.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var batch []wireReply
	if err := json.Unmarshal([]byte(line), &batch); err != nil || len(batch) != 2 {
		t.Fatalf("batch answered %q (%v)", line, err)
	}
	for _, tc := range []string{
		`[{"jsonrpc":"2.0","id":12,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}]`,
		`[{"jsonrpc":"2.0","id":13,"method":"tools/list"},{"jsonrpc":"2.0","id":13,"method":"ping"}]`,
		`[{"jsonrpc":"2.0","id":14,"method":"tools/list"},{}]`,
		`[]`,
	} {
		c.send(tc)
		if m := c.next(); m.Error == nil || m.Error.Code != -32600 || string(m.ID) != "null" {
			t.Fatalf("%s: answered %s", tc, m.raw)
		}
		if a := c.call(15, "tools/list", ""); a.Error != nil {
			t.Fatalf("after %s: %s", tc, a.raw)
		}
	}
	c.close()
}

// TestStdioOverlongLine: a line longer than the SDK's limit is refused
// without being held whole, and the session goes on.
func TestStdioOverlongLine(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 17 MiB")
	}
	r := newRepo(t)
	c := startStdio(t, r, "", "")
	c.initialize("2025-11-25")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.send(`{"jsonrpc":"2.0","id":2,"method":"ping","params":{"s":"` + strings.Repeat("a", 17<<20) + `"}}`)
	}()
	m := c.next()
	wg.Wait()
	if m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "longer than") {
		t.Fatalf("overlong line answered %.200s", m.raw)
	}
	if a := c.call(3, "tools/list", ""); a.Error != nil {
		t.Fatalf("after the overlong line: %s", a.raw)
	}
	c.close()
}

// TestStdioBinaryMalformedLine drives the real `bernstein mcp` binary with
// raw bytes: the bad lines are answered, the next request too, and the
// server exits 0 when its input closes.
func TestStdioBinaryMalformedLine(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	cmd := exec.Command(bernsteinBinary(t), "--repo", r.dir, "mcp", "--agent", "agent-1", "--claim-token", tok)
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+filepath.Join(filepath.Dir(r.dir), "home"))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	c := &stdioSession{t: t, in: in, out: bufio.NewReader(outPipe)}
	c.initialize("2025-11-25")
	for i, bad := range []string{`{oops`, `not json`, `]`} {
		c.send(bad)
		if m := c.next(); m.Error == nil || m.Error.Code != -32700 || string(m.ID) != "null" {
			t.Fatalf("%s answered %s", bad, m.raw)
		}
		if a := c.call(10+i, "tools/list", ""); a.Error != nil {
			t.Fatalf("after %s: %s", bad, a.raw)
		}
	}
	c.send("")
	post := c.call(20, "tools/call", `{"name":"bernstein_post_artifact","arguments":{"task_id":"T-1","key":"k","artifact_type":"report","body":"x"}}`)
	if !strings.Contains(string(post.Result), `"version":1`) {
		t.Fatalf("post: %s", post.raw)
	}
	in.Close()
	// What follows may only be notifications (the post's new resource is
	// announced as it lands, before or after the post's answer): no answer
	// to anything, no stray bytes.
	rest, _ := io.ReadAll(c.out)
	for _, line := range strings.Split(strings.TrimSpace(string(rest)), "\n") {
		var m wireReply
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Method == "" || len(m.ID) != 0 {
			t.Errorf("more output than notifications: %s", line)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bernstein mcp: %v\n%s", err, stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
}
