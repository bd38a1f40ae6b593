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
	"slices"
	"sort"
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

	mu    sync.Mutex
	files map[string]*headsFile // by path: the repository's key may change (init, upgrade)
}

// NewKeeper is the keeper of repository c's heads.
func NewKeeper(c *core.Repo) *Keeper { return &Keeper{c: c, files: map[string]*headsFile{}} }

// root is this repository's folder of heads in BERNSTEIN_HOME.
func (k *Keeper) root() string { return filepath.Join(k.c.Home, "heads", k.c.RepoID()) }

// file is this host's writer's heads file in this repository (nil when
// this host has no writer).
func (k *Keeper) file() *headsFile {
	id, err := k.c.Identity()
	if err != nil {
		return nil
	}
	path := filepath.Join(k.root(), id.Writer+".heads")
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.files[path]
	if !ok {
		f = newHeadsFile(path, id.Writer)
		k.files[path] = f
	}
	return f
}

// Path is the file that keeps this host's writer's heads in this
// repository (one file whatever the number of chains).
func (k *Keeper) Path() string {
	if f := k.file(); f != nil {
		return f.path
	}
	return k.root()
}

// chainName is ref's name in the heads file: its path below
// refs/bernstein/.
func chainName(ref string) string { return strings.TrimPrefix(ref, refs.Prefix) }

// read returns the head this host's writer left on ref, if any.
func (k *Keeper) read(ref string) (Mark, bool) {
	return k.readIn(k.file(), true, ref)
}

// readIn is read from f (k.file()), made current first when refresh is
// set.
func (k *Keeper) readIn(f *headsFile, refresh bool, ref string) (Mark, bool) {
	if f == nil {
		return Mark{}, false
	}
	m, ok, exists := f.lookup(chainName(ref), refresh)
	if ok {
		return m, true
	}
	if exists {
		return Mark{}, false
	}
	if _, err := os.Stat(f.path); err == nil {
		return Mark{}, false
	}
	// Heads kept before the heads file, one file per chain, until the
	// next write moves them into it.
	b, err := os.ReadFile(k.legacyPath(ref))
	if err != nil {
		return Mark{}, false
	}
	return decodeHead(b)
}

// Recorded returns the head this host's writer left on ref, if it keeps one.
func (k *Keeper) Recorded(ref string) (Mark, bool) { return k.read(ref) }

// legacyPath is where a head was kept before the heads file: one file per
// chain, at the ref's path below refs/bernstein/.
func (k *Keeper) legacyPath(ref string) string {
	return filepath.Join(k.root(), filepath.FromSlash(chainName(ref)))
}

// legacyHeads reads every head kept in a file of its own.
func (k *Keeper) legacyHeads() (map[string]Mark, error) {
	out := map[string]Mark{}
	for _, kind := range []string{"journal", "ledger", "spine", "audit"} {
		ents, err := os.ReadDir(filepath.Join(k.root(), kind))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(k.root(), kind, e.Name()))
			if err != nil {
				return nil, err
			}
			if m, ok := decodeHead(b); ok {
				out[kind+"/"+e.Name()] = m
			}
		}
	}
	return out, nil
}

// Write records the heads a committed batch left (the caller holds the
// writer lock, and the refs are durable): one appended line per chain. A
// head that cannot be written is a warning: it only weakens what this
// host can tell later.
func (k *Keeper) Write(heads map[string]Mark) {
	if len(heads) == 0 {
		return
	}
	f := k.file()
	if f == nil {
		return
	}
	es := make([]entry, 0, len(heads))
	for ref, m := range heads {
		m := m
		es = append(es, entry{chain: chainName(ref), mark: &m})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].chain < es[j].chain })
	if err := f.write(es, k.migrate); err != nil {
		k.c.Warn("remember the heads of %d chains: %v", len(es), err)
	}
}

// migrate reads the heads kept one file per chain, for the heads file
// being created, and says how to remove those files once it exists.
func (k *Keeper) migrate() (map[string]Mark, func(), error) {
	old, err := k.legacyHeads()
	if err != nil {
		return nil, nil, err
	}
	root := k.root()
	return old, func() {
		for _, kind := range []string{"journal", "ledger", "spine", "audit"} {
			os.RemoveAll(filepath.Join(root, kind))
		}
	}, nil
}

// Forget drops the head this host's writer remembers for ref: the chain
// as it stands is accepted (a ref moved back on purpose).
func (k *Keeper) Forget(ref string) error {
	f := k.file()
	if f == nil {
		return errors.New("this host has no writer: it remembers no heads")
	}
	return f.write([]entry{{chain: chainName(ref)}}, k.migrate)
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
		cc, err := readRecord(k.c.Objects, kind, id)
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

// readRecord reads one commit of a chain of kind and its record: an
// archive commit has many parents, the first the previous commit.
func readRecord(objs *gitstore.Repo, kind string, id gitstore.Oid) (chain.Commit, error) {
	if kind == record.ChainArchive {
		return chain.ReadArchive(objs, id)
	}
	return chain.Read(objs, id)
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
	case record.ChainArchive:
		a, err := record.ParseArchive(rec)
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

// Rollback checks the chain ref (of kind journal, ledger, spine, audit or
// archive) at head, whose head record is at pos, against the head this
// host's writer left on it. It returns the fault of a chain that no longer
// contains that head, or nil. head may come from a snapshot older than the
// head (a reader's view, taken before a write that then remembered its
// head): only when the ref as it is now does not contain it either is the
// chain rolled back.
func (k *Keeper) Rollback(kind, ref string, head gitstore.Oid, pos int64) (*verify.RowFault, error) {
	m, ok := k.read(ref)
	return k.rollback(kind, ref, head, pos, m, ok)
}

// A View reads the heads of one read view (a snapshot of the refs and the
// reads made from it): which file holds this host's writer's heads (named
// by the repository's identity) is found at its first read, and the file
// is made current (a stat, and the lines appended since read) at its first
// read only, not at each of the view's reads of every task. The heads it
// reads are those written before its first read, which came after the
// view's refs were read: every head written before them.
type View struct {
	k *Keeper

	mu        sync.Mutex
	f         *headsFile
	refreshed bool
}

// View is a view of the heads for one read view.
func (k *Keeper) View() *View { return &View{k: k} }

func (v *View) read(ref string) (Mark, bool) {
	v.mu.Lock()
	if !v.refreshed {
		v.f = v.k.file()
	}
	f, refresh := v.f, !v.refreshed
	v.refreshed = true
	v.mu.Unlock()
	return v.k.readIn(f, refresh, ref)
}

// Rollback is Keeper.Rollback with the heads of the view.
func (v *View) Rollback(kind, ref string, head gitstore.Oid, pos int64) (*verify.RowFault, error) {
	m, ok := v.read(ref)
	return v.k.rollback(kind, ref, head, pos, m, ok)
}

// rollback is Rollback with m, the head this host's writer left on ref
// (ok false: none).
func (k *Keeper) rollback(kind, ref string, head gitstore.Oid, pos int64, m Mark, ok bool) (*verify.RowFault, error) {
	if !ok || head == m.Commit {
		return nil, nil
	}
	if pos < 0 && !head.IsZero() {
		// Not known to the caller: the head record says where it sits.
		cc, err := readRecord(k.c.Objects, kind, head)
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
	if kind == "spine" || kind == "audit" || kind == record.ChainArchive {
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
	f.Reason += fmt.Sprintf(" (if it was moved back on purpose, run 'bernstein audit accept %s': this host then forgets the head it keeps in %s)", ref, k.Path())
	return f, nil
}

// Failures reports every chain this host's writer extended that no longer
// contains the head it wrote: a rollback that only this host can see, the
// audit mirror having been rolled back with it. With only, the chains of
// that task alone.
func (k *Keeper) Failures(view refs.Source, only string) ([]verify.Failure, error) {
	all, err := k.all()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(all))
	for c := range all {
		names = append(names, c)
	}
	return k.failures(view, only, names)
}

// FailuresOf is Failures for the given chains alone (journal/<task>,
// spine/<writer>, as under refs/bernstein/, the task escaped), of which
// those this host's writer remembers no head for are passed over: the
// chains that changed since an audit checkpoint, whose view need cover
// only them.
func (k *Keeper) FailuresOf(view refs.Source, chains []string) ([]verify.Failure, error) {
	return k.failures(view, "", chains)
}

func (k *Keeper) failures(view refs.Source, only string, names []string) ([]verify.Failure, error) {
	names = slices.Clone(names)
	sort.Strings(names)
	names = slices.Compact(names)
	var out []verify.Failure
	for _, name := range names {
		kind, rest, _ := strings.Cut(name, "/")
		ref := refs.Prefix + name
		f := verify.Failure{Check: "rollback"}
		switch kind {
		case "journal", "ledger":
			task, err := refs.UnescapeTask(rest)
			if err != nil || only != "" && task != only {
				continue
			}
			f.TaskID = task
		case "spine", "audit", record.ChainArchive:
			if only != "" {
				continue
			}
			f.Writer = rest
		default:
			continue
		}
		cur, err := view.ReadOptional(ref)
		if errors.As(err, new(*refs.BadRefError)) {
			continue // read past: the chain's own check names it
		}
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
	return out, nil
}

// all is every head this host's writer remembers in this repository, by
// chain name.
func (k *Keeper) all() (map[string]Mark, error) {
	f := k.file()
	if f == nil {
		return map[string]Mark{}, nil
	}
	if _, err := os.Stat(f.path); errors.Is(err, fs.ErrNotExist) {
		return k.legacyHeads()
	}
	return f.all()
}
