package server_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestPagePassesOverUnpinnedWriters: a version written by an agent's own
// writer, whose key this host has not pinned, is listed with its badge but
// its content is not shown on the task page (as `artifact show` passes over
// it); the latest verified version is shown instead.
func TestPagePassesOverUnpinnedWriters(t *testing.T) {
	r := newTaskRepo(t, "U-1")
	r.post("summary", "posted through the orchestrator")
	pins := filepath.Join(t.TempDir(), "orchestrator_signers")
	if err := os.WriteFile(pins, []byte(r.git("show", r.git("for-each-ref", "--format=%(refname)", "refs/bernstein/writers/test-writer.*")+":allowed_signers")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agentHome := filepath.Join(t.TempDir(), "agent-home")
	if _, err := bernstein.Init(bernstein.Options{Repo: r.dir, Home: agentHome}, "agent-writer"); err != nil {
		t.Fatal(err)
	}
	agent, err := bernstein.Open(bernstein.Options{Repo: r.dir, Home: agentHome, AllowedSigners: pins})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	if _, err := agent.Post(bernstein.PostRequest{Task: "U-1", Key: "summary", Agent: "agent-1", ClaimToken: r.token,
		Payload: artifact.Payload{Type: artifact.TypeReport, Body: "UNPINNED-WRITER-BODY"}}); err != nil {
		t.Fatal(err)
	}
	hs, stop := r.serve()
	defer stop()
	res, err := http.Get(hs.URL + "/tasks/U-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	page := string(body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("task page: %d", res.StatusCode)
	}
	if strings.Contains(page, "UNPINNED-WRITER-BODY") || !strings.Contains(page, "posted through the orchestrator") {
		t.Fatalf("the page showed the unpinned writer's content, or not the verified version's")
	}
	if !strings.Contains(page, "not shown here: written by writer agent-writer") {
		t.Fatalf("the unverifiable version is not listed with why it is not shown")
	}
}
