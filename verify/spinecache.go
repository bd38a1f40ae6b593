package verify

import (
	"encoding/binary"

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
//     be read from one commit. The cache's store authenticates the index
//     (internal/proof: an HMAC under a key only the local writer holds, the
//     fold cache's rule, docs/format.md, Derived cache), the index names the
//     repository identity it was built under, and its head is proven an
//     ancestor of the spine's current head by the walk back to it.
//
// audit verify never reads it.

// SpineCache keeps a writer's spine index: Load returns what Save was given
// last for writer, or nil when nothing that authenticates is kept.
type SpineCache interface {
	Load(writer string) []byte
	Save(writer string, data []byte)
}

// spineCacheMinNew is how many newly walked entries make rewriting a kept
// index worth it: a read walks at most this many entries more.
const spineCacheMinNew = 32

// writerIndex is one writer's spine as indexed at head, oldest first.
type writerIndex struct {
	head    gitstore.Oid
	recs    []*SpineRecord
	first   int // the first entry a broken link affects, or -1
	msg     string
	check   string
	extends bool // the walk that made it met the kept index's head
}

const spineCacheMagic = "bernstein spine index v1\n"

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

// encodeWriterIndex writes wi in the kept form.
func encodeWriterIndex(wi *writerIndex, tag string) []byte {
	b := make([]byte, 0, 64+len(wi.recs)*128)
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	b = append(b, spineCacheMagic...)
	str(tag)
	b = append(b, wi.head[:]...)
	num(int64(wi.first))
	str(wi.msg)
	str(wi.check)
	num(int64(len(wi.recs)))
	for _, r := range wi.recs {
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
		b = append(b, flags)
		num(r.Seq)
		b = append(b, r.Commit[:]...)
		if r.parsed {
			b = append(b, r.hash[:]...)
		}
		if a := r.Artifact; a != nil {
			str(a.TaskID)
			str(a.Key)
			num(a.Version)
			num(a.JournalIndex)
			b = append(b, a.binding[:]...)
		}
		if s := r.Seal; s != nil {
			num(int64(s.V))
			str(string(s.Prev))
			str(s.Kind)
			str(s.TaskID)
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

// decodeWriterIndex reads a kept index of writer's spine, nil when there is
// none or it is not one built under tag.
func decodeWriterIndex(data []byte, writer, tag string, strs interner) *writerIndex {
	if len(data) < len(spineCacheMagic) || string(data[:len(spineCacheMagic)]) != spineCacheMagic {
		return nil
	}
	d := &decoder{b: data[len(spineCacheMagic):]}
	if d.str() != tag {
		return nil
	}
	wi := &writerIndex{}
	copy(wi.head[:], d.take(20))
	wi.first = int(d.num())
	wi.msg, wi.check = d.str(), d.str()
	n := d.num()
	if d.bad || n <= 0 || n > int64(len(d.b)) || wi.first < -1 || int64(wi.first) >= n {
		return nil
	}
	wi.recs = make([]*SpineRecord, n)
	for i := range wi.recs {
		r := &SpineRecord{Writer: writer, cached: true}
		flags := d.take(1)
		if d.bad {
			return nil
		}
		r.Seq = d.num()
		copy(r.Commit[:], d.take(20))
		if flags[0]&recParsed != 0 {
			r.parsed = true
			copy(r.hash[:], d.take(32))
		}
		if flags[0]&recArtifact != 0 {
			a := &ArtifactSeal{TaskID: strs.of(d.str()), Key: strs.of(d.str()), Version: d.num(), JournalIndex: d.num()}
			copy(a.binding[:], d.take(32))
			r.Artifact = a
		}
		if flags[0]&recSeal != 0 {
			s := &record.SpineSealEntry{}
			s.V, s.Writer, s.Seq = int(d.num()), writer, r.Seq
			s.Prev, s.Kind = record.Hash(d.str()), d.str()
			s.TaskID, s.Head, s.Rows, s.LedgerIndex, s.Transition = d.str(), record.Hash(d.str()), d.num(), d.num(), d.str()
			r.Seal = s
		}
		if flags[0]&recSupersede != 0 {
			e, err := record.ParseSpineEntry([]byte(d.str()))
			if err != nil || e.Supersede == nil {
				return nil
			}
			r.Supersede = e.Supersede
		}
		if d.bad {
			return nil
		}
		wi.recs[i] = r
	}
	if len(d.b) != 0 {
		return nil
	}
	return wi
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
	for _, list := range [][]*SpineRecord{ix.ByTask[task], ix.Seals[task], ix.Supersedes[task]} {
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
