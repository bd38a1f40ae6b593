package gitstore

import (
	"bytes"
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Every write adds a small pack; Compact keeps their number logarithmic by
// merging the smallest packs whenever there are more than a limit, so that
// each remaining pack holds more than twice the objects of all smaller ones
// together (the geometric progression `git repack --geometric=2` keeps).
// Entries are copied byte for byte, deltas resolved, nothing reachable or not
// is dropped, and the merged pack is durable before the old ones go.
//
// The merged pack streams to its temporary file as it is made, so that the
// memory a compaction takes is bounded by its largest object and a few dozen
// bytes per object, however large the packs it merges.

// largePack is the size beyond which a pack is left to git's own maintenance.
const largePack = 256 << 20

// Compact merges packs when there are more than maxPacks. It returns the
// number of packs merged. Callers serialize Compact across processes (and
// clear what a killed one left with CleanMergeTemps); writes may go on
// beside it.
func (r *Repo) Compact(maxPacks int) (int, error) {
	if _, err := r.rescan(); err != nil {
		return 0, err
	}
	// The inputs are read under the read lock, from their choice to the
	// last entry copied: no rescan unmaps them meanwhile, even if a
	// concurrent git deletes them.
	r.mu.RLock()
	merge := r.pickMerge(maxPacks)
	var pw *packWriter
	var err error
	if merge != nil {
		pw, err = r.streamMerge(merge)
	}
	r.mu.RUnlock()
	if merge == nil || err != nil {
		return 0, err
	}
	merged, err := r.finishPack(pw)
	if err != nil {
		return 0, err
	}
	for _, p := range merge {
		if p.name == merged {
			// The other inputs held only copies of this pack's objects: the
			// merged pack came out byte for byte equal to it, same name. It
			// is the result; deleting it would lose every object.
			continue
		}
		// The index goes first: without it git and readers ignore the pack.
		for _, ext := range []string{".idx", ".pack", ".rev", ".bitmap", ".mtimes", ".promisor"} {
			if err := os.Remove(p.name + ext); err != nil && !os.IsNotExist(err) {
				return 0, err
			}
		}
	}
	if err := syncDir(filepath.Join(r.dir, "pack")); err != nil {
		return 0, err
	}
	_, err = r.rescan()
	return len(merge), err
}

// pickMerge returns the packs to merge, smallest first, or nil. r.mu is held
// for reading.
func (r *Repo) pickMerge(maxPacks int) []*packIndex {
	var cands []*packIndex
	for _, p := range r.packs {
		if p.size >= largePack {
			continue
		}
		if _, err := os.Stat(p.name + ".keep"); err == nil {
			continue
		}
		cands = append(cands, p)
	}
	if len(r.packs) <= maxPacks || len(cands) < 2 {
		return nil
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].count < cands[j].count })
	k, sum := 2, cands[0].count+cands[1].count
	for k < len(cands) && cands[k].count <= 2*sum {
		sum += cands[k].count
		k++
	}
	return cands[:k]
}

// streamMerge writes every object of packs once into a new pack: the packs
// in turn, each in the order of its entries, an object that an earlier
// entry already wrote skipped. Full entries are copied byte for byte in
// bounded chunks; deltas are resolved and written as full objects. r.mu is
// held for reading. On error nothing of the new pack is left.
func (r *Repo) streamMerge(packs []*packIndex) (*packWriter, error) {
	first, n, err := firstCopies(packs)
	if err != nil {
		return nil, err
	}
	pw, err := r.createPack(n, true)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 64<<10)
	for j, p := range packs {
		if err := r.copyPack(pw, p, first[j], buf); err != nil {
			pw.abort()
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return pw, nil
}

// copyPack writes to pw the entries of p that first marks (a bit per index
// position), in the order they sit in p.
func (r *Repo) copyPack(pw *packWriter, p *packIndex, first bitset, buf []byte) error {
	// Index positions in pack order: 4 bytes an entry, for this pack only.
	order := make([]uint32, p.count)
	for i := range order {
		if _, err := p.offsetAt(i); err != nil {
			return err
		}
		order[i] = uint32(i)
	}
	at := func(i uint32) int64 {
		off, _ := p.offsetAt(int(i)) // checked above
		return off
	}
	slices.SortFunc(order, func(a, b uint32) int { return cmp.Compare(at(a), at(b)) })
	for n, i := range order {
		if !first.has(int(i)) {
			continue
		}
		off, end := at(i), p.size-20
		if n+1 < len(order) {
			end = at(order[n+1])
		}
		if end <= off {
			return fmt.Errorf("entries at %d overlap", off)
		}
		id := p.oidAt(int(i))
		typ, _, _, _, _, err := p.entryHeader(off)
		if err != nil {
			return fmt.Errorf("at %d: %w", off, err)
		}
		if typ == packOfsDelta || typ == packRefDelta {
			t, data, err := r.readPacked(p, off, 0)
			if err != nil {
				return fmt.Errorf("at %d: %w", off, err)
			}
			if err := pw.object(Object{Type: t, Data: data, ID: id}); err != nil {
				return err
			}
			continue
		}
		crc := binary.BigEndian.Uint32(p.crcs[i*4:])
		if err := pw.copyEntry(id, io.NewSectionReader(p.data, off, end-off), end-off, crc, buf); err != nil {
			return fmt.Errorf("at %d: %w", off, err)
		}
	}
	return nil
}

// bitset is a set of small integers.
type bitset []uint64

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }

// firstCopies marks, for each of packs, the index positions of the objects
// it holds that no earlier pack of packs holds, and returns their number:
// the objects of the merged pack, each once. It merges the packs' sorted
// name tables, with a bit per object and no table of the objects.
func firstCopies(packs []*packIndex) ([]bitset, int, error) {
	first := make([]bitset, len(packs))
	h := make(nameHeap, 0, len(packs))
	for j, p := range packs {
		first[j] = newBitset(p.count)
		if p.count > 0 {
			h = append(h, nameCursor{p, j, 0})
		}
	}
	heap.Init(&h)
	var last []byte
	n := 0
	for len(h) > 0 {
		c := &h[0]
		id := c.name()
		switch d := bytes.Compare(id, last); {
		case d > 0: // the first copy (and anything is above last == nil)
			first[c.j].set(c.i)
			n++
			last = id
		case d < 0:
			return nil, 0, fmt.Errorf("%s.idx: names out of order", c.p.name)
		}
		if c.i++; c.i == c.p.count {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
	}
	return first, n, nil
}

// nameCursor is a position in the name table of the j-th pack to merge.
type nameCursor struct {
	p    *packIndex
	j, i int
}

func (c *nameCursor) name() []byte { return c.p.names[c.i*20 : c.i*20+20] }

// nameHeap orders cursors by name, then by pack: of several copies of an
// object, the earliest pack's comes first.
type nameHeap []nameCursor

func (h nameHeap) Len() int { return len(h) }
func (h nameHeap) Less(a, b int) bool {
	if d := bytes.Compare(h[a].name(), h[b].name()); d != 0 {
		return d < 0
	}
	return h[a].j < h[b].j
}
func (h nameHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *nameHeap) Push(x any)   { *h = append(*h, x.(nameCursor)) }
func (h *nameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
