package gitstore

import (
	"bytes"
	"compress/zlib"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// packEntry is one object as it sits in a pack: its id, the raw entry bytes
// (header and compressed data) and their CRC-32.
type packEntry struct {
	id  Oid
	raw []byte
	crc uint32
}

var zlibWriters = sync.Pool{New: func() any {
	w, _ := zlib.NewWriterLevel(nil, zlib.BestSpeed)
	return w
}}

// compressAbove is the size from which a blob is deflated. Commits, trees
// and small blobs are stored (zlib without compression): every chain walk
// and verification reads them, and a stored stream inflates about ten times
// faster than a deflated one, for a few hundred bytes more on disk.
const compressAbove = 4096

func encodeEntry(o Object) packEntry {
	var b bytes.Buffer
	b.Grow(len(o.Data) + 32)
	writeEntryHeader(&b, int(o.Type), int64(len(o.Data)))
	if o.Type == TypeBlob && len(o.Data) >= compressAbove {
		zw := zlibWriters.Get().(*zlib.Writer)
		zw.Reset(&b)
		zw.Write(o.Data)
		zw.Close()
		zlibWriters.Put(zw)
	} else {
		writeStoredZlib(&b, o.Data)
	}
	raw := b.Bytes()
	return packEntry{id: o.ID, raw: raw, crc: crc32.ChecksumIEEE(raw)}
}

// writeStoredZlib writes data as a zlib stream of stored deflate blocks.
func writeStoredZlib(b *bytes.Buffer, data []byte) {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], adler32.Checksum(data))
	b.Write([]byte{0x78, 0x01})
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), 0xffff)
		final := byte(0)
		if n == len(data) {
			final = 1
		}
		b.Write([]byte{final, byte(n), byte(n >> 8), ^byte(n), ^byte(n >> 8)})
		b.Write(data[:n])
		data = data[n:]
	}
	b.Write(sum[:])
}

func writeEntryHeader(b *bytes.Buffer, typ int, size int64) {
	c := byte(typ<<4) | byte(size&15)
	size >>= 4
	for size > 0 {
		b.WriteByte(c | 0x80)
		c = byte(size & 0x7f)
		size >>= 7
	}
	b.WriteByte(c)
}

// Temporary files of a writer carry bernstein's own prefixes, not git's
// tmp_pack_ and tmp_idx_, so that CleanStale can tell what a killed writer
// left from what a live git is writing. They still begin with "tmp_", which
// `git prune` removes once they are old (at once with --prune=now).
const (
	tmpPrefix     = "tmp_bernstein_"
	tmpPackPrefix = tmpPrefix + "pack_"
	tmpIdxPrefix  = tmpPrefix + "idx_"
	tmpKeepPrefix = tmpPrefix + "keep_"
)

// KeepPrefix begins the content of every .keep file bernstein writes;
// CleanStale removes only keep files that begin with it.
const KeepPrefix = "bernstein "

// testHookRename, when set, runs just before each rename into the pack
// directory, with the final path.
var testHookRename func(to string)

// FaultHook, when set (by tests), is called at each step of a write that a
// crash could interrupt; a non-nil return stops the write right there,
// leaving the files as a killed process would. Pack writes call it with
// "pack temps synced", "pack .keep renamed", "pack .pack renamed", "pack
// .idx renamed" and "pack dir synced"; the ref layer adds its own steps.
var FaultHook func(step string) error

// FaultPoint runs FaultHook at step.
func FaultPoint(step string) error {
	if FaultHook == nil {
		return nil
	}
	return FaultHook(step)
}

// WritePack stores objects as one new pack and its index, both synced to disk
// and renamed into place (and the directory synced) before it returns. It
// returns the pack's base path. Objects already stored are written again
// only if listed; git tolerates duplicates across packs.
func (r *Repo) WritePack(objects []Object) (string, error) {
	return r.writePack(objects, "")
}

// WritePackKept is WritePack for objects that no ref reaches yet: the pack
// is protected by a <base>.keep file holding keepMsg (which must begin with
// KeepPrefix), so that `git repack -ad` and `git gc` neither delete nor
// prune it. The keep file is synced and in place before the pack and its
// index are renamed into place: there is no instant at which the pack is
// visible without it. Once refs reach the objects, the caller removes the
// keep with Unkeep.
func (r *Repo) WritePackKept(objects []Object, keepMsg string) (string, error) {
	if !strings.HasPrefix(keepMsg, KeepPrefix) {
		return "", fmt.Errorf("keep message %q does not begin with %q", keepMsg, KeepPrefix)
	}
	return r.writePack(objects, keepMsg)
}

func (r *Repo) writePack(objects []Object, keepMsg string) (string, error) {
	if len(objects) == 0 {
		return "", nil
	}
	seen := make(map[Oid]bool, len(objects))
	entries := make([]packEntry, 0, len(objects))
	for _, o := range objects {
		if seen[o.ID] {
			continue
		}
		seen[o.ID] = true
		entries = append(entries, encodeEntry(o))
	}
	return r.writeEntries(entries, keepMsg)
}

// Unkeep removes the keep file of the pack at base (a path WritePackKept
// returned); a missing keep file is not an error. Nothing is synced: a keep
// that a crash brings back only protects the pack longer, and CleanStale
// removes it.
func (r *Repo) Unkeep(base string) error {
	if base == "" {
		return nil // WritePackKept of no objects
	}
	if err := os.Remove(base + ".keep"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// CleanStale removes from the pack directory what a killed bernstein writer
// left: its temporary files and its keep files (those whose content begins
// with KeepPrefix). git's temporary files and keep files, and keep files of
// any other content, are left alone. The caller holds the cross-process
// writer lock, so no live bernstein writer owns any of them. It returns the
// paths removed.
func (r *Repo) CleanStale() ([]string, error) {
	packDir := filepath.Join(r.dir, "pack")
	ents, err := os.ReadDir(packDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		n := e.Name()
		path := filepath.Join(packDir, n)
		switch {
		case strings.HasPrefix(n, tmpPrefix):
		case strings.HasSuffix(n, ".keep") && e.Type().IsRegular():
			if ours, err := isOurKeep(path); err != nil || !ours {
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
				continue
			}
		default:
			continue
		}
		if err := os.Remove(path); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// isOurKeep reports whether the keep file at path was written by bernstein.
func isOurKeep(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var b [len(KeepPrefix)]byte
	n, err := io.ReadFull(f, b[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return false, err
	}
	return string(b[:n]) == KeepPrefix, nil
}

// writeEntries writes entries as one pack and its index, and a keep file
// holding keepMsg unless it is empty, and returns the pack's base path.
func (r *Repo) writeEntries(entries []packEntry, keepMsg string) (string, error) {
	packDir := filepath.Join(r.dir, "pack")
	if err := os.MkdirAll(packDir, 0o755); err != nil {
		return "", err
	}
	// The pack: header, entries in the given order, SHA-1 trailer.
	h := sha1.New()
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(entries)))
	size := 12
	for _, e := range entries {
		size += len(e.raw)
	}
	pack := make([]byte, 0, size+20)
	pack = append(pack, hdr[:]...)
	offsets := make([]int64, len(entries))
	for i, e := range entries {
		offsets[i] = int64(len(pack))
		pack = append(pack, e.raw...)
	}
	h.Write(pack)
	sum := h.Sum(nil)
	pack = append(pack, sum...)
	idx := encodeIndex(entries, offsets, sum)

	name := "pack-" + hex.EncodeToString(sum)
	base := filepath.Join(packDir, name)
	// The files are written and synced side by side (the disk takes the
	// flushes together), then renamed into place in the order that keeps
	// every instant safe: the keep first, so that the pack is never
	// visible unprotected; the pack before its index, which is what makes
	// it visible.
	type file struct {
		prefix, ext string
		data        []byte
	}
	files := []file{{tmpPackPrefix, ".pack", pack}, {tmpIdxPrefix, ".idx", idx}}
	if keepMsg != "" {
		files = append([]file{{tmpKeepPrefix, ".keep", []byte(keepMsg + "\n")}}, files...)
	}
	tmps := make([]string, len(files))
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files[1:] {
		wg.Go(func() { tmps[i+1], errs[i+1] = writeTemp(packDir, f.prefix, f.data) })
	}
	tmps[0], errs[0] = writeTemp(packDir, files[0].prefix, files[0].data)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		removeAll(tmps...)
		return "", err
	}
	if err := FaultPoint("pack temps synced"); err != nil {
		return "", err
	}
	// A write that fails leaves no keep: its caller moves no ref, and the
	// objects are git's to collect.
	fail := func(err error) (string, error) {
		if keepMsg != "" {
			os.Remove(base + ".keep")
		}
		return "", err
	}
	for i, f := range files {
		if testHookRename != nil {
			testHookRename(base + f.ext)
		}
		if err := os.Rename(tmps[i], base+f.ext); err != nil {
			removeAll(tmps[i:]...)
			return fail(err)
		}
		if err := FaultPoint("pack " + f.ext + " renamed"); err != nil {
			return "", err
		}
	}
	if err := syncDir(packDir); err != nil {
		return fail(err)
	}
	if err := FaultPoint("pack dir synced"); err != nil {
		return "", err
	}
	if err := r.addPack(base); err != nil {
		return fail(err)
	}
	return base, nil
}

// removeAll removes the named files, ignoring empty names and errors.
func removeAll(paths ...string) {
	for _, p := range paths {
		if p != "" {
			os.Remove(p)
		}
	}
}

// encodeIndex builds a version 2 pack index.
func encodeIndex(entries []packEntry, offsets []int64, packSum []byte) []byte {
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		return bytes.Compare(entries[order[a]].id[:], entries[order[b]].id[:]) < 0
	})
	var b bytes.Buffer
	b.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	var fan [256]uint32
	for _, e := range entries {
		fan[e.id[0]]++
	}
	var u [8]byte
	var total uint32
	for i := 0; i < 256; i++ {
		total += fan[i]
		binary.BigEndian.PutUint32(u[:4], total)
		b.Write(u[:4])
	}
	for _, i := range order {
		b.Write(entries[i].id[:])
	}
	for _, i := range order {
		binary.BigEndian.PutUint32(u[:4], entries[i].crc)
		b.Write(u[:4])
	}
	var large []int64
	for _, i := range order {
		off := offsets[i]
		if off < 0x80000000 {
			binary.BigEndian.PutUint32(u[:4], uint32(off))
		} else {
			binary.BigEndian.PutUint32(u[:4], 0x80000000|uint32(len(large)))
			large = append(large, off)
		}
		b.Write(u[:4])
	}
	for _, off := range large {
		binary.BigEndian.PutUint64(u[:], uint64(off))
		b.Write(u[:])
	}
	b.Write(packSum)
	s := sha1.Sum(b.Bytes())
	b.Write(s[:])
	return b.Bytes()
}

// writeTemp writes data to a new temporary file in dir and syncs it; it
// returns the file's path (removed again on error).
func writeTemp(dir, prefix string, data []byte) (string, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(dir, prefix+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// SyncDir makes renames and creations in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// SyncDir is exported for the ref layer, which renames lock files into place.
func SyncDir(dir string) error { return syncDir(dir) }
