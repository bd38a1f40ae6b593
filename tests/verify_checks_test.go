package tests

// Forgeries that each reach exactly one integrity check of `bernstein audit
// verify`: a spine commit whose signature no longer covers its payload, a
// spine or journal link that points elsewhere under valid signatures, a seal
// whose detached signature does not cover its entry, an actor the spine
// entry does not bind. Each runs on a copy of the tamper matrix's template
// and asserts the failures exactly; with the check removed, the forgery
// passes or is reported by another check, and the test fails.

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

const mxD = "MX-4" // made on a case's copy: one post, the newest spine entry

// postFresh creates task MX-4 on the copy, claims it and posts notes v1,
// whose spine entry becomes the head of the writer's spine. It returns the
// version.
func (r *mxRepo) postFresh() mxVersion {
	r.t.Helper()
	s := r.open()
	tok := r.claimed(s, mxD, "agent-d")
	res := r.post(s, mxD, "notes", "agent-d", tok, report("MARK-D1 notes of the fresh task: pewter, moss"))
	s.Close()
	if res.JournalIndex != 0 || res.Version != 1 {
		r.t.Fatalf("fresh post: %+v", res)
	}
	v := mxVersion{Task: mxD, Key: "notes", Version: 1, Index: 0, Blob: res.Blob, Spine: res.SpineEntryHash, Seq: r.tp.seqs}
	if d, code := r.verify(); code != 0 {
		r.t.Fatalf("after the fresh post: exit %d\n%s", code, d.dump())
	}
	return v
}

// expectFresh is what a report lists with MX-4 posted: every template
// version in state others, MX-4's notes v1 in state fresh.
func (tp *mxTemplate) expectFresh(others, fresh string) mxExpect {
	e := tp.expect().all(others)
	e[mxD] = []mxVersionState{{Key: "notes", Version: 1, JournalIndex: 0, State: fresh}}
	return e
}

// spineEntry parses the record of a spine commit.
func (r *mxRepo) spineEntry(c gitstore.Commit) record.SpineEntry {
	r.t.Helper()
	rec, err := record.RecordFromMessage(c.Message)
	if err != nil {
		r.t.Fatal(err)
	}
	e, err := record.ParseSpineEntry(rec)
	if err != nil {
		r.t.Fatal(err)
	}
	return e
}

// summaryOf is the first line of a commit message.
func summaryOf(c gitstore.Commit) string {
	for i, b := range c.Message {
		if b == '\n' {
			return string(c.Message[:i])
		}
	}
	return string(c.Message)
}

func TestVerifyChecks(t *testing.T) {
	tp := mxBuild(t)
	run := func(name string, fn func(t *testing.T, r *mxRepo)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, tp.copy(t))
		})
	}

	// 1, 2. The newest spine entry (MX-4 notes v1) edited by someone without
	// the writer's key: its content hash (and the journal row's, blob and
	// tree) replaced, each commit keeping the writer's signature over the
	// old payload. The signer is the writer's own key, so only verifying
	// the signature over the payload tells: pinned (on the writer's host
	// and on a clone that pins the key) and unpinned (a clone whose only
	// key is the one its refs/bernstein/writers ref publishes).
	run("spine-stale-signature", func(t *testing.T, r *mxRepo) {
		v := r.postFresh()
		body, blob := r.payload("forged notes under the writer's stale signatures")

		head := r.rev(refs.Spine(mxWriter))
		sc, _ := r.commit(head)
		entry := r.spineEntry(sc)
		if entry.Artifact == nil || entry.Hash != v.Spine {
			t.Fatalf("the spine head is not the fresh post's entry: %+v", entry.Header)
		}
		a := *entry.Artifact
		a.ContentHash = record.Sum(body)
		eb := record.MustCanonical(a)
		sc.Message = record.Message(summaryOf(sc), eb)
		if len(sc.Signature) == 0 {
			t.Fatal("the spine commit is not signed")
		}
		r.git("update-ref", refs.Spine(mxWriter), r.writeCommit(sc, nil).String(), head.String())

		rows := r.journal(mxD)
		art := rows[0].art(t)
		art.ContentHash, art.Blob, art.Size, art.SpineEntryHash = record.Sum(body), blob.String(), int64(len(body)), record.Sum(eb)
		rows[0].setArt(art)
		jc := rows[0].it.Commit
		jc.Tree = r.editTree(rows[0].Tree, map[string]gitstore.Oid{"artifacts/notes/v1.json": blob})
		jc.Message = record.Message(rows[0].it.Summary, rows[0].Row.Bytes())
		r.git("update-ref", refs.Journal(mxD), r.writeCommit(jc, nil).String(), rows[0].it.ID.String())

		wants := []mxWant{
			// The entry itself, and the version it binds.
			{mxD, "notes", 1, 0, mxWriter, v.Seq, "spine_signature", "signature does not verify"},
			wVer(mxD, "notes", 1, 0, "spine_signature").saying("signature does not verify"),
			// The audit mirror names the entry as the writer wrote it.
			{mxD, "notes", 1, 0, mxWriter, int64(r.postedAt(v)), "audit_mirror", "no spine entry"},
		}
		check := func(t *testing.T, r *mxRepo, others string, extra []mxWant, args ...string) {
			t.Helper()
			d, code := r.verify(args...)
			if code != 1 || d.Verified {
				t.Fatalf("exit %d verified %v\n%s", code, d.Verified, d.raw)
			}
			expectFailures(t, d, append(extra, wants...)...)
			checkVersions(t, d, tp.expectFresh(others, "tampered"))
		}
		// The writer's host also knows the heads it wrote, which the
		// edited commits replaced (docs/trust.md, Rollbacks).
		t.Run("own-host", func(t *testing.T) {
			check(t, r, "verified", []mxWant{wTask(mxD, 0, "rollback").saying("rewritten"), wSeq(mxWriter, v.Seq, "rollback").saying("rewritten")})
		})
		c := r.clone()
		pin := r.allowedSigners()
		t.Run("pinned-clone", func(t *testing.T) { check(t, c, "verified", nil, "--allowed-signers", pin) })
		// Unpinned, the others are unverifiable; the edited one is
		// tampered, not unverifiable: the published key does not sign it.
		t.Run("unpinned-clone", func(t *testing.T) { check(t, c, "unverifiable", nil) })
	})

	// 3. An insider holding the writer's keys (signing and HMAC) rewrites
	// the newest spine entry so that its prev names the entry two back
	// (seq still contiguous), re-signs it, re-points the journal row and
	// the audit mirror's post at it and re-signs those: every signature and
	// HMAC checks; only the spine's prev link tells.
	run("spine-prev-link", func(t *testing.T, r *mxRepo) {
		v := r.postFresh()
		id := r.identity()
		items := r.items(refs.Spine(mxWriter))
		if int64(len(items)) != v.Seq+1 {
			t.Fatalf("%d spine entries, want %d", len(items), v.Seq+1)
		}
		elsewhere := record.Sum(items[v.Seq-2].Record)
		r.rowSigner = id
		m := r.resignSpine(id, v.Seq, func(a *record.SpineArtifactEntry) {
			if a.Seq == v.Seq {
				a.Prev = elsewhere
			}
		})
		forged := m[v.Spine]
		if forged == v.Spine || forged == "" {
			t.Fatalf("the entry was not rewritten")
		}
		k := r.postedAt(v)
		r.rewriteAudit(mxAuditOpts{renumber: true, mac: id, signer: id}, func(l []mxAudit) []mxAudit {
			l[k].E.Resource = string(forged)
			return l
		})
		if r.spineEntry(r.items(refs.Spine(mxWriter))[v.Seq].Commit).Header.Prev != elsewhere {
			t.Fatalf("the forged entry does not link elsewhere")
		}

		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d\n%s", code, d.raw)
		}
		// The heads this host's writer wrote tell the rewritten spine,
		// journal row and audit mirror too.
		audits := int64(len(r.auditEntries()))
		expectFailures(t, d,
			wSeq(mxWriter, v.Seq, "spine_chain").saying(fmt.Sprintf("spine of %s is broken at seq %d: entry's prev does not link to the entry before it", mxWriter, v.Seq)),
			wVer(mxD, "notes", 1, 0, "spine_chain").saying("prev does not link"),
			wTask(mxD, 0, "rollback").saying("rewritten"), wSeq(mxWriter, v.Seq, "rollback").saying("rewritten"),
			wSeq(mxWriter, audits-1, "rollback").saying("rewritten"))
		checkVersions(t, d, tp.expectFresh("verified", "tampered"))
	})

	// 4. MX-3's seal commit re-signed validly by the writer's key, its
	// seal.sig replaced by a detached signature over other bytes (by the
	// writer's key) or over the entry by another key: the commit signature
	// checks, the entry and the journal agree, only the detached signature
	// tells.
	for _, variant := range []struct {
		name string
		sign func(r *mxRepo, entry []byte) ([]byte, error)
	}{
		{"other-bytes", func(r *mxRepo, entry []byte) ([]byte, error) {
			other := append(append([]byte(nil), entry...), ' ')
			return r.identity().SignDetached(other)
		}},
		{"other-key", func(r *mxRepo, entry []byte) ([]byte, error) {
			return mxAttacker(r.t).SignDetached(entry)
		}},
	} {
		run("seal-detached-signature/"+variant.name, func(t *testing.T, r *mxRepo) {
			head := r.rev(refs.Spine(mxWriter))
			c, _ := r.commit(head)
			entry := r.spineEntry(c)
			if entry.Seal == nil || entry.Seal.TaskID != mxC {
				t.Fatalf("the spine head is not MX-3's seal: %+v", entry.Header)
			}
			sig, err := variant.sign(r, entry.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			blob := r.write("blob", []byte(base64.StdEncoding.EncodeToString(sig)+"\n"))
			c.Tree = r.editTree(c.Tree, map[string]gitstore.Oid{record.SealSignatureFile: blob})
			r.git("update-ref", refs.Spine(mxWriter), r.writeCommit(c, r.identity()).String(), head.String())
			if out, err := r.gitErr("-c", "gpg.ssh.allowedSignersFile="+r.allowedSigners(), "verify-commit", refs.Spine(mxWriter)); err != nil {
				t.Fatalf("the re-signed seal commit does not verify with plain git: %v %s", err, out)
			}

			d, code := r.verify()
			if code != 1 || d.identity(mxC) != "mismatched" {
				t.Fatalf("exit %d identity %s\n%s", code, d.identity(mxC), d.raw)
			}
			expectFailures(t, d, wTask(mxC, nullN, "journal_seal").saying("detached seal signature does not verify"))
			checkVersions(t, d, tp.expect())
		})
	}

	// 5. mx:2's last row (notes v2) given another actor, and every commit
	// of its journal re-signed by the insider with the writer's key: the
	// row, its chain and every signature hold; the spine entry names
	// agent-b.
	run("spine-binding-actor", func(t *testing.T, r *mxRepo) {
		r.rowSigner = r.identity()
		r.rewriteJournal(mxB, func(rows []mxRow) []mxRow {
			last := &rows[3]
			if a := last.art(t); a.Key != "notes" || a.Version != 2 {
				t.Fatalf("mx:2 index 3 is %s v%d", a.Key, a.Version)
			}
			last.Row.Actor = "mallory"
			last.it.Commit.Author = gitstore.Ident("mallory", "mallory@bernstein", 1700000000)
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d\n%s", code, d.raw)
		}
		expectFailures(t, d, wVer(mxB, "notes", 2, 3, "spine_binding").saying("binds a different actor"))
		checkVersions(t, d, tp.expect().set(mxB, 3, "tampered"))
	})

	// 7. mx:2's last row (notes v2) re-committed by another writer that the
	// reader trusts, its content unchanged: the row's commit is proven, but
	// the spine entry that seals it is the first writer's, so the two
	// writers disagree about who recorded it.
	run("spine-binding-writer", func(t *testing.T, r *mxRepo) {
		other, _, err := keys.Create(t.TempDir(), "other-writer")
		if err != nil {
			t.Fatal(err)
		}
		rows := r.journal(mxB)
		last := rows[3]
		c := last.it.Commit
		c.Committer = gitstore.Ident("other-writer", "other-writer@bernstein", 1700000000)
		forged := r.writeCommit(c, other)
		r.git("update-ref", refs.Journal(mxB), forged.String(), last.it.ID.String())
		pins := filepath.Join(t.TempDir(), "allowed_signers")
		lines := keys.AllowedSignersLine(mxWriter, r.identity().AuthorizedKey()) + "\n" + keys.AllowedSignersLine("other-writer", other.AuthorizedKey()) + "\n"
		if err := os.WriteFile(pins, []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
		d, code := r.verify("--allowed-signers", pins)
		if code != 1 {
			t.Fatalf("exit %d\n%s", code, d.raw)
		}
		expectFailures(t, d, wVer(mxB, "notes", 2, 3, "spine_binding").saying("binds a different writer"))
		checkVersions(t, d, tp.expect().set(mxB, 3, "tampered"))
	})

	// 6. mx:2's last row with a prev naming the row two back (its index
	// right), its commit signed with the writer's key: only the journal's
	// prev link tells.
	run("journal-prev-link", func(t *testing.T, r *mxRepo) {
		id := r.identity()
		rows := r.journal(mxB)
		last := rows[3]
		last.Row.Prev = rows[1].Row.Hash()
		c := last.it.Commit
		c.Message = record.Message(last.it.Summary, last.Row.Bytes())
		forged := r.writeCommit(c, id)
		if got, _ := r.commit(forged); len(got.Parents) != 1 || got.Parents[0] != rows[2].it.ID {
			t.Fatalf("the forged row is not on top of index 2")
		}
		r.git("update-ref", refs.Journal(mxB), forged.String(), last.it.ID.String())
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d\n%s", code, d.raw)
		}
		expectFailures(t, d, wTask(mxB, 3, "journal_chain").saying("journal chain of mx:2 is broken at index 3: row's prev does not link to the row before it"))
		checkVersions(t, d, tp.expect().set(mxB, 3, "tampered"))
	})
}
