// Package forgetest forges bernstein rows for tests, as anyone with write
// access to a repository and none of its writer's keys could: commits built
// with plain git (git hash-object, the commit's bytes written by hand, git
// update-ref), either unsigned or signed by a key of the forger's own. The
// root package's forgery tests and the MCP server's share its table of
// forgeries, so every surface is tested against the same rows.
package forgetest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// MalloryToken is the claim token a forged claim names (by its hash).
const MalloryToken = "bct_mallory_token"

// ForgedBody is the body of the forged artifact version: no surface may
// show it.
const ForgedBody = "forged findings"

// Forger appends rows to a repository's chains with plain git.
type Forger struct {
	T      testing.TB
	Dir    string         // the repository's work tree
	Signer *keys.Identity // nil: the commits are unsigned
	Writer string         // the writer the commits name as committer
}

// Git runs git in the repository and returns its trimmed stdout.
func (g *Forger) Git(args ...string) string {
	g.T.Helper()
	out, err := g.git(nil, args...)
	if err != nil {
		g.T.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(out)
}

// git runs git and returns its stdout as it is.
func (g *Forger) git(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", g.Dir}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", &gitError{err: err, stderr: stderr.String()}
	}
	return stdout.String(), nil
}

type gitError struct {
	err    error
	stderr string
}

func (e *gitError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }

// head returns the commit ref points at and the row it carries (ok false
// when ref does not exist).
func (g *Forger) head(ref string) (string, record.Row, bool) {
	g.T.Helper()
	id, err := g.git(nil, "rev-parse", "--verify", "--quiet", ref)
	if id = strings.TrimSpace(id); err != nil || id == "" {
		return "", record.Row{}, false
	}
	raw, err := g.git(nil, "cat-file", "commit", id)
	if err != nil {
		g.T.Fatal(err)
	}
	c, _, err := gitstore.ParseCommit([]byte(raw))
	if err != nil {
		g.T.Fatal(err)
	}
	rec, err := record.RecordFromMessage(c.Message)
	if err != nil {
		g.T.Fatal(err)
	}
	last, err := record.ParseRow(rec)
	if err != nil {
		g.T.Fatal(err)
	}
	return id, last, true
}

// AppendRow chains a row onto ref as plain git would: the next index, the
// previous row's hash, the row's files in the commit's tree.
func (g *Forger) AppendRow(ref, task, kind, actor string, data any, files map[string][]byte) record.Row {
	g.T.Helper()
	return g.AppendRowPrev(ref, task, kind, actor, nil, data, files)
}

// AppendRowPrev is AppendRow with the row's prev field chosen by prev, given
// the hash of the row it should link to ("" for the first row); nil keeps
// it. The commit's parent is the ref's head either way, so only the row's own
// link can tell.
func (g *Forger) AppendRowPrev(ref, task, kind, actor string, prev func(record.Hash) record.Hash, data any, files map[string][]byte) record.Row {
	g.T.Helper()
	head, last, ok := g.head(ref)
	index, link := int64(0), record.Hash("")
	var parents []gitstore.Oid
	if ok {
		index, link = last.Index+1, last.Hash()
		parents = []gitstore.Oid{g.oid(head)}
	}
	if prev != nil {
		link = prev(link)
	}
	row, err := record.NewRow(kind, task, index, link, actor, data)
	if err != nil {
		g.T.Fatal(err)
	}
	blobs := map[string]gitstore.Oid{}
	for path, b := range files {
		blobs[path] = g.write("blob", b)
	}
	tree, trees, err := gitstore.TreeOf(blobs)
	if err != nil {
		g.T.Fatal(err)
	}
	for _, o := range trees {
		g.write("tree", o.Data)
	}
	if len(blobs) == 0 {
		tree = g.write("tree", nil)
	}
	c := gitstore.Commit{Tree: tree, Parents: parents, Author: gitstore.Ident(actor, actor+"@bernstein", 1700000000),
		Committer: gitstore.Ident(g.Writer, g.Writer+"@bernstein", 1700000000), Message: record.Message(kind+" forged", row.Bytes())}
	if g.Signer != nil {
		sig, err := g.Signer.SignCommit(gitstore.EncodeCommit(c))
		if err != nil {
			g.T.Fatal(err)
		}
		c.Signature = sig
	}
	id := g.write("commit", gitstore.EncodeCommit(c))
	args := []string{"update-ref", ref, id.String()}
	if ok {
		args = append(args, head)
	}
	g.Git(args...)
	return row
}

func (g *Forger) write(kind string, data []byte) gitstore.Oid {
	g.T.Helper()
	out, err := g.git(data, "hash-object", "-w", "-t", kind, "--stdin")
	if err != nil {
		g.T.Fatalf("hash-object: %v", err)
	}
	return g.oid(strings.TrimSpace(out))
}

func (g *Forger) oid(s string) gitstore.Oid {
	g.T.Helper()
	id, err := gitstore.ParseOid(s)
	if err != nil {
		g.T.Fatal(err)
	}
	return id
}

// Forgery is one kind of forged row (or the pair a forged claim needs),
// appended to a task SetUp made.
type Forgery struct {
	Name  string
	Chain string // "ledger" or "journal": where the rows at fault are
	// Claimed: the honest task is claimed and not started before the
	// forgery (a forged start needs a task it can start), else started.
	Claimed bool
	// Rows appends the forged rows and returns how many.
	Rows func(g *Forger, task string) int
}

// Forgeries is every kind of row that grants something: claims and the
// other ledger transitions, the journal's work rows, artifacts. Each is a
// row the chain's state would accept if a trusted writer had signed it.
var Forgeries = []Forgery{
	{Name: "claim", Chain: "ledger", Rows: func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"}, nil)
		g.AppendRow(refs.Ledger(task), task, record.KindTaskClaimed, "mallory", ledger.Claimed{Agent: "mallory", ClaimID: "claim-forged", TokenSHA256: bernstein.TokenHash(MalloryToken)}, nil)
		return 2
	}},
	{Name: "release", Chain: "ledger", Rows: func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"}, nil)
		return 1
	}},
	{Name: "start", Chain: "ledger", Claimed: true, Rows: func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskStarted, "mallory", ledger.Transition{}, nil)
		return 1
	}},
	{Name: "complete", Chain: "ledger", Rows: func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskCompleted, "mallory", ledger.Transition{}, nil)
		return 1
	}},
	{Name: "start-again", Chain: "ledger", Rows: func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskSuspended, "mallory", ledger.Transition{}, nil)
		g.AppendRow(refs.Ledger(task), task, record.KindTaskResumed, "mallory", ledger.Transition{}, nil)
		return 2
	}},
	{Name: "checkpoint", Chain: "journal", Rows: func(g *Forger, task string) int {
		// With its trees, as an honest row carries them: only the forgery
		// keeps it from counting.
		g.AppendRow(refs.Journal(task), task, record.KindCheckpoint, "mallory", record.Checkpoint{Commit: g.Git("rev-parse", "HEAD~1"),
			Tree: g.Git("rev-parse", "HEAD~1^{tree}"), ParentTree: gitstore.EmptyTree.String()}, nil)
		return 1
	}},
	{Name: "diff", Chain: "journal", Rows: func(g *Forger, task string) int {
		patch := []byte("diff --git a/x b/x\n+forged\n")
		out := record.Output{Path: "outputs/000009-diff.patch", Blob: gitstore.HashObject(gitstore.TypeBlob, patch).String(), Hash: record.Sum(patch), Size: int64(len(patch))}
		g.AppendRow(refs.Journal(task), task, record.KindDiffCaptured, "mallory", record.DiffCaptured{Base: g.Git("rev-parse", "HEAD~1"),
			Head: g.Git("rev-parse", "HEAD"), BaseTree: g.Git("rev-parse", "HEAD~1^{tree}"), HeadTree: g.Git("rev-parse", "HEAD^{tree}"),
			Patch: out, Files: 1, Added: 1}, map[string][]byte{out.Path: patch})
		return 1
	}},
	{Name: "gate", Chain: "journal", Rows: func(g *Forger, task string) int {
		log := []byte("all good\n")
		out := record.Output{Path: "outputs/000009-gate-build.log", Blob: gitstore.HashObject(gitstore.TypeBlob, log).String(), Hash: record.Sum(log), Size: int64(len(log))}
		g.AppendRow(refs.Journal(task), task, record.KindGateAttempt, "mallory", record.GateAttempt{Gate: "build", Command: "true", ExitCode: 0, Passed: true, Output: out}, map[string][]byte{out.Path: log})
		return 1
	}},
	{Name: "evidence", Chain: "journal", Rows: func(g *Forger, task string) int {
		log := []byte("passed\n")
		out := record.Output{Path: "outputs/000009-evidence-tests.log", Blob: gitstore.HashObject(gitstore.TypeBlob, log).String(), Hash: record.Sum(log), Size: int64(len(log))}
		g.AppendRow(refs.Journal(task), task, record.KindEvidenceResult, "mallory", record.EvidenceResult{Producer: "tests", Kind: "command", Command: "true", Required: true, ExitCode: 0, Passed: true, Output: out}, map[string][]byte{out.Path: log})
		return 1
	}},
	{Name: "artifact", Chain: "journal", Rows: func(g *Forger, task string) int {
		p, _ := Report(ForgedBody).Canonical()
		blob := gitstore.HashObject(gitstore.TypeBlob, p)
		g.AppendRow(refs.Journal(task), task, record.KindArtifactPosted, "agent", record.ArtifactPosted{Key: "summary", ArtifactType: artifact.TypeReport,
			Version: 2, ContentHash: record.Sum(p), Blob: blob.String(), Size: int64(len(p)), SpineEntryHash: record.Sum([]byte("made up"))},
			map[string][]byte{record.ArtifactPath("summary", 2): p})
		return 1
	}},
}

// Variant is who signs a forgery.
type Variant struct {
	Name string
	// State is the proof state the forged rows get on the honest host.
	State string
	// New makes the forger for the repository at dir whose honest writer
	// is writer.
	New func(t testing.TB, dir, writer string) *Forger
}

// Variants: unsigned; signed by another key in the honest writer's name;
// signed by a writer of the forger's own, whose key is published (it ran
// bernstein init) and not pinned.
var Variants = []Variant{
	{Name: "unsigned", State: "tampered", New: func(t testing.TB, dir, writer string) *Forger {
		return &Forger{T: t, Dir: dir, Writer: writer}
	}},
	{Name: "signed-in-the-writers-name", State: "tampered", New: func(t testing.TB, dir, writer string) *Forger {
		other, _, err := keys.Create(t.TempDir(), writer)
		if err != nil {
			t.Fatal(err)
		}
		return &Forger{T: t, Dir: dir, Signer: other, Writer: writer}
	}},
	{Name: "signed-by-an-unpinned-writer", State: "unverifiable", New: UnpinnedWriter},
}

// UnpinnedWriter runs bernstein init for a writer "mallory" on the
// repository at dir, with a home of its own, and returns a forger signing
// with mallory's key: published in refs/bernstein/writers/mallory like any
// writer's, pinned by nobody.
func UnpinnedWriter(t testing.TB, dir, _ string) *Forger {
	home := filepath.Join(t.TempDir(), "mallory")
	if _, err := bernstein.Init(bernstein.Options{Repo: dir, Home: home}, "mallory"); err != nil {
		t.Fatal(err)
	}
	id, err := keys.Load(home)
	if err != nil {
		t.Fatal(err)
	}
	return &Forger{T: t, Dir: dir, Signer: id, Writer: "mallory"}
}

// Report is a report payload.
func Report(body string) artifact.Payload {
	return artifact.Payload{Type: artifact.TypeReport, Body: body}
}

// SetUp makes the honest task every forgery is appended to: it declares
// gate build (true) and evidence producer tests (true), is claimed by
// "agent" and, unless f.Claimed, started; its journal holds a checkpoint of
// HEAD and summary v1. The repository needs two commits (HEAD~1 is what the
// forged checkpoint names). It returns the claim token.
func SetUp(t testing.TB, s *bernstein.Store, task string, f Forgery) string {
	t.Helper()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: "forged", Gates: []ledger.Gate{{Name: "build", Command: "true"}},
		Evidence: []ledger.Producer{{Name: "tests", Command: "true", Required: true}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Claim(task, "agent")
	if err != nil {
		t.Fatal(err)
	}
	if !f.Claimed {
		if _, err := s.Transition(task, record.KindTaskStarted, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Checkpoint(task, "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Post(bernstein.PostRequest{Task: task, Key: "summary", Agent: "agent", ClaimToken: tok, Payload: Report("honest findings")}); err != nil {
		t.Fatal(err)
	}
	return tok
}

// Copied is a task copied, with plain git, from another repository the same
// writer serves (the copied-task forgery): its ledger and journal, signed by
// the honest writer's own key, claimed with Token and holding a summary
// whose body is ForgedBody. Rooted in the other repository, it grants
// nothing here: every reader says it is foreign, no post lands on its
// token, and no row of it counts.
type Copied struct {
	Task  string
	Token string // the claim token the copied ledger honours in its own repository
	From  string // the other repository's work tree
	Rows  int    // the rows copied: the ledger's and the journal's
}

// CopyTask makes task in another repository with the writer of home (the
// home the honest host writes with, so every copied row carries a
// signature the honest host trusts), as SetUp makes it, posts a summary
// with ForgedBody, and copies its two refs into the repository at dir with
// git fetch, as the attacker of the copied-task forgery does.
func CopyTask(t testing.TB, dir, home, writer, task string) Copied {
	t.Helper()
	other := filepath.Join(t.TempDir(), "other-repository")
	g := &Forger{T: t, Dir: other}
	if out, err := exec.Command("git", "init", "-q", other).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	for i := 0; i < 2; i++ {
		g.Git("-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-q", "--allow-empty", "-m", "commit")
	}
	if _, err := bernstein.Init(bernstein.Options{Repo: other, Home: home}, writer); err != nil {
		t.Fatalf("init of the other repository: %v", err)
	}
	st, err := bernstein.Open(bernstein.Options{Repo: other, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tok := SetUp(t, st, task, Forgery{})
	if _, err := st.Post(bernstein.PostRequest{Task: task, Key: "findings", Agent: "agent", ClaimToken: tok, Payload: Report(ForgedBody)}); err != nil {
		t.Fatal(err)
	}
	ledgerRef, journalRef := refs.Ledger(task), refs.Journal(task)
	n := len(strings.Fields(g.Git("rev-list", ledgerRef))) + len(strings.Fields(g.Git("rev-list", journalRef)))
	d := &Forger{T: t, Dir: dir}
	d.Git("fetch", "-q", other, "+"+ledgerRef+":"+ledgerRef, "+"+journalRef+":"+journalRef)
	return Copied{Task: task, Token: tok, From: other, Rows: n}
}
