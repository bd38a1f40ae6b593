package refs

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
)

// The archive of ended tasks (docs/archive.md) holds tasks' journal and
// ledger heads in the trees of refs/bernstein/archive/<writer> instead of
// their refs. A Reader given an ArchiveIndex answers a snapshot's task refs
// from both: a task reads as it did before it was archived.

// ArchiveIndex reads archive commits and orders chain commits for a
// Reader: this package reads no object, its caller (internal/core) does.
// Lookup, List and Tasks return a *BadArchiveError when the archive commit
// cannot be read as an archive (a reader's checks refuse it, or an object
// it names is not in the repository): the Reader then reads past that
// archive ref and reports it (Snapshot.BadArchives, a BadRef each). Any other error
// fails the read.
type ArchiveIndex interface {
	// Lookup returns the heads archive commit archive holds for task, ok
	// false when it holds none: the cost of one task, whatever the
	// archive's size.
	Lookup(archive gitstore.Oid, task string) (journal, ledger gitstore.Oid, ok bool, err error)
	// List calls fn with every task the archive holds and its heads.
	List(archive gitstore.Oid, fn func(task string, journal, ledger gitstore.Oid)) error
	// Tasks calls fn with every task the archive holds, reading no task's
	// heads.
	Tasks(archive gitstore.Oid, fn func(task string)) error
	// Order says how chain commit a stands to chain commit b.
	Order(a, b gitstore.Oid) (ChainOrder, error)
}

// ChainOrder is how one chain head stands to another.
type ChainOrder int

const (
	// Same: one commit.
	Same ChainOrder = iota
	// Ahead: the first extends the second (the second is in its chain).
	Ahead
	// Behind: the second extends the first.
	Behind
	// Diverged: neither is in the other's chain.
	Diverged
)

// Divergence is a task chain whose ref and archive entry (or two archives'
// entries) name heads neither of which extends the other: two hosts' chains
// of one task, as docs/format.md (Forks and supersede entries) handles
// them. The snapshot reads Kept; Other is left to the fork's reading.
type Divergence struct {
	Ref       string       // the chain's ref name (refs/bernstein/journal/<task> or ledger/)
	Kept      gitstore.Oid // the head the snapshot reads
	KeptFrom  string       // "" for the ref, else the archive ref whose entry it is
	Other     gitstore.Oid
	OtherFrom string // the archive ref whose entry Other is
}

func (d Divergence) String() string {
	from := d.KeptFrom
	if from == "" {
		from = "the ref"
	}
	return fmt.Sprintf("%s diverged: %s (%s) and %s (%s) do not extend one another", d.Ref, d.Kept, from, d.Other, d.OtherFrom)
}

// WithoutArchive is r reading refs alone: what push and fetch compare and
// send (an archived task's heads travel in its archive ref, not as refs).
func (r Reader) WithoutArchive() Reader {
	r.Archive = nil
	return r
}

// archiveMode is what a snapshot's scope asks of the archives: every
// archived chain under a task prefix (list), or a few tasks' (tasks).
type archiveMode struct {
	list  bool
	tasks map[string]bool
}

// archiveScope is what scope asks of the archives; zero when it covers no
// task ref.
func archiveScope(scope []string) archiveMode {
	var m archiveMode
	for _, sc := range scope {
		if strings.HasSuffix(sc, "/") {
			if strings.HasPrefix(JournalPrefix, sc) || strings.HasPrefix(LedgerPrefix, sc) {
				m.list = true
			}
			continue
		}
		if t, ok := TaskOf(sc); ok {
			if m.tasks == nil {
				m.tasks = map[string]bool{}
			}
			m.tasks[t] = true
		}
	}
	return m
}

func (m archiveMode) any() bool { return m.list || len(m.tasks) > 0 }

// TaskOf returns the task of a journal or ledger ref.
func TaskOf(ref string) (string, bool) {
	for _, p := range []string{JournalPrefix, LedgerPrefix} {
		if rest, ok := strings.CutPrefix(ref, p); ok {
			t, err := UnescapeTask(rest)
			return t, err == nil
		}
	}
	return "", false
}

// BadArchiveError is an ArchiveIndex's answer for an archive commit that
// cannot be read as an archive: Err says why.
type BadArchiveError struct{ Err error }

func (e *BadArchiveError) Error() string { return e.Err.Error() }

func (e *BadArchiveError) Unwrap() error { return e.Err }

// badArchive returns the BadRef of archive ref at commit when err is a
// *BadArchiveError, ok false otherwise.
func badArchive(ref string, commit gitstore.Oid, err error) (BadRef, bool) {
	var be *BadArchiveError
	if !errors.As(err, &be) {
		return BadRef{}, false
	}
	return BadRef{Ref: ref, At: commit, Reason: be.Err.Error()}, true
}

// addBad adds b to list unless its ref is there already.
func addBad(list []BadRef, b BadRef) []BadRef {
	for _, x := range list {
		if x.Ref == b.Ref {
			return list
		}
	}
	return append(list, b)
}

// archived is one entry of one archive.
type archived struct {
	from          string // the archive ref
	journal, ledg gitstore.Oid
}

// readArchives gathers, for the chains the snapshot covers, the entries of
// every archive ref in it (archive refs in name order). An archive ref
// that any of its reads finds unreadable (a *BadArchiveError) contributes
// no entry, even those read before the fault, and is listed in
// s.badArchives; every other archive is read as before.
func (s *Snapshot) readArchives(ix ArchiveIndex, m archiveMode) (map[string][]archived, error) {
	out := map[string][]archived{}
	var names []string
	for n := range s.vals {
		if strings.HasPrefix(n, ArchivePrefix) && !s.vals[n].IsZero() {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	tasks := make([]string, 0, len(m.tasks))
	for t := range m.tasks {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	for _, n := range names {
		commit := s.vals[n]
		var got []archived
		var tasksOf []string
		var err error
		if m.list {
			err = ix.List(commit, func(task string, j, l gitstore.Oid) {
				got = append(got, archived{from: n, journal: j, ledg: l})
				tasksOf = append(tasksOf, task)
			})
		} else {
			for _, t := range tasks {
				j, l, ok, lerr := ix.Lookup(commit, t)
				if err = lerr; err != nil {
					break
				}
				if ok {
					got = append(got, archived{from: n, journal: j, ledg: l})
					tasksOf = append(tasksOf, t)
				}
			}
		}
		if err != nil {
			if b, ok := badArchive(n, commit, err); ok {
				s.badArchives = addBad(s.badArchives, b)
				continue
			}
			return nil, fmt.Errorf("archive %s: %w", n, err)
		}
		for i, t := range tasksOf {
			out[t] = append(out[t], got[i])
		}
	}
	return out, nil
}

// resolveArchives answers the covered task refs from the archives: per
// chain, of the ref and the entries (in archive order), the one that
// extends the others is the head; equal heads are one head; a head that
// diverges from the one kept is a Divergence and the one kept stays.
func (s *Snapshot) resolveArchives(ix ArchiveIndex, m archiveMode) error {
	entries, err := s.readArchives(ix, m)
	if err != nil {
		return err
	}
	for task, es := range entries {
		for _, kind := range []struct {
			ref string
			at  func(archived) gitstore.Oid
		}{{Journal(task), func(a archived) gitstore.Oid { return a.journal }}, {Ledger(task), func(a archived) gitstore.Oid { return a.ledg }}} {
			if !s.covers(kind.ref) {
				continue
			}
			head, from := s.vals[kind.ref], ""
			for _, e := range es {
				v := kind.at(e)
				if head.IsZero() {
					head, from = v, e.from
					continue
				}
				if v == head {
					continue
				}
				o, err := ix.Order(v, head)
				if err != nil {
					o = Diverged // an entry naming no chain commit reads as another host's head, never as ours
				}
				switch o {
				case Ahead:
					head, from = v, e.from
				case Diverged:
					s.divergences = append(s.divergences, Divergence{Ref: kind.ref, Kept: head, KeptFrom: from, Other: v, OtherFrom: e.from})
				}
			}
			s.vals[kind.ref] = head
			if from != "" {
				if s.archived == nil {
					s.archived = map[string]string{}
				}
				s.archived[kind.ref] = from
			}
		}
	}
	sort.Slice(s.divergences, func(i, j int) bool { return s.divergences[i].Ref < s.divergences[j].Ref })
	return nil
}

// FromArchive reports whether ref's value in the snapshot is an archive
// entry's (not the ref's own), and the archive ref it came from. A writer
// does not compare-and-swap a ref against such a value (the ref does not
// hold it): it creates the ref and holds the archive ref instead.
func (s *Snapshot) FromArchive(ref string) (string, bool) {
	a, ok := s.archived[ref]
	return a, ok
}

// Divergences lists the task chains whose ref and archive entries diverge,
// sorted by ref.
func (s *Snapshot) Divergences() []Divergence { return s.divergences }

// BadArchives lists the archive refs this snapshot could not read as
// archives and read past (they contributed no entry), sorted by ref.
func (s *Snapshot) BadArchives() []BadRef { return s.badArchives }

// archivedNames adds to seen the names under prefix of the chains the
// archives hold, reading each archive's task names only. An archive that
// cannot be read as one adds no name and is returned.
func (r Reader) archivedNames(prefix string, seen map[string]bool) ([]BadRef, error) {
	if r.Archive == nil {
		return nil, nil
	}
	var kinds []string
	for _, p := range []string{JournalPrefix, LedgerPrefix} {
		if strings.HasPrefix(p, prefix) {
			kinds = append(kinds, p)
		}
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	snap, err := r.WithoutArchive().Snapshot(ArchivePrefix)
	if err != nil {
		return nil, err
	}
	vals, names, err := snap.List(ArchivePrefix)
	if err != nil {
		return nil, err
	}
	var bad []BadRef
	for _, n := range names {
		var got []string
		err := r.Archive.Tasks(vals[n], func(task string) { got = append(got, task) })
		if err != nil {
			if b, ok := badArchive(n, vals[n], err); ok {
				bad = append(bad, b)
				continue
			}
			return nil, fmt.Errorf("archive %s: %w", n, err)
		}
		for _, task := range got {
			for _, k := range kinds {
				seen[k+EscapeTask(task)] = true
			}
		}
	}
	return bad, nil
}
