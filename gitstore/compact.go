package gitstore

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Every write adds a small pack; Compact keeps their number logarithmic by
// merging the smallest packs whenever there are more than a limit, so that
// each remaining pack holds more than twice the objects of all smaller ones
// together (the geometric progression `git repack --geometric=2` keeps).
// Entries are copied byte for byte, deltas resolved, nothing reachable or not
// is dropped, and the merged pack is durable before the old ones go.

// largePack is the size beyond which a pack is left to git's own maintenance.
const largePack = 256 << 20

// Compact merges packs when there are more than maxPacks. It returns the
// number of packs merged. Callers serialize Compact across processes.
func (r *Repo) Compact(maxPacks int) (int, error) {
	if _, err := r.rescan(); err != nil {
		return 0, err
	}
	r.mu.RLock()
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
	total := len(r.packs)
	r.mu.RUnlock()
	if total <= maxPacks || len(cands) < 2 {
		return 0, nil
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].count < cands[j].count })
	k, sum := 2, cands[0].count+cands[1].count
	for k < len(cands) && cands[k].count <= 2*sum {
		sum += cands[k].count
		k++
	}
	merge := cands[:k]

	r.mu.RLock()
	entries, err := r.collectEntries(merge)
	r.mu.RUnlock()
	if err != nil {
		return 0, err
	}
	merged, err := r.writeEntries(entries, "")
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

// collectEntries returns every object of packs once, as raw pack entries.
func (r *Repo) collectEntries(packs []*packIndex) ([]packEntry, error) {
	seen := map[Oid]bool{}
	var out []packEntry
	for _, p := range packs {
		type ent struct {
			i   int
			off int64
		}
		ents := make([]ent, p.count)
		for i := 0; i < p.count; i++ {
			off, err := p.offsetAt(i)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			ents[i] = ent{i, off}
		}
		sort.Slice(ents, func(a, b int) bool { return ents[a].off < ents[b].off })
		for n, e := range ents {
			id := p.oidAt(e.i)
			if seen[id] {
				continue
			}
			seen[id] = true
			end := p.size - 20
			if n+1 < len(ents) {
				end = ents[n+1].off
			}
			typ, _, _, _, _, err := p.entryHeader(e.off)
			if err != nil {
				return nil, fmt.Errorf("%s at %d: %w", p.name, e.off, err)
			}
			if typ == packOfsDelta || typ == packRefDelta {
				t, data, err := r.readPacked(p, e.off, 0)
				if err != nil {
					return nil, fmt.Errorf("%s at %d: %w", p.name, e.off, err)
				}
				out = append(out, encodeEntry(Object{Type: t, Data: data, ID: id}))
				continue
			}
			raw, err := p.raw(e.off, end)
			if err != nil {
				return nil, fmt.Errorf("%s at %d: %w", p.name, e.off, err)
			}
			out = append(out, packEntry{id: id, raw: raw, crc: binary.BigEndian.Uint32(p.crcs[e.i*4:])})
		}
	}
	return out, nil
}
