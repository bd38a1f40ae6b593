package mcpserver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

const malloryToken = "bct_mallory_token"

// gitIn runs git in the repository with stdin and extra environment.
func (r *repo) gitIn(stdin []byte, env []string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", r.dir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// forgeLedgerRow appends a row to task's ledger as anyone with write access
// could, with plain git: the next index, the previous row's hash, the empty
// tree, the writer named as committer, and no signature (git commit-tree,
// git update-ref).
func (r *repo) forgeLedgerRow(task, kind, actor string, data any) {
	r.t.Helper()
	ref := refs.Ledger(task)
	head := r.refValue(ref)
	c, _, err := gitstore.ParseCommit([]byte(r.git("cat-file", "commit", head)))
	if err != nil {
		r.t.Fatal(err)
	}
	rec, err := record.RecordFromMessage(c.Message)
	if err != nil {
		r.t.Fatal(err)
	}
	last, err := record.ParseRow(rec)
	if err != nil {
		r.t.Fatal(err)
	}
	row, err := record.NewRow(kind, task, last.Index+1, last.Hash(), actor, data)
	if err != nil {
		r.t.Fatal(err)
	}
	tree := r.gitIn(nil, nil, "hash-object", "-w", "-t", "tree", "--stdin")
	env := []string{
		"GIT_AUTHOR_NAME=" + actor, "GIT_AUTHOR_EMAIL=" + actor + "@bernstein", "GIT_AUTHOR_DATE=1700000000 +0000",
		"GIT_COMMITTER_NAME=" + writer, "GIT_COMMITTER_EMAIL=" + writer + "@bernstein", "GIT_COMMITTER_DATE=1700000000 +0000",
	}
	id := r.gitIn(record.Message(kind+" forged", row.Bytes()), env, "commit-tree", "--no-gpg-sign", tree, "-p", head, "-F", "-")
	r.git("update-ref", ref, id, head)
}

// connectStdio runs the server as agent with tokens over the stdio
// transport (newline-delimited JSON on a pair of pipes), as 'bernstein mcp'
// does, and connects a client to it.
func connectStdio(t *testing.T, r *repo, agent string, tokens ...string) *client {
	t.Helper()
	srv := mcpserver.New(r.store, mcpserver.Options{Identity: mcpserver.AgentIdentity(agent, tokens...)})
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Run(ctx, mcpserver.StdioTransport(toServer, fromServer))
		fromServer.Close()
	}()
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	cs, err := cl.Connect(cctx, &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	if err != nil {
		cancel()
		t.Fatalf("stdio connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		fromClient.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the stdio server did not end after its input closed")
		}
		cancel()
	})
	return &client{t: t, cs: cs, notified: make(chan struct{}, 1000)}
}

// TestForgedClaimGrantsNothingOverMCP: a claim forged with plain git
// (unsigned task.released and task.claimed rows naming mallory and the hash
// of mallory's token) lets mallory post neither over stdio nor over HTTP,
// and while the ledger holds those unproven rows the real claim holder's
// posts are refused too, with claim_unproven, each refusal recorded in the
// audit mirror.
func TestForgedClaimGrantsNothingOverMCP(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent")
	ok[postResult](t, connectStdio(t, r, "agent", tok).call(mcpserver.ToolPostArtifact, report("T-1", "summary", "before the forgery")))

	sum := sha256.Sum256([]byte(malloryToken))
	r.forgeLedgerRow("T-1", record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"})
	r.forgeLedgerRow("T-1", record.KindTaskClaimed, "mallory", ledger.Claimed{Agent: "mallory", ClaimID: "claim-forged",
		TokenSHA256: record.Hash(record.HashPrefix + hex.EncodeToString(sum[:]))})
	// Plain git reads the forged claim as the ledger's newest row.
	if msg := r.git("log", "-1", "--format=%B", refs.Ledger("T-1")); !strings.Contains(msg, `"agent":"mallory"`) || !strings.Contains(msg, hex.EncodeToString(sum[:])) {
		t.Fatalf("the forged claim is not the ledger's head: %s", msg)
	}
	journal := r.refValue(refs.Journal("T-1"))

	// stdio, the server run as mallory with mallory's token, and as the
	// real claim holder with the real token: both refused, claim_unproven,
	// each refusal the newest audit entry (refusal checks that only the
	// audit mirror moved).
	// The refusal names the first forged row: the release at index 2.
	const fault = "a row no trusted writer signed at index 2 (commit is not signed)"
	if msg := refusal(t, r, connectStdio(t, r, "mallory", malloryToken), report("T-1", "summary", "mallory over stdio"), "mallory", record.ReasonClaimUnproven); !strings.Contains(msg, fault) {
		t.Errorf("mallory's refusal over stdio does not name the forged row: %s", msg)
	}
	if msg := refusal(t, r, connectStdio(t, r, "agent", tok), report("T-1", "summary", "agent over stdio"), "agent", record.ReasonClaimUnproven); !strings.Contains(msg, fault) {
		t.Errorf("the claim holder's refusal over stdio does not name the forged row: %s", msg)
	}

	// HTTP: mallory's bearer token stands for no live claim (401, nothing
	// recorded); the real token connects and its post is refused and
	// audited.
	srv := httptest.NewServer(mcpserver.HTTPHandler(r.store, mcpserver.Options{}))
	defer srv.Close()
	before := r.bernsteinRefs()
	if res := rawPost(t, srv.URL, "Bearer "+malloryToken); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("mallory's forged token over HTTP: status %d, want 401", res.StatusCode)
	}
	if _, err := connectHTTP(t, srv.URL, malloryToken); err == nil {
		t.Errorf("mallory's forged token opened an HTTP session")
	}
	if after := r.bernsteinRefs(); after != before {
		t.Errorf("mallory's HTTP requests wrote to the repository:\n%s\n%s", before, after)
	}
	agent, err := connectHTTP(t, srv.URL, tok)
	if err != nil {
		t.Fatalf("the real claim token over HTTP: %v", err)
	}
	if msg := refusal(t, r, agent, report("T-1", "summary", "agent over HTTP"), "agent", record.ReasonClaimUnproven); !strings.Contains(msg, fault) {
		t.Errorf("the claim holder's refusal over HTTP does not name the forged row: %s", msg)
	}

	if got := r.refValue(refs.Journal("T-1")); got != journal {
		t.Errorf("the journal moved on a forged ledger: %s, was %s", got, journal)
	}
}
