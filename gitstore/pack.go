package gitstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
)

// packIndex is an open pack: its .idx mapped (it is searched), its .pack
// read with pread, so that a walk over a large repository does not grow the
// process's resident memory with every pack page it touched.
type packIndex struct {
	name    string      // path of the .pack without extension
	idx     []byte      // mapped .idx
	data    io.ReaderAt // the .pack
	file    *os.File    // the .pack file behind data (nil for an in-memory pack)
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
	f, err := os.Open(base + ".pack")
	if err != nil {
		syscall.Munmap(idx)
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		syscall.Munmap(idx)
		return nil, err
	}
	p.data, p.file, p.size, p.mtime = f, f, fi.Size(), fi.ModTime().UnixNano()
	var hdr [12]byte
	if p.size < 32 {
		p.close()
		return nil, fmt.Errorf("%s.pack: bad header", base)
	}
	if _, err := f.ReadAt(hdr[:], 0); err != nil || string(hdr[:4]) != "PACK" {
		p.close()
		return nil, fmt.Errorf("%s.pack: bad header", base)
	}
	if binary.BigEndian.Uint32(hdr[8:12]) != uint32(p.count) {
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
	if p.file != nil {
		p.file.Close()
		p.file = nil
	}
	p.data = nil
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
	if off < 12 || off >= p.size-20 {
		return 0, 0, 0, baseID, 0, fmt.Errorf("entry offset %d out of range", off)
	}
	var hb [maxHeader]byte
	n := min(int64(len(hb)), p.size-20-off)
	if _, err := p.data.ReadAt(hb[:n], off); err != nil {
		return 0, 0, 0, baseID, 0, fmt.Errorf("read entry at %d: %w", off, err)
	}
	typ, size, baseOff, baseID, hl, err := parseEntryHeader(hb[:n], off)
	return typ, size, baseOff, baseID, off + int64(hl), err
}

// maxHeader bounds an entry header: 1+9 size bytes, then a 20-byte base id
// or a 9-byte base offset.
const maxHeader = 48

// open positions a pooled reader at the entry at off, past its header, in
// one read for the common small entry. The caller puts the reader back.
func (p *packIndex) open(off int64) (typ int, size int64, baseOff int64, baseID Oid, br *bufio.Reader, err error) {
	if off < 12 || off >= p.size-20 {
		return 0, 0, 0, baseID, nil, fmt.Errorf("entry offset %d out of range", off)
	}
	br = readers.Get().(*bufio.Reader)
	br.Reset(io.NewSectionReader(p.data, off, p.size-20-off))
	hb, err := br.Peek(int(min(maxHeader, p.size-20-off)))
	if err != nil && len(hb) == 0 {
		readers.Put(br)
		return 0, 0, 0, baseID, nil, fmt.Errorf("read entry at %d: %w", off, err)
	}
	typ, size, baseOff, baseID, hl, err := parseEntryHeader(hb, off)
	if err != nil {
		readers.Put(br)
		return 0, 0, 0, baseID, nil, err
	}
	br.Discard(hl)
	return typ, size, baseOff, baseID, br, nil
}

// parseEntryHeader parses an entry header from b, the bytes at pack offset
// start; hl is the header's length.
func parseEntryHeader(b []byte, start int64) (typ int, size int64, baseOff int64, baseID Oid, hl int, err error) {
	end := len(b)
	off := 0
	if end == 0 {
		return 0, 0, 0, baseID, 0, errors.New("bad entry header")
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

// raw returns the bytes of the pack from off to end.
func (p *packIndex) raw(off, end int64) ([]byte, error) {
	b := make([]byte, end-off)
	if _, err := p.data.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
