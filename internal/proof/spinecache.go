package proof

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/bernstein/bernstein/internal/core"
)

// spineCache keeps each writer's spine index (verify/spinecache.go) under
// <git dir>/bernstein/cache/spine/, one file a writer: a line with an HMAC
// under a key only the local writer holds and the header's length, the
// header, then the body. The HMAC covers the header, and the header the
// hash of every block of the body (verify/spinekept.go checks each block it
// reads against it). A file whose MAC does not check, or a process without
// the writer's key, reads as nothing kept: the spines are walked. Deleting
// the folder changes no output.
type spineCache struct{ c *core.Repo }

// spineCacheDomain separates these MACs from the audit mirror's and the
// fold cache's, made with the same writer key.
const spineCacheDomain = "bernstein spine index cache v2\n"

// spineHeaderMax bounds the header a first line may announce.
const spineHeaderMax = 64 << 20

// spineFirstLine bounds the first line (a MAC and a length).
const spineFirstLine = 256

func (s spineCache) path(writer string) string {
	return filepath.Join(s.c.GitDir, "bernstein", "cache", "spine", hex.EncodeToString([]byte(writer))+".v2.idx")
}

// tailPath is where the entries kept after the index's head are: a small
// file read and written whole (verify/spinekept.go).
func (s spineCache) tailPath(writer string) string {
	return filepath.Join(s.c.GitDir, "bernstein", "cache", "spine", hex.EncodeToString([]byte(writer))+".v2.tail")
}

// spineTailDomain separates the tail's MACs from the index's.
const spineTailDomain = "bernstein spine index tail v2\n"

// spineTailMaxBytes bounds the tail file a reader reads.
const spineTailMaxBytes = 64 << 20

// LoadTail returns the tail kept for writer when its MAC checks, or nil.
func (s spineCache) LoadTail(writer string) []byte {
	b, err := os.ReadFile(s.tailPath(writer))
	if err != nil || len(b) > spineTailMaxBytes {
		return nil
	}
	mac, content, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil
	}
	id, err := s.c.Identity()
	if err != nil || !id.CheckMAC(spineMACInput(spineTailDomain, writer, content), string(mac)) {
		return nil
	}
	return content
}

// SaveTail keeps content as writer's tail; failures are ignored.
func (s spineCache) SaveTail(writer string, content []byte) {
	id, err := s.c.Identity()
	if err != nil {
		return
	}
	mac := id.MAC(spineMACInput(spineTailDomain, writer, content))
	s.write(s.tailPath(writer), append([]byte(mac+"\n"), content...))
}

// write replaces path with data by a rename.
func (s spineCache) write(path string, data []byte) bool {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false
	}
	var r [6]byte
	rand.Read(r[:])
	tmp := path + ".tmp-" + hex.EncodeToString(r[:])
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return false
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false
	}
	return true
}

// lockPath is the file a reader flocks while it rewrites writer's index.
func (s spineCache) lockPath(writer string) string {
	return filepath.Join(s.c.GitDir, "bernstein", "cache", "spine", hex.EncodeToString([]byte(writer))+".v2.lock")
}

// Rewrite takes the right to replace writer's index: an exclusive flock on
// its lock file, not waited for (a reader refused keeps the index it has).
// Each call opens the file afresh, so two readers in one process exclude
// each other as two processes do. It returns the header kept now.
func (s spineCache) Rewrite(writer string) (func(), []byte, bool) {
	p := s.lockPath(writer)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, nil, false
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, nil, false
	}
	header, body := s.Load(writer)
	if c, ok := body.(io.Closer); ok {
		c.Close()
	}
	return func() { f.Close() }, header, true
}

// walkTurns holds, by kept index path, the turn of this process's readers
// at walking a writer's spine whole (WalkTurn).
var walkTurns sync.Map // string -> *sync.Mutex

// WalkTurn waits for this process's turn to walk writer's spine whole, as
// verify.SpineCache says: a mutex by kept index path, so that every Store
// of the process on this repository shares it. Without the writer's key
// nothing is kept, and the turn is given at once.
func (s spineCache) WalkTurn(writer string) func() {
	if _, err := s.c.Identity(); err != nil {
		return func() {}
	}
	m, _ := walkTurns.LoadOrStore(s.path(writer), &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// spineMACInput is what a kept index's header (domain spineCacheDomain) or
// its tail (spineTailDomain) is MAC'd as.
func spineMACInput(domain, writer string, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString(domain)
	b.WriteString(writer)
	b.WriteString("\n--\n")
	b.Write(data)
	return b.Bytes()
}

// Load returns the header kept for writer when its MAC checks, and the body
// to read in place. The file stays open while the body is read (it is
// replaced by a rename, never rewritten in place).
func (s spineCache) Load(writer string) ([]byte, io.ReaderAt) {
	f, err := os.Open(s.path(writer))
	if err != nil {
		return nil, nil
	}
	header, body := s.load(f, writer)
	if header == nil {
		f.Close()
	}
	return header, body
}

func (s spineCache) load(f *os.File, writer string) ([]byte, io.ReaderAt) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil
	}
	first := make([]byte, min(spineFirstLine, st.Size()))
	if _, err := f.ReadAt(first, 0); err != nil {
		return nil, nil
	}
	line, _, ok := bytes.Cut(first, []byte("\n"))
	if !ok {
		return nil, nil
	}
	mac, size, ok := bytes.Cut(line, []byte(" "))
	n, err := strconv.ParseInt(string(size), 10, 64)
	start := int64(len(line) + 1)
	if !ok || err != nil || n <= 0 || n > spineHeaderMax || start+n > st.Size() {
		return nil, nil
	}
	header := make([]byte, n)
	if _, err := f.ReadAt(header, start); err != nil {
		return nil, nil
	}
	id, err := s.c.Identity()
	if err != nil || !id.CheckMAC(spineMACInput(spineCacheDomain, writer, header), string(mac)) {
		return nil, nil
	}
	return header, keptBody{io.NewSectionReader(f, start+n, st.Size()-start-n), f}
}

// keptBody is the body of a kept index, read in place until it is closed
// (once read whole); otherwise the file is closed when it is collected.
type keptBody struct {
	*io.SectionReader
	f *os.File
}

func (b keptBody) Close() error { return b.f.Close() }

// Save keeps header and body as writer's index; failures are ignored (a
// read-only repository, or a process without the writer's key, keeps
// nothing).
func (s spineCache) Save(writer string, header, body []byte) {
	id, err := s.c.Identity()
	if err != nil {
		return
	}
	mac := id.MAC(spineMACInput(spineCacheDomain, writer, header))
	data := make([]byte, 0, len(mac)+24+len(header)+len(body))
	data = append(data, mac+" "+strconv.Itoa(len(header))+"\n"...)
	data = append(append(data, header...), body...)
	if s.write(s.path(writer), data) {
		// The tail was bound to the index replaced: it is read no more.
		os.Remove(s.tailPath(writer))
	}
}
