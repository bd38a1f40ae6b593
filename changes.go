package bernstein

import (
	"sort"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Which tasks changed, at the cost of the change: every write of a task
// appends an entry naming the task to its writer's audit mirror
// (refs/bernstein/audit/<writer>), so the entries a mirror gained since a
// reader last looked name the tasks to re-read. It is a hint, never a
// decision: no HMAC or signature of an entry is checked here, and a reader
// re-reads and proves each task it names as it would any other.

// AuditHeads are the heads of the writers' audit mirrors, by ref name.
type AuditHeads map[string]gitstore.Oid

// maxChangeWalk bounds the entries ChangedTasks walks before it gives up
// and says a scan is cheaper.
const maxChangeWalk = 4096

// ReadAuditHeads reads the heads of every writer's audit mirror (one ref a
// writer: the cost follows the writers, not the tasks).
func (s *Store) ReadAuditHeads() (AuditHeads, error) {
	snap, err := s.core.Refs.Snapshot(refs.AuditPrefix)
	if err != nil {
		return nil, err
	}
	vals, _, err := snap.List(refs.AuditPrefix)
	if err != nil {
		return nil, err
	}
	return AuditHeads(vals), nil
}

// ChangedTasks reads the audit heads now and walks each mirror that moved
// from its head in since back to that head, naming (sorted) the tasks its
// new entries name. complete is false when some walk did not meet the head
// it started from (a mirror rewound or replaced, a new writer with a long
// mirror) or an entry could not be read: then the tasks named are not all
// that may have changed, and the caller scans every task instead.
func (s *Store) ChangedTasks(since AuditHeads) (now AuditHeads, tasks []string, complete bool, err error) {
	now, err = s.ReadAuditHeads()
	if err != nil {
		return nil, nil, false, err
	}
	complete = true
	named := map[string]bool{}
	for ref, head := range now {
		from := since[ref]
		if head == from {
			continue
		}
		met, cut, walked := false, false, 0
		chain.Walk(s.core.Objects, head, func(cc chain.Commit) bool {
			if cc.ID == from {
				met = true
				return false
			}
			walked++
			e, err := record.ParseAuditEntry(cc.Record)
			if cc.Err != nil || err != nil || walked > maxChangeWalk {
				cut = true // unreadable, or longer than a scan: scan
				return false
			}
			if e.TaskID != "" {
				named[e.TaskID] = true
			}
			return true
		})
		// A new writer's mirror, walked whole to its root, names them all.
		if !met && (cut || !from.IsZero()) {
			complete = false
		}
	}
	for t := range named {
		if validateTask(t) == nil {
			tasks = append(tasks, t)
		}
	}
	sort.Strings(tasks)
	return now, tasks, complete, nil
}

// TaskOfRef names the task whose journal or ledger ref is name ("" for any
// other ref): a file name a ref watcher saw, turned into the task to re-read.
func TaskOfRef(name string) string {
	name = strings.TrimSuffix(name, ".lock")
	for _, p := range []string{refs.JournalPrefix, refs.LedgerPrefix} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			if t, err := refs.UnescapeTask(rest); err == nil && validateTask(t) == nil {
				return t
			}
		}
	}
	return ""
}
