package remote

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/refs"
)

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
func (s *Syncer) Fetch(remote string) (*FetchResult, error) {
	if err := Check(s.c.GitDir, remote); err != nil {
		return nil, err
	}
	if err := s.fetchTracking(remote, []string{"+" + refs.Prefix + "*:" + TrackingPrefix(remote) + "*"}, true); err != nil {
		return nil, err
	}
	unlock, err := s.w.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	for attempt := 0; ; attempt++ {
		res, updates, err := s.planFetch(remote)
		if err != nil {
			return nil, err
		}
		if len(res.Diverged) > 0 {
			return res, &DivergedError{Remote: remote, Diverged: res.Diverged}
		}
		err = s.w.ApplyLocked(updates)
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
func (s *Syncer) fetchTracking(remote string, refspecs []string, prune bool) error {
	// The objects are kept as a pack, synced (never unpacked into loose
	// objects, which git does not sync by default): the local refs will
	// point at them. The remote-tracking refs are not synced: they are
	// hints, relearned by the next fetch or push.
	args := []string{"fetch", "--no-tags", "--no-write-fetch-head", "--refmap=", "--no-recurse-submodules"}
	if prune {
		args = append(args, "--prune")
	}
	args = append(args, remote)
	args = append(args, refspecs...)
	fetch := git.Cmd{Policy: git.User, GitDir: s.c.GitDir, Config: []string{"fetch.unpackLimit=1", "core.fsync=pack,derived-metadata"}, Args: args}
	if _, errb, err := fetch.Run(); err != nil {
		return fmt.Errorf("git fetch %s: %s", remote, git.Message(errb))
	}
	return nil
}

// planFetch compares the local refs with the remote-tracking ones.
func (s *Syncer) planFetch(remote string) (*FetchResult, []refs.Update, error) {
	res := &FetchResult{Remote: remote, Created: []RefChange{}, Forwarded: []RefChange{}, LocalAhead: []RefChange{}, Diverged: []Divergence{}}
	local, err := s.c.Refs.Snapshot(refs.Prefix)
	if err != nil {
		return nil, nil, err
	}
	tracking, names, err := s.c.Refs.List(TrackingPrefix(remote))
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
