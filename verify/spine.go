// Package verify is bernstein's one definition of "verified": the checks
// every surface applies to an artifact version before it shows content, the
// journal-identity rule for seals, and the whole-repository walker behind
// `bernstein audit verify`. It reads through the object store and never
// trusts it: every blob is re-hashed, every binding re-checked.
package verify

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Version states (docs/trust.md).
const (
	Verified     = "verified"
	Tampered     = "tampered"
	Unverifiable = "unverifiable"
)

// Journal identity states.
const (
	IdentityVerified     = "verified"
	IdentityMismatched   = "mismatched"
	IdentityUnverifiable = "unverifiable"
)

// Signature outcomes for a signed commit.
type sigState int8

const (
	sigTrusted  sigState = iota // verifies against a pinned key of the writer
	sigUnpinned                 // verifies against the published key; nothing pins it
	sigNoKey                    // no key at all is known for the writer
	sigBad                      // missing, malformed, or does not verify
)

// SpineRecord is one entry of a lineage spine, located in its chain. It is
// compact: the hash is its 32 bytes, an artifact entry keeps only what it
// binds (ArtifactSeal), and the commit is re-read when its signature is
// checked lazily.
type SpineRecord struct {
	Writer    string
	Seq       int64
	Commit    gitstore.Oid
	hash      [32]byte
	parsed    bool // the entry parsed: hash is its identity
	posted    bool // an artifact.posted audit entry names it
	checked   bool // sigState and sigReason are set (under SpineIndex.mu when lazily)
	sigState  sigState
	Artifact  *ArtifactSeal
	Seal      *record.SpineSealEntry      // seals are few: kept whole
	Supersede *record.SpineSupersedeEntry // so are supersede entries
	ChainErr  string                      // set when the entry does not sit where its chain says

	sigReason string
	sealErr   *error // seals: the detached signature check (nil: not a seal, or not checked)

	cached bool // read from a kept index (spinecache.go): proven against its commit before use
	proved bool // cached, and its commit was read and holds exactly this entry
}

// Env is what verification reads: the objects, the refs, and the keys.
type Env struct {
	Objects *gitstore.Repo
	Refs    refs.Source // one consistent view of the refs
	Trust   *keys.TrustSet
	// Published are the keys the writers refs publish, by writer (a name
	// may have several). They are not trusted; they only tell
	// "unverifiable" from "tampered".
	Published map[string][]ssh.PublicKey
	// Binding is the repository identity every chain must be rooted in (nil:
	// none, as in a format-1 repository).
	Binding *Binding

	// SpineCache keeps each writer's spine index between reads (nil:
	// every read walks the spines). What it returns is derived data:
	// spinecache.go says what is proven of it and how.
	SpineCache SpineCache

	once sync.Once
	sigs *sigCache // key verdicts under Trust and Published

	provenOnce sync.Once
	provenMemo *provenMemo // the proofs of the last commits proved (ProveCommitID)
}

// Hash returns the entry's spine entry hash ("" when it did not parse).
func (r *SpineRecord) Hash() record.Hash {
	if !r.parsed {
		return ""
	}
	return hash32{b: r.hash, canon: true}.Hash()
}

// SpineIndex indexes every entry of every local lineage spine by hash.
type SpineIndex struct {
	env     *Env
	strs    interner
	mu      sync.Mutex // lazy signature checks
	byHash  []hashSlot // every parsed entry, sorted by hash (the first of equal hashes)
	Writers []string
	// Unreadable are the spine refs whose head cannot be read as a commit
	// (docs/trust.md, Refs that cannot be read): a version whose entry is
	// missing names them.
	Unreadable []refs.BadRef
	// The walked entries (all of them when no kept index is read): by
	// writer in chain order; seals, artifact entries and supersede entries
	// (task adopt) by task. Readers go through ofTask and writerRecords.
	walkedRecs  map[string][]*SpineRecord
	walkedSeals map[string][]*SpineRecord
	walkedArts  map[string][]*SpineRecord
	walkedSups  map[string][]*SpineRecord
	Problems    []Failure // chain-level problems found while indexing
	Entries     int
	// Walked counts the spine commits read walking back from the heads
	// (the other entries were read from kept indexes and their tails).
	Walked int

	cached   bool // some writer's entries were read from env.SpineCache
	poisoned bool // a cached entry did not hold against its commit (under mu)

	// kept are the writers whose older entries are read in place from
	// their kept index (spinekept.go); the maps above hold the entries
	// walked since. A reader asks for them through ofTask, lookup and
	// writerRecords, which put both together.
	kept map[string]*keptIndex
	// walked are the writers' spines walked whole, in Writers' order
	// (when no kept index was read).
	walked []*writerIndex
	kmu    sync.Mutex
	tasks  map[string]*taskEntries // by task, as read so far (under kmu)
}

// BuildSpineIndex walks every refs/bernstein/spine/* chain. Signatures are
// checked lazily, when a verification needs them.
func BuildSpineIndex(env *Env) (*SpineIndex, error) {
	return buildSpineIndex(env, nil)
}

// buildSpineIndex walks the spines; with a pool, every signature is checked
// during the walk, in parallel. Without a pool, a spine kept by
// env.SpineCache is read from it and only the entries written since are
// walked (spinecache.go).
func buildSpineIndex(env *Env, pool *sigPool) (*SpineIndex, error) {
	return buildSpineIndexWith(env, pool, pool == nil && env.SpineCache != nil)
}

func buildSpineIndexWith(env *Env, pool *sigPool, cached bool) (*SpineIndex, error) {
	vals, names, err := env.Refs.List(refs.SpinePrefix)
	if err != nil {
		return nil, err
	}
	ix := &SpineIndex{env: env, strs: interner{}, walkedRecs: map[string][]*SpineRecord{}, walkedSeals: map[string][]*SpineRecord{}, walkedArts: map[string][]*SpineRecord{},
		walkedSups: map[string][]*SpineRecord{}}
	tag := env.bindingTag()
	for _, name := range names {
		writer := strings.TrimPrefix(name, refs.SpinePrefix)
		ix.Writers = append(ix.Writers, writer)
		if _, err := env.Objects.ReadType(vals[name], gitstore.TypeCommit); unreadableObject(err) {
			ix.Unreadable = append(ix.Unreadable, refs.BadRef{Ref: name, At: vals[name], Reason: err.Error()})
		}
		if !cached {
			wi, _ := ix.indexWriter(writer, vals[name], pool, nil, nil)
			ix.addWriter(writer, wi)
			ix.walked = append(ix.walked, wi)
			continue
		}
		ix.cached = true
		ix.keptWriter(writer, vals[name], tag)
	}
	if pool != nil {
		pool.wait()
	}
	// Sorted by hash, the first entry of each hash (in writer and chain
	// order) kept.
	slices.SortFunc(ix.byHash, func(a, b hashSlot) int {
		if c := bytes.Compare(a.h[:], b.h[:]); c != 0 {
			return c
		}
		return int(a.ord) - int(b.ord)
	})
	kept := ix.byHash[:0]
	for i, e := range ix.byHash {
		if i == 0 || e.h != kept[len(kept)-1].h {
			kept = append(kept, e)
		}
	}
	ix.byHash = slices.Clip(kept)
	return ix, nil
}

// hashSlot is one entry of the index by hash.
type hashSlot struct {
	h   [32]byte
	r   *SpineRecord
	ord int // the entry's place in writer and chain order (first of equal hashes wins)
}

// find returns the entry whose hash has bytes h, or nil.
func (ix *SpineIndex) find(h [32]byte) *SpineRecord {
	walked := ix.findWalked(h)
	if len(ix.kept) == 0 {
		return walked
	}
	// The first of equal hashes in writer and chain order: a writer's kept
	// entries are older than its walked ones.
	for _, w := range ix.Writers {
		if k := ix.kept[w]; k != nil {
			if r := k.find(h); r != nil {
				return r
			}
			if k.failed() {
				ix.poison()
				return nil
			}
		}
		if walked != nil && walked.Writer == w {
			return walked
		}
	}
	return walked
}

// findWalked returns the walked entry whose hash has bytes h, or nil.
func (ix *SpineIndex) findWalked(h [32]byte) *SpineRecord {
	i := sort.Search(len(ix.byHash), func(i int) bool { return bytes.Compare(ix.byHash[i].h[:], h[:]) >= 0 })
	if i < len(ix.byHash) && ix.byHash[i].h == h {
		return ix.byHash[i].r
	}
	return nil
}

// indexWriter walks one spine from its head back to the root, checking each
// link as it goes, and marks every entry from the first broken link on.
// With base (the spine as kept at an older head), the walk stops at base's
// head and links the entries written since onto base's; a head that does
// not lead back to base's is walked whole. With tail (the entries kept
// after base's head), the walk stops at tail's newest entry instead, and
// the entries walked follow tail's. It returns the writer's index and how
// many entries it walked.
func (ix *SpineIndex) indexWriter(writer string, head gitstore.Oid, pool *sigPool, base *keptIndex, tail *keptTail) (*writerIndex, int) {
	var stop gitstore.Oid
	if base != nil {
		stop = base.head
	}
	if tail != nil {
		stop = tail.head()
	}
	met := false
	var recs []*SpineRecord // newest first while walking
	type link struct {
		seq  int64
		prev record.Hash
	}
	var newer *link
	var batch []spineSig
	flush := func() {
		if len(batch) > 0 {
			b := batch
			batch = nil
			pool.do(func() { ix.checkBatch(b) })
		}
	}
	breakAt := -1 // index in recs (newest first) of the oldest entry a break affects
	reasons := map[int]string{}
	mark := func(i int, reason string) {
		if i > breakAt {
			breakAt = i
		}
		if _, ok := reasons[i]; !ok {
			reasons[i] = reason
		}
	}
	chain.Walk(ix.env.Objects, head, func(cc chain.Commit) bool {
		if !stop.IsZero() && cc.ID == stop && cc.Err == nil {
			met = true
			return false
		}
		ix.Walked++
		i := len(recs)
		rec := &SpineRecord{Writer: writer, Commit: cc.ID}
		recs = append(recs, rec)
		if cc.Err != nil {
			mark(i, cc.Err.Error())
			newer = nil
			return true
		}
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil {
			mark(i, err.Error())
			newer = nil
			return true
		}
		ix.fill(rec, e)
		if e.Header.Writer != writer {
			mark(i, fmt.Sprintf("entry names writer %q", e.Header.Writer))
		}
		if newer != nil {
			if newer.seq != e.Header.Seq+1 {
				mark(i-1, fmt.Sprintf("entry has seq %d after seq %d", newer.seq, e.Header.Seq))
			}
			if newer.prev != e.Hash {
				mark(i-1, "entry's prev does not link to the entry before it")
			}
		}
		if len(cc.Commit.Parents) == 0 {
			if e.Header.Seq != 0 {
				mark(i, "first entry does not have seq 0")
			} else if why := ix.env.Binding.CheckRoot(record.ChainSpine, writer, cc.ID, string(e.Header.Prev)); why != "" {
				mark(i, why)
			}
		}
		newer = &link{e.Header.Seq, e.Header.Prev}
		if pool != nil {
			batch = append(batch, spineSig{rec, cc.Payload, cc.Commit.Signature, cc.Commit.Tree, e.Bytes, CommitTime(cc.Commit.Committer)})
			if len(batch) == sigBatch {
				flush()
			}
		}
		return true
	})
	flush()
	offset := 0 // how many of base's entries come before the walked ones
	if met {
		offset = base.n
		last := base.last()
		if tail != nil {
			offset, last = base.n+len(tail.recs), tail.recs[len(tail.recs)-1]
		}
		if last == nil {
			return nil, 0 // the kept index does not read: walk whole
		}
		if newer != nil && last.parsed {
			// The oldest entry walked must link onto base's newest.
			i := len(recs) - 1
			if newer.seq != last.Seq+1 {
				mark(i, fmt.Sprintf("entry has seq %d after seq %d", newer.seq, last.Seq))
			}
			if newer.prev != last.Hash() {
				mark(i, "entry's prev does not link to the entry before it")
			}
		}
	}
	reverse(recs)
	n := len(recs)
	for i, rec := range recs {
		if !rec.parsed {
			rec.Seq = int64(offset + i)
		}
	}
	wi := &writerIndex{head: head, first: -1}
	if met {
		wi.base = base
	}
	if met && base.first >= 0 {
		wi.first, wi.msg, wi.check = base.first, base.msg, base.check
	}
	if met && tail != nil && tail.first >= 0 {
		wi.first, wi.msg, wi.check = tail.first, tail.msg, tail.check
	}
	if wi.first < 0 && breakAt >= 0 {
		// recs[k] (oldest first) = walk index n-1-k; a break at walk index b
		// affects the entries from position n-1-b on.
		first := n - 1 - breakAt
		wi.first = offset + first
		wi.msg = fmt.Sprintf("spine of %s is broken at seq %d: %s", writer, recs[first].Seq, reasons[breakAt])
		wi.check = "spine_chain"
		if strings.HasPrefix(reasons[breakAt], ForeignWord) {
			wi.msg, wi.check = fmt.Sprintf("spine of %s is %s", writer, reasons[breakAt]), CheckRepositoryBinding
		}
	}
	wi.recs = recs
	if met && tail != nil {
		wi.recs = append(slices.Clip(tail.recs), recs...)
	}
	return wi, n
}

// fill sets what rec keeps of its parsed entry e.
func (ix *SpineIndex) fill(rec *SpineRecord, e record.SpineEntry) {
	rec.Seq, rec.Seal, rec.Supersede = e.Header.Seq, e.Seal, e.Supersede
	rec.hash, rec.parsed = hashBytes(string(e.Hash))
	if a := e.Artifact; a != nil {
		rec.Artifact = &ArtifactSeal{TaskID: ix.strs.of(a.TaskID), Key: ix.strs.of(a.Key),
			Version: a.Version, JournalIndex: a.JournalIndex, binding: entryDigest(a)}
	}
}

// addWriter adds a writer's indexed spine to the index.
// With wi.base, the base's entries are read in place and recs are the ones
// walked since, which a break in the base affects whole.
func (ix *SpineIndex) addWriter(writer string, wi *writerIndex) {
	recs := wi.recs
	offset := 0
	if k := wi.base; k != nil {
		offset = k.n
		ix.addKept(k)
	}
	if wi.first >= 0 {
		from := max(wi.first-offset, 0)
		if wi.first >= offset {
			ix.Problems = append(ix.Problems, Failure{Writer: writer, Seq: i64(recs[from].Seq), Check: wi.check, Reason: wi.msg})
		}
		for _, rec := range recs[from:] {
			rec.ChainErr = wi.msg
		}
	}
	for _, rec := range recs {
		ix.Entries++
		if !rec.parsed {
			continue
		}
		ix.byHash = append(ix.byHash, hashSlot{rec.hash, rec, len(ix.byHash)})
		if rec.Seal != nil {
			ix.walkedSeals[rec.Seal.TaskID] = append(ix.walkedSeals[rec.Seal.TaskID], rec)
		}
		if rec.Artifact != nil {
			ix.walkedArts[rec.Artifact.TaskID] = append(ix.walkedArts[rec.Artifact.TaskID], rec)
		}
		if rec.Supersede != nil {
			ix.walkedSups[rec.Supersede.TaskID] = append(ix.walkedSups[rec.Supersede.TaskID], rec)
		}
	}
	if len(recs) > 0 || wi.base == nil {
		ix.walkedRecs[writer] = recs
	}
}

func reverse[T any](xs []T) {
	for i, j := 0, len(xs)-1; i < j; i, j = i+1, j-1 {
		xs[i], xs[j] = xs[j], xs[i]
	}
}

// sigBatch is how many signatures the walks hand the pool at a time.
const sigBatch = 64

// spineSig is what the signature checks of one spine entry need.
type spineSig struct {
	rec          *SpineRecord
	payload, sig []byte
	tree         gitstore.Oid
	entry        []byte
	when         int64
}

// checkBatch checks the commit signatures of a batch of spine entries (and
// the detached signatures of seals), as check does each.
func (ix *SpineIndex) checkBatch(b []spineSig) {
	jobs := make([]sigJob, len(b))
	for i, e := range b {
		jobs[i] = sigJob{writer: e.rec.Writer, payload: e.payload, armored: e.sig, when: e.when}
	}
	checkSignatures(ix.env, jobs)
	for i, e := range b {
		var sealErr *error
		if e.rec.Seal != nil {
			err := checkSealSignature(ix.env, e.sig, e.tree, e.entry)
			sealErr = &err
		}
		ix.mu.Lock()
		if !e.rec.checked {
			e.rec.sigState, e.rec.sigReason, e.rec.sealErr, e.rec.checked = jobs[i].state, jobs[i].reason, sealErr, true
		}
		ix.mu.Unlock()
	}
}

// check verifies the commit signature (and, for a seal, its detached
// signature) of the entry.
func (r *SpineRecord) check(env *Env, payload, sig []byte, tree gitstore.Oid, entry []byte, when int64) {
	r.sigState, r.sigReason = checkSignature(env, r.Writer, payload, sig, when)
	if r.Seal != nil {
		err := checkSealSignature(env, sig, tree, entry)
		r.sealErr = &err
	}
	r.checked = true
}

// artifactEntry reads r's artifact entry again, whole.
func (ix *SpineIndex) artifactEntry(r *SpineRecord) (*record.SpineArtifactEntry, error) {
	cc, err := chain.Read(ix.env.Objects, r.Commit)
	if err != nil {
		return nil, err
	}
	e, err := record.ParseSpineEntry(cc.Record)
	if err != nil {
		return nil, err
	}
	if e.Artifact == nil || e.Hash != r.Hash() {
		return nil, fmt.Errorf("spine entry %s/%d reads differently than it did", r.Writer, r.Seq)
	}
	return e.Artifact, nil
}

// lookup returns the entry whose spine entry hash is h, or nil.
func (ix *SpineIndex) lookup(h record.Hash) *SpineRecord {
	b, ok := hashBytes(string(h))
	if !ok {
		return nil // every indexed hash is in canonical form
	}
	return ix.find(b)
}

// signature returns the signature state of r, checking it now if needed.
func (ix *SpineIndex) signature(r *SpineRecord) (sigState, string) {
	if !ix.prove(r) {
		return sigBad, "spine entry does not hold against its commit"
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !r.checked {
		cc, err := chain.Read(ix.env.Objects, r.Commit)
		if err != nil {
			r.sigState, r.sigReason, r.sealErr, r.checked = sigBad, err.Error(), &err, true
		} else {
			r.check(ix.env, cc.Payload, cc.Commit.Signature, cc.Commit.Tree, cc.Record, CommitTime(cc.Commit.Committer))
		}
	}
	return r.sigState, r.sigReason
}

// Productions counts the artifact entries per task and key.
type Production struct {
	URI         string `json:"uri"`
	Task        string `json:"-"`
	Key         string `json:"-"`
	Productions int    `json:"productions"`
}

// Productions lists the artifact keys the spines carry.
func (ix *SpineIndex) Productions() []Production {
	counts := map[[2]string]int{}
	for _, w := range ix.Writers {
		recs := ix.writerRecords(w)
		if ix.Poisoned() {
			// A kept index that does not read: the spines are walked.
			if whole, err := buildSpineIndexWith(ix.env, nil, false); err == nil {
				return whole.Productions()
			}
			return nil
		}
		for _, r := range recs {
			if a := r.Artifact; a != nil {
				counts[[2]string{a.TaskID, a.Key}]++
			}
		}
	}
	out := make([]Production, 0, len(counts))
	for k, n := range counts {
		out = append(out, Production{URI: "bernstein://" + k[0] + "/" + k[1], Task: k[0], Key: k[1], Productions: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Task != out[j].Task {
			return out[i].Task < out[j].Task
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// checkSignature classifies a commit signature by writer: verified against
// a pinned key, against the published key only, no key known, or bad.
func checkSignature(env *Env, writer string, payload, armored []byte, when int64) (sigState, string) {
	jobs := []sigJob{{writer: writer, payload: payload, armored: armored, when: when}}
	checkSignatures(env, jobs)
	return jobs[0].state, jobs[0].reason
}

// checkSealSignature checks the detached sigstore signature a seal commit's
// tree carries over the seal entry, by the key that signed the commit.
func checkSealSignature(env *Env, armored []byte, tree gitstore.Oid, entry []byte) error {
	es, err := readTree(env.Objects, tree)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Name != record.SealSignatureFile {
			continue
		}
		data, err := env.Objects.ReadType(e.ID, gitstore.TypeBlob)
		if err != nil {
			return err
		}
		sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
		if err != nil {
			return fmt.Errorf("seal signature: %v", err)
		}
		claimed, _, err := keys.CommitSigner(armored)
		if err != nil {
			return err
		}
		if err := keys.VerifyDetached(claimed, entry, sig); err != nil {
			return fmt.Errorf("detached seal signature does not verify: %v", err)
		}
		return nil
	}
	return fmt.Errorf("seal commit carries no %s", record.SealSignatureFile)
}

func readTree(objs *gitstore.Repo, id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if id == gitstore.EmptyTree {
		return nil, nil
	}
	data, err := objs.ReadType(id, gitstore.TypeTree)
	if err != nil {
		return nil, err
	}
	return gitstore.ParseTree(data)
}

func i64(v int64) *int64 { return &v }

// sigPool checks signatures on all cores while the walk goes on.
type sigPool struct {
	jobs chan func()
	wg   sync.WaitGroup
}

func newSigPool() *sigPool {
	// A short queue: a walk that runs ahead of the checks waits rather
	// than holding the payloads of every batch it has read.
	p := &sigPool{jobs: make(chan func(), 2*runtime.GOMAXPROCS(0))}
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		go func() {
			for f := range p.jobs {
				f()
				p.wg.Done()
			}
		}()
	}
	return p
}

func (p *sigPool) do(f func()) {
	p.wg.Add(1)
	p.jobs <- f
}

func (p *sigPool) wait() { p.wg.Wait() }

func (p *sigPool) close() { close(p.jobs) }
