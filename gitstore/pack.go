package gitstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// packIndex is a mapped pack (.pack + .idx, version 2).
type packIndex struct {
	name    string // path of the .pack without extension
	idx     []byte // mapped .idx
	pack    []byte // mapped .pack
	count   int
	fanout  []byte // 256 × uint32
	names   []byte // count × 20
	crcs    []byte // count × 4
	offsets []byte // count × 4
	large   []byte // 8-byte offsets
	size    int64  // pack file size
	mtime   int64
}

var errNotPack = errors.New("not a pack index")

func mapFile(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return nil, fi, fmt.Errorf("%s: empty file", path)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fi, fmt.Errorf("map %s: %w", path, err)
	}
	return b, fi, nil
}

// openPack maps base+".idx" and base+".pack".
func openPack(base string) (*packIndex, error) {
	idx, _, err := mapFile(base + ".idx")
	if err != nil {
		return nil, err
	}
	p := &packIndex{name: base, idx: idx}
	if err := p.parseIndex(); err != nil {
		syscall.Munmap(idx)
		return nil, fmt.Errorf("%s.idx: %w", base, err)
	}
	pk, fi, err := mapFile(base + ".pack")
	if err != nil {
		syscall.Munmap(idx)
		return nil, err
	}
	p.pack, p.size, p.mtime = pk, fi.Size(), fi.ModTime().UnixNano()
	if len(pk) < 32 || string(pk[:4]) != "PACK" {
		p.close()
		return nil, fmt.Errorf("%s.pack: bad header", base)
	}
	if binary.BigEndian.Uint32(pk[8:12]) != uint32(p.count) {
		p.close()
		return nil, fmt.Errorf("%s: pack and index disagree on object count", base)
	}
	return p, nil
}

func (p *packIndex) close() {
	if p.idx != nil {
		syscall.Munmap(p.idx)
		p.idx = nil
	}
	if p.pack != nil {
		syscall.Munmap(p.pack)
		p.pack = nil
	}
}

func (p *packIndex) parseIndex() error {
	b := p.idx
	if len(b) < 8+256*4+40 || !bytes.Equal(b[:4], []byte{0xff, 't', 'O', 'c'}) || binary.BigEndian.Uint32(b[4:8]) != 2 {
		return errNotPack
	}
	p.fanout = b[8 : 8+256*4]
	// find slices the names table by fan-out values: they must not decrease
	// (so none exceeds the last, the object count), as git checks too.
	for i, prev := 0, uint32(0); i < 256; i++ {
		v := binary.BigEndian.Uint32(p.fanout[i*4:])
		if v < prev {
			return errors.New("non-monotonic fan-out table")
		}
		prev = v
	}
	n := int(binary.BigEndian.Uint32(p.fanout[255*4:]))
	off := 8 + 256*4
	need := off + n*20 + n*4 + n*4 + 40
	if len(b) < need {
		return errors.New("truncated index")
	}
	p.count = n
	p.names = b[off : off+n*20]
	off += n * 20
	p.crcs = b[off : off+n*4]
	off += n * 4
	p.offsets = b[off : off+n*4]
	off += n * 4
	p.large = b[off : len(b)-40]
	return nil
}

// find returns the position of id in the index, or -1.
func (p *packIndex) find(id Oid) int {
	lo := 0
	if id[0] > 0 {
		lo = int(binary.BigEndian.Uint32(p.fanout[(int(id[0])-1)*4:]))
	}
	hi := int(binary.BigEndian.Uint32(p.fanout[int(id[0])*4:]))
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		c := bytes.Compare(p.names[m*20:m*20+20], id[:])
		switch {
		case c == 0:
			return m
		case c < 0:
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
}

func (p *packIndex) oidAt(i int) (o Oid) {
	copy(o[:], p.names[i*20:i*20+20])
	return o
}

func (p *packIndex) offsetAt(i int) (int64, error) {
	v := binary.BigEndian.Uint32(p.offsets[i*4:])
	if v&0x80000000 == 0 {
		return int64(v), nil
	}
	j := int(v & 0x7fffffff)
	if j*8+8 > len(p.large) {
		return 0, errors.New("bad large offset")
	}
	return int64(binary.BigEndian.Uint64(p.large[j*8:])), nil
}

// Pack entry types beyond the four object types.
const (
	packOfsDelta = 6
	packRefDelta = 7
)

// entryHeader parses the entry at off: its type, inflated size, the base of
// a delta (absolute offset for OFS_DELTA, id for REF_DELTA) and where the
// compressed data starts.
func (p *packIndex) entryHeader(off int64) (typ int, size int64, baseOff int64, baseID Oid, data int64, err error) {
	b := p.pack
	end := int64(len(b)) - 20
	start := off
	if off < 12 || off >= end {
		return 0, 0, 0, baseID, 0, fmt.Errorf("entry offset %d out of range", off)
	}
	c := b[off]
	off++
	typ = int(c>>4) & 7
	size = int64(c & 15)
	shift := uint(4)
	for c&0x80 != 0 {
		if off >= end || shift > 60 {
			return 0, 0, 0, baseID, 0, errors.New("bad entry header")
		}
		c = b[off]
		off++
		size |= int64(c&0x7f) << shift
		shift += 7
	}
	switch typ {
	case packOfsDelta:
		if off >= end {
			return 0, 0, 0, baseID, 0, errors.New("bad delta offset")
		}
		c = b[off]
		off++
		rel := int64(c & 0x7f)
		for c&0x80 != 0 {
			if off >= end || rel > 1<<55 {
				return 0, 0, 0, baseID, 0, errors.New("bad delta offset")
			}
			c = b[off]
			off++
			rel = ((rel + 1) << 7) | int64(c&0x7f)
		}
		if rel <= 0 || rel > start-12 {
			return 0, 0, 0, baseID, 0, errors.New("delta base offset out of range")
		}
		baseOff = start - rel
	case packRefDelta:
		if off+20 > end {
			return 0, 0, 0, baseID, 0, errors.New("truncated ref delta")
		}
		copy(baseID[:], b[off:off+20])
		off += 20
	case int(TypeCommit), int(TypeTree), int(TypeBlob), int(TypeTag):
	default:
		return 0, 0, 0, baseID, 0, fmt.Errorf("unknown pack entry type %d", typ)
	}
	return typ, size, baseOff, baseID, off, nil
}

// inflate decompresses the zlib stream at off into exactly size bytes.
func (p *packIndex) inflate(off, size int64) ([]byte, error) {
	return inflateZlib(p.pack[off:len(p.pack)-20], size)
}
