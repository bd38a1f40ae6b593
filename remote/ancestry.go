package remote

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// FastForward moves local refs/bernstein/* refs forward, all or none: each
// update's New must descend from its Old (a zero Old creates the ref). It
// takes the writer lock, finishes interrupted writes, and moves the refs in
// one ref transaction with compare-and-swap on the Old values, under an
// intent, as a post does: readers never see it half done, and a ref that
// moved since (a post) fails it with refs.ErrConflict, nothing moved. The
// objects must be in the repository already (fetched).
func (s *Syncer) FastForward(updates []refs.Update) error {
	unlock, err := s.w.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	for _, u := range updates {
		if !strings.HasPrefix(u.Ref, refs.Prefix) {
			return fmt.Errorf("refusing to move %s: not a bernstein ref", u.Ref)
		}
		if u.Old.IsZero() {
			if !s.c.Objects.Has(u.New) {
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
	return s.w.ApplyLocked(updates)
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
func (s *Syncer) relate(local, remote gitstore.Oid) (ancestry, error) {
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
func (s *Syncer) parentOf(id gitstore.Oid) (gitstore.Oid, error) {
	data, err := s.c.Objects.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return gitstore.ZeroOid, chain.Unreadable(fmt.Errorf("commit %s: %w", id, err))
	}
	if len(c.Parents) == 0 {
		return gitstore.ZeroOid, nil
	}
	return c.Parents[0], nil
}

func divergence(name, ref string, local, remote gitstore.Oid, a ancestry) Divergence {
	d := Divergence{RefInfo: DescribeRef(ref), Local: local.String(), Remote: remote.String(), LocalOnly: a.localOnly, RemoteOnly: a.remoteOnly, remote: name}
	if !a.base.IsZero() {
		d.Base = a.base.String()
	}
	return d
}
