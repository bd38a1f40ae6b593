package remote

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The narrow fetch. A fetch of refs/bernstein/* as a whole makes the remote
// advertise every ref (two a task) and the fetch compare them all, whatever
// moved. The narrow path fetches in two steps instead, each a `git fetch`
// whose refspecs git turns into protocol v2 ref prefixes, so that the
// remote advertises only what they name:
//
//  1. the refs a writer has a few of, whatever the number of tasks: the
//     spines, audit mirrors, key refs, anchors, forks, the legacy keys ref
//     and the repository's identity (writerScope);
//  2. the journal and ledger of every task that the new entries of those
//     spines and audit mirrors name: every journal and ledger row a
//     bernstein writer records has an audit entry naming its task, and every
//     artifact version, seal and supersede a spine entry naming it.
//
// Then the fetch compares, verifies and moves those refs only, as the full
// path does all of them. A task ref that moved on the remote with no entry
// naming it (plain git) is not seen by the narrow path: it stays where it
// is here, which grants nothing; the full path (the first fetch from a
// remote, `fetch --full`, a fetch with more to walk than maxNarrowWalk)
// sees and reports it.

// writerScope is what the narrow path fetches whole: refs a writer has a
// few of, not one per task (forks exist only for diverged tasks). A name
// that does not end in '/' is one ref.
var writerScope = []string{refs.SpinePrefix, refs.AuditPrefix, refs.WritersPrefix, refs.AnchorsPrefix, refs.ForksPrefix, refs.CheckpointsPrefix, refs.ArchivePrefix, refs.Keys, refs.Repository}

// Bounds of the narrow path: past them a fetch walks or names about as much
// as the full path reads, which it then takes instead.
const (
	maxNarrowWalk  = 4096 // spine and audit commits read to find the tasks
	maxNarrowTasks = 1024 // tasks named
)

// writerRefspecs fetches writerScope into the remote-tracking refs. A
// single ref is fetched by a pattern that ends where its name does ('*'
// matches the empty string): an exact name the remote lacks would fail the
// fetch, a pattern that matches nothing does not.
func writerRefspecs(remote string) []string {
	out := make([]string, 0, len(writerScope))
	for _, sc := range writerScope {
		out = append(out, "+"+sc+"*:"+TrackingRef(remote, sc)+"*")
	}
	return out
}

// fetchScope is what one narrow fetch compares: local ref names, each a
// prefix (ending in '/') or one ref.
type fetchScope struct {
	refs  []string
	tasks int // tasks named by the new entries
	walk  int // spine and audit commits read
}

func (sc *fetchScope) tracking(remote string) []string {
	out := make([]string, len(sc.refs))
	for i, r := range sc.refs {
		out[i] = TrackingRef(remote, r)
	}
	return out
}

// fetchedBefore reports whether remote's refs were ever fetched here (a
// remote-tracking audit mirror or key ref exists: every writer publishes
// its key, with an audit entry): the first fetch takes the full path.
func (s *Syncer) fetchedBefore(remote string) bool {
	for _, p := range []string{refs.AuditPrefix, refs.WritersPrefix} {
		if names, err := s.c.Refs.Names(TrackingRef(remote, p)); err == nil && len(names) > 0 {
			return true
		}
	}
	return false
}

// fetchNarrow fetches writerScope, finds the tasks whose chains the
// remote's new spine and audit entries name, and fetches their journals
// and ledgers. It returns nil (and fetches nothing more) when that is more
// than the narrow path's bounds: the caller then takes the full path.
func (s *Syncer) fetchNarrow(remote string) (*fetchScope, error) {
	// Each fetch tells the remote only of the commits under the remote-
	// tracking copies of what it fetches (--negotiation-tip): by default
	// git offers the commits of every ref it has, two a task.
	tips := make([]string, len(writerScope))
	for i, sc := range writerScope {
		tips[i] = TrackingRef(remote, sc) + "*"
	}
	archived, _, err := s.c.Refs.List(TrackingRef(remote, refs.ArchivePrefix))
	if err != nil {
		return nil, err
	}
	if err := s.gitFetch(remote, writerRefspecs(remote), nil, true, tips); err != nil {
		return nil, err
	}
	tasks, walked, ok, err := s.namedTasks(remote)
	if err != nil || !ok {
		return nil, err
	}
	// The tasks the remote archived since: their refs here are compared
	// with the archive (archivedLocal), and the remote's copies of those
	// it deleted are forgotten (fetchExact).
	if ok, err = s.archivedTasks(remote, archived, tasks); err != nil || !ok {
		return nil, err
	}
	sc := &fetchScope{refs: append([]string(nil), writerScope...), tasks: len(tasks), walk: walked}
	var specs []string
	for _, t := range sortedKeys(tasks) {
		for _, ref := range tasks[t].refs(t) {
			specs = append(specs, "+"+ref+":"+TrackingRef(remote, ref))
			sc.refs = append(sc.refs, ref)
			if o, err := s.c.Refs.ReadOptional(TrackingRef(remote, ref)); err == nil && !o.IsZero() {
				tips = append(tips, TrackingRef(remote, ref))
			}
		}
	}
	// A named ref the remote does not have is compared too: its
	// remote-tracking copy, if any, is what an earlier fetch saw.
	if err := s.fetchExact(remote, specs, tips); err != nil {
		return nil, err
	}
	return sc, nil
}

// chains says which of a task's chains an entry says moved.
type chains struct{ journal, ledger bool }

func (c chains) refs(task string) []string {
	var out []string
	if c.journal {
		out = append(out, refs.Journal(task))
	}
	if c.ledger {
		out = append(out, refs.Ledger(task))
	}
	return out
}

// namedTasks walks, for every remote-tracking spine and audit mirror, the
// commits the remote has that this host lacks, and collects the tasks
// their entries name. ok is false past the narrow path's bounds.
func (s *Syncer) namedTasks(remote string) (map[string]chains, int, bool, error) {
	tscope := []string{TrackingRef(remote, refs.SpinePrefix), TrackingRef(remote, refs.AuditPrefix)}
	theirs, err := s.c.Refs.Snapshot(tscope...)
	if err != nil {
		return nil, 0, false, err
	}
	local, err := s.c.Refs.Snapshot(refs.SpinePrefix, refs.AuditPrefix)
	if err != nil {
		return nil, 0, false, err
	}
	tasks := map[string]chains{}
	walked := 0
	for _, prefix := range []string{refs.SpinePrefix, refs.AuditPrefix} {
		vals, names, err := theirs.List(TrackingRef(remote, prefix))
		if err != nil {
			return nil, 0, false, err
		}
		for _, tname := range names {
			ref := refs.Prefix + strings.TrimPrefix(tname, TrackingPrefix(remote))
			mine, err := local.ReadOptional(ref)
			if err != nil {
				return nil, 0, false, err
			}
			n, err := s.newCommits(mine, vals[tname])
			var bad *refs.BadRefError
			if unreadableObject(err) || errors.As(err, &bad) || vals[tname].IsLooseStandIn() {
				// A chain that cannot be read as one, here or on the
				// remote (plain git moved it to a blob, wrote text over
				// its loose file): the entries it adds are not known.
				// The full path compares every ref, and reads past it.
				return nil, walked, false, nil
			}
			if err != nil {
				return nil, 0, false, fmt.Errorf("%s: %w", ref, err)
			}
			if walked += n; walked > maxNarrowWalk {
				return nil, walked, false, nil
			}
			if err := s.entryTasks(ref, vals[tname], n, tasks); err != nil {
				return nil, 0, false, err
			}
			if len(tasks) > maxNarrowTasks {
				return nil, walked, false, nil
			}
		}
	}
	return tasks, walked, true, nil
}

// newCommits is how many commits theirs has that mine lacks: 0 when they
// are the same or mine is ahead, the whole chain (up to past the bound)
// when this host has none of it.
func (s *Syncer) newCommits(mine, theirs gitstore.Oid) (int, error) {
	if mine.IsZero() {
		n := 0
		for id := theirs; !id.IsZero() && n <= maxNarrowWalk; n++ {
			p, err := s.parentOf(id)
			if err != nil {
				return 0, err
			}
			id = p
		}
		return n, nil
	}
	a, err := s.relate(mine, theirs)
	if err != nil {
		return 0, err
	}
	return a.remoteOnly, nil
}

// entryTasks reads the n commits of ref's chain from head back and adds
// the tasks their entries name. A commit whose record does not parse (one
// appended with plain git) names nothing; the checks refuse it later.
func (s *Syncer) entryTasks(ref string, head gitstore.Oid, n int, tasks map[string]chains) error {
	add := func(task string, c chains) {
		if task == "" {
			return
		}
		cur := tasks[task]
		tasks[task] = chains{journal: cur.journal || c.journal, ledger: cur.ledger || c.ledger}
	}
	id := head
	for i := 0; i < n && !id.IsZero(); i++ {
		cc, err := chain.Read(s.c.Objects, id)
		if err == nil {
			if strings.HasPrefix(ref, refs.SpinePrefix) {
				if e, err := record.ParseSpineEntry(cc.Record); err == nil {
					switch {
					case e.Artifact != nil:
						add(e.Artifact.TaskID, chains{journal: true})
					case e.Seal != nil:
						add(e.Seal.TaskID, chains{journal: true, ledger: true})
					case e.Supersede != nil:
						add(e.Supersede.TaskID, chains{journal: true, ledger: true})
					}
				}
			} else if a, err := record.ParseAuditEntry(cc.Record); err == nil {
				add(a.TaskID, auditChains(a.Event))
			}
		}
		p, err := s.parentOf(id)
		if err != nil {
			return err
		}
		id = p
	}
	return nil
}

// auditChains is which of a task's chains an audit entry of event mirrors
// a row of: a ledger transition (task.*) the ledger, a refused post
// neither, anything else the journal (an unknown event both).
func auditChains(event string) chains {
	switch {
	case event == record.EventArtifactRefused || event == record.EventWriterKey:
		return chains{}
	case event == record.EventTaskAdopted:
		return chains{journal: true, ledger: true}
	case strings.HasPrefix(event, "task."):
		return chains{ledger: true}
	case event == record.EventArtifactPosted, event == record.KindCheckpoint, event == record.KindDiffCaptured,
		event == record.KindGateAttempt, event == record.KindEvidenceResult, event == record.KindArtifactPosted:
		return chains{journal: true}
	}
	return chains{journal: true, ledger: true}
}

// errMissingRef is a fetch of an exact ref the remote does not have.
type errMissingRef struct{ ref string }

func (e *errMissingRef) Error() string { return "the remote has no " + e.ref }

// fetchExact fetches exact refspecs (given on git's standard input, so that
// any number fits), dropping each whose source the remote does not have
// (git refuses the whole fetch for one) and fetching the rest again.
func (s *Syncer) fetchExact(remote string, specs, tips []string) error {
	var gone []string
	for len(specs) > 0 {
		err := s.gitFetch(remote, nil, specs, false, tips)
		var miss *errMissingRef
		if !errors.As(err, &miss) {
			if err == nil {
				err = s.forgetTracking(remote, gone)
			}
			return err
		}
		gone = append(gone, miss.ref)
		kept := specs[:0]
		dropped := false
		for _, sp := range specs {
			src, _, _ := strings.Cut(strings.TrimPrefix(sp, "+"), ":")
			if src == miss.ref {
				dropped = true
				continue
			}
			kept = append(kept, sp)
		}
		if !dropped {
			return err
		}
		specs = kept
	}
	return s.forgetTracking(remote, gone)
}

// forgetTracking deletes the remote-tracking copies of refs the remote
// turned out not to have (a task it archived): a copy left would make the
// next push try to delete what is gone.
func (s *Syncer) forgetTracking(remote string, gone []string) error {
	var in strings.Builder
	for _, ref := range gone {
		t := TrackingRef(remote, ref)
		if o, err := s.c.Refs.ReadOptional(t); err == nil && !o.IsZero() {
			fmt.Fprintf(&in, "delete %s %s\n", t, o)
		}
	}
	if in.Len() == 0 {
		return nil
	}
	if err := updateRefs(s.c.GitDir, []byte(in.String())); err != nil {
		s.c.Warn("forget the remote-tracking copies of refs %s no longer has: %v", remote, err)
	}
	return nil
}

// tipLacksObject reads git fetch's refusal of a --negotiation-tip that
// names a missing object (or none).
func tipLacksObject(msg string) bool {
	return strings.Contains(msg, "the object "+TrackingRoot) && strings.Contains(msg, " does not exist") ||
		strings.Contains(msg, " is not a valid object") && strings.Contains(msg, TrackingRoot)
}

// missingRef reads git fetch's message for an exact source the remote
// lacks.
func missingRef(msg string) (string, bool) {
	const m = "couldn't find remote ref "
	i := strings.Index(msg, m)
	if i < 0 {
		return "", false
	}
	rest := msg[i+len(m):]
	if j := strings.IndexAny(rest, "\n "); j >= 0 {
		rest = rest[:j]
	}
	return rest, rest != ""
}

// lazyView reads refs from a snapshot, and those outside its scope from
// the files. Under the writer lock no bernstein writer moves a ref between
// the two, so it reads as one snapshot of every ref would.
type lazyView struct {
	snap *refs.Snapshot
	r    refs.Reader
}

func (v lazyView) ReadOptional(ref string) (gitstore.Oid, error) {
	o, err := v.snap.ReadOptional(ref)
	if errors.Is(err, refs.ErrNotInSnapshot) {
		return v.r.ReadOptional(ref)
	}
	return o, err
}

func (v lazyView) List(prefix string) (map[string]gitstore.Oid, []string, error) {
	vals, names, err := v.snap.List(prefix)
	if errors.Is(err, refs.ErrNotInSnapshot) {
		return v.r.List(prefix)
	}
	return vals, names, err
}

// gitFetchArgs is git fetch's command for refspecs (into remote-tracking
// refs only: --refmap= keeps the configured refspecs from moving anything
// else), stdin refspecs read from its standard input.
func gitFetchArgs(remote string, refspecs []string, stdin bool, prune bool, tips []string, pastBroken bool) []string {
	args := []string{"fetch", "--no-tags", "--no-write-fetch-head", "--refmap=", "--no-recurse-submodules"}
	if pastBroken {
		args = append(args, "--no-auto-maintenance") // see passOverBrokenRefs
	}
	for _, t := range tips {
		args = append(args, "--negotiation-tip="+t)
	}
	if prune {
		args = append(args, "--prune")
	}
	if stdin {
		args = append(args, "--stdin")
	}
	args = append(args, remote)
	return append(args, refspecs...)
}

// gitFetch runs git fetch of refspecs and stdin (refspecs given on its
// standard input), again when a concurrent gc deleted its temporary pack.
// tips, when given, are the only refs whose commits it offers the remote
// as common (each a ref that exists, or a pattern).
func (s *Syncer) gitFetch(remote string, refspecs, stdin []string, prune bool, tips []string) error {
	// The objects are kept as a pack, synced (never unpacked into loose
	// objects, which git does not sync by default): the local refs will
	// point at them. The remote-tracking refs are not synced: they are
	// hints, relearned by the next fetch or push.
	fetch := git.Cmd{Policy: git.User, GitDir: s.c.GitDir, Config: []string{"fetch.unpackLimit=1", "core.fsync=pack,derived-metadata"},
		Args: gitFetchArgs(remote, refspecs, stdin != nil, prune, tips, false)}
	if stdin != nil {
		fetch.Stdin = []byte(strings.Join(stdin, "\n") + "\n")
	}
	for n := 1; ; n++ {
		_, errb, err := fetch.Run()
		if err == nil {
			return nil
		}
		msg := git.Message(errb)
		if n < maxFetches && (packPrunedInFlight(msg) || trackingRaced(msg)) {
			continue
		}
		if n < maxFetches && fetch.Env == nil && brokenLocalRef(msg) {
			// A ref of this repository names no object (text written over
			// its loose file, a missing object): fetch again passing over
			// such refs, as bernstein reads past them.
			fetch.Env = passOverBrokenRefs
			fetch.Args = gitFetchArgs(remote, refspecs, stdin != nil, prune, tips, true)
			continue
		}
		if broken := brokenTracking(msg); n < maxFetches && len(broken) > 0 {
			// Text written over a remote-tracking ref's loose file: git
			// does not write a ref it cannot read. A hint: it goes, and
			// the fetch writes it again.
			dropped := false
			for _, ref := range broken {
				if o, err := s.c.Refs.ReadOptional(ref); err == nil && o.IsLooseStandIn() {
					dropped = s.dropGarbledTracking(ref, o) || dropped
				}
			}
			if dropped {
				continue
			}
		}
		if n < maxFetches && len(tips) > 0 && tipLacksObject(msg) {
			// A negotiation tip is a hint: git refuses the fetch when
			// it does not find a tip's commit, which a concurrent
			// repack can make it miss for an instant. Fetch again
			// offering no tip: that costs only the negotiation.
			tips = nil
			fetch.Args = gitFetchArgs(remote, refspecs, stdin != nil, prune, nil, fetch.Env != nil)
			continue
		}
		if ref, ok := missingRef(msg); ok {
			return &errMissingRef{ref: ref}
		}
		return fmt.Errorf("git fetch %s: %s", remote, msg)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// brokenLocalRef reads git fetch's failure on a ref of the repository it
// fetches into that names no object: its check that what it received
// connects to the refs it has ('git rev-list --objects --stdin --not
// --all') stops at such a ref ("bad object <ref>", then "<remote> did not
// send all necessary objects"). A remote that did not send all it should
// fails the same way, and again when fetched passing over such refs.
func brokenLocalRef(msg string) bool {
	return strings.Contains(msg, "bad object ") && strings.Contains(msg, "did not send all necessary objects")
}

// passOverBrokenRefs is the environment of a git fetch made again past a
// ref that names no object: GIT_REF_PARANOIA=0, under which git passes over
// such refs (it warns, "ignoring broken ref"). A ref passed over offers the
// connectivity check no object it could count as present, so the check
// reads as much or more; bernstein reads the ref itself, past it, and
// names it (docs/trust.md, Refs that cannot be read). The fetch then
// starts no maintenance (--no-auto-maintenance, added to its arguments):
// a gc inheriting the variable would pass over such refs too and prune the
// commits only they reached, as those of this writer's own spine, which
// its next write puts the ref back on. Under git's defaults gc stops at
// such a ref, so no maintenance is lost while one is there. For a file://
// remote, whose git runs here, the variable reaches the remote's
// upload-pack too.
var passOverBrokenRefs = []string{"GIT_REF_PARANOIA=0"}

// brokenTracking reads, in git fetch's message, the remote-tracking refs it
// could not write because their loose file holds no object id ("cannot
// lock ref '...': unable to resolve reference '...': reference broken").
func brokenTracking(msg string) []string {
	const m = "cannot lock ref '"
	var out []string
	for rest := msg; ; {
		i := strings.Index(rest, m)
		if i < 0 {
			return out
		}
		rest = rest[i+len(m):]
		ref, tail, ok := strings.Cut(rest, "'")
		if !ok {
			return out
		}
		line, _, _ := strings.Cut(tail, ";")
		if strings.HasPrefix(ref, TrackingRoot) && strings.Contains(line, "reference broken") {
			out = append(out, ref)
		}
		rest = tail
	}
}

// dropGarbledTracking removes the remote-tracking ref ref whose loose file
// holds no object id (it reads as the stand-in was), under the ref's lock
// as git takes it, and only while the file holds those bytes. It reports
// whether it removed it.
func (s *Syncer) dropGarbledTracking(ref string, was gitstore.Oid) bool {
	if !strings.HasPrefix(ref, TrackingRoot) || strings.Contains(ref, "..") {
		return false
	}
	path := filepath.Join(s.c.GitDir, filepath.FromSlash(ref))
	lock, err := os.OpenFile(path+".lock", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return false // a git fetch writes it now
	}
	defer os.Remove(path + ".lock")
	lock.Close()
	b, err := os.ReadFile(path)
	if err != nil || gitstore.LooseStandIn(b) != was {
		return false
	}
	if err := os.Remove(path); err != nil {
		return false
	}
	s.c.Warn("removed the remote-tracking ref %s: its loose file held no object id (%q), text written over it; a fetch writes it again from the remote", ref, strings.TrimSpace(string(b)))
	return true
}
