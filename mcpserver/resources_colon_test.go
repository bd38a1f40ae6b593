package mcpserver_test

import (
	"context"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/mcpserver"
)

// expectedLatest is the latest URI of task's key as an RFC 6570 library
// (not ours) expands the server's advertised template: the authority one
// for an id without ':', the path one for the others. The URI must parse
// with net/url (the Go SDK refuses to register one that does not) and
// name the task: as its host, or, decoded, as its first path segment.
func expectedLatest(t *testing.T, templates []string, task, key string) string {
	t.Helper()
	want := "bernstein://{task}/{key}/latest"
	if strings.Contains(task, ":") {
		want = "bernstein:///{task}/{key}/latest"
	}
	if !slices.Contains(templates, want) {
		t.Fatalf("templates %v lack %s", templates, want)
	}
	uri, err := uritemplate.MustNew(want).Expand(uritemplate.Values{"task": uritemplate.String(task), "key": uritemplate.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatalf("%s does not parse: %v", uri, err)
	}
	named := u.Host + u.Path
	if u.Host == "" {
		named = strings.TrimPrefix(u.Path, "/")
	}
	if named != task+"/"+key+"/latest" {
		t.Fatalf("%s names %q, not task %s", uri, named, task)
	}
	return uri
}

func templates(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var out []string
	for rt, err := range cs.ResourceTemplates(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rt.URITemplate)
	}
	return out
}

func readBody(c *resClient, uri string) (string, error) {
	rr, err := c.read(uri)
	if err != nil {
		return "", err
	}
	return rr.Contents[0].Text, nil
}

// TestResourcesTaskIDWithColon: tasks whose ids hold ':' (a:b, a: and the
// colon-free a beside them, so that a URI read as the wrong one of them
// shows) are listed, read, linked by a post, followed through the latest
// template and subscriptions, with the URIs their template expands to;
// another spelling of them is refused, never read as another task.
func TestResourcesTaskIDWithColon(t *testing.T) {
	r := newRepo(t)
	tasks := []string{"a:b", "a:", "a"}
	var toks []string
	for _, task := range tasks {
		r.createTask(task)
		toks = append(toks, r.claim(task, "agent-1"))
	}
	c := connectRes(t, mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity("agent-1", toks...)}))
	tmpls := templates(t, c.cs)
	latest := map[string]string{}
	var versions []string
	for _, task := range tasks {
		latest[task] = expectedLatest(t, tmpls, task, "notes")
		res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolPostArtifact, Arguments: report(task, "notes", "body of "+task)})
		if err != nil || res.IsError {
			t.Fatalf("post to %s: %v %v", task, err, res)
		}
		v1 := strings.TrimSuffix(latest[task], "latest") + "v1"
		versions = append(versions, v1)
		if l, ok := res.Content[len(res.Content)-1].(*mcp.ResourceLink); !ok || l.URI != v1 {
			t.Fatalf("the post to %s links %+v, want %s", task, res.Content[len(res.Content)-1], v1)
		}
	}
	slices.Sort(versions)
	if got := c.uris(); !slices.Equal(got, versions) {
		t.Fatalf("resources %v, want %v", got, versions)
	}
	for _, task := range tasks {
		for _, u := range []string{strings.TrimSuffix(latest[task], "latest") + "v1", latest[task]} {
			if body, err := readBody(c, u); err != nil || !strings.Contains(body, `"body of `+task+`"`) {
				t.Fatalf("read %s (task %s): %q %v", u, task, body, err)
			}
		}
	}
	checkOtherSpellings(t, c)

	// Subscriptions to a:b's key and task; posts by another store.
	taskURI := "bernstein:///a%3Ab"
	for _, u := range []string{latest["a:b"], taskURI} {
		if err := c.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: u}); err != nil {
			t.Fatalf("subscribe %s: %v", u, err)
		}
	}
	other, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: filepath.Join(filepath.Dir(r.dir), "home")})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	post := func(body string) {
		if _, err := other.Post(bernstein.PostRequest{Task: "a:b", Key: "notes", Agent: "agent-1", ClaimToken: toks[0], Payload: reportPayload(body)}); err != nil {
			t.Fatal(err)
		}
	}
	post("second of a:b")
	c.waitUpdated(latest["a:b"])
	c.waitUpdated(taskURI)
	if body, err := readBody(c, latest["a:b"]); err != nil || !strings.Contains(body, "second of a:b") {
		t.Fatalf("read %s after the post: %q %v", latest["a:b"], body, err)
	}
	// Unsubscribed from the key: the next post notifies the task only (the
	// key's notification would come first).
	if err := c.cs.Unsubscribe(context.Background(), &mcp.UnsubscribeParams{URI: latest["a:b"]}); err != nil {
		t.Fatal(err)
	}
	post("third of a:b")
	deadline := time.After(20 * time.Second)
	for {
		select {
		case u := <-c.updated:
			if u == latest["a:b"] {
				t.Fatalf("notified of %s after unsubscribing", u)
			}
			if u == taskURI {
				return
			}
		case <-deadline:
			t.Fatalf("no notifications/resources/updated for %s", taskURI)
		}
	}
}

// checkOtherSpellings: the tasks of TestResourcesTaskIDWithColon named
// otherwise than by their URI are neither read nor subscribed to.
func checkOtherSpellings(t *testing.T, c *resClient) {
	t.Helper()
	// Through a template, to the handler: refused, naming the URI.
	for uri, want := range map[string]string{
		"bernstein://a%3Ab/notes/latest":      "bernstein:///a%3Ab/notes/latest",
		"bernstein:///a%3ab/notes/latest":     "bernstein:///a%3Ab/notes/latest",
		"bernstein:///a%3Ab/n%6Ftes/latest":   "bernstein:///a%3Ab/notes/latest",
		"bernstein://a%3A/notes/latest":       "bernstein:///a%3A/notes/latest",
		"bernstein:///a/notes/latest":         "bernstein://a/notes/latest",
		"bernstein:///%61/notes/latest":       "bernstein://a/notes/latest",
		"bernstein://a%3Ab%2Fnotes/x/latest":  "",
		"bernstein:///a%3Ab%2Fnotes/x/latest": "",
	} {
		body, err := readBody(c, uri)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("read %s: %q %v, want an error naming %q", uri, body, err, want)
		}
	}
	// Matching no template or resource: the SDK finds nothing.
	for _, uri := range []string{"bernstein://a:b/notes/latest", "bernstein:///a:b/notes/latest", "bernstein://a:b/notes/v1",
		"bernstein:///a%3ab/notes/v1", "bernstein://a:/notes/latest", "bernstein://a:/notes/v1", "bernstein:///a/notes/v1"} {
		if body, err := readBody(c, uri); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("read %s: %q %v, want not found", uri, body, err)
		}
	}
	for uri, want := range map[string]string{
		"bernstein://a:b":                 "bernstein:///a%3Ab",
		"bernstein:///a:b":                "bernstein:///a%3Ab",
		"bernstein://a%3Ab":               "bernstein:///a%3Ab",
		"bernstein:///a%3ab":              "bernstein:///a%3Ab",
		"bernstein://a:b/notes/latest":    "bernstein:///a%3Ab/notes/latest",
		"bernstein://a:":                  "bernstein:///a%3A",
		"bernstein://a:/notes/latest":     "bernstein:///a%3A/notes/latest",
		"bernstein:///a":                  "bernstein://a",
		"bernstein:///a/notes/latest":     "bernstein://a/notes/latest",
		"bernstein://a/n%6Ftes/latest":    "bernstein://a/notes/latest",
		"bernstein:///a%3Ab/notes/v01":    "v<N> or latest",
		"bernstein:///a%3Ab%2Fnotes/n/v1": "task id",
	} {
		if err := c.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("subscribe %s: %v, want an error naming %q", uri, err, want)
		}
	}
}

// TestResourcesColonClaimScope: a task outside the caller's claim scope is
// refused in every spelling exactly as in its own, and a spelling of the
// caller's a:b never reaches the neighbouring a:c.
func TestResourcesColonClaimScope(t *testing.T) {
	r := newRepo(t)
	r.createTask("a:b")
	r.createTask("a:c")
	tok := r.claim("a:b", "agent-1")
	tok2 := r.claim("a:c", "agent-2")
	if _, err := r.store.Post(bernstein.PostRequest{Task: "a:c", Key: "secret", Agent: "agent-2", ClaimToken: tok2, Payload: reportPayload("not for agent-1")}); err != nil {
		t.Fatal(err)
	}
	c := connectRes(t, mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity("agent-1", tok)}))
	_, refused := c.read("bernstein:///a%3Ac/secret/latest")
	if refused == nil || !strings.Contains(refused.Error(), "task a:c is outside this caller's claim scope") {
		t.Fatalf("read of a:c's latest: %v", refused)
	}
	for _, uri := range []string{"bernstein://a%3Ac/secret/latest", "bernstein:///a%3ac/secret/latest", "bernstein:///a%3Ac/s%65cret/latest",
		"bernstein:///%61%3A%63/secret/latest"} {
		if body, err := readBody(c, uri); err == nil || err.Error() != refused.Error() {
			t.Errorf("read %s: %q %v, want %v", uri, body, err, refused)
		}
	}
	if body, err := readBody(c, "bernstein:///a%3Ac/secret/v1"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("read of a:c's version: %q %v", body, err)
	}
	for canon, spellings := range map[string][]string{
		"bernstein:///a%3Ac":               {"bernstein://a:c", "bernstein:///a:c", "bernstein://a%3Ac", "bernstein:///a%3ac"},
		"bernstein:///a%3Ac/secret/latest": {"bernstein://a:c/secret/latest", "bernstein://a%3Ac/secret/latest", "bernstein:///a%3Ac/s%65cret/latest"},
	} {
		want := c.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: canon})
		if want == nil || !strings.Contains(want.Error(), "task a:c is outside this caller's claim scope") {
			t.Fatalf("subscribe %s: %v", canon, want)
		}
		for _, uri := range spellings {
			if err := c.cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err == nil || err.Error() != want.Error() {
				t.Errorf("subscribe %s: %v, want %v", uri, err, want)
			}
		}
	}
	// The caller's own a:b, in its URI, reads a:b's, not a:c's.
	if _, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolPostArtifact, Arguments: report("a:b", "secret", "mine")}); err != nil {
		t.Fatal(err)
	}
	if body, err := readBody(c, "bernstein:///a%3Ab/secret/latest"); err != nil || !strings.Contains(body, `"mine"`) {
		t.Fatalf("read of a:b's secret: %q %v", body, err)
	}
}
