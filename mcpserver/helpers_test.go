package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/record"
)

const writer = "test-writer"

// repo is an initialised repository with a writer identity and two commits
// to checkpoint, opened as a store.
type repo struct {
	t     *testing.T
	dir   string
	store *bernstein.Store
	works int // commits checkpoint made
}

func newRepo(t *testing.T) *repo {
	t.Helper()
	root := t.TempDir()
	opts := bernstein.Options{Repo: filepath.Join(root, "repo"), Home: filepath.Join(root, "home")}
	if _, err := bernstein.Init(opts, writer); err != nil {
		t.Fatalf("init: %v", err)
	}
	r := &repo{t: t, dir: opts.Repo}
	// Two commits, each with a tree of its own: each earns when checkpointed.
	for _, msg := range []string{"first", "second"} {
		if err := os.WriteFile(filepath.Join(r.dir, "work.txt"), []byte(msg+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.git("add", "work.txt")
		r.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", msg)
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	r.store = s
	return r
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", r.dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// refValue is the object id a ref points at ("" when it does not exist).
func (r *repo) refValue(ref string) string {
	r.t.Helper()
	out, err := exec.Command("git", "-C", r.dir, "rev-parse", "--verify", "--quiet", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// bernsteinRefs is every ref under refs/bernstein/ with its value.
func (r *repo) bernsteinRefs() string {
	r.t.Helper()
	return r.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/")
}

// audit returns the entries of the writer's audit mirror, oldest first, as
// plain git reads them from the commit messages.
func (r *repo) audit() []record.AuditEntry {
	r.t.Helper()
	var out []record.AuditEntry
	for _, id := range strings.Fields(r.git("log", "--reverse", "--format=%H", "refs/bernstein/audit/"+writer)) {
		body := r.git("show", "-s", "--format=%B", id)
		parts := strings.SplitN(strings.TrimRight(body, "\n"), "\n\n", 2)
		if len(parts) != 2 {
			r.t.Fatalf("audit commit %s carries no record: %q", id, body)
		}
		e, err := record.ParseAuditEntry([]byte(parts[1]))
		if err != nil {
			r.t.Fatalf("audit commit %s: %v", id, err)
		}
		out = append(out, e)
	}
	return out
}

// lastAudit is the newest audit entry.
func (r *repo) lastAudit() record.AuditEntry {
	r.t.Helper()
	a := r.audit()
	if len(a) == 0 {
		r.t.Fatal("the audit mirror is empty")
	}
	return a[len(a)-1]
}

func (r *repo) createTask(id string, evidence ...string) {
	r.t.Helper()
	spec := bernstein.TaskSpec{ID: id, Title: "task " + id}
	for _, e := range evidence {
		spec.Evidence = append(spec.Evidence, ledgerProducer(e))
	}
	if _, err := r.store.CreateTask(spec); err != nil {
		r.t.Fatalf("create %s: %v", id, err)
	}
}

func (r *repo) claim(task, agent string) string {
	r.t.Helper()
	tok, err := r.store.Claim(task, agent)
	if err != nil {
		r.t.Fatalf("claim %s: %v", task, err)
	}
	return tok
}

func (r *repo) transition(task, kind string) {
	r.t.Helper()
	if _, err := r.store.Transition(task, kind, "", ""); err != nil {
		r.t.Fatalf("%s %s: %v", kind, task, err)
	}
}

// checkpoint commits a change (a tree of its own) and checkpoints it: only
// a new tree earns a step.
func (r *repo) checkpoint(task string) {
	r.t.Helper()
	r.works++
	if err := os.WriteFile(filepath.Join(r.dir, "work.txt"), []byte(fmt.Sprintf("work %d for %s\n", r.works, task)), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.git("add", "work.txt")
	r.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "work for "+task)
	if _, err := r.store.Checkpoint(task, "HEAD", ""); err != nil {
		r.t.Fatalf("checkpoint %s: %v", task, err)
	}
}

// client is an MCP client session connected over the SDK's in-memory
// transport, recording the progress notifications it receives.
type client struct {
	t  *testing.T
	cs *mcp.ClientSession

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	notified chan struct{}
}

func connect(t *testing.T, srv *mcp.Server) *client {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	c := &client{t: t, notified: make(chan struct{}, 1000)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, req.Params)
			c.mu.Unlock()
			c.notified <- struct{}{}
		},
	})
	cs, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	c.cs = cs
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return c
}

// serveAs connects a client to a stdio-style server running as agent with
// the given claim tokens.
func serveAs(t *testing.T, r *repo, agent string, tokens ...string) *client {
	return connect(t, mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity(agent, tokens...)}))
}

// call calls a tool; a protocol error fails the test.
func (c *client) call(tool string, args any) *mcp.CallToolResult {
	c.t.Helper()
	res, err := c.callWith(tool, args, nil)
	if err != nil {
		c.t.Fatalf("%s: protocol error: %v", tool, err)
	}
	return res
}

func (c *client) callWith(tool string, args any, progressToken any) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if progressToken != nil {
		p.SetProgressToken(progressToken)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.cs.CallTool(ctx, p)
}

// ok checks that a result is not an error and decodes its structured content.
func ok[T any](t *testing.T, res *mcp.CallToolResult) T {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	var v T
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	// The text content carries the same document for text-only clients.
	var fromText T
	if err := json.Unmarshal([]byte(text(res)), &fromText); err != nil {
		t.Fatalf("text content is not the structured JSON: %v", err)
	}
	return v
}

// toolErr checks that a result is a tool error and returns its text.
func toolErr(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %s", text(res))
	}
	if res.StructuredContent != nil {
		t.Errorf("a tool error carries structured content: %v", res.StructuredContent)
	}
	return text(res)
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// progressSeen returns the progress notifications received so far.
func (c *client) progressSeen() []*mcp.ProgressNotificationParams {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*mcp.ProgressNotificationParams(nil), c.progress...)
}

// waitProgress waits for the notification carrying token.
func (c *client) waitProgress(token any) *mcp.ProgressNotificationParams {
	c.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		for _, p := range c.progressSeen() {
			if p.ProgressToken == token {
				return p
			}
		}
		select {
		case <-c.notified:
		case <-deadline:
			c.t.Fatalf("no progress notification for token %v (got %d others)", token, len(c.progressSeen()))
		}
	}
}

// postResult is the structured content of a post.
type postResult struct {
	Task            string `json:"task"`
	Key             string `json:"key"`
	Version         int64  `json:"version"`
	Type            string `json:"type"`
	LinkKind        string `json:"link_kind"`
	ContentHash     string `json:"content_hash"`
	Blob            string `json:"blob"`
	Size            int64  `json:"size"`
	SpineEntryHash  string `json:"spine_entry_hash"`
	PrevVersionHash string `json:"prev_version_hash"`
	JournalIndex    int64  `json:"journal_index"`
	Writer          string `json:"writer"`
	Agent           string `json:"agent"`
}

func report(task, key, body string) map[string]any {
	return map[string]any{"task_id": task, "key": key, "artifact_type": artifact.TypeReport, "body": body}
}

func ledgerProducer(name string) ledger.Producer {
	return ledger.Producer{Name: name, Kind: "command", Command: "true", Required: true}
}
