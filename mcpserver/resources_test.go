package mcpserver_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/mcpserver"
)

// resClient is a client session that records resource notifications.
type resClient struct {
	t       *testing.T
	cs      *mcp.ClientSession
	updated chan string
	listed  chan struct{}
}

func connectRes(t *testing.T, srv *mcp.Server) *resClient {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &resClient{t: t, updated: make(chan string, 100), listed: make(chan struct{}, 100)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "res-client", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			c.updated <- req.Params.URI
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { c.listed <- struct{}{} },
	})
	// The protocol version the TypeScript SDK speaks (resources/subscribe;
	// the 2026-07-28 draft subscribes through subscriptions/listen).
	cs, err := cl.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	c.cs = cs
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return c
}

func (c *resClient) uris() []string {
	c.t.Helper()
	var out []string
	for r, err := range c.cs.Resources(context.Background(), nil) {
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, r.URI)
	}
	return out
}

func (c *resClient) read(uri string) (*mcp.ReadResourceResult, error) {
	return c.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
}

// waitUpdated waits for a notifications/resources/updated about uri.
func (c *resClient) waitUpdated(uri string) {
	c.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case u := <-c.updated:
			if u == uri {
				return
			}
		case <-deadline:
			c.t.Fatalf("no notifications/resources/updated for %s", uri)
		}
	}
}

// TestResourcesListReadSubscribe: the versions of the caller's claimed task
// are listed and read (re-verified), a post's result links its version, and
// subscribers of the key and of the task hear of a post made by another
// store (another process's post, seen through the refs).
func TestResourcesListReadSubscribe(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	r.createTask("T-2")
	tok := r.claim("T-1", "agent-1")
	tok2 := r.claim("T-2", "agent-2")
	if _, err := r.store.Post(bernstein.PostRequest{Task: "T-2", Key: "other", Agent: "agent-2", ClaimToken: tok2,
		Payload: reportPayload("not yours")}); err != nil {
		t.Fatal(err)
	}
	srv := mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity("agent-1", tok)})
	c := connectRes(t, srv)
	if got := c.uris(); len(got) != 0 {
		t.Fatalf("resources before any post: %v", got)
	}

	// A post over MCP: its result links the new version.
	res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolPostArtifact, Arguments: report("T-1", "notes", "# one")})
	if err != nil || res.IsError {
		t.Fatalf("post: %v %v", err, res)
	}
	var link *mcp.ResourceLink
	for _, ct := range res.Content {
		if l, ok := ct.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	if link == nil || link.URI != "bernstein://T-1/notes/v1" || link.MIMEType != "application/json" {
		t.Fatalf("post result links %+v", link)
	}
	if got := strings.Join(c.uris(), " "); got != "bernstein://T-1/notes/v1" {
		t.Fatalf("resources: %s (another task's versions must not be listed)", got)
	}
	rr, err := c.read(link.URI)
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &payload); err != nil || payload["body"] != "# one" {
		t.Fatalf("read %s: %q %v", link.URI, rr.Contents[0].Text, err)
	}
	if rr.Contents[0].Meta["state"] != "verified" {
		t.Fatalf("read meta: %v", rr.Contents[0].Meta)
	}

	// Subscriptions to the key and to the task; a post by another store
	// on the same repository (as another process would).
	for _, u := range []string{"bernstein://T-1/notes/latest", "bernstein://T-1"} {
		if err := c.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: u}); err != nil {
			t.Fatalf("subscribe %s: %v", u, err)
		}
	}
	other, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: filepath.Join(filepath.Dir(r.dir), "home")})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Post(bernstein.PostRequest{Task: "T-1", Key: "notes", Agent: "agent-1", ClaimToken: tok, Payload: reportPayload("# two")}); err != nil {
		t.Fatal(err)
	}
	c.waitUpdated("bernstein://T-1/notes/latest")
	c.waitUpdated("bernstein://T-1")
	if got := strings.Join(c.uris(), " "); got != "bernstein://T-1/notes/v1 bernstein://T-1/notes/v2" {
		t.Fatalf("resources after the other post: %s", got)
	}
	rr, err = c.read("bernstein://T-1/notes/latest")
	if err != nil || !strings.Contains(rr.Contents[0].Text, "# two") {
		t.Fatalf("read latest: %v %v", rr, err)
	}

	// Outside the claim scope: reading and subscribing are refused.
	// (Its versions are not this session's resources at all; its latest,
	// through the template, is refused by the scope.)
	if rr, err := c.read("bernstein://T-2/other/v1"); err == nil {
		t.Fatalf("read of another task's version: %v", rr)
	}
	if _, err := c.read("bernstein://T-2/other/latest"); err == nil || !strings.Contains(err.Error(), "claim scope") {
		t.Fatalf("read of another task's latest: %v", err)
	}
	if err := c.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "bernstein://T-2"}); err == nil || !strings.Contains(err.Error(), "claim scope") {
		t.Fatalf("subscribe to another task: %v", err)
	}
	if err := c.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "bernstein://T-1/notes/v1"}); err == nil {
		t.Fatal("subscribe to a version (which never changes) was accepted")
	}
}

// TestResourceReadRefusesTampered: a version whose row no longer verifies is
// an error, never content.
func TestResourceReadRefusesTampered(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	if _, err := r.store.Post(bernstein.PostRequest{Task: "T-1", Key: "notes", Agent: "agent-1", ClaimToken: tok, Payload: reportPayload("kept")}); err != nil {
		t.Fatal(err)
	}
	c := connectRes(t, mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity("agent-1", tok)}))
	if _, err := c.read("bernstein://T-1/notes/v1"); err != nil {
		t.Fatal(err)
	}
	// The row's commit rewritten without its signature, with plain git.
	head := strings.TrimSpace(r.git("rev-parse", "refs/bernstein/journal/T-1"))
	body := r.git("cat-file", "commit", head)
	i := strings.Index(body, "gpgsig ")
	j := strings.Index(body, "-----END SSH SIGNATURE-----\n")
	forged := body[:i] + body[j+len("-----END SSH SIGNATURE-----\n"):]
	id := strings.TrimSpace(r.gitStdin(forged, "hash-object", "-t", "commit", "-w", "--stdin"))
	r.git("update-ref", "refs/bernstein/journal/T-1", id)
	for _, u := range []string{"bernstein://T-1/notes/v1", "bernstein://T-1/notes/latest"} {
		rr, err := c.read(u)
		if err == nil || !strings.Contains(err.Error(), "tampered") {
			t.Fatalf("read %s of a tampered version: %v %v", u, rr, err)
		}
	}
}

func reportPayload(body string) artifact.Payload {
	return artifact.Payload{Type: artifact.TypeReport, Body: body}
}

func (r *repo) gitStdin(stdin string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", r.dir}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}
