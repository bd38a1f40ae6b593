package heads

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/bernstein/bernstein/gitstore"
)

// The heads one writer wrote in one repository live in one file,
// $BERNSTEIN_HOME/heads/<repository>/<writer>.heads, whatever the number
// of chains (a file per chain was 200,000 files at 100,000 tasks):
//
//	bernstein heads v2 <writer> <snapshot bytes, 20 digits> <CRC-32>\n
//	<snapshot: one line per chain, sorted by chain>
//	<appended lines, in the order they were written>
//
// Each line is "<chain> <position, 20 digits> <commit> <link> <CRC-32 of
// the line before it, 8 hex digits>\n", the chain being journal/<task>,
// ledger/<task>, spine/<writer> or audit/<writer> (as under
// refs/bernstein/, the task escaped). An appended line overrides what came
// before it for its chain; a position of -1 (written "forget") drops the
// chain's head. A write appends one line per chain it moved (O_APPEND,
// after the refs are durable, without a sync: a crash can cut it short,
// which its checksum tells, and which reads as no line: the chain keeps
// the head of its line before), so a post's cost does not grow with the
// file. When the appended part passes compactAt bytes (1 MiB, some 6,600
// lines), the writer that appended last rewrites the file: the appended
// part sorted and merged into the snapshot, whose lines are copied as they
// are, into a temporary file, synced, renamed over the file, the folder
// synced. The rewrite is a copy of what the file holds, once per 1 MiB of
// appends, so the amortised cost of a write stays constant (at 200,000
// chains: a 27 MB copy, some 100 ms, once per some 2,000 posts), and the
// appended part never outgrows 1 MiB, whatever the number of chains.
//
// A reader binary-searches the snapshot with preads and reads the appended
// part once (then only what was appended since), and finds a chain's last
// line there by searching its bytes for the chain's name, without decoding
// the lines of other chains: a process that reads a few heads (a CLI
// command) pays for a search of at most 1 MiB, not a decode of every line.
// One that reads many (past memAfter) decodes the appended part once into
// a map, and what is appended later as it reads it.

const (
	fileMagic = "bernstein heads v2"
	// forgetPos marks an appended line that drops a chain's head.
	forgetPos = -1
	// compactAt is the size of the appended part, in bytes, past which
	// the file is rewritten: about 8,000 lines of journal/<task>.
	compactAt = 1 << 20
)

// entry is one line: the head of chain (nil mark: forgotten).
type entry struct {
	chain string
	mark  *Mark
}

func encodeLine(chain string, m *Mark) []byte {
	var line string
	if m == nil {
		line = fmt.Sprintf("%s forget", chain)
	} else {
		line = fmt.Sprintf("%s %020d %s %s", chain, m.Pos, m.Commit, m.Link)
	}
	return fmt.Appendf(nil, "%s %08x\n", line, crc32.ChecksumIEEE([]byte(line)))
}

// decodeLine reads one line without its newline; anything else (a line
// cut short, a stray byte) is no line.
func decodeLine(line []byte) (entry, bool) {
	i := bytes.LastIndexByte(line, ' ')
	if i < 0 {
		return entry{}, false
	}
	text, sum := line[:i], line[i+1:]
	if want, err := strconv.ParseUint(string(sum), 16, 32); err != nil || len(sum) != 8 || uint32(want) != crc32.ChecksumIEEE(text) {
		return entry{}, false
	}
	f := strings.Fields(string(text))
	switch {
	case len(f) == 2 && f[1] == "forget":
		return entry{chain: f[0]}, true
	case len(f) != 4:
		return entry{}, false
	}
	pos, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || pos < 0 {
		return entry{}, false
	}
	id, err := gitstore.ParseOid(f[2])
	if err != nil || id.IsZero() {
		return entry{}, false
	}
	return entry{chain: f[0], mark: &Mark{Pos: pos, Commit: id, Link: f[3]}}, true
}

func header(writer string, snapshot int64) []byte {
	line := fmt.Sprintf("%s %s %020d", fileMagic, writer, snapshot)
	return fmt.Appendf(nil, "%s %08x\n", line, crc32.ChecksumIEEE([]byte(line)))
}

// readHeader reads the header line at the start of b: its length and the
// snapshot's.
func readHeader(b []byte, writer string) (int64, int64, bool) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return 0, 0, false
	}
	line := b[:nl]
	i := bytes.LastIndexByte(line, ' ')
	if i < 0 {
		return 0, 0, false
	}
	text, sum := line[:i], line[i+1:]
	if want, err := strconv.ParseUint(string(sum), 16, 32); err != nil || len(sum) != 8 || uint32(want) != crc32.ChecksumIEEE(text) {
		return 0, 0, false
	}
	f := strings.Fields(string(text))
	if len(f) != 5 || f[0]+" "+f[1]+" "+f[2] != fileMagic || f[3] != writer {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil || n < 0 {
		return 0, 0, false
	}
	return int64(nl + 1), n, true
}

// headsFile is one writer's heads file in one repository, as one process
// reads and appends to it.
type headsFile struct {
	path, writer string

	mu    sync.Mutex
	f     *os.File // open for reading; nil when the file does not exist
	ino   uint64
	start int64  // the snapshot's first byte
	end   int64  // the snapshot's end: the appended part starts here
	read  int64  // how far the appended part was read
	tail  []byte // the appended part's whole lines read so far (while appended is nil)
	// appended holds the appended part decoded, by chain (nil: not
	// decoded; tail is searched instead). Past memAfter gets, tail is
	// decoded once and what is appended later is decoded as it is read.
	appended map[string]*Mark
	gets     int
	reads    int // preads of the snapshot (tests count them)
	// searches counts the snapshot's searches since the file was opened;
	// past memAfter, index holds the whole snapshot, read once, and
	// answers the searches (the snapshot of an open file never changes: a
	// rewrite is a new file).
	searches int
	index    map[string]Mark
}

// memAfter is how many searches of one snapshot a process makes with
// preads before it reads the snapshot whole: a process that reads many
// heads (a server's scan of every task) pays for the snapshot once, not
// a binary search of preads per chain, and one that reads a few pays for
// those few.
const memAfter = 256

func newHeadsFile(path, writer string) *headsFile {
	return &headsFile{path: path, writer: writer}
}

// refresh makes the view of the file current: reopened when the file was
// replaced (a rewrite), and the lines appended since read.
func (h *headsFile) refresh() error {
	fi, err := os.Stat(h.path)
	if errors.Is(err, fs.ErrNotExist) {
		h.closeLocked()
		return nil
	}
	if err != nil {
		return err
	}
	if h.f == nil || inode(fi) != h.ino {
		h.closeLocked()
		f, err := os.Open(h.path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		head := make([]byte, 256)
		n, _ := f.ReadAt(head, 0)
		hl, snap, ok := readHeader(head[:n], h.writer)
		if !ok {
			// Not a heads file of this writer: as good as none.
			f.Close()
			return nil
		}
		h.f, h.ino, h.start, h.end = f, inode(st), hl, hl+snap
		h.read, h.tail, h.appended, h.gets = h.end, nil, nil, 0
		fi = st
	}
	if size := fi.Size(); size > h.read {
		b := make([]byte, size-h.read)
		n, err := h.f.ReadAt(b, h.read)
		if err != nil && err != io.EOF {
			return err
		}
		b = b[:n]
		// Whole lines only: a line being appended is read next time.
		last := bytes.LastIndexByte(b, '\n')
		if last < 0 {
			return nil
		}
		if h.appended != nil {
			decodeLines(b[:last+1], h.appended)
		} else if h.tail == nil {
			h.tail = b[:last+1]
		} else {
			h.tail = append(h.tail, b[:last+1]...)
		}
		h.read += int64(last + 1)
	}
	return nil
}

func (h *headsFile) closeLocked() {
	if h.f != nil {
		h.f.Close()
	}
	h.f, h.ino, h.tail, h.appended, h.gets = nil, 0, nil, nil, 0
	h.searches, h.index = 0, nil
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// lookup returns the head of chain, and whether the file exists. With
// refresh, or when the file is not open (none was found, or a rewrite
// closed it), the view of the file is made current first.
func (h *headsFile) lookup(chain string, refresh bool) (m Mark, ok, exists bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if refresh || h.f == nil {
		if err := h.refresh(); err != nil {
			return Mark{}, false, false
		}
	}
	if h.f == nil {
		return Mark{}, false, false
	}
	m, ok = h.getLocked(chain)
	return m, ok, true
}

func (h *headsFile) getLocked(chain string) (Mark, bool) {
	if h.gets++; h.gets > memAfter && h.appended == nil {
		h.appended = map[string]*Mark{}
		decodeLines(h.tail, h.appended)
		h.tail = nil
	}
	var m *Mark
	var ok bool
	if h.appended != nil {
		m, ok = h.appended[chain]
	} else {
		m, ok = lastLine(h.tail, chain)
	}
	if ok {
		if m == nil {
			return Mark{}, false
		}
		return *m, true
	}
	e, ok := h.search(chain)
	if !ok || e.mark == nil {
		return Mark{}, false
	}
	return *e.mark, true
}

// decodeLines decodes whole lines b into heads, a later line overriding
// an earlier one of its chain; a damaged line is passed over.
func decodeLines(b []byte, heads map[string]*Mark) {
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			nl = len(b)
		}
		if e, ok := decodeLine(b[:nl]); ok {
			heads[e.chain] = e.mark
		}
		b = b[min(nl+1, len(b)):]
	}
}

// lastLine finds in whole lines b the last line of chain that reads back
// whole, without decoding the others: what decodeLines would leave for
// chain (ok false: b has no line of it; a nil mark: forgotten).
func lastLine(b []byte, chain string) (*Mark, bool) {
	pat := []byte("\n" + chain + " ")
	var at []int // where lines of chain start
	if bytes.HasPrefix(b, pat[1:]) {
		at = append(at, 0)
	}
	for off := 0; ; {
		i := bytes.Index(b[off:], pat)
		if i < 0 {
			break
		}
		at = append(at, off+i+1)
		off += i + 1
	}
	for j := len(at) - 1; j >= 0; j-- {
		line := b[at[j]:]
		if nl := bytes.IndexByte(line, '\n'); nl >= 0 {
			line = line[:nl]
		}
		if e, ok := decodeLine(line); ok {
			return e.mark, true
		}
	}
	return nil, false
}

// search binary-searches the snapshot for chain with preads: each step
// reads the line that starts after the middle of the range.
func (h *headsFile) search(chain string) (entry, bool) {
	if h.searches++; h.searches > memAfter && h.index == nil {
		if all, err := h.snapshotLocked(); err == nil {
			h.index = all
		}
	}
	if h.index != nil {
		m, ok := h.index[chain]
		return entry{chain: chain, mark: &m}, ok
	}
	lo, hi := h.start, h.end // every line starting before lo sorts before chain; none at or after hi is it
	const window = 4096
	for hi-lo > window {
		mid := lo + (hi-lo)/2
		at, line, ok := h.lineAfter(mid, hi)
		if !ok {
			hi = mid
			continue
		}
		e, ok := decodeLine(line)
		if !ok {
			break // a damaged snapshot: scan what is left
		}
		switch c := strings.Compare(e.chain, chain); {
		case c == 0:
			return e, true
		case c < 0:
			lo = at + int64(len(line)) + 1
		default:
			hi = at
		}
	}
	// The rest in one read: the lines that start in [lo, hi).
	b := make([]byte, min(h.end-lo, hi-lo+1024))
	h.reads++
	n, err := h.f.ReadAt(b, lo)
	if err != nil && err != io.EOF {
		return entry{}, false
	}
	b = b[:n]
	for off := int64(0); off < int64(len(b)) && lo+off < hi; {
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			break
		}
		if e, ok := decodeLine(b[off : off+int64(nl)]); ok && e.chain == chain {
			return e, true
		}
		off += int64(nl) + 1
	}
	return entry{}, false
}

// lineAfter reads the first line that starts after byte off (and before
// limit), without its newline.
func (h *headsFile) lineAfter(off, limit int64) (int64, []byte, bool) {
	buf := make([]byte, 1024)
	for {
		h.reads++
		n, err := h.f.ReadAt(buf, off)
		if n == 0 {
			return 0, nil, false
		}
		b := buf[:n]
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			if err != nil {
				return 0, nil, false
			}
			off += int64(n)
			continue
		}
		at := off + int64(nl) + 1
		if at >= limit {
			return 0, nil, false
		}
		lb := make([]byte, 1024)
		h.reads++
		m, _ := h.f.ReadAt(lb, at)
		end := bytes.IndexByte(lb[:m], '\n')
		if end < 0 {
			return 0, nil, false
		}
		return at, lb[:end], true
	}
}

// all returns every head, by chain.
func (h *headsFile) all() (map[string]Mark, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.refresh(); err != nil || h.f == nil {
		return map[string]Mark{}, err
	}
	out, err := h.snapshotLocked()
	if err != nil {
		return nil, err
	}
	appended := h.appended
	if appended == nil {
		appended = map[string]*Mark{}
		decodeLines(h.tail, appended)
	}
	for c, m := range appended {
		if m == nil {
			delete(out, c)
		} else {
			out[c] = *m
		}
	}
	return out, nil
}

func (h *headsFile) snapshotLocked() (map[string]Mark, error) {
	out := map[string]Mark{}
	b := make([]byte, h.end-h.start)
	n, err := h.f.ReadAt(b, h.start)
	if err != nil && err != io.EOF {
		return nil, err
	}
	for _, line := range bytes.Split(b[:n], []byte("\n")) {
		if e, ok := decodeLine(line); ok && e.mark != nil {
			out[e.chain] = *e.mark
		}
	}
	return out, nil
}

// write appends the heads es (the caller holds the repository's writer
// lock; heads files are further serialized by a lock of their own, since
// copies of one repository share one), creating the file when there is
// none (with what migrate returns: heads kept before in files of their
// own), and rewrites it when the appended part has grown too long.
func (h *headsFile) write(es []entry, migrate func() (map[string]Mark, func(), error)) error {
	if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
		return err
	}
	unlock, err := lockFile(h.path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	f, err := os.OpenFile(h.path, os.O_RDWR|os.O_APPEND, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		start, done := map[string]Mark{}, func() {}
		if migrate != nil {
			if start, done, err = migrate(); err != nil {
				return err
			}
		}
		if err := h.rewrite(start); err != nil {
			return err
		}
		done()
		f, err = os.OpenFile(h.path, os.O_RDWR|os.O_APPEND, 0o600)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var b []byte
	if size := st.Size(); size > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, size-1); err == nil && last[0] != '\n' {
			b = append(b, '\n') // a line a crash cut short stays one bad line
		}
	}
	for _, e := range es {
		b = append(b, encodeLine(e.chain, e.mark)...)
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	return h.maybeCompact(f)
}

// maybeCompact rewrites the file when its appended part holds more than
// compactAt bytes.
func (h *headsFile) maybeCompact(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	head := make([]byte, 256)
	n, _ := f.ReadAt(head, 0)
	hl, snap, ok := readHeader(head[:n], h.writer)
	if !ok {
		return fmt.Errorf("%s: not a heads file of writer %s", h.path, h.writer)
	}
	if st.Size()-hl-snap <= compactAt {
		return nil
	}
	h.mu.Lock()
	h.closeLocked()
	h.mu.Unlock()
	return h.compact(f, hl, snap, st.Size())
}

// compact rewrites the file f (header hl bytes, snapshot snap bytes, size
// bytes in all) as one snapshot: the appended part, decoded and sorted,
// merged into the snapshot, whose lines are copied as they are (those
// that read back whole, in order). It costs a copy of the file, not a
// decode of every line.
func (h *headsFile) compact(f *os.File, hl, snap, size int64) error {
	b := make([]byte, size-hl-snap)
	n, err := f.ReadAt(b, hl+snap)
	if err != nil && err != io.EOF {
		return err
	}
	if last := bytes.LastIndexByte(b[:n], '\n'); last >= 0 {
		b = b[:last+1]
	} else {
		b = nil
	}
	appended := map[string]*Mark{}
	decodeLines(b, appended)
	chains := make([]string, 0, len(appended))
	for c := range appended {
		chains = append(chains, c)
	}
	sort.Strings(chains)
	r := bufio.NewReaderSize(io.NewSectionReader(f, hl, snap), 1<<16)
	return h.writeSnapshot(func(w *bufio.Writer) error {
		j, prev := 0, ""
		emit := func(upTo string, all bool) error {
			for ; j < len(chains) && (all || chains[j] < upTo); j++ {
				if m := appended[chains[j]]; m != nil {
					if _, err := w.Write(encodeLine(chains[j], m)); err != nil {
						return err
					}
				}
			}
			return nil
		}
		for {
			line, err := r.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				// No line is this long: a damaged snapshot. Skip to
				// the next line.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = r.ReadSlice('\n')
				}
				continue
			}
			if err == io.EOF {
				break // a last line without its newline is no line
			}
			if err != nil {
				return err
			}
			c, ok := lineChain(line[:len(line)-1])
			if !ok || c <= prev {
				continue // damaged, or out of order: dropped
			}
			prev = c
			if err := emit(c, false); err != nil {
				return err
			}
			if j < len(chains) && chains[j] == c {
				continue // overridden by what was appended: emitted next
			}
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		return emit("", true)
	})
}

// lineChain returns the chain of a line (without its newline) whose
// checksum holds.
func lineChain(line []byte) (string, bool) {
	i := bytes.LastIndexByte(line, ' ')
	sp := bytes.IndexByte(line, ' ')
	if i < 0 || sp == i || len(line)-i-1 != 8 {
		return "", false
	}
	want, err := strconv.ParseUint(string(line[i+1:]), 16, 32)
	if err != nil || uint32(want) != crc32.ChecksumIEEE(line[:i]) {
		return "", false
	}
	return string(line[:sp]), true
}

// rewrite replaces the file with a snapshot of heads.
func (h *headsFile) rewrite(heads map[string]Mark) error {
	chains := make([]string, 0, len(heads))
	for c := range heads {
		chains = append(chains, c)
	}
	sort.Strings(chains)
	return h.writeSnapshot(func(w *bufio.Writer) error {
		for _, c := range chains {
			m := heads[c]
			if _, err := w.Write(encodeLine(c, &m)); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeSnapshot replaces the file with a header and the snapshot body
// writes: a temporary file, synced, renamed over it, the folder synced.
func (h *headsFile) writeSnapshot(body func(*bufio.Writer) error) error {
	dir := filepath.Dir(h.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(h.path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	fail := func(err error) error {
		tmp.Close()
		return err
	}
	// The header's length does not depend on the snapshot's: it is
	// written again once the snapshot's length is known.
	hdr := header(h.writer, 0)
	w := bufio.NewWriterSize(tmp, 1<<16)
	if _, err := w.Write(hdr); err != nil {
		return fail(err)
	}
	if err := body(w); err != nil {
		return fail(err)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	end, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return fail(err)
	}
	if _, err := tmp.WriteAt(header(h.writer, end-int64(len(hdr))), 0); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), h.path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockFile takes an exclusive flock on path (created when missing).
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
