package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/record"
)

func canonicalHash(t *testing.T, p artifact.Payload) (string, []byte) {
	t.Helper()
	b, err := p.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return string(record.Sum(b)), b
}

func TestPostEachTypeAndRepost(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	c := serveAs(t, r, "agent-1", tok)

	type post struct {
		args    map[string]any
		payload artifact.Payload
		key     string
	}
	posts := []post{
		{report("T-1", "summary", "# Findings\n\nv1"), artifact.Payload{Type: "report", Body: "# Findings\n\nv1"}, "summary"},
		{map[string]any{"task_id": "T-1", "key": "timings", "artifact_type": "table", "columns": []string{"query", "ms"}, "rows": [][]string{{"q1", "120"}, {"q2", "95"}}},
			artifact.Payload{Type: "table", Columns: []string{"query", "ms"}, Rows: [][]string{{"q1", "120"}, {"q2", "95"}}}, "timings"},
		{map[string]any{"task_id": "T-1", "key": "board", "artifact_type": "link", "url": "https://grafana.example.com/d/1", "link_kind": "dashboard"},
			artifact.Payload{Type: "link", URL: "https://grafana.example.com/d/1", LinkKind: "dashboard"}, "board"},
	}
	var first postResult
	for i, p := range posts {
		res := ok[postResult](t, c.call(mcpserver.ToolPostArtifact, p.args))
		hash, canonical := canonicalHash(t, p.payload)
		if res.Task != "T-1" || res.Key != p.key || res.Version != 1 || res.Type != p.payload.Type || res.LinkKind != p.payload.LinkKind ||
			res.JournalIndex != int64(i) || res.ContentHash != hash || res.PrevVersionHash != "" || res.Agent != "agent-1" || res.Writer != writer ||
			!strings.HasPrefix(res.SpineEntryHash, "sha256:") || res.Size != int64(len(canonical)) {
			t.Errorf("post %d: %+v", i, res)
		}
		// The version is in git where docs/format.md puts it.
		if got := r.git("show", "refs/bernstein/journal/T-1:artifacts/"+p.key+"/v1.json"); got != string(canonical) {
			t.Errorf("v1.json of %s = %q, want %q", p.key, got, canonical)
		}
		if got := strings.TrimSpace(r.git("rev-parse", "refs/bernstein/journal/T-1:artifacts/"+p.key+"/v1.json")); got != res.Blob {
			t.Errorf("blob of %s = %s, receipt says %s", p.key, got, res.Blob)
		}
		if i == 0 {
			first = res
		}
		a := r.lastAudit()
		if a.Event != record.EventArtifactPosted || a.Actor != "agent-1" || a.TaskID != "T-1" || a.Resource != res.SpineEntryHash {
			t.Errorf("audit after post %d: %+v", i, a)
		}
	}

	// A repost of a key is version 2, chained to version 1.
	v2 := ok[postResult](t, c.call(mcpserver.ToolPostArtifact, report("T-1", "summary", "# Findings\n\nv2")))
	if v2.Version != 2 || v2.PrevVersionHash != first.SpineEntryHash || v2.JournalIndex != 3 || v2.SpineEntryHash == first.SpineEntryHash {
		t.Errorf("repost: %+v (v1 spine %s)", v2, first.SpineEntryHash)
	}
	if got := r.git("show", "refs/bernstein/journal/T-1:artifacts/summary/v2.json"); !strings.Contains(got, "v2") {
		t.Errorf("v2.json = %q", got)
	}
	rep, err := r.store.Artifacts("T-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	var doc struct {
		Artifacts []struct {
			Key     string `json:"key"`
			Version int64  `json:"version"`
			State   string `json:"state"`
		} `json:"artifacts"`
	}
	json.Unmarshal(b, &doc)
	if len(doc.Artifacts) != 4 {
		t.Fatalf("the store lists %d versions, want 4: %s", len(doc.Artifacts), b)
	}
	for _, a := range doc.Artifacts {
		if a.State != "verified" {
			t.Errorf("%s v%d is %s", a.Key, a.Version, a.State)
		}
	}
}

// refusal posts args as the client and checks the tool error, that the
// refusal is the newest audit entry with the caller and the reason, and
// that nothing else was written.
func refusal(t *testing.T, r *repo, c *client, args map[string]any, agent, reason string) string {
	t.Helper()
	before := r.bernsteinRefs()
	auditBefore := r.refValue("refs/bernstein/audit/" + writer)
	msg := toolErr(t, c.call(mcpserver.ToolPostArtifact, args))
	if !strings.Contains(msg, "refused ("+reason+")") {
		t.Errorf("refusal %q does not give reason %s", msg, reason)
	}
	a := r.lastAudit()
	var d struct {
		Reason       string `json:"reason"`
		Key          string `json:"key"`
		ArtifactType string `json:"artifact_type"`
	}
	if err := json.Unmarshal(a.Details, &d); err != nil {
		t.Fatal(err)
	}
	task := args["task_id"].(string)
	if a.Event != record.EventArtifactRefused || a.Actor != agent || a.TaskID != task || d.Reason != reason || d.Key != args["key"] ||
		a.Resource != "bernstein://"+task+"/"+args["key"].(string) {
		t.Errorf("audit entry %+v %s, want artifact.refused by %s on %s for %s", a, a.Details, agent, task, reason)
	}
	// Only the audit mirror moved, by one entry.
	after := r.bernsteinRefs()
	auditAfter := r.refValue("refs/bernstein/audit/" + writer)
	if strings.Replace(after, auditAfter, auditBefore, 1) != before {
		t.Errorf("a refusal moved more than the audit mirror:\n%s\n%s", before, after)
	}
	if parent := r.refValue("refs/bernstein/audit/" + writer + "~1"); parent != auditBefore {
		t.Errorf("the audit mirror moved by more than one entry")
	}
	return msg
}

func TestClaimScoping(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	r.createTask("T-2")
	r.createTask("T-3") // never claimed
	tok1 := r.claim("T-1", "owner")
	tok2 := r.claim("T-2", "owner")

	t.Run("another agent", func(t *testing.T) {
		c := serveAs(t, r, "intruder")
		msg := refusal(t, r, c, report("T-1", "summary", "not mine"), "intruder", record.ReasonClaimScopeViolation)
		if !strings.Contains(msg, "audit mirror") {
			t.Errorf("refusal %q does not say it was recorded", msg)
		}
	})
	t.Run("another agent holding the owner's token", func(t *testing.T) {
		c := serveAs(t, r, "intruder", tok1)
		refusal(t, r, c, report("T-1", "summary", "not mine"), "intruder", record.ReasonClaimScopeViolation)
	})
	t.Run("the owner without its token", func(t *testing.T) {
		c := serveAs(t, r, "owner")
		msg := refusal(t, r, c, report("T-1", "summary", "x"), "owner", record.ReasonClaimScopeViolation)
		if !strings.Contains(msg, "--claim-token") {
			t.Errorf("refusal %q does not say how to pass a token", msg)
		}
	})
	t.Run("the token of another task", func(t *testing.T) {
		c := serveAs(t, r, "owner", tok2)
		refusal(t, r, c, report("T-1", "summary", "x"), "owner", record.ReasonClaimScopeViolation)
	})
	t.Run("an unclaimed task", func(t *testing.T) {
		c := serveAs(t, r, "owner", tok1, tok2)
		refusal(t, r, c, report("T-3", "summary", "x"), "owner", record.ReasonUnclaimedTask)
	})
	t.Run("a task that does not exist", func(t *testing.T) {
		c := serveAs(t, r, "owner", tok1)
		refusal(t, r, c, report("T-404", "summary", "x"), "owner", record.ReasonUnclaimedTask)
	})
	t.Run("one token per claimed task", func(t *testing.T) {
		c := serveAs(t, r, "owner", tok2, tok1)
		for _, task := range []string{"T-1", "T-2"} {
			res := ok[postResult](t, c.call(mcpserver.ToolPostArtifact, report(task, "summary", "mine")))
			if res.Task != task || res.Agent != "owner" || res.Version != 1 {
				t.Errorf("post to %s: %+v", task, res)
			}
		}
	})
}

func TestReleasedAndCompletedClaimsStopAtOnce(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	c := serveAs(t, r, "agent-1", tok)
	ok[postResult](t, c.call(mcpserver.ToolPostArtifact, report("T-1", "summary", "v1")))

	// Released: the same session is refused on its next call.
	r.transition("T-1", record.KindTaskReleased)
	refusal(t, r, c, report("T-1", "summary", "after release"), "agent-1", record.ReasonUnclaimedTask)

	// Claimed again: the old token stays dead, the new one works.
	tok2 := r.claim("T-1", "agent-1")
	refusal(t, r, c, report("T-1", "summary", "old token"), "agent-1", record.ReasonClaimScopeViolation)
	c2 := serveAs(t, r, "agent-1", tok2)
	if res := ok[postResult](t, c2.call(mcpserver.ToolPostArtifact, report("T-1", "summary", "v2"))); res.Version != 2 {
		t.Errorf("post with the new claim: %+v", res)
	}

	// Completed: refused at once, though the token was live a moment ago.
	r.transition("T-1", record.KindTaskStarted)
	ok[postResult](t, c2.call(mcpserver.ToolPostArtifact, report("T-1", "summary", "v3")))
	r.transition("T-1", record.KindTaskCompleted)
	refusal(t, r, c2, report("T-1", "summary", "after completion"), "agent-1", record.ReasonUnclaimedTask)
}

// TestBadInputNamesTheField: arguments that are not an object, and the
// task handle's, are refused naming the field in one line, nothing
// written. (A post's fields: the table of server's TestInputRules, run over
// stdio and HTTP among the other surfaces.)
func TestBadInputNamesTheField(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	c := serveAs(t, r, "agent-1", tok)
	cases := []struct {
		name  string
		tool  string
		args  any
		field string
	}{
		{"no arguments", mcpserver.ToolPostArtifact, map[string]any{}, "task_id"},
		{"arguments not an object", mcpserver.ToolPostArtifact, []any{"T-1"}, "arguments"},
		{"handle without task", mcpserver.ToolTaskHandle, map[string]any{}, "task_id"},
		{"handle task pattern", mcpserver.ToolTaskHandle, map[string]any{"task_id": "a..b"}, "task_id"},
		{"handle task type", mcpserver.ToolTaskHandle, map[string]any{"task_id": 7}, "task_id"},
		{"handle claim token", mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1", "claim_token": tok}, "claim_token"},
		{"progress cannot be set", mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1", "progress": map[string]any{"checkpoints": 9}}, "progress"},
	}
	before := r.bernsteinRefs()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.callWith(tc.tool, tc.args, nil)
			if err != nil {
				t.Fatalf("protocol error instead of a tool error: %v", err)
			}
			msg := toolErr(t, res)
			if !strings.HasPrefix(msg, "invalid "+tc.field+": ") || strings.Contains(msg, "\n") {
				t.Errorf("error %q is not one line naming %s", msg, tc.field)
			}
		})
	}
	if after := r.bernsteinRefs(); after != before {
		t.Errorf("bad input wrote to the repository:\n%s\n%s", before, after)
	}
}

func TestUnknownToolIsAProtocolError(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	c := serveAs(t, r, "agent-1", r.claim("T-1", "agent-1"))
	before := r.bernsteinRefs()
	for _, name := range []string{"bernstein_set_progress", "bernstein_post_artifacts", ""} {
		res, err := c.callWith(name, map[string]any{"task_id": "T-1", "checkpoints": 5}, nil)
		if err == nil {
			t.Errorf("tool %q: want a protocol error, got result %+v", name, res)
			continue
		}
		if !strings.Contains(err.Error(), "unknown tool") {
			t.Errorf("tool %q: error %v does not say the tool is unknown", name, err)
		}
	}
	if r.bernsteinRefs() != before {
		t.Error("an unknown tool call wrote to the repository")
	}
	// The session still works.
	ok[postResult](t, c.call(mcpserver.ToolPostArtifact, report("T-1", "k", "x")))
}

// TestHandleOfUnknownTask: the handle of a task that does not exist says
// so as the CLI does; the id is not invalid.
func TestHandleOfUnknownTask(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	c := serveAs(t, r, "agent-1", r.claim("T-1", "agent-1"))
	before := r.bernsteinRefs()
	if msg := toolErr(t, c.call(mcpserver.ToolTaskHandle, map[string]any{"task_id": "NOPE"})); msg != "unknown task: NOPE" {
		t.Errorf("handle of an unknown task: %q", msg)
	}
	if r.bernsteinRefs() != before {
		t.Error("reading an unknown task's handle wrote to the repository")
	}
}

func TestServerWithoutIdentityCannotPost(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	r.claim("T-1", "agent-1")
	c := connect(t, mcpserver.New(r.store, mcpserver.Options{}))
	before := r.bernsteinRefs()
	msg := toolErr(t, c.call(mcpserver.ToolPostArtifact, report("T-1", "k", "x")))
	// The call is fine: no argument is invalid, the server has nobody to
	// post as.
	if !strings.HasPrefix(msg, "cannot post: this server has no caller identity: ") || !strings.Contains(msg, "--agent") || strings.Contains(msg, "\n") {
		t.Errorf("error %q", msg)
	}
	if r.bernsteinRefs() != before {
		t.Error("a post without identity wrote to the repository")
	}
	// Reading needs no identity.
	if h := ok[map[string]any](t, c.call(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"})); h["taskId"] != "T-1" {
		t.Errorf("handle %v", h)
	}
}
