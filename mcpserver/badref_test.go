package mcpserver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/mcpserver"
)

// TestUnreadableTaskRefBlocksNoTool: a task whose ledger ref plain git
// pointed at a blob does not stop the server: the other task's handle,
// resources and posts answer as before; its own handle is a tool error
// saying it is tampered, naming the ref.
func TestUnreadableTaskRefBlocksNoTool(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	r.createTask("T-2")
	tok1, tok2 := r.claim("T-1", "agent"), r.claim("T-2", "agent")
	c := serveAs(t, r, "agent", tok1, tok2)
	ok[map[string]any](t, c.call(mcpserver.ToolPostArtifact, report("T-1", "k", "# one")))
	ok[map[string]any](t, c.call(mcpserver.ToolPostArtifact, report("T-2", "k", "# two")))
	before := readHandle(t, c, "T-1")

	f := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(f, []byte("not a chain"), 0o644); err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(r.git("hash-object", "-w", f))
	ref := "refs/bernstein/ledger/T-2"
	r.git("update-ref", ref, blob)

	c = serveAs(t, r, "agent", tok1, tok2)
	if after := readHandle(t, c, "T-1"); after["receiptHash"] != before["receiptHash"] {
		t.Fatalf("T-1's handle moved: %v, was %v", after, before)
	}
	if msg := toolErr(t, c.call(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-2"})); !strings.Contains(msg, "task T-2 is tampered: "+ref+" (at "+blob+")") {
		t.Fatalf("T-2's handle: %q", msg)
	}
	res, err := c.cs.ListResources(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, rs := range res.Resources {
		uris = append(uris, rs.URI)
	}
	if len(uris) != 1 || uris[0] != mcpserver.VersionURI("T-1", "k", 1) {
		t.Fatalf("resources %v, want T-1's k v1", uris)
	}
	ok[map[string]any](t, c.call(mcpserver.ToolPostArtifact, report("T-1", "k", "# again")))
}
