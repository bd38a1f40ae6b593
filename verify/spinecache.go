package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"math/bits"
	"slices"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
)

// A read of one task needs the spine entries of that task, and the proof
// that they sit in their writers' spines: walking every spine for it costs
// every version of the repository. So a reader keeps each writer's index
// between processes (Env.SpineCache), as of a spine head, and walks only the
// entries written since: the walk from the current head stops at the kept
// head, and links the new entries onto the kept ones as a whole walk would.
// A head that does not lead back to the kept one (a spine rewritten or
// rolled back) is walked whole.
//
// A read of one task uses the kept index in place (spinekept.go): its
// records are laid out sorted by task, and by hash through a table of
// their places, so a read searches them and decodes only the records it
// lands on, never the whole file.
//
// The kept index is derived data. What it says is used in two ways:
//
//   - every entry a read decides on (the entries of the task read, its
//     seals and supersede entries, the entry each of its rows names) is read
//     again from its commit before use: the commit's record must hash to
//     the kept hash and carry exactly what the index kept (task, key,
//     version, journal index, what it binds, the seal); its signature is
//     checked from that commit as for a walked entry. An entry that does
//     not hold, or a row whose entry the index lacks, makes the reader drop
//     the kept index and walk every spine (Verifier.Task): a lying index
//     changes nothing a reader reports.
//   - that an entry is in its writer's chain from the root (no broken link
//     under it) and that the index lists every entry of a task (a journal
//     rolled back behind its spine is found by the entries it lacks) cannot
//     be read from one commit. They rest on the index being the one the
//     local writer wrote: its header is authenticated whole (internal/proof:
//     an HMAC under a key only the local writer holds, the fold cache's
//     rule, docs/format.md, Derived cache) and carries the SHA-256 of every
//     4 KiB block of the body, and every byte a read takes from the body
//     comes from a block whose hash it checked first. A search reads only
//     a few blocks, but it decides only on bytes it read: the bounds of a
//     task's run of records are the records it read on either side, so an
//     edit anywhere it looked fails a block's hash, and an edit where it did
//     not look cannot change what it found. The index names the repository
//     identity it was built under, and its head is proven an ancestor of
//     the spine's current head by the walk back to it.
//
// audit verify never reads it.

// SpineCache keeps a writer's spine index: Load returns what Save was given
// last for writer (the header whole and authenticated, the body to read in
// ranges, each checked against the header's block hashes), or a nil header
// when nothing that authenticates is kept.
//
// LoadTail returns what SaveTail was given last for writer when it
// authenticates (the entries after the index's head, spinetail.go), or nil;
// Save makes the tail kept before it one that is no longer read.
type SpineCache interface {
	Load(writer string) (header []byte, body io.ReaderAt)
	Save(writer string, header, body []byte)
	LoadTail(writer string) []byte
	SaveTail(writer string, content []byte)
	// Rewrite takes the right to replace writer's index (Save): one
	// reader at a time, in this process or another, rewrites it; a reader
	// refused keeps reading the index it has and saves nothing. It
	// returns the header kept now (nil when none reads) and a release.
	Rewrite(writer string) (release func(), kept []byte, ok bool)
	// WalkTurn waits for this process's turn to walk writer's spine
	// whole, where no index is kept: one reader of the process at a
	// time, each after the first finding the index the one before it
	// kept. A cache that cannot keep an index (no writer key) gives the
	// turn at once. It returns the turn's release.
	WalkTurn(writer string) (release func())
}

// spineCacheMinNew is the fewest entries a tail holds before the index is
// rewritten with them (spinetail.go).
const spineCacheMinNew = 32

// writerIndex is one writer's spine as indexed at head, oldest first. When
// base is set, recs are the entries walked since base's head, and base
// holds the older ones (first then counts from base's first entry).
type writerIndex struct {
	head  gitstore.Oid
	recs  []*SpineRecord
	first int // the first entry a broken link affects, or -1
	msg   string
	check string
	base  *keptIndex
}

const spineCacheMagic = "bernstein spine index v2\n"

// spineBlock is the size of the body's blocks, each hashed in the header.
const spineBlock = 4096

// bindingTag names the repository identity an index was built under: the
// roots of the chains were checked against it.
func (env *Env) bindingTag() string {
	b := env.Binding
	if b == nil {
		return "none"
	}
	return b.ID + "\n" + b.Head.String() + "\n" + b.Problem
}

const (
	recParsed = 1 << iota
	recArtifact
	recSeal
	recSupersede
)

// recTask is the task a record is filed under ("" for an entry that did
// not parse); an entry is of one kind only.
func recTask(r *SpineRecord) string {
	switch {
	case r.Artifact != nil:
		return r.Artifact.TaskID
	case r.Seal != nil:
		return r.Seal.TaskID
	case r.Supersede != nil:
		return r.Supersede.TaskID
	}
	return ""
}

// encodeWriterIndex writes a writer's whole spine (recs, oldest first) in
// the kept form: the header, then the body (docs/format.md, Derived cache).
// It returns nil when the spine cannot be kept.
func encodeWriterIndex(recs []*SpineRecord, head gitstore.Oid, first int, msg, check, tag string) (header, body []byte) {
	n := len(recs)
	if n == 0 || n >= 1<<31 || first >= n {
		return nil, nil
	}
	order := make([]int, n) // task order: by task, then chain order
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(recTask(recs[a]), recTask(recs[b])) })
	place := make([]uint32, n) // chain position -> place in task order
	for p, i := range order {
		place[i] = uint32(p)
	}
	var byHash []int // chain positions of parsed entries, by hash, first of equal hashes
	for i, r := range recs {
		if r.parsed {
			byHash = append(byHash, i)
		}
	}
	slices.SortStableFunc(byHash, func(a, b int) int { return bytes.Compare(recs[a].hash[:], recs[b].hash[:]) })
	byHash = slices.CompactFunc(byHash, func(a, b int) bool { return recs[a].hash == recs[b].hash })
	tables := 4 * (n + len(byHash))
	body = make([]byte, tables, tables+n*96)
	for k, i := range byHash {
		binary.BigEndian.PutUint32(body[4*(n+k):], place[i])
	}
	newest := int(place[n-1])
	for p, i := range order {
		binary.BigEndian.PutUint32(body[4*p:], uint32(len(body)))
		if body = appendRecord(body, recs[i], i); body == nil {
			return nil, nil
		}
	}
	if len(body) >= 1<<32 {
		return nil, nil
	}
	h := make([]byte, 0, 128+len(body)/spineBlock*32)
	str := func(s string) { h = binary.AppendUvarint(h, uint64(len(s))); h = append(h, s...) }
	num := func(v int64) { h = binary.AppendVarint(h, v) }
	h = append(h, spineCacheMagic...)
	str(tag)
	h = append(h, head[:]...)
	firstSeq := int64(-1)
	if first >= 0 {
		firstSeq = recs[first].Seq
	}
	num(int64(first))
	num(firstSeq)
	str(msg)
	str(check)
	num(int64(n))
	num(int64(len(byHash)))
	num(int64(newest))
	num(int64(len(body)))
	for off := 0; off < len(body); off += spineBlock {
		sum := sha256.Sum256(body[off:min(off+spineBlock, len(body))])
		h = append(h, sum[:]...)
	}
	return h, body
}

// appendRecord appends the kept form of r, the entry at chain position ord.
func appendRecord(b []byte, r *SpineRecord, ord int) []byte {
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	var flags byte
	if r.parsed {
		flags |= recParsed
	}
	if r.Artifact != nil {
		flags |= recArtifact
	}
	if r.Seal != nil {
		flags |= recSeal
	}
	if r.Supersede != nil {
		flags |= recSupersede
	}
	if bits.OnesCount8(flags&^recParsed) > 1 {
		return nil // one kind an entry: a record is filed under one task
	}
	str(recTask(r))
	num(int64(ord))
	b = append(b, flags)
	num(r.Seq)
	b = append(b, r.Commit[:]...)
	if r.parsed {
		b = append(b, r.hash[:]...)
	}
	if a := r.Artifact; a != nil {
		str(a.Key)
		num(a.Version)
		num(a.JournalIndex)
		b = append(b, a.binding[:]...)
	}
	if s := r.Seal; s != nil {
		num(int64(s.V))
		str(string(s.Prev))
		str(s.Kind)
		str(string(s.Head))
		num(s.Rows)
		num(s.LedgerIndex)
		str(s.Transition)
	}
	if s := r.Supersede; s != nil {
		bs, err := record.Canonical(s)
		if err != nil {
			return nil
		}
		str(string(bs))
	}
	return b
}

// decoder reads the kept form; any fault makes it fail.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) take(n int) []byte {
	if d.bad || n < 0 || len(d.b) < n {
		d.bad = true
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) num() int64 {
	v, n := binary.Varint(d.b)
	if d.bad || n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	v, n := binary.Uvarint(d.b)
	if d.bad || n <= 0 || v > uint64(len(d.b)) {
		d.bad = true
		return ""
	}
	d.b = d.b[n:]
	return string(d.take(int(v)))
}

// decodeRecord reads the record b holds, of writer's spine: its task, its
// chain position and the entry; ok is false when b is not one record.
func decodeRecord(b []byte, writer string, strs interner) (task string, ord int64, r *SpineRecord, ok bool) {
	d := &decoder{b: b}
	task, ord = strs.of(d.str()), d.num()
	r = &SpineRecord{Writer: writer, cached: true}
	flags := d.take(1)
	if d.bad {
		return "", 0, nil, false
	}
	r.Seq = d.num()
	copy(r.Commit[:], d.take(20))
	if flags[0]&recParsed != 0 {
		r.parsed = true
		copy(r.hash[:], d.take(32))
	}
	if flags[0]&recArtifact != 0 {
		a := &ArtifactSeal{TaskID: task, Key: strs.of(d.str()), Version: d.num(), JournalIndex: d.num()}
		copy(a.binding[:], d.take(32))
		r.Artifact = a
	}
	if flags[0]&recSeal != 0 {
		s := &record.SpineSealEntry{TaskID: task}
		s.V, s.Writer, s.Seq = int(d.num()), writer, r.Seq
		s.Prev, s.Kind = record.Hash(d.str()), d.str()
		s.Head, s.Rows, s.LedgerIndex, s.Transition = record.Hash(d.str()), d.num(), d.num(), d.str()
		r.Seal = s
	}
	if flags[0]&recSupersede != 0 {
		e, err := record.ParseSpineEntry([]byte(d.str()))
		if err != nil || e.Supersede == nil || e.Supersede.TaskID != task {
			return "", 0, nil, false
		}
		r.Supersede = e.Supersede
	}
	if d.bad || len(d.b) != 0 || recTask(r) != task || bits.OnesCount8(flags[0]&^recParsed) > 1 {
		return "", 0, nil, false
	}
	return task, ord, r, true
}

// prove reads a kept entry's commit again and reports whether it holds
// exactly the entry the index kept; one that does not poisons the index
// (Poisoned). A walked entry needs no proof: it was read from its commit.
func (ix *SpineIndex) prove(r *SpineRecord) bool {
	if r == nil || !r.cached {
		return true
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if r.proved {
		return true
	}
	cc, err := chain.Read(ix.env.Objects, r.Commit)
	if err != nil || !sameEntry(ix, r, cc.Record) {
		ix.poisoned = true
		return false
	}
	if !r.checked {
		r.check(ix.env, cc.Payload, cc.Commit.Signature, cc.Commit.Tree, cc.Record, CommitTime(cc.Commit.Committer))
	}
	if r.sigState == sigBad {
		// A badly signed entry in a spine changes its head, and a changed
		// head is walked: a kept entry that points to one is the index's.
		ix.poisoned = true
		return false
	}
	r.proved = true
	return true
}

// sameEntry reports whether the record bytes b are the entry r keeps.
func sameEntry(ix *SpineIndex, r *SpineRecord, b []byte) bool {
	e, err := record.ParseSpineEntry(b)
	if err != nil || !r.parsed || e.Header.Writer != r.Writer || e.Header.Seq != r.Seq {
		return false
	}
	if h, ok := hashBytes(string(e.Hash)); !ok || h != r.hash {
		return false
	}
	var walked SpineRecord
	ix.fill(&walked, e)
	switch {
	case (walked.Artifact == nil) != (r.Artifact == nil), (walked.Seal == nil) != (r.Seal == nil), (walked.Supersede == nil) != (r.Supersede == nil):
		return false
	case r.Artifact != nil && *walked.Artifact != *r.Artifact:
		return false
	case r.Seal != nil && *walked.Seal != *r.Seal:
		return false
	case r.Supersede != nil:
		a, err1 := record.Canonical(walked.Supersede)
		b, err2 := record.Canonical(r.Supersede)
		return err1 == nil && err2 == nil && string(a) == string(b)
	}
	return true
}

// proveTask proves the kept entries a read of task decides on: the task's
// artifact entries, seals and supersede entries.
func (ix *SpineIndex) proveTask(task string) {
	if !ix.cached {
		return
	}
	ts := ix.ofTask(task)
	for _, list := range [][]*SpineRecord{ts.arts, ts.seals, ts.sups} {
		for _, r := range list {
			ix.prove(r)
		}
	}
}

// Poisoned reports whether a kept entry did not hold against its commit,
// or a row named an entry the kept index lacks: the index must not be used.
func (ix *SpineIndex) Poisoned() bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.poisoned
}

// missing records a lookup of h that found nothing: from a kept index, the
// index may lack it.
func (ix *SpineIndex) missing() {
	if ix.cached {
		ix.mu.Lock()
		ix.poisoned = true
		ix.mu.Unlock()
	}
}
