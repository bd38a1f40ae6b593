package gitstore

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/adler32"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

var zlibWriters = sync.Pool{New: func() any {
	w, _ := zlib.NewWriterLevel(nil, zlib.BestSpeed)
	return w
}}

// compressAbove is the size from which a blob is deflated. Commits, trees
// and small blobs are stored (zlib without compression): every chain walk
// and verification reads them, and a stored stream inflates about ten times
// faster than a deflated one, for a few hundred bytes more on disk.
const compressAbove = 4096

// writeObjectEntry writes o to w as a pack entry: its header, then its data
// as a zlib stream.
func writeObjectEntry(w io.Writer, o Object) error {
	if err := writeEntryHeader(w, int(o.Type), int64(len(o.Data))); err != nil {
		return err
	}
	if o.Type == TypeBlob && len(o.Data) >= compressAbove {
		zw := zlibWriters.Get().(*zlib.Writer)
		defer zlibWriters.Put(zw)
		zw.Reset(w)
		if _, err := zw.Write(o.Data); err != nil {
			return err
		}
		return zw.Close()
	}
	return writeStoredZlib(w, o.Data)
}

// writeStoredZlib writes data as a zlib stream of stored deflate blocks.
func writeStoredZlib(w io.Writer, data []byte) error {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], adler32.Checksum(data))
	if _, err := w.Write([]byte{0x78, 0x01}); err != nil {
		return err
	}
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), 0xffff)
		final := byte(0)
		if n == len(data) {
			final = 1
		}
		if _, err := w.Write([]byte{final, byte(n), byte(n >> 8), ^byte(n), ^byte(n >> 8)}); err != nil {
			return err
		}
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	_, err := w.Write(sum[:])
	return err
}

func writeEntryHeader(w io.Writer, typ int, size int64) error {
	var b [10]byte
	n := 0
	c := byte(typ<<4) | byte(size&15)
	size >>= 4
	for size > 0 {
		b[n] = c | 0x80
		n++
		c = byte(size & 0x7f)
		size >>= 7
	}
	b[n] = c
	_, err := w.Write(b[:n+1])
	return err
}

// Temporary files of a writer carry bernstein's own prefixes, not git's
// tmp_pack_ and tmp_idx_, so that CleanStale can tell what a killed writer
// left from what a live git is writing. They still begin with "tmp_", which
// `git prune` removes once they are old (at once with --prune=now).
const (
	tmpPrefix = "tmp_bernstein_"
	// tempDirName is where pack, index and keep files are written before
	// they are renamed into objects/pack. It is outside the pack directory
	// because `git prune` (run by `git gc --prune=now`) deletes every
	// tmp_* file there at once, a live writer's included; git never looks
	// into this directory.
	tempDirName   = "bernstein-tmp"
	tmpPackPrefix = tmpPrefix + "pack_"
	tmpIdxPrefix  = tmpPrefix + "idx_"
	// A compaction's temporary files carry their own prefix: a compaction
	// runs beside writes, under its own lock, so the writers' CleanStale
	// leaves its files alone; CleanMergeTemps, under that lock, does not.
	tmpMergePrefix     = tmpPrefix + "merge_"
	tmpMergePackPrefix = tmpMergePrefix + "pack_"
	tmpMergeIdxPrefix  = tmpMergePrefix + "idx_"
	tmpKeepPrefix      = tmpPrefix + "keep_"
)

// KeepPrefix begins the content of every .keep file bernstein writes;
// CleanStale removes only keep files that begin with it.
const KeepPrefix = "bernstein "

// faultPoint runs the repository's FaultHook at step.
func (r *Repo) faultPoint(step string) error {
	if r.FaultHook == nil {
		return nil
	}
	return r.FaultHook(step)
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
	st, err := r.NewPackStage()
	if err != nil {
		return "", err
	}
	if keepMsg != "" {
		if err := st.Keep(keepMsg); err != nil {
			return "", err
		}
	}
	err = st.Write(objects)
	if err == nil && keepMsg != "" {
		err = st.SyncKeep()
	}
	if err != nil {
		if !errors.Is(err, errFault) {
			st.Abort()
		}
		return "", err
	}
	base, err := st.Install()
	if err != nil {
		return "", err
	}
	return base, st.Publish()
}

// A PackStage is a pack on its way into the pack directory, written in the
// order that keeps every instant safe. Keep writes the keep file's content
// (to a temporary file, outside the pack directory), so that a caller can
// make what the keep says visible before it does anything the keep must
// account for; Write writes the pack and its index to temporary files and
// syncs them, and may run beside Keep and SyncKeep (they touch nothing of
// each other's); Install renames them into place, the keep first and the
// index last, and syncs the directory; Publish maps the pack for this Repo's
// reads. Abort, once nothing of the stage runs any more, removes what it
// left.
type PackStage struct {
	r *Repo

	// Keep's and SyncKeep's.
	keepTmp    string   // the keep's temporary file ("" for an unkept pack)
	keepF      *os.File // open until SyncKeep
	keepSynced bool

	// Write's.
	pw     *packWriter
	idxTmp string
	base   string // set by Write
	state  int    // stageOpen, stageWritten, stageInstalled, stageDone
}

const (
	stageOpen = iota
	stageWritten
	stageInstalled
	stageDone
)

// errFault marks an error a FaultHook returned: the stage stops where it is,
// as a killed process would, and nothing is cleaned up.
var errFault = errors.New("stopped by a fault hook")

// NewPackStage begins a pack; nothing is written yet.
func (r *Repo) NewPackStage() (*PackStage, error) {
	for _, d := range []string{filepath.Join(r.dir, "pack"), r.tempDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return &PackStage{r: r}, nil
}

// Keep writes keepMsg (which must begin with KeepPrefix) to the keep's
// temporary file in the directory Leftovers reads (StagedKeeps), not yet
// synced. Nothing is in the pack directory yet.
func (st *PackStage) Keep(keepMsg string) error {
	if !strings.HasPrefix(keepMsg, KeepPrefix) {
		return fmt.Errorf("keep message %q does not begin with %q", keepMsg, KeepPrefix)
	}
	if st.keepTmp != "" {
		return fmt.Errorf("pack stage kept twice")
	}
	f, tmp, err := createTemp(st.r.tempDir(), tmpKeepPrefix)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, keepMsg+"\n"); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	st.keepF, st.keepTmp = f, tmp
	return nil
}

// SyncKeep syncs the keep's temporary file.
func (st *PackStage) SyncKeep() error {
	if st.keepF == nil {
		return fmt.Errorf("pack stage has no keep to sync")
	}
	err := syncClose(st.keepF, st.keepTmp)
	st.keepF = nil
	st.keepSynced = err == nil
	return err
}

// Write writes objects (at least one; duplicates are written once) as the
// stage's pack and index, in temporary files, and syncs them. On error
// nothing of the pack is left (the keep is the caller's to Abort).
func (st *PackStage) Write(objects []Object) error {
	if st.state != stageOpen {
		return fmt.Errorf("pack stage written twice")
	}
	if len(objects) == 0 {
		return fmt.Errorf("a pack of no objects")
	}
	seen := make(map[Oid]bool, len(objects))
	uniq := make([]Object, 0, len(objects))
	for _, o := range objects {
		if !seen[o.ID] {
			seen[o.ID] = true
			uniq = append(uniq, o)
		}
	}
	pw, err := st.r.createPack(len(uniq), false)
	if err != nil {
		return err
	}
	st.pw = pw
	for _, o := range uniq {
		if err := pw.object(o); err != nil {
			st.abortPack()
			return err
		}
	}
	return st.finish()
}

// abortPack removes the stage's pack and index temporary files.
func (st *PackStage) abortPack() {
	if st.pw != nil && st.pw.f != nil {
		st.pw.f.Close()
		st.pw.f = nil
	}
	if st.pw != nil {
		removeAll(st.pw.tmp, st.idxTmp)
	}
	st.idxTmp = ""
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

// tempDir is the directory of this repository's temporary pack files.
func (r *Repo) tempDir() string { return filepath.Join(r.dir, tempDirName) }

// CleanStale removes what a killed bernstein writer left: its temporary
// files (in the temporary directory, and under the names earlier versions
// used in the pack directory) and its keep files (those whose content begins
// with KeepPrefix). git's temporary files and keep files, keep files of any
// other content, and a compaction's temporary files (CleanMergeTemps) are
// left alone. The caller holds the cross-process writer lock, so no live
// bernstein writer owns any of them. It returns the paths removed.
func (r *Repo) CleanStale() ([]string, error) {
	var removed []string
	var errs []error
	if ents, err := os.ReadDir(r.tempDir()); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasPrefix(e.Name(), tmpMergePrefix) {
				continue
			}
			path := filepath.Join(r.tempDir(), e.Name())
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			} else if err == nil {
				removed = append(removed, path)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	packDir := filepath.Join(r.dir, "pack")
	ents, err := os.ReadDir(packDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return removed, errors.Join(errs...)
		}
		return removed, errors.Join(append(errs, err)...)
	}
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

// Leftovers is what a scan of the pack and temporary directories finds that
// a finished write does not leave: keep files, temporary files, and among
// them the keep files of stages never installed.
type Leftovers struct {
	Keeps       []string // .keep files in the pack directory, anyone's
	StagedKeeps []string // temporary keep files of stages (PackStage.Keep) never installed
	Temps       int      // other temporary files of bernstein's writers
	MergeTemps  int      // temporary files of compactions (perhaps one running now)
}

// Empty reports whether the scan found nothing a writer must clear: a
// compaction's files are not a writer's to clear (see CleanMergeTemps).
func (l Leftovers) Empty() bool {
	return len(l.Keeps) == 0 && len(l.StagedKeeps) == 0 && l.Temps == 0
}

// Leftovers lists, with one read of each directory, what killed writers may
// have left. Under the cross-process writer lock, a staged keep is a killed
// writer's: it says what the writer was about to do, and so which ref
// locks it may have left.
func (r *Repo) Leftovers() (Leftovers, error) {
	var l Leftovers
	ents, err := os.ReadDir(r.tempDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l, err
	}
	for _, e := range ents {
		switch n := e.Name(); {
		case strings.HasPrefix(n, tmpKeepPrefix):
			l.StagedKeeps = append(l.StagedKeeps, filepath.Join(r.tempDir(), n))
		case strings.HasPrefix(n, tmpMergePrefix):
			l.MergeTemps++
		case strings.HasPrefix(n, tmpPrefix):
			l.Temps++
		}
	}
	ents, err = os.ReadDir(filepath.Join(r.dir, "pack"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l, err
	}
	for _, e := range ents {
		switch n := e.Name(); {
		case strings.HasSuffix(n, ".keep"):
			l.Keeps = append(l.Keeps, filepath.Join(r.dir, "pack", n))
		case strings.HasPrefix(n, tmpPrefix):
			l.Temps++
		}
	}
	return l, nil
}

// CleanMergeTemps removes the temporary files of compactions that were
// killed. The caller holds the cross-process compaction lock, so no live
// compaction owns any of them.
func (r *Repo) CleanMergeTemps() error {
	ents, err := os.ReadDir(r.tempDir())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpMergePrefix) {
			if err := os.Remove(filepath.Join(r.tempDir(), e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
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

// packWriter streams a pack into a temporary file of the pack directory:
// the header, which announces the object count, then the entries in the
// order given, each recorded (id, offset, CRC-32) for the index as it is
// written, while a SHA-1 of the pack runs alongside. finishPack adds the
// trailer and the index. Whatever the pack's size, a packWriter holds a
// write buffer and 32 bytes per object, never the pack.
type packWriter struct {
	dir   string // the pack directory
	tmps  string // the directory of the temporary files
	tmp   string // the temporary .pack
	f     *os.File
	bw    *bufio.Writer
	sum   hash.Hash
	off   int64  // bytes written so far
	crc   uint32 // CRC-32 of the entry being written
	count int    // objects the header announces
	ents  []idxEntry
	err   error // the first write error: the pack is then abandoned
	merge bool  // a compaction's
}

// idxEntry is what the index records of one entry.
type idxEntry struct {
	id  Oid
	crc uint32
	off int64
}

// createPack starts a pack of count objects in a new temporary file (a
// compaction's, with merge).
func (r *Repo) createPack(count int, merge bool) (*packWriter, error) {
	if count < 0 || count > math.MaxUint32 {
		return nil, fmt.Errorf("pack of %d objects", count)
	}
	dir, tmps := filepath.Join(r.dir, "pack"), r.tempDir()
	for _, d := range []string{dir, tmps} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	prefix := tmpPackPrefix
	if merge {
		prefix = tmpMergePackPrefix
	}
	f, tmp, err := createTemp(tmps, prefix)
	if err != nil {
		return nil, err
	}
	pw := &packWriter{dir: dir, tmps: tmps, tmp: tmp, f: f, bw: bufio.NewWriterSize(f, 64<<10), sum: sha1.New(),
		count: count, ents: make([]idxEntry, 0, count), merge: merge}
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(count))
	if _, err := pw.Write(hdr[:]); err != nil {
		pw.abort()
		return nil, err
	}
	return pw, nil
}

// Write appends b to the pack.
func (pw *packWriter) Write(b []byte) (int, error) {
	if pw.err != nil {
		return 0, pw.err
	}
	n, err := pw.bw.Write(b)
	pw.sum.Write(b[:n])
	pw.crc = crc32.Update(pw.crc, crc32.IEEETable, b[:n])
	pw.off += int64(n)
	if err != nil {
		pw.err = fmt.Errorf("write %s: %w", pw.tmp, err)
	}
	return n, pw.err
}

// begin starts the entry of id at the current offset.
func (pw *packWriter) begin(id Oid) error {
	if pw.err != nil {
		return pw.err
	}
	if len(pw.ents) == pw.count {
		return fmt.Errorf("pack announced %d objects, given more", pw.count)
	}
	pw.ents = append(pw.ents, idxEntry{id: id, off: pw.off})
	pw.crc = 0
	return nil
}

// object writes o as a full entry.
func (pw *packWriter) object(o Object) error {
	if err := pw.begin(o.ID); err != nil {
		return err
	}
	if err := writeObjectEntry(pw, o); err != nil {
		return err
	}
	pw.ents[len(pw.ents)-1].crc = pw.crc
	return nil
}

// copyEntry copies the n bytes of the entry of id from src, byte for byte,
// through buf. crc is the CRC-32 the source's index records for them: bytes
// that do not match it are not copied into a new pack.
func (pw *packWriter) copyEntry(id Oid, src io.Reader, n int64, crc uint32, buf []byte) error {
	if err := pw.begin(id); err != nil {
		return err
	}
	m, err := io.CopyBuffer(pw, io.LimitReader(src, n), buf)
	if err == nil && m != n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	if pw.crc != crc {
		return fmt.Errorf("%w: %s: its entry does not match the CRC-32 of its index", ErrCorrupt, id)
	}
	pw.ents[len(pw.ents)-1].crc = crc
	return nil
}

// abort closes and removes the temporary pack.
func (pw *packWriter) abort() {
	pw.f.Close()
	os.Remove(pw.tmp)
}

// finishPack completes the unkept pack pw wrote (a compaction's), puts it
// in place and maps it; it returns the pack's base path. On error nothing of
// the pack is left.
func (r *Repo) finishPack(pw *packWriter) (string, error) {
	st := &PackStage{r: r, pw: pw}
	if err := st.finish(); err != nil {
		if !errors.Is(err, errFault) {
			st.abortPack()
		}
		return "", err
	}
	base, err := st.Install()
	if err != nil {
		return "", err
	}
	return base, st.Publish()
}

// finish completes the stage's pack with its trailer, writes its index, and
// syncs the pack and the index side by side (the disk takes the flushes
// together): the pack, already written, while the index is written. On
// error the caller removes the files (abortPack).
func (st *PackStage) finish() error {
	pw := st.pw
	if pw.err == nil && len(pw.ents) != pw.count {
		pw.err = fmt.Errorf("pack announced %d objects, given %d", pw.count, len(pw.ents))
	}
	sum := pw.sum.Sum(nil)
	if pw.err == nil {
		if _, err := pw.bw.Write(sum); err != nil {
			pw.err = err
		} else if err := pw.bw.Flush(); err != nil {
			pw.err = fmt.Errorf("write %s: %w", pw.tmp, err)
		}
	}
	if pw.err != nil {
		st.abortPack()
		return pw.err
	}
	ents := pw.ents
	slices.SortFunc(ents, func(a, b idxEntry) int { return bytes.Compare(a.id[:], b.id[:]) })
	st.base = filepath.Join(pw.dir, "pack-"+hex.EncodeToString(sum))

	var wg sync.WaitGroup
	var packErr error
	wg.Go(func() { packErr = syncClose(pw.f, pw.tmp) })
	idxPrefix := tmpIdxPrefix
	if pw.merge {
		idxPrefix = tmpMergeIdxPrefix
	}
	idxTmp, idxErr := writeTemp(pw.tmps, idxPrefix, func(w io.Writer) error { return writeIndex(w, ents, sum) })
	wg.Wait()
	pw.f, st.idxTmp = nil, idxTmp
	if err := errors.Join(packErr, idxErr); err != nil {
		st.abortPack()
		return err
	}
	st.state = stageWritten
	if err := st.r.faultPoint("pack temps synced"); err != nil {
		return fmt.Errorf("%w: %w", errFault, err)
	}
	return nil
}

// Base is the path the pack will have in the pack directory, without its
// extension; it is known once Write returned.
func (st *PackStage) Base() string { return st.base }

// Install renames the stage's files into the pack directory in the order
// that keeps every instant safe: the keep first, so that the pack is never
// visible unprotected; the pack before its index, which is what makes it
// visible. Then it syncs the directory. It returns the pack's base path. A
// failure leaves no keep: the caller moves no ref, and the objects are
// git's to collect.
func (st *PackStage) Install() (string, error) {
	if st.state != stageWritten || st.keepTmp != "" && !st.keepSynced {
		return "", fmt.Errorf("pack stage installed before it was written and synced")
	}
	type file struct{ tmp, ext string }
	files := []file{{st.pw.tmp, ".pack"}, {st.idxTmp, ".idx"}}
	if st.keepTmp != "" {
		files = append([]file{{st.keepTmp, ".keep"}}, files...)
	}
	base := st.base
	fail := func(err error) (string, error) {
		if st.keepTmp != "" {
			os.Remove(base + ".keep")
		}
		st.state = stageDone
		return "", err
	}
	for i, f := range files {
		if st.r.testHookRename != nil {
			st.r.testHookRename(base + f.ext)
		}
		if err := os.Rename(f.tmp, base+f.ext); err != nil {
			for _, g := range files[i:] {
				os.Remove(g.tmp)
			}
			return fail(err)
		}
		if err := st.r.faultPoint("pack " + f.ext + " renamed"); err != nil {
			return "", fmt.Errorf("%w: %w", errFault, err)
		}
	}
	st.state = stageInstalled
	if err := syncDir(filepath.Dir(base)); err != nil {
		return fail(err)
	}
	if err := st.r.faultPoint("pack dir synced"); err != nil {
		return "", fmt.Errorf("%w: %w", errFault, err)
	}
	return base, nil
}

// Publish maps the installed pack, so that this Repo reads its objects
// without a rescan. It does not wait for a compaction that holds the pack
// list: the pack is then left to the next rescan, which a read of one of
// its objects makes.
func (st *PackStage) Publish() error {
	if st.state != stageInstalled {
		return fmt.Errorf("pack stage published before it was installed")
	}
	st.state = stageDone
	r := st.r
	p, err := openPack(st.base)
	if err != nil {
		return err
	}
	if !r.mu.TryLock() {
		p.close()
		return nil
	}
	defer r.mu.Unlock()
	if r.known[st.base] {
		p.close()
		return nil
	}
	r.known[st.base] = true
	r.packs = append([]*packIndex{p}, r.packs...)
	r.gen++
	return nil
}

// Abort removes what the stage left: its temporary files, or once it is
// installed, its keep file (the pack stays, for git's gc to collect).
func (st *PackStage) Abort() {
	if st == nil {
		return
	}
	switch st.state {
	case stageOpen, stageWritten:
		if st.keepF != nil {
			st.keepF.Close()
			st.keepF = nil
		}
		st.abortPack()
		removeAll(st.keepTmp)
	case stageInstalled:
		if st.keepTmp != "" {
			os.Remove(st.base + ".keep")
		}
	}
	st.state = stageDone
}

// removeAll removes the named files, ignoring empty names and errors.
func removeAll(paths ...string) {
	for _, p := range paths {
		if p != "" {
			os.Remove(p)
		}
	}
}

// writeIndex writes the version 2 index of a pack whose entries are ents,
// sorted by id, and whose trailer is packSum.
func writeIndex(w io.Writer, ents []idxEntry, packSum []byte) error {
	h := sha1.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	bw.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	var u [8]byte
	k := 0
	for b := 0; b < 256; b++ {
		for k < len(ents) && int(ents[k].id[0]) == b {
			k++
		}
		binary.BigEndian.PutUint32(u[:4], uint32(k))
		bw.Write(u[:4])
	}
	for i, e := range ents {
		if i > 0 && e.id == ents[i-1].id {
			return fmt.Errorf("object %s twice in one pack", e.id)
		}
		bw.Write(e.id[:])
	}
	for _, e := range ents {
		binary.BigEndian.PutUint32(u[:4], e.crc)
		bw.Write(u[:4])
	}
	// Offsets from 2 GiB on go to a table of 8-byte offsets, in id order.
	large := uint32(0)
	for _, e := range ents {
		if e.off < 0x80000000 {
			binary.BigEndian.PutUint32(u[:4], uint32(e.off))
		} else {
			binary.BigEndian.PutUint32(u[:4], 0x80000000|large)
			large++
		}
		bw.Write(u[:4])
	}
	for _, e := range ents {
		if e.off >= 0x80000000 {
			binary.BigEndian.PutUint64(u[:], uint64(e.off))
			bw.Write(u[:])
		}
	}
	bw.Write(packSum)
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

// createTemp creates a new temporary file in dir, named prefix and random
// hex digits.
func createTemp(dir, prefix string) (*os.File, string, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(dir, prefix+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, "", err
	}
	return f, tmp, nil
}

// writeTemp writes a new temporary file in dir with write and syncs it; it
// returns the file's path (removed again on error).
func writeTemp(dir, prefix string, write func(io.Writer) error) (string, error) {
	f, tmp, err := createTemp(dir, prefix)
	if err != nil {
		return "", err
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := syncClose(f, tmp); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// syncClose syncs and closes f, the file at path.
func syncClose(f *os.File, path string) error {
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
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
