// Package heads owns rollback detection: the head of every chain this
// host's writer extended, kept outside the repository, and the checks that
// find a chain moved back behind it (or rewritten).
package heads

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
	"github.com/bernstein/bernstein/internal/core"
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

// Mark is the head of one chain as this host's writer left it: the
// position of its head record and that record's link, what the next
// record's prev names (a row's hash, a spine entry's hash, an audit
// entry's HMAC). The record, not its commit, is the identity: a row signed
// again at another date is the same row.
type Mark struct {
	Pos  int64 // index (journal, ledger) or seq (spine, audit) of the head record
	Link string
	// Commit is the head commit as written: a chain still at it holds the
	// head without a read. Another commit at Pos with the same record (the
	// row signed again) holds it too.
	Commit gitstore.Oid
}

const headMagic = "bernstein head v1"

// encodeHead renders a head as one line with a checksum.
func encodeHead(m Mark) []byte {
	line := fmt.Sprintf("%s %020d %s %s", headMagic, m.Pos, m.Commit, m.Link)
	return fmt.Appendf(nil, "%s %08x\n", line, crc32.ChecksumIEEE([]byte(line)))
}

// decodeHead reads a head written by encodeHead; anything else (a write cut
// short, a stray file) is no head.
func decodeHead(b []byte) (Mark, bool) {
	line, ok := bytes.CutSuffix(b, []byte("\n"))
	i := bytes.LastIndexByte(line, ' ')
	if !ok || i < 0 || !bytes.HasPrefix(line, []byte(headMagic+" ")) {
		return Mark{}, false
	}
	text, sum := line[:i], line[i+1:]
	if want, err := strconv.ParseUint(string(sum), 16, 32); err != nil || len(sum) != 8 || uint32(want) != crc32.ChecksumIEEE(text) {
		return Mark{}, false
	}
	f := strings.Fields(strings.TrimPrefix(string(text), headMagic+" "))
	if len(f) != 3 {
		return Mark{}, false
	}
	pos, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || pos < 0 {
		return Mark{}, false
	}
	id, err := gitstore.ParseOid(f[1])
	if err != nil || id.IsZero() {
		return Mark{}, false
	}
	return Mark{Pos: pos, Commit: id, Link: f[2]}, true
}

// Keeper keeps the heads this host's writer wrote in one repository, and
// checks chains against them.
type Keeper struct {
	c    *core.Repo
	memo memo // ancestry already proven against the heads this writer wrote
}

// NewKeeper is the keeper of repository c's heads.
func NewKeeper(c *core.Repo) *Keeper { return &Keeper{c: c} }

// root is this repository's folder of heads in BERNSTEIN_HOME.
func (k *Keeper) root() string { return filepath.Join(k.c.Home, "heads", k.c.RepoID()) }

// Path is where the head of ref is kept: under this repository's folder
// of BERNSTEIN_HOME, at the ref's path below refs/bernstein/.
func (k *Keeper) Path(ref string) string {
	return filepath.Join(k.root(), filepath.FromSlash(strings.TrimPrefix(ref, refs.Prefix)))
}

// read returns the head this host's writer left on ref, if any.
func (k *Keeper) read(ref string) (Mark, bool) {
	b, err := os.ReadFile(k.Path(ref))
	if err != nil {
		return Mark{}, false
	}
	return decodeHead(b)
}

// Write records the heads a committed batch left (the caller holds the
// writer lock, and the refs are durable). A head that cannot be written is
// a warning: it only weakens what this host can tell later.
func (k *Keeper) Write(heads map[string]Mark) {
	for ref, m := range heads {
		if err := writeHeadFile(k.Path(ref), encodeHead(m)); err != nil {
			k.c.Warn("remember the head of %s: %v", ref, err)
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

// memo remembers which chain heads were proven to contain a head this
// writer wrote: ancestry never changes, so each is walked once.
type memo struct {
	mu   sync.Mutex
	seen map[headSeen]bool
}

type headSeen struct {
	head gitstore.Oid
	mark Mark
}

func (m *memo) has(k headSeen) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[k]
}

func (m *memo) add(k headSeen) {
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
func (k *Keeper) reaches(kind string, head gitstore.Oid, pos int64, m Mark) (bool, error) {
	if head == m.Commit {
		return true, nil
	}
	if head.IsZero() || pos >= 0 && pos < m.Pos {
		return false, nil
	}
	seen := headSeen{head, m}
	if k.memo.has(seen) {
		return true, nil
	}
	// Known position: the record m.Pos sits pos-m.Pos parents down.
	// Unknown: each record says where it sits.
	id := head
	for steps := int64(0); ; steps++ {
		cc, err := chain.Read(k.c.Objects, id)
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
			k.memo.add(seen)
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

// IsRollback reports whether f is a rollback's fault (rather than a row
// that does not prove).
func IsRollback(f verify.RowFault) bool {
	return strings.HasPrefix(f.Reason, rolledBackWord) || strings.HasPrefix(f.Reason, rewrittenWord)
}

// FaultPhrase says what keeps a chain from being built on, at its first
// fault f.
func FaultPhrase(what, task string, f verify.RowFault) string {
	if IsRollback(f) {
		return fmt.Sprintf("the %s of %s cannot be trusted from index %d (%s)", what, task, f.Index, f.Reason)
	}
	return fmt.Sprintf("the %s of %s holds a row no trusted writer signed at index %d (%s)", what, task, f.Index, f.Reason)
}

// Rollback checks the chain ref (of kind journal, ledger, spine or audit)
// at head, whose head record is at pos, against the head this host's
// writer left on it. It returns the fault of a chain that no longer
// contains that head, or nil. head may come from a snapshot older than the
// head (a reader's view, taken before a write that then remembered its
// head): only when the ref as it is now does not contain it either is the
// chain rolled back.
func (k *Keeper) Rollback(kind, ref string, head gitstore.Oid, pos int64) (*verify.RowFault, error) {
	m, ok := k.read(ref)
	if !ok || head == m.Commit {
		return nil, nil
	}
	if pos < 0 && !head.IsZero() {
		// Not known to the caller: the head record says where it sits.
		cc, err := chain.Read(k.c.Objects, head)
		if err != nil {
			return nil, err
		}
		if at, ok := recordPos(kind, cc.Record); ok {
			pos = at
		}
	}
	in, err := k.reaches(kind, head, pos, m)
	if err != nil || in {
		return nil, err
	}
	if now, err := k.c.Refs.ReadOptional(ref); err == nil && now != head {
		if in, err := k.reaches(kind, now, -1, m); err != nil || in {
			return nil, err
		}
	}
	writer := ""
	if id, err := k.c.Identity(); err == nil {
		writer = id.Writer
	}
	if kind == "journal" || kind == "ledger" {
		if ok, err := k.superseded(kind, ref, writer, head, pos, m); err != nil || ok {
			return nil, err
		}
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
	f.Reason += fmt.Sprintf(" (if it was moved back on purpose, remove %s)", k.Path(ref))
	return f, nil
}

// Failures reports every chain this host's writer extended that no longer
// contains the head it wrote: a rollback that only this host can see, the
// audit mirror having been rolled back with it. With only, the chains of
// that task alone.
func (k *Keeper) Failures(view refs.Source, only string) ([]verify.Failure, error) {
	root := k.root()
	var out []verify.Failure
	for _, kind := range []string{"journal", "ledger", "spine", "audit"} {
		ents, err := os.ReadDir(filepath.Join(root, kind))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			ref := refs.Prefix + kind + "/" + e.Name()
			f := verify.Failure{Check: "rollback"}
			switch kind {
			case "journal", "ledger":
				task, err := refs.UnescapeTask(e.Name())
				if err != nil || only != "" && task != only {
					continue
				}
				f.TaskID = task
			default:
				if only != "" {
					continue
				}
				f.Writer = e.Name()
			}
			cur, err := view.ReadOptional(ref)
			if err != nil {
				return nil, err
			}
			fault, err := k.Rollback(kind, ref, cur, -1)
			if err != nil || fault == nil {
				continue
			}
			f.Reason = fault.Reason
			switch kind {
			case "journal":
				f.JournalIndex = &fault.Index
			case "ledger":
				f.Reason = fmt.Sprintf("ledger of %s at index %d: %s", f.TaskID, fault.Index, fault.Reason)
			default:
				f.Seq = &fault.Index
			}
			out = append(out, f)
		}
	}
	return out, nil
}
