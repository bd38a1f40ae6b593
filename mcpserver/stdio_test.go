package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein/mcpserver"
)

// TestStdioAnswersEveryCallBeforeEnding writes requests and closes the
// input at once, as a shell pipe does: every call is still answered, and
// the session then ends by itself.
func TestStdioAnswersEveryCallBeforeEnding(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	for round := 0; round < 10; round++ {
		lines := []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bernstein_post_artifact","arguments":{"task_id":"T-1","key":"k","artifact_type":"report","body":"round %d"}}}`, round),
			// The last line has no newline: it is a call all the same.
			`{"jsonrpc":"2.0","id":"four","method":"tools/call","params":{"name":"bernstein_task_handle","arguments":{"task_id":"T-1"}}}`,
		}
		in := strings.NewReader(strings.Join(lines, "\n"))
		var out bytes.Buffer
		srv := mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity("agent-1", tok)})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := srv.Run(ctx, mcpserver.StdioTransport(in, &out))
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("round %d: the session did not end after the input closed (%v)", round, err)
		}
		ids := map[string]json.RawMessage{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("round %d: output line %q: %v", round, line, err)
			}
			ids[string(m.ID)] = m.Result
		}
		for _, id := range []string{"1", "2", "3", `"four"`} {
			if ids[id] == nil {
				t.Fatalf("round %d: no answer to call %s in %s", round, id, out.String())
			}
		}
		var post struct {
			StructuredContent postResult `json:"structuredContent"`
		}
		json.Unmarshal(ids["3"], &post)
		if post.StructuredContent.Version != int64(round+1) {
			t.Errorf("round %d: post answered %+v", round, post.StructuredContent)
		}
	}
}
