package heads

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

func mark(i int) Mark {
	return Mark{Pos: int64(i), Commit: gitstore.HashObject(gitstore.TypeBlob, []byte(fmt.Sprint(i))), Link: fmt.Sprintf("sha256:%064x", i)}
}

// A heads file line is trusted only when it reads back exactly as written:
// one cut short by a crash, or with any byte changed, is no line.
func TestHeadsLineReadsOnlyWhole(t *testing.T) {
	m := mark(5)
	b := encodeLine("journal/T-1", &m)
	// Written by hand: the chain, the position in 20 digits, the commit,
	// the link, a CRC-32 of what comes before it in 8 hex digits.
	want := "journal/T-1 00000000000000000005 " + m.Commit.String() + " " + m.Link + " "
	if string(b[:len(want)]) != want || len(b) != len(want)+9 || b[len(b)-1] != '\n' {
		t.Fatalf("encoded line %q", b)
	}
	line := b[:len(b)-1]
	if e, ok := decodeLine(line); !ok || e.chain != "journal/T-1" || *e.mark != m {
		t.Fatalf("decode: %+v %v", e, ok)
	}
	for n := 0; n < len(line); n++ {
		if _, ok := decodeLine(line[:n]); ok {
			t.Fatalf("a line cut to %d bytes reads as a line", n)
		}
	}
	for i := range line {
		c := append([]byte(nil), line...)
		c[i] ^= 0x01
		if e, ok := decodeLine(c); ok {
			t.Fatalf("a line with byte %d changed reads as %+v", i, e)
		}
	}
	if e, ok := decodeLine(encodeLine("ledger/T-2", nil)[:len(encodeLine("ledger/T-2", nil))-1]); !ok || e.mark != nil || e.chain != "ledger/T-2" {
		t.Fatalf("forget line: %+v %v", e, ok)
	}
}

// The file's snapshot is found by binary search with a few preads, what
// was appended overrides it, a forgotten chain has no head, and the file
// is rewritten (compacted) once its appended part passes compactAt bytes,
// with every head kept.
func TestHeadsFileSnapshotAppendCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.heads")
	h := newHeadsFile(path, "w")
	const n = 20000
	snap := map[string]Mark{}
	for i := 0; i < n; i++ {
		snap[fmt.Sprintf("journal/T-%d", i)] = mark(i)
	}
	if err := h.rewrite(snap); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 7, n / 2, n - 1, 12345} {
		reads := h.reads
		m, ok := h.get(fmt.Sprintf("journal/T-%d", i))
		if !ok || m != mark(i) {
			t.Fatalf("T-%d: %+v %v", i, m, ok)
		}
		if r := h.reads - reads; r > 40 {
			t.Fatalf("T-%d took %d reads of a %d-line snapshot", i, r, n)
		}
	}
	if _, ok := h.get("journal/T-x"); ok {
		t.Fatal("a chain the file does not name has a head")
	}
	// Appended lines override; a forget drops.
	m := mark(999999)
	if err := h.write([]entry{{chain: "journal/T-3", mark: &m}, {chain: "journal/T-4"}}, nil); err != nil {
		t.Fatal(err)
	}
	if got, ok := h.get("journal/T-3"); !ok || got != m {
		t.Fatalf("appended head: %+v %v", got, ok)
	}
	if _, ok := h.get("journal/T-4"); ok {
		t.Fatal("a forgotten head is still there")
	}
	fi0, _ := os.Stat(path)
	// Appends until the appended part passes compactAt bytes, however
	// large the snapshot: the file is rewritten then, not before.
	appended := int64(len(encodeLine("journal/T-3", &m)) + len(encodeLine("journal/T-4", nil)))
	rewrittenAt := -1
	for i := 0; i < 2*compactAt/100 && rewrittenAt < 0; i++ {
		m := mark(n + i)
		if err := h.write([]entry{{chain: fmt.Sprintf("ledger/T-%d", i), mark: &m}}, nil); err != nil {
			t.Fatal(err)
		}
		appended += int64(len(encodeLine(fmt.Sprintf("ledger/T-%d", i), &m)))
		fi1, _ := os.Stat(path)
		switch same := os.SameFile(fi0, fi1); {
		case !same && appended <= compactAt:
			t.Fatalf("rewritten with %d bytes appended", appended)
		case !same:
			rewrittenAt = i
		case appended > compactAt:
			t.Fatalf("not rewritten with %d bytes appended", appended)
		}
	}
	if rewrittenAt < 0 {
		t.Fatal("the file was never rewritten")
	}
	b, _ := os.ReadFile(path)
	hl, snapLen, ok := readHeader(b, "w")
	if !ok || int64(len(b)) != hl+snapLen {
		t.Fatalf("after the rewrite the appended part is %d of %d bytes", int64(len(b))-hl-snapLen, len(b))
	}
	h2 := newHeadsFile(path, "w")
	all, err := h2.all()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n-1+rewrittenAt+1 {
		t.Fatalf("%d heads after the rewrite", len(all))
	}
	// The new snapshot holds exactly the heads written, sorted, one
	// encoded line each.
	want := map[string]Mark{}
	for c, m := range snap {
		want[c] = m
	}
	want["journal/T-3"] = mark(999999)
	delete(want, "journal/T-4")
	for i := 0; i <= rewrittenAt; i++ {
		want[fmt.Sprintf("ledger/T-%d", i)] = mark(n + i)
	}
	if body := string(b[hl:]); body != wantBody(want) {
		t.Fatalf("the rewritten snapshot (%d bytes) is not the %d heads written, sorted (%d bytes)", len(body), len(want), len(wantBody(want)))
	}
	if all["journal/T-3"] != m && all["journal/T-3"] != mark(999999) {
		t.Fatalf("journal/T-3 after the rewrite: %+v", all["journal/T-3"])
	}
	if _, ok := all["journal/T-4"]; ok {
		t.Fatal("a forgotten head came back in the rewrite")
	}
	if got, ok := h2.get("ledger/T-100"); !ok || got != mark(n+100) {
		t.Fatalf("ledger/T-100: %+v %v", got, ok)
	}
}

// A line a crash cut short is dropped, and the next write starts a line of
// its own rather than joining it.
func TestHeadsFileTornAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.heads")
	h := newHeadsFile(path, "w")
	m1, m2 := mark(1), mark(2)
	if err := h.write([]entry{{chain: "spine/w", mark: &m1}}, nil); err != nil {
		t.Fatal(err)
	}
	torn := encodeLine("audit/w", &m2)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(torn[:len(torn)/2])
	f.Close()
	if _, ok := newHeadsFile(path, "w").get("audit/w"); ok {
		t.Fatal("a torn line reads as a head")
	}
	if err := h.write([]entry{{chain: "journal/T-1", mark: &m2}}, nil); err != nil {
		t.Fatal(err)
	}
	r := newHeadsFile(path, "w")
	if got, ok := r.get("journal/T-1"); !ok || got != m2 {
		t.Fatalf("the write after a torn line: %+v %v", got, ok)
	}
	if got, ok := r.get("spine/w"); !ok || got != m1 {
		t.Fatalf("the line before the torn one: %+v %v", got, ok)
	}
	if strings.Count(mustRead(t, path), "\n") != 4 {
		t.Fatalf("file:\n%s", mustRead(t, path))
	}
}

// wantBody is the snapshot of heads: their lines sorted by chain.
func wantBody(heads map[string]Mark) string {
	var chains []string
	for c := range heads {
		chains = append(chains, c)
	}
	sort.Strings(chains)
	var b strings.Builder
	for _, c := range chains {
		m := heads[c]
		b.Write(encodeLine(c, &m))
	}
	return b.String()
}

// A compaction copies the snapshot's lines that read back whole, in
// order, merged with the last whole line of each chain appended: a damaged
// line (in the snapshot or appended) is dropped, never copied, and a
// forgotten chain is left out. A reader of the appended part finds a
// chain's last whole line, whether it searches the bytes or decodes them.
func TestHeadsFileCompactMerges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.heads")
	h := newHeadsFile(path, "w")
	snap := map[string]Mark{}
	for i, c := range []string{"journal/A", "journal/B", "journal/C", "journal/D", "journal/E", "journal/H"} {
		snap[c] = mark(i)
	}
	if err := h.rewrite(snap); err != nil {
		t.Fatal(err)
	}
	// Damage journal/C's line in the snapshot (one byte of its link).
	b := []byte(mustRead(t, path))
	at := strings.Index(string(b), "journal/C ") + 40
	b[at] ^= 0x01
	// journal/H's line moved before journal/E's: out of order.
	eLine := string(encodeLine("journal/E", ptr(mark(4))))
	hLine := string(encodeLine("journal/H", ptr(mark(5))))
	b = []byte(strings.Replace(string(b), eLine+hLine, hLine+eLine, 1))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	g1, g2 := mark(70), mark(71)
	if err := h.write([]entry{{chain: "journal/B", mark: ptr(mark(10))}, {chain: "journal/D"}, {chain: "journal/F", mark: ptr(mark(11))}, {chain: "aaa/0", mark: ptr(mark(12))}, {chain: "journal/G", mark: &g1}}, nil); err != nil {
		t.Fatal(err)
	}
	// A later line of journal/G, whole but with a byte changed: not a line.
	bad := encodeLine("journal/G", &g2)
	bad[len("journal/G ")+3] ^= 0x01
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bad)
	f.Close()
	for _, gets := range []int{0, memAfter + 1} {
		r := newHeadsFile(path, "w")
		r.gets = gets // searched, then decoded
		if got, ok := r.get("journal/G"); !ok || got != g1 {
			t.Fatalf("journal/G after %d gets: %+v %v, want the last whole line %+v", gets, got, ok, g1)
		}
		if got, ok := r.get("journal/B"); !ok || got != mark(10) {
			t.Fatalf("journal/B after %d gets: %+v %v", gets, got, ok)
		}
		if _, ok := r.get("journal/D"); ok {
			t.Fatalf("journal/D after %d gets: forgotten, still read", gets)
		}
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	st, _ := fh.Stat()
	hl, snapLen, ok := readHeader(b, "w")
	if !ok {
		t.Fatal("no header")
	}
	if err := h.compact(fh, hl, snapLen, st.Size()); err != nil {
		t.Fatal(err)
	}
	got := []byte(mustRead(t, path))
	hl2, snap2, ok := readHeader(got, "w")
	if !ok || int64(len(got)) != hl2+snap2 {
		t.Fatalf("compacted file:\n%s", got)
	}
	want := map[string]Mark{"aaa/0": mark(12), "journal/A": mark(0), "journal/B": mark(10), "journal/F": mark(11), "journal/G": g1, "journal/H": mark(5)}
	if string(got[hl2:]) != wantBody(want) {
		t.Fatalf("compacted snapshot:\n%s\nwant:\n%s", got[hl2:], wantBody(want))
	}
}

func ptr(m Mark) *Mark { return &m }

func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A process that reads many heads reads the snapshot whole once (past
// memAfter searches) and then searches it in memory with the same answers;
// a rewrite of the file (a new snapshot) is read again, never answered
// from the old one held in memory.
func TestHeadsFileManyReadsReadSnapshotOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.heads")
	h := newHeadsFile(path, "w")
	const n = 5000
	snap := map[string]Mark{}
	for i := 0; i < n; i++ {
		snap[fmt.Sprintf("journal/T-%d", i)] = mark(i)
	}
	if err := h.rewrite(snap); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if m, ok := h.get(fmt.Sprintf("journal/T-%d", i)); !ok || m != mark(i) {
			t.Fatalf("T-%d: %+v %v", i, m, ok)
		}
	}
	if _, ok := h.get("journal/T-x"); ok {
		t.Fatal("a chain the file does not name has a head")
	}
	if h.reads > memAfter*40 {
		t.Fatalf("%d gets took %d preads: the snapshot was not read once", n, h.reads)
	}
	// Rewritten by another process with other heads: the next get reads
	// the new file.
	for i := 0; i < n; i++ {
		snap[fmt.Sprintf("journal/T-%d", i)] = mark(n + i)
	}
	delete(snap, "journal/T-7")
	if err := newHeadsFile(path, "w").rewrite(snap); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if m, ok := h.get(fmt.Sprintf("journal/T-%d", i)); !ok || m != mark(n+i) {
			t.Fatalf("T-%d after the rewrite: %+v %v (want %+v)", i, m, ok, mark(n+i))
		}
	}
	if _, ok := h.get("journal/T-7"); ok {
		t.Fatal("a head the rewrite dropped is still read")
	}
}

// get is lookup made current first.
func (h *headsFile) get(chain string) (Mark, bool) {
	m, ok, _ := h.lookup(chain, true)
	return m, ok
}

// A view's reads after its first make the file current no more (no stat,
// no read of what was appended since), except when the file is not open:
// one a rewrite closed is opened again, so a view whose file was
// compacted under it (by a write of the same process) still reads every
// head, and not none.
func TestHeadsLookupWithoutRefresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.heads")
	h := newHeadsFile(path, "w")
	m1, m2, m3 := mark(1), mark(2), mark(3)
	if err := h.write([]entry{{chain: "journal/A", mark: &m1}}, nil); err != nil {
		t.Fatal(err)
	}
	if got, ok, exists := h.lookup("journal/A", true); !ok || !exists || got != m1 {
		t.Fatalf("first lookup: %+v %v %v", got, ok, exists)
	}
	// Appended by another process: not read by a lookup without refresh.
	other := newHeadsFile(path, "w")
	if err := other.write([]entry{{chain: "journal/B", mark: &m2}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, exists := h.lookup("journal/B", false); ok || !exists {
		t.Fatalf("a head appended after the view's first read is read without refresh: %v %v", ok, exists)
	}
	if got, ok, _ := h.lookup("journal/B", true); !ok || got != m2 {
		t.Fatalf("refreshed: %+v %v", got, ok)
	}
	// Rewritten and closed (as a compaction does): read again.
	if err := h.rewrite(map[string]Mark{"journal/A": m3, "journal/B": m2}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.closeLocked()
	h.mu.Unlock()
	if got, ok, exists := h.lookup("journal/A", false); !ok || !exists || got != m3 {
		t.Fatalf("after a rewrite closed the file: %+v %v %v", got, ok, exists)
	}
}
