package txn

import (
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The writer's own spine, audit mirror and anchors are built only on a
// head the writer verifies as its own (docs/trust.md, Entries appended to
// the writer's own spine or audit mirror; The writer's own anchors ref):
// the head its heads memory keeps, or the commits past it that are the
// writer's (an entry of a write interrupted after its refs moved and
// before the memory was written). What plain git put past that is
// reported and built over, so one plain-git write blocks no writer.

// ownEntryHead is the chain of ref (the writer's own spine, audit mirror
// or anchors), as found at found. At the head this host's writer recorded
// (the common case: no read), it is marked so (atRecorded). Else, when
// found holds what the writer cannot verify as its own, the chain's head
// is the writer's last verified commit, its compare-and-swap base stays
// found, and forged says what was found. It returns nil when ref is
// another, the writer keeps no head of it, or what is there is made of
// the writer's own commits only (an interrupted write: built on; or a
// chain moved back or rewritten, which checkHead refuses as before). An
// anchors ref of which no head is recorded that cannot be read as an
// anchor at all is forged too: the writer's anchors start anew over it.
func (t *Tx) ownEntryHead(ref string, found gitstore.Oid) *Chain {
	kind, read := record.ChainSpine, chain.Read
	switch ref {
	case refs.Spine(t.id.Writer):
	case refs.Audit(t.id.Writer):
		kind = record.ChainAudit
	case refs.Anchors(t.id.Writer):
		kind, read = chainAnchors, chain.ReadAnchor
	case refs.Checkpoints(t.id.Writer):
		kind = chainCheckpoints
	default:
		return nil
	}
	m, ok := t.w.heads.Recorded(ref)
	if ok && found == m.Commit && !found.IsZero() {
		// Where the writer left it: checkHead, which would look the
		// head up again, has nothing to check.
		return &Chain{ref: ref, old: found, head: found, atRecorded: true}
	}
	if kind == chainAnchors && !found.IsZero() && (!ok || m.Commit.IsZero()) {
		// No anchor recorded (another BERNSTEIN_HOME, audit accept):
		// commits plain git put on the writer's own anchors are built
		// over, from the newest the writer signed (unrecordedOwnHead);
		// with none of the writer's below, what cannot be read as an
		// anchor at all (a blob, an object the repository does not
		// have, a commit of no anchor record) keeps nothing the writer
		// anchored reachable, and the writer's anchors start anew over
		// it; an anchor is taken as it stands, as the spine's head is.
		if c := t.unrecordedOwnHead(ref, kind, read, found); c != nil {
			return c
		}
		cc, err := read(t.w.c.Objects, found)
		if err == nil {
			_, err = record.ParseAnchor(cc.Record)
		}
		if err != nil {
			return &Chain{ref: ref, old: found, forgedBase: gitstore.ZeroOid,
				forged: fmt.Sprintf("%s (at %s) was tampered with: it cannot be read as an anchor (%v), and this writer recorded no anchor of its own", ref, found, err)}
		}
		return nil
	}
	if found.IsZero() {
		return nil
	}
	if !ok || m.Commit.IsZero() || !t.w.c.Objects.Has(m.Commit) {
		return t.unrecordedOwnHead(ref, kind, read, found)
	}
	// From found back by first parents to the remembered head; stop at a
	// commit of the writer's own at or below the head's position (the
	// chain was moved back or rewritten), at the root, or at what is no
	// commit.
	var past []chain.Commit // newest first
	var notOwn []string     // why each is not signed by the writer ("": it is)
	reached, foreign, why := false, false, ""
	for id := found; ; {
		if id == m.Commit {
			reached = true
			break
		}
		cc, err := read(t.w.c.Objects, id)
		if cc.Payload == nil {
			foreign, why = true, fmt.Sprintf("%s is no commit: %v", id, err)
			break
		}
		sig := t.ownSigned(cc)
		if err == nil && sig == "" {
			if pos, ok := entryPos(kind, cc.Record); ok && pos <= m.Pos {
				break
			}
		} else if !foreign {
			foreign, why = true, sig
			if why == "" {
				why = err.Error()
			}
		}
		past, notOwn = append(past, cc), append(notOwn, sig)
		if len(cc.Commit.Parents) == 0 {
			break
		}
		id = cc.Commit.Parents[0]
	}
	base := m.Commit
	if reached {
		// Oldest first: each must be the writer's, chained to the one
		// before; the first that is not, and those after it, are not
		// built on.
		seq, link := m.Pos, m.Link
		why = ""
		for i := len(past) - 1; i >= 0 && why == ""; i-- {
			cc := past[i]
			if why = notOwn[i]; why == "" {
				why = t.ownEntry(kind, cc, seq, link)
			}
			if why == "" {
				base = cc.ID
				seq++
				link = entryLink(kind, cc.Record)
			}
		}
		if base == found {
			return nil // the writer's own: an interrupted write, built on
		}
	} else if !foreign {
		return nil // the writer's own commits only: checkHead decides
	}
	return &Chain{ref: ref, old: found, head: base, forgedBase: base,
		forged: fmt.Sprintf("%s (at %s) was tampered with: it is not this writer's %s past %s (%s)", ref, found, kind, base, why)}
}

// unrecordedOwnHead is ownEntryHead for a chain of which the writer keeps
// no head (another BERNSTEIN_HOME, audit accept): the newest commit at or
// below found, by first parents, that the writer verifies as its own is
// the chain's head, and what plain git put above it (commits not signed by
// the writer, what is no commit) is forged and built over. It returns nil
// when found is the writer's own (taken as it stands: without a head
// remembered a chain moved back is not seen) and when nothing below found
// is (what is there is not built on: checkHead decides).
func (t *Tx) unrecordedOwnHead(ref, kind string, read func(*gitstore.Repo, gitstore.Oid) (chain.Commit, error), found gitstore.Oid) *Chain {
	why := ""
	for id := found; ; {
		cc, err := read(t.w.c.Objects, id)
		if cc.Payload == nil {
			return nil // no commit of the writer's below what plain git put there
		}
		sig := t.ownSigned(cc)
		if err == nil && sig == "" {
			if id == found {
				return nil
			}
			return &Chain{ref: ref, old: found, head: id, forgedBase: id,
				forged: fmt.Sprintf("%s (at %s) was tampered with: it is not this writer's %s past %s (%s)", ref, found, kind, id, why)}
		}
		if why == "" {
			if why = sig; why == "" {
				why = err.Error()
			}
		}
		if len(cc.Commit.Parents) == 0 {
			return nil
		}
		id = cc.Commit.Parents[0]
	}
}

// forgedWarning is the warning of c, the writer's own spine, audit
// mirror or anchors found forged ("": it was not): what was found, and
// what the transaction does over it: an entry built on the writer's last
// verified head (on none: the chain starts anew) or, with nothing
// appended, the ref moved back there (RestoreOwnChains).
func (c *Chain) forgedWarning() string {
	switch {
	case c.forged == "":
		return ""
	case c.head == c.forgedBase && c.dirty:
		return fmt.Sprintf("%s; it is moved back there", c.forged)
	case c.forgedBase.IsZero():
		return fmt.Sprintf("%s; the writer's chain starts anew, over it", c.forged)
	}
	return fmt.Sprintf("%s; the writer's next entry is built on %s, over it", c.forged, c.forgedBase)
}

// chainAnchors and chainCheckpoints name the writer's anchors chain and
// the chain of its log's checkpoints in ownEntryHead's warnings.
const (
	chainAnchors     = "anchors"
	chainCheckpoints = "checkpoints"
)

// ownSigned says why cc is not signed by this writer's own key ("": it is).
func (t *Tx) ownSigned(cc chain.Commit) string {
	if w, _ := verify.CommitWriter(cc.Commit.Committer); w != t.id.Writer {
		return fmt.Sprintf("commit %s names %q as its committer, not this writer", cc.ID, w)
	}
	if p := verify.ProveCommit(t.env.Env, cc.Commit, cc.Payload); p.State != verify.Verified {
		return fmt.Sprintf("commit %s: %s", cc.ID, p.Reason)
	}
	return ""
}

// ownEntry says why cc, signed by this writer, is not its next entry of
// its chain of kind after the entry at seq whose link is link ("": it is).
func (t *Tx) ownEntry(kind string, cc chain.Commit, seq int64, link string) string {
	var w, prev string
	var at int64
	switch kind {
	case chainAnchors:
		// An anchor links to the one before by its first parent, which
		// the walk follows.
		a, err := record.ParseAnchor(cc.Record)
		if err != nil {
			return fmt.Sprintf("commit %s: %v", cc.ID, err)
		}
		w, at, prev = a.Writer, a.Seq, link
	case chainCheckpoints:
		// A checkpoint, as an anchor, links by its first parent.
		a, err := record.ParseLogCheckpoint(cc.Record)
		if err != nil {
			return fmt.Sprintf("commit %s: %v", cc.ID, err)
		}
		w, at, prev = a.Writer, a.Seq, link
	case record.ChainAudit:
		a, err := record.ParseAuditEntry(cc.Record)
		if err != nil {
			return fmt.Sprintf("commit %s: %v", cc.ID, err)
		}
		if a.HMAC != t.id.MAC(a.MACBytes()) {
			return fmt.Sprintf("commit %s: its HMAC is not this writer's", cc.ID)
		}
		w, at, prev = a.Writer, a.Seq, a.PrevHMAC
	default:
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil {
			return fmt.Sprintf("commit %s: %v", cc.ID, err)
		}
		w, at, prev = e.Header.Writer, e.Header.Seq, string(e.Header.Prev)
	}
	switch {
	case w != t.id.Writer:
		return fmt.Sprintf("commit %s: its entry names writer %q", cc.ID, w)
	case at != seq+1:
		return fmt.Sprintf("commit %s: its entry has seq %d after seq %d", cc.ID, at, seq)
	case prev != link:
		return fmt.Sprintf("commit %s: its entry's prev does not link to the entry before it", cc.ID)
	}
	return ""
}

// entryPos is the seq an entry of kind says it has.
func entryPos(kind string, rec []byte) (int64, bool) {
	if kind == chainAnchors {
		a, err := record.ParseAnchor(rec)
		return a.Seq, err == nil
	}
	if kind == chainCheckpoints {
		a, err := record.ParseLogCheckpoint(rec)
		return a.Seq, err == nil
	}
	if kind == record.ChainAudit {
		a, err := record.ParseAuditEntry(rec)
		return a.Seq, err == nil
	}
	e, err := record.ParseSpineEntry(rec)
	return e.Header.Seq, err == nil
}

// entryLink is what the next entry after rec links to: a spine entry's
// hash, an audit entry's HMAC.
func entryLink(kind string, rec []byte) string {
	if kind == chainAnchors || kind == chainCheckpoints {
		return "-" // an anchor or a checkpoint links by its first parent alone
	}
	if kind == record.ChainAudit {
		a, _ := record.ParseAuditEntry(rec)
		return a.HMAC
	}
	e, _ := record.ParseSpineEntry(rec)
	return string(e.Hash)
}

// warnForged warns of the writer's own chains a committed batch built
// past what plain git put on them.
func (w *Writer) warnForged(t *Tx) {
	for _, c := range t.chains {
		if c.forged != "" {
			w.c.Warn("%s", c.forgedWarning())
		}
	}
}

// ForgedOwnChains are the warnings of the writer's own spine and audit
// mirror found holding what the writer could not verify as its own, and
// built past, in this transaction, and, once it is committed, of the
// repository's identity it moved back (restoreIdentity).
func (t *Tx) ForgedOwnChains() []string {
	var out []string
	for _, ref := range []string{refs.Spine(t.id.Writer), refs.Audit(t.id.Writer)} {
		if c := t.chains[ref]; c != nil && c.forged != "" {
			out = append(out, c.forgedWarning())
		}
	}
	if t.restored != "" {
		out = append(out, t.restored)
	}
	return out
}

// RestoreOwnChains moves the writer's own spine, audit mirror and anchors
// back to the heads it verifies as its own when plain git put on them what it
// cannot verify (ownEntryHead), as a post would build over them, but with
// nothing appended: each ref is compared and swapped over the value found,
// and the committed batch warns of it. A push runs it first, so that it
// sends (and a witness checkpoint covers) the writer's chains, never the
// forged values. It returns the warnings (none: each chain is the
// writer's, or commits of its own past the head it recorded, which an
// interrupted write leaves and the push sends as they are, or moved back
// to commits of its own, a rollback the push plans as before). A ref of
// which no head is recorded is moved back to the newest commit below it
// that the writer signed (unrecordedOwnHead), and its head is recorded.
// The common case, each ref at the head recorded, costs four ref reads
// and no transaction.
func (w *Writer) RestoreOwnChains() ([]string, error) {
	id, err := w.c.Identity()
	if err != nil || id == nil {
		return nil, nil // no writer here: no chain of its own
	}
	moved := false
	for _, ref := range []string{refs.Spine(id.Writer), refs.Audit(id.Writer), refs.Anchors(id.Writer), refs.Checkpoints(id.Writer)} {
		found, err := w.c.Refs.ReadOptional(ref)
		if err != nil {
			return nil, err
		}
		// A loose file of no object id goes at the recorded head already
		// (OwnHead). A ref of which no head is recorded is checked in
		// the transaction too, which records its head (once: the next
		// push finds it recorded).
		if m, ok := w.heads.Recorded(ref); found.IsZero() || found.IsLooseStandIn() || ok && !m.Commit.IsZero() && found == m.Commit {
			continue
		}
		moved = true
	}
	if !moved {
		return nil, nil
	}
	out, err := w.Submit(func(t *Tx) (any, error) {
		var out []string
		for _, ref := range []string{refs.Spine(t.id.Writer), refs.Audit(t.id.Writer), refs.Anchors(t.id.Writer), refs.Checkpoints(t.id.Writer)} {
			var c *Chain
			var err error
			switch ref {
			case refs.Anchors(t.id.Writer):
				c, err = t.anchorsChain()
			case refs.Checkpoints(t.id.Writer):
				c, err = t.checkpointsChain()
			default:
				c, err = t.entryChain(ref, ref == refs.Audit(t.id.Writer))
			}
			if errors.Is(err, fold.ErrUnproven) {
				// Moved back or rewritten to commits of the writer's own
				// (Rollbacks): no forgery to move back over; the push
				// plans it as before, and the next write refuses it.
				continue
			}
			if err != nil {
				return nil, err
			}
			if c.forged != "" && !c.forgedBase.IsZero() {
				c.dirty = true
				out = append(out, c.forgedWarning())
			}
			if c.forged == "" && !c.head.IsZero() {
				c.remember = true // the writer's own as it stands: its head is recorded
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return out.([]string), nil
}
