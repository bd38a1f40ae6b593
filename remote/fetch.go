package remote

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/wlog"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// FetchResult says what Fetch did.
type FetchResult struct {
	Remote    string      `json:"remote"`
	Created   []RefChange `json:"created"`   // refs this host did not have
	Forwarded []RefChange `json:"forwarded"` // refs fast-forwarded
	// Deleted are local refs of tasks an archive the fetch moved names at
	// the same head or one extending it (Old: the ref's value): the task
	// reads from the archive.
	Deleted  []RefChange `json:"deleted"`
	UpToDate int         `json:"up_to_date"`
	// LocalAhead are refs this host has newer than the remote: push them.
	LocalAhead []RefChange  `json:"local_ahead"`
	Diverged   []Divergence `json:"diverged"`
	// HeldBack are refs the fetch did not move to the remote's head (or
	// moved only part of the way): what it left holds commits that do not
	// verify here, or the remote's copy of one of this host's own chains
	// differs from what this host wrote, or (Moving) the remote kept moving
	// while it was read.
	HeldBack []HeldBack `json:"held_back"`
	// ReadPast are the refs whose chain, the remote's or this host's,
	// cannot be read as one (plain git moved the ref to a blob, a tree, a
	// tag, a missing object): each is also in HeldBack, and the rest moved
	// (docs/trust.md, Refs that cannot be read).
	ReadPast []refs.BadRef `json:"read_past"`
	// Fetches counts the git fetches made: more than one when the remote's
	// refs were read while a push was moving them.
	Fetches int `json:"fetches"`
	// Logs is what the checks of the other writers' logs found (none
	// without a configured witness; docs/trust.md, Witnesses).
	Logs []wlog.LogStatus `json:"logs,omitempty"`
	// Path is "narrow" when the fetch read the per-writer refs and the
	// tasks their new entries name (TasksNamed), "full" when it read every
	// refs/bernstein/* ref of the remote.
	Path       string `json:"path"`
	TasksNamed int    `json:"tasks_named"`
}

// HeldBack is a ref a fetch did not move all the way to the remote's head.
type HeldBack struct {
	RefInfo
	// Local is where the local ref stands after the fetch ("" none),
	// Remote the remote's head, which stays in the remote-tracking ref.
	Local  string `json:"local"`
	Remote string `json:"remote"`
	// Own marks one of this host's own chains (its spine, audit mirror,
	// key ref, anchors, forks), which only its writer moves.
	Own bool `json:"own"`
	// Moving marks refs held back because the remote kept changing while
	// the fetch read it (a push under way each time): fetch again.
	Moving bool `json:"moving"`
	// Unreadable marks a ref whose chain, the remote's or this host's,
	// cannot be read as one (FetchResult.ReadPast names it).
	Unreadable bool     `json:"unreadable"`
	Problems   []string `json:"problems"`
}

func (h HeldBack) String() string {
	switch {
	case h.Own:
		return fmt.Sprintf("held back: %s: the remote's head %s is not what this host's writer wrote (its head here: %s): the remote's copy was tampered with, or this writer identity writes on another host too; nothing moved", h.What(), shortID(h.Remote), shortID(h.Local))
	case h.Unreadable:
		return fmt.Sprintf("held back: %s at %s (the remote's head %s): it cannot be read as its chain; it stays where it is", h.What(), shortID(h.Local), shortID(h.Remote))
	case h.Moving:
		return fmt.Sprintf("held back: %s at %s (the remote's head %s): the remote kept moving while it was read; fetch again", h.What(), shortID(h.Local), shortID(h.Remote))
	}
	return fmt.Sprintf("held back: %s at %s: the remote's head %s holds commits that do not verify here", h.What(), shortID(h.Local), shortID(h.Remote))
}

// ErrHeldBack: a fetch left refs behind the remote's heads because what
// they hold does not verify (HeldBackError).
var ErrHeldBack = errors.New("held back")

// HeldBackError reports refs a fetch did not move all the way because the
// remote holds commits that do not verify here; everything else moved.
type HeldBackError struct {
	Remote   string
	HeldBack []HeldBack
}

func (e *HeldBackError) Error() string {
	n := 0
	for _, h := range e.HeldBack {
		if !h.Moving {
			n++
		}
	}
	return fmt.Sprintf("%s holds commits that do not verify here on %d ref%s, first %s: they stay in %s and nothing is built on them", e.Remote, n, plural(n), e.HeldBack[0].What(), TrackingPrefix(e.Remote))
}

// Is makes errors.Is(err, ErrHeldBack) hold.
func (e *HeldBackError) Is(target error) bool { return target == ErrHeldBack }

// Moved reports whether the fetch moved any local ref.
func (r *FetchResult) Moved() bool { return len(r.Created)+len(r.Forwarded)+len(r.Deleted) > 0 }

// maxFetches bounds the git fetches of one Fetch: the first, and one more
// each time the remote's refs were read while they moved.
const maxFetches = 5

// Fetch brings remote's refs/bernstein/* into the remote-tracking refs
// refs/bernstein-remotes/<remote>/*, then moves the local refs forward to
// them, in one ref transaction under the writer lock, as a post moves them.
//
// A ref moves only to commits that verify (verify.Guard, run as on a push
// with the host's own trust, the audit mirrors included): signed by a key
// this host trusts, or by the key its writer publishes (fetched
// unverifiable, for a later pin to prove), chaining, with every row, spine
// entry, seal and audit entry bound to what the fetch moves with it. What
// does not verify stays in the remote-tracking refs, with everything that
// depends on it, and is reported (HeldBack). This host's own chains (its
// spine, audit mirror, key ref, anchors and forks) are never moved by a
// fetch, only created where this host has none. A ref both sides moved
// (Diverged) does not move either.
//
// git reads a remote's refs one by one, so a fetch that runs while a push
// moves them can see half of that push: such a cut fails those checks, and
// Fetch fetches again (at most maxFetches times) until it reads the remote
// standing still; what the checks refuse then is the remote's. Either way
// readers see the fetch whole or not at all.
//
// The error is a *DivergedError when refs diverged, else a *HeldBackError
// when the remote holds what does not verify; the result says what moved.
func (s *Syncer) Fetch(remote string) (*FetchResult, error) {
	return s.FetchWith(remote, FetchOptions{})
}

// FetchOptions choose how a fetch reads the remote.
type FetchOptions struct {
	// Full fetches and compares every refs/bernstein/* ref of the remote
	// (the full path), as the first fetch from a remote does, instead of
	// the refs the remote's new spine and audit entries name (see
	// narrow.go).
	Full bool
}

// FetchWith is Fetch, reading the remote as o says.
func (s *Syncer) FetchWith(remote string, o FetchOptions) (*FetchResult, error) {
	if err := Check(s.c.GitDir, remote); err != nil {
		return nil, err
	}
	full := o.Full || !s.fetchedBefore(remote)
	var last map[string]gitstore.Oid // the remote's heads the last attempt found problems in
	for n := 1; ; n++ {
		var sc *fetchScope
		if !full {
			var err error
			if sc, err = s.fetchNarrow(remote); err != nil {
				return nil, err
			}
			full = sc == nil // past the narrow path's bounds
		}
		if full {
			if err := s.fetchTracking(remote, []string{"+" + refs.Prefix + "*:" + TrackingPrefix(remote) + "*"}, true); err != nil {
				return nil, err
			}
		}
		res, tracking, retry, err := s.fetchOnce(remote, n, last, sc)
		if retry {
			last = tracking
			continue
		}
		if res != nil {
			res.Fetches, res.Path = n, "full"
			if sc != nil {
				res.Path, res.TasksNamed = "narrow", sc.tasks
			}
		}
		return res, err
	}
}

// fetchOnce plans and verifies a fetch under the writer lock. When the
// checks found problems in what the remote held, and this read of the
// remote differs from the last one that did (or is the first), it moves
// nothing and asks for another fetch (retry): the remote may have been
// read mid-push.
func (s *Syncer) fetchOnce(remote string, n int, last map[string]gitstore.Oid, sc *fetchScope) (*FetchResult, map[string]gitstore.Oid, bool, error) {
	unlock, err := s.w.Lock()
	if err != nil {
		return nil, nil, false, err
	}
	defer unlock()
	for attempt := 0; ; attempt++ {
		p, err := s.planFetch(remote, sc)
		if err != nil {
			return nil, nil, false, err
		}
		moves, held, err := s.verifyMoves(remote, p)
		if err != nil {
			return nil, nil, false, err
		}
		if len(held) > 0 && n < maxFetches && !sameHeads(last, p.tracking) {
			return nil, p.tracking, true, nil
		}
		logs, lh, err := s.checkLogs(p.tracking, true)
		if errors.Is(err, wlog.ErrTampered) && n < maxFetches && !sameHeads(last, p.tracking) {
			// Read mid-push, a checkpoint can name entries of a spine not
			// read yet: read the remote again before calling it tampered.
			return nil, p.tracking, true, nil
		}
		if err != nil {
			return nil, nil, false, fmt.Errorf("%s: %w; nothing was fetched", remote, err)
		}
		dels, err := s.archivedLocal(p, moves)
		if err != nil {
			return nil, nil, false, err
		}
		moves = append(moves, dels...)
		res := s.fetchResult(remote, p, moves, held, n >= maxFetches && !sameHeads(last, p.tracking))
		res.Logs = logs
		err = s.w.ApplyLocked(moves)
		if errors.Is(err, refs.ErrConflict) && attempt < 5 {
			// A plain git process moved a ref (bernstein writers wait for the
			// lock we hold): plan again on the new heads.
			continue
		}
		if err != nil {
			return nil, nil, false, err
		}
		if err := s.rememberLogs(lh, logs); err != nil {
			return nil, nil, false, err
		}
		return res, nil, false, res.err()
	}
}

// err is the error a fetch with this result returns.
func (r *FetchResult) err() error {
	if len(r.Diverged) > 0 {
		return &DivergedError{Remote: r.Remote, Diverged: r.Diverged}
	}
	var bad []HeldBack
	for _, h := range r.HeldBack {
		if !h.Moving {
			bad = append(bad, h)
		}
	}
	if len(bad) > 0 {
		return &HeldBackError{Remote: r.Remote, HeldBack: bad}
	}
	return nil
}

func sameHeads(a, b map[string]gitstore.Oid) bool {
	if a == nil || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// fetchPlan is what a fetch would do before its checks.
type fetchPlan struct {
	local    *refs.Snapshot
	tracking map[string]gitstore.Oid // by local ref name
	cands    []refs.Update           // refs to create or fast-forward
	commits  map[string]int          // by ref: commits the remote has after this host's head
	upToDate int
	ahead    []RefChange
	diverged []Divergence
	own      []HeldBack // this host's own chains the remote has otherwise
	// unreadable are the refs whose chain, the remote's or this host's,
	// cannot be read as one (docs/trust.md, Refs that cannot be read):
	// read past, held back and named; the rest moves.
	unreadable []HeldBack
	bad        []refs.BadRef
	// view is what the checks read the refs from: local, or (task adopt)
	// local with the adopted task's refs at the remote's heads.
	view refs.Source
}

// ownRef reports whether ref is one of the chains only writer moves: its
// spine, audit mirror, key ref, anchors and forks.
func ownRef(ref, writer string) bool {
	if writer == "" {
		return false
	}
	switch ref {
	case refs.Spine(writer), refs.Audit(writer), refs.Anchors(writer), refs.Checkpoints(writer), refs.Archive(writer):
		return true
	}
	if isKeyRef(ref, writer) {
		return true
	}
	return strings.HasPrefix(ref, refs.ForksPrefix+writer+"/")
}

// planFetch compares the local refs with the remote-tracking ones: all of
// them, or (sc not nil) those of a narrow fetch's scope.
func (s *Syncer) planFetch(remote string, sc *fetchScope) (*fetchPlan, error) {
	scope := []string{refs.Prefix}
	tscope := []string{TrackingPrefix(remote)}
	if sc != nil {
		scope, tscope = sc.refs, sc.tracking(remote)
	}
	local, err := s.c.Refs.WithoutArchive().Snapshot(scope...) // the refs themselves: what the fetch moves
	if err != nil {
		return nil, err
	}
	tsnap, err := s.c.Refs.Snapshot(tscope...)
	if err != nil {
		return nil, err
	}
	tvals, names, err := snapshotRefs(tsnap, tscope)
	if err != nil {
		return nil, err
	}
	me := ""
	if id, err := s.c.Identity(); err == nil {
		me = id.Writer
	}
	p := &fetchPlan{local: local, tracking: map[string]gitstore.Oid{}, commits: map[string]int{}}
	if sc != nil {
		// The checks may read refs outside the scope (a spine entry's
		// task): under the writer lock the files read as the snapshot.
		p.view = lazyView{snap: local, r: s.c.Refs}
	}
	for _, tname := range names {
		ref := refs.Prefix + strings.TrimPrefix(tname, TrackingPrefix(remote))
		theirs := tvals[tname]
		if theirs.IsLooseStandIn() {
			// Text written over a remote-tracking ref's loose file: git
			// passed over it (it rewrites what the remote still has), so
			// the remote no longer has the ref. A hint: it goes.
			s.dropGarbledTracking(tname, theirs)
			continue
		}
		p.tracking[ref] = theirs
		mine, err := local.ReadOptional(ref)
		var bad *refs.BadRefError
		if errors.As(err, &bad) {
			// This host's journal or ledger's loose file holds no object
			// id (text written over it with plain git): read past, named,
			// and it stays as it is, the evidence; the rest moves.
			p.readPast(ref, "", theirs, bad.BadRef)
			continue
		}
		if err != nil {
			return nil, err
		}
		if mine.IsZero() {
			if _, err := s.parentOf(theirs); unreadableObject(err) {
				p.readPast(ref, "", theirs, refs.BadRef{Ref: ref, At: theirs, Reason: err.Error()})
				continue
			}
			// Created: also one of this host's own chains, which a host that
			// lost its repository gets back from the remote, once it verifies.
			p.cands = append(p.cands, refs.Update{Ref: ref, New: theirs})
			continue
		}
		a, err := s.relate(mine, theirs)
		if unreadableObject(err) {
			// A chain that cannot be read as one (the remote's ref moved
			// with plain git to a blob, a tree, a missing object, or this
			// host's): read past, named, and the ref stays; the rest moves.
			at := theirs
			if _, e := s.parentOf(theirs); !unreadableObject(e) {
				if _, e := s.parentOf(mine); unreadableObject(e) {
					at = mine
				}
			}
			p.readPast(ref, mine.String(), theirs, refs.BadRef{Ref: ref, At: at, Reason: err.Error()})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		switch {
		case a.rel == relSame:
			p.upToDate++
		case a.rel == relAhead:
			p.ahead = append(p.ahead, RefChange{RefInfo: DescribeRef(ref), Old: theirs.String(), New: mine.String(), Commits: a.localOnly})
		case a.rel == relDiverged:
			p.diverged = append(p.diverged, divergence(remote, ref, mine, theirs, a))
		case ownRef(ref, me):
			// The remote has commits on a chain only this host's writer
			// writes, which it did not write here: never taken.
			p.own = append(p.own, HeldBack{RefInfo: DescribeRef(ref), Local: mine.String(), Remote: theirs.String(), Own: true,
				Problems: []string{fmt.Sprintf("%s holds %d commit%s after this host's head that this host's writer did not write here", remote, a.remoteOnly, plural(a.remoteOnly))}})
		default:
			p.cands = append(p.cands, refs.Update{Ref: ref, Old: mine, New: theirs})
			p.commits[ref] = a.remoteOnly
		}
	}
	return p, nil
}

// readPast holds ref back, at local, naming b: its chain cannot be read.
func (p *fetchPlan) readPast(ref, local string, theirs gitstore.Oid, b refs.BadRef) {
	p.unreadable = append(p.unreadable, HeldBack{RefInfo: DescribeRef(ref), Local: local, Remote: theirs.String(), Unreadable: true, Problems: []string{b.String()}})
	p.bad = append(p.bad, b)
}

// verifyMoves runs the guard's checks on the planned moves and takes back,
// until none is refused, each ref to the last commit before its first
// problem (or leaves it where it is). What a writer only published a key
// for (unverifiable) is no problem. It returns the moves and, by ref, the
// problems that held refs back.
func (s *Syncer) verifyMoves(remote string, p *fetchPlan) ([]refs.Update, map[string][]verify.Problem, error) {
	trust, err := s.c.Trust()
	if err != nil {
		return nil, nil, err
	}
	held := map[string][]verify.Problem{}
	readPast := map[string]bool{}
	for _, b := range p.bad {
		readPast[b.Ref] = true
	}
	cur := append([]refs.Update(nil), p.cands...)
	for len(cur) > 0 {
		us := make([]verify.Update, len(cur))
		for i, u := range cur {
			us[i] = verify.Update{Ref: u.Ref, Old: u.Old, New: u.New}
		}
		view := p.view
		if view == nil {
			view = p.local
		}
		g := &verify.Guard{Objects: s.c.Objects, Refs: view, Trust: trust, Local: true, Mirror: true, Fetch: remote, ReadPast: readPast}
		byRef := map[string][]verify.Problem{}
		for _, pr := range g.Check(us).Problems {
			if !pr.Unverifiable {
				byRef[pr.Ref] = append(byRef[pr.Ref], pr)
			}
		}
		if len(byRef) == 0 {
			break
		}
		// A head that carries no record (a commit appended with plain git)
		// is taken back first, alone: the other refused refs may only have
		// failed for want of what it hid, and are checked again after.
		junk := map[string]bool{}
		for _, u := range cur {
			if _, ok := s.position(u.Ref, u.New); byRef[u.Ref] != nil && !ok {
				junk[u.Ref] = true
			}
		}
		var next []refs.Update
		for _, u := range cur {
			ps := byRef[u.Ref]
			if ps == nil || len(junk) > 0 && !junk[u.Ref] {
				next = append(next, u)
				continue
			}
			if junk[u.Ref] {
				// What follows from the junk head is checked again.
				var own []verify.Problem
				for _, p := range ps {
					if p.Index == nil {
						own = append(own, p)
					}
				}
				ps = own
			}
			held[u.Ref] = append(held[u.Ref], ps...)
			to, ok := s.before(u, ps)
			if ok {
				next = append(next, refs.Update{Ref: u.Ref, Old: u.Old, New: to})
			}
		}
		cur = next
	}
	return cur, held, nil
}

// before is the commit of u's chain just before the first of problems,
// when that is past u.Old: a fetch moves a ref that far and no further.
func (s *Syncer) before(u refs.Update, problems []verify.Problem) (gitstore.Oid, bool) {
	if _, ok := s.position(u.Ref, u.New); !ok {
		// A head that carries no record at all (a commit appended with
		// plain git), which the other problems may only follow from: try
		// the commit under it, and the checks run again.
		if parent, err := s.parentOf(u.New); err == nil && !parent.IsZero() && parent != u.Old {
			return parent, true
		}
		return gitstore.ZeroOid, false
	}
	first := int64(-1)
	for _, p := range problems {
		if p.Index == nil {
			return gitstore.ZeroOid, false // the ref as a whole
		}
		if first < 0 || *p.Index < first {
			first = *p.Index
		}
	}
	oldPos := int64(-1)
	if !u.Old.IsZero() {
		at, ok := s.position(u.Ref, u.Old)
		if !ok {
			return gitstore.ZeroOid, false
		}
		oldPos = at
	}
	if first-1 <= oldPos {
		return gitstore.ZeroOid, false
	}
	id := u.New
	at, ok := s.position(u.Ref, id)
	if !ok || at < first-1 {
		return gitstore.ZeroOid, false
	}
	for ; at > first-1; at-- {
		p, err := s.parentOf(id)
		if err != nil || p.IsZero() {
			return gitstore.ZeroOid, false
		}
		id = p
	}
	if pos, ok := s.position(u.Ref, id); !ok || pos != first-1 {
		return gitstore.ZeroOid, false
	}
	return id, true
}

// position is the index or seq the record of ref's commit id says it has.
func (s *Syncer) position(ref string, id gitstore.Oid) (int64, bool) {
	read := chain.Read
	if strings.HasPrefix(ref, refs.AnchorsPrefix) || isArchiveRef(ref) {
		read = chain.ReadAnchor // the record in the commit's message
	}
	cc, err := read(s.c.Objects, id)
	if err != nil {
		return 0, false
	}
	switch {
	case strings.HasPrefix(ref, refs.SpinePrefix):
		e, err := record.ParseSpineEntry(cc.Record)
		return e.Header.Seq, err == nil
	case strings.HasPrefix(ref, refs.AuditPrefix):
		a, err := record.ParseAuditEntry(cc.Record)
		return a.Seq, err == nil
	case strings.HasPrefix(ref, refs.AnchorsPrefix):
		a, err := record.ParseAnchor(cc.Record)
		return a.Seq, err == nil
	case isArchiveRef(ref):
		a, err := record.ParseArchive(cc.Record)
		return a.Seq, err == nil
	case strings.HasPrefix(ref, refs.CheckpointsPrefix):
		a, err := record.ParseLogCheckpoint(cc.Record)
		return a.Seq, err == nil
	case strings.HasPrefix(ref, refs.JournalPrefix), strings.HasPrefix(ref, refs.LedgerPrefix), strings.HasPrefix(ref, refs.ForksPrefix):
		r, err := record.ParseRow(cc.Record)
		return r.Index, err == nil
	}
	return 0, false
}

// fetchResult is what a fetch that makes moves reports. moving marks the
// refs held back while the remote kept changing under the fetches.
func (s *Syncer) fetchResult(remote string, p *fetchPlan, moves []refs.Update, held map[string][]verify.Problem, moving bool) *FetchResult {
	res := &FetchResult{Remote: remote, Created: []RefChange{}, Forwarded: []RefChange{}, Deleted: []RefChange{}, UpToDate: p.upToDate,
		LocalAhead: p.ahead, Diverged: p.diverged, HeldBack: append(append([]HeldBack(nil), p.own...), p.unreadable...)}
	if res.LocalAhead == nil {
		res.LocalAhead = []RefChange{}
	}
	if res.Diverged == nil {
		res.Diverged = []Divergence{}
	}
	if res.HeldBack == nil {
		res.HeldBack = []HeldBack{}
	}
	res.ReadPast = append([]refs.BadRef{}, p.bad...)
	moved := map[string]refs.Update{}
	for _, u := range moves {
		if u.New.IsZero() {
			res.Deleted = append(res.Deleted, RefChange{RefInfo: DescribeRef(u.Ref), Old: u.Old.String()})
			continue
		}
		moved[u.Ref] = u
		c := RefChange{RefInfo: DescribeRef(u.Ref), Old: oidOrEmpty(u.Old), New: u.New.String(), Commits: p.commits[u.Ref]}
		if u.Old.IsZero() {
			res.Created = append(res.Created, c)
			continue
		}
		if u.New != p.tracking[u.Ref] {
			if a, err := s.relate(u.Old, u.New); err == nil {
				c.Commits = a.remoteOnly
			}
		}
		res.Forwarded = append(res.Forwarded, c)
	}
	for _, u := range p.cands {
		ps, ok := held[u.Ref]
		if !ok {
			continue
		}
		at := u.Old
		if m, ok := moved[u.Ref]; ok {
			at = m.New
		}
		h := HeldBack{RefInfo: DescribeRef(u.Ref), Local: oidOrEmpty(at), Remote: u.New.String(), Moving: moving, Problems: []string{}}
		for _, pr := range ps {
			h.Problems = append(h.Problems, pr.String())
		}
		res.HeldBack = append(res.HeldBack, h)
	}
	sort.SliceStable(res.HeldBack, func(i, j int) bool { return res.HeldBack[i].Ref < res.HeldBack[j].Ref })
	return res
}

// fetchTracking runs git fetch of refspecs into remote-tracking refs.
func (s *Syncer) fetchTracking(remote string, refspecs []string, prune bool) error {
	return s.gitFetch(remote, refspecs, nil, prune, nil)
}

// packPrunedInFlight tells a fetch whose temporary pack a concurrent 'git gc
// --prune=now' deleted (git documents that prune as unsafe beside writers):
// nothing was fetched and no ref moved, so the fetch is made again. git
// says so in two ways, depending on when the pack went: it cannot rename
// it into place, or index-pack cannot open it.
func packPrunedInFlight(msg string) bool {
	return strings.Contains(msg, "unable to rename temporary") ||
		strings.Contains(msg, "tmp_pack_") && strings.Contains(msg, "invalid index-pack output")
}

// snapshotRefs lists the refs of snap's scope: every ref under a prefix,
// and each single ref that exists.
func snapshotRefs(snap *refs.Snapshot, scope []string) (map[string]gitstore.Oid, []string, error) {
	out := map[string]gitstore.Oid{}
	for _, sc := range scope {
		if strings.HasSuffix(sc, "/") {
			vals, _, err := snap.List(sc)
			if err != nil {
				return nil, nil, err
			}
			maps.Copy(out, vals)
			continue
		}
		o, err := snap.ReadOptional(sc)
		if err != nil {
			return nil, nil, err
		}
		if !o.IsZero() {
			out[sc] = o
		}
	}
	names := slices.Sorted(maps.Keys(out))
	return out, names, nil
}

// trackingRaced tells a fetch that lost a race for a remote-tracking ref to
// another bernstein process of this host fetching the same remote (two
// pushes at once each fetch its heads): git found the ref moved or locked
// under it, and moved no ref of its own. The remote-tracking refs are hints
// that any fetch may rewrite, so the fetch is made again on what the other
// one wrote. A race on any other ref is reported.
func trackingRaced(msg string) bool {
	return strings.Contains(msg, "cannot lock ref '"+TrackingRoot) &&
		(strings.Contains(msg, "but expected") || strings.Contains(msg, "File exists"))
}
