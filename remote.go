package bernstein

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// Remotes. Many hosts, each its own writer, share one ordinary git remote.
// bernstein's chains are linear and a ref only ever moves forward, so moving
// refs between a host and a remote is a matter of fast-forwards: push sends
// what this host added, fetch takes what the others added, and a ref that
// both moved (two hosts wrote to one task) has diverged. Nothing is ever
// forced, in either direction; a divergence is reported with both heads and
// nothing is overwritten. docs/remotes.md has the commands and the reasons.
//
// Fetch goes through remote-tracking refs, refs/bernstein-remotes/<remote>/*
// (outside refs/bernstein/, so bernstein never reads them as its own): git
// fetches into them, and the local refs are then moved by the store's own
// ref transaction under its writer lock, like a post, so a concurrent post
// is never lost and readers keep their consistent snapshots.

// TrackingRoot is the namespace of the remote-tracking copies of
// refs/bernstein/*: refs/bernstein-remotes/<remote>/<rest>.
const TrackingRoot = "refs/bernstein-remotes/"

// TrackingPrefix is where the remote-tracking copies of remote's
// refs/bernstein/* refs live.
func TrackingPrefix(remote string) string { return TrackingRoot + remote + "/" }

// TrackingRef names the remote-tracking copy of ref (a refs/bernstein/* ref).
func TrackingRef(remote, ref string) string {
	return TrackingPrefix(remote) + strings.TrimPrefix(ref, refs.Prefix)
}

// FetchRefspec is the fetch refspec RemoteSetup configures: the remote's
// refs/bernstein/* into its remote-tracking refs, fast-forward only.
func FetchRefspec(remote string) string { return "refs/bernstein/*:" + TrackingPrefix(remote) + "*" }

// PushRefspec is the push refspec RemoteSetup configures: every local
// refs/bernstein/* ref to the same name, fast-forward only.
const PushRefspec = "refs/bernstein/*:refs/bernstein/*"

// Errors of the remote commands; callers branch on them.
var (
	// ErrUnknownRemote: the repository has no remote of that name.
	ErrUnknownRemote = errors.New("unknown remote")
	// ErrDiverged: a ref moved on both sides (see DivergedError).
	ErrDiverged = errors.New("diverged")
	// ErrNotFastForward: FastForward was given an update that would drop
	// commits.
	ErrNotFastForward = errors.New("not a fast-forward")
)

// RefInfo says what a refs/bernstein/* ref is, for messages: the task of a
// journal or ledger, the writer of a spine, audit mirror or key ref.
type RefInfo struct {
	Ref    string `json:"ref"`
	Kind   string `json:"kind"` // journal, ledger, spine, audit, key (a writer's key ref), keys, other
	Task   string `json:"task,omitempty"`
	Writer string `json:"writer,omitempty"`
}

// DescribeRef names what ref holds.
func DescribeRef(ref string) RefInfo {
	in := RefInfo{Ref: ref, Kind: "other"}
	task := func(prefix, kind string) bool {
		if !strings.HasPrefix(ref, prefix) {
			return false
		}
		in.Kind = kind
		if t, err := refs.UnescapeTask(strings.TrimPrefix(ref, prefix)); err == nil {
			in.Task = t
		} else {
			in.Task = strings.TrimPrefix(ref, prefix)
		}
		return true
	}
	writer := func(prefix, kind string) bool {
		if !strings.HasPrefix(ref, prefix) {
			return false
		}
		in.Kind, in.Writer = kind, strings.TrimPrefix(ref, prefix)
		return true
	}
	switch {
	case task(refs.JournalPrefix, "journal"), task(refs.LedgerPrefix, "ledger"),
		writer(refs.SpinePrefix, "spine"), writer(refs.AuditPrefix, "audit"), writer(refs.Prefix+"writers/", "key"):
	case ref == refs.Prefix+"keys":
		in.Kind = "keys"
	}
	return in
}

// What names the ref for a person: "task T-1 (journal)", "writer host-a
// (spine)", "the keys ref".
func (in RefInfo) What() string {
	switch {
	case in.Task != "":
		return fmt.Sprintf("task %s (%s)", in.Task, in.Kind)
	case in.Writer != "":
		return fmt.Sprintf("writer %s (%s)", in.Writer, in.Kind)
	case in.Kind == "keys":
		return "the published keys (" + in.Ref + ")"
	}
	return in.Ref
}

// RefChange is one ref that moved, or would.
type RefChange struct {
	RefInfo
	Old     string `json:"old"` // "" when the ref did not exist (or its value was unknown)
	New     string `json:"new"`
	Commits int    `json:"commits"` // commits it adds (0 when unknown)
}

// Divergence is a ref that moved on both sides: this host's head and the
// remote's each hold commits the other lacks.
type Divergence struct {
	RefInfo
	Local      string `json:"local"`
	Remote     string `json:"remote"`
	Base       string `json:"base"`        // the last commit both share; "" when none
	LocalOnly  int    `json:"local_only"`  // commits after Base on this host
	RemoteOnly int    `json:"remote_only"` // commits after Base on the remote
}

func (d Divergence) String() string {
	base := "no common commit"
	if d.Base != "" {
		base = "both built on " + shortID(d.Base)
	}
	return fmt.Sprintf("diverged: %s: this host's head %s has %d commit%s the remote's head %s lacks, which has %d this host lacks (%s)",
		d.What(), shortID(d.Local), d.LocalOnly, plural(d.LocalOnly), shortID(d.Remote), d.RemoteOnly, base)
}

// Meaning says what a divergence of this kind means, in one sentence.
func (d Divergence) Meaning() string {
	switch d.Kind {
	case "journal", "ledger":
		return "two hosts wrote to task " + d.Task + ": each host keeps its own rows; nothing was overwritten (docs/remotes.md, Divergence)"
	case "spine", "audit", "key":
		return "only writer " + d.Writer + " writes this chain, so either its identity (BERNSTEIN_HOME) is in use on two hosts or a chain was rewritten: find out which before anything else"
	case "keys":
		return "two hosts published keys into the one keys ref on their own: fetch before bernstein init on a new host"
	}
	return "the ref moved on both sides"
}

// DivergedError reports the refs that diverged; nothing was moved.
type DivergedError struct {
	Remote   string
	Diverged []Divergence
}

func (e *DivergedError) Error() string {
	if len(e.Diverged) == 1 {
		return e.Diverged[0].String()
	}
	return fmt.Sprintf("%d refs diverged from %s, first %s", len(e.Diverged), e.Remote, e.Diverged[0])
}

// Is makes errors.Is(err, ErrDiverged) hold.
func (e *DivergedError) Is(target error) bool { return target == ErrDiverged }

func shortID(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	if s == "" {
		return "nothing"
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ---------------------------------------------------------------------------
// git

// runGit runs git on the repository whose (common) git directory is gitDir.
// Its messages are in English (LC_ALL=C): some of them are read here.
func runGit(gitDir string, stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command("git", append([]string{"--git-dir", gitDir}, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANGUAGE=")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

// gitMessage is git's complaint, one line per line, without its prefixes.
func gitMessage(stderr []byte) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(stderr)), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "hint:") {
			continue
		}
		l = strings.TrimPrefix(strings.TrimPrefix(l, "fatal: "), "error: ")
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}

// Remotes lists the repository's git remotes, as 'git remote' does.
func (s *Store) Remotes() ([]string, error) { return remotes(s.gitDir) }

// remotes lists the repository's remotes.
func remotes(gitDir string) ([]string, error) {
	out, errb, err := runGit(gitDir, nil, "remote")
	if err != nil {
		return nil, fmt.Errorf("git remote: %s", gitMessage(errb))
	}
	return strings.Fields(string(out)), nil
}

// checkRemote refuses a remote the repository does not have. A remote
// defined in the repository's own config file is found without starting
// git; any other (included files, the user's config) is asked of git.
func checkRemote(gitDir, remote string) error {
	if remote == "" {
		return fmt.Errorf("%w: the remote name is empty", ErrUnknownRemote)
	}
	if data, err := os.ReadFile(filepath.Join(gitDir, "config")); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			l = strings.TrimSpace(l)
			if rest, ok := strings.CutPrefix(l, "[remote"); ok && strings.TrimSpace(rest) == `"`+remote+`"]` {
				return nil
			}
		}
	}
	names, err := remotes(gitDir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == remote {
			return nil
		}
	}
	have := "it has none"
	if len(names) > 0 {
		have = "it has " + strings.Join(names, ", ")
	}
	return fmt.Errorf("%w %q: this repository has no such remote (%s); add it with 'git remote add %s URL'", ErrUnknownRemote, remote, have, remote)
}

// configValues reads every value of a multi-valued config key.
func configValues(gitDir, key string) ([]string, error) {
	out, errb, err := runGit(gitDir, nil, "config", "--get-all", key)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil, nil // not set
	}
	if err != nil {
		return nil, fmt.Errorf("git config %s: %s", key, gitMessage(errb))
	}
	var vs []string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l != "" {
			vs = append(vs, l)
		}
	}
	return vs, nil
}

// ---------------------------------------------------------------------------
// remote setup

// RemoteSetupResult says what RemoteSetup configured.
type RemoteSetupResult struct {
	Remote string `json:"remote"`
	// Added and Present are config entries as "key value".
	Added    []string `json:"added"`
	Present  []string `json:"present"`
	Warnings []string `json:"warnings"`
}

// CheckRemote reports ErrUnknownRemote unless the repository o names has
// remote.
func CheckRemote(o Options, remote string) error {
	dir := repoDir(o)
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return fmt.Errorf("%w: %s does not exist", ErrNotRepository, dir)
	}
	_, gitDir, _, err := locate(dir)
	if err != nil {
		return err
	}
	return checkRemote(gitDir, remote)
}

// RemoteSetup configures remote so that plain `git fetch` and `git push`
// move refs/bernstein/* safely, and fast-forward only:
//
//	remote.<remote>.fetch = refs/bernstein/*:refs/bernstein-remotes/<remote>/*
//	remote.<remote>.push  = HEAD                    (only if it had no push refspec)
//	remote.<remote>.push  = refs/bernstein/*:refs/bernstein/*
//
// No refspec carries '+'. A plain `git fetch` then brings the objects and
// the remote's heads into the remote-tracking refs without touching
// refs/bernstein/* (bernstein fetch moves those, under the writer lock); a
// plain `git push` pushes the current branch as before and every
// refs/bernstein/* ref, and the remote refuses any that is not a
// fast-forward. Running it again changes nothing. It refuses a remote the
// repository does not have.
func RemoteSetup(o Options, remote string) (*RemoteSetupResult, error) {
	_, gitDir, _, err := locate(repoDir(o))
	if err != nil {
		return nil, err
	}
	if err := checkObjectFormat(gitDir); err != nil {
		return nil, err
	}
	if err := checkRemote(gitDir, remote); err != nil {
		return nil, err
	}
	res := &RemoteSetupResult{Remote: remote, Added: []string{}, Present: []string{}, Warnings: []string{}}
	fetchKey, pushKey := "remote."+remote+".fetch", "remote."+remote+".push"
	fetches, err := configValues(gitDir, fetchKey)
	if err != nil {
		return nil, err
	}
	pushes, err := configValues(gitDir, pushKey)
	if err != nil {
		return nil, err
	}
	if vs, _ := configValues(gitDir, "remote."+remote+".mirror"); len(vs) > 0 && vs[len(vs)-1] == "true" {
		res.Warnings = append(res.Warnings, fmt.Sprintf("remote.%s.mirror is true: a plain 'git push %s' force-pushes and deletes refs, refs/bernstein/* included; use 'bernstein push %s'", remote, remote, remote))
	}
	for _, v := range fetches {
		src, dst, _ := strings.Cut(strings.TrimPrefix(v, "+"), ":")
		if strings.HasPrefix(dst, refs.Prefix) || dst == strings.TrimSuffix(refs.Prefix, "/")+"/*" {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s %s writes into refs/bernstein/ directly: a 'git fetch --prune' deletes the local refs the remote lacks%s; remove it with: git config --unset %s '%s'",
				fetchKey, v, forcedNote(v), fetchKey, regexpQuote(v)))
		} else if strings.HasPrefix(v, "+") && strings.HasPrefix(src, refs.Prefix) {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s %s is forced ('+'): a rewritten remote ref would silently replace its remote-tracking copy", fetchKey, v))
		}
	}
	for _, v := range pushes {
		src, _, _ := strings.Cut(strings.TrimPrefix(v, "+"), ":")
		if strings.HasPrefix(v, "+") && (strings.HasPrefix(src, refs.Prefix) || src == "*" || strings.HasPrefix(src, "refs/*")) {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s %s is forced ('+'): a plain git push would overwrite what other hosts pushed; remove it with: git config --unset %s '%s'", pushKey, v, pushKey, regexpQuote(v)))
		}
	}
	add := func(key, value string, have []string) error {
		for _, h := range have {
			if h == value {
				res.Present = append(res.Present, key+" "+value)
				return nil
			}
		}
		if _, errb, err := runGit(gitDir, nil, "config", "--add", key, value); err != nil {
			return fmt.Errorf("git config --add %s %s: %s", key, value, gitMessage(errb))
		}
		res.Added = append(res.Added, key+" "+value)
		return nil
	}
	if err := add(fetchKey, FetchRefspec(remote), fetches); err != nil {
		return nil, err
	}
	if len(pushes) == 0 {
		// Once a remote has a push refspec git ignores push.default: without
		// HEAD, a plain `git push` would stop pushing the current branch.
		if err := add(pushKey, "HEAD", pushes); err != nil {
			return nil, err
		}
	}
	if err := add(pushKey, PushRefspec, pushes); err != nil {
		return nil, err
	}
	return res, nil
}

func forcedNote(v string) string {
	if strings.HasPrefix(v, "+") {
		return ", and its '+' overwrites local rows with the remote's"
	}
	return ""
}

// regexpQuote quotes a config value for `git config --unset KEY VALUE-REGEX`.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return "^" + b.String() + "$"
}

// ---------------------------------------------------------------------------
// settling and fast-forwards

// Settle finishes any write a killed writer left half done (its intent in a
// kept pack's .keep file), under the writer lock, as the next post would.
// After it, refs/bernstein/* holds only whole transactions.
func (s *Store) Settle() error {
	unlock, err := s.lockWriters()
	if err != nil {
		return err
	}
	defer unlock()
	return s.finishInterrupted()
}

// FastForward moves local refs/bernstein/* refs forward, all or none: each
// update's New must descend from its Old (a zero Old creates the ref). It
// takes the writer lock, finishes interrupted writes, and moves the refs in
// one ref transaction with compare-and-swap on the Old values, under an
// intent, as a post does: readers never see it half done, and a ref that
// moved since (a post) fails it with refs.ErrConflict, nothing moved. The
// objects must be in the repository already (fetched).
func (s *Store) FastForward(updates []refs.Update) error {
	unlock, err := s.lockWriters()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.finishInterrupted(); err != nil {
		return err
	}
	for _, u := range updates {
		if !strings.HasPrefix(u.Ref, refs.Prefix) {
			return fmt.Errorf("refusing to move %s: not a bernstein ref", u.Ref)
		}
		if u.Old.IsZero() {
			if !s.objects.Has(u.New) {
				return fmt.Errorf("%s: commit %s is not in the repository", u.Ref, u.New)
			}
			continue
		}
		a, err := s.relate(u.Old, u.New)
		if err != nil {
			return fmt.Errorf("%s: %w", u.Ref, err)
		}
		if a.rel != relBehind && a.rel != relSame {
			return fmt.Errorf("%w: %s from %s to %s drops %d commit%s", ErrNotFastForward, u.Ref, shortID(u.Old.String()), shortID(u.New.String()), a.localOnly, plural(a.localOnly))
		}
	}
	return s.applyLocked(updates)
}

// applyLocked moves refs as one transaction under an intent kept in a pack's
// .keep file, as tx.commit does. The caller holds the writer lock. The pack
// holds the empty tree and a blob of the intent, the process and the time:
// a pack of the empty tree alone would take the same name every time, and a compaction (which
// runs beside writers) deleting the last such pack as one of its inputs
// would delete the files the next one had just put in its place.
func (s *Store) applyLocked(updates []refs.Update) error {
	var us []refs.Update
	for _, u := range updates {
		if u.Old != u.New {
			us = append(us, u)
		}
	}
	if len(us) == 0 {
		return nil
	}
	intent := refs.Intent{Updates: us}.Encode()
	nonce := fmt.Sprintf("%s\nwritten by %d at %d\n", intent, os.Getpid(), time.Now().UnixNano())
	objs := []gitstore.Object{gitstore.NewObject(gitstore.TypeTree, nil), gitstore.NewObject(gitstore.TypeBlob, []byte(nonce))}
	base, err := s.objects.WritePackKept(objs, intent)
	if err != nil {
		return fmt.Errorf("write intent: %w", err)
	}
	out, err := s.txr.Apply(us)
	if errors.Is(err, refs.ErrFault) {
		return err // a test's simulated crash: leave everything as it is
	}
	switch out {
	case refs.NotCommitted:
		s.objects.Unkeep(base)
		return err
	case refs.CommittedPending:
		s.warn("the fast-forward is committed, but finishing it failed (the next write completes it): %v", err)
		return nil
	}
	if err := s.objects.Unkeep(base); err != nil {
		s.warn("the fast-forward is committed, but its intent could not be retired (the next write does): %v", err)
	}
	return nil
}

type relation int

const (
	relSame     relation = iota
	relBehind            // the first head is an ancestor of the second
	relAhead             // the second head is an ancestor of the first
	relDiverged          // each holds commits the other lacks
)

type ancestry struct {
	rel        relation
	base       gitstore.Oid
	localOnly  int
	remoteOnly int
}

// relate compares two heads of one linear chain, walking both back in step
// until one walk meets a commit the other has seen: what it costs grows with
// the commits that differ, not with the chain.
func (s *Store) relate(local, remote gitstore.Oid) (ancestry, error) {
	if local == remote {
		return ancestry{rel: relSame, base: local}, nil
	}
	seenL := map[gitstore.Oid]int{local: 0}
	seenR := map[gitstore.Oid]int{remote: 0}
	l, r := local, remote
	dl, dr := 0, 0
	done := func(base gitstore.Oid, lo, ro int) ancestry {
		a := ancestry{base: base, localOnly: lo, remoteOnly: ro}
		switch {
		case lo == 0:
			a.rel = relBehind
		case ro == 0:
			a.rel = relAhead
		default:
			a.rel = relDiverged
		}
		return a
	}
	for !l.IsZero() || !r.IsZero() {
		if !l.IsZero() {
			p, err := s.parentOf(l)
			if err != nil {
				return ancestry{}, err
			}
			l = p
			if !l.IsZero() {
				dl++
				if d, ok := seenR[l]; ok {
					return done(l, dl, d), nil
				}
				if _, loop := seenL[l]; loop {
					return ancestry{}, fmt.Errorf("chain loops at %s", l)
				}
				seenL[l] = dl
			}
		}
		if !r.IsZero() {
			p, err := s.parentOf(r)
			if err != nil {
				return ancestry{}, err
			}
			r = p
			if !r.IsZero() {
				dr++
				if d, ok := seenL[r]; ok {
					return done(r, d, dr), nil
				}
				if _, loop := seenR[r]; loop {
					return ancestry{}, fmt.Errorf("chain loops at %s", r)
				}
				seenR[r] = dr
			}
		}
	}
	// Two chains with no commit in common.
	return ancestry{rel: relDiverged, localOnly: len(seenL), remoteOnly: len(seenR)}, nil
}

// parentOf reads a chain commit's parent (zero for a root). bernstein's
// chains are linear; a merge is followed along its first parent.
func (s *Store) parentOf(id gitstore.Oid) (gitstore.Oid, error) {
	data, err := s.objects.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return gitstore.ZeroOid, fmt.Errorf("commit %s: %w", id, err)
	}
	if len(c.Parents) == 0 {
		return gitstore.ZeroOid, nil
	}
	return c.Parents[0], nil
}

func divergence(ref string, local, remote gitstore.Oid, a ancestry) Divergence {
	d := Divergence{RefInfo: DescribeRef(ref), Local: local.String(), Remote: remote.String(), LocalOnly: a.localOnly, RemoteOnly: a.remoteOnly}
	if !a.base.IsZero() {
		d.Base = a.base.String()
	}
	return d
}

// ---------------------------------------------------------------------------
// fetch

// FetchResult says what Fetch did.
type FetchResult struct {
	Remote    string      `json:"remote"`
	Created   []RefChange `json:"created"`   // refs this host did not have
	Forwarded []RefChange `json:"forwarded"` // refs fast-forwarded
	UpToDate  int         `json:"up_to_date"`
	// LocalAhead are refs this host has newer than the remote: push them.
	LocalAhead []RefChange  `json:"local_ahead"`
	Diverged   []Divergence `json:"diverged"`
}

// Moved reports whether the fetch moved any local ref.
func (r *FetchResult) Moved() bool { return len(r.Created)+len(r.Forwarded) > 0 }

// Fetch brings remote's refs/bernstein/* into the remote-tracking refs
// refs/bernstein-remotes/<remote>/*, then moves the local refs forward to
// them: a ref this host lacks is created, one the remote extends is
// fast-forwarded, one this host has newer is left as it is. Every local ref
// moves in one transaction under the writer lock, or none does: when any ref
// diverged (both sides added commits) nothing moves and the error is a
// *DivergedError naming each ref, its task or writer and both heads.
func (s *Store) Fetch(remote string) (*FetchResult, error) {
	if err := checkRemote(s.gitDir, remote); err != nil {
		return nil, err
	}
	if err := s.fetchTracking(remote, []string{"+" + refs.Prefix + "*:" + TrackingPrefix(remote) + "*"}, true); err != nil {
		return nil, err
	}
	unlock, err := s.lockWriters()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.finishInterrupted(); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		res, updates, err := s.planFetch(remote)
		if err != nil {
			return nil, err
		}
		if len(res.Diverged) > 0 {
			return res, &DivergedError{Remote: remote, Diverged: res.Diverged}
		}
		err = s.applyLocked(updates)
		if errors.Is(err, refs.ErrConflict) && attempt < 5 {
			// A plain git process moved a ref (bernstein writers wait for the
			// lock we hold): plan again on the new heads.
			continue
		}
		if err != nil {
			return nil, err
		}
		return res, nil
	}
}

// fetchTracking runs git fetch of refspecs (into remote-tracking refs only:
// --refmap= keeps the configured refspecs from moving anything else).
func (s *Store) fetchTracking(remote string, refspecs []string, prune bool) error {
	// The objects are kept as a pack, synced (never unpacked into loose
	// objects, which git does not sync by default): the local refs will
	// point at them. The remote-tracking refs are not synced: they are
	// hints, relearned by the next fetch or push.
	args := []string{"-c", "fetch.unpackLimit=1", "-c", "core.fsync=pack,derived-metadata",
		"fetch", "--no-tags", "--no-write-fetch-head", "--refmap=", "--no-recurse-submodules"}
	if prune {
		args = append(args, "--prune")
	}
	args = append(args, remote)
	args = append(args, refspecs...)
	if _, errb, err := runGit(s.gitDir, nil, args...); err != nil {
		return fmt.Errorf("git fetch %s: %s", remote, gitMessage(errb))
	}
	return nil
}

// planFetch compares the local refs with the remote-tracking ones.
func (s *Store) planFetch(remote string) (*FetchResult, []refs.Update, error) {
	res := &FetchResult{Remote: remote, Created: []RefChange{}, Forwarded: []RefChange{}, LocalAhead: []RefChange{}, Diverged: []Divergence{}}
	local, err := s.refs.Snapshot(refs.Prefix)
	if err != nil {
		return nil, nil, err
	}
	tracking, names, err := s.refs.List(TrackingPrefix(remote))
	if err != nil {
		return nil, nil, err
	}
	var updates []refs.Update
	for _, tname := range names {
		ref := refs.Prefix + strings.TrimPrefix(tname, TrackingPrefix(remote))
		theirs := tracking[tname]
		mine, err := local.ReadOptional(ref)
		if err != nil {
			return nil, nil, err
		}
		if mine.IsZero() {
			res.Created = append(res.Created, RefChange{RefInfo: DescribeRef(ref), New: theirs.String()})
			updates = append(updates, refs.Update{Ref: ref, New: theirs})
			continue
		}
		a, err := s.relate(mine, theirs)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", ref, err)
		}
		switch a.rel {
		case relSame:
			res.UpToDate++
		case relBehind:
			res.Forwarded = append(res.Forwarded, RefChange{RefInfo: DescribeRef(ref), Old: mine.String(), New: theirs.String(), Commits: a.remoteOnly})
			updates = append(updates, refs.Update{Ref: ref, Old: mine, New: theirs})
		case relAhead:
			res.LocalAhead = append(res.LocalAhead, RefChange{RefInfo: DescribeRef(ref), Old: theirs.String(), New: mine.String(), Commits: a.localOnly})
		case relDiverged:
			res.Diverged = append(res.Diverged, divergence(ref, mine, theirs, a))
		}
	}
	return res, updates, nil
}

// ---------------------------------------------------------------------------
// push

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
	// Replanned counts the times the remote turned out to have moved refs
	// (since the last fetch, or while the push was under way: another
	// push), so that Push fetched its heads and planned again.
	Replanned int `json:"replanned"`
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
// `git update-ref` runs more. A store's pushBudget, when set (by tests),
// takes its place.
const pushArgBudget = 256 << 10

// pushTempRoot holds the temporary refs of a large push:
// refs/bernstein-push/<pid>/<rest>.
const pushTempRoot = "refs/bernstein-push/"

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
func (s *Store) Push(remote string) (*PushResult, error) {
	if err := checkRemote(s.gitDir, remote); err != nil {
		return nil, err
	}
	if err := s.Settle(); err != nil {
		return nil, err
	}
	atomic := true
	// What earlier attempts pushed (a push that is not atomic lands some
	// refs before another is rejected) and what the remote said.
	var pushedBefore []RefChange
	var msgs []string
	for attempt := 0; ; attempt++ {
		res := &PushResult{Remote: remote, Atomic: atomic, Pushed: []RefChange{}, RemoteAhead: []RefChange{}, Rejected: []Rejection{}, Diverged: []Divergence{}, RemoteMessages: []string{}}
		skip := map[string]bool{}
		for _, c := range pushedBefore {
			skip[c.Ref] = true
		}
		plan, err := s.planPush(remote, res, skip)
		res.Pushed = append(res.Pushed, pushedBefore...)
		res.RemoteMessages = append(res.RemoteMessages, msgs...)
		res.Replanned = attempt
		if err != nil {
			return nil, err
		}
		if len(res.Diverged) > 0 {
			return res, &DivergedError{Remote: remote, Diverged: res.Diverged}
		}
		if len(plan) == 0 {
			return res, nil
		}
		if err := s.runPrePush(remote, plan); err != nil {
			return res, err
		}
		st, out, err := s.gitPush(remote, plan, atomic)
		if errors.Is(err, errNoAtomic) {
			atomic = false
			s.warn("%s does not support atomic pushes: pushing the refs one by one", remote)
			attempt--
			continue
		}
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, out...)
		res.RemoteMessages = append(res.RemoteMessages, out...)
		var stale []refs.Update
		var landed []refs.Update
		var refused []Rejection
		rejected, collateral, races := false, 0, 0
		for _, r := range st {
			rejected = rejected || !r.ok
		}
		for _, p := range plan {
			r, ok := st[p.Ref]
			if !ok {
				// Over smart HTTP, git reports only the rejected refs of a
				// failed atomic push.
				if !atomic || !rejected {
					return nil, fmt.Errorf("git push %s reported nothing for %s", remote, p.Ref)
				}
				r = pushStatus{reason: "atomic push failed", collateral: true}
			}
			switch {
			case r.ok:
				landed = append(landed, p)
				if r.upToDate {
					res.UpToDate++
				} else {
					c := RefChange{RefInfo: DescribeRef(p.Ref), Old: oidOrEmpty(p.Old), New: p.New.String()}
					res.Pushed = append(res.Pushed, c)
					pushedBefore = append(pushedBefore, c)
				}
			case r.collateral:
				// Held back with the rest of an atomic push: it goes again
				// with the retry, if there is one.
				collateral++
			case r.remote && !r.race:
				rj := Rejection{RefInfo: DescribeRef(p.Ref), Reason: r.reason, Refused: true}
				res.Rejected = append(res.Rejected, rj)
				refused = append(refused, rj)
			default:
				res.Rejected = append(res.Rejected, Rejection{RefInfo: DescribeRef(p.Ref), Reason: r.reason})
				stale = append(stale, p)
				if r.race {
					races++
				}
			}
		}
		if err := s.setTracking(remote, landed); err != nil {
			s.warn("update the remote-tracking refs of %s: %v", remote, err)
		}
		refusedErr := func() error {
			return &RemoteRefusedError{Remote: remote, Refused: namedFirst(refused, res.RemoteMessages), Messages: res.RemoteMessages}
		}
		if len(stale) == 0 {
			if len(refused) > 0 {
				return res, refusedErr()
			}
			if collateral > 0 {
				return res, fmt.Errorf("git push %s: the atomic push failed, but git named no ref that caused it: %s", remote, strings.Join(out, "; "))
			}
			return res, nil
		}
		// Refs the remote moved come first, even beside refs its hooks
		// refused (one by one, a guard refuses a spine that seals a row of
		// a journal git push held back): planning again on its heads
		// names a divergence, and a refusal that stands is met again.
		res.Rejected = namedFirst(res.Rejected, out)
		if attempt+1 >= maxPushAttempts {
			if len(refused) > 0 {
				return res, refusedErr()
			}
			return res, &RejectedError{Remote: remote, Rejected: res.Rejected, Pushes: attempt + 1}
		}
		// The remote moved refs since the last fetch, or while this push
		// was under way: learn its heads (remote-tracking refs only;
		// nothing local moves) and plan again. The whole namespace, not
		// only the rejected refs: a lost race rejects every ref of an
		// atomic push, those the remote does not have too, and the other
		// push may have created refs this one creates.
		if err := s.fetchTracking(remote, []string{"+" + refs.Prefix + "*:" + TrackingPrefix(remote) + "*"}, false); err != nil {
			return nil, err
		}
		tracking, _, err := s.refs.List(TrackingPrefix(remote))
		if err != nil {
			return nil, err
		}
		changed := false
		for _, p := range stale {
			changed = changed || tracking[TrackingRef(remote, p.Ref)] != p.Old
		}
		if !changed && len(refused) > 0 {
			return res, refusedErr()
		}
		if !changed && races < len(stale) {
			// git push rejected refs whose heads the fetch does not show
			// moved (the fetch and push URLs differ?): a retry would only
			// repeat it.
			return res, &RejectedError{Remote: remote, Rejected: res.Rejected, Pushes: attempt + 1}
		}
		if !changed {
			// None of them moved on the remote: its ref transaction failed
			// for a reason of its own (a full disk, a stale lock), which
			// a retry would only repeat.
			var failed []Rejection
			for _, r := range res.Rejected {
				failed = append(failed, Rejection{RefInfo: r.RefInfo, Reason: r.Reason, Refused: true})
			}
			res.Rejected = failed
			return res, &RemoteRefusedError{Remote: remote, Refused: failed, Messages: res.RemoteMessages, Failed: true}
		}
	}
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
func (s *Store) planPush(remote string, res *PushResult, skip map[string]bool) ([]refs.Update, error) {
	local, err := s.refs.Snapshot(refs.Prefix)
	if err != nil {
		return nil, err
	}
	mine, names, err := local.List(refs.Prefix)
	if err != nil {
		return nil, err
	}
	tracking, _, err := s.refs.List(TrackingPrefix(remote))
	if err != nil {
		return nil, err
	}
	var plan []refs.Update
	for _, ref := range names {
		head := mine[ref]
		theirs := tracking[TrackingRef(remote, ref)]
		if theirs.IsZero() || !s.objects.Has(theirs) {
			plan = append(plan, refs.Update{Ref: ref, New: head})
			continue
		}
		a, err := s.relate(head, theirs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		switch a.rel {
		case relSame:
			if !skip[ref] {
				res.UpToDate++
			}
		case relAhead:
			plan = append(plan, refs.Update{Ref: ref, Old: theirs, New: head})
		case relBehind:
			res.RemoteAhead = append(res.RemoteAhead, RefChange{RefInfo: DescribeRef(ref), Old: head.String(), New: theirs.String(), Commits: a.remoteOnly})
		case relDiverged:
			res.Diverged = append(res.Diverged, divergence(ref, head, theirs, a))
		}
	}
	return plan, nil
}

var errNoAtomic = errors.New("the remote does not support atomic pushes")

// PrePushError reports a push the repository's pre-push hook stopped:
// nothing was sent.
type PrePushError struct {
	Remote   string
	Hook     string   // the hook's path
	Status   int      // its exit status (-1: killed by a signal)
	Messages []string // the lines it printed
}

// Summary is the error without the hook's messages, for a caller that shows
// them already.
func (e *PrePushError) Summary() string {
	return fmt.Sprintf("the pre-push hook %s stopped the push to %s (exit status %d); nothing was sent", e.Hook, e.Remote, e.Status)
}

func (e *PrePushError) Error() string {
	if len(e.Messages) == 0 {
		return e.Summary()
	}
	return e.Summary() + ": " + strings.Join(e.Messages, "; ")
}

// runPrePush runs the repository's pre-push hook, if it has one, on the
// push plan is about to make, the way git push runs it: in the top of the
// work tree (the git directory of a bare repository), with the remote's
// name and push URL as arguments and one line per ref on its input,
// "<local ref> <local commit> <remote ref> <remote commit>". The remote's
// commit is its head as last fetched (zeros when unknown), which this host
// has: the push is never forced, so a remote that moved since rejects it
// anyway, and Push fetches and plans again. git would pass the remote's
// live head instead, which the check cannot read when another host moved
// it (bernstein's pre-push check refuses such a head: a forced push over
// it would drop commits nobody here saw), so every race would end as the
// hook's refusal rather than as a divergence naming the task.
func (s *Store) runPrePush(remote string, plan []refs.Update) error {
	args := []string{"-C", s.dir, "rev-parse", "--path-format=absolute", "--git-path", "hooks/pre-push"}
	if !s.bare {
		args = append(args, "--show-toplevel")
	}
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANGUAGE=")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := 1 // the hook's path, then the top of the work tree
	if !s.bare {
		want = 2
	}
	if err != nil || len(lines) != want {
		return fmt.Errorf("find the pre-push hook: git rev-parse: %s", gitMessage(errb.Bytes()))
	}
	hook, dir := lines[0], s.gitDir
	if !s.bare {
		dir = lines[1]
	}
	fi, err := os.Stat(hook)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pre-push hook: %w", err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		s.warn("the pre-push hook %s was ignored because it is not set as executable (as git ignores it)", hook)
		return nil
	}
	url, errb2, err := runGit(s.gitDir, nil, "remote", "get-url", "--push", remote)
	if err != nil {
		return fmt.Errorf("git remote get-url --push %s: %s", remote, gitMessage(errb2))
	}
	var in bytes.Buffer
	for _, u := range plan {
		fmt.Fprintf(&in, "%s %s %s %s\n", u.Ref, u.New, u.Ref, u.Old)
	}
	run := exec.Command(hook, remote, strings.TrimSpace(string(url)))
	run.Dir = dir
	run.Stdin = &in
	var said bytes.Buffer
	run.Stdout, run.Stderr = &said, &said
	err = run.Run()
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("run the pre-push hook %s: %w", hook, err)
	}
	e := &PrePushError{Remote: remote, Hook: hook, Status: ee.ExitCode(), Messages: []string{}}
	for _, l := range strings.Split(said.String(), "\n") {
		if l = strings.TrimRight(l, " \t\r"); l != "" {
			e.Messages = append(e.Messages, l)
		}
	}
	return e
}

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
func (s *Store) gitPush(remote string, plan []refs.Update, atomic bool) (map[string]pushStatus, []string, error) {
	size := 0
	for _, u := range plan {
		size += len(u.Ref) + 42
	}
	// Locally a push writes only remote-tracking refs (hints): unsynced.
	args := []string{"-c", "core.fsync=none", "push", "--porcelain", "--no-verify", "--no-recurse-submodules"}
	if atomic {
		args = append(args, "--atomic")
	}
	args = append(args, remote)
	var cleanup func()
	budget := pushArgBudget
	if s.pushBudget > 0 {
		budget = s.pushBudget
	}
	if size <= budget {
		for _, u := range plan {
			args = append(args, u.New.String()+":"+u.Ref)
		}
	} else {
		prefix, done, err := s.pushViaRefs(plan)
		if err != nil {
			return nil, nil, err
		}
		cleanup = done
		args = append(args, prefix+"*:"+refs.Prefix+"*")
	}
	out, errb, err := runGit(s.gitDir, nil, args...)
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
		return nil, nil, fmt.Errorf("git push %s: %s", remote, gitMessage(errb))
	}
	return st, msgs, nil
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
		case " ", "*", "+":
			p.ok = true
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
func (s *Store) pushViaRefs(plan []refs.Update) (string, func(), error) {
	prefix := fmt.Sprintf("%s%d/", pushTempRoot, os.Getpid())
	// Temporary refs of pushes whose process died before it deleted them
	// (best effort: they only keep objects alive).
	if old, names, err := s.refs.List(pushTempRoot); err == nil && len(names) > 0 {
		var stale bytes.Buffer
		for _, name := range names {
			pid, _, _ := strings.Cut(strings.TrimPrefix(name, pushTempRoot), "/")
			if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && syscall.Kill(n, 0) == syscall.ESRCH {
				fmt.Fprintf(&stale, "delete %s %s\n", name, old[name])
			}
		}
		if stale.Len() > 0 {
			runGit(s.gitDir, stale.Bytes(), "-c", "core.fsync=none", "update-ref", "--stdin")
		}
	}
	var in bytes.Buffer
	in.WriteString("start\n")
	for _, u := range plan {
		fmt.Fprintf(&in, "update %s%s %s\n", prefix, strings.TrimPrefix(u.Ref, refs.Prefix), u.New)
	}
	in.WriteString("prepare\ncommit\n")
	if _, errb, err := runGit(s.gitDir, in.Bytes(), "-c", "core.fsync=none", "update-ref", "--stdin"); err != nil {
		return "", nil, fmt.Errorf("git update-ref (temporary push refs): %s", gitMessage(errb))
	}
	cleanup := func() {
		var del bytes.Buffer
		for _, u := range plan {
			fmt.Fprintf(&del, "delete %s%s\n", prefix, strings.TrimPrefix(u.Ref, refs.Prefix))
		}
		if _, errb, err := runGit(s.gitDir, del.Bytes(), "-c", "core.fsync=none", "update-ref", "--stdin"); err != nil {
			s.warn("remove the temporary push refs under %s: %s", prefix, gitMessage(errb))
		}
	}
	return prefix, cleanup, nil
}

// setTracking points the remote-tracking copies of landed refs at what was
// pushed (git does so itself only when the fetch refspec is configured).
func (s *Store) setTracking(remote string, landed []refs.Update) error {
	if len(landed) == 0 {
		return nil
	}
	tracking, _, err := s.refs.List(TrackingPrefix(remote))
	if err != nil {
		return err
	}
	var in bytes.Buffer
	for _, u := range landed {
		t := TrackingRef(remote, u.Ref)
		if tracking[t] != u.New {
			fmt.Fprintf(&in, "update %s %s\n", t, u.New)
		}
	}
	if in.Len() == 0 {
		return nil
	}
	// Hints, relearned by the next fetch or push: not synced.
	if _, errb, err := runGit(s.gitDir, in.Bytes(), "-c", "core.fsync=none", "update-ref", "--stdin"); err != nil {
		return errors.New(gitMessage(errb))
	}
	return nil
}

// ---------------------------------------------------------------------------
// clone

// WriterKey is a writer's key as a repository publishes it: not trusted by
// itself (see docs/trust.md); pin it to trust it.
type WriterKey struct {
	Writer      string `json:"writer"`
	KeyType     string `json:"key_type"`
	Fingerprint string `json:"fingerprint"` // SHA256:...
	Key         string `json:"key"`         // authorized_keys line
}

// PublishedWriterKeys lists the published keys with their fingerprints,
// sorted by writer. A key that does not parse is listed with an empty
// fingerprint.
func (s *Store) PublishedWriterKeys() ([]WriterKey, error) {
	pub, err := s.PublishedKeys()
	if err != nil {
		return nil, err
	}
	out := make([]WriterKey, 0, len(pub))
	for w, line := range pub {
		k := WriterKey{Writer: w, Key: line}
		if pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
			k.KeyType, k.Fingerprint = pk.Type(), ssh.FingerprintSHA256(pk)
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Writer < out[j].Writer })
	return out, nil
}

// CloneResult says what Clone did.
type CloneResult struct {
	URL    string             `json:"url"`
	Dir    string             `json:"dir"`
	GitDir string             `json:"git_dir"`
	Remote string             `json:"remote"`
	Setup  *RemoteSetupResult `json:"setup"`
	Fetch  *FetchResult       `json:"fetch"`
	// Writers are the keys the clone found published: listed, never trusted.
	Writers []WriterKey `json:"writers"`
}

// Clone runs `git clone URL DIR` (DIR as git would name it when empty), sets
// up the origin remote's refspecs (RemoteSetup) and fetches refs/bernstein/*
// (Fetch). It lists the published writer keys but pins none: a clone trusts
// nobody until its user pins keys.
func Clone(url, dir string, o Options) (*CloneResult, error) {
	if url == "" {
		return nil, errors.New("clone: the URL is empty")
	}
	if dir == "" {
		dir = humanishName(url)
		if dir == "" {
			return nil, fmt.Errorf("clone: cannot name a folder after %q: give one", url)
		}
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("clone: %s exists and is not empty", dir)
	}
	cmd := exec.Command("git", "clone", "--quiet", "--origin", "origin", "--", url, dir)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANGUAGE=")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git clone %s: %s", url, gitMessage(errb.Bytes()))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	o.Repo = abs
	res := &CloneResult{URL: url, Dir: abs, Remote: "origin"}
	if res.Setup, err = RemoteSetup(o, "origin"); err != nil {
		return nil, err
	}
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res.GitDir = s.GitDir()
	if res.Fetch, err = s.Fetch("origin"); err != nil {
		return res, err
	}
	if res.Writers, err = s.PublishedWriterKeys(); err != nil {
		return res, err
	}
	return res, nil
}

// humanishName is the folder git clone would make for url.
func humanishName(url string) string {
	u := strings.TrimRight(url, "/")
	u = strings.TrimSuffix(u, "/.git")
	u = strings.TrimRight(u, "/")
	if i := strings.LastIndexAny(u, "/:"); i >= 0 {
		u = u[i+1:]
	}
	u = strings.TrimSuffix(u, ".git")
	if u == "" || u == "." || u == ".." {
		return ""
	}
	return u
}
