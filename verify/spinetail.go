package verify

import (
	"encoding/binary"

	"github.com/bernstein/bernstein/gitstore"
)

// A kept index is laid out sorted by task, so adding an entry to it means
// writing it again whole: a read that walked new entries onto it would pay
// the size of the repository. So the entries after the index's head are
// kept apart, in a tail (docs/format.md, Derived cache): a small file,
// authenticated whole under the same writer key (another domain), naming
// the index it extends by the SHA-256 of its header, and holding each entry
// after the index's head in chain order. A read loads the index in place
// and the tail whole, and walks only from the tail's newest entry; a read
// that walked new entries writes the tail again (it is small), and writes
// the index again, with the tail's entries in it and no tail, only once the
// tail holds spineCacheMinNew entries or more and one for every eight of
// the index's, or spineTailMax entries (mergeTail): the whole index is
// written once in min(n/8, spineTailMax) posts, no longer once in 32.
//
// What holds of the index holds of its tail, and of the two together:
//
//   - every tail entry a read decides on is read again from its commit, as
//     an entry of the index is (the tail's records are kept records);
//   - that the entries of a task are all listed rests on the MACs: the
//     index's lists every entry up to its head; the tail's, bound to that
//     index by its header's hash and holding the entries from the next
//     position in chain order on, every entry up to its newest; the walk
//     from the spine's head to the tail's newest entry (proving it an
//     ancestor) every entry since, linked onto the tail's newest. A tail
//     that does not authenticate, names another index, or whose entries do
//     not follow the index's (positions, the broken link the index names)
//     is not read: the walk goes from the index's head.

// keptTail is a writer's kept tail: the entries after its index's head.
type keptTail struct {
	recs  []*SpineRecord // chain order; the newest's commit is the tail's head
	first int            // the first entry a broken link affects, or -1
	msg   string
	check string
}

const spineTailMagic = "bernstein spine tail v2\n"

// head is the tail's newest entry's commit.
func (t *keptTail) head() gitstore.Oid { return t.recs[len(t.recs)-1].Commit }

// spineTailMax bounds the entries a tail holds: every read reads it whole
// (about 20 µs an entry, measured at 10,000 entries), so a tail of n/8
// entries would make every read of a large repository pay for it.
const spineTailMax = 256

// mergeTail reports whether a tail of n entries over an index of base
// entries is written into the index.
func mergeTail(n, base int) bool {
	return n >= spineCacheMinNew && (8*n >= base || n >= spineTailMax)
}

// encodeTail writes the tail of wi (every entry of wi.recs, after its
// base's), or nil when it cannot be kept.
func encodeTail(wi *writerIndex, tag string) []byte {
	k := wi.base
	b := []byte(spineTailMagic)
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	num := func(v int64) { b = binary.AppendVarint(b, v) }
	str(tag)
	b = append(b, k.id[:]...)
	num(int64(wi.first))
	str(wi.msg)
	str(wi.check)
	num(int64(len(wi.recs)))
	var rec []byte
	for i, r := range wi.recs {
		if rec = appendRecord(rec[:0], r, k.n+i); rec == nil {
			return nil
		}
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	return b
}

// openTail decodes content as the tail of base, or returns nil when it is
// not one: not built under tag, bound to another index, or whose entries
// do not follow base's.
func openTail(content []byte, base *keptIndex, writer, tag string) *keptTail {
	if len(content) < len(spineTailMagic) || string(content[:len(spineTailMagic)]) != spineTailMagic {
		return nil
	}
	d := &decoder{b: content[len(spineTailMagic):]}
	if d.str() != tag || string(d.take(32)) != string(base.id[:]) {
		return nil
	}
	t := &keptTail{first: int(d.num()), msg: d.str(), check: d.str()}
	n := d.num()
	if d.bad || n <= 0 || n > int64(len(d.b)) {
		return nil
	}
	switch {
	case base.first >= 0 && (t.first != base.first || t.msg != base.msg || t.check != base.check):
		return nil // a break in the index affects every later entry
	case base.first < 0 && t.first != -1 && (t.first < base.n || int64(t.first) >= int64(base.n)+n):
		return nil
	}
	strs := interner{}
	for i := 0; i < int(n); i++ {
		_, ord, r, ok := decodeRecord([]byte(d.str()), writer, strs)
		if d.bad || !ok || ord != int64(base.n+i) {
			return nil
		}
		t.recs = append(t.recs, r)
	}
	if len(d.b) != 0 {
		return nil
	}
	return t
}
