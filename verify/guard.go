package verify

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Update is one ref update: a push asks to move Ref from Old to New (a zero
// id on either side: the ref is created or deleted).
type Update struct {
	Ref      string
	Old, New gitstore.Oid
}

// Problem is one reason to refuse a push, with what it concerns; fields that
// do not apply are empty.
type Problem struct {
	Ref    string `json:"ref"`
	Task   string `json:"task,omitempty"`
	Writer string `json:"writer,omitempty"`
	Key    string `json:"key,omitempty"`   // SHA256 fingerprint of the key concerned
	Chain  string `json:"chain,omitempty"` // journal, ledger, spine or audit: what Index counts
	Index  *int64 `json:"index,omitempty"` // journal or ledger index, spine or audit seq
	Check  string `json:"check"`
	Reason string `json:"reason"`
	// Unverifiable marks a problem that is only a missing pin: the commits
	// check against the key their writer publishes, which nothing here
	// trusts. A guard refuses them all the same; audit verify counts them
	// unverifiable, not tampered.
	Unverifiable bool `json:"unverifiable,omitempty"`
}

// String is the problem as one line: the ref, then what in it, then why.
func (p Problem) String() string {
	var at []string
	if p.Task != "" {
		at = append(at, "task "+p.Task)
	}
	if p.Index != nil {
		pos := "index"
		if p.Chain == "spine" || p.Chain == "audit" || p.Chain == "anchors" {
			pos = "seq"
		}
		at = append(at, fmt.Sprintf("%s %s %d", p.Chain, pos, *p.Index))
	}
	if p.Writer != "" {
		at = append(at, "writer "+p.Writer)
	}
	if p.Key != "" {
		at = append(at, "key "+p.Key)
	}
	where := p.Ref
	if len(at) > 0 {
		where += " (" + strings.Join(at, ", ") + ")"
	}
	return fmt.Sprintf("%s: %s [%s]", where, p.Reason, p.Check)
}

// FirstUse is a writer key the guard took on first use: pinned when the
// push is accepted.
type FirstUse struct {
	Writer      string
	Key         string // authorized key line
	Fingerprint string
}

// Stats count what a check read, to show that its cost follows the push.
type Stats struct {
	Commits int // chain commits read (the push's and the lookups' into the refs already there)
}

// Result is what a check found.
type Result struct {
	Problems []Problem
	FirstUse []FirstUse
	Stats    Stats
	// Added counts the records the updates add, by chain (journal, ledger,
	// spine, audit).
	Added map[string]int
	// Versions are the artifact versions the updates add, by task, each with
	// the state its checks left it in.
	Versions map[string][]VersionState
	// TaskRows counts the journal and ledger rows the updates add, by task.
	TaskRows map[string][2]int64
	// Signatures and HMACs checked (HMACs only with Guard.MAC).
	SignaturesChecked, SignaturesUnpinned int
	HMACsChecked, HMACsNotChecked         int
}

// Guard checks ref updates of refs/bernstein/* before they land.
type Guard struct {
	// Objects must see the objects of the update (a push's quarantine) and
	// those already there.
	Objects *gitstore.Repo
	// Refs are the refs as they stand before the update.
	Refs refs.Source
	// Trust holds the pinned keys; a commit counts only when a pinned key
	// of its writer signed it.
	Trust *keys.TrustSet
	// TrustFirstUse pins the first key a writer publishes (on the remote
	// already, else in the update) when no key is pinned for it.
	TrustFirstUse bool
	// Local says that the check runs on what is about to leave a working
	// repository (pre-push), against that repository's trust: its advice
	// speaks of pinning there, not on a remote.
	Local bool
	// Repo is the directory of the repository the check runs in, named in
	// the remote guard's advice ('bernstein keys pin --repo DIR W'); ""
	// leaves it out.
	Repo string
	// MAC, when set, recomputes the HMAC of every audit entry the updates
	// add by a writer whose HMAC key is on this host (audit verify
	// --since); a remote has no such key.
	MAC map[string]MACChecker
	// Mirror checks the audit mirrors against what the updates add, both
	// ways, as audit verify checks them whole: every row and post added is
	// recorded by its writer's audit entries added, and every such entry
	// names a row or post added. Only for updates that cover whole writes
	// (every ref of a snapshot), never for a push of some refs.
	Mirror bool
	// Since names the audit checkpoint whose heads Refs are (audit verify
	// --since), for the reasons' wording.
	Since string
	// Fetch names the remote a fetch is about to move local refs to
	// (Refs are the local refs): a commit that checks only against the key
	// its writer publishes is looked into as a verified one is (it is
	// fetched, unverifiable, so that a later pin proves it), and the audit
	// mirrors' records of rows already here count, as do rows already here
	// that a record names.
	Fetch string
	// ReadPast are task refs (journal or ledger) a fetch reads past, their
	// chain on the remote or here not readable as one (docs/trust.md, Refs
	// that cannot be read): they do not move, and an entry that binds a
	// row of their task is not checked against them (the fetch names them
	// on their own).
	ReadPast map[string]bool
}

// readPast reports whether task's chains are read past (Guard.ReadPast).
func (g *Guard) readPast(task string) bool {
	return g.ReadPast[refs.Journal(task)] || g.ReadPast[refs.Ledger(task)]
}

// change names what the check looks at, as the subject of a reason: a
// push, or what the repository gained since an audit checkpoint.
func (g *Guard) change() string {
	if g.Since != "" {
		return "since audit checkpoint " + g.Since + ", the repository"
	}
	if g.Fetch != "" {
		return "fetching from " + g.Fetch
	}
	return "the push"
}

// changeNoun is change as an object.
func (g *Guard) changeNoun() string {
	if g.Since != "" {
		return "what was added since audit checkpoint " + g.Since
	}
	if g.Fetch != "" {
		return "this fetch"
	}
	return "this push"
}

// base names the head a ref had before the change.
func (g *Guard) base() string {
	if g.Since != "" {
		return "its head at audit checkpoint " + g.Since
	}
	if g.Fetch != "" {
		return "this host's head"
	}
	return "the remote's head"
}

// baseOwner is whose head a ref had before the change, as a possessive.
func (g *Guard) baseOwner() string {
	if g.Since != "" {
		return "audit checkpoint " + g.Since + "'s"
	}
	if g.Fetch != "" {
		return "this host's"
	}
	return "the remote's"
}

// baseRepo names the repository as it stood before the change.
func (g *Guard) baseRepo() string {
	if g.Since != "" {
		return "the repository at audit checkpoint " + g.Since
	}
	if g.Fetch != "" {
		return "this repository"
	}
	return "the remote"
}

// rewind says what a ref that does not extend its old head is.
func (g *Guard) rewind() string {
	if g.Since != "" {
		return "it was rolled back or rewritten"
	}
	if g.Fetch != "" {
		return "a fetch only moves a ref forward"
	}
	return "a forced push is refused"
}

// here says where the keys the check trusts are pinned.
func (g *Guard) here() string {
	if g.Local {
		return "in this repository"
	}
	return "on this remote"
}

// pinAdvice says what to do about writer w, whose key nobody pinned.
func (g *Guard) pinAdvice(w string) string {
	if g.Since != "" {
		return fmt.Sprintf("check its fingerprint with its owner ('bernstein keys list') and pin it here ('bernstein keys pin %s'): its rows are unverifiable until then", w)
	}
	if g.Fetch != "" {
		return fmt.Sprintf("its rows are fetched unverifiable: check its fingerprint with its owner ('bernstein keys list') and pin it here ('bernstein keys pin %s')", w)
	}
	if g.Local {
		return fmt.Sprintf("check its fingerprint with its owner ('bernstein keys list'), pin it here ('bernstein keys pin %s'), then push again", w)
	}
	repo := ""
	if g.Repo != "" {
		repo = "--repo " + shellWord(g.Repo) + " "
	}
	return fmt.Sprintf("the operator pins it inside the remote repository ('bernstein keys pin %s%s', after checking its fingerprint), or installs the guard with --trust-first-use", repo, w)
}

// shellWord quotes s for a shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Chain kinds of refs/bernstein/*.
const (
	kindJournal = "journal"
	kindLedger  = "ledger"
	kindSpine   = "spine"
	kindAudit   = "audit"
	kindWriter  = "writers"
	kindKeys    = "keys"
	kindAnchors = "anchors"
	// kindCheckpoints is a writer's log checkpoints (record.LogCheckpoint).
	kindCheckpoints = "checkpoints"
	// kindRepository is refs/bernstein/repository: the identity every chain
	// is rooted in, and the storage format.
	kindRepository = "repository"
)

// link is one commit of a pushed chain segment with its parsed record.
type link struct {
	id      gitstore.Oid
	commit  gitstore.Commit
	payload []byte
	rec     []byte
	pos     int64      // index or seq
	prev    string     // the record's link to the one before
	self    string     // what the next record's prev must be
	row     record.Row // journal and ledger
	entry   record.SpineEntry
	audit   record.AuditEntry
	anchor  record.Anchor
	// recWriter is the writer an anchor or checkpoint record names.
	recWriter string
	repo      record.RepositoryRecord
	writer    string      // the writer the committer names
	key       string      // fingerprint of the key that signed it ("" unsigned)
	proof     chain.Proof // signature verdict
}

// segment is what a push adds to one chain, oldest first.
type segment struct {
	u      Update
	kind   string
	task   string // journal, ledger
	writer string // spine, audit, writers
	keyHex string // writers: the key a format-2 writers ref is named for
	links  []*link
	ok     bool // the segment extends the old head and is structurally sound
	// fork is the writer of a fork of the task's chain (kind journal or
	// ledger), forkBase the rows it shares with the task's chain, and
	// diverges whether that chain holds other rows after them.
	fork     string
	forkBase int64
	diverges bool
	mainNext gitstore.Oid // the task chain's commit at index forkBase (zero: none)
	// via is the archive ref whose entry a journal or ledger segment's new
	// head is (the task's ref deleted or absent); archive is what verifying
	// an archive ref's commits found.
	via     string
	archive *ArchiveResult
}

type checker struct {
	g        *Guard
	res      *Result
	updates  map[string]Update
	segs     []*segment
	trusted  map[string][]ssh.PublicKey
	firstUse map[string]bool            // writers trusted only on first use (pinned so, or now)
	pushed   map[string][]ssh.PublicKey // keys the push publishes, by writer
	env      *Env
	binding  *Binding          // the identity the chains must be rooted in, after the push
	creators map[string]string // task -> the writer that signed its ledger's first row
	journals map[string]*segment
	ledgers  map[string]*segment
	forks    map[string][]*segment // fork segments, by writer and task ("w/T")
	spineBy  map[record.Hash]*link
	// On a fetch, what the audit mirrors and task chains already here
	// record (read once, only when a record is not among those added).
	baseAudit map[string]map[mirrored]bool
	baseRows  map[string]map[string]bool
	// deleted are the task refs the updates delete, each accepted only
	// when an archive names its chain after the update.
	deleted []*segment
}

// Check checks every update of a refs/bernstein/* ref; others pass. It reads
// the commits each update adds (from its new head back to its old one) and,
// to check what they bind, the few commits of the refs already there that
// they name; never the history as a whole.
func (g *Guard) Check(updates []Update) *Result {
	c := &checker{g: g, res: &Result{}, updates: map[string]Update{}, trusted: map[string][]ssh.PublicKey{}, firstUse: map[string]bool{},
		pushed: map[string][]ssh.PublicKey{}, journals: map[string]*segment{}, ledgers: map[string]*segment{}, forks: map[string][]*segment{}, spineBy: map[record.Hash]*link{},
		creators: map[string]string{}}
	for _, w := range g.Trust.Writers() {
		c.trusted[w] = append([]ssh.PublicKey(nil), g.Trust.Trusted(w)...)
		c.firstUse[w] = g.Trust.FirstUseOnly(w)
	}
	sorted := append([]Update(nil), updates...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Ref < sorted[j].Ref })
	for _, u := range sorted {
		if !strings.HasPrefix(u.Ref, refs.Prefix) {
			continue
		}
		c.updates[u.Ref] = u
		if s := c.classify(u); s != nil {
			c.segs = append(c.segs, s)
		}
	}
	// Structure first: which commits each update adds, and whether they
	// chain; then whose keys count; then signatures, content and bindings.
	for _, s := range c.segs {
		c.walk(s)
	}
	c.checkForks()
	c.takeFirstUse()
	c.buildEnv()
	if c.checkArchives() {
		c.buildEnv() // the keys of the chains the archives name
	}
	for _, s := range c.segs {
		switch s.kind {
		case kindWriter:
			c.checkWriterRef(s)
		case kindKeys:
			c.checkKeysRef(s)
		case kindArchive:
		default:
			c.checkSignatures(s)
		}
	}
	c.checkRepository()
	c.checkRoots()
	for _, s := range c.segs {
		if !s.ok {
			continue
		}
		switch s.kind {
		case kindJournal:
			c.checkJournal(s)
		case kindLedger:
			c.checkLedger(s)
		case kindSpine:
			c.checkSpine(s)
		case kindAnchors:
			c.checkAnchors(s)
		case kindCheckpoints:
			c.checkCheckpoints(s)
		}
		if s.kind == kindJournal || s.kind == kindLedger {
			c.checkOwner(s)
		}
	}
	c.count()
	if c.g.MAC != nil {
		c.checkMACs()
	}
	if c.g.Mirror {
		c.checkMirror()
	}
	c.versions()
	return c.res
}

// count sums up what the updates add and the signatures checked.
func (c *checker) count() {
	c.res.Added = map[string]int{}
	c.res.TaskRows = map[string][2]int64{}
	for _, s := range c.segs {
		if (s.kind == kindJournal || s.kind == kindLedger) && s.fork == "" {
			n := c.res.TaskRows[s.task]
			if s.kind == kindJournal {
				n[0] += int64(len(s.links))
			} else {
				n[1] += int64(len(s.links))
			}
			c.res.TaskRows[s.task] = n
		}
		switch s.kind {
		case kindJournal, kindLedger, kindSpine, kindAudit:
		default:
			continue
		}
		c.res.Added[s.kind] += len(s.links)
		for _, l := range s.links {
			c.res.SignaturesChecked++
			if l.proof.State == Unverifiable {
				c.res.SignaturesUnpinned++
			}
		}
	}
}

// checkMACs recomputes the HMACs of the audit entries added.
func (c *checker) checkMACs() {
	for _, s := range c.segs {
		if s.kind != kindAudit {
			continue
		}
		mac := c.g.MAC[s.writer]
		for _, l := range s.links {
			if mac == nil {
				c.res.HMACsNotChecked++
				continue
			}
			c.res.HMACsChecked++
			if !mac.CheckMAC(l.audit.MACBytes(), l.audit.HMAC) {
				c.at(s, l, "audit_hmac", "HMAC does not recompute")
			}
		}
	}
}

// mirrored is one audit record of a row or post: who recorded it, the
// event and the resource (the row hash, or a post's spine entry hash).
type mirrored struct{ writer, event, resource string }

// checkMirror checks the audit entries added against the rows and spine
// entries added, both ways. A row and its audit entry are written in one
// transaction, so each added row is recorded by an added entry; an added
// entry whose row is not among those added names a row its chain lost.
func (c *checker) checkMirror() {
	recorded := map[mirrored]bool{}
	for _, s := range c.segs {
		if s.kind != kindAudit || !s.ok {
			continue
		}
		for _, l := range s.links {
			recorded[mirrored{s.writer, l.audit.Event, l.audit.Resource}] = true
		}
	}
	held := map[mirrored]string{} // the task of each row or post added
	for _, s := range c.segs {
		if !s.ok || s.kind != kindJournal && s.kind != kindLedger {
			continue
		}
		for _, l := range s.links {
			m := mirrored{l.proof.Writer, l.row.Kind, l.self}
			if l.row.Kind == record.KindArtifactPosted {
				var a record.ArtifactPosted
				if l.row.DecodeData(&a) != nil {
					continue // RowContent reported it
				}
				m = mirrored{l.proof.Writer, record.EventArtifactPosted, string(a.SpineEntryHash)}
			}
			held[m] = s.task
			if !recorded[m] && !c.baseRecorded(m) {
				c.at(s, l, "audit_mirror", fmt.Sprintf("%s row at %s index %d: the audit mirror of writer %s does not record it", l.row.Kind, s.kind, l.pos, orNone(m.writer)))
			}
		}
	}
	for _, s := range c.segs {
		if s.kind != kindAudit || !s.ok {
			continue
		}
		for _, l := range s.links {
			a := l.audit
			if a.Event != record.EventArtifactPosted && !ledgerEvents[a.Event] && !workEvents[a.Event] {
				continue
			}
			if task, ok := held[mirrored{s.writer, a.Event, a.Resource}]; ok && task == a.TaskID {
				continue
			}
			if c.baseHolds(s.writer, a) {
				continue
			}
			p := Problem{Ref: s.u.Ref, Task: a.TaskID, Writer: s.writer, Chain: kindAudit, Index: i64(l.pos), Check: "audit_mirror",
				Reason: fmt.Sprintf("audit entry %s/%d records %s %s of task %s, which the task's chains do not hold", s.writer, l.pos, a.Event, a.Resource, a.TaskID)}
			c.problem(p)
		}
	}
}

// baseRecorded reports, on a fetch, whether the audit mirror already here
// records m: a row added whose entry this host fetched before. Only a
// repository a torn fetch of an earlier version left so needs it, so the
// mirror is read whole, once.
func (c *checker) baseRecorded(m mirrored) bool {
	if c.g.Fetch == "" || refs.ValidateWriter(m.writer) != nil {
		return false
	}
	if c.baseAudit == nil {
		c.baseAudit = map[string]map[mirrored]bool{}
	}
	set, ok := c.baseAudit[m.writer]
	if !ok {
		set = map[mirrored]bool{}
		head, err := c.base(refs.Audit(m.writer))
		for id := head; err == nil && !id.IsZero(); {
			cc, err := c.read(id)
			if err != nil {
				break
			}
			a, err := record.ParseAuditEntry(cc.Record)
			if err != nil {
				break
			}
			set[mirrored{m.writer, a.Event, a.Resource}] = true
			if len(cc.Commit.Parents) == 0 {
				break
			}
			id = cc.Commit.Parents[0]
		}
		c.baseAudit[m.writer] = set
	}
	return set[m]
}

// baseHolds reports, on a fetch, whether the chains already here hold
// what audit entry a of writer records: a post's spine entry of its task,
// a transition's ledger row, a work row's journal row.
func (c *checker) baseHolds(writer string, a record.AuditEntry) bool {
	if c.g.Fetch == "" {
		return false
	}
	if a.Event == record.EventArtifactPosted {
		e, _ := c.spineEntry(writer, record.Hash(a.Resource), true)
		return e != nil && e.Artifact != nil && e.Artifact.TaskID == a.TaskID
	}
	kind := kindJournal
	if ledgerEvents[a.Event] {
		kind = kindLedger
	}
	if refs.ValidateTaskID(a.TaskID) != nil {
		return false
	}
	ref := refs.Journal(a.TaskID)
	if kind == kindLedger {
		ref = refs.Ledger(a.TaskID)
	}
	if c.forkHolds(writer, kind, a.TaskID, record.Hash(a.Resource)) {
		return true
	}
	if c.baseRows == nil {
		c.baseRows = map[string]map[string]bool{}
	}
	set, ok := c.baseRows[ref]
	if !ok {
		set = map[string]bool{}
		head, err := c.base(ref)
		for id := head; err == nil && !id.IsZero(); {
			cc, err := c.read(id)
			if err != nil {
				break
			}
			set[string(record.Sum(cc.Record))] = true
			if len(cc.Commit.Parents) == 0 {
				break
			}
			id = cc.Commit.Parents[0]
		}
		c.baseRows[ref] = set
	}
	return set[a.Resource]
}

// forkHolds reports whether writer's forks of task's chain of kind, as
// they will be after the update, hold the row hashing to h.
func (c *checker) forkHolds(writer, kind, task string, h record.Hash) bool {
	if refs.ValidateWriter(writer) != nil || !c.forkPairDiverges(writer, task) {
		return false
	}
	for _, s := range c.forks[writer+"/"+task] {
		if s.kind != kind || !s.ok {
			continue
		}
		for _, l := range s.links {
			if record.Hash(l.self) == h {
				return true
			}
		}
	}
	vals, names, err := c.g.Refs.List(refs.ForkPrefix(writer, kind, task))
	if err != nil {
		return false
	}
	for _, n := range names {
		_, _, _, base, _ := refs.ParseFork(n)
		for id := vals[n]; !id.IsZero(); {
			cc, err := c.read(id)
			if err != nil {
				break
			}
			l, err := parse(kind, cc)
			if err != nil || l.pos < base {
				break
			}
			if record.Hash(l.self) == h {
				return true
			}
			if len(cc.Commit.Parents) == 0 {
				break
			}
			id = cc.Commit.Parents[0]
		}
	}
	return false
}

// versions lists the artifact versions added, by task, with their states:
// tampered where a problem names the row (or its spine entry does not bind
// it), unverifiable where only a pin is missing, verified otherwise.
func (c *checker) versions() {
	c.res.Versions = map[string][]VersionState{}
	type at struct {
		ref   string
		index int64
	}
	faults := map[at]Problem{}
	for _, p := range c.res.Problems {
		if p.Index != nil {
			if _, ok := faults[at{p.Ref, *p.Index}]; !ok || !p.Unverifiable {
				faults[at{p.Ref, *p.Index}] = p
			}
		}
	}
	for _, s := range c.segs {
		if s.kind != kindJournal || s.fork != "" {
			continue
		}
		for _, l := range s.links {
			var a record.ArtifactPosted
			if l.row.Kind != record.KindArtifactPosted || l.row.DecodeData(&a) != nil {
				continue
			}
			v := VersionState{Key: a.Key, Version: a.Version, JournalIndex: l.pos, State: Verified}
			if p, ok := faults[at{s.u.Ref, l.pos}]; ok {
				v.State, v.Reason = Tampered, p.Reason
				if p.Unverifiable {
					v.State = Unverifiable
				}
			} else if l.proof.State != Verified {
				v.State, v.Reason = l.proof.State, l.proof.Reason
			}
			c.res.Versions[s.task] = append(c.res.Versions[s.task], v)
		}
	}
}

func (c *checker) problem(p Problem) { c.res.Problems = append(c.res.Problems, p) }

// at is a problem located at one commit of a segment.
func (c *checker) at(s *segment, l *link, check, reason string) {
	p := Problem{Ref: s.u.Ref, Task: s.task, Writer: s.writer, Chain: s.kind, Check: check, Reason: reason}
	if l != nil {
		p.Index = i64(l.pos)
		if l.writer != "" {
			p.Writer = l.writer
		}
		p.Key = l.key
	}
	if s.kind == kindWriter || s.kind == kindKeys {
		p.Chain, p.Index = "", nil
	}
	c.problem(p)
}

// classify names what an update's ref holds and refuses deletions and
// names bernstein does not write.
func (c *checker) classify(u Update) *segment {
	s := &segment{u: u}
	rest := strings.TrimPrefix(u.Ref, refs.Prefix)
	kind, name, _ := strings.Cut(rest, "/")
	var err error
	switch {
	case rest == kindKeys:
		s.kind = kindKeys
	case rest == kindRepository:
		s.kind = kindRepository
	case kind == kindJournal || kind == kindLedger:
		s.kind = kind
		s.task, err = refs.UnescapeTask(name)
	case kind == "forks":
		s.fork, s.kind, s.task, s.forkBase, err = refs.ParseFork(u.Ref)
		s.writer = s.fork
	case kind == kindSpine || kind == kindAudit || kind == kindAnchors || kind == kindCheckpoints:
		s.kind = kind
		s.writer, err = name, refs.ValidateWriter(name)
	case kind == kindWriter:
		s.kind = kind
		s.writer, s.keyHex, err = refs.ParseWriterRef(u.Ref)
	case kind == kindArchive:
		s.kind = kind
		s.writer, err = name, refs.ValidateWriter(name)
	default:
		c.problem(Problem{Ref: u.Ref, Check: "ref_name", Reason: "bernstein writes no such ref (journal/, ledger/, spine/, audit/, writers/, anchors/, checkpoints/, archive/, forks/, keys or repository)"})
		return nil
	}
	if err != nil {
		c.problem(Problem{Ref: u.Ref, Check: "ref_name", Reason: err.Error()})
		return nil
	}
	if u.New.IsZero() && (s.kind == kindJournal || s.kind == kindLedger) && s.fork == "" && !u.Old.IsZero() {
		// Accepted only when an archive names the chain (checkDeletions).
		c.deleted = append(c.deleted, s)
		return nil
	}
	if u.New.IsZero() {
		c.problem(Problem{Ref: u.Ref, Task: s.task, Writer: s.writer, Check: "deletion",
			Reason: fmt.Sprintf("%s deletes %s (at %s): bernstein refs only grow and are never deleted", c.g.change(), u.Ref, short(u.Old))})
		return nil
	}
	return s
}

func short(id gitstore.Oid) string { return id.String()[:12] }

// read reads one chain commit, counting it.
func (c *checker) read(id gitstore.Oid) (chain.Commit, error) {
	c.res.Stats.Commits++
	return chain.Read(c.g.Objects, id)
}

// parse reads a chain commit's record as kind's record type.
func parse(kind string, cc chain.Commit) (*link, error) {
	l := &link{id: cc.ID, commit: cc.Commit, payload: cc.Payload, rec: cc.Record}
	l.writer, _ = CommitWriter(cc.Commit.Committer)
	if len(cc.Commit.Signature) > 0 {
		if k, _, err := keys.CommitSigner(cc.Commit.Signature); err == nil {
			l.key = ssh.FingerprintSHA256(k)
		}
	}
	switch kind {
	case kindJournal, kindLedger:
		row, err := record.ParseRow(cc.Record)
		if err != nil {
			return l, err
		}
		l.row, l.pos, l.prev, l.self = row, row.Index, string(row.Prev), string(record.Sum(cc.Record))
	case kindSpine:
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil {
			return l, err
		}
		l.entry, l.pos, l.prev, l.self = e, e.Header.Seq, string(e.Header.Prev), string(e.Hash)
	case kindAudit:
		a, err := record.ParseAuditEntry(cc.Record)
		if err != nil {
			return l, err
		}
		l.audit, l.pos, l.prev, l.self = a, a.Seq, a.PrevHMAC, a.HMAC
	case kindRepository:
		r, err := record.ParseRepositoryRecord(cc.Record)
		if err != nil {
			return l, err
		}
		l.repo, l.pos, l.prev, l.self = r, r.Seq, string(r.Prev), string(record.Sum(cc.Record))
	}
	if l.pos < 0 {
		return l, fmt.Errorf("%s %d is negative", posName(kind), l.pos)
	}
	return l, nil
}

// maxKeyCommits bounds the walk of a writers or keys ref (one commit per
// published key).
const maxKeyCommits = 64

// walk collects the commits an update adds, newest to oldest, and checks
// that they extend the old head and chain. A journal or ledger row carries
// its index and an entry its seq, so the walk knows how many commits to
// read: new index minus old index. It stops at the first commit that does
// not sit where the chain says, so a head that lies about its index cannot
// make it read the history.
func (c *checker) walk(s *segment) {
	u := s.u
	if u.New == u.Old {
		s.ok = true
		return
	}
	if s.kind == kindWriter || s.kind == kindKeys {
		c.walkKeys(s)
		return
	}
	if s.kind == kindAnchors || s.kind == kindCheckpoints {
		c.walkAnchors(s)
		return
	}
	if s.kind == kindArchive {
		return // checkArchives, once the keys are known
	}
	chainName := s.kind
	from := u.Old
	if s.fork != "" && u.Old.IsZero() {
		// A new fork is read from where it meets the task's chain: what
		// it costs follows the rows that differ.
		var ok bool
		if from, ok = c.forkStart(s); !ok {
			return
		}
		if from == u.New {
			c.problem(Problem{Ref: u.Ref, Task: s.task, Writer: s.fork, Check: "fork_base",
				Reason: fmt.Sprintf("the fork holds no row after the %d it shares with task %s's %s: it records no divergence", s.forkBase, s.task, s.kind)})
			return
		}
	}
	nonFF := func(why string) {
		if s.kind == kindRepository {
			if rival, base := c.repositoryID(u.New), c.repositoryID(u.Old); rival != "" && base != "" && rival != base {
				// Not a rewind: another repository's identity.
				c.problem(Problem{Ref: u.Ref, Check: CheckRepositoryIdentity,
					Reason: fmt.Sprintf("%s brings repository %s over repository %s: another repository's identity (minted by an init that had not fetched this remote's refs/bernstein/*); clone this remote again and init there", c.g.change(), rival, base)})
				return
			}
		}
		if s.via != "" {
			c.problem(Problem{Ref: u.Ref, Task: s.task, Writer: s.writer, Check: "non_fast_forward",
				Reason: fmt.Sprintf("%s names task %s's %s at %s where %s had %s, %s: an archive may only take a chain at its head or one extending it (a rollback)", s.via, s.task, s.kind, short(u.New), c.g.baseRepo(), short(u.Old), why)})
			return
		}
		c.problem(Problem{Ref: u.Ref, Task: s.task, Writer: s.writer, Check: "non_fast_forward",
			Reason: fmt.Sprintf("%s moves %s from %s to %s, %s: bernstein chains only grow (%s)", c.g.change(), u.Ref, short(u.Old), short(u.New), why, c.g.rewind())})
	}
	oldPos, oldSelf := int64(-1), ""
	if !from.IsZero() {
		cc, err := c.read(from)
		if err != nil {
			c.problem(Problem{Ref: u.Ref, Task: s.task, Writer: s.writer, Check: chainName + "_chain", Reason: fmt.Sprintf("%s %s: %v", c.g.base(), short(from), err)})
			return
		}
		l, err := parse(s.kind, cc)
		if err != nil {
			c.problem(Problem{Ref: u.Ref, Task: s.task, Writer: s.writer, Check: chainName + "_chain", Reason: fmt.Sprintf("%s %s: %v", c.g.base(), short(from), err)})
			return
		}
		oldPos, oldSelf = l.pos, l.self
	}
	var newest []*link
	id := u.New
	want := int64(-1) // the position the next commit must have; -1 before the head is read
	for from.IsZero() || id != from {
		cc, err := c.read(id)
		if err != nil {
			c.broken(s, want, id, err.Error())
			return
		}
		l, err := parse(s.kind, cc)
		if err != nil {
			c.broken(s, want, id, err.Error())
			return
		}
		if want < 0 {
			// The new head: its position says how many commits the push
			// adds.
			if l.pos <= oldPos {
				nonFF(fmt.Sprintf("whose %s is %d, not after %s %d", posName(s.kind), l.pos, c.g.baseOwner(), oldPos))
				return
			}
			want = l.pos
		}
		if l.pos != want {
			c.at(s, l, chainName+"_chain", fmt.Sprintf("commit %s says %s %d where %s %d belongs", short(id), posName(s.kind), l.pos, posName(s.kind), want))
			return
		}
		if want == oldPos {
			// As many commits as the positions allow, and the remote's
			// head is not among them: another line of history.
			nonFF("which does not contain " + c.g.base())
			return
		}
		newest = append(newest, l)
		if len(cc.Commit.Parents) == 0 {
			if !from.IsZero() {
				nonFF("which does not contain " + c.g.base())
				return
			}
			if want != 0 {
				c.at(s, l, chainName+"_chain", fmt.Sprintf("the chain's first commit says %s %d", posName(s.kind), want))
				return
			}
			break
		}
		if want == 0 {
			c.at(s, l, chainName+"_chain", fmt.Sprintf("the commit at %s 0 has a parent", posName(s.kind)))
			return
		}
		id = cc.Commit.Parents[0]
		want--
	}
	if !from.IsZero() && want != oldPos {
		// The push's first commit sits right on the remote's head but
		// skips positions.
		c.at(s, newest[len(newest)-1], chainName+"_chain", fmt.Sprintf("commit %s says %s %d, but %s has %s %d", short(newest[len(newest)-1].id), posName(s.kind), want+1, c.g.base(), posName(s.kind), oldPos))
		return
	}
	// Oldest first; each record links to the one before.
	for i, j := 0, len(newest)-1; i < j; i, j = i+1, j-1 {
		newest[i], newest[j] = newest[j], newest[i]
	}
	s.links = newest
	prev := oldSelf
	for i, l := range newest {
		// A new chain's first record is rooted in the repository's identity
		// (checkRoots); the repository chain's own first record in "".
		if l.prev != prev && (i > 0 || !u.Old.IsZero() || s.kind == kindRepository) {
			c.at(s, l, chainName+"_chain", linkReason(s.kind))
			return
		}
		switch s.kind {
		case kindJournal, kindLedger:
			if l.row.TaskID != s.task {
				c.at(s, l, chainName+"_chain", fmt.Sprintf("row belongs to task %q", l.row.TaskID))
				return
			}
		case kindSpine:
			if l.entry.Header.Writer != s.writer {
				c.at(s, l, chainName+"_chain", fmt.Sprintf("entry names writer %q", l.entry.Header.Writer))
				return
			}
		case kindAudit:
			if l.audit.Writer != s.writer {
				c.at(s, l, chainName+"_chain", fmt.Sprintf("entry names writer %q", l.audit.Writer))
				return
			}
		case kindRepository:
			if l.writer != l.repo.Writer {
				c.at(s, l, chainName+"_chain", fmt.Sprintf("the commit names %s as its committer, not the record's writer %s", orNone(l.writer), l.repo.Writer))
				return
			}
		}
		prev = l.self
	}
	s.ok = true
	switch {
	case s.fork != "":
		c.forks[s.fork+"/"+s.task] = append(c.forks[s.fork+"/"+s.task], s)
		if u.Old.IsZero() {
			s.diverges = c.forkDiverges(s)
		}
	case s.kind == kindJournal:
		c.journals[s.task] = s
	case s.kind == kindLedger:
		c.ledgers[s.task] = s
	case s.kind == kindSpine:
		for _, l := range s.links {
			c.spineBy[l.entry.Hash] = l
		}
	}
}

// mainHead is the head of task's chain of kind once the update lands.
func (c *checker) mainHead(kind, task string) (gitstore.Oid, error) {
	ref := refs.Journal(task)
	if kind == kindLedger {
		ref = refs.Ledger(task)
	}
	if u, ok := c.updates[ref]; ok {
		return u.New, nil
	}
	return c.g.Refs.ReadOptional(ref)
}

// forkStart is where a new fork meets its task's chain: the chain's commit
// at index forkBase-1 (zero when the fork shares no row). It remembers the
// chain's commit after it, which a fork that diverges does not hold.
func (c *checker) forkStart(s *segment) (gitstore.Oid, bool) {
	fail := func(reason string) (gitstore.Oid, bool) {
		c.problem(Problem{Ref: s.u.Ref, Task: s.task, Writer: s.fork, Check: "fork_base", Reason: reason})
		return gitstore.ZeroOid, false
	}
	head, err := c.mainHead(s.kind, s.task)
	if err != nil {
		return fail(err.Error())
	}
	pos := int64(-1)
	if !head.IsZero() {
		cc, err := c.read(head)
		if err != nil {
			return fail(err.Error())
		}
		l, err := parse(s.kind, cc)
		if err != nil {
			return fail(err.Error())
		}
		pos = l.pos
	}
	if pos < s.forkBase-1 {
		return fail(fmt.Sprintf("the fork says it shares %d rows with task %s's %s, which holds %d", s.forkBase, s.task, s.kind, pos+1))
	}
	id := head
	for ; pos >= s.forkBase; pos-- {
		s.mainNext = id
		cc, err := c.read(id)
		if err != nil {
			return fail(err.Error())
		}
		if len(cc.Commit.Parents) == 0 {
			return fail(fmt.Sprintf("task %s's %s ends before index %d", s.task, s.kind, pos))
		}
		id = cc.Commit.Parents[0]
	}
	if s.forkBase == 0 {
		return gitstore.ZeroOid, true
	}
	return id, true
}

// forkDiverges reports whether a new fork segment holds other rows than
// its task's chain after the rows they share.
func (c *checker) forkDiverges(s *segment) bool {
	return !s.mainNext.IsZero() && len(s.links) > 0 && s.links[0].id != s.mainNext
}

// checkForks checks that each new fork records a divergence: it holds rows
// after the ones it shares, the first of them not the task's, and the
// writer's forks of the task diverge from it in one of its chains (a fork
// only ahead of the task's chain would hide rows the task lost).
func (c *checker) checkForks() {
	for _, ss := range c.forks {
		for _, s := range ss {
			if !s.ok || !s.u.Old.IsZero() {
				continue
			}
			fail := func(reason string) {
				c.problem(Problem{Ref: s.u.Ref, Task: s.task, Writer: s.fork, Check: "fork_base", Reason: reason})
			}
			switch {
			case len(s.links) == 0:
				fail(fmt.Sprintf("the fork holds no row after the %d it shares with task %s's %s", s.forkBase, s.task, s.kind))
			case s.links[0].id == s.mainNext:
				fail(fmt.Sprintf("the fork shares more than %d rows with task %s's %s: its name says where they part", s.forkBase, s.task, s.kind))
			case !c.forkPairDiverges(s.fork, s.task):
				fail(fmt.Sprintf("writer %s's forks of task %s hold no row in place of one of the task's: a fork records a divergence", s.fork, s.task))
			}
		}
	}
}

// forkPairDiverges reports whether writer's forks of task diverge from it:
// a new one in the update does, or one is there already (checked when it
// was created).
func (c *checker) forkPairDiverges(writer, task string) bool {
	for _, s := range c.forks[writer+"/"+task] {
		if s.diverges {
			return true
		}
	}
	for _, kind := range []string{kindJournal, kindLedger} {
		if _, names, err := c.g.Refs.List(refs.ForkPrefix(writer, kind, task)); err == nil && len(names) > 0 {
			return true
		}
	}
	return false
}

// forkRow finds the row at index of writer's fork of task's chain of kind,
// as it will be after the update: among the fork rows the update adds,
// else in the forks already there (as far back from their heads as the row
// is). Only a fork that records a divergence counts.
func (c *checker) forkRow(writer, kind, task string, index int64) *link {
	if refs.ValidateWriter(writer) != nil || !c.forkPairDiverges(writer, task) {
		return nil
	}
	for _, s := range c.forks[writer+"/"+task] {
		if s.kind == kind && s.ok && len(s.links) > 0 && index >= s.links[0].pos {
			if i := index - s.links[0].pos; i < int64(len(s.links)) {
				return s.links[i]
			}
		}
	}
	vals, names, err := c.g.Refs.List(refs.ForkPrefix(writer, kind, task))
	if err != nil {
		return nil
	}
	for _, n := range names {
		head := vals[n]
		if u, ok := c.updates[n]; ok {
			head = u.Old
		}
		for id := head; !id.IsZero(); {
			cc, err := c.read(id)
			if err != nil {
				break
			}
			l, err := parse(kind, cc)
			if err != nil || l.row.TaskID != task || l.pos < index {
				break
			}
			if l.pos == index {
				l.writer, _ = CommitWriter(cc.Commit.Committer)
				return l
			}
			if len(cc.Commit.Parents) == 0 {
				break
			}
			id = cc.Commit.Parents[0]
		}
	}
	return nil
}

// walkAnchors collects the commits an anchors ref update adds, newest to
// oldest, as walk does for a record chain: each anchor's seq says how many
// commits the update adds, and its first parent is the previous anchor
// (seq 0 has none: all its parents are the commits it keeps).
func (c *checker) walkAnchors(s *segment) {
	u := s.u
	nonFF := func(why string) {
		c.problem(Problem{Ref: u.Ref, Writer: s.writer, Check: "non_fast_forward",
			Reason: fmt.Sprintf("%s moves %s from %s to %s, %s: bernstein chains only grow (%s)", c.g.change(), u.Ref, short(u.Old), short(u.New), why, c.g.rewind())})
	}
	check := s.kind + "_chain"
	read := func(id gitstore.Oid) (*link, error) {
		c.res.Stats.Commits++
		cc, err := chain.ReadAnchor(c.g.Objects, id)
		if err != nil {
			return nil, err
		}
		l := &link{id: id, commit: cc.Commit, payload: cc.Payload, rec: cc.Record}
		if s.kind == kindCheckpoints {
			if len(cc.Commit.Parents) > 1 {
				return nil, fmt.Errorf("commit %s: %w", id, chain.ErrNotLinear)
			}
			cp, err := record.ParseLogCheckpoint(cc.Record)
			if err != nil {
				return nil, err
			}
			l.recWriter, l.pos = cp.Writer, cp.Seq
		} else {
			a, err := record.ParseAnchor(cc.Record)
			if err != nil {
				return nil, err
			}
			l.anchor, l.recWriter, l.pos = a, a.Writer, a.Seq
		}
		l.writer, _ = CommitWriter(cc.Commit.Committer)
		if len(cc.Commit.Signature) > 0 {
			if k, _, err := keys.CommitSigner(cc.Commit.Signature); err == nil {
				l.key = ssh.FingerprintSHA256(k)
			}
		}
		return l, nil
	}
	oldPos := int64(-1)
	if !u.Old.IsZero() {
		l, err := read(u.Old)
		if err != nil {
			c.problem(Problem{Ref: u.Ref, Writer: s.writer, Check: check, Reason: fmt.Sprintf("%s %s: %v", c.g.base(), short(u.Old), err)})
			return
		}
		oldPos = l.pos
	}
	var newest []*link
	want := int64(-1)
	for id := u.New; u.Old.IsZero() || id != u.Old; {
		l, err := read(id)
		if err != nil {
			c.broken(s, want, id, err.Error())
			return
		}
		if want < 0 {
			if l.pos <= oldPos {
				nonFF(fmt.Sprintf("whose seq is %d, not after %s %d", l.pos, c.g.baseOwner(), oldPos))
				return
			}
			want = l.pos
		}
		if l.pos != want {
			c.at(s, l, check, fmt.Sprintf("commit %s says seq %d where seq %d belongs", short(id), l.pos, want))
			return
		}
		if want == oldPos {
			nonFF("which does not contain " + c.g.base())
			return
		}
		if l.recWriter != s.writer {
			c.at(s, l, check, fmt.Sprintf("%s names writer %q", strings.TrimSuffix(s.kind, "s"), l.recWriter))
			return
		}
		newest = append(newest, l)
		if want == 0 {
			if !u.Old.IsZero() {
				nonFF("which does not contain " + c.g.base())
				return
			}
			break
		}
		if len(l.commit.Parents) == 0 {
			c.at(s, l, check, fmt.Sprintf("the anchor at seq %d has no previous anchor", want))
			return
		}
		id = l.commit.Parents[0]
		want--
	}
	if !u.Old.IsZero() && want != oldPos {
		c.at(s, newest[len(newest)-1], check, fmt.Sprintf("commit %s says seq %d, but %s has seq %d", short(newest[len(newest)-1].id), want+1, c.g.base(), oldPos))
		return
	}
	for i, j := 0, len(newest)-1; i < j; i, j = i+1, j-1 {
		newest[i], newest[j] = newest[j], newest[i]
	}
	s.links = newest
	s.ok = true
}

// checkCheckpoints checks each new checkpoint commit's tree: the signed
// checkpoint, as one file. What it says (its signatures, the spine's root)
// every reader checks against its own trust (docs/trust.md, Witnesses).
func (c *checker) checkCheckpoints(s *segment) {
	for _, l := range s.links {
		es, err := c.readTree(l.commit.Tree)
		if err == nil && (len(es) != 1 || es[0].Name != record.CheckpointFile || es[0].Mode != gitstore.ModeFile) {
			err = fmt.Errorf("its tree holds %d entries; a checkpoint's holds one file, %s", len(es), record.CheckpointFile)
		}
		if err != nil {
			c.at(s, l, "checkpoints_chain", fmt.Sprintf("commit %s: %v", short(l.id), err))
		}
	}
}

func (c *checker) readTree(id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	data, err := c.g.Objects.ReadType(id, gitstore.TypeTree)
	if err != nil {
		return nil, err
	}
	return gitstore.ParseTree(data)
}

// checkAnchors checks what each new anchor keeps: commits of the project
// (never one of bernstein's own record commits), under an empty tree.
func (c *checker) checkAnchors(s *segment) {
	for _, l := range s.links {
		if l.commit.Tree != gitstore.EmptyTree {
			c.at(s, l, "anchors_chain", fmt.Sprintf("commit %s: an anchor's tree is the empty tree", short(l.id)))
		}
		kept := l.commit.Parents
		if l.pos > 0 && len(kept) > 0 {
			kept = kept[1:]
		}
		for _, id := range kept {
			c.res.Stats.Commits++
			data, err := c.g.Objects.ReadType(id, gitstore.TypeCommit)
			if err == nil {
				var cm gitstore.Commit
				if cm, err = gitstore.ParseCommitLinks(data); err == nil {
					var why string
					if why, err = chain.RecordShape(c.g.Objects, cm); err == nil && why != "" {
						err = fmt.Errorf("it is one of bernstein's own record commits (%s)", why)
					}
				}
			}
			if err != nil {
				c.at(s, l, "anchors_chain", fmt.Sprintf("anchor %s keeps commit %s: %v", short(l.id), short(id), err))
			}
		}
	}
}

func posName(kind string) string {
	if kind == kindSpine || kind == kindAudit || kind == kindAnchors || kind == kindCheckpoints {
		return "seq"
	}
	return "index"
}

func linkReason(kind string) string {
	switch kind {
	case kindAudit:
		return "prev_hmac does not link to the entry before it"
	case kindSpine:
		return "entry's prev does not link to the entry before it"
	}
	return "row's prev does not link to the row before it"
}

// broken reports a commit of a segment that cannot be read as its chain's
// record.
func (c *checker) broken(s *segment, pos int64, id gitstore.Oid, reason string) {
	reason = fmt.Sprintf("commit %s: %s", short(id), reason)
	if s.task != "" && (s.kind == kindJournal || s.kind == kindLedger) {
		// A task ref that cannot be read as its chain, named as every
		// reader names it (docs/trust.md, Refs that cannot be read).
		reason = refs.BadRef{Ref: s.u.Ref, At: s.u.New, Reason: reason}.String()
	}
	p := Problem{Ref: s.u.Ref, Task: s.task, Writer: s.writer, Chain: s.kind, Check: s.kind + "_chain", Reason: reason}
	if pos >= 0 {
		p.Index = i64(pos)
	}
	c.problem(p)
}

// walkKeys collects the commits a writers or keys ref update adds.
func (c *checker) walkKeys(s *segment) {
	u := s.u
	var newest []*link
	for id := u.New; ; {
		if id == u.Old {
			break
		}
		if len(newest) == maxKeyCommits {
			c.problem(Problem{Ref: u.Ref, Writer: s.writer, Check: "non_fast_forward",
				Reason: fmt.Sprintf("%s moves %s from %s to %s, which does not extend it within %d commits", c.g.change(), u.Ref, short(u.Old), short(u.New), maxKeyCommits)})
			return
		}
		c.res.Stats.Commits++
		data, err := c.g.Objects.ReadType(id, gitstore.TypeCommit)
		if err != nil {
			c.problem(Problem{Ref: u.Ref, Writer: s.writer, Check: "key_record", Reason: fmt.Sprintf("commit %s: %v", short(id), err)})
			return
		}
		cm, payload, err := gitstore.ParseCommit(data)
		if err != nil {
			c.problem(Problem{Ref: u.Ref, Writer: s.writer, Check: "key_record", Reason: fmt.Sprintf("commit %s: %v", short(id), err)})
			return
		}
		l := &link{id: id, commit: cm, payload: payload}
		l.writer, _ = CommitWriter(cm.Committer)
		newest = append(newest, l)
		if len(cm.Parents) == 0 {
			if !u.Old.IsZero() {
				c.problem(Problem{Ref: u.Ref, Writer: s.writer, Check: "non_fast_forward",
					Reason: fmt.Sprintf("%s moves %s from %s to %s, which does not contain %s: bernstein refs only grow (%s)", c.g.change(), u.Ref, short(u.Old), short(u.New), c.g.base(), c.g.rewind())})
				return
			}
			break
		}
		id = cm.Parents[0]
	}
	for i, j := 0, len(newest)-1; i < j; i, j = i+1, j-1 {
		newest[i], newest[j] = newest[j], newest[i]
	}
	s.links = newest
	s.ok = true
	if s.kind == kindWriter {
		if k, _, err := c.writerKey(s.writer, u.New); err == nil && (s.keyHex == "" || refs.KeyHex(k.Marshal()) == s.keyHex) {
			c.pushed[s.writer] = append(c.pushed[s.writer], k)
		}
	}
}

// writerKey reads the key the writers ref commit id publishes for writer,
// with the allowed_signers file it carries.
func (c *checker) writerKey(writer string, id gitstore.Oid) (ssh.PublicKey, []byte, error) {
	data, err := c.g.Objects.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return nil, nil, err
	}
	cm, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return nil, nil, err
	}
	es, err := c.tree(cm.Tree)
	if err != nil {
		return nil, nil, err
	}
	var pub ssh.PublicKey
	var signers []byte
	for _, e := range es {
		switch e.Name {
		case writer + ".pub":
			b, err := c.g.Objects.ReadType(e.ID, gitstore.TypeBlob)
			if err != nil {
				return nil, nil, err
			}
			if pub, _, _, _, err = ssh.ParseAuthorizedKey(b); err != nil {
				return nil, nil, fmt.Errorf("%s.pub: %v", writer, err)
			}
		case allowedSignersFile:
			if signers, err = c.g.Objects.ReadType(e.ID, gitstore.TypeBlob); err != nil {
				return nil, nil, err
			}
		}
	}
	if pub == nil {
		return nil, nil, fmt.Errorf("the commit publishes no %s.pub", writer)
	}
	return pub, signers, nil
}

// allowedSignersFile is the file of a writers ref that plain git's
// verify-commit reads (bernstein.AllowedSignersFile).
const allowedSignersFile = "allowed_signers"

func (c *checker) tree(id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if id == gitstore.EmptyTree {
		return nil, nil
	}
	data, err := c.g.Objects.ReadType(id, gitstore.TypeTree)
	if err != nil {
		return nil, err
	}
	return gitstore.ParseTree(data)
}

// basePublished reads the keys the refs already there publish for writer:
// its writers refs (one per key from format 2 on), else the legacy keys
// ref.
func (c *checker) basePublished(writer string) []ssh.PublicKey {
	var out []ssh.PublicKey
	if k := c.baseLegacyRef(writer); k != nil {
		out = append(out, k)
	}
	vals, names, err := c.g.Refs.List(refs.WritersPrefix)
	if err == nil {
		for _, n := range names {
			w, keyHex, err := refs.ParseWriterRef(n)
			if err != nil || w != writer || keyHex == "" {
				continue
			}
			head := vals[n]
			if u, ok := c.updates[n]; ok {
				head = u.Old
			}
			if head.IsZero() {
				continue
			}
			if k, _, err := c.writerKey(writer, head); err == nil && refs.KeyHex(k.Marshal()) == keyHex {
				out = append(out, k)
			}
		}
	}
	if len(out) == 0 {
		if k := c.legacyKey(writer, func() (gitstore.Oid, error) { return c.base(refs.Keys) }); k != nil {
			out = append(out, k)
		}
	}
	return out
}

// baseLegacyRef reads the key refs/bernstein/writers/<writer> (format 1)
// publishes before the push, nil when none.
func (c *checker) baseLegacyRef(writer string) ssh.PublicKey {
	head, err := c.base(refs.Writer(writer))
	if err == nil && !head.IsZero() {
		if k, _, err := c.writerKey(writer, head); err == nil {
			return k
		}
	}
	return nil
}

// legacyKey reads <writer>.pub of the keys ref commit head names.
func (c *checker) legacyKey(writer string, head func() (gitstore.Oid, error)) ssh.PublicKey {
	id, err := head()
	if err != nil || id.IsZero() {
		return nil
	}
	keys, err := c.legacyKeys(id)
	if err != nil {
		return nil
	}
	return keys[writer]
}

// legacyKeys reads every <writer>.pub of a keys ref commit.
func (c *checker) legacyKeys(id gitstore.Oid) (map[string]ssh.PublicKey, error) {
	data, err := c.g.Objects.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return nil, err
	}
	cm, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return nil, err
	}
	es, err := c.tree(cm.Tree)
	if err != nil {
		return nil, err
	}
	out := map[string]ssh.PublicKey{}
	for _, e := range es {
		w, ok := strings.CutSuffix(e.Name, ".pub")
		if !ok || refs.ValidateWriter(w) != nil {
			continue
		}
		b, err := c.g.Objects.ReadType(e.ID, gitstore.TypeBlob)
		if err != nil {
			return nil, err
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", e.Name, err)
		}
		out[w] = k
	}
	return out, nil
}

// base is a ref's value before the update.
func (c *checker) base(ref string) (gitstore.Oid, error) {
	if u, ok := c.updates[ref]; ok {
		return u.Old, nil
	}
	return c.g.Refs.ReadOptional(ref)
}

// takeFirstUse binds, for every writer that has no pinned key and whose
// chain commits the push carries, the key that signs the first of them,
// when that key is published under the writer's name (on the remote
// already, or by the push). A publication alone binds nothing: anyone may
// publish a key under any name (a claim), and a squatter's key, published
// before the writer's first push, must not take the name from it. The key
// is pinned marked "first use": the writer may act only on the tasks it
// creates (checkOwner).
func (c *checker) takeFirstUse() {
	if !c.g.TrustFirstUse {
		return
	}
	var order []string
	first := map[string]ssh.PublicKey{}
	for _, s := range c.segs {
		if s.kind == kindWriter || s.kind == kindKeys {
			continue
		}
		for _, l := range s.links {
			w := l.writer
			if w == "" || len(c.trusted[w]) > 0 || first[w] != nil || len(l.commit.Signature) == 0 {
				continue
			}
			k, _, err := keys.CommitSigner(l.commit.Signature)
			if err != nil {
				continue
			}
			published := append(append([]ssh.PublicKey(nil), c.basePublished(w)...), c.pushed[w]...)
			if !slices.ContainsFunc(published, func(p ssh.PublicKey) bool { return bytes.Equal(p.Marshal(), k.Marshal()) }) {
				continue
			}
			first[w] = k
			order = append(order, w)
		}
	}
	sort.Strings(order)
	for _, w := range order {
		k := first[w]
		c.trusted[w] = []ssh.PublicKey{k}
		c.firstUse[w] = true
		c.res.FirstUse = append(c.res.FirstUse, FirstUse{Writer: w, Key: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))), Fingerprint: ssh.FingerprintSHA256(k)})
	}
}

// buildEnv makes the verification environment of the trusted keys: the
// pinned ones (with their restrictions) and those taken on first use.
// Published keys only tell an unpinned writer from a forged signature in
// the messages.
func (c *checker) buildEnv() {
	var as []keys.AllowedSigner
	for _, w := range c.g.Trust.Writers() {
		as = append(as, c.g.Trust.Entries(w)...)
	}
	for _, f := range c.res.FirstUse {
		k := c.trusted[f.Writer][0]
		as = append(as, keys.AllowedSigner{Principals: []string{keys.Principal(f.Writer)}, Namespaces: []string{keys.Namespace}, Key: k, FirstUse: true})
	}
	published := map[string][]ssh.PublicKey{}
	for _, s := range c.segs {
		for _, l := range s.links {
			if l.writer == "" || published[l.writer] != nil {
				continue
			}
			published[l.writer] = append(append([]ssh.PublicKey(nil), c.pushed[l.writer]...), c.basePublished(l.writer)...)
		}
		if s.kind == kindArchive && published[s.writer] == nil {
			published[s.writer] = append(append([]ssh.PublicKey(nil), c.pushed[s.writer]...), c.basePublished(s.writer)...)
		}
	}
	c.env = &Env{Objects: c.g.Objects, Trust: keys.NewTrustSet(as, nil), Published: published}
	// The identity the chains are rooted in: the one the push brings, else
	// the remote's.
	head, err := c.base(refs.Repository)
	if u, ok := c.updates[refs.Repository]; ok && !u.New.IsZero() {
		head = u.New
	}
	if err != nil {
		c.binding = &Binding{Problem: err.Error()}
		return
	}
	c.binding = LoadBinding(c.env, head)
}

func (c *checker) isTrusted(writer string, k ssh.PublicKey) bool {
	for _, t := range c.trusted[writer] {
		if bytes.Equal(t.Marshal(), k.Marshal()) {
			return true
		}
	}
	return false
}

// checkSignatures checks that a pinned key of the writer the ref belongs to
// (spine, audit) or the committer names (journal, ledger) signed every
// commit the push adds.
func (c *checker) checkSignatures(s *segment) {
	check := map[string]string{kindJournal: "row_signature", kindLedger: "row_signature", kindSpine: "spine_signature", kindAudit: "audit_signature", kindAnchors: "anchor_signature", kindCheckpoints: "checkpoint_signature"}[s.kind]
	// A writer with no pinned key is one problem per ref, not one per commit.
	unpinned := map[string][]*link{}
	var order []string
	defer func() {
		for _, w := range order {
			ls := unpinned[w]
			more := ""
			if len(ls) > 1 {
				more = fmt.Sprintf(" (and %d more commits of %s after this one)", len(ls)-1, c.g.changeNoun())
			}
			c.at(s, ls[0], check, fmt.Sprintf("writer %s has no key pinned %s%s: %s", w, c.g.here(), more, c.g.pinAdvice(w)))
			c.res.Problems[len(c.res.Problems)-1].Unverifiable = true
		}
	}()
	for _, l := range s.links {
		l.proof = ProveCommit(c.env, l.commit, l.payload)
		if (s.kind == kindSpine || s.kind == kindAudit || s.kind == kindAnchors || s.kind == kindCheckpoints) && l.writer != s.writer {
			c.at(s, l, check, fmt.Sprintf("the commit names %s as its committer, not the ref's writer %s", orNone(l.writer), s.writer))
			l.proof.State = Tampered
			continue
		}
		switch l.proof.State {
		case Verified:
		case Unverifiable:
			if unpinned[l.proof.Writer] == nil {
				order = append(order, l.proof.Writer)
			}
			unpinned[l.proof.Writer] = append(unpinned[l.proof.Writer], l)
		default:
			c.at(s, l, check, l.proof.Reason)
		}
	}
}

func orNone(w string) string {
	if w == "" {
		return "no writer"
	}
	return w
}

// checkWriterRef checks a writers ref update: every commit publishes one
// key and is signed by it, and its allowed_signers file names that key
// only. A format-2 ref is named for its key: it publishes that key and no
// other, so a second key under a writer's name is a second ref, a claim
// that takes nothing from the first (only pinned keys write chains). A
// format-1 ref (refs/bernstein/writers/<writer>) is the name's one ref:
// its key must be the one the remote published before, and the pinned one.
func (c *checker) checkWriterRef(s *segment) {
	if !s.ok {
		return
	}
	w := s.writer
	old := c.baseLegacyRef(w)
	for _, l := range s.links {
		k, signers, err := c.writerKey(w, l.id)
		if err != nil {
			c.at(s, l, "key_record", fmt.Sprintf("commit %s: %v", short(l.id), err))
			continue
		}
		fp := ssh.FingerprintSHA256(k)
		at := func(check, reason string) {
			c.problem(Problem{Ref: s.u.Ref, Writer: w, Key: fp, Check: check, Reason: reason})
		}
		switch {
		case s.keyHex != "":
			if refs.KeyHex(k.Marshal()) != s.keyHex {
				at("key_record", fmt.Sprintf("commit %s publishes %s in a ref named for another key", short(l.id), fp))
			}
		case len(c.trusted[w]) > 0 && !c.isTrusted(w, k):
			at("key_substitution", fmt.Sprintf("%s publishes %s as writer %s's key, but %s is pinned for it %s: a substituted key is refused", c.g.change(), fp, w, fingerprints(c.trusted[w]), c.g.here()))
		case old != nil && !bytes.Equal(old.Marshal(), k.Marshal()):
			at("key_substitution", fmt.Sprintf("%s publishes %s as writer %s's key, but %s publishes %s for it: a writer id has one key per ref", c.g.change(), fp, w, c.g.baseRepo(), ssh.FingerprintSHA256(old)))
		}
		if l.writer != w {
			at("key_signature", fmt.Sprintf("commit %s names %s as its committer, not writer %s", short(l.id), orNone(l.writer), w))
		} else if len(l.commit.Signature) == 0 {
			at("key_signature", fmt.Sprintf("commit %s is not signed", short(l.id)))
		} else if err := keys.VerifyCommit(l.payload, l.commit.Signature, k); err != nil {
			at("key_signature", fmt.Sprintf("commit %s is not signed by the key it publishes: %v", short(l.id), err))
		}
		want := keys.AllowedSignersLine(w, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))) + "\n"
		if string(signers) != want {
			at("key_record", fmt.Sprintf("commit %s: its %s file does not name exactly the key it publishes, as git verify-commit would read it", short(l.id), allowedSignersFile))
		}
	}
}

// repositoryID is the id the repository record at commit id names ("" when
// it cannot be read).
func (c *checker) repositoryID(id gitstore.Oid) string {
	if id.IsZero() {
		return ""
	}
	cc, err := c.read(id)
	if err != nil {
		return ""
	}
	r, err := record.ParseRepositoryRecord(cc.Record)
	if err != nil {
		return ""
	}
	return r.ID
}

// checkRepository checks an update of refs/bernstein/repository: it keeps
// the remote's id and never lowers the format (a chain with another id is
// another repository: git refuses it as no fast-forward, and the guard
// says why), and a trusted writer signed it (checkSignatures).
func (c *checker) checkRepository() {
	for _, s := range c.segs {
		if s.kind != kindRepository || !s.ok || len(s.links) == 0 {
			continue
		}
		id, format := "", 0
		if !s.u.Old.IsZero() {
			cc, err := c.read(s.u.Old)
			if err == nil {
				if r, err := record.ParseRepositoryRecord(cc.Record); err == nil {
					id, format = r.ID, r.Format
				}
			}
		}
		for _, l := range s.links {
			if id != "" && l.repo.ID != id {
				c.at(s, l, CheckRepositoryIdentity, fmt.Sprintf("%s names repository %s, but %s is repository %s", c.g.change(), l.repo.ID, c.g.baseRepo(), id))
				s.ok = false
				return
			}
			if l.repo.Format < format {
				c.at(s, l, CheckRepositoryIdentity, fmt.Sprintf("the record at seq %d lowers the storage format from %d to %d", l.pos, format, l.repo.Format))
				s.ok = false
				return
			}
			id, format = l.repo.ID, l.repo.Format
		}
	}
}

// checkRoots checks the first record of every chain the push starts: it
// must be rooted in the repository's identity (the one the push brings, or
// the remote's), so that a task, spine or audit mirror copied from another
// repository (even one the same writer serves) is refused.
func (c *checker) checkRoots() {
	for _, s := range c.segs {
		if !s.ok || !s.u.Old.IsZero() || len(s.links) == 0 || s.fork != "" && s.forkBase > 0 {
			continue // a fork that shares rows starts on the task's chain, not at its root
		}
		var kind, name string
		switch s.kind {
		case kindJournal, kindLedger:
			kind, name = s.kind, s.task
		case kindSpine, kindAudit:
			kind, name = s.kind, s.writer
		default:
			continue
		}
		l := s.links[0]
		if why := c.binding.CheckRoot(kind, name, l.id, l.prev); why != "" {
			c.at(s, l, CheckRepositoryBinding, why)
			s.ok = false
			if s.fork == "" {
				delete(c.journals, s.task)
				delete(c.ledgers, s.task)
			}
		}
	}
}

// checkOwner refuses rows of a task's journal or ledger signed by a writer
// trusted only on first use, when another writer created the task: a
// writer whose key nobody checked may act on its own tasks and on no
// other's (docs/trust.md, Trust on first use).
func (c *checker) checkOwner(s *segment) {
	for _, l := range s.links {
		w := l.proof.Writer
		if l.proof.State != Verified || !c.firstUse[w] {
			continue
		}
		creator, ok := c.creator(s.task)
		if ok && creator == w {
			continue
		}
		who := "a writer the guard cannot name"
		if ok {
			who = "writer " + orNone(creator)
		}
		c.at(s, l, CheckTaskOwner, fmt.Sprintf("writer %s is trusted only on first use, so it may act only on the tasks it created; task %s was created by %s", w, s.task, who))
		return
	}
}

// creator is the writer that signed the first row of task's ledger: in
// the push, else the remote's, walked back from its head (a ledger is
// short; only a first-use writer's rows make the guard look).
func (c *checker) creator(task string) (string, bool) {
	if w, ok := c.creators[task]; ok {
		return w, w != ""
	}
	w := ""
	if l, _ := c.findRow(kindLedger, task, 0, true); l != nil {
		w = l.writer
	}
	c.creators[task] = w
	return w, w != ""
}

func fingerprints(ks []ssh.PublicKey) string {
	var out []string
	for _, k := range ks {
		out = append(out, ssh.FingerprintSHA256(k))
	}
	return strings.Join(out, ", ")
}

// checkKeysRef checks an update of the legacy keys ref: no key it publishes
// for a writer may differ from that writer's pinned key.
func (c *checker) checkKeysRef(s *segment) {
	if !s.ok {
		return
	}
	ks, err := c.legacyKeys(s.u.New)
	if err != nil {
		c.at(s, nil, "key_record", fmt.Sprintf("commit %s: %v", short(s.u.New), err))
		return
	}
	names := make([]string, 0, len(ks))
	for w := range ks {
		names = append(names, w)
	}
	sort.Strings(names)
	for _, w := range names {
		k := ks[w]
		if len(c.trusted[w]) > 0 && !c.isTrusted(w, k) {
			c.problem(Problem{Ref: s.u.Ref, Writer: w, Key: ssh.FingerprintSHA256(k), Check: "key_substitution",
				Reason: fmt.Sprintf("%s publishes %s as writer %s's key, but %s is pinned for it %s: a substituted key is refused", c.g.change(), ssh.FingerprintSHA256(k), w, fingerprints(c.trusted[w]), c.g.here())})
		}
	}
}

// verified reports whether a commit's signature checked: only then does the
// guard look into the refs already there for what it binds, so an unsigned
// forgery cannot make it read far.
func verified(l *link) bool { return l.proof.State == Verified }

// far reports whether the guard looks into the refs already there for what
// l binds: for a verified commit, and on a fetch for one that checks
// against its writer's published key too (it is fetched unverifiable).
func (c *checker) far(l *link) bool {
	return verified(l) || c.g.Fetch != "" && l.proof.State == Unverifiable
}

// checkJournal checks what each new journal row stores and binds.
func (c *checker) checkJournal(s *segment) {
	type latest struct {
		version int64
		spine   record.Hash
	}
	keysSeen := map[string]latest{}
	for _, l := range s.links {
		for _, f := range RowContent(c.g.Objects, l.row, l.commit.Tree) {
			c.at(s, l, f.Check, f.Reason)
		}
		if l.row.Kind != record.KindArtifactPosted {
			continue
		}
		var a record.ArtifactPosted
		if l.row.DecodeData(&a) != nil {
			continue // RowContent reported it
		}
		where := fmt.Sprintf("%s v%d at journal index %d", a.Key, a.Version, l.row.Index)
		// Versions of one key that the push adds follow each other; the
		// first one's predecessor is in history the guard does not read
		// (audit verify checks it), except that version 1 has none.
		if prev, ok := keysSeen[a.Key]; ok {
			if a.Version != prev.version+1 {
				c.at(s, l, "version_chain", fmt.Sprintf("%s: follows version %d", where, prev.version))
			} else if a.PrevVersionHash != prev.spine {
				c.at(s, l, "version_chain", fmt.Sprintf("%s: prev_version_hash does not name version %d's spine entry", where, prev.version))
			}
		} else if a.Version < 1 || a.Version == 1 && a.PrevVersionHash != "" {
			c.at(s, l, "version_chain", fmt.Sprintf("%s: version %d with prev_version_hash %q", where, a.Version, a.PrevVersionHash))
		}
		keysSeen[a.Key] = latest{a.Version, a.SpineEntryHash}
		// The spine entry must seal exactly this row.
		e, ew := c.spineEntry(l.proof.Writer, a.SpineEntryHash, c.far(l))
		if e == nil || e.Artifact == nil {
			c.at(s, l, "spine_binding", fmt.Sprintf("%s: no spine entry %s of writer %s", where, a.SpineEntryHash, orNone(l.proof.Writer)))
			continue
		}
		ver := &Version{Key: a.Key, Version: a.Version, ContentHash: a.ContentHash, PrevVersionHash: a.PrevVersionHash, JournalIndex: l.row.Index}
		if diff := BindingDiff(s.task, ver, l.row.Actor, l.proof.Writer, e.Artifact, ew); len(diff) > 0 {
			c.at(s, l, "spine_binding", fmt.Sprintf("%s: spine entry %s/%d binds a different %s", where, ew, e.Header.Seq, strings.Join(diff, ", ")))
		}
	}
}

// checkLedger checks that each new terminal transition seals the journal
// in the same writer's spine, as the write path does in one transaction.
func (c *checker) checkLedger(s *segment) {
	for _, l := range s.links {
		if !ledger.Terminal(ledger.PhaseOf(l.row.Kind)) {
			continue
		}
		if !c.sealFor(l.proof.Writer, s.task, l.row.Index, l.row.Kind, c.far(l)) {
			c.at(s, l, "journal_seal", fmt.Sprintf("the ledger records %s at index %d, but no spine entry of writer %s seals the journal there", l.row.Kind, l.row.Index, orNone(l.proof.Writer)))
		}
	}
}

// checkSpine checks that each new spine entry binds rows the journal and
// ledger hold: an artifact entry the row at its journal index, which must
// name it; a seal the journal's row count and head, and the ledger's
// terminal transition, with its detached signature.
func (c *checker) checkSpine(s *segment) {
	for _, l := range s.links {
		far := c.far(l)
		switch {
		case l.entry.Artifact != nil && c.g.readPast(l.entry.Artifact.TaskID),
			l.entry.Seal != nil && c.g.readPast(l.entry.Seal.TaskID):
			// The task's chain is read past: nothing to bind it to here.
		case l.entry.Artifact != nil:
			a := l.entry.Artifact
			what := fmt.Sprintf("spine entry %s/%d seals %s v%d of task %s at journal index %d", s.writer, a.Seq, a.Key, a.Version, a.TaskID, a.JournalIndex)
			rl, pushed := c.findRow(kindJournal, a.TaskID, a.JournalIndex, far)
			names := func(rl *link) bool {
				var d record.ArtifactPosted
				return rl != nil && rl.row.Kind == record.KindArtifactPosted && rl.row.DecodeData(&d) == nil && d.SpineEntryHash == l.entry.Hash
			}
			if !names(rl) && far {
				// The writer's chain diverged from the task's: the row is in
				// its fork.
				if fl := c.forkRow(s.writer, kindJournal, a.TaskID, a.JournalIndex); names(fl) {
					rl, pushed = fl, false
				}
			}
			if rl == nil {
				c.at(s, l, "spine_binding", what+", which the journal does not hold")
				continue
			}
			row, rowWriter := rl.row, rl.writer
			var d record.ArtifactPosted
			if !names(rl) {
				c.at(s, l, "spine_binding", what+", but the row there does not name this entry")
				continue
			}
			row.DecodeData(&d)
			if !pushed {
				// The row arrived earlier; the push's entry must bind it.
				ver := &Version{Key: d.Key, Version: d.Version, ContentHash: d.ContentHash, PrevVersionHash: d.PrevVersionHash, JournalIndex: row.Index}
				if diff := BindingDiff(a.TaskID, ver, row.Actor, rowWriter, a, s.writer); len(diff) > 0 {
					c.at(s, l, "spine_binding", fmt.Sprintf("%s, and binds a different %s", what, strings.Join(diff, ", ")))
				}
			}
		case l.entry.Seal != nil:
			seal := l.entry.Seal
			what := fmt.Sprintf("seal %s/%d of task %s", s.writer, seal.Seq, seal.TaskID)
			if far {
				if err := CheckSealSignature(c.env, l.commit, l.entry.Bytes); err != nil {
					c.at(s, l, "spine_signature", fmt.Sprintf("%s: %v", what, err))
				}
			}
			// A seal of a writer's chains that diverged from the task's
			// seals its forks.
			row := func(kind string, index int64, ok func(*link) bool) bool {
				if rl, _ := c.findRow(kind, seal.TaskID, index, far); rl != nil && ok(rl) {
					return true
				}
				return far && ok(c.forkRow(s.writer, kind, seal.TaskID, index))
			}
			if seal.Rows > 0 {
				if !row(kindJournal, seal.Rows-1, func(rl *link) bool { return rl != nil && record.Hash(rl.self) == seal.Head }) {
					c.at(s, l, "journal_seal", fmt.Sprintf("%s: the journal's row %d is not the sealed head (%d rows)", what, seal.Rows-1, seal.Rows))
				}
			} else if seal.Head != record.Hash(c.binding.Genesis(record.ChainJournal, seal.TaskID)) {
				c.at(s, l, "journal_seal", fmt.Sprintf("%s: seals no rows but names a head other than the journal's genesis", what))
			}
			if !row(kindLedger, seal.LedgerIndex, func(rl *link) bool { return rl != nil && rl.row.Kind == seal.Transition }) {
				c.at(s, l, "journal_seal", fmt.Sprintf("%s names %s at ledger index %d, which the ledger does not hold", what, seal.Transition, seal.LedgerIndex))
			}
		}
	}
}

// findRow finds the row at index of a task's journal or ledger as it will
// be after the push: among the rows the push adds, else (when far) walking
// back from the head already there, as far as the row is from that head. It
// also says whether the push adds the row.
func (c *checker) findRow(kind, task string, index int64, far bool) (*link, bool) {
	segs := c.journals
	ref := refs.Journal(task)
	if kind == kindLedger {
		segs, ref = c.ledgers, refs.Ledger(task)
	}
	if s := segs[task]; s != nil && len(s.links) > 0 && index >= s.links[0].pos {
		if i := index - s.links[0].pos; i < int64(len(s.links)) {
			return s.links[i], true
		}
		return nil, false
	}
	if !far {
		return nil, false
	}
	head, err := c.base(ref)
	if err != nil || head.IsZero() {
		return nil, false
	}
	for id := head; !id.IsZero(); {
		cc, err := c.read(id)
		if err != nil {
			return nil, false
		}
		l, err := parse(kind, cc)
		if err != nil || l.row.TaskID != task || l.pos < index {
			return nil, false
		}
		if l.pos == index {
			return l, false
		}
		if len(cc.Commit.Parents) == 0 {
			return nil, false
		}
		id = cc.Commit.Parents[0]
	}
	return nil, false
}

// spineEntry finds the spine entry with hash in writer's spine as it will be
// after the push: among the entries the push adds, else (when far) walking
// back from the head already there until it is found.
func (c *checker) spineEntry(writer string, hash record.Hash, far bool) (*record.SpineEntry, string) {
	if l := c.spineBy[hash]; l != nil {
		return &l.entry, l.entry.Header.Writer
	}
	if !far || refs.ValidateWriter(writer) != nil {
		return nil, ""
	}
	var found *record.SpineEntry
	c.walkBaseSpine(writer, func(e record.SpineEntry) bool {
		if e.Hash == hash {
			found = &e
			return false
		}
		return true
	})
	return found, writer
}

// sealFor reports whether writer's spine, as it will be after the push,
// holds a seal of task at ledger index and transition.
func (c *checker) sealFor(writer, task string, index int64, transition string, far bool) bool {
	match := func(e record.SpineEntry) bool {
		return e.Seal != nil && e.Seal.TaskID == task && e.Seal.LedgerIndex == index && e.Seal.Transition == transition
	}
	for _, l := range c.spineBy {
		if l.entry.Header.Writer == writer && match(l.entry) {
			return true
		}
	}
	if !far || refs.ValidateWriter(writer) != nil {
		return false
	}
	found := false
	c.walkBaseSpine(writer, func(e record.SpineEntry) bool {
		found = match(e)
		return !found
	})
	return found
}

// walkBaseSpine walks writer's spine as it was before the push, newest
// first, while fn returns true.
func (c *checker) walkBaseSpine(writer string, fn func(record.SpineEntry) bool) {
	head, err := c.base(refs.Spine(writer))
	if err != nil {
		return
	}
	for id := head; !id.IsZero(); {
		cc, err := c.read(id)
		if err != nil {
			return
		}
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil || !fn(e) || len(cc.Commit.Parents) == 0 {
			return
		}
		id = cc.Commit.Parents[0]
	}
}
