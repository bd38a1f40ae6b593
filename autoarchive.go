package bernstein

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/internal/atomicfile"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/remote"
	"github.com/bernstein/bernstein/verify"
)

// Automatic archiving (docs/archive.md, Automatic archiving): before it
// pushes, Push archives this writer's own tasks that ended at least the
// policy's age ago, as 'bernstein archive --ended-before AGE' would, but
// finding them from what its writer's spine gained since the last run
// rather than from every task.

// ArchiveConfigKey is the git configuration key of the automatic archive's
// policy: a duration (Go's, such as 168h, or a number of days, such as
// 7d), or off.
const ArchiveConfigKey = "bernstein.archive.endedBefore"

// DefaultArchiveAge is the automatic archive's age when the repository
// configures none: a task this writer ended a week ago or more is
// archived by its next push.
const DefaultArchiveAge = 7 * 24 * time.Hour

// ArchivePolicy is what a push archives first: nothing when Off, else this
// writer's own tasks whose end is at least EndedBefore old.
type ArchivePolicy struct {
	Off         bool
	EndedBefore time.Duration
	// From says where the policy comes from: "default", the configuration
	// key, or a flag.
	From string
}

// String is the policy as the configuration key writes it.
func (p ArchivePolicy) String() string {
	if p.Off {
		return "off"
	}
	return FormatArchiveAge(p.EndedBefore)
}

// FormatArchiveAge writes an age in days when it is a whole number of
// days, else as Go writes a duration.
func FormatArchiveAge(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// ParseArchiveAge reads a policy's value: off, a Go duration (168h, 90m,
// 0s) or a whole number of days (7d). Zero archives every ended task of
// this writer however recent its end; a negative age is refused.
func ParseArchiveAge(v string) (ArchivePolicy, error) {
	s := strings.TrimSpace(v)
	if strings.EqualFold(s, "off") {
		return ArchivePolicy{Off: true}, nil
	}
	bad := fmt.Errorf("%q: want off, a duration such as 168h, or a number of days such as 7d", v)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > 100*365 {
			return ArchivePolicy{}, bad
		}
		return ArchivePolicy{EndedBefore: time.Duration(n) * 24 * time.Hour}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return ArchivePolicy{}, bad
	}
	return ArchivePolicy{EndedBefore: d}, nil
}

// ArchivePolicy is the automatic archive's policy as the repository's git
// configuration sets it (ArchiveConfigKey, its last value; git reads the
// repository's, the user's and the system's files), else the default.
func (s *Store) ArchivePolicy() (ArchivePolicy, error) {
	vs, err := git.ConfigValues(git.User, s.core.GitDir, ArchiveConfigKey)
	if err != nil {
		return ArchivePolicy{}, err
	}
	if len(vs) == 0 {
		return ArchivePolicy{EndedBefore: DefaultArchiveAge, From: "default"}, nil
	}
	p, err := ParseArchiveAge(vs[len(vs)-1])
	if err != nil {
		return ArchivePolicy{}, fmt.Errorf("git config %s %w", ArchiveConfigKey, err)
	}
	p.From = "git config " + ArchiveConfigKey
	return p, nil
}

// PushOptions change what Push does.
type PushOptions struct {
	// Archive replaces the configured archive policy (Store.ArchivePolicy)
	// when not nil.
	Archive *ArchivePolicy
}

// PushWith is Push with options: first the automatic archive under the
// policy (o.Archive, else the configured one), then the push. The
// archive never stops the push: when it fails, the push goes on with what
// was archived before the failure, and the failure is warned of and
// reported in the result (AutoArchive.Error).
func (s *Store) PushWith(name string, o PushOptions) (*PushResult, error) {
	pol := o.Archive
	if pol == nil {
		p, err := s.ArchivePolicy()
		if err != nil {
			return nil, err
		}
		pol = &p
	}
	var auto *remote.AutoArchive
	var restored []string
	if !pol.Off {
		if err := remote.Check(s.core.GitDir, name); err != nil {
			return nil, err
		}
		// The automatic archive reads the writer's spine for its seals:
		// its own, not what plain git put on it (docs/trust.md).
		var err error
		if restored, err = s.w.RestoreOwnChains(); err != nil {
			return nil, err
		}
		auto = s.autoArchive(pol.EndedBefore)
	}
	res, err := s.sync.Push(name)
	if res != nil {
		res.AutoArchive = auto
		res.Tampered = append(restored, res.Tampered...)
	}
	return res, err
}

// AutoArchive runs the automatic archive alone, as a push under policy p
// would before it pushes (nil when p is off, or the repository is below
// storage format 3 or has no writer): its failure is in the result's
// Error, and warned of.
func (s *Store) AutoArchive(p ArchivePolicy) *AutoArchive {
	if p.Off {
		return nil
	}
	return s.autoArchive(p.EndedBefore)
}

// autoArchive archives this writer's own tasks that ended before now minus
// age, and reports what it did; its failure is warned of and reported,
// never returned. It does nothing below storage format 3 or without a
// writer identity.
func (s *Store) autoArchive(age time.Duration) *remote.AutoArchive {
	out := &remote.AutoArchive{EndedBefore: FormatArchiveAge(age), Archived: []string{}, Commits: []string{}, PassedOver: []remote.PassedOver{}}
	err := s.runAutoArchive(age, out)
	switch {
	case err == nil:
	case errors.Is(err, errAutoArchiveSkip):
		return nil
	default:
		out.Error = err.Error()
		s.core.Warn("the automatic archive stopped (%d tasks archived before it did): %v; pushing the rest all the same", len(out.Archived), err)
	}
	return out
}

// errAutoArchiveSkip: the automatic archive does not apply here (no
// writer, or a format below 3).
var errAutoArchiveSkip = errors.New("no automatic archive here")

// archiveState is what the automatic archive keeps between runs, in
// <git dir>/bernstein/cache/archive/<writer in hex>: the spine commit it
// read up to, and the seals of this writer's spine up to it that it has
// not looked at yet (their ends not old enough then), in the spine's
// order. Lines: "bernstein auto-archive v1 <writer in hex> <spine commit
// or ->", then one "<ended> <ledger index> <escaped task>" a seal. A run
// reads the seals only as far as the first that is not due, and copies
// the rest as bytes when it writes the file again: one with nothing new
// and nothing due reads the file's first lines, whatever the number of
// seals pending. Derived data: a missing or
// unreadable file, or one whose head the walk back from the spine's head
// does not meet, makes the run read the spine whole; a file edited by
// hand can only keep tasks from being archived automatically (every task
// is checked under the write lock before it is archived).
type archiveState struct {
	head gitstore.Oid  // the spine commit read up to (zero: none)
	due  []pendingSeal // the first seals pending, each ended before the cutoff
	// more: seals pending after them, lines not read, in the file at path
	// from byte restAt.
	more    bool
	path    string
	restAt  int64
	added   []pendingSeal // the seals the walk found, oldest first, after those
	changed bool          // the file is to be written again
}

// pendingSeal is a journal seal of this writer's spine: the task it ended,
// the ledger row that ended it, and when (the seal commit's committer
// time, written in the terminal transition's transaction).
type pendingSeal struct {
	Task        string
	LedgerIndex int64
	Ended       int64 // Unix seconds
}

func (p pendingSeal) line() string {
	return fmt.Sprintf("%d %d %s\n", p.Ended, p.LedgerIndex, refs.EscapeTask(p.Task))
}

func parseSeal(line string) (pendingSeal, bool) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return pendingSeal{}, false
	}
	ended, err1 := strconv.ParseInt(f[0], 10, 64)
	index, err2 := strconv.ParseInt(f[1], 10, 64)
	task, err3 := refs.UnescapeTask(f[2])
	if err1 != nil || err2 != nil || err3 != nil || index < 0 {
		return pendingSeal{}, false
	}
	return pendingSeal{Task: task, LedgerIndex: index, Ended: ended}, true
}

const archiveStateMagic = "bernstein auto-archive v1 "

func (s *Store) archiveStatePath(writer string) string {
	return filepath.Join(s.core.GitDir, "bernstein", "cache", "archive", hex.EncodeToString([]byte(writer)))
}

// runAutoArchive is autoArchive's work, under a lock on the state file so
// that two pushes of this host take turns.
func (s *Store) runAutoArchive(age time.Duration, out *remote.AutoArchive) error {
	id, err := s.core.Identity()
	if err != nil || id == nil {
		return errAutoArchiveSkip
	}
	format, err := s.storageFormat()
	if err != nil {
		return err
	}
	if format < record.FormatArchive {
		return errAutoArchiveSkip
	}
	path := s.archiveStatePath(id.Writer)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Locked(path, func() error {
		cutoff := s.core.Now().Add(-age).Unix()
		st, err := s.walkOwnSeals(path, id.Writer, cutoff, out)
		if err != nil {
			return err
		}
		err = s.archiveDue(st, out)
		if werr := writeArchiveState(path, id.Writer, st); err == nil && werr != nil {
			err = fmt.Errorf("keep the automatic archive's position: %w", werr)
		}
		return err
	})
}

// storageFormat is the repository's storage format, read from its
// identity record (1 when it has none): whether to try at all; the
// archive's transaction checks the format it reads (Tx.CheckArchiveFormat).
func (s *Store) storageFormat() (int, error) {
	head, err := s.core.Refs.ReadOptional(refs.Repository)
	if err != nil {
		return 1, err
	}
	if h, ok := s.core.IdentityOver(head); ok {
		head = h // the identity this host's writer recorded (docs/trust.md)
	}
	if head.IsZero() {
		return 1, nil
	}
	cc, err := chain.Read(s.core.Objects, head)
	if err != nil {
		return 0, err
	}
	rec, err := record.ParseRepositoryRecord(cc.Record)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", refs.Repository, err)
	}
	return rec.Format, nil
}

// readArchiveState reads the state file as far as it needs: its head and
// the seals due before cutoff at its start; where the rest starts is kept
// (st.restAt), read only if the file is written again. ok is false when
// there is no file or it does not read (the spine is then read whole).
func readArchiveState(path, writer string, cutoff int64) (st *archiveState, ok bool) {
	fresh := &archiveState{changed: true}
	f, err := os.Open(path)
	if err != nil {
		return fresh, false
	}
	defer f.Close()
	r := bufio.NewReader(f)
	header, err := r.ReadString('\n')
	rest, cut := strings.CutPrefix(strings.TrimSuffix(header, "\n"), archiveStateMagic)
	w, h, _ := strings.Cut(rest, " ")
	if err != nil || !cut || w != hex.EncodeToString([]byte(writer)) {
		return fresh, false
	}
	st = &archiveState{path: path, restAt: int64(len(header))}
	if h != "-" {
		if st.head, err = gitstore.ParseOid(h); err != nil {
			return fresh, false
		}
	}
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF && line == "" {
			return st, true
		}
		p, ok := parseSeal(strings.TrimSuffix(line, "\n"))
		if err != nil || !ok {
			return fresh, false
		}
		if p.Ended >= cutoff {
			st.more = true
			return st, true
		}
		st.due = append(st.due, p)
		st.restAt += int64(len(line))
	}
}

// writeArchiveState writes the state file again when it changed: the
// seals left pending (those due that were not looked at, the rest of the
// file, those added), in order.
func writeArchiveState(path, writer string, st *archiveState) error {
	if !st.changed {
		return nil // nothing new and nothing looked at: the file stands
	}
	var b bytes.Buffer
	head := "-"
	if !st.head.IsZero() {
		head = st.head.String()
	}
	b.WriteString(archiveStateMagic + hex.EncodeToString([]byte(writer)) + " " + head + "\n")
	for _, p := range st.due {
		b.WriteString(p.line())
	}
	if st.more {
		f, err := os.Open(st.path)
		if err != nil {
			return err
		}
		_, err = f.Seek(st.restAt, io.SeekStart)
		if err == nil {
			_, err = b.ReadFrom(f)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	for _, p := range st.added {
		b.WriteString(p.line())
	}
	return atomicfile.Write(path, b.Bytes(), 0o644)
}

// walkOwnSeals reads the state file and adds to it the journal seals of
// writer's spine after its head, reading back from the spine's head to
// that head: the spine entries written since the last run. When the walk
// does not meet it (no file, or a spine that no longer contains it), it
// reads the spine whole and the seals it finds replace the file's. The
// entries are not proven here: they only name the tasks to look at, and
// each is checked under the write lock before it is archived. The seals
// due before cutoff at the start of what is pending are in st.due.
func (s *Store) walkOwnSeals(path, writer string, cutoff int64, out *remote.AutoArchive) (*archiveState, error) {
	head, err := s.core.Refs.ReadOptional(refs.Spine(writer))
	if err != nil {
		return nil, err
	}
	if own, ok := s.w.OwnHead(refs.Spine(writer), head); ok {
		// Its loose file holds no object id: the spine is at the head this
		// writer recorded, as its writes take it (docs/trust.md, Refs that
		// cannot be read).
		head = own
	}
	st, ok := readArchiveState(path, writer, cutoff)
	stop := st.head
	met := ok && head == stop
	var found []pendingSeal
	for id := head; !id.IsZero() && !met; {
		cc, err := chain.Read(s.core.Objects, id)
		if err != nil {
			return nil, fmt.Errorf("%s at %s: %w", refs.Spine(writer), id, err)
		}
		out.SpineRead++
		if e, err := record.ParseSpineEntry(cc.Record); err == nil && e.Seal != nil {
			found = append(found, pendingSeal{Task: e.Seal.TaskID, LedgerIndex: e.Seal.LedgerIndex, Ended: verify.CommitTime(cc.Commit.Committer)})
		}
		id = gitstore.ZeroOid
		if len(cc.Commit.Parents) > 0 {
			id = cc.Commit.Parents[0]
		}
		met = ok && !stop.IsZero() && id == stop
	}
	if !met {
		st = &archiveState{} // the spine read whole
	}
	if head != st.head || !met {
		st.head, st.changed = head, true
	}
	slices.Reverse(found) // oldest first
	// The seals walked are due too when nothing pending comes before
	// them that is not.
	i := 0
	if !st.more {
		for i < len(found) && found[i].Ended < cutoff {
			i++
		}
	}
	st.due = append(st.due, found[:i]...)
	st.added = found[i:]
	return st, nil
}

// archiveDue archives the pending seals' tasks that ended before cutoff,
// archive.MaxAdd a commit, each checked under the write lock
// (Tx.Archivable) and kept only when this writer's seal is of its last
// ledger row: a task another writer ended since (or reopened) is not this
// writer's to archive. Each seal looked at leaves st.Pending once its
// transaction committed: archived, or passed over.
func (s *Store) archiveDue(st *archiveState, out *remote.AutoArchive) error {
	due := len(st.due)
	archiveMu.Lock()
	defer archiveMu.Unlock()
	tamper, err := s.restoreOwnArchive()
	if err != nil {
		return err
	}
	out.Tampered = tamper
	for next := 0; next < due; {
		var passed []remote.PassedOver
		checked := 0
		res, err := s.w.Submit(func(t *txn.Tx) (any, error) {
			passed, checked = passed[:0], 0
			if err := t.CheckArchiveFormat(); err != nil {
				return nil, err
			}
			var add []record.ArchivedTask
			adding := map[string]bool{}
			i := next
			for ; i < due && len(add) < archive.MaxAdd; i++ {
				p := st.due[i]
				if adding[p.Task] {
					continue // a seal named twice
				}
				checked++
				ledgerHead, err := t.RefValue(refs.Ledger(p.Task))
				if err != nil {
					return nil, err
				}
				if ledgerHead.IsZero() {
					continue // archived already (here or by a fetch), or gone
				}
				// A task ended last by another writer (this writer's seal
				// is not of its last ledger row), or reopened, is not
				// this writer's to archive: its next seal of it, if any,
				// is pending.
				e, err := t.Archivable(p.Task, time.Time{})
				ok, why, err := archiveCandidate(e, err, func(e record.ArchivedTask) bool { return e.LedgerRows-1 == p.LedgerIndex })
				switch {
				case err != nil:
					return nil, err
				case ok:
					add = append(add, e)
					adding[p.Task] = true
				case why != "":
					passed = append(passed, remote.PassedOver{Task: p.Task, Reason: why})
				}
			}
			if len(add) == 0 {
				return archived{next: i}, nil
			}
			a, err := archiveCommit(t, add)
			a.next = i
			return a, err
		})
		if err != nil {
			st.due = st.due[next:]
			return err
		}
		a := res.(archived)
		if a.tamper != nil {
			out.Tampered = a.tamper
			s.core.Warn("%s", a.tamper)
		}
		if a.commit != "" {
			out.Archived = append(out.Archived, a.tasks...)
			out.Commits = append(out.Commits, a.commit)
		}
		out.PassedOver = append(out.PassedOver, passed...)
		out.Checked += checked
		next = a.next
		st.changed = true
	}
	st.due = nil
	return nil
}
