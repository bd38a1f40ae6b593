package refs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
)

// packed-refs is read the way git reads it: a file git wrote with the
// "sorted" trait in its header is searched (a lookup reads a few blocks
// around the probes of a binary search, however many refs it holds), and
// a prefix reads the records under it and no others. A file without the
// trait (an older git's, or a hand-made one) is read whole and sorted, as
// git does. Nothing is kept between reads: every read opens the file as it
// is now (git replaces it by a rename, never in place).

// packedBlock is how much of packed-refs one read takes.
const packedBlock = 16 << 10

// packedFile is one opened packed-refs.
type packedFile struct {
	f      *os.File
	size   int64
	blocks map[int64][]byte
	start  int64 // the first record, after the header
	sorted bool
	all    []packedRec // unsorted files only: every record, sorted
}

type packedRec struct {
	name string
	oid  gitstore.Oid
}

// openPacked opens dir's packed-refs; nil (no error) when there is none.
func openPacked(dir string) (*packedFile, error) {
	f, err := os.Open(filepath.Join(dir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &packedFile{f: f, size: fi.Size(), blocks: map[int64][]byte{}}
	if p.size > 0 {
		if b, err := p.at(0); err != nil {
			p.close()
			return nil, err
		} else if b == '#' {
			line, end, err := p.line(0)
			if err != nil {
				p.close()
				return nil, err
			}
			p.start = end
			if traits, ok := strings.CutPrefix(string(line), "# pack-refs with:"); ok {
				for _, t := range strings.Fields(traits) {
					p.sorted = p.sorted || t == "sorted"
				}
			}
		}
	}
	if !p.sorted {
		if err := p.readAll(); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

func (p *packedFile) close() {
	if p != nil {
		p.f.Close()
	}
}

// at returns the byte at off (io.EOF past the end).
func (p *packedFile) at(off int64) (byte, error) {
	if off < 0 || off >= p.size {
		return 0, io.EOF
	}
	base := off - off%packedBlock
	b, ok := p.blocks[base]
	if !ok {
		b = make([]byte, min(packedBlock, p.size-base))
		if _, err := p.f.ReadAt(b, base); err != nil {
			return 0, fmt.Errorf("packed-refs: %w", err)
		}
		p.blocks[base] = b
	}
	return b[off-base], nil
}

// line returns the line that starts at off, without its newline, and the
// offset after it.
func (p *packedFile) line(off int64) ([]byte, int64, error) {
	var out []byte
	for i := off; i < p.size; i++ {
		c, err := p.at(i)
		if err != nil {
			return nil, 0, err
		}
		if c == '\n' {
			return out, i + 1, nil
		}
		out = append(out, c)
	}
	return out, p.size, nil
}

// lineStart returns the start of the line holding off, not before lo.
func (p *packedFile) lineStart(lo, off int64) (int64, error) {
	for off > lo {
		c, err := p.at(off - 1)
		if err != nil {
			return 0, err
		}
		if c == '\n' {
			break
		}
		off--
	}
	return off, nil
}

// record reads the record at off (a line that is not a peeled line): its
// name and value, and the offset of the next record (after its peeled line,
// if any).
func (p *packedFile) record(off int64) (packedRec, int64, error) {
	line, next, err := p.line(off)
	if err != nil {
		return packedRec{}, 0, err
	}
	rec, err := parsePackedLine(line)
	if err != nil {
		return packedRec{}, 0, err
	}
	for next < p.size {
		c, err := p.at(next)
		if err != nil {
			return packedRec{}, 0, err
		}
		if c != '^' {
			break
		}
		if _, next, err = p.line(next); err != nil {
			return packedRec{}, 0, err
		}
	}
	return rec, next, nil
}

func parsePackedLine(line []byte) (packedRec, error) {
	h, name, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(name) == 0 {
		return packedRec{}, fmt.Errorf("packed-refs: bad line %q", line)
	}
	o, err := gitstore.ParseOid(string(h))
	if err != nil {
		return packedRec{}, fmt.Errorf("packed-refs: %w", err)
	}
	return packedRec{name: string(name), oid: o}, nil
}

// search returns the offset of the first record whose name is not below
// key (the end of the file when there is none), by binary search over the
// sorted file.
func (p *packedFile) search(key string) (int64, error) {
	lo, hi := p.start, p.size
	for lo < hi {
		mid := lo + (hi-lo)/2
		rec, err := p.lineStart(lo, mid)
		if err != nil {
			return 0, err
		}
		if c, err := p.at(rec); err != nil {
			return 0, err
		} else if c == '^' {
			// A peeled line belongs to the record before it.
			if rec, err = p.lineStart(lo, rec-1); err != nil {
				return 0, err
			}
		}
		r, next, err := p.record(rec)
		if err != nil {
			return 0, err
		}
		switch {
		case r.name < key:
			lo = next
		case r.name > key:
			hi = rec
		default:
			return rec, nil
		}
	}
	return lo, nil
}

// readAll reads every record of an unsorted file and sorts them.
func (p *packedFile) readAll() error {
	b := make([]byte, p.size)
	if _, err := p.f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("packed-refs: %w", err)
	}
	seen := map[string]int{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 || line[0] == '#' || line[0] == '^' {
			continue
		}
		rec, err := parsePackedLine(line)
		if err != nil {
			return err
		}
		if i, ok := seen[rec.name]; ok {
			if p.all[i].oid != rec.oid {
				return p.inconsistent(rec.name, p.all[i].oid, rec.oid)
			}
			continue
		}
		seen[rec.name] = len(p.all)
		p.all = append(p.all, rec)
	}
	sort.Slice(p.all, func(i, j int) bool { return p.all[i].name < p.all[j].name })
	return nil
}

// lookup returns ref's value in packed-refs.
func (p *packedFile) lookup(ref string) (gitstore.Oid, bool, error) {
	if p == nil {
		return gitstore.ZeroOid, false, nil
	}
	if !p.sorted {
		i := sort.Search(len(p.all), func(i int) bool { return p.all[i].name >= ref })
		if i < len(p.all) && p.all[i].name == ref {
			return p.all[i].oid, true, nil
		}
		return gitstore.ZeroOid, false, nil
	}
	off, err := p.search(ref)
	if err != nil || off >= p.size {
		return gitstore.ZeroOid, false, err
	}
	rec, next, err := p.record(off)
	if err != nil || rec.name != ref {
		return gitstore.ZeroOid, false, err
	}
	// Two lines of one name sit side by side in a sorted file, and the
	// search may land on either: look at both neighbours.
	if next < p.size {
		after, _, err := p.record(next)
		if err != nil {
			return gitstore.ZeroOid, false, err
		}
		if after.name == ref && after.oid != rec.oid {
			return gitstore.ZeroOid, false, p.inconsistent(ref, rec.oid, after.oid)
		}
	}
	if off > p.start {
		prev, err := p.lineStart(p.start, off-1)
		if err != nil {
			return gitstore.ZeroOid, false, err
		}
		if c, err := p.at(prev); err != nil {
			return gitstore.ZeroOid, false, err
		} else if c == '^' && prev > p.start {
			if prev, err = p.lineStart(p.start, prev-1); err != nil {
				return gitstore.ZeroOid, false, err
			}
		}
		before, _, err := p.record(prev)
		if err != nil {
			return gitstore.ZeroOid, false, err
		}
		if before.name == ref && before.oid != rec.oid {
			return gitstore.ZeroOid, false, p.inconsistent(ref, before.oid, rec.oid)
		}
	}
	return rec.oid, true, nil
}

// inconsistent is the error of a ref packed-refs lists with two values.
func (p *packedFile) inconsistent(ref string, a, b gitstore.Oid) error {
	return &InconsistentError{Path: p.f.Name(), Ref: ref, Values: []gitstore.Oid{a, b}}
}

// each calls fn for every ref under prefix, in name order.
func (p *packedFile) each(prefix string, fn func(name string, o gitstore.Oid)) error {
	if p == nil {
		return nil
	}
	if !p.sorted {
		for i := sort.Search(len(p.all), func(i int) bool { return p.all[i].name >= prefix }); i < len(p.all) && strings.HasPrefix(p.all[i].name, prefix); i++ {
			fn(p.all[i].name, p.all[i].oid)
		}
		return nil
	}
	off, err := p.search(prefix)
	if err != nil {
		return err
	}
	var last packedRec
	for off < p.size {
		rec, next, err := p.record(off)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(rec.name, prefix) {
			return nil
		}
		if rec.name == last.name {
			if rec.oid != last.oid {
				return p.inconsistent(rec.name, last.oid, rec.oid)
			}
		} else {
			fn(rec.name, rec.oid)
		}
		last = rec
		off = next
	}
	return nil
}
