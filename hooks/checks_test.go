package hooks_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/hooks"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The guard's checks one by one. A writer's own key signs what is forged
// here (a buggy or compromised writer), so that each structural check is
// seen to hold on its own, not only behind the signature check. Each case
// names the check that must refuse it and words from the reason.

// lab is a host with history, and forged commits on top of its refs that
// are never moved: each case hands the guard its own updates.
type lab struct {
	t      *testing.T
	h      *host
	id     *keys.Identity // the host's writer
	other  *keys.Identity // another key, of nobody pinned
	objs   []gitstore.Object
	writer string
}

func newLab(t *testing.T) *lab {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	h.checkpoint("T-1")
	h.post("T-1", "summary", "second")
	id, err := keys.Load(h.home)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := keys.Create(t.TempDir(), "mallory")
	if err != nil {
		t.Fatal(err)
	}
	return &lab{t: t, h: h, id: id, other: other, writer: "host-a"}
}

func (l *lab) add(typ gitstore.ObjectType, data []byte) gitstore.Oid {
	o := gitstore.NewObject(typ, data)
	l.objs = append(l.objs, o)
	return o.ID
}

func (l *lab) tree(files map[string][]byte) gitstore.Oid {
	l.t.Helper()
	ids := map[string]gitstore.Oid{}
	for p, b := range files {
		ids[p] = l.add(gitstore.TypeBlob, b)
	}
	id, trees, err := gitstore.TreeOf(ids)
	if err != nil {
		l.t.Fatal(err)
	}
	l.objs = append(l.objs, trees...)
	if len(files) == 0 {
		l.add(gitstore.TypeTree, nil)
	}
	return id
}

// commit forges a chain commit; signer nil leaves it unsigned.
func (l *lab) commit(tree gitstore.Oid, parents []gitstore.Oid, committer string, rec []byte, signer *keys.Identity) gitstore.Oid {
	l.t.Helper()
	c := gitstore.Commit{Tree: tree, Parents: parents, Author: gitstore.Ident(committer, committer+"@bernstein", 1700000000),
		Committer: gitstore.Ident(committer, committer+"@bernstein", 1700000000), Message: record.Message("forged", rec)}
	if signer != nil {
		sig, err := signer.SignCommit(gitstore.EncodeCommit(c))
		if err != nil {
			l.t.Fatal(err)
		}
		c.Signature = sig
	}
	return l.add(gitstore.TypeCommit, gitstore.EncodeCommit(c))
}

// tip is the end of a chain being extended: its commit and last record.
type tip struct {
	ref  string
	old  gitstore.Oid // the ref's value: the update's old side
	head gitstore.Oid
	rec  []byte
	pos  int64
}

func (l *lab) tip(ref string) *tip {
	l.t.Helper()
	head, err := (refs.Reader{Dir: l.h.s.GitDir()}).ReadOptional(ref)
	if err != nil {
		l.t.Fatal(err)
	}
	tp := &tip{ref: ref, old: head, head: head, pos: -1}
	if head.IsZero() {
		return tp
	}
	cc, err := chain.Read(l.h.s.Objects(), head)
	if err != nil {
		l.t.Fatal(err)
	}
	tp.rec = cc.Record
	switch {
	case strings.HasPrefix(ref, refs.WritersPrefix):
	case strings.HasPrefix(ref, refs.SpinePrefix):
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil {
			l.t.Fatal(err)
		}
		tp.pos = e.Header.Seq
	case strings.HasPrefix(ref, refs.AuditPrefix):
		a, err := record.ParseAuditEntry(cc.Record)
		if err != nil {
			l.t.Fatal(err)
		}
		tp.pos = a.Seq
	default:
		r, err := record.ParseRow(cc.Record)
		if err != nil {
			l.t.Fatal(err)
		}
		tp.pos = r.Index
	}
	return tp
}

func (tp *tip) prev() record.Hash {
	if tp.rec == nil {
		return ""
	}
	return record.Sum(tp.rec)
}

// push appends a commit carrying rec with tree to the tip.
func (l *lab) push(tp *tip, rec []byte, tree gitstore.Oid, committer string, signer *keys.Identity) {
	var parents []gitstore.Oid
	if !tp.head.IsZero() {
		parents = []gitstore.Oid{tp.head}
	}
	tp.head = l.commit(tree, parents, committer, rec, signer)
	tp.rec = rec
	tp.pos++
}

func (tp *tip) update() hooks.Update { return hooks.Update{Ref: tp.ref, Old: tp.old, New: tp.head} }

// row is a journal or ledger row's canonical bytes.
func (l *lab) row(kind, task string, index int64, prev record.Hash, data any) []byte {
	l.t.Helper()
	r, err := record.NewRow(kind, task, index, prev, "agent-1", data)
	if err != nil {
		l.t.Fatal(err)
	}
	return r.Bytes()
}

// checkpointRow appends a well-formed checkpoint row to a journal tip.
func (l *lab) checkpointRow(tp *tip, signer *keys.Identity) {
	l.push(tp, l.row(record.KindCheckpoint, "T-1", tp.pos+1, tp.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(nil), l.writer, signer)
}

// post is one artifact version: its payload, journal row and spine entry.
type post struct {
	key             string
	version         int64
	prevVersionHash record.Hash
	body            string
	// mutations of the row and the entry, applied before they are written
	row   func(*record.ArtifactPosted)
	entry func(*record.SpineArtifactEntry)
}

// appendPost appends a post to journal and spine tips, consistent unless a
// mutation says otherwise; it returns the spine entry's hash.
func (l *lab) appendPost(j, s *tip, p post) record.Hash {
	l.t.Helper()
	payload, err := artifact.Payload{Type: artifact.TypeReport, Body: p.body}.Canonical()
	if err != nil {
		l.t.Fatal(err)
	}
	e := record.SpineArtifactEntry{SpineHeader: record.SpineHeader{V: 1, Writer: l.writer, Seq: s.pos + 1, Prev: s.prev(), Kind: record.SpineArtifact},
		TaskID: "T-1", Key: p.key, Version: p.version, ContentHash: record.Sum(payload), PrevVersionHash: p.prevVersionHash, JournalIndex: j.pos + 1, Actor: "agent-1"}
	if p.entry != nil {
		p.entry(&e)
	}
	eb := record.MustCanonical(e)
	blob := gitstore.HashObject(gitstore.TypeBlob, payload)
	a := record.ArtifactPosted{Key: p.key, ArtifactType: "report", Version: p.version, ContentHash: record.Sum(payload), Blob: blob.String(),
		Size: int64(len(payload)), PrevVersionHash: p.prevVersionHash, SpineEntryHash: record.Sum(eb)}
	if p.row != nil {
		p.row(&a)
	}
	l.push(s, eb, l.tree(nil), l.writer, l.id)
	l.push(j, l.row(record.KindArtifactPosted, "T-1", j.pos+1, j.prev(), a), l.tree(map[string][]byte{record.ArtifactPath(p.key, p.version): payload}), l.writer, l.id)
	return record.Sum(eb)
}

// check writes the forged objects and runs the guard as the host's remote
// would, trusting the host's key.
func (l *lab) check(g *hooks.Guard, updates ...hooks.Update) *hooks.Result {
	l.t.Helper()
	if len(l.objs) > 0 {
		if _, err := l.h.s.Objects().WritePack(l.objs); err != nil {
			l.t.Fatal(err)
		}
		l.objs = nil
	}
	if g == nil {
		trust, err := l.h.s.Trust()
		if err != nil {
			l.t.Fatal(err)
		}
		g = &hooks.Guard{Trust: trust}
	}
	g.Objects, g.Refs = l.h.s.Objects(), refs.Reader{Dir: l.h.s.GitDir()}
	return g.Check(updates)
}

func (l *lab) seal(s *tip, seal record.SpineSealEntry, sign bool) {
	seal.SpineHeader = record.SpineHeader{V: 1, Writer: l.writer, Seq: s.pos + 1, Prev: s.prev(), Kind: record.SpineJournalSeal}
	eb := record.MustCanonical(seal)
	files := map[string][]byte{}
	if sign {
		sig, err := l.id.SignDetached(eb)
		if err != nil {
			l.t.Fatal(err)
		}
		files[record.SealSignatureFile] = []byte(base64.StdEncoding.EncodeToString(sig) + "\n")
	}
	l.push(s, eb, l.tree(files), l.writer, l.id)
}

func authorized(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// writersCommit forges a commit on host-a's writers ref publishing key,
// with allowed_signers naming signersKey, signed by signer.
func (l *lab) writersCommit(tp *tip, key, signersKey ssh.PublicKey, signer *keys.Identity) {
	tree := l.tree(map[string][]byte{
		l.writer + ".pub": []byte(authorized(key) + "\n"),
		"allowed_signers": []byte(keys.AllowedSignersLine(l.writer, authorized(signersKey)) + "\n"),
	})
	var parents []gitstore.Oid
	if !tp.head.IsZero() {
		parents = []gitstore.Oid{tp.head}
	}
	tp.head = l.commit(tree, parents, l.writer, []byte(`{}`), signer)
}

func TestGuardChecks(t *testing.T) {
	l := newLab(t)
	journal, ledgerRef := refs.Journal("T-1"), refs.Ledger("T-1")
	spine, audit, writers := refs.Spine("host-a"), refs.Audit("host-a"), refs.WriterKey("host-a", refs.KeyHex(l.id.PublicKey().Marshal()))
	noTrust := func() *hooks.Guard { return &hooks.Guard{Trust: keys.NewTrustSet(nil, nil)} }
	cases := []struct {
		name   string
		guard  func() *hooks.Guard
		forge  func() []hooks.Update
		check  string
		reason string
	}{
		{"journal prev", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.push(j, l.row(record.KindCheckpoint, "T-1", j.pos+1, record.Sum([]byte("elsewhere")), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_chain", "row's prev does not link to the row before it"},

		{"journal index skips ahead", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.push(j, l.row(record.KindCheckpoint, "T-1", j.pos+2, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_chain", "says index 4, but the remote's head has index 2"},

		{"journal index repeated inside the push", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.checkpointRow(j, l.id)
			l.push(j, l.row(record.KindCheckpoint, "T-1", j.pos, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_chain", "says index 3 where index 2 belongs"},

		{"journal row of another task", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.push(j, l.row(record.KindCheckpoint, "T-2", j.pos+1, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_chain", `row belongs to task "T-2"`},

		{"journal row not canonical", nil, func() []hooks.Update {
			j := l.tip(journal)
			rec := l.row(record.KindCheckpoint, "T-1", j.pos+1, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")})
			rec = []byte(strings.Replace(string(rec), `"actor":`, `"actor": `, 1))
			l.push(j, rec, l.tree(nil), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_chain", "not canonical"},

		{"journal commit with two parents", nil, func() []hooks.Update {
			j := l.tip(journal)
			rec := l.row(record.KindCheckpoint, "T-1", j.pos+1, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")})
			extra := l.tip(ledgerRef).head
			id := l.commit(l.tree(nil), []gitstore.Oid{j.head, extra}, l.writer, rec, l.id)
			return []hooks.Update{{Ref: journal, Old: j.old, New: id}}
		}, "journal_chain", "more than one parent"},

		{"ledger prev", nil, func() []hooks.Update {
			lg := l.tip(ledgerRef)
			l.push(lg, l.row(record.KindTaskStarted, "T-1", lg.pos+1, "", ledger.Transition{}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{lg.update()}
		}, "ledger_chain", "row's prev does not link"},

		{"ledger index", nil, func() []hooks.Update {
			lg := l.tip(ledgerRef)
			l.push(lg, l.row(record.KindTaskStarted, "T-1", lg.pos+3, lg.prev(), ledger.Transition{}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{lg.update()}
		}, "ledger_chain", "but the remote's head has index 1"},

		{"spine seq", nil, func() []hooks.Update {
			s := l.tip(spine)
			e := record.SpineSealEntry{SpineHeader: record.SpineHeader{V: 1, Writer: l.writer, Seq: s.pos + 2, Prev: s.prev(), Kind: record.SpineJournalSeal}, TaskID: "T-1"}
			l.push(s, record.MustCanonical(e), l.tree(nil), l.writer, l.id)
			return []hooks.Update{s.update()}
		}, "spine_chain", "says seq 3, but the remote's head has seq 1"},

		{"spine seq negative", nil, func() []hooks.Update {
			s := l.tip(spine)
			e := record.SpineSealEntry{SpineHeader: record.SpineHeader{V: 1, Writer: l.writer, Seq: -1, Prev: s.prev(), Kind: record.SpineJournalSeal}, TaskID: "T-1"}
			l.push(s, record.MustCanonical(e), l.tree(nil), l.writer, l.id)
			return []hooks.Update{s.update()}
		}, "spine_chain", "seq -1 is negative"},

		{"spine prev", nil, func() []hooks.Update {
			s := l.tip(spine)
			j := l.tip(journal)
			s.rec = []byte("elsewhere")
			l.appendPost(j, s, post{key: "new", version: 1, body: "b"})
			return []hooks.Update{s.update(), j.update()}
		}, "spine_chain", "entry's prev does not link to the entry before it"},

		{"spine entry of another writer", nil, func() []hooks.Update {
			s := l.tip(spine)
			j := l.tip(journal)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b", entry: func(e *record.SpineArtifactEntry) { e.Writer = "host-b" }})
			return []hooks.Update{s.update(), j.update()}
		}, "spine_chain", `entry names writer "host-b"`},

		{"audit prev_hmac", nil, func() []hooks.Update {
			a := l.tip(audit)
			e := record.AuditEntry{V: 1, Writer: l.writer, Seq: a.pos + 1, Event: "checkpoint", Actor: "agent-1", TaskID: "T-1", Resource: "r", Details: []byte(`{}`), PrevHMAC: "00"}
			e.HMAC = l.id.MAC(e.MACBytes())
			l.push(a, e.Bytes(), l.tree(nil), l.writer, l.id)
			return []hooks.Update{a.update()}
		}, "audit_chain", "prev_hmac does not link to the entry before it"},

		{"audit entry of another writer", nil, func() []hooks.Update {
			a := l.tip(audit)
			prev, _ := record.ParseAuditEntry(a.rec)
			e := record.AuditEntry{V: 1, Writer: "host-b", Seq: a.pos + 1, Event: "checkpoint", Actor: "agent-1", TaskID: "T-1", Resource: "r", Details: []byte(`{}`), PrevHMAC: prev.HMAC}
			e.HMAC = l.id.MAC(e.MACBytes())
			l.push(a, e.Bytes(), l.tree(nil), l.writer, l.id)
			return []hooks.Update{a.update()}
		}, "audit_chain", `entry names writer "host-b"`},

		{"unsigned audit entry", nil, func() []hooks.Update {
			a := l.tip(audit)
			prev, _ := record.ParseAuditEntry(a.rec)
			e := record.AuditEntry{V: 1, Writer: l.writer, Seq: a.pos + 1, Event: "checkpoint", Actor: "agent-1", TaskID: "T-1", Resource: "r", Details: []byte(`{}`), PrevHMAC: prev.HMAC}
			e.HMAC = l.id.MAC(e.MACBytes())
			l.push(a, e.Bytes(), l.tree(nil), l.writer, nil)
			return []hooks.Update{a.update()}
		}, "audit_signature", "commit is not signed"},

		{"row signed by another key", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.checkpointRow(j, l.other)
			return []hooks.Update{j.update()}
		}, "row_signature", "which is not the pinned key of writer host-a"},

		{"ledger row unsigned", nil, func() []hooks.Update {
			lg := l.tip(ledgerRef)
			l.push(lg, l.row(record.KindTaskStarted, "T-1", lg.pos+1, lg.prev(), ledger.Transition{}), l.tree(nil), l.writer, nil)
			return []hooks.Update{lg.update()}
		}, "row_signature", "commit is not signed"},

		{"spine commit by another committer", nil, func() []hooks.Update {
			s := l.tip(spine)
			e := record.SpineSealEntry{SpineHeader: record.SpineHeader{V: 1, Writer: l.writer, Seq: s.pos + 1, Prev: s.prev(), Kind: record.SpineJournalSeal}, TaskID: "T-1"}
			l.push(s, record.MustCanonical(e), l.tree(nil), "host-b", l.id)
			return []hooks.Update{s.update()}
		}, "spine_signature", "names host-b as its committer, not the ref's writer host-a"},

		{"journal tree carries another file", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.push(j, l.row(record.KindCheckpoint, "T-1", j.pos+1, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(map[string][]byte{"extra.txt": []byte("x")}), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_tree", "the row's commit tree is not empty"},

		{"content hash", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b", row: func(a *record.ArtifactPosted) { a.ContentHash = record.Sum([]byte("other")) }})
			return []hooks.Update{j.update(), s.update()}
		}, "content_hash", "stored bytes do not hash to the row's content hash"},

		{"blob size", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b", row: func(a *record.ArtifactPosted) { a.Size++ }})
			return []hooks.Update{j.update(), s.update()}
		}, "blob", "the row says"},

		{"blob missing", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b", row: func(a *record.ArtifactPosted) {
				a.Blob = gitstore.HashObject(gitstore.TypeBlob, []byte("never stored")).String()
			}})
			return []hooks.Update{j.update(), s.update()}
		}, "blob", "is missing"},

		{"payload type", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b", row: func(a *record.ArtifactPosted) { a.ArtifactType = "table" }})
			return []hooks.Update{j.update(), s.update()}
		}, "payload", "payload is a report, the row says table"},

		{"work row output", nil, func() []hooks.Update {
			j := l.tip(journal)
			out := []byte("gate output\n")
			path := "outputs/000003-gate-unit.log"
			data := record.GateAttempt{Gate: "unit", Command: "true", Passed: true,
				Output: record.Output{Path: path, Blob: gitstore.HashObject(gitstore.TypeBlob, out).String(), Hash: record.Sum([]byte("other")), Size: int64(len(out))}}
			l.push(j, l.row(record.KindGateAttempt, "T-1", j.pos+1, j.prev(), data), l.tree(map[string][]byte{path: out}), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "output", "does not hash to the row's hash"},

		{"spine entry binds other content", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b", entry: func(e *record.SpineArtifactEntry) { e.ContentHash = record.Sum([]byte("other")) }})
			return []hooks.Update{j.update(), s.update()}
		}, "spine_binding", "binds a different content_hash"},

		{"row names no spine entry", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b", row: func(a *record.ArtifactPosted) { a.SpineEntryHash = record.Sum([]byte("nowhere")) }})
			return []hooks.Update{j.update(), s.update()}
		}, "spine_binding", "no spine entry sha256:"},

		{"spine entry seals a row the journal lacks", nil, func() []hooks.Update {
			s := l.tip(spine)
			j := l.tip(journal)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b"})
			return []hooks.Update{s.update()} // the journal is not pushed
		}, "spine_binding", "which the journal does not hold"},

		{"row with the spine entry left behind", nil, func() []hooks.Update {
			s := l.tip(spine)
			j := l.tip(journal)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b"})
			return []hooks.Update{j.update()} // the spine is not pushed
		}, "spine_binding", "no spine entry"},

		{"version gap", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			h1 := l.appendPost(j, s, post{key: "new", version: 1, body: "a"})
			l.appendPost(j, s, post{key: "new", version: 3, prevVersionHash: h1, body: "b"})
			return []hooks.Update{j.update(), s.update()}
		}, "version_chain", "new v3 at journal index 4: follows version 1"},

		{"version links elsewhere", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "a"})
			l.appendPost(j, s, post{key: "new", version: 2, prevVersionHash: record.Sum([]byte("x")), body: "b"})
			return []hooks.Update{j.update(), s.update()}
		}, "version_chain", "prev_version_hash does not name version 1's spine entry"},

		{"version 1 with a predecessor", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, prevVersionHash: record.Sum([]byte("x")), body: "a"})
			return []hooks.Update{j.update(), s.update()}
		}, "version_chain", "version 1 with prev_version_hash"},

		{"terminal transition without a seal", nil, func() []hooks.Update {
			lg := l.tip(ledgerRef)
			l.push(lg, l.row(record.KindTaskAbandoned, "T-1", lg.pos+1, lg.prev(), ledger.Transition{}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{lg.update()}
		}, "journal_seal", "the ledger records task.abandoned at index 2, but no spine entry of writer host-a seals the journal there"},

		{"seal of another head", nil, func() []hooks.Update {
			lg, s := l.tip(ledgerRef), l.tip(spine)
			l.push(lg, l.row(record.KindTaskAbandoned, "T-1", lg.pos+1, lg.prev(), ledger.Transition{}), l.tree(nil), l.writer, l.id)
			l.seal(s, record.SpineSealEntry{TaskID: "T-1", Head: record.Sum([]byte("x")), Rows: 3, LedgerIndex: lg.pos, Transition: record.KindTaskAbandoned}, true)
			return []hooks.Update{lg.update(), s.update()}
		}, "journal_seal", "the journal's row 2 is not the sealed head"},

		{"seal of a transition the ledger lacks", nil, func() []hooks.Update {
			s, j := l.tip(spine), l.tip(journal)
			l.seal(s, record.SpineSealEntry{TaskID: "T-1", Head: j.prev(), Rows: 3, LedgerIndex: 7, Transition: record.KindTaskCompleted}, true)
			return []hooks.Update{s.update()}
		}, "journal_seal", "names task.completed at ledger index 7, which the ledger does not hold"},

		{"seal without its detached signature", nil, func() []hooks.Update {
			lg, s, j := l.tip(ledgerRef), l.tip(spine), l.tip(journal)
			l.push(lg, l.row(record.KindTaskAbandoned, "T-1", lg.pos+1, lg.prev(), ledger.Transition{}), l.tree(nil), l.writer, l.id)
			l.seal(s, record.SpineSealEntry{TaskID: "T-1", Head: j.prev(), Rows: 3, LedgerIndex: lg.pos, Transition: record.KindTaskAbandoned}, false)
			return []hooks.Update{lg.update(), s.update()}
		}, "spine_signature", "seal commit carries no seal.sig"},

		{"writer key substituted (pinned)", nil, func() []hooks.Update {
			w := l.tip(writers)
			l.writersCommit(w, l.other.PublicKey(), l.other.PublicKey(), l.other)
			return []hooks.Update{w.update()}
		}, "key_record", "in a ref named for another key"},

		{"format-1 writer key substituted (pinned)", nil, func() []hooks.Update {
			w := &tip{ref: refs.Writer("host-a")}
			l.writersCommit(w, l.other.PublicKey(), l.other.PublicKey(), l.other)
			return []hooks.Update{w.update()}
		}, "key_substitution", "is pinned for it on this remote: a substituted key is refused"},

		{"writer key changed (unpinned)", noTrust, func() []hooks.Update {
			w := l.tip(writers)
			l.writersCommit(w, l.other.PublicKey(), l.other.PublicKey(), l.other)
			return []hooks.Update{w.update()}
		}, "key_record", "publishes " + ssh.FingerprintSHA256(l.other.PublicKey()) + " in a ref named for another key"},

		{"format-1 writer key changed (unpinned)", noTrust, func() []hooks.Update {
			w := &tip{ref: refs.Writer("host-a")}
			l.writersCommit(w, l.id.PublicKey(), l.id.PublicKey(), l.id)
			first := w.head
			l.writersCommit(w, l.other.PublicKey(), l.other.PublicKey(), l.other)
			return []hooks.Update{{Ref: refs.Writer("host-a"), Old: first, New: w.head}}
		}, "key_substitution", "but the remote publishes " + ssh.FingerprintSHA256(l.id.PublicKey()) + " for it: a writer id has one key per ref"},

		{"writer key commit unsigned", nil, func() []hooks.Update {
			w := l.tip(writers)
			l.writersCommit(w, l.id.PublicKey(), l.id.PublicKey(), nil)
			return []hooks.Update{w.update()}
		}, "key_signature", "is not signed"},

		{"writer key commit signed by another key", nil, func() []hooks.Update {
			w := l.tip(writers)
			l.writersCommit(w, l.id.PublicKey(), l.id.PublicKey(), l.other)
			return []hooks.Update{w.update()}
		}, "key_signature", "is not signed by the key it publishes"},

		{"allowed_signers names another key", nil, func() []hooks.Update {
			w := l.tip(writers)
			l.writersCommit(w, l.id.PublicKey(), l.other.PublicKey(), l.id)
			return []hooks.Update{w.update()}
		}, "key_record", "its allowed_signers file does not name exactly the key it publishes"},

		{"legacy keys ref substitutes a key", nil, func() []hooks.Update {
			tree := l.tree(map[string][]byte{"host-a.pub": []byte(authorized(l.other.PublicKey()) + "\n")})
			id := l.commit(tree, nil, "host-a", []byte(`{}`), l.other)
			return []hooks.Update{{Ref: refs.Keys, New: id}}
		}, "key_substitution", "the push publishes " + ssh.FingerprintSHA256(l.other.PublicKey()) + " as writer host-a's key"},

		{"parentless commit on an existing chain", nil, func() []hooks.Update {
			j := l.tip(journal)
			rec := l.row(record.KindCheckpoint, "T-1", j.pos+1, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")})
			id := l.commit(l.tree(nil), nil, l.writer, rec, l.id)
			return []hooks.Update{{Ref: journal, Old: j.old, New: id}}
		}, "non_fast_forward", "which does not contain the remote's head"},

		{"new chain that does not start at index 0", nil, func() []hooks.Update {
			j := &tip{ref: refs.Journal("T-5"), pos: 1}
			l.push(j, l.row(record.KindCheckpoint, "T-5", 2, "", record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(nil), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_chain", "the chain's first commit says index 2"},

		{"new chain whose index 0 has a parent", nil, func() []hooks.Update {
			rec := l.row(record.KindCheckpoint, "T-5", 0, "", record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")})
			id := l.commit(l.tree(nil), []gitstore.Oid{l.tip(journal).old}, l.writer, rec, l.id)
			return []hooks.Update{{Ref: refs.Journal("T-5"), New: id}}
		}, "journal_chain", "the commit at index 0 has a parent"},

		{"chain commit that is not a commit", nil, func() []hooks.Update {
			return []hooks.Update{{Ref: journal, Old: l.tip(journal).old, New: l.add(gitstore.TypeBlob, []byte("not a commit"))}}
		}, "journal_chain", "not a commit"},

		{"row committed by no writer", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.push(j, l.row(record.KindCheckpoint, "T-1", j.pos+1, j.prev(), record.Checkpoint{Commit: l.h.git("rev-parse", "HEAD")}), l.tree(nil), "Mallory Q", l.id)
			return []hooks.Update{j.update()}
		}, "row_signature", "the commit names no writer as its committer"},

		{"artifact tree carries another file", nil, func() []hooks.Update {
			j, s := l.tip(journal), l.tip(spine)
			l.appendPost(j, s, post{key: "new", version: 1, body: "b"})
			// the same row again, with one more file in its tree
			rec := j.rec
			payload, _ := artifact.Payload{Type: artifact.TypeReport, Body: "b"}.Canonical()
			tree := l.tree(map[string][]byte{record.ArtifactPath("new", 1): payload, "extra.txt": []byte("x")})
			id := l.commit(tree, []gitstore.Oid{j.old}, l.writer, rec, l.id)
			return []hooks.Update{{Ref: journal, Old: j.old, New: id}, s.update()}
		}, "journal_tree", "the row's commit tree is not exactly its own artifacts/new/v1.json"},

		{"artifact data with a member too many", nil, func() []hooks.Update {
			j := l.tip(journal)
			data := map[string]any{"key": "new", "artifact_type": "report", "version": 1, "content_hash": record.Sum([]byte("x")), "blob": gitstore.HashObject(gitstore.TypeBlob, []byte("x")).String(),
				"size": 1, "link_kind": "", "prev_version_hash": "", "spine_entry_hash": record.Sum([]byte("y")), "extra": 1}
			l.push(j, l.row(record.KindArtifactPosted, "T-1", j.pos+1, j.prev(), data), l.tree(nil), l.writer, l.id)
			return []hooks.Update{j.update()}
		}, "journal_chain", "extra"},

		{"spine entry at a row that names another entry", nil, func() []hooks.Update {
			s, j := l.tip(spine), l.tip(journal)
			j.pos = 0 // seal the row at journal index 1, the checkpoint
			l.appendPost(j, s, post{key: "summary", version: 3, body: "b"})
			return []hooks.Update{s.update()}
		}, "spine_binding", "but the row there does not name this entry"},

		{"seal of no rows naming a head", nil, func() []hooks.Update {
			lg, s := l.tip(ledgerRef), l.tip(spine)
			l.push(lg, l.row(record.KindTaskAbandoned, "T-1", lg.pos+1, lg.prev(), ledger.Transition{}), l.tree(nil), l.writer, l.id)
			l.seal(s, record.SpineSealEntry{TaskID: "T-1", Head: record.Sum([]byte("x")), Rows: 0, LedgerIndex: lg.pos, Transition: record.KindTaskAbandoned}, true)
			return []hooks.Update{lg.update(), s.update()}
		}, "journal_seal", "seals no rows but names a head"},

		{"writers ref from another root", nil, func() []hooks.Update {
			w := l.tip(writers)
			w.head = gitstore.ZeroOid
			l.writersCommit(w, l.id.PublicKey(), l.id.PublicKey(), l.id)
			return []hooks.Update{{Ref: writers, Old: w.old, New: w.head}}
		}, "non_fast_forward", "which does not contain the remote's head"},

		{"writers ref too long a way from its head", nil, func() []hooks.Update {
			w := l.tip(writers)
			for i := 0; i < 65; i++ {
				l.writersCommit(w, l.id.PublicKey(), l.id.PublicKey(), l.id)
			}
			return []hooks.Update{w.update()}
		}, "non_fast_forward", "which does not extend it within 64 commits"},

		{"writers ref moved to a blob", nil, func() []hooks.Update {
			return []hooks.Update{{Ref: writers, Old: l.tip(writers).old, New: l.add(gitstore.TypeBlob, []byte("not a commit"))}}
		}, "key_record", "not a commit"},

		{"writers commit that does not parse", nil, func() []hooks.Update {
			return []hooks.Update{{Ref: writers, Old: l.tip(writers).old, New: l.add(gitstore.TypeCommit, []byte("no header"))}}
		}, "key_record", "no message separator"},

		{"writers commit publishing no key", nil, func() []hooks.Update {
			w := l.tip(writers)
			id := l.commit(l.tree(map[string][]byte{"allowed_signers": []byte("x\n")}), []gitstore.Oid{w.old}, l.writer, []byte(`{}`), l.id)
			return []hooks.Update{{Ref: writers, Old: w.old, New: id}}
		}, "key_record", "the commit publishes no host-a.pub"},

		{"writers commit by another committer", nil, func() []hooks.Update {
			w := l.tip(writers)
			tree := l.tree(map[string][]byte{"host-a.pub": []byte(authorized(l.id.PublicKey()) + "\n"),
				"allowed_signers": []byte(keys.AllowedSignersLine("host-a", authorized(l.id.PublicKey())) + "\n")})
			id := l.commit(tree, []gitstore.Oid{w.old}, "host-b", []byte(`{}`), l.id)
			return []hooks.Update{{Ref: writers, Old: w.old, New: id}}
		}, "key_signature", "names host-b as its committer, not writer host-a"},

		{"legacy keys ref with a key that does not parse", nil, func() []hooks.Update {
			id := l.commit(l.tree(map[string][]byte{"host-a.pub": []byte("not a key\n")}), nil, "host-a", []byte(`{}`), l.id)
			return []hooks.Update{{Ref: refs.Keys, New: id}}
		}, "key_record", "host-a.pub"},

		{"remote head that is not a commit", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.checkpointRow(j, l.id)
			return []hooks.Update{{Ref: journal, Old: l.add(gitstore.TypeBlob, []byte("x")), New: j.head}}
		}, "journal_chain", "the remote's head"},

		{"remote head that carries no row", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.checkpointRow(j, l.id)
			return []hooks.Update{{Ref: journal, Old: l.tip(spine).old, New: j.head}}
		}, "journal_chain", "the remote's head"},

		{"remote head that carries no record", nil, func() []hooks.Update {
			j := l.tip(journal)
			l.checkpointRow(j, l.id)
			branch, err := gitstore.ParseOid(l.h.git("rev-parse", "HEAD"))
			if err != nil {
				l.t.Fatal(err)
			}
			return []hooks.Update{{Ref: journal, Old: branch, New: j.head}}
		}, "journal_chain", "the remote's head"},

		{"deletion", nil, func() []hooks.Update {
			return []hooks.Update{{Ref: journal, Old: l.tip(journal).old}}
		}, "deletion", "a task's refs are deleted only when it is archived"},

		{"rewind", nil, func() []hooks.Update {
			j := l.tip(journal)
			cc, _ := chain.Read(l.h.s.Objects(), j.old)
			return []hooks.Update{{Ref: journal, Old: j.old, New: cc.Commit.Parents[0]}}
		}, "non_fast_forward", "whose index is 1, not after the remote's 2"},

		{"fork", nil, func() []hooks.Update {
			j := l.tip(journal)
			cc, _ := chain.Read(l.h.s.Objects(), j.old)
			parent, _ := chain.Read(l.h.s.Objects(), cc.Commit.Parents[0])
			fork := &tip{ref: journal, old: j.old, head: parent.ID, rec: parent.Record, pos: 1}
			l.checkpointRow(fork, l.id)
			l.checkpointRow(fork, l.id)
			return []hooks.Update{fork.update()}
		}, "non_fast_forward", "which does not contain the remote's head"},

		{"checkpoint signed by another key", nil, func() []hooks.Update {
			rec := []byte(`{"seq":0,"size":1,"v":1,"writer":"` + l.writer + `"}`)
			id := l.commit(l.tree(map[string][]byte{"checkpoint": []byte("x\n")}), nil, l.writer, rec, l.other)
			return []hooks.Update{{Ref: refs.Checkpoints(l.writer), New: id}}
		}, "checkpoint_signature", ""},

		{"checkpoint whose tree holds more than the checkpoint", nil, func() []hooks.Update {
			rec := []byte(`{"seq":0,"size":1,"v":1,"writer":"` + l.writer + `"}`)
			id := l.commit(l.tree(map[string][]byte{"checkpoint": []byte("x\n"), "extra": []byte("y")}), nil, l.writer, rec, l.id)
			return []hooks.Update{{Ref: refs.Checkpoints(l.writer), New: id}}
		}, "checkpoints_chain", "a checkpoint's holds one file"},

		{"checkpoint naming another writer", nil, func() []hooks.Update {
			rec := []byte(`{"seq":0,"size":1,"v":1,"writer":"host-b"}`)
			id := l.commit(l.tree(map[string][]byte{"checkpoint": []byte("x\n")}), nil, l.writer, rec, l.id)
			return []hooks.Update{{Ref: refs.Checkpoints(l.writer), New: id}}
		}, "checkpoints_chain", `checkpoint names writer "host-b"`},

		{"unknown ref", nil, func() []hooks.Update {
			return []hooks.Update{{Ref: "refs/bernstein/notes/x", New: l.tip(journal).old}}
		}, "ref_name", "bernstein writes no such ref"},

		{"unescaped task ref", nil, func() []hooks.Update {
			return []hooks.Update{{Ref: "refs/bernstein/journal/a..b", New: l.tip(journal).old}}
		}, "ref_name", `contains ".."`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l.t = t
			updates := tc.forge()
			var g *hooks.Guard
			if tc.guard != nil {
				g = tc.guard()
			}
			res := l.check(g, updates...)
			for _, p := range res.Problems {
				if p.Check == tc.check && strings.Contains(p.Reason, tc.reason) {
					return
				}
			}
			var got []string
			for _, p := range res.Problems {
				got = append(got, p.String())
			}
			t.Fatalf("no %s problem saying %q; got:\n%s", tc.check, tc.reason, strings.Join(got, "\n"))
		})
	}

	// What a writer of the guarded kind writes passes: a post, two
	// versions, a checkpoint and a seal at a terminal transition.
	t.Run("good segment", func(t *testing.T) {
		l.t = t
		j, s, lg := l.tip(journal), l.tip(spine), l.tip(ledgerRef)
		h1 := l.appendPost(j, s, post{key: "new", version: 1, body: "a"})
		l.appendPost(j, s, post{key: "new", version: 2, prevVersionHash: h1, body: "b"})
		l.checkpointRow(j, l.id)
		l.push(lg, l.row(record.KindTaskAbandoned, "T-1", lg.pos+1, lg.prev(), ledger.Transition{}), l.tree(nil), l.writer, l.id)
		l.seal(s, record.SpineSealEntry{TaskID: "T-1", Head: j.prev(), Rows: j.pos + 1, LedgerIndex: lg.pos, Transition: record.KindTaskAbandoned}, true)
		if res := l.check(nil, j.update(), s.update(), lg.update()); len(res.Problems) > 0 {
			t.Fatalf("good segment refused: %v", res.Problems)
		}
	})
}

// TestGuardFirstUseOfPublishedKey: with trust on first use and no pin, the
// key the remote already publishes for a writer is the one taken.
func TestGuardFirstUseOfPublishedKey(t *testing.T) {
	l := newLab(t)
	j := l.tip(refs.Journal("T-1"))
	l.checkpointRow(j, l.id)
	res := l.check(&hooks.Guard{Trust: keys.NewTrustSet(nil, nil), TrustFirstUse: true}, j.update())
	if len(res.Problems) > 0 || len(res.FirstUse) != 1 || res.FirstUse[0].Writer != "host-a" || res.FirstUse[0].Fingerprint != l.h.fingerprint() {
		t.Fatalf("problems %v, first use %+v", res.Problems, res.FirstUse)
	}
	// Without first use the same row is refused.
	res = l.check(&hooks.Guard{Trust: keys.NewTrustSet(nil, nil)}, j.update())
	if len(res.Problems) != 1 || res.Problems[0].Check != "row_signature" || len(res.FirstUse) != 0 {
		t.Fatalf("problems %v, first use %+v", res.Problems, res.FirstUse)
	}
}

// TestGuardEntryAfterItsRow: a spine entry pushed after the row that names
// it (history from before the guard) must still bind that row; the row is
// read from the remote, at its journal index.
func TestGuardEntryAfterItsRow(t *testing.T) {
	l := newLab(t)
	j, s := l.tip(refs.Journal("T-1")), l.tip(refs.Spine("host-a"))
	l.appendPost(j, s, post{key: "new", version: 1, body: "b", entry: func(e *record.SpineArtifactEntry) { e.Actor = "someone-else" }})
	l.check(nil) // store the objects
	l.h.git("update-ref", j.ref, j.head.String(), j.old.String())
	res := l.check(nil, s.update())
	if len(res.Problems) != 1 || res.Problems[0].Check != "spine_binding" || !strings.Contains(res.Problems[0].Reason, "at journal index 3, and binds a different actor") {
		t.Fatalf("problems: %v", res.Problems)
	}
	// The same entry binding its row exactly passes.
	j, s = l.tip(refs.Journal("T-1")), l.tip(refs.Spine("host-a"))
	l.appendPost(j, s, post{key: "new2", version: 1, body: "c"})
	l.check(nil)
	l.h.git("update-ref", j.ref, j.head.String(), j.old.String())
	if res := l.check(nil, s.update()); len(res.Problems) != 0 {
		t.Fatalf("problems: %v", res.Problems)
	}
}
