package remote

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/internal/writers"
	"github.com/bernstein/bernstein/refs"
)

// PushResult says what Push did.
type PushResult struct {
	Remote string `json:"remote"`
	// Atomic is false when the remote does not support atomic pushes and the
	// refs were pushed one by one.
	Atomic   bool        `json:"atomic"`
	Pushed   []RefChange `json:"pushed"` // Old is the remote's value as last fetched ("" if unknown)
	UpToDate int         `json:"up_to_date"`
	// RemoteAhead are refs the remote has newer than this host: fetch them.
	RemoteAhead []RefChange  `json:"remote_ahead"`
	Rejected    []Rejection  `json:"rejected"`
	Diverged    []Divergence `json:"diverged"`
	// RemoteMessages are the lines the remote printed (its hooks' refusals),
	// over every attempt.
	RemoteMessages []string `json:"remote_messages"`
	// Untrusted are the writers the remote's guard pins no key of, whose
	// key refs this push published (UntrustedError).
	Untrusted []UntrustedWriter `json:"untrusted,omitempty"`
	// Replanned counts the times the remote turned out to have moved refs
	// (since the last fetch, or while the push was under way: another
	// push), so that Push fetched its heads and planned again.
	Replanned int `json:"replanned"`
	// Deleted are the remote's refs of tasks this host archived that the
	// push deleted (Old: the remote's value, which the deletion expected).
	Deleted []RefChange `json:"deleted"`
	// ReadPast are this host's task refs that cannot be read as their
	// chain (plain git pointed them at a blob, a tree, a tag, a missing
	// object), any other ref whose head is no commit or whose chain breaks
	// between it and the remote's head, any other ref whose loose file
	// holds no object id but this writer's own spine, audit mirror and
	// archive, and any ref of a name bernstein writes no ref under: not
	// pushed, and no hold on the others (docs/trust.md, Refs that cannot
	// be read).
	ReadPast []refs.BadRef `json:"read_past,omitempty"`
	// Tampered are the warnings of this writer's own spine and audit
	// mirror found holding what it could not verify as its own (commits
	// appended with plain git): each was moved back to the writer's last
	// verified head, over the value found, before the push, which sent
	// that head (docs/trust.md). Empty when none.
	Tampered []string `json:"tampered,omitempty"`
	// LeftOut are local refs the push did not send: an archive ref that
	// cannot be read as its writer's archive, which the remote's guard
	// would refuse, and with it the whole push.
	LeftOut []LeftOut `json:"left_out"`
	// AutoArchive is what the automatic archive did before the push
	// (docs/archive.md, Automatic archiving); nil when it did not run.
	AutoArchive *AutoArchive `json:"auto_archive,omitempty"`
	// ArchiveRefused says that the remote's guard refused the archive
	// refs, as a guard of a version before storage format 3 does, and
	// that the push went again without them (nil: it did not).
	ArchiveRefused *ArchiveRefused `json:"archive_refused,omitempty"`
	// more: deletions were left for another push (more than one push's
	// command line holds).
	more bool
}

// Rejection is a ref the remote refused.
type Rejection struct {
	RefInfo
	Reason string `json:"reason"` // git's: "fetch first", "non-fast-forward", "pre-receive hook declined", ...
	// Refused is true when the remote's own checks (a hook) refused it, or
	// its ref transaction failed though nothing had moved the ref; false
	// when the ref had moved on the remote (git's fast-forward rule, or
	// another push that landed first).
	Refused bool `json:"refused"`
}

// RejectedError reports a push the remote rejected because it holds commits
// this host lacks on refs this host also moved, still after Push fetched its
// heads and planned again (the remote kept moving them, maxPushAttempts
// times; or the fetch did not show them moved, as when the remote's fetch
// and push URLs differ). Nothing was pushed when the push was atomic.
type RejectedError struct {
	Remote   string
	Rejected []Rejection
	Pushes   int // the pushes made, each retry after fetching the remote's heads
}

func (e *RejectedError) Error() string {
	r := e.Rejected[0]
	return fmt.Sprintf("%s rejected %s (%s)%s: it holds commits this host lacks, still after push fetched its heads (%d push%s); run 'bernstein fetch %s', then push again",
		e.Remote, r.What(), r.Reason, more(len(e.Rejected)-1), e.Pushes, map[bool]string{true: "", false: "es"}[e.Pushes == 1], e.Remote)
}

// Is makes errors.Is(err, ErrDiverged) hold: the remote moved a ref this
// host moved too.
func (e *RejectedError) Is(target error) bool { return target == ErrDiverged }

// RemoteRefusedError reports refs the remote refused by its own checks (a
// pre-receive hook), or failed to update though nothing had moved them
// (Failed): its messages say why. Refused lists first the refs its messages
// name.
type RemoteRefusedError struct {
	Remote   string
	Refused  []Rejection
	Messages []string
	Failed   bool
}

// Summary is the error without the remote's messages, for a caller that
// shows them already.
func (e *RemoteRefusedError) Summary() string {
	r := e.Refused[0]
	if e.Failed {
		return fmt.Sprintf("%s failed to update %s (%s)%s, though no other push had moved it", e.Remote, r.What(), r.Reason, more(len(e.Refused)-1))
	}
	return fmt.Sprintf("%s refused %s (%s)%s", e.Remote, r.What(), r.Reason, more(len(e.Refused)-1))
}

func (e *RemoteRefusedError) Error() string {
	msg := e.Summary()
	if len(e.Messages) > 0 {
		msg += ": " + strings.Join(e.Messages, "; ")
	}
	return msg
}

func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more ref%s", n, plural(n))
}

// pushArgBudget bounds the bytes of <commit>:<ref> refspecs passed to git
// push on its command line (about 2,500 refs); a larger push goes through
// temporary refs and one pattern (see pushViaRefs), which costs three
// `git update-ref` runs more. A syncer's argBudget, when set (by tests),
// takes its place.
const pushArgBudget = 256 << 10

// PushTempRoot holds the temporary refs of a large push:
// refs/bernstein-push/<pid>/<rest>.
const PushTempRoot = "refs/bernstein-push/"

// maxDeletionPushes bounds the pushes one Push makes after the first to
// delete the remote's refs of tasks archived here (about 1,000 deletions
// each): a repository that archived more deletes the rest at its next push.
const maxDeletionPushes = 64

// maxPushAttempts bounds the git pushes of one Push: the first, and a retry
// after each time the remote turned out to have moved refs meanwhile.
const maxPushAttempts = 3

// Push sends every local refs/bernstein/* ref that this host moved past the
// remote's head to remote, in one atomic push (one by one, said in the
// result, when the remote cannot do atomic pushes), never forced. It first
// finishes any interrupted local write, then pushes the refs exactly as one
// snapshot saw them, so the remote never receives half a post.
//
// Refs the remote has newer (another host's chains, fetched earlier) are
// left out. A ref both sides moved is a divergence: nothing is pushed and
// the error is a *DivergedError. When the remote rejects refs because they
// moved there since the last fetch (git's "fetch first" or
// "non-fast-forward"), or because another push moved them while this one
// was under way (the remote's ref transaction failed: "atomic transaction
// failed", "failed to update ref"), Push fetches the remote's heads into the
// remote-tracking refs, plans again and retries (at most maxPushAttempts
// pushes in all): a divergence is then a *DivergedError naming the task,
// refs the remote now has as this host does drop out, and if the remote
// keeps moving the error is a *RejectedError. Refs refused by the remote's
// hooks give a *RemoteRefusedError with the remote's messages.
//
// If the repository has a pre-push hook (bernstein hooks install
// --pre-push, or any other), Push runs it before each git push, as git push
// would, with the commits it is about to send and the remote's heads as
// last fetched; when the hook refuses, nothing is sent and the error is a
// *PrePushError. (git push itself runs with --no-verify: the hook would
// run twice, and git would give it the remote's live heads, whose commits
// this host may never have seen; see runPrePush.)
//
// With witnesses configured, the writer's signed checkpoint goes with the
// rows, and the witnesses' cosignatures of it follow in a second push
// (signCheckpoint, cosignPushed): a witness never cosigns a checkpoint the
// remote lacks.
func (s *Syncer) Push(remote string) (*PushResult, error) {
	if err := Check(s.c.GitDir, remote); err != nil {
		return nil, err
	}
	if err := s.w.Settle(); err != nil {
		return nil, err
	}
	// The writer's own spine and audit mirror go, and are checkpointed,
	// at the heads it verifies as its own, never at a value plain git
	// put there (docs/trust.md).
	restored, err := s.w.RestoreOwnChains()
	if err != nil {
		return nil, err
	}
	signed, err := s.signCheckpoint()
	if err != nil {
		return nil, err
	}
	res, err := s.pushRefs(remote)
	if res != nil {
		res.Tampered = restored
	}
	// A push carries only so many deletions of archived tasks' refs: the
	// rest go in the pushes after it, each atomic too (the archive that
	// covers them is on the remote by then).
	for n := 0; err == nil && res.more && n < maxDeletionPushes; n++ {
		var next *PushResult
		if next, err = s.pushRefs(remote); next != nil {
			next.Pushed = append(res.Pushed, next.Pushed...)
			next.Deleted = append(res.Deleted, next.Deleted...)
			next.UpToDate, next.Replanned = res.UpToDate, res.Replanned+next.Replanned
			res = next
		}
	}
	if res != nil {
		for _, l := range res.LeftOut {
			s.c.Warn("did not push %s (at %s): it cannot be read as writer %s's archive (%s); run 'bernstein audit verify', and delete the ref or set it back to that writer's last archive commit", l.Ref, l.Commit, l.Writer, l.Reason)
		}
	}
	if err != nil || signed.IsZero() {
		return res, err
	}
	return s.cosignPushed(remote, res, signed)
}

// AutoArchive is what the automatic archive (docs/archive.md, Automatic
// archiving) did before a push: the tasks it archived and the archive
// commits it made, the ended tasks it passed over and why, and, when it
// stopped, why (the push went on all the same).
type AutoArchive struct {
	EndedBefore string       `json:"ended_before"` // the policy's age
	Archived    []string     `json:"archived"`
	Commits     []string     `json:"commits"`
	PassedOver  []PassedOver `json:"passed_over"`
	Error       string       `json:"error,omitempty"`
	// Tampered is what this writer's archive ref held that it could not
	// verify as its own (moved with plain git): the ref was moved back to
	// its last verified archive commit, or the archive built on that, over
	// the value found (docs/archive.md, The writer's own archive).
	Tampered *txn.ArchiveTamper `json:"tampered,omitempty"`
	// SpineRead counts the spine entries read (those this writer wrote
	// since the last run), Checked the tasks checked under the write lock
	// (those whose end came of age): the run's cost, whatever the number
	// of tasks.
	SpineRead int `json:"spine_entries_read"`
	Checked   int `json:"tasks_checked"`
}

// PassedOver is an ended task the automatic archive did not archive, and
// why.
type PassedOver struct {
	Task   string `json:"task_id"`
	Reason string `json:"reason"`
}

// pushRefs is one push of every ref this host has ahead of remote.
func (s *Syncer) pushRefs(remote string) (*PushResult, error) {
	p := &pushRun{s: s, remote: remote, atomic: true}
	for attempt := 0; ; attempt++ {
		res, plan, err := p.plan(attempt)
		if err != nil {
			return nil, err
		}
		// A task that diverged blocks only itself (planPush): the rest is
		// pushed, and the push ends with the divergence.
		diverged := func(err error) error {
			if err == nil && len(res.Diverged) > 0 {
				return &DivergedError{Remote: remote, Diverged: res.Diverged}
			}
			return err
		}
		if p.archiveRefused != nil {
			plan = p.withoutArchive(res, plan)
		}
		if len(plan) == 0 {
			return res, diverged(nil)
		}
		if err := s.runPrePush(remote, plan); err != nil {
			return res, err
		}
		st, out, err := s.gitPush(remote, plan, p.atomic)
		if errors.Is(err, errNoAtomic) {
			p.atomic = false
			s.c.Warn("%s does not support atomic pushes: pushing the refs one by one", remote)
			attempt--
			continue
		}
		if err != nil {
			return nil, err
		}
		if done, res, err := p.settle(res, plan, st, out, attempt); done {
			var refused *RemoteRefusedError
			if errors.As(err, &refused) && !refused.Failed && p.archiveRefused == nil {
				if why := archiveUnknown(refused.Messages); why != "" {
					// A guard that predates the archive: the rest goes
					// again without it.
					p.archiveRefused = &ArchiveRefused{Reason: why, Refs: []string{}}
					s.c.Warn("%s refused the archive: its guard predates storage format 3 (%s); pushing the rest without the archive refs and the deletions of archived tasks' refs: upgrade the remote's guard, or set %s to off for this repository", remote, why, "bernstein.archive.endedBefore")
					continue
				}
			}
			if errors.As(err, &refused) && !refused.Failed {
				err = p.untrusted(refused)
				var ut *UntrustedError
				if errors.As(err, &ut) && res != nil {
					res.Untrusted = ut.Writers
				}
			}
			if res != nil {
				err = diverged(err)
			}
			return res, err
		}
	}
}

// pushRun is one Push: what its attempts carry over.
type pushRun struct {
	s      *Syncer
	remote string
	atomic bool // false once the remote turned out not to support atomic pushes
	// What earlier attempts pushed (a push that is not atomic lands some
	// refs before another is rejected) and what the remote said.
	pushedBefore  []RefChange
	deletedBefore []RefChange
	msgs          []string
	// archiveRefused: the remote's guard refused the archive refs as no
	// refs it knows (archiveUnknown); the attempts after leave them out.
	archiveRefused *ArchiveRefused
}

// ArchiveRefused is what a push left out because the remote's guard
// refused the archive as a guard of a version before storage format 3
// does (docs/archive.md, Remotes): the archive refs, and how many
// deletions of archived tasks' refs it held back. The rest was pushed.
type ArchiveRefused struct {
	Reason string `json:"reason"` // the guard's refusal of the first archive ref
	// Refs are the archive refs not pushed.
	Refs []string `json:"refs"`
	// Deletions counts the deletions of the remote's refs of tasks
	// archived here that were not made.
	Deletions int `json:"deletions_held"`
}

// archiveUnknownRe is a guard's refusal of a ref as its check names it:
// "bernstein guard: refused <ref>[ (<where>)]: <reason> [<check>]".
var archiveUnknownRe = regexp.MustCompile(`bernstein guard: refused (refs/bernstein/[^ :]+)(?: \(.*?\))?: (.*) \[([a-z_]+)\]\s*$`)

// archiveUnknown reports, from a refused push's remote messages, a
// refusal of the whole push by a guard that predates storage format 3:
// every ref it refused is an archive ref it does not know ([ref_name]),
// or the deletion of a journal or ledger ref ([deletion]: it knows no
// archive that covers it), at least one is an archive ref, and the guard
// said nothing else but its summary. It
// returns the first archive ref's refusal ("" when the push was refused
// for anything else).
func archiveUnknown(msgs []string) string {
	why := ""
	for _, m := range msgs {
		if !strings.Contains(m, "bernstein guard: ") || strings.Contains(m, "bernstein guard: push refused: ") {
			continue // another hook's line, or the guard's summary
		}
		sub := archiveUnknownRe.FindStringSubmatch(m)
		switch {
		case sub == nil:
			return ""
		case isArchiveRef(sub[1]) && sub[3] == "ref_name":
			if why == "" {
				why = sub[1] + ": " + sub[2] + " [" + sub[3] + "]"
			}
		case isTaskRef(sub[1]) && sub[3] == "deletion":
		default:
			return ""
		}
	}
	return why
}

// withoutArchive is plan without the archive refs and the deletions of
// archived tasks' refs, which the remote's guard refuses: each archive
// ref left out is named in res.ArchiveRefused, the deletions counted.
func (p *pushRun) withoutArchive(res *PushResult, plan []refs.Update) []refs.Update {
	kept := plan[:0:0]
	a := p.archiveRefused
	a.Deletions = 0
	for _, u := range plan {
		switch {
		case isArchiveRef(u.Ref):
			if !slices.Contains(a.Refs, u.Ref) {
				a.Refs = append(a.Refs, u.Ref)
			}
		case u.New.IsZero() && isTaskRef(u.Ref):
			a.Deletions++
		default:
			kept = append(kept, u)
		}
	}
	res.ArchiveRefused, res.more = a, false
	return kept
}

// plan starts an attempt's result with what earlier attempts did, and
// plans the refs it pushes.
func (p *pushRun) plan(attempt int) (*PushResult, []refs.Update, error) {
	res := &PushResult{Remote: p.remote, Atomic: p.atomic, Pushed: []RefChange{}, Deleted: []RefChange{}, LeftOut: []LeftOut{}, RemoteAhead: []RefChange{}, Rejected: []Rejection{}, Diverged: []Divergence{}, RemoteMessages: []string{}}
	skip := map[string]bool{}
	for _, c := range p.pushedBefore {
		skip[c.Ref] = true
	}
	plan, err := p.s.planPush(p.remote, res, skip)
	res.Pushed = append(res.Pushed, p.pushedBefore...)
	res.Deleted = append(res.Deleted, p.deletedBefore...)
	res.RemoteMessages = append(res.RemoteMessages, p.msgs...)
	res.Replanned = attempt
	return res, plan, err
}

// pushOutcome sorts the refs of one git push by what became of them.
type pushOutcome struct {
	landed     []refs.Update // pushed, or up to date
	stale      []refs.Update // rejected: the remote moved them (or may have)
	refused    []Rejection   // refused by the remote's own checks
	collateral int           // held back with the rest of a failed atomic push
	races      int           // of stale: the remote's ref transaction lost a race
}

// settle records in res what one git push did, and decides: the Push is
// done (with its result and error), or it tries again, the remote's heads
// fetched.
func (p *pushRun) settle(res *PushResult, plan []refs.Update, st map[string]pushStatus, out []string, attempt int) (done bool, _ *PushResult, _ error) {
	p.msgs = append(p.msgs, out...)
	res.RemoteMessages = append(res.RemoteMessages, out...)
	o, err := p.sort(res, plan, st)
	if err != nil {
		return true, nil, err
	}
	if err := p.s.setTracking(p.remote, o.landed); err != nil {
		p.s.c.Warn("update the remote-tracking refs of %s: %v", p.remote, err)
	}
	if len(o.stale) == 0 {
		return true, res, p.finished(res, o, out)
	}
	// Refs the remote moved come first, even beside refs its hooks refused
	// (one by one, a guard refuses a spine that seals a row of a journal
	// git push held back): planning again on its heads names a
	// divergence, and a refusal that stands is met again.
	res.Rejected = namedFirst(res.Rejected, out)
	if attempt+1 >= maxPushAttempts {
		if len(o.refused) > 0 {
			return true, res, p.refusedError(res, o)
		}
		return true, res, &RejectedError{Remote: p.remote, Rejected: res.Rejected, Pushes: attempt + 1}
	}
	moved, err := p.remoteMoved(o.stale)
	if err != nil {
		return true, nil, err
	}
	if moved {
		return false, nil, nil
	}
	return true, res, p.unmoved(res, o, attempt)
}

// sort reads git's status of each ref of plan into res and the outcome.
func (p *pushRun) sort(res *PushResult, plan []refs.Update, st map[string]pushStatus) (*pushOutcome, error) {
	o := &pushOutcome{}
	rejected := false
	for _, r := range st {
		rejected = rejected || !r.ok
	}
	for _, u := range plan {
		r, ok := st[u.Ref]
		if !ok {
			// Over smart HTTP, git reports only the rejected refs of a
			// failed atomic push.
			if !p.atomic || !rejected {
				return nil, fmt.Errorf("git push %s reported nothing for %s", p.remote, u.Ref)
			}
			r = pushStatus{reason: "atomic push failed", collateral: true}
		}
		switch {
		case r.ok:
			o.landed = append(o.landed, u)
			if r.upToDate {
				res.UpToDate++
			} else if u.New.IsZero() {
				c := RefChange{RefInfo: DescribeRef(u.Ref), Old: u.Old.String()}
				res.Deleted = append(res.Deleted, c)
				p.deletedBefore = append(p.deletedBefore, c)
			} else {
				c := RefChange{RefInfo: DescribeRef(u.Ref), Old: oidOrEmpty(u.Old), New: u.New.String()}
				res.Pushed = append(res.Pushed, c)
				p.pushedBefore = append(p.pushedBefore, c)
			}
		case r.collateral:
			// Held back with the rest of an atomic push: it goes again
			// with the retry, if there is one.
			o.collateral++
		case r.remote && !r.race:
			rj := Rejection{RefInfo: DescribeRef(u.Ref), Reason: r.reason, Refused: true}
			res.Rejected = append(res.Rejected, rj)
			o.refused = append(o.refused, rj)
		default:
			res.Rejected = append(res.Rejected, Rejection{RefInfo: DescribeRef(u.Ref), Reason: r.reason})
			o.stale = append(o.stale, u)
			if r.race {
				o.races++
			}
		}
	}
	return o, nil
}

// finished is the end of a push that left no ref stale: refused by the
// remote's checks, failed without a named cause, or done.
func (p *pushRun) finished(res *PushResult, o *pushOutcome, out []string) error {
	if len(o.refused) > 0 {
		return p.refusedError(res, o)
	}
	if o.collateral > 0 {
		return fmt.Errorf("git push %s: the atomic push failed, but git named no ref that caused it: %s", p.remote, strings.Join(out, "; "))
	}
	return nil
}

func (p *pushRun) refusedError(res *PushResult, o *pushOutcome) error {
	return &RemoteRefusedError{Remote: p.remote, Refused: namedFirst(o.refused, res.RemoteMessages), Messages: res.RemoteMessages}
}

// remoteMoved learns the remote's heads (remote-tracking refs only;
// nothing local moves) and reports whether any stale ref moved there since
// it was planned. The whole namespace, not only the stale refs: a lost
// race rejects every ref of an atomic push, those the remote does not have
// too, and the other push may have created refs this one creates.
func (p *pushRun) remoteMoved(stale []refs.Update) (bool, error) {
	if err := p.s.fetchTracking(p.remote, []string{"+" + refs.Prefix + "*:" + TrackingPrefix(p.remote) + "*"}, false); err != nil {
		return false, err
	}
	tracking, _, err := p.s.c.Refs.List(TrackingPrefix(p.remote))
	if err != nil {
		return false, err
	}
	moved := false
	for _, u := range stale {
		moved = moved || tracking[TrackingRef(p.remote, u.Ref)] != u.Old
	}
	return moved, nil
}

// unmoved is the error of a push whose rejected refs the remote did not
// move: a retry would only repeat it.
func (p *pushRun) unmoved(res *PushResult, o *pushOutcome, attempt int) error {
	if len(o.refused) > 0 {
		return p.refusedError(res, o)
	}
	if o.races < len(o.stale) {
		// git push rejected refs whose heads the fetch does not show
		// moved (the fetch and push URLs differ?).
		return &RejectedError{Remote: p.remote, Rejected: res.Rejected, Pushes: attempt + 1}
	}
	// None of them moved on the remote: its ref transaction failed for a
	// reason of its own (a full disk, a stale lock).
	var failed []Rejection
	for _, r := range res.Rejected {
		failed = append(failed, Rejection{RefInfo: r.RefInfo, Reason: r.Reason, Refused: true})
	}
	res.Rejected = failed
	return &RemoteRefusedError{Remote: p.remote, Refused: failed, Messages: res.RemoteMessages, Failed: true}
}

// namedFirst puts first the rejections whose ref the remote's messages
// name (its guard's "refused <ref>", git's "cannot lock ref '<ref>'"): the
// refs that caused the rejection, rather than those merely held back with
// them.
func namedFirst(rs []Rejection, msgs []string) []Rejection {
	named := func(ref string) bool {
		for _, m := range msgs {
			for i := strings.Index(m, ref); i >= 0; {
				end := i + len(ref)
				if end == len(m) || !refNameByte(m[end]) {
					return true
				}
				j := strings.Index(m[end:], ref)
				if j < 0 {
					break
				}
				i = end + j
			}
		}
		return false
	}
	out := make([]Rejection, 0, len(rs))
	var rest []Rejection
	for _, r := range rs {
		if named(r.Ref) {
			out = append(out, r)
		} else {
			rest = append(rest, r)
		}
	}
	return append(out, rest...)
}

// refNameByte reports whether b can continue a ref name (a message naming
// refs/bernstein/journal/T-1 does not name refs/bernstein/journal/T-10).
func refNameByte(b byte) bool {
	return b > ' ' && b != '\'' && b != '"' && b != ':' && b != ')' && b != ',' && b != ';' && b != 0x7f
}

func oidOrEmpty(o gitstore.Oid) string {
	if o.IsZero() {
		return ""
	}
	return o.String()
}

// planPush decides which refs to push: every local ref whose remote-tracking
// copy is missing or an ancestor of it. Old in each update is the remote's
// value as last fetched (zero when unknown).
//
// Refs in skip (pushed by an earlier attempt of the same Push) are not
// counted as up to date.
func (s *Syncer) planPush(remote string, res *PushResult, skip map[string]bool) ([]refs.Update, error) {
	// The refs as they are: an archived task's heads travel in its archive
	// ref, never as task refs the remote would take for new ones.
	local, err := s.c.Refs.WithoutArchive().Snapshot(refs.Prefix)
	if err != nil {
		return nil, err
	}
	mine, names, err := local.List(refs.Prefix)
	if err != nil {
		return nil, err
	}
	// A task ref whose loose file is not an object id has no head here
	// (List leaves it out): read past, named, as one whose head is no
	// chain commit.
	for _, b := range local.BadLoose(refs.Prefix) {
		res.readPast(b)
	}
	if _, ok := mine[refs.Repository]; !ok {
		// A repository ref deleted here goes at the identity this host's
		// writer recorded, as a ref that holds another value does (below).
		if _, ok := s.c.IdentityOver(gitstore.ZeroOid); ok {
			mine = maps.Clone(mine)
			mine[refs.Repository] = gitstore.ZeroOid
			names = append(slices.Clone(names), refs.Repository)
			slices.Sort(names)
		}
	}
	tracking, _, err := s.c.Refs.List(TrackingPrefix(remote))
	if err != nil {
		return nil, err
	}
	var plan []refs.Update
	// The chains of each task, as this host has them against the remote:
	// a task one of whose chains diverged is held back whole, and what
	// this host wrote to it goes to its forks instead (forkPlan).
	type taskChain struct {
		ref   string
		head  gitstore.Oid
		base  gitstore.Oid // the last commit the remote has too (zero: none)
		ahead bool         // this host has commits the remote lacks
	}
	tasks := map[string][]taskChain{}
	diverged := map[string]bool{}
	// The archives this push leaves on the remote (standing: this host's
	// heads of those it pushes or the remote has as this host does), and
	// those the remote holds as this host does (verified here: a
	// remote-tracking copy alone decides nothing).
	var standing []gitstore.Oid
	theirArchives := s.archives(sharedArchives(mine, tracking, remote))
	for _, ref := range names {
		head := mine[ref]
		theirs := tracking[TrackingRef(remote, ref)]
		in := DescribeRef(ref)
		if ref == refs.Repository {
			// A repository ref that does not hold the identity this host's
			// writer recorded goes at the recorded head (docs/trust.md, A
			// row belongs to one repository).
			if h, ok := s.c.IdentityOver(head); ok {
				head = h
			}
		}
		if in.Kind == "other" {
			// A name bernstein writes no ref under (made with plain git):
			// the remote's guard would refuse it, and with it the whole
			// push. Read past, not pushed.
			res.readPast(refs.BadRef{Ref: ref, At: head, Reason: "bernstein writes no such ref"})
			continue
		}
		if head.IsLooseStandIn() {
			// A ref whose loose file holds no object id (docs/trust.md,
			// Refs that cannot be read): this writer's own spine, audit
			// mirror or archive goes at the head it recorded last, as its
			// next write takes it; any other is read past, not pushed.
			own, ok := s.w.OwnHead(ref, head)
			if !ok {
				res.readPast(refs.BadRef{Ref: ref, At: head, Reason: "its loose file holds no object id"})
				continue
			}
			head = own
		}
		isTask := in.Task != "" && (in.Kind == "journal" || in.Kind == "ledger")
		if !isTask && !isArchiveRef(ref) && head != theirs && !head.IsZero() {
			// Any other ref whose head is no commit (plain git pointed it
			// at a blob, a tree, a tag, an object this repository does not
			// have), or, new to the remote, whose chain breaks below it,
			// is read past as a task ref is: git push would fail on it,
			// and with it the whole push. (One the remote has is read by
			// the comparison below, as far as the remote's head; an
			// archive ref is checked whole below, and left out.)
			var err error
			if theirs.IsZero() || !s.c.Objects.Has(theirs) {
				err = s.walkChain(head)
			} else {
				_, err = s.parentOf(head)
			}
			if unreadableObject(err) {
				res.readPast(refs.BadRef{Ref: ref, At: head, Reason: err.Error()})
				continue
			}
		}
		if isTask && head != theirs {
			// A task ref whose head is no chain commit is read past: it
			// is not pushed, and holds no other ref back. One the remote
			// holds at the same value sends nothing, and is not read: a
			// push reads the refs that moved, not every task's head.
			if _, err := chain.Read(s.c.Objects, head); unreadableObject(err) {
				res.readPast(refs.BadRef{Ref: ref, At: head, Reason: err.Error()})
				continue
			}
			if theirs.IsZero() || !s.c.Objects.Has(theirs) {
				// New to the remote: every commit of it goes, so every
				// one must be there to go.
				if err := s.walkChain(head); unreadableObject(err) {
					res.readPast(refs.BadRef{Ref: ref, At: head, Reason: err.Error()})
					continue
				}
			}
		}
		if isArchiveRef(ref) && head != theirs {
			// An archive ref that is not its writer's archive (moved with
			// plain git) would have the remote's guard refuse the whole
			// push: it stays here, named, and covers no deletion.
			why, err := s.unsendableArchive(ref, head, theirs, local)
			if err != nil {
				return nil, err
			}
			if why != "" {
				res.LeftOut = append(res.LeftOut, LeftOut{RefInfo: in, Commit: head.String(), Reason: why})
				continue
			}
		}
		if isArchiveRef(ref) && (theirs.IsZero() || !s.c.Objects.Has(theirs)) {
			standing = append(standing, head)
		}
		if theirs.IsZero() || !s.c.Objects.Has(theirs) {
			if isTask {
				// The remote archived the task at this head or one
				// extending it: not this host's to push.
				if gone, err := theirArchives.coversTask(in.Task, mine, tracking, remote); err != nil {
					return nil, err
				} else if gone {
					continue
				}
			}
			plan = append(plan, refs.Update{Ref: ref, New: head})
			if isTask {
				tasks[in.Task] = append(tasks[in.Task], taskChain{ref, head, gitstore.ZeroOid, true})
			}
			continue
		}
		a, err := s.relate(head, theirs)
		if unreadableObject(err) {
			// The chain, or the remote's as last fetched, breaks below its
			// head: read past as well.
			res.readPast(refs.BadRef{Ref: ref, At: head, Reason: err.Error()})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		if isArchiveRef(ref) && (a.rel == relSame || a.rel == relAhead) {
			standing = append(standing, head) // on the remote after this push
		}
		switch a.rel {
		case relSame:
			if !skip[ref] {
				res.UpToDate++
			}
		case relAhead:
			plan = append(plan, refs.Update{Ref: ref, Old: theirs, New: head})
			if isTask {
				tasks[in.Task] = append(tasks[in.Task], taskChain{ref, head, theirs, true})
			}
		case relBehind:
			res.RemoteAhead = append(res.RemoteAhead, RefChange{RefInfo: DescribeRef(ref), Old: head.String(), New: theirs.String(), Commits: a.remoteOnly})
		case relDiverged:
			res.Diverged = append(res.Diverged, divergence(remote, ref, head, theirs, a))
			if isTask {
				diverged[in.Task] = true
				tasks[in.Task] = append(tasks[in.Task], taskChain{ref, head, a.base, true})
			}
		}
	}
	for _, d := range res.Diverged {
		if d.Task == "" || d.Kind != "journal" && d.Kind != "ledger" {
			// One of the chains a single writer writes diverged: that
			// writer identity writes on two hosts (or a chain was
			// rewritten), and what it seals cannot go without it: nothing
			// goes.
			return nil, nil
		}
	}
	if len(diverged) == 0 {
		return s.planDeletions(remote, res, mine, tracking, standing, plan)
	}
	id, err := s.c.Identity()
	if err != nil {
		return nil, nil // no writer here to fork under: nothing goes
	}
	// A diverged task blocks only itself: its chains stay, and the rows
	// this host wrote to them go to its forks, which explain its spine
	// entries, seals and audit entries of the task on every host
	// (verify/forks.go) until it resolves the divergence (task adopt).
	held := map[string]bool{}
	for task := range diverged {
		for _, c := range tasks[task] {
			held[c.ref] = true
			kind := DescribeRef(c.ref).Kind
			base := int64(0)
			if !c.base.IsZero() {
				at, ok := s.position(c.ref, c.base)
				if !ok {
					return nil, fmt.Errorf("%s: cannot read the commit it shares with %s", c.ref, remote)
				}
				base = at + 1
			}
			fork := refs.Fork(id.Writer, kind, task, base)
			old := tracking[TrackingRef(remote, fork)]
			if old == c.head {
				if !skip[fork] {
					res.UpToDate++
				}
				continue
			}
			plan = append(plan, refs.Update{Ref: fork, Old: old, New: c.head})
		}
	}
	kept := plan[:0]
	for _, u := range plan {
		if !held[u.Ref] {
			kept = append(kept, u)
		}
	}
	return s.planDeletions(remote, res, mine, tracking, standing, kept)
}

// unreadableObject reports whether err says an object is not what a chain
// needs (missing, corrupt, not a commit, not a commit's shape): the ref's
// fault, not the read's.
func unreadableObject(err error) bool {
	return errors.Is(err, chain.ErrUnreadable) || errors.Is(err, gitstore.ErrMissing) || errors.Is(err, gitstore.ErrCorrupt)
}

// walkChain reads the chain from head to its root by first parents and
// returns the first error met.
func (s *Syncer) walkChain(head gitstore.Oid) error {
	seen := map[gitstore.Oid]bool{}
	for id := head; !id.IsZero() && !seen[id]; {
		seen[id] = true
		p, err := s.parentOf(id)
		if err != nil {
			return err
		}
		id = p
	}
	return nil
}

// readPast adds b to the refs the push read past, once.
func (r *PushResult) readPast(b refs.BadRef) {
	for _, x := range r.ReadPast {
		if x.Ref == b.Ref {
			return
		}
	}
	r.ReadPast = append(r.ReadPast, b)
}

var errNoAtomic = errors.New("the remote does not support atomic pushes")

type pushStatus struct {
	ok, upToDate bool
	// remote: the remote rejected the ref ("[remote rejected]"), not git
	// push itself.
	remote bool
	// race: the remote's ref transaction failed because another push moved
	// a ref meanwhile (lostRace), not because its checks refused.
	race bool
	// collateral: held back only because an atomic push failed on another
	// ref.
	collateral bool
	reason     string
}

// lostRace reports whether a reason git gives for a rejected ref says the
// ref moved under the push rather than that the remote refused it:
// receive-pack's ref transaction found the ref at another value than the
// one the push started from ("atomic transaction failed" for every ref of
// an atomic push, "failed to update ref" for one ref of another, "failed to
// lock" from older versions, with "cannot lock ref '<ref>': is at X but
// expected Y" among the remote's messages), or a lease that no longer holds
// ("stale info").
func lostRace(reason string) bool {
	switch reason {
	case "atomic transaction failed", "failed to update ref", "failed to lock", "stale info":
		return true
	}
	return strings.HasPrefix(reason, "cannot lock ref")
}

// heldBack reports whether a reason says a ref was held back only because
// another ref of its atomic push failed: git push's own "atomic push
// failed", receive-pack's "atomic push failure".
func heldBack(reason string) bool {
	return reason == "atomic push failed" || reason == "atomic push failure"
}

// gitPush pushes plan (exact commits to full ref names, never forced) and
// returns each ref's status from git's porcelain output and the remote's
// messages.
func (s *Syncer) gitPush(remote string, plan []refs.Update, atomic bool) (map[string]pushStatus, []string, error) {
	size := 0
	for _, u := range plan {
		size += len(u.Ref) + 42
	}
	// Locally a push writes only remote-tracking refs (hints): unsynced.
	args := []string{"push", "--porcelain", "--no-verify", "--no-recurse-submodules"}
	if atomic {
		args = append(args, "--atomic")
	}
	var cleanup func()
	// A deletion of a task's ref (archived here) goes with the remote's
	// value as a lease: git push refuses it ("stale info") when the remote
	// holds another value. It is always named on the command line.
	var dels, ups []refs.Update
	for _, u := range plan {
		if u.New.IsZero() {
			dels = append(dels, u)
		} else {
			ups = append(ups, u)
		}
	}
	for _, u := range dels {
		args = append(args, "--force-with-lease="+u.Ref+":"+u.Old.String())
		size -= len(u.Ref) + 42
	}
	args = append(args, remote)
	for _, u := range dels {
		args = append(args, ":"+u.Ref)
	}
	if size <= s.pushBudget() {
		for _, u := range ups {
			args = append(args, u.New.String()+":"+u.Ref)
		}
	} else {
		prefix, done, err := s.pushViaRefs(ups)
		if err != nil {
			return nil, nil, err
		}
		cleanup = done
		args = append(args, prefix+"*:"+refs.Prefix+"*")
	}
	out, errb, err := git.Cmd{Policy: git.User, GitDir: s.c.GitDir, Config: []string{"core.fsync=none"}, Args: args}.Run()
	if cleanup != nil {
		cleanup()
	}
	if err != nil && bytes.Contains(errb, []byte("does not support --atomic")) {
		return nil, nil, errNoAtomic
	}
	st := parsePorcelain(out)
	var msgs []string
	for _, l := range strings.Split(string(errb), "\n") {
		if m, ok := strings.CutPrefix(l, "remote: "); ok {
			if m = strings.TrimSpace(m); m != "" {
				msgs = append(msgs, m)
			}
		}
	}
	if err != nil && len(st) == 0 {
		return nil, nil, fmt.Errorf("git push %s: %s", remote, git.Message(errb))
	}
	return st, msgs, nil
}

// pushBudget is the bytes of refspecs a push names on git's command line.
func (s *Syncer) pushBudget() int {
	if s.argBudget > 0 {
		return s.argBudget
	}
	return pushArgBudget
}

// parsePorcelain reads `git push --porcelain`: "<flag>\t<src>:<dst>\t<summary>".
func parsePorcelain(out []byte) map[string]pushStatus {
	st := map[string]pushStatus{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || len(f[0]) != 1 {
			continue
		}
		_, dst, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		summary := f[2]
		reason := ""
		if i := strings.LastIndex(summary, "("); i >= 0 && strings.HasSuffix(summary, ")") {
			reason = summary[i+1 : len(summary)-1]
		}
		p := pushStatus{reason: reason}
		switch f[0] {
		case "=":
			p.ok, p.upToDate = true, true
		case " ", "*", "+", "-":
			p.ok = true // "-": deleted
		case "!":
			p.remote = strings.HasPrefix(summary, "[remote rejected]") || strings.HasPrefix(summary, "[remote failure]")
			if reason == "" {
				p.reason = strings.Trim(summary, "[]")
			}
			p.race = lostRace(p.reason)
			p.collateral = heldBack(p.reason)
		default:
			continue
		}
		st[dst] = p
	}
	return st
}

// pushViaRefs writes plan's commits to temporary refs
// refs/bernstein-push/<pid>/<rest> in one `git update-ref --stdin`
// transaction, for a push with too many refs for a command line. It returns
// the prefix to push from and the cleanup that deletes them.
func (s *Syncer) pushViaRefs(plan []refs.Update) (string, func(), error) {
	prefix := fmt.Sprintf("%s%d/", PushTempRoot, os.Getpid())
	// Temporary refs of pushes whose process died before it deleted them
	// (best effort: they only keep objects alive).
	if old, names, err := s.c.Refs.List(PushTempRoot); err == nil && len(names) > 0 {
		var stale bytes.Buffer
		for _, name := range names {
			pid, _, _ := strings.Cut(strings.TrimPrefix(name, PushTempRoot), "/")
			if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && syscall.Kill(n, 0) == syscall.ESRCH {
				fmt.Fprintf(&stale, "delete %s %s\n", name, old[name])
			}
		}
		if stale.Len() > 0 {
			updateRefs(s.c.GitDir, stale.Bytes())
		}
	}
	var in bytes.Buffer
	in.WriteString("start\n")
	for _, u := range plan {
		fmt.Fprintf(&in, "update %s%s %s\n", prefix, strings.TrimPrefix(u.Ref, refs.Prefix), u.New)
	}
	in.WriteString("prepare\ncommit\n")
	if err := updateRefs(s.c.GitDir, in.Bytes()); err != nil {
		return "", nil, fmt.Errorf("git update-ref (temporary push refs): %v", err)
	}
	cleanup := func() {
		var del bytes.Buffer
		for _, u := range plan {
			fmt.Fprintf(&del, "delete %s%s\n", prefix, strings.TrimPrefix(u.Ref, refs.Prefix))
		}
		if err := updateRefs(s.c.GitDir, del.Bytes()); err != nil {
			s.c.Warn("remove the temporary push refs under %s: %v", prefix, err)
		}
	}
	return prefix, cleanup, nil
}

// setTracking points the remote-tracking copies of landed refs at what was
// pushed (git does so itself only when the fetch refspec is configured).
func (s *Syncer) setTracking(remote string, landed []refs.Update) error {
	if len(landed) == 0 {
		return nil
	}
	tracking, _, err := s.c.Refs.List(TrackingPrefix(remote))
	if err != nil {
		return err
	}
	var in bytes.Buffer
	for _, u := range landed {
		t := TrackingRef(remote, u.Ref)
		switch {
		case u.New.IsZero() && !tracking[t].IsZero():
			fmt.Fprintf(&in, "delete %s\n", t)
		case !u.New.IsZero() && tracking[t] != u.New:
			fmt.Fprintf(&in, "update %s %s\n", t, u.New)
		}
	}
	if in.Len() == 0 {
		return nil
	}
	return updateRefs(s.c.GitDir, in.Bytes())
}

// updateRefs runs `git update-ref --stdin` on the refs outside
// refs/bernstein/ that push and fetch keep (temporary refs of a large push,
// remote-tracking refs): hints, relearned by the next fetch or push, so not
// synced. Its error is git's message.
func updateRefs(gitDir string, stdin []byte) error {
	if _, errb, err := (git.Cmd{Policy: git.Isolated, GitDir: gitDir, Config: []string{"core.fsync=none"}, Args: []string{"update-ref", "--stdin"}, Stdin: stdin}).Run(); err != nil {
		return errors.New(git.Message(errb))
	}
	return nil
}

// UntrustedError reports a push the remote's guard refused only because it
// pins no key of writers whose commits the push carries (the first push of
// a writer to a guarded remote without --trust-first-use). Push then
// published those writers' key refs on the remote (a key ref alone is a
// claim, which the guard accepts) and says what the remote's operator runs
// to pin each; once they are pinned, the same push goes through.
type UntrustedError struct {
	Remote   string
	Writers  []UntrustedWriter
	Messages []string // the remote's, over every attempt
}

// UntrustedWriter is a writer a remote trusts no key of.
type UntrustedWriter struct {
	Writer      string `json:"writer"`
	Fingerprint string `json:"fingerprint"` // SHA256: of the key this host has for it ("" none)
	// Command is what the remote's operator runs, inside the remote
	// repository, to pin the key (with its fingerprint).
	Command string `json:"command"`
	// Published is set when this push published the writer's key ref on
	// the remote; false when the remote had it already (or this host has
	// none to push).
	Published bool `json:"published"`
}

func (e *UntrustedError) Error() string {
	var ws []string
	for _, w := range e.Writers {
		ws = append(ws, w.Writer)
	}
	return fmt.Sprintf("%s trusts no key of writer %s yet: its operator pins it, then push again", e.Remote, strings.Join(ws, ", "))
}

var (
	// The guard's refusal of a writer it pins no key of.
	unpinnedRe = regexp.MustCompile(`writer ([a-z0-9-]{1,64}) has no key pinned on this remote`)
	// The pin command the guard advises, naming the remote repository.
	pinAdviceRe = regexp.MustCompile(`'(bernstein keys pin (?:--repo \S+ )?([a-z0-9-]{1,64}))'`)
)

// untrusted turns a refusal whose every problem is a writer the remote
// pins no key of into an *UntrustedError, after publishing the key refs of
// those writers it can (this host has the ref and the remote does not).
// Any other refusal is returned as it is.
func (p *pushRun) untrusted(refused *RemoteRefusedError) error {
	writers := map[string]string{} // writer -> the pin command the guard advises
	var order []string
	for _, m := range refused.Messages {
		if !strings.Contains(m, "bernstein guard: refused ") {
			continue
		}
		sub := unpinnedRe.FindStringSubmatch(m)
		if sub == nil {
			return refused // another problem: the refusal stands as it is
		}
		if _, ok := writers[sub[1]]; !ok {
			order = append(order, sub[1])
			writers[sub[1]] = ""
		}
		if a := pinAdviceRe.FindStringSubmatch(m); a != nil && a[2] == sub[1] {
			writers[sub[1]] = a[1]
		}
	}
	if len(order) == 0 {
		return refused
	}
	local, err := p.s.c.Refs.Snapshot(refs.KeyScope...)
	if err != nil {
		return err
	}
	tracking, _, err := p.s.c.Refs.List(TrackingPrefix(p.remote))
	if err != nil {
		return err
	}
	pub, err := writersKeys(p.s, local)
	if err != nil {
		return err
	}
	e := &UntrustedError{Remote: p.remote, Messages: refused.Messages}
	var publish []refs.Update
	for _, w := range order {
		u := UntrustedWriter{Writer: w}
		if k, ok := pub[w]; ok {
			u.Fingerprint = k
		}
		cmd := writers[w]
		if cmd == "" {
			cmd = "bernstein keys pin " + w
		}
		if u.Fingerprint != "" {
			cmd += " --key " + u.Fingerprint
		}
		u.Command = cmd
		for _, ref := range keyRefs(local, w) {
			head, _ := local.ReadOptional(ref)
			if theirs := tracking[TrackingRef(p.remote, ref)]; !head.IsZero() && theirs != head {
				publish = append(publish, refs.Update{Ref: ref, Old: theirs, New: head})
				u.Published = true
			}
		}
		e.Writers = append(e.Writers, u)
	}
	if len(publish) == 0 {
		return e
	}
	st, out, err := p.s.gitPush(p.remote, publish, p.atomic)
	if err != nil {
		return err
	}
	e.Messages = append(e.Messages, out...)
	var landed []refs.Update
	for _, u := range publish {
		if r, ok := st[u.Ref]; ok && r.ok {
			landed = append(landed, u)
			continue
		}
		// The key ref did not land: say so, with the remote's words.
		return &RemoteRefusedError{Remote: p.remote, Refused: []Rejection{{RefInfo: DescribeRef(u.Ref), Reason: st[u.Ref].reason, Refused: true}}, Messages: e.Messages}
	}
	if err := p.s.setTracking(p.remote, landed); err != nil {
		p.s.c.Warn("update the remote-tracking refs of %s: %v", p.remote, err)
	}
	return e
}

// writersKeys reads the SHA256 fingerprints of the keys view's writers
// refs publish, by writer.
func writersKeys(s *Syncer, view refs.Source) (map[string]string, error) {
	pub, err := writers.Keys(s.c, view)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for w, lines := range pub {
		if len(lines) != 1 {
			continue // several keys under the name: the operator chooses
		}
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(lines[0])); err == nil {
			out[w] = ssh.FingerprintSHA256(k)
		}
	}
	if id, err := s.c.Identity(); err == nil {
		out[id.Writer] = ssh.FingerprintSHA256(id.PublicKey()) // this host's own key, whatever else is published
	}
	return out, nil
}

// keyRefs are the refs of view that publish writer's keys: its writers ref,
// and the refs named by writer and key (refs/bernstein/writers/<writer>.<key>).
func keyRefs(view refs.Source, writer string) []string {
	_, names, err := view.List(refs.WritersPrefix)
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		if isKeyRef(n, writer) {
			out = append(out, n)
		}
	}
	return out
}

// isKeyRef reports whether ref publishes a key of writer.
func isKeyRef(ref, writer string) bool {
	return ref == refs.WritersPrefix+writer || strings.HasPrefix(ref, refs.WritersPrefix+writer+".")
}
