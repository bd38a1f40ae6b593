package gitstore

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrMissing reports an object that is in no pack and not loose.
var ErrMissing = errors.New("object missing")

// ErrCorrupt reports an object whose stored bytes do not hash to its id or
// cannot be decoded.
var ErrCorrupt = errors.New("object corrupt")

// Repo reads and writes the objects of one git object directory (and reads
// its alternates).
type Repo struct {
	dir string // objects directory

	mu         sync.RWMutex
	packs      []*packIndex
	known      map[string]bool
	gen        uint64 // counts changes of packs; guarded by mu
	alternates []*Repo

	cacheMu    sync.Mutex
	deltaCache map[deltaKey]cachedObject
	cacheBytes int

	emptyTree atomic.Bool
	lastPack  atomic.Pointer[packIndex] // the pack the last read found its object in

	// FaultHook, when set (by tests, before the repository is used), is
	// called at each step of a write that a crash could interrupt; a
	// non-nil return stops the write right there, leaving the files as a
	// killed process would. Pack writes (WritePack, WritePackKept and the
	// merged pack of Compact) call it with "pack temps synced", "pack .keep
	// renamed", "pack .pack renamed", "pack .idx renamed" and "pack dir
	// synced"; the ref layer has its own (refs.Transactor).
	FaultHook func(step string) error
	// testHookRename, when set, runs just before each rename into the pack
	// directory, with the final path.
	testHookRename func(to string)
	// testHookListed, when set, runs in rescan between the listing of the
	// pack directory and the opening of the packs it found.
	testHookListed func(r *Repo)
}

type deltaKey struct {
	p   *packIndex
	off int64
}

type cachedObject struct {
	typ  ObjectType
	data []byte
}

const deltaCacheLimit = 32 << 20

// Open opens the object directory dir (".git/objects" or a bare repository's
// "objects").
func Open(dir string) (*Repo, error) {
	return openDepth(dir, 0)
}

// OpenWithAlternates opens dir, as Open does, and also reads the objects of
// the extra alternate directories: what git's GIT_ALTERNATE_OBJECT_DIRECTORIES
// adds, as in a pre-receive hook, whose GIT_OBJECT_DIRECTORY is the quarantine
// of the objects a push brings and whose alternate is the repository's own.
func OpenWithAlternates(dir string, extra []string) (*Repo, error) {
	r, err := openDepth(dir, 0)
	if err != nil {
		return nil, err
	}
	for _, d := range extra {
		alt, err := openDepth(d, 1)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("alternate %s: %w", d, err)
		}
		r.alternates = append(r.alternates, alt)
	}
	return r, nil
}

func openDepth(dir string, depth int) (*Repo, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("object directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("object directory %s is not a directory", dir)
	}
	r := &Repo{dir: dir, known: map[string]bool{}, deltaCache: map[deltaKey]cachedObject{}}
	if _, err := r.rescan(); err != nil {
		return nil, err
	}
	if depth < 5 {
		if b, err := os.ReadFile(filepath.Join(dir, "info", "alternates")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				line = strings.TrimSpace(line)
				if line == "" || line[0] == '#' {
					continue
				}
				if !filepath.IsAbs(line) {
					line = filepath.Join(dir, line)
				}
				alt, err := openDepth(line, depth+1)
				if err != nil {
					return nil, fmt.Errorf("alternate %s: %w", line, err)
				}
				r.alternates = append(r.alternates, alt)
			}
		}
	}
	return r, nil
}

// Dir returns the object directory.
func (r *Repo) Dir() string { return r.dir }

// Close unmaps every pack.
func (r *Repo) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.packs {
		p.close()
	}
	r.packs = nil
	r.lastPack.Store(nil)
	for _, a := range r.alternates {
		a.Close()
	}
	return nil
}

// rescan maps packs that appeared since the last scan and retires those whose
// files are gone. It reports unsettled when a listed pack vanished before it
// could be opened: a repack or compaction was under way, and the listing no
// longer shows the directory as it is.
func (r *Repo) rescan() (unsettled bool, err error) {
	packDir := filepath.Join(r.dir, "pack")
	ents, err := os.ReadDir(packDir)
	if err != nil && !os.IsNotExist(err) {
		return false, fmt.Errorf("read %s: %w", packDir, err)
	}
	if r.testHookListed != nil {
		r.testHookListed(r)
	}
	present := map[string]bool{}
	var fresh []*packIndex
	r.mu.RLock()
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, "pack-") || !strings.HasSuffix(n, ".idx") {
			continue
		}
		base := filepath.Join(packDir, strings.TrimSuffix(n, ".idx"))
		present[base] = true
		if r.known[base] {
			continue
		}
		p, err := openPack(base)
		if err != nil {
			// Removed since the listing: what replaced it (a merged pack)
			// may have been written after the listing, so the caller
			// scans again. Any other failure is a pack that does not
			// parse; it is left out, as git leaves it out.
			if errors.Is(err, fs.ErrNotExist) {
				unsettled = true
			}
			continue
		}
		fresh = append(fresh, p)
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.packs[:0:0]
	changed := false
	for _, p := range r.packs {
		if present[p.name] {
			kept = append(kept, p)
		} else {
			changed = true
			delete(r.known, p.name)
			r.lastPack.CompareAndSwap(p, nil)
			r.dropCached(p)
			p.close()
		}
	}
	for _, p := range fresh {
		if r.known[p.name] {
			p.close()
			continue
		}
		changed = true
		r.known[p.name] = true
		kept = append(kept, p)
	}
	// Newest first: recent objects are the ones most often read.
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].mtime > kept[j].mtime })
	r.packs = kept
	if changed {
		r.gen++
	}
	return unsettled, nil
}

// maxRescans bounds the rescans of one lookup while packs keep changing.
const maxRescans = 10

// settled rescans after a lookup that missed on the pack set of generation
// gen. It reports whether the miss stands: the packs mapped now are those of
// gen and the listing saw no pack vanish, so the directory held no other
// pack at that moment. Otherwise the lookup is worth repeating.
func (r *Repo) settled(gen uint64) (bool, error) {
	unsettled, err := r.rescan()
	if err != nil {
		return false, err
	}
	r.mu.RLock()
	same := r.gen == gen
	r.mu.RUnlock()
	return same && !unsettled, nil
}

// addPack registers a pack this process just wrote.
func (r *Repo) addPack(base string) error {
	p, err := openPack(base)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known[base] {
		p.close()
		return nil
	}
	r.known[base] = true
	r.packs = append([]*packIndex{p}, r.packs...)
	r.gen++
	return nil
}

// PackCount returns the number of packs currently mapped.
func (r *Repo) PackCount() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.packs)
}

// Read returns the type and bytes of object id. It does not re-hash them;
// callers that must not trust the store use ReadVerified.
//
// A miss is reported only after a rescan found the packs it searched to be
// those on disk: a concurrent repack or compaction (this process's, another
// one's or git's) that replaces packs between a listing and the opening of
// what it listed makes the lookup run again, up to maxRescans times.
func (r *Repo) Read(id Oid) (ObjectType, []byte, error) {
	if id.IsLooseStandIn() {
		return 0, nil, fmt.Errorf("%w: %s (the ref's loose file holds no object id)", ErrMissing, id)
	}
	for round := 0; ; round++ {
		t, data, gen, err := r.readOnce(id)
		if err == nil || !errors.Is(err, ErrMissing) {
			return t, data, err
		}
		if round == maxRescans {
			break
		}
		ok, err := r.settled(gen)
		if err != nil {
			return 0, nil, err
		}
		if ok {
			break
		}
	}
	for _, a := range r.alternates {
		if t, data, err := a.Read(id); err == nil || !errors.Is(err, ErrMissing) {
			return t, data, err
		}
	}
	return 0, nil, fmt.Errorf("%w: %s", ErrMissing, id)
}

// ReadVerified is Read followed by a check that the bytes hash to id.
func (r *Repo) ReadVerified(id Oid) (ObjectType, []byte, error) {
	t, data, err := r.Read(id)
	if err != nil {
		return 0, nil, err
	}
	if HashObject(t, data) != id {
		return 0, nil, fmt.Errorf("%w: %s does not hash to its id", ErrCorrupt, id)
	}
	return t, data, nil
}

// ReadType reads id and checks it is of type want.
func (r *Repo) ReadType(id Oid, want ObjectType) ([]byte, error) {
	t, data, err := r.Read(id)
	if err != nil {
		return nil, err
	}
	if t != want {
		return nil, fmt.Errorf("%w: %s is a %s, not a %s", ErrCorrupt, id, t, want)
	}
	return data, nil
}

// Has reports whether id is stored. Like Read, it answers false only after
// a rescan that found the pack directory settled.
func (r *Repo) Has(id Oid) bool {
	for round := 0; ; round++ {
		p, gen := r.findPacked(id)
		if p != nil {
			return true
		}
		if _, err := os.Stat(r.loosePath(id)); err == nil {
			return true
		}
		if round == maxRescans {
			break
		}
		if ok, err := r.settled(gen); ok || err != nil {
			break
		}
	}
	for _, a := range r.alternates {
		if a.Has(id) {
			return true
		}
	}
	return false
}

// findPacked returns the mapped pack holding id, or nil, and the generation
// of the pack set it searched.
func (r *Repo) findPacked(id Oid) (*packIndex, uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, p := range r.packs {
		if p.find(id) >= 0 {
			return p, r.gen
		}
	}
	return nil, r.gen
}

// readOnce reads id and returns the generation of the pack set it searched.
func (r *Repo) readOnce(id Oid) (ObjectType, []byte, uint64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, data, err := r.readLocked(id)
	return t, data, r.gen, err
}

// readLocked reads id from the mapped packs or as a loose object; r.mu is
// held for reading, so no pack is unmapped meanwhile.
func (r *Repo) readLocked(id Oid) (ObjectType, []byte, error) {
	// A walk reads neighbours: the pack that answered last is tried first.
	last := r.lastPack.Load()
	for k := -1; k < len(r.packs); k++ {
		var p *packIndex
		if k < 0 {
			if p = last; p == nil {
				continue
			}
		} else if p = r.packs[k]; p == last {
			continue
		}
		if i := p.find(id); i >= 0 {
			r.lastPack.Store(p)
			off, err := p.offsetAt(i)
			if err != nil {
				return 0, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, id, err)
			}
			t, data, err := r.readPacked(p, off, 0)
			if err != nil {
				return 0, nil, fmt.Errorf("%w: %s in %s: %v", ErrCorrupt, id, filepath.Base(p.name), err)
			}
			return t, data, nil
		}
	}
	return r.readLoose(id)
}

func (r *Repo) loosePath(id Oid) string {
	h := id.String()
	return filepath.Join(r.dir, h[:2], h[2:])
}

func (r *Repo) readLoose(id Oid) (ObjectType, []byte, error) {
	raw, err := os.ReadFile(r.loosePath(id))
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil, fmt.Errorf("%w: %s", ErrMissing, id)
		}
		return 0, nil, err
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: loose %s: %v", ErrCorrupt, id, err)
	}
	br := bufio.NewReader(zr)
	hdr, err := br.ReadString(0)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: loose %s: bad header", ErrCorrupt, id)
	}
	ts, ss, ok := strings.Cut(strings.TrimSuffix(hdr, "\x00"), " ")
	if !ok {
		return 0, nil, fmt.Errorf("%w: loose %s: bad header", ErrCorrupt, id)
	}
	t, err := parseType(ts)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: loose %s: %v", ErrCorrupt, id, err)
	}
	n, err := strconv.ParseInt(ss, 10, 64)
	if err != nil || n < 0 || n > 1<<34 {
		return 0, nil, fmt.Errorf("%w: loose %s: bad size", ErrCorrupt, id)
	}
	data, err := readFull(br, n)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: loose %s: %v", ErrCorrupt, id, err)
	}
	return t, data, nil
}

const maxDeltaDepth = 10000

func (r *Repo) readPacked(p *packIndex, off int64, depth int) (ObjectType, []byte, error) {
	if depth > maxDeltaDepth {
		return 0, nil, errors.New("delta chain too deep")
	}
	typ, size, baseOff, baseID, br, err := p.open(off)
	if err != nil {
		return 0, nil, err
	}
	switch typ {
	case int(TypeCommit), int(TypeTree), int(TypeBlob), int(TypeTag):
		data, err := inflateZlib(br, size)
		readers.Put(br)
		return ObjectType(typ), data, err
	}
	key := deltaKey{p, off}
	r.cacheMu.Lock()
	if c, ok := r.deltaCache[key]; ok {
		r.cacheMu.Unlock()
		readers.Put(br)
		return c.typ, ownCopy(c.data, depth), nil
	}
	r.cacheMu.Unlock()
	delta, err := inflateZlib(br, size)
	readers.Put(br)
	if err != nil {
		return 0, nil, err
	}
	var bt ObjectType
	var base []byte
	if typ == packOfsDelta {
		bt, base, err = r.readPacked(p, baseOff, depth+1)
	} else {
		if i := p.find(baseID); i >= 0 {
			var bo int64
			if bo, err = p.offsetAt(i); err == nil {
				bt, base, err = r.readPacked(p, bo, depth+1)
			}
		} else {
			bt, base, err = r.readLocked(baseID)
		}
	}
	if err != nil {
		return 0, nil, fmt.Errorf("delta base: %w", err)
	}
	out, err := applyDelta(base, delta)
	if err != nil {
		return 0, nil, err
	}
	r.cacheMu.Lock()
	if r.cacheBytes+len(out) > deltaCacheLimit {
		r.deltaCache, r.cacheBytes = map[deltaKey]cachedObject{}, 0
	}
	r.deltaCache[key] = cachedObject{bt, out}
	r.cacheBytes += len(out)
	r.cacheMu.Unlock()
	return bt, ownCopy(out, depth), nil
}

// ownCopy gives the caller of a read (depth 0) bytes of its own: the cache
// shares delta results with later reads, which the caller's writes must not
// change. Delta bases (depth > 0) are only read.
func ownCopy(b []byte, depth int) []byte {
	if depth == 0 {
		return bytes.Clone(b)
	}
	return b
}

func (r *Repo) dropCached(p *packIndex) {
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	for k, c := range r.deltaCache {
		if k.p == p {
			r.cacheBytes -= len(c.data)
			delete(r.deltaCache, k)
		}
	}
}

var zlibReaders sync.Pool

// inflateZlib decompresses exactly size bytes from the zlib stream in br.
func inflateZlib(br io.Reader, size int64) ([]byte, error) {
	if size < 0 || size > 1<<34 {
		return nil, errors.New("bad object size")
	}
	var zr io.ReadCloser
	if v := zlibReaders.Get(); v != nil {
		zr = v.(io.ReadCloser)
		if err := zr.(zlib.Resetter).Reset(br, nil); err != nil {
			return nil, err
		}
	} else {
		var err error
		if zr, err = zlib.NewReader(br); err != nil {
			return nil, err
		}
	}
	defer zlibReaders.Put(zr)
	out, err := readFull(zr, size)
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	return out, nil
}

// readFull reads exactly n bytes from rd. n comes from an object or entry
// header, which may be corrupt: beyond 1 MiB the buffer grows with the data
// actually read instead of being reserved (and zeroed) up front, so a bad
// size costs an error, not gigabytes of memory.
func readFull(rd io.Reader, n int64) ([]byte, error) {
	const eager = 1 << 20
	if n <= eager {
		out := make([]byte, n)
		if _, err := io.ReadFull(rd, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	var b bytes.Buffer
	b.Grow(eager)
	if _, err := io.CopyN(&b, rd, n); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b.Bytes(), nil
}

func deltaVarint(d []byte) (uint64, []byte, error) {
	var v uint64
	var shift uint
	for i, c := range d {
		v |= uint64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			return v, d[i+1:], nil
		}
		if shift > 63 {
			break
		}
	}
	return 0, nil, errors.New("bad delta size")
}

// applyDelta applies a git delta to base.
func applyDelta(base, delta []byte) ([]byte, error) {
	srcSize, d, err := deltaVarint(delta)
	if err != nil {
		return nil, err
	}
	if srcSize != uint64(len(base)) {
		return nil, errors.New("delta base size mismatch")
	}
	dstSize, d, err := deltaVarint(d)
	if err != nil {
		return nil, err
	}
	if dstSize > 1<<34 {
		return nil, errors.New("delta result too large")
	}
	// dstSize comes from the delta, which may be corrupt: reserve what the
	// delta plausibly makes and let append grow beyond it, so that a bad
	// size costs an error, not gigabytes of memory.
	out := make([]byte, 0, min(dstSize, uint64(len(base))+uint64(len(d))))
	for len(d) > 0 {
		op := d[0]
		d = d[1:]
		switch {
		case op&0x80 != 0:
			var off, n uint64
			for i := uint(0); i < 4; i++ {
				if op&(1<<i) != 0 {
					if len(d) == 0 {
						return nil, errors.New("truncated delta copy")
					}
					off |= uint64(d[0]) << (8 * i)
					d = d[1:]
				}
			}
			for i := uint(0); i < 3; i++ {
				if op&(0x10<<i) != 0 {
					if len(d) == 0 {
						return nil, errors.New("truncated delta copy")
					}
					n |= uint64(d[0]) << (8 * i)
					d = d[1:]
				}
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > uint64(len(base)) || uint64(len(out))+n > dstSize {
				return nil, errors.New("delta copy out of range")
			}
			out = append(out, base[off:off+n]...)
		case op != 0:
			n := int(op)
			if n > len(d) || uint64(len(out)+n) > dstSize {
				return nil, errors.New("delta insert out of range")
			}
			out = append(out, d[:n]...)
			d = d[n:]
		default:
			return nil, errors.New("delta opcode 0")
		}
	}
	if uint64(len(out)) != dstSize {
		return nil, errors.New("delta result size mismatch")
	}
	return out, nil
}

// HasEmptyTree reports whether the empty tree object is stored; once seen it
// is remembered.
func (r *Repo) HasEmptyTree() bool {
	if r.emptyTree.Load() {
		return true
	}
	if r.Has(EmptyTree) {
		r.emptyTree.Store(true)
	}
	return r.emptyTree.Load()
}
