package tests

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
)

// statementOf decodes the statement an attestation's envelope carries.
func statementOf(t *testing.T, a *bernstein.Attestation) map[string]any {
	t.Helper()
	var env struct{ Payload string }
	if err := json.Unmarshal(a.Envelope, &env); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAttestPosition: an attestation's progress vector is the one at the
// version's position in the run (the journal up to its row), and a row at
// fault after that position does not stop it, while one at or before it
// (or the version itself) does.
func TestAttestPosition(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	f.withCommits() // a checkpoint of HEAD earns a step
	tok := f.startedTask(s, "T-1")
	f.post(s, "T-1", "notes", "agent", tok, report("before the checkpoint"))
	if _, err := s.Checkpoint("T-1", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	f.post(s, "T-1", "notes", "agent", tok, report("after the checkpoint"))

	checkpoints := func(v int64) float64 {
		t.Helper()
		a, err := s.AttestArtifact("T-1", "notes", v)
		if err != nil {
			t.Fatalf("attest v%d: %v", v, err)
		}
		p := statementOf(t, a)["predicate"].(map[string]any)
		if got := p["position"].(map[string]any)["journal_index"].(float64); got != float64(2*(v-1)) {
			t.Fatalf("v%d at journal index %v", v, got)
		}
		return p["progress"].(map[string]any)["checkpoints"].(float64)
	}
	if c1, c2 := checkpoints(1), checkpoints(2); c1 != 0 || c2 != 1 {
		t.Fatalf("checkpoints at v1 %v, at v2 %v; want 0 and 1 (the run at each version's row)", c1, c2)
	}

	// v2's row (the head) rewritten without its signature, with plain git.
	head := strings.TrimSpace(f.git("rev-parse", "refs/bernstein/journal/T-1"))
	body := f.git("cat-file", "commit", head)
	i, j := strings.Index(body, "gpgsig "), strings.Index(body, "-----END SSH SIGNATURE-----\n")
	forged := strings.TrimSpace(string(mustOutput(t, execGitStdin(f.dir, []byte(body[:i]+body[j+len("-----END SSH SIGNATURE-----\n"):]), "hash-object", "-t", "commit", "-w", "--stdin"))))
	f.git("update-ref", "refs/bernstein/journal/T-1", forged)
	s2 := f.open()
	if _, err := s2.AttestArtifact("T-1", "notes", 1); err != nil {
		t.Fatalf("v1, before the row at fault: %v", err)
	}
	_, err := s2.AttestArtifact("T-1", "notes", 2)
	if !errors.Is(err, bernstein.ErrNotAttestable) || !strings.Contains(err.Error(), "notes v2 of task T-1 is tampered") {
		t.Fatalf("v2, tampered: %v", err)
	}
	if _, err := s2.AttestTask("T-1"); !errors.Is(err, bernstein.ErrNotAttestable) {
		t.Fatalf("task attest of an open, tampered journal: %v", err)
	}
}
