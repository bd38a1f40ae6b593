package tests

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"

	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The writer's own spine and audit mirror (docs/trust.md, The writer whose
// own spine, audit mirror or archive it is): a post builds only on a head
// its writer verifies as its own. A commit appended with plain git (well
// formed, chained to the writer's last entry, but unsigned or signed by
// another key) is reported as tampered and built past: the writer's next
// entry goes on its last verified head, over the forged value, and every
// reader finds the writer's chain whole. An entry of the writer's own past
// the head it remembers (a post interrupted before its heads memory was
// written) raises no alarm and is built on. Every expectation is read with
// git.

// forgeNextEntry appends to ref (test-writer's spine or audit mirror) with
// plain git the writer's next entry in every way but its signature (and,
// in the audit mirror, its HMAC, whose key only the writer has): its seq
// and prev chained to the head entry, its committer the writer. It
// returns the new commit, unsigned.
func forgeNextEntry(f *fixture, ref string) string {
	f.t.Helper()
	return forgeEntry(f, ref, nil, "")
}

// forgeEntry writes the commit forgeNextEntry writes, with what change
// names wrong ("seq": a seq skipped, "prev": a prev that does not link,
// "writer": another writer's name, "hmac": an HMAC that is not the
// writer's), signed by id when id is not nil (with its HMAC, but for
// "hmac").
func forgeEntry(f *fixture, ref string, id *keys.Identity, change string) string {
	f.t.Helper()
	honest := rev(f, ref)
	_, msg, _ := strings.Cut(f.git("cat-file", "commit", honest), "\n\n")
	rec, err := record.RecordFromMessage([]byte(msg))
	if err != nil {
		f.t.Fatal(err)
	}
	seq := int64(1)
	if change == "seq" {
		seq = 2
	}
	writer := "test-writer"
	if change == "writer" {
		writer = "mallory"
	}
	var b []byte
	if strings.Contains(ref, "/audit/") {
		a, err := record.ParseAuditEntry(rec)
		if err != nil {
			f.t.Fatal(err)
		}
		next := a
		next.Writer, next.Seq, next.PrevHMAC = writer, a.Seq+seq, a.HMAC
		if change == "prev" {
			next.PrevHMAC = strings.Repeat("cd", 32)
		}
		next.Event, next.Details = "artifact.posted", []byte(`{"forged":true}`)
		next.HMAC = strings.Repeat("ab", 32)
		if id != nil && change != "hmac" {
			next.HMAC = id.MAC(next.MACBytes())
		}
		b = next.Bytes()
	} else {
		e, err := record.ParseSpineEntry(rec)
		if err != nil || e.Artifact == nil {
			f.t.Fatalf("the spine head is no artifact entry: %v", err)
		}
		next := *e.Artifact
		next.Writer, next.Seq, next.Prev, next.Version = writer, e.Header.Seq+seq, e.Hash, e.Artifact.Version+1
		if change == "prev" {
			next.Prev = record.Sum([]byte("another entry"))
		}
		b = record.MustCanonical(next)
	}
	committer := "test-writer"
	if id != nil {
		committer = id.Writer
	}
	who := gitstore.Ident(committer, committer+"@bernstein", time.Now().Unix())
	cm := gitstore.Commit{Tree: mustOid(f.t, rev(f, honest+"^{tree}")), Parents: []gitstore.Oid{mustOid(f.t, honest)},
		Author: who, Committer: who, Message: record.Message("forged", b)}
	if id != nil {
		if cm.Signature, err = id.SignCommit(gitstore.EncodeCommit(cm)); err != nil {
			f.t.Fatal(err)
		}
	}
	return strings.TrimSpace(f.git2(string(gitstore.EncodeCommit(cm)), "hash-object", "-t", "commit", "-w", "--stdin"))
}

// ownChainFixture posts one version of OC-1/k; it returns the fixture and
// the claim token.
func ownChainFixture(t *testing.T) (*fixture, string) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "OC-1", "agent")
	f.post(s, "OC-1", "k", "agent", tok, report("one"))
	s.Close()
	return f, tok
}

// postCLI posts a version of OC-1/key and returns stderr.
func postCLI(f *fixture, tok, key string) string {
	f.t.Helper()
	out, errOut, code := f.cli("", "artifact", "post", "OC-1", key, "--type", "report", "--body", "# "+key,
		"--agent", "agent", "--claim-token", tok)
	if code != 0 {
		f.t.Fatalf("post %s: exit %d\n%s%s", key, code, out, errOut)
	}
	return errOut
}

func TestOwnChainBuildsPastForgedEntry(t *testing.T) {
	for _, kind := range []string{"spine", "audit"} {
		for _, signer := range []string{"unsigned", "other key", "own key seq", "own key prev", "own key writer", "own key hmac", "blob", "rewound", "pinned writer"} {
			if (signer == "own key hmac" || signer == "rewound") && kind == "spine" {
				continue
			}
			t.Run(kind+"/"+strings.ReplaceAll(signer, " ", "_"), func(t *testing.T) {
				f, tok := ownChainFixture(t)
				ref := refs.Prefix + kind + "/test-writer"
				honest := rev(f, ref)
				var forged string
				switch signer {
				case "unsigned":
					forged = forgeNextEntry(f, ref)
				case "other key":
					forged = f.signedByOther(forgeNextEntry(f, ref))
				case "blob":
					forged = f.blob("no commit")
				case "pinned writer":
					// Signed by another writer of the repository, whose key
					// this host pins, as that writer's commit: a signature
					// that verifies, but not the writer's own.
					o := f.secondHome("mallory")
					s2 := openWith(t, o)
					f.claimed(s2, "M-1", "agent")
					s2.Close()
					if _, errOut, code := f.cli("", "keys", "pin", "mallory"); code != 0 {
						t.Fatal(errOut)
					}
					honest = rev(f, ref)
					id, err := keys.Load(o.Home)
					if err != nil {
						t.Fatal(err)
					}
					forged = forgeEntry(f, ref, id, "")
				case "rewound":
					// Moved back one entry, and a forged entry on that.
					f.git("update-ref", ref, honest+"~1", honest)
					forged = forgeNextEntry(f, ref)
					f.git("update-ref", ref, honest, honest+"~1")
				default:
					// Signed by the writer's own key, but not its next
					// entry: what a write of the writer's never leaves.
					id, err := keys.Load(f.home)
					if err != nil {
						t.Fatal(err)
					}
					forged = forgeEntry(f, ref, id, strings.TrimPrefix(signer, "own key "))
				}
				f.git("update-ref", ref, forged, honest)

				errOut := postCLI(f, tok, "two")
				if !strings.Contains(errOut, "warning: "+ref) || !strings.Contains(errOut, "tampered") || !strings.Contains(errOut, forged) {
					t.Errorf("stderr %q: want a warning that %s (at %s) was tampered with", errOut, ref, forged)
				}
				head := rev(f, ref)
				if head == honest || !f.isAncestor(honest, head) {
					t.Fatalf("%s is at %s, which does not extend the writer's head %s", ref, head, honest)
				}
				if f.isAncestor(forged, head) {
					t.Fatalf("%s at %s still holds the forged %s", ref, head, forged)
				}
				if kind == "spine" {
					// One post, one spine entry, on the writer's own head.
					if p := rev(f, ref+"^"); p != honest {
						t.Fatalf("the new spine entry's parent is %s, want %s", p, honest)
					}
				}
				for _, args := range [][]string{{"audit", "verify"}, {"task", "show", "OC-1"}, {"artifact", "show", "OC-1", "two"}, {"task", "list", "--strict"}} {
					out, errOut, code := f.cli("", args...)
					if code != 0 || strings.Contains(strings.ReplaceAll(out+errOut, " 0 tampered", ""), "tamper") || args[0] == "audit" && !strings.Contains(out, "everything holds") {
						t.Errorf("%v after the post: exit %d\n%s%s", args, code, out, errOut)
					}
				}
				// The next post finds the chain its writer's own.
				if errOut := postCLI(f, tok, "three"); strings.Contains(errOut, "warning") {
					t.Fatalf("the post after the recovery warns: %q", errOut)
				}
				if p := rev(f, ref+"~1"); kind == "spine" && p != head {
					t.Fatalf("the spine entry after the recovery sits on %s, want %s", p, head)
				}
			})
		}
	}
}

// appendForged appends to ref an entry made with plain git
// (forgeNextEntry) and returns the honest head and the forged one.
func appendForged(f *fixture, ref string) (honest, forged string) {
	honest = rev(f, ref)
	forged = forgeNextEntry(f, ref)
	f.git("update-ref", ref, forged, honest)
	return honest, forged
}

// interruptPost posts through the CLI and then puts the writer's heads
// memory back as it was before that post, as a post cut off before it
// wrote the memory leaves it; it returns the spine and audit heads the
// post left.
func interruptPost(f *fixture, tok string) (spine, audit string) {
	path := f.headsFile()
	memory, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	postCLI(f, tok, "two")
	spine, audit = rev(f, refs.Spine("test-writer")), rev(f, refs.Audit("test-writer"))
	if err := os.WriteFile(path, memory, 0o644); err != nil {
		f.t.Fatal(err)
	}
	return spine, audit
}

// TestOwnChainAfterInterruptedPost: a post that moved the refs and stopped
// before its heads memory was written (the memory is put back as it was
// before that post) leaves the writer's own signed entries past the heads
// it remembers: the next post builds on them, with no word of tampering.
func TestOwnChainAfterInterruptedPost(t *testing.T) {
	f, tok := ownChainFixture(t)
	spine, audit := interruptPost(f, tok)
	if b, _ := os.ReadFile(f.headsFile()); strings.Contains(string(b), spine) || strings.Contains(string(b), audit) ||
		!strings.Contains(string(b), "spine/test-writer") || !strings.Contains(string(b), "audit/test-writer") {
		t.Fatalf("the heads memory does not stand before the second post:\n%s", b)
	}
	if errOut := postCLI(f, tok, "three"); strings.Contains(errOut, "warning") || strings.Contains(errOut, "tamper") {
		t.Fatalf("a false alarm after an interrupted post: %q", errOut)
	}
	if p := rev(f, refs.Spine("test-writer")+"^"); p != spine {
		t.Fatalf("the spine entry's parent is %s, want the interrupted post's %s", p, spine)
	}
	if !f.isAncestor(audit, rev(f, refs.Audit("test-writer"))) {
		t.Fatalf("the audit mirror does not extend the interrupted post's %s", audit)
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
}

// TestPostResultNamesForgedOwnChain: the post's result carries the
// warning of the writer's own chain it built past, and nothing when the
// chain is the writer's.
func TestPostResultNamesForgedOwnChain(t *testing.T) {
	f, tok := ownChainFixture(t)
	ref := refs.Spine("test-writer")
	honest, forged := appendForged(f, ref)
	s := f.open()
	res := f.post(s, "OC-1", "two", "agent", tok, report("two"))
	if len(res.Tampered) != 1 || !strings.HasPrefix(res.Tampered[0], ref+" (at "+forged+") was tampered with") {
		t.Fatalf("tampered: %q, want the warning of %s at %s", res.Tampered, ref, forged)
	}
	if p := rev(f, ref+"^"); p != honest {
		t.Fatalf("the new spine entry's parent is %s, want %s", p, honest)
	}
	if res := f.post(s, "OC-1", "three", "agent", tok, report("three")); len(res.Tampered) != 0 {
		t.Fatalf("tampered after the recovery: %q", res.Tampered)
	}
}

// forgetHead removes the lines of ref's chain from the writer's heads
// memory, as on a host whose BERNSTEIN_HOME never wrote here.
func forgetHead(f *fixture, chain string) {
	f.t.Helper()
	path := f.headsFile()
	b, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.Contains(l, chain) {
			kept = append(kept, l)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(kept, "")), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// TestOwnChainForgedNoHeadRecorded: with no head of its own spine or
// audit mirror remembered, a writer whose chain plain git extended (an
// unsigned entry, one signed by another key, two unsigned entries) still
// builds only on its own: on the newest commit below what was found that
// it verifies as its own, with a warning naming what was found; audit
// verify then holds.
func TestOwnChainForgedNoHeadRecorded(t *testing.T) {
	for _, kind := range []string{"spine", "audit"} {
		for _, forge := range []string{"unsigned", "other key", "two unsigned"} {
			t.Run(kind+"/"+strings.ReplaceAll(forge, " ", "_"), func(t *testing.T) {
				f, tok := ownChainFixture(t)
				ref := refs.Prefix + kind + "/test-writer"
				honest := rev(f, ref)
				var forged string
				switch forge {
				case "unsigned":
					forged = forgeNextEntry(f, ref)
				case "other key":
					forged = f.signedByOther(forgeNextEntry(f, ref))
				case "two unsigned":
					first := forgeNextEntry(f, ref)
					f.git("update-ref", ref, first, honest)
					forged = forgeNextEntry(f, ref)
					f.git("update-ref", ref, honest, first)
				}
				f.git("update-ref", ref, forged, honest)
				forgetHead(f, kind+"/test-writer")

				errOut := postCLI(f, tok, "two")
				if !strings.Contains(errOut, "warning: "+ref+" (at "+forged+") was tampered with") {
					t.Errorf("stderr %q: want a warning that %s (at %s) was tampered with", errOut, ref, forged)
				}
				head := rev(f, ref)
				if f.isAncestor(forged, head) || !f.isAncestor(honest, head) {
					t.Fatalf("%s is at %s: want it past the writer's %s and not past the forged %s", ref, head, honest, forged)
				}
				if kind == "spine" {
					if p := rev(f, ref+"^"); p != honest {
						t.Fatalf("the new spine entry's parent is %s, want %s", p, honest)
					}
				}
				if out, errOut, code := f.cli("", "audit", "verify"); code != 0 || !strings.Contains(out, "everything holds") {
					t.Fatalf("audit verify after the post: exit %d\n%s%s", code, out, errOut)
				}
				if errOut := postCLI(f, tok, "three"); strings.Contains(errOut, "warning") {
					t.Fatalf("the post after the recovery warns: %q", errOut)
				}
			})
		}
	}
}

// TestOwnChainNoHeadRecordedNoAlarm: with no head remembered and the
// chains as the writer left them, a post raises no alarm and builds on
// them.
func TestOwnChainNoHeadRecordedNoAlarm(t *testing.T) {
	f, tok := ownChainFixture(t)
	spine := rev(f, refs.Spine("test-writer"))
	forgetHead(f, "spine/test-writer")
	forgetHead(f, "audit/test-writer")
	if errOut := postCLI(f, tok, "two"); strings.Contains(errOut, "warning") || strings.Contains(errOut, "tamper") {
		t.Fatalf("a false alarm with no head remembered: %q", errOut)
	}
	if p := rev(f, refs.Spine("test-writer")+"^"); p != spine {
		t.Fatalf("the new spine entry sits on %s, want %s", p, spine)
	}
}
