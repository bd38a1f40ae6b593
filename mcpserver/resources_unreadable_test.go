package mcpserver_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/refs"
)

// TestResourceOfUnreadableJournalIsTampered: the latest version, or any
// version, of any key of a task whose journal ref plain git points at a blob (its versions are
// listed as none) reads as the task tampered, naming the ref as task show
// does, never as a missing resource; the other task's versions read as
// before.
func TestResourceOfUnreadableJournalIsTampered(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	r.createTask("T-2")
	tok := r.claim("T-1", "agent-1")
	tok2 := r.claim("T-2", "agent-1")
	for task, tk := range map[string]string{"T-1": tok, "T-2": tok2} {
		if _, err := r.store.Post(bernstein.PostRequest{Task: task, Key: "notes", Agent: "agent-1", ClaimToken: tk,
			Payload: reportPayload("# one")}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("git", "-C", r.dir, "hash-object", "-w", "--stdin")
	cmd.Stdin = strings.NewReader("not a chain")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(string(out))
	r.git("update-ref", refs.Journal("T-1"), blob)
	c := connectRes(t, mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity("agent-1", tok)}))
	want := "task T-1 is tampered: " + refs.Journal("T-1") + " (at " + blob + ") cannot be read as a journal"
	for _, uri := range []string{"bernstein://T-1/notes/latest", "bernstein://T-1/other/latest", "bernstein://T-1/notes/v1", "bernstein://T-1/notes/v7"} {
		if _, err := c.read(uri); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("read %s: %v, want an error saying %q", uri, err, want)
		}
	}
	c2 := connectRes(t, mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity("agent-1", tok2)}))
	if rr, err := c2.read("bernstein://T-2/notes/v1"); err != nil || !strings.Contains(rr.Contents[0].Text, "# one") {
		t.Fatalf("read of T-2: %v %v", rr, err)
	}
}
