// Package forgery writes rows into a bernstein repository as someone with
// write access and no key of the writer's would: with plain git
// (hash-object, then update-ref), either unsigned or signed by a key of the
// forger's own. The forgery tests of the library and the CLI, and those of
// the HTTP API, forge with it: one table of forgeries, one way of writing
// them.
package forgery

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

// Forger appends rows to the chains of the repository at Dir.
type Forger struct {
	T      testing.TB
	Dir    string
	Signer *keys.Identity // nil: unsigned
	Writer string         // the writer the commits name as committer
}

// Git runs git in the repository and returns its output, trimmed.
func (g *Forger) Git(args ...string) string {
	g.T.Helper()
	out, err := g.gitErr(args...)
	if err != nil {
		g.T.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

func (g *Forger) gitErr(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", g.Dir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// AppendRow chains a row onto ref as plain git would: the next index, the
// previous row's hash, the row's files in the commit's tree.
func (g *Forger) AppendRow(ref, task, kind, actor string, data any, files map[string][]byte) record.Row {
	t := g.T
	t.Helper()
	head, _ := g.gitErr("rev-parse", "--verify", "--quiet", ref)
	head = strings.TrimSpace(head)
	index, prev := int64(0), record.Hash("")
	var parents []gitstore.Oid
	if head != "" {
		raw, err := g.gitErr("cat-file", "commit", head)
		if err != nil {
			t.Fatalf("cat-file %s: %v %s", head, err, raw)
		}
		c, _, err := gitstore.ParseCommit([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := record.RecordFromMessage(c.Message)
		if err != nil {
			t.Fatal(err)
		}
		last, err := record.ParseRow(rec)
		if err != nil {
			t.Fatal(err)
		}
		index, prev = last.Index+1, last.Hash()
		parents = []gitstore.Oid{g.oid(head)}
	}
	row, err := record.NewRow(kind, task, index, prev, actor, data)
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[string]gitstore.Oid{}
	for path, b := range files {
		blobs[path] = g.write("blob", b)
	}
	tree, trees, err := gitstore.TreeOf(blobs)
	if err != nil {
		t.Fatal(err)
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
			t.Fatal(err)
		}
		c.Signature = sig
	}
	id := g.write("commit", gitstore.EncodeCommit(c))
	args := []string{"update-ref", ref, id.String()}
	if head != "" {
		args = append(args, head)
	}
	g.Git(args...)
	return row
}

func (g *Forger) write(kind string, data []byte) gitstore.Oid {
	cmd := exec.Command("git", "-C", g.Dir, "hash-object", "-w", "-t", kind, "--stdin")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		g.T.Fatalf("hash-object: %v", err)
	}
	return g.oid(strings.TrimSpace(string(out)))
}

func (g *Forger) oid(s string) gitstore.Oid {
	o, err := gitstore.ParseOid(s)
	if err != nil {
		g.T.Fatalf("oid %q: %v", s, err)
	}
	return o
}

// MalloryToken is the claim token of the forged claim.
const MalloryToken = "bct_mallory_token"

// A Forgery appends the rows of one kind of forgery to a task's chains and
// returns how many it appended. The task is set up as Setup says.
type Forgery struct {
	Name  string
	Chain string // "ledger" or "journal"
	Rows  func(g *Forger, task string) int
}

// Setup is what the forgeries assume of the repository and the task: at
// least two commits (HEAD~1 exists); the task declares the gate "build"
// (command "true") and the required evidence producer "tests" (command
// "true"), and is claimed; the key "summary" has a version 1.
const Setup = "two commits; gate build and evidence tests declared; claimed; summary v1 posted"

// Forgeries are the forgeries of every kind of row that grants something:
// claims, transitions (release, start, complete, suspend and resume), work
// rows (checkpoint, diff, gate, evidence) and artifacts.
var Forgeries = []Forgery{
	{"claim", "ledger", func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"}, nil)
		g.AppendRow(refs.Ledger(task), task, record.KindTaskClaimed, "mallory", ledger.Claimed{Agent: "mallory", ClaimID: "claim-forged", TokenSHA256: bernstein.TokenHash(MalloryToken)}, nil)
		return 2
	}},
	{"release", "ledger", func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskReleased, "mallory", ledger.Transition{Reason: "forged"}, nil)
		return 1
	}},
	{"start", "ledger", func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskStarted, "mallory", ledger.Transition{}, nil)
		return 1
	}},
	{"complete", "ledger", func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskCompleted, "mallory", ledger.Transition{}, nil)
		return 1
	}},
	{"start-again", "ledger", func(g *Forger, task string) int {
		g.AppendRow(refs.Ledger(task), task, record.KindTaskSuspended, "mallory", ledger.Transition{}, nil)
		g.AppendRow(refs.Ledger(task), task, record.KindTaskResumed, "mallory", ledger.Transition{}, nil)
		return 2
	}},
	{"checkpoint", "journal", func(g *Forger, task string) int {
		g.AppendRow(refs.Journal(task), task, record.KindCheckpoint, "mallory", record.Checkpoint{Commit: g.Git("rev-parse", "HEAD~1")}, nil)
		return 1
	}},
	{"diff", "journal", func(g *Forger, task string) int {
		patch := []byte("diff --git a/x b/x\n+forged\n")
		out := record.Output{Path: "outputs/000009-diff.patch", Blob: gitstore.HashObject(gitstore.TypeBlob, patch).String(), Hash: record.Sum(patch), Size: int64(len(patch))}
		g.AppendRow(refs.Journal(task), task, record.KindDiffCaptured, "mallory", record.DiffCaptured{Base: g.Git("rev-parse", "HEAD~1"),
			Head: g.Git("rev-parse", "HEAD"), Patch: out, Files: 1, Added: 1}, map[string][]byte{out.Path: patch})
		return 1
	}},
	{"gate", "journal", func(g *Forger, task string) int {
		log := []byte("all good\n")
		out := record.Output{Path: "outputs/000009-gate-build.log", Blob: gitstore.HashObject(gitstore.TypeBlob, log).String(), Hash: record.Sum(log), Size: int64(len(log))}
		g.AppendRow(refs.Journal(task), task, record.KindGateAttempt, "mallory", record.GateAttempt{Gate: "build", Command: "true", ExitCode: 0, Passed: true, Output: out}, map[string][]byte{out.Path: log})
		return 1
	}},
	{"evidence", "journal", func(g *Forger, task string) int {
		log := []byte("passed\n")
		out := record.Output{Path: "outputs/000009-evidence-tests.log", Blob: gitstore.HashObject(gitstore.TypeBlob, log).String(), Hash: record.Sum(log), Size: int64(len(log))}
		g.AppendRow(refs.Journal(task), task, record.KindEvidenceResult, "mallory", record.EvidenceResult{Producer: "tests", Kind: "command", Command: "true", Required: true, ExitCode: 0, Passed: true, Output: out}, map[string][]byte{out.Path: log})
		return 1
	}},
	{"artifact", "journal", func(g *Forger, task string) int {
		p, _ := artifact.Payload{Type: artifact.TypeReport, Body: ForgedBody}.Canonical()
		blob := gitstore.HashObject(gitstore.TypeBlob, p)
		g.AppendRow(refs.Journal(task), task, record.KindArtifactPosted, "agent", record.ArtifactPosted{Key: "summary", ArtifactType: artifact.TypeReport,
			Version: 2, ContentHash: record.Sum(p), Blob: blob.String(), Size: int64(len(p)), SpineEntryHash: record.Sum([]byte("made up"))},
			map[string][]byte{record.ArtifactPath("summary", 2): p})
		return 1
	}},
}

// ForgedBody is the body of the forged artifact version: it must be shown
// nowhere.
const ForgedBody = "forged findings"

// A Variant is a way of signing forged rows, and the proof state they get
// on the honest host.
type Variant struct {
	Name  string
	State string // tampered or unverifiable
	Make  func(t testing.TB, dir string) *Forger
}

// Variants are the ways of signing against the honest writer honest of the
// repository: unsigned; signed by another key in the honest writer's name;
// signed by a writer of the forger's own, whose key it publishes (it runs
// bernstein init) but the honest host does not pin.
func Variants(honest string) []Variant {
	return []Variant{
		{"unsigned", "tampered", func(t testing.TB, dir string) *Forger { return &Forger{T: t, Dir: dir, Writer: honest} }},
		{"signed-in-the-writers-name", "tampered", func(t testing.TB, dir string) *Forger {
			other, _, err := keys.Create(t.TempDir(), honest)
			if err != nil {
				t.Fatal(err)
			}
			return &Forger{T: t, Dir: dir, Signer: other, Writer: honest}
		}},
		{"signed-by-an-unpinned-writer", "unverifiable", func(t testing.TB, dir string) *Forger {
			home := filepath.Join(t.TempDir(), "mallory")
			if _, err := bernstein.Init(bernstein.Options{Repo: dir, Home: home}, "mallory"); err != nil {
				t.Fatal(err)
			}
			id, err := keys.Load(home)
			if err != nil {
				t.Fatal(err)
			}
			return &Forger{T: t, Dir: dir, Signer: id, Writer: "mallory"}
		}},
	}
}
