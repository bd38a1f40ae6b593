package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/bernstein/bernstein/gitstore"
)

// keptIndex is one writer's kept spine index, read in place: the header
// decoded (the store authenticated it whole), the body read a block at a
// time, each block checked against the hash the header gives it before a
// byte of it is used. Any fault (a block that does not hash to its header's
// hash, a record that does not decode, a place or an offset outside the
// body, records out of order) makes it bad: the reader drops it and walks
// every spine (SpineIndex.Poisoned).
type keptIndex struct {
	writer   string
	head     gitstore.Oid
	first    int // the first entry a broken link affects, or -1
	firstSeq int64
	msg      string
	check    string
	n, m     int // records; hash slots
	newest   int // place (task order) of the newest entry
	bodyLen  int64
	sums     [][32]byte
	body     io.ReaderAt

	id [32]byte // the SHA-256 of the header: a tail names it

	mu     sync.Mutex
	blocks map[int64][]byte // checked blocks
	recs   map[int]keptRec  // decoded records, by place
	strs   interner
	bad    bool
	whole  []*SpineRecord            // every entry, oldest first, once read whole
	places []keptRec                 // every record by place, once read whole
	byTask map[string][]*SpineRecord // every record by task, once read whole
	byHash map[[32]byte]*SpineRecord // the hash slots' records, once read whole and searched
	// searches counts the tasks searched for (task).
	searches int
}

type keptRec struct {
	task string
	ord  int64
	r    *SpineRecord
}

// openKept decodes the header of writer's kept index; nil when it is not
// one built under tag.
func openKept(header []byte, body io.ReaderAt, writer, tag string) *keptIndex {
	if body == nil || !bytes.HasPrefix(header, []byte(spineCacheMagic)) {
		return nil
	}
	d := &decoder{b: header[len(spineCacheMagic):]}
	if d.str() != tag {
		return nil
	}
	k := &keptIndex{writer: writer, body: body, blocks: map[int64][]byte{}, recs: map[int]keptRec{}, strs: interner{}}
	copy(k.head[:], d.take(20))
	k.first, k.firstSeq = int(d.num()), d.num()
	k.msg, k.check = d.str(), d.str()
	n, m, newest, blen := d.num(), d.num(), d.num(), d.num()
	if d.bad || n <= 0 || n >= 1<<31 || m < 0 || m > n || newest < 0 || newest >= n || blen < 4*(n+m) || blen >= 1<<32 ||
		k.first < -1 || int64(k.first) >= n {
		return nil
	}
	k.n, k.m, k.newest, k.bodyLen = int(n), int(m), int(newest), blen
	nb := (blen + spineBlock - 1) / spineBlock
	if int64(len(d.b)) != nb*32 {
		return nil
	}
	k.id = sha256.Sum256(header)
	k.sums = make([][32]byte, nb)
	for i := range k.sums {
		copy(k.sums[i][:], d.b[32*i:])
	}
	return k
}

// block returns body block i once its hash checks against the header's.
func (k *keptIndex) block(i int64) []byte {
	if b, ok := k.blocks[i]; ok {
		return b
	}
	b := make([]byte, min(spineBlock, k.bodyLen-i*spineBlock))
	if _, err := k.body.ReadAt(b, i*spineBlock); err != nil || sha256.Sum256(b) != k.sums[i] {
		k.bad = true
		return nil
	}
	k.blocks[i] = b
	return b
}

// inBody reports whether the n bytes at off lie in the body: an offset or
// a length the body gives (a place, a record's bounds) is used only then.
func (k *keptIndex) inBody(off, n int64) bool {
	return off >= 0 && n >= 0 && off+n <= k.bodyLen
}

// read returns the n bytes of the body at off, from checked blocks only.
func (k *keptIndex) read(off, n int64) []byte {
	if k.bad || !k.inBody(off, n) {
		k.bad = true
		return nil
	}
	first, last := off/spineBlock, (off+n-1)/spineBlock
	if n == 0 {
		return []byte{}
	}
	if first == last {
		b := k.block(first)
		if b == nil {
			return nil
		}
		return b[off-first*spineBlock : off-first*spineBlock+n]
	}
	out := make([]byte, 0, n)
	for i := first; i <= last; i++ {
		b := k.block(i)
		if b == nil {
			return nil
		}
		lo, hi := max(off-i*spineBlock, 0), min(off+n-i*spineBlock, int64(len(b)))
		out = append(out, b[lo:hi]...)
	}
	return out
}

func (k *keptIndex) u32(off int64) (int64, bool) {
	b := k.read(off, 4)
	if b == nil {
		return 0, false
	}
	return int64(binary.BigEndian.Uint32(b)), true
}

// rec returns the record at place p (task order), decoded once.
func (k *keptIndex) rec(p int) (keptRec, bool) {
	if k.places != nil && p >= 0 && p < k.n {
		return k.places[p], true
	}
	if kr, ok := k.recs[p]; ok {
		return kr, true
	}
	if k.bad || p < 0 || p >= k.n {
		k.bad = true
		return keptRec{}, false
	}
	kr, ok := k.decodeAt(nil, p)
	if ok {
		k.recs[p] = kr
	}
	return kr, ok
}

// decodeAt decodes the record at place p, from whole (the body read whole
// and checked) or from the blocks it spans.
func (k *keptIndex) decodeAt(whole []byte, p int) (keptRec, bool) {
	at := func(off, n int64) []byte {
		if whole != nil {
			if !k.inBody(off, n) {
				return nil
			}
			return whole[off : off+n]
		}
		return k.read(off, n)
	}
	u32 := func(off int64) (int64, bool) {
		b := at(off, 4)
		if b == nil {
			return 0, false
		}
		return int64(binary.BigEndian.Uint32(b)), true
	}
	start, ok := u32(int64(4 * p))
	end := k.bodyLen
	if ok && p+1 < k.n {
		end, ok = u32(int64(4 * (p + 1)))
	}
	var b []byte
	if ok {
		b = at(start, end-start) // nil unless in the body
	}
	if b == nil {
		k.bad = true
		return keptRec{}, false
	}
	task, ord, r, ok := decodeRecord(b, k.writer, k.strs)
	if !ok || ord < 0 || ord >= int64(k.n) {
		k.bad = true
		return keptRec{}, false
	}
	if k.first >= 0 && ord >= int64(k.first) {
		r.ChainErr = k.msg
	}
	return keptRec{task, ord, r}, true
}

// task returns the records filed under task, oldest first. The run of
// places [lo, hi) is found by binary searches over checked records: each
// ends between two records it read (the one before lo, or the start, is of
// a task before task; the one at hi, or the end, of a task after it), so
// the run is bounded by records whose blocks checked, never by what the
// search skipped. That the records are sorted, hence that no record of
// task lies outside the run, rests on the header's MAC: only the local
// writer wrote them.
func (k *keptIndex) task(task string) []*SpineRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.searches++; k.searches > k.searchesBeforeWhole() && k.byTask == nil && !k.bad {
		k.readWhole()
	}
	if k.byTask != nil {
		return k.byTask[task]
	}
	cmp := func(p int) int {
		kr, ok := k.rec(p)
		if !ok {
			return 0
		}
		return strings.Compare(kr.task, task)
	}
	lo := sort.Search(k.n, func(p int) bool { return cmp(p) >= 0 })
	hi := lo + sort.Search(k.n-lo, func(p int) bool { return cmp(lo+p) > 0 })
	if k.bad {
		return nil
	}
	// Each record of the run is filed under task by its sort key, the
	// task it is read back as: one the run holds wrongly names another
	// task, and fails its proof against its commit.
	out := make([]*SpineRecord, 0, hi-lo)
	for p := lo; p < hi; p++ {
		kr, ok := k.rec(p)
		if !ok {
			return nil
		}
		out = append(out, kr.r)
	}
	return out
}

// find returns the entry whose hash has bytes h, or nil.
func (k *keptIndex) find(h [32]byte) *SpineRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byHash != nil {
		return k.byHash[h]
	}
	at := func(i int) *SpineRecord {
		p, ok := k.u32(int64(4 * (k.n + i)))
		if !ok {
			return nil
		}
		kr, ok := k.rec(int(p))
		if !ok || !kr.r.parsed {
			k.bad = true
			return nil
		}
		return kr.r
	}
	if k.places != nil && !k.bad {
		// Read whole: the hash slots go into a map once, each slot's
		// record under its hash (what the search below finds), so that a
		// list's thousands of finds cost a lookup each, not a search.
		byHash := make(map[[32]byte]*SpineRecord, k.m)
		for i := 0; i < k.m; i++ {
			r := at(i)
			if r == nil {
				return nil
			}
			byHash[r.hash] = r
		}
		k.byHash = byHash
		return byHash[h]
	}
	i := sort.Search(k.m, func(i int) bool {
		r := at(i)
		return r == nil || bytes.Compare(r.hash[:], h[:]) >= 0
	})
	if k.bad || i >= k.m {
		return nil
	}
	if r := at(i); r != nil && r.hash == h {
		return r
	}
	return nil
}

// last returns the newest entry.
func (k *keptIndex) last() *SpineRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	kr, ok := k.rec(k.newest)
	if !ok || kr.ord != int64(k.n-1) {
		k.bad = true
		return nil
	}
	return kr.r
}

// searchesBeforeWhole is how many tasks a reader searches for before it
// reads the index whole: a listing reads every task's records, which one
// pass over the body costs less than a search each. A search decodes about
// 2 log2(n) records, a whole read n: past n / (4 log2 n) searches, half the
// records would have been decoded anyway.
func (k *keptIndex) searchesBeforeWhole() int {
	return max(16, k.n/(4*bits.Len(uint(k.n))))
}

// all returns every entry, oldest first, reading the body whole (one read,
// every block checked).
func (k *keptIndex) all() []*SpineRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.readWhole()
}

// readWhole reads the body whole and files every record by task (under mu).
func (k *keptIndex) readWhole() []*SpineRecord {
	if k.whole != nil || k.bad {
		return k.whole
	}
	buf := make([]byte, k.bodyLen)
	if _, err := k.body.ReadAt(buf, 0); err != nil {
		k.bad = true
		return nil
	}
	for i := range k.sums {
		b := buf[int64(i)*spineBlock : min(int64(i+1)*spineBlock, k.bodyLen)]
		if sha256.Sum256(b) != k.sums[i] {
			k.bad = true
			return nil
		}
		k.blocks[int64(i)] = b
	}
	out := make([]*SpineRecord, k.n)
	places := make([]keptRec, k.n)
	for p := 0; p < k.n; p++ {
		kr, ok := k.recs[p]
		if !ok {
			kr, ok = k.decodeAt(buf, p)
		}
		if !ok || out[kr.ord] != nil {
			k.bad = true
			return nil
		}
		out[kr.ord], places[p] = kr.r, kr
	}
	byTask := map[string][]*SpineRecord{}
	for _, kr := range places { // by task, then chain order
		byTask[kr.task] = append(byTask[kr.task], kr.r)
	}
	k.whole, k.places, k.byTask = out, places, byTask
	if c, ok := k.body.(io.Closer); ok {
		c.Close() // every block is read: the file is not read again
	}
	return out
}

func (k *keptIndex) failed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bad
}

// taskEntries is what a kept index and the walked entries hold of one task.
type taskEntries struct {
	arts, seals, sups []*SpineRecord
}

// keptWriter indexes writer's spine at head from its kept index, its tail
// and the entries written since, and keeps them again (spinetail.go).
func (ix *SpineIndex) keptWriter(writer string, head gitstore.Oid, tag string) {
	cache := ix.env.SpineCache
	base, loaded := loadKept(cache, writer, tag)
	if base == nil {
		// No index kept (or none that reads): the spine is walked whole
		// and held whole until it is kept. Readers of this process take
		// turns at it, and each after the first reads the index the one
		// before it kept: many goroutines reading at once (a server, a
		// runner's workers) would each hold the whole spine.
		release := cache.WalkTurn(writer)
		defer release()
		base, loaded = loadKept(cache, writer, tag)
	}
	var tail *keptTail
	if base != nil {
		tail = openTail(cache.LoadTail(writer), base, writer, tag)
	}
	if base != nil && tail == nil && base.head == head {
		ix.addWriter(writer, &writerIndex{head: head, first: base.first, msg: base.msg, check: base.check, base: base})
		return
	}
	wi, added := ix.indexWriter(writer, head, nil, base, tail)
	if wi == nil { // the kept index does not read: walk whole
		base = nil
		wi, added = ix.indexWriter(writer, head, nil, nil, nil)
	}
	ix.addWriter(writer, wi)
	if wi.base == nil {
		if release, ok := rewrite(cache, writer, loaded); ok {
			defer release()
			save(cache, writer, wi.recs, wi, tag)
		}
		return
	}
	if added == 0 {
		return
	}
	if mergeTail(len(wi.recs), wi.base.n) {
		release, ok := rewrite(cache, writer, loaded)
		if !ok {
			return
		}
		defer release()
		older := wi.base.all()
		if older == nil {
			ix.poison()
			return
		}
		save(cache, writer, append(slices.Clip(older), wi.recs...), wi, tag)
		return
	}
	if t := encodeTail(wi, tag); t != nil {
		cache.SaveTail(writer, t)
	}
}

// loadKept opens writer's kept index, and returns the SHA-256 of the
// header it loaded (zero when none was kept).
func loadKept(cache SpineCache, writer, tag string) (base *keptIndex, loaded [32]byte) {
	h, body := cache.Load(writer)
	if h == nil {
		return nil, loaded
	}
	loaded = sha256.Sum256(h)
	if base = openKept(h, body, writer, tag); base == nil {
		if c, ok := body.(io.Closer); ok {
			c.Close()
		}
	}
	return base, loaded
}

// rewrite takes the right to replace writer's kept index, which must still
// be the one this reader loaded (loaded: the SHA-256 of its header, zero
// for none): at most one reader rewrites an index at a time, and none
// rewrites it over a newer one another reader wrote since it loaded its
// own (it would do that work again, and put back an older head). Readers
// refused read on from the index and tail they have: many readers of a
// large index that all found its tail full would otherwise each read the
// index whole and write it again at once.
func rewrite(cache SpineCache, writer string, loaded [32]byte) (func(), bool) {
	release, kept, ok := cache.Rewrite(writer)
	if !ok {
		return nil, false
	}
	var now [32]byte
	if kept != nil {
		now = sha256.Sum256(kept)
	}
	if now != loaded {
		release()
		return nil, false
	}
	return release, true
}

// save keeps recs, writer's whole spine as wi indexes it.
func save(cache SpineCache, writer string, recs []*SpineRecord, wi *writerIndex, tag string) {
	if h, body := encodeWriterIndex(recs, wi.head, wi.first, wi.msg, wi.check, tag); h != nil {
		cache.Save(writer, h, body)
	}
}

// keepWalked keeps every writer's spine as walked whole, in place of a
// kept index that did not hold.
func (ix *SpineIndex) keepWalked() {
	if ix.env.SpineCache == nil || len(ix.walked) != len(ix.Writers) {
		return
	}
	tag := ix.env.bindingTag()
	for i, wi := range ix.walked {
		// It replaces an index that did not hold, whichever is kept now.
		release, _, ok := ix.env.SpineCache.Rewrite(ix.Writers[i])
		if !ok {
			continue
		}
		save(ix.env.SpineCache, ix.Writers[i], wi.recs, wi, tag)
		release()
	}
}

// addKept adds a writer's kept index: its entries are read when asked for.
func (ix *SpineIndex) addKept(k *keptIndex) {
	if ix.kept == nil {
		ix.kept = map[string]*keptIndex{}
	}
	ix.kept[k.writer] = k
	ix.Entries += k.n
	if k.first >= 0 {
		ix.Problems = append(ix.Problems, Failure{Writer: k.writer, Seq: i64(k.firstSeq), Check: k.check, Reason: k.msg})
	}
}

// poison marks the index as one that must not be used.
func (ix *SpineIndex) poison() {
	ix.mu.Lock()
	ix.poisoned = true
	ix.mu.Unlock()
}

// ofTask returns task's artifact entries, seals and supersede entries:
// writers in name order, each spine in chain order.
func (ix *SpineIndex) ofTask(task string) *taskEntries {
	if len(ix.kept) == 0 {
		return &taskEntries{ix.walkedArts[task], ix.walkedSeals[task], ix.walkedSups[task]}
	}
	ix.kmu.Lock()
	defer ix.kmu.Unlock()
	if ts := ix.tasks[task]; ts != nil {
		return ts
	}
	ts := &taskEntries{}
	of := func(list []*SpineRecord, w string) []*SpineRecord {
		var out []*SpineRecord
		for _, r := range list {
			if r.Writer == w {
				out = append(out, r)
			}
		}
		return out
	}
	for _, w := range ix.Writers {
		if k := ix.kept[w]; k != nil {
			for _, r := range k.task(task) {
				switch {
				case r.Artifact != nil:
					ts.arts = append(ts.arts, r)
				case r.Seal != nil:
					ts.seals = append(ts.seals, r)
				case r.Supersede != nil:
					ts.sups = append(ts.sups, r)
				}
			}
			if k.failed() {
				ix.poison()
			}
		}
		ts.arts = append(ts.arts, of(ix.walkedArts[task], w)...)
		ts.seals = append(ts.seals, of(ix.walkedSeals[task], w)...)
		ts.sups = append(ts.sups, of(ix.walkedSups[task], w)...)
	}
	if ix.tasks == nil {
		ix.tasks = map[string]*taskEntries{}
	}
	ix.tasks[task] = ts
	return ts
}

// TaskSeals returns the seal entries of task, writers in name order, each
// spine in chain order.
func (ix *SpineIndex) TaskSeals(task string) []*SpineRecord { return ix.ofTask(task).seals }

// writerRecords returns every entry of writer's spine, oldest first (a
// kept index is read whole).
func (ix *SpineIndex) writerRecords(w string) []*SpineRecord {
	k := ix.kept[w]
	if k == nil {
		return ix.walkedRecs[w]
	}
	older := k.all()
	if older == nil {
		ix.poison()
		return ix.walkedRecs[w]
	}
	return append(slices.Clip(older), ix.walkedRecs[w]...)
}
