package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/server"
)

// post POSTs body to task's artifacts with authorization ("" for none).
func (c *apiClient) post(task, authorization string, body []byte) (*http.Response, []byte) {
	c.t.Helper()
	hdr := map[string]string{"Content-Type": "application/json"}
	if authorization != "" {
		hdr["Authorization"] = authorization
	}
	res, b := c.do(http.MethodPost, server.APIPrefix+"/tasks/"+task+"/artifacts", body, hdr)
	if res.StatusCode == http.StatusCreated {
		c.spec.checkRequest(c.t, http.MethodPost, "/tasks/{id}/artifacts", body)
	}
	return res, b
}

// wantPostError posts and wants an error with status naming field; it
// returns the error.
func (c *apiClient) wantPostError(task, authorization string, body []byte, status int, field string) server.APIError {
	c.t.Helper()
	res, b := c.post(task, authorization, body)
	var e server.APIError
	if res.StatusCode != status || json.Unmarshal(b, &e) != nil || e.Error.Field != field || e.Error.Message == "" {
		c.t.Errorf("POST %s %.80s: %d %s, want %d naming %q", task, body, res.StatusCode, short(b), status, field)
	}
	return e
}

// bernsteinRefs lists refs/bernstein/* with their values.
func (r *repo) bernsteinRefs() string {
	return r.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/")
}

// lastAudit is the newest entry of the writer's audit mirror.
func (r *repo) lastAudit() record.AuditEntry {
	r.t.Helper()
	body := r.git("show", "-s", "--format=%B", "refs/bernstein/audit/test-writer")
	_, rec, ok := strings.Cut(body, "\n\n")
	if !ok {
		r.t.Fatalf("the audit head carries no record: %q", body)
	}
	a, err := record.ParseAuditEntry([]byte(strings.TrimSpace(rec)))
	if err != nil {
		r.t.Fatal(err)
	}
	return a
}

// wantRefused posts and wants a refusal (status, field) whose reason is
// recorded as the newest audit entry, by agent on task, and that nothing
// but the audit mirror moved.
func (c *apiClient) wantRefused(r *repo, task, token, body string, status int, field, agent, reason string) {
	c.t.Helper()
	before := r.bernsteinRefs()
	auditBefore := r.git("rev-parse", "refs/bernstein/audit/test-writer")
	e := c.wantPostError(url.PathEscape(task), "Bearer "+token, []byte(body), status, field)
	if !strings.Contains(e.Error.Message, "refused ("+reason+")") || !strings.Contains(e.Error.Message, "recorded in the audit mirror") {
		c.t.Errorf("refusal %q does not give reason %s", e.Error.Message, reason)
	}
	a := r.lastAudit()
	var d struct {
		Reason string `json:"reason"`
		Key    string `json:"key"`
	}
	json.Unmarshal(a.Details, &d)
	if a.Event != record.EventArtifactRefused || a.Actor != agent || a.TaskID != task || d.Reason != reason {
		c.t.Errorf("audit entry %+v %s, want artifact.refused by %s on %s for %s", a, a.Details, agent, task, reason)
	}
	after := r.bernsteinRefs()
	auditAfter := r.git("rev-parse", "refs/bernstein/audit/test-writer")
	if strings.Replace(after, auditAfter, auditBefore, 1) != before || r.git("rev-parse", "refs/bernstein/audit/test-writer~1") != auditBefore {
		c.t.Errorf("a refusal moved more than the audit mirror by one entry:\n%s\n%s", before, after)
	}
}

// TestAPIPost: a post with a claim token is stored as the CLI's and MCP's
// are; the receipt comes back with 201 and Location, and the version reads
// back through the API.
func TestAPIPost(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T:1.a")
	c := newAPIClient(t, r)
	auth := "Bearer " + r.token
	for i, p := range []struct {
		body, typ string
	}{
		{`{"key":"summary","artifact_type":"report","body":"# hello\n\n<script>x</script>"}`, "report"},
		{`{"key":"grid","artifact_type":"table","columns":["a","b"],"rows":[["1","2"],["3","4"]]}`, "table"},
		{`{"key":"empty.grid","artifact_type":"table","columns":["a"],"rows":[]}`, "table"},
		{`{"key":"site","artifact_type":"link","url":"https://preview.example.com/","link_kind":"dashboard"}`, "link"},
		{` {"artifact_type":"report","key":"summary","body":"v2"} `, "report"},
	} {
		res, body := c.post("T%3A1.a", auth, []byte(p.body))
		var rec bernstein.PostResult
		if res.StatusCode != http.StatusCreated || json.Unmarshal(body, &rec) != nil {
			t.Fatalf("post %d: %d %s", i, res.StatusCode, body)
		}
		var in struct{ Key string }
		json.Unmarshal([]byte(p.body), &in)
		wantVersion := int64(1)
		if i == 4 {
			wantVersion = 2
		}
		if rec.Task != "T:1.a" || rec.Key != in.Key || rec.Type != p.typ || rec.Agent != "agent-1" || rec.Writer != "test-writer" ||
			rec.JournalIndex != int64(i) || rec.Version != wantVersion {
			t.Errorf("receipt %d: %+v", i, rec)
		}
		loc := res.Header.Get("Location")
		if want := fmt.Sprintf("%s/tasks/T%%3A1.a/artifacts/%s?version=%d", server.APIPrefix, in.Key, wantVersion); loc != want {
			t.Errorf("Location %q, want %q", loc, want)
		}
		var shown bernstein.ArtifactShowDoc
		c.get(strings.TrimPrefix(loc, server.APIPrefix), 200, &shown)
		if shown.State != "verified" || shown.Payload == nil || shown.SpineEntryHash != string(rec.SpineEntryHash) || shown.Actor != "agent-1" {
			t.Errorf("read back %d: %+v", i, shown)
		}
	}
	// The CLI reads the same versions.
	var list bernstein.ArtifactListDoc
	r.cliJSON(&list, "artifact", "list", "T:1.a", "--output-json")
	if len(list.Artifacts) != 5 || !list.Verified {
		t.Errorf("the CLI lists %+v", list)
	}
	// The raw id works too; the key may be ".." inside (not a segment).
	if res, body := c.post("T:1.a", auth, []byte(`{"key":"a..b","artifact_type":"report","body":"x"}`)); res.StatusCode != 201 {
		t.Errorf("raw id: %d %s", res.StatusCode, body)
	}
}

// TestAPIPostRefusals: 401 without a caller (nothing written or recorded),
// 403 and 404 for refusals of the claim (recorded in the audit mirror, as
// over MCP and the CLI), and 400 or 413 for a request that is not one post,
// nothing written (the bad input of every field is TestInputRules's).
func TestAPIPostRefusals(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T:1.a")
	r.cli("task", "create", "T-2")
	tok2 := strings.TrimSpace(r.cli("task", "claim", "T-2", "--agent", "agent-2"))
	r.cli("task", "create", "T-3")
	released := strings.TrimSpace(r.cli("task", "claim", "T-3", "--agent", "agent-1"))
	r.cli("task", "release", "T-3")
	c := newAPIClient(t, r)
	auth := "Bearer " + r.token
	ok := `{"key":"k","artifact_type":"report","body":"b"}`

	// 401: no caller. Nothing is written, nothing recorded.
	before := r.bernsteinRefs()
	for _, a := range []string{"", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", "Bearer bct_nope", "Bearer " + released} {
		res, _ := c.post("T%3A1.a", a, []byte(ok))
		if res.StatusCode == 401 && res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%q: 401 without WWW-Authenticate", a)
		}
		c.wantPostError("T%3A1.a", a, []byte(ok), 401, "claim_token")
	}
	if after := r.bernsteinRefs(); after != before {
		t.Errorf("unauthenticated posts wrote:\n%s\n%s", before, after)
	}

	// 400 and 413: a request that is not one post (the path's task, the
	// body's framing and size), nothing written or recorded. The input
	// rules of every field are TestInputRules's, on every surface.
	cases := []struct {
		task, body string
		status     int
		field      string
	}{
		{"%2E%2E", ok, 400, "task_id"},
		{"a%2F..%2Fb", ok, 400, "task_id"},
		{"T%3A1.a", ``, 400, "request"},
		{"T%3A1.a", `{"key":`, 400, "request"},
		{"T%3A1.a", `[1,2]`, 400, "request"},
		{"T%3A1.a", `"report"`, 400, "request"},
		{"T%3A1.a", `null`, 400, "request"},
		{"T%3A1.a", ok + `{}`, 400, "request"},
		{"T%3A1.a", `{"key":"k","artifact_type":"report","body":"` + strings.Repeat("a", server.MaxPostBytes) + `"}`, 413, "request"},
	}
	for _, cs := range cases {
		c.wantPostError(cs.task, auth, []byte(cs.body), cs.status, cs.field)
	}
	if after := r.bernsteinRefs(); after != before {
		t.Errorf("bad input wrote:\n%s\n%s", before, after)
	}

	// 403 and 404: refusals of the store, each recorded in the audit
	// mirror with the token's agent.
	c.wantRefused(r, "T:1.a", tok2, ok, 403, "claim_token", "agent-2", record.ReasonClaimScopeViolation)
	c.wantRefused(r, "T-3", tok2, ok, 403, "claim_token", "agent-2", record.ReasonUnclaimedTask)
	c.wantRefused(r, "NOPE", r.token, ok, 404, "task_id", "agent-1", record.ReasonUnclaimedTask)
	// Another live claim of the same agent does not cover this task.
	other := strings.TrimSpace(r.cli("task", "claim", "T-3", "--agent", "agent-1"))
	c.wantRefused(r, "T:1.a", other, ok, 403, "claim_token", "agent-1", record.ReasonClaimScopeViolation)

	// A ledger holding a row no trusted writer signed honours no claim:
	// the real holder is refused with claim_unproven.
	g := &forgetest.Forger{T: t, Dir: r.dir, Writer: "test-writer"}
	g.AppendRow(refs.Ledger("T:1.a"), "T:1.a", record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"}, nil)
	c.wantRefused(r, "T:1.a", r.token, ok, 403, "task_id", "agent-1", record.ReasonClaimUnproven)
}

type bearerTransport string

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(req)
}

// TestAPIPostOverForgedOwnSpine: a commit appended with plain git to the
// writer's own spine is named in the receipt's tampered (as the OpenAPI
// description, which every response is checked against, says), and the
// post is built past it: the spine no longer holds the forged commit.
func TestAPIPostOverForgedOwnSpine(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T-1")
	c := newAPIClient(t, r)
	auth := "Bearer " + r.token
	if res, body := c.post("T-1", auth, []byte(`{"key":"notes","artifact_type":"report","body":"one"}`)); res.StatusCode != http.StatusCreated {
		t.Fatalf("first post: %d %s", res.StatusCode, body)
	}
	spine := refs.Spine("test-writer")
	head := strings.TrimSpace(r.git("rev-parse", spine))
	forged := strings.TrimSpace(r.git("commit-tree", head+"^{tree}", "-p", head, "-m", "not the writer's"))
	r.git("update-ref", spine, forged, head)
	res, body := c.post("T-1", auth, []byte(`{"key":"notes","artifact_type":"report","body":"two"}`))
	var rec bernstein.PostResult
	if res.StatusCode != http.StatusCreated || json.Unmarshal(body, &rec) != nil {
		t.Fatalf("post over a forged spine: %d %s", res.StatusCode, body)
	}
	if len(rec.Tampered) != 1 || !strings.Contains(rec.Tampered[0], spine) || !strings.Contains(rec.Tampered[0], forged) {
		t.Fatalf("the receipt's tampered %q does not name %s at %s", rec.Tampered, spine, forged)
	}
	if strings.Contains(r.git("rev-list", spine), forged) {
		t.Fatalf("the spine still holds the forged commit %s", forged)
	}
	if strings.TrimSpace(r.git("rev-parse", spine+"~1")) != head {
		t.Fatalf("the post was not built on the writer's last entry %s", head)
	}
}
