package bernstein

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The heads this host's writer wrote. A chain moved back with plain git to
// an earlier commit of its own history is made of rows that all prove:
// nothing in it says rows are missing, and the spine entries and audit
// entries that name them can be moved back too. So the writer remembers,
// outside the repository (in BERNSTEIN_HOME, which the attacker this design
// faces cannot write), the head of every chain it extended: the position
// of its head record and its commit. A chain whose ref no longer contains
// the head this writer wrote was rolled back (or rewritten): its fold
// reports a fault at the first row it lacks, so nothing is written on top
// of it (a claim in a ledger rolled back is not honoured, a journal rolled
// back takes no post that would reuse a version) and every reader on this
// host says so.
//
// A head is written after the refs it names are durable, in place and
// without a sync: a crash can only leave it older than the refs (or cut
// short, which its checksum tells), never ahead of them, so it never
// raises a false alarm.

// headMark is the head of one chain as this host's writer left it: the
// position of its head record and that record's link, what the next
// record's prev names (a row's hash, a spine entry's hash, an audit
// entry's HMAC). The record, not its commit, is the identity: a row signed
// again at another date is the same row.
type headMark struct {
	Pos  int64 // index (journal, ledger) or seq (spine, audit) of the head record
	Link string
	// Commit is the head commit as written: a chain still at it holds the
	// head without a read. Another commit at Pos with the same record (the
	// row signed again) holds it too.
	Commit gitstore.Oid
}

const headMagic = "bernstein head v1"

// encodeHead renders a head as one line with a checksum.
func encodeHead(m headMark) []byte {
	line := fmt.Sprintf("%s %020d %s %s", headMagic, m.Pos, m.Commit, m.Link)
	return fmt.Appendf(nil, "%s %08x\n", line, crc32.ChecksumIEEE([]byte(line)))
}

// decodeHead reads a head written by encodeHead; anything else (a write cut
// short, a stray file) is no head.
func decodeHead(b []byte) (headMark, bool) {
	line, ok := bytes.CutSuffix(b, []byte("\n"))
	i := bytes.LastIndexByte(line, ' ')
	if !ok || i < 0 || !bytes.HasPrefix(line, []byte(headMagic+" ")) {
		return headMark{}, false
	}
	text, sum := line[:i], line[i+1:]
	if want, err := strconv.ParseUint(string(sum), 16, 32); err != nil || len(sum) != 8 || uint32(want) != crc32.ChecksumIEEE(text) {
		return headMark{}, false
	}
	f := strings.Fields(strings.TrimPrefix(string(text), headMagic+" "))
	if len(f) != 3 {
		return headMark{}, false
	}
	pos, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || pos < 0 {
		return headMark{}, false
	}
	id, err := gitstore.ParseOid(f[1])
	if err != nil || id.IsZero() {
		return headMark{}, false
	}
	return headMark{Pos: pos, Commit: id, Link: f[2]}, true
}

// headPath is where the head of ref is kept: under this repository's
// folder of BERNSTEIN_HOME, at the ref's path below refs/bernstein/.
func (s *Store) headPath(ref string) string {
	return filepath.Join(s.home, "heads", s.core.RepoID(), filepath.FromSlash(strings.TrimPrefix(ref, refs.Prefix)))
}

// readHead returns the head this host's writer left on ref, if any.
func (s *Store) readHead(ref string) (headMark, bool) {
	b, err := os.ReadFile(s.headPath(ref))
	if err != nil {
		return headMark{}, false
	}
	return decodeHead(b)
}

// writeHeads records the heads a committed batch left (the caller holds the
// writer lock, and the refs are durable). A head that cannot be written is
// a warning: it only weakens what this host can tell later.
func (s *Store) writeHeads(heads map[string]headMark) {
	for ref, m := range heads {
		if err := writeHeadFile(s.headPath(ref), encodeHead(m)); err != nil {
			s.warn("remember the head of %s: %v", ref, err)
		}
	}
}

// writeHeadFile overwrites path in place (no file is created after the
// first write of a chain) and cuts it to the new length.
func writeHeadFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Truncate(int64(len(b)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchHeads is what a committed batch leaves to remember: the head of
// every task chain it moved and of the writer's own spine and audit mirror.
func (t *tx) batchHeads() map[string]headMark {
	out := map[string]headMark{}
	for ref, c := range t.chains {
		if !c.dirty || c.head == c.old || c.next <= 0 {
			continue
		}
		if strings.HasPrefix(ref, refs.JournalPrefix) || strings.HasPrefix(ref, refs.LedgerPrefix) ||
			ref == refs.Spine(t.id.Writer) || ref == refs.Audit(t.id.Writer) {
			out[ref] = headMark{Pos: c.next - 1, Link: c.last, Commit: c.head}
		}
	}
	return out
}

// headMemo remembers which chain heads were proven to contain a head this
// writer wrote: ancestry never changes, so each is walked once.
type headMemo struct {
	mu   sync.Mutex
	seen map[headSeen]bool
}

type headSeen struct {
	head gitstore.Oid
	mark headMark
}

func (m *headMemo) has(k headSeen) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[k]
}

func (m *headMemo) add(k headSeen) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil || len(m.seen) >= 1<<14 {
		m.seen = map[headSeen]bool{}
	}
	m.seen[k] = true
}

// linkOf is what the next record of a chain of kind links to after the
// record rec: a row's hash, a spine entry's hash, an audit entry's HMAC.
func linkOf(kind string, rec []byte) (string, bool) {
	switch kind {
	case "spine":
		e, err := record.ParseSpineEntry(rec)
		return string(e.Hash), err == nil
	case "audit":
		a, err := record.ParseAuditEntry(rec)
		return a.HMAC, err == nil
	}
	return string(record.Sum(rec)), true
}

// reaches reports whether the chain of kind whose head commit is head, with
// its head record at pos (-1 when not known), contains m: the record at
// m.Pos, m.Pos positions below the head on its first-parent line, links as
// m says.
func (s *Store) reaches(kind string, head gitstore.Oid, pos int64, m headMark) (bool, error) {
	if head == m.Commit {
		return true, nil
	}
	if head.IsZero() || pos >= 0 && pos < m.Pos {
		return false, nil
	}
	k := headSeen{head, m}
	if s.heads.has(k) {
		return true, nil
	}
	// Known position: the record m.Pos sits pos-m.Pos parents down.
	// Unknown: each record says where it sits.
	id := head
	for steps := int64(0); ; steps++ {
		cc, err := chain.Read(s.objects, id)
		if err != nil {
			return false, err
		}
		at, ok := recordPos(kind, cc.Record)
		if pos >= 0 {
			at = pos - steps
		}
		if !ok && pos < 0 || at < m.Pos {
			return false, nil
		}
		if at == m.Pos {
			link, ok := linkOf(kind, cc.Record)
			if !ok || link != m.Link {
				return false, nil
			}
			s.heads.add(k)
			return true, nil
		}
		if len(cc.Commit.Parents) == 0 {
			return false, nil
		}
		id = cc.Commit.Parents[0]
	}
}

// recordPos is the index or seq a record of kind says it has.
func recordPos(kind string, rec []byte) (int64, bool) {
	switch kind {
	case "spine":
		e, err := record.ParseSpineEntry(rec)
		return e.Header.Seq, err == nil
	case "audit":
		a, err := record.ParseAuditEntry(rec)
		return a.Seq, err == nil
	}
	r, err := record.ParseRow(rec)
	return r.Index, err == nil
}

// The reasons of a rollback's fault begin with one of these words.
const (
	rolledBackWord = "rolled back:"
	rewrittenWord  = "rewritten:"
)

// isRollback reports whether f is a rollback's fault (rather than a row
// that does not prove).
func isRollback(f verify.RowFault) bool {
	return strings.HasPrefix(f.Reason, rolledBackWord) || strings.HasPrefix(f.Reason, rewrittenWord)
}

// faultPhrase says what keeps a chain from being built on, at its first
// fault f.
func faultPhrase(what, task string, f verify.RowFault) string {
	if isRollback(f) {
		return fmt.Sprintf("the %s of %s cannot be trusted from index %d (%s)", what, task, f.Index, f.Reason)
	}
	return fmt.Sprintf("the %s of %s holds a row no trusted writer signed at index %d (%s)", what, task, f.Index, f.Reason)
}

// rollback checks the chain ref (of kind journal, ledger, spine or audit)
// at head, whose head record is at pos, against the head this host's
// writer left on it. It returns the fault of a chain that no longer
// contains that head, or nil. head may come from a snapshot older than the
// head (a reader's view, taken before a write that then remembered its
// head): only when the ref as it is now does not contain it either is the
// chain rolled back.
func (s *Store) rollback(kind, ref string, head gitstore.Oid, pos int64) (*verify.RowFault, error) {
	m, ok := s.readHead(ref)
	if !ok || head == m.Commit {
		return nil, nil
	}
	if pos < 0 && !head.IsZero() {
		// Not known to the caller: the head record says where it sits.
		cc, err := chain.Read(s.objects, head)
		if err != nil {
			return nil, err
		}
		if at, ok := recordPos(kind, cc.Record); ok {
			pos = at
		}
	}
	in, err := s.reaches(kind, head, pos, m)
	if err != nil || in {
		return nil, err
	}
	if now, err := s.refs.ReadOptional(ref); err == nil && now != head {
		if in, err := s.reaches(kind, now, -1, m); err != nil || in {
			return nil, err
		}
	}
	writer := ""
	if id, err := s.Identity(); err == nil {
		writer = id.Writer
	}
	f := &verify.RowFault{Chain: kind, Writer: writer, State: verify.Tampered}
	at := "index"
	if kind == "spine" || kind == "audit" {
		at = "seq"
	}
	if pos < m.Pos {
		f.Index = pos + 1
		ends := "it now holds nothing"
		if pos >= 0 {
			ends = fmt.Sprintf("it now ends at %s %d", at, pos)
		}
		f.Reason = fmt.Sprintf("%s this host's writer %s wrote it up to %s %d; %s", rolledBackWord, writer, at, m.Pos, ends)
	} else {
		f.Index = m.Pos
		f.Reason = fmt.Sprintf("%s its record at %s %d is not the one this host's writer %s wrote there", rewrittenWord, at, m.Pos, writer)
	}
	f.Reason += fmt.Sprintf(" (if it was moved back on purpose, remove %s)", s.headPath(ref))
	return f, nil
}
