// Package chain reads bernstein's linear record chains: commits whose message
// carries one canonical record and whose single parent is the previous one.
package chain

import (
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
)

// Commit is one chain commit with the record its message carries.
type Commit struct {
	ID      gitstore.Oid
	Commit  gitstore.Commit
	Payload []byte // the bytes a commit signature covers
	Record  []byte
	Err     error // set by WalkAll when the commit cannot serve as a chain link
	// Proof is what a walk's check made of the commit's signature, before
	// the walk let go of the signature and the signed bytes.
	Proof Proof
}

// Proof is the verdict on a chain commit's signature: the writer it names
// and a state with its reason (the verify package decides them).
type Proof struct {
	Writer string
	State  string
	Reason string
}

// ErrNotLinear reports a chain commit with more than one parent.
var ErrNotLinear = errors.New("chain commit has more than one parent")

// ErrUnreadable matches (errors.Is) a read that met an object which cannot
// be a chain commit: missing, corrupt, not a commit, a commit with more
// than one parent or whose message carries no record. That is what plain
// git can write and no writer of chains does; an error of the disk is not
// one.
var ErrUnreadable = errors.New("not a chain commit")

// unreadable is err as an ErrUnreadable.
type unreadable struct{ err error }

func (u unreadable) Error() string   { return u.err.Error() }
func (u unreadable) Unwrap() []error { return []error{u.err, ErrUnreadable} }

// Unreadable marks err, met reading a chain commit, as an ErrUnreadable:
// the object's fault.
func Unreadable(err error) error { return unreadable{err} }

// notChainCommit marks err, met reading id, as an ErrUnreadable when the
// object is at fault (missing or corrupt: a commit's parse and record
// errors are marked by their caller).
func notChainCommit(err error) error {
	if errors.Is(err, gitstore.ErrMissing) || errors.Is(err, gitstore.ErrCorrupt) {
		return unreadable{err}
	}
	return err
}

// Read reads one chain commit, its signed payload and the record in its
// message.
func Read(objs *gitstore.Repo, id gitstore.Oid) (Commit, error) {
	return read(objs, id, true)
}

func read(objs *gitstore.Repo, id gitstore.Oid, payload bool) (Commit, error) {
	data, err := objs.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return Commit{ID: id}, notChainCommit(err)
	}
	var c gitstore.Commit
	var p []byte
	if payload {
		c, p, err = gitstore.ParseCommitInPlace(data) // data is this read's own
	} else {
		c, err = gitstore.ParseCommitLinks(data)
	}
	if err != nil {
		return Commit{ID: id}, unreadable{fmt.Errorf("commit %s: %w", id, err)}
	}
	cc := Commit{ID: id, Commit: c, Payload: p}
	if len(c.Parents) > 1 {
		return cc, unreadable{fmt.Errorf("commit %s: %w", id, ErrNotLinear)}
	}
	rec, err := record.RecordFromMessage(c.Message)
	if err != nil {
		return cc, unreadable{fmt.Errorf("commit %s: %w", id, err)}
	}
	cc.Record = rec
	return cc, nil
}

// ReadAnchor reads one commit of a writer's anchors chain: its first parent
// is the previous anchor, the others the commits it keeps reachable.
func ReadAnchor(objs *gitstore.Repo, id gitstore.Oid) (Commit, error) {
	data, err := objs.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return Commit{ID: id}, err
	}
	c, p, err := gitstore.ParseCommitInPlace(data)
	if err != nil {
		return Commit{ID: id}, fmt.Errorf("commit %s: %w", id, err)
	}
	cc := Commit{ID: id, Commit: c, Payload: p}
	rec, err := record.RecordFromMessage(c.Message)
	if err != nil {
		return cc, fmt.Errorf("commit %s: %w", id, err)
	}
	cc.Record = rec
	return cc, nil
}

// ReadArchive reads one commit of a writer's archive of ended tasks
// (docs/archive.md), shaped as an anchor is: its first parent is the
// previous archive commit, the others the chain heads it keeps reachable.
func ReadArchive(objs *gitstore.Repo, id gitstore.Oid) (Commit, error) {
	return ReadAnchor(objs, id)
}

// WalkBack reads the chain from head back to (not including) stop, or to the
// root when stop is zero or never met. It returns the commits oldest first
// and whether stop was met. Any unreadable commit is an error. The commits
// keep their id, parents, tree, record and, when check is given, the proof
// check made of each while its signature was at hand.
func WalkBack(objs *gitstore.Repo, head, stop gitstore.Oid, check func(*Commit)) ([]Commit, bool, error) {
	var out []Commit
	for id := head; !id.IsZero(); {
		if id == stop {
			reverse(out)
			return out, true, nil
		}
		cc, err := read(objs, id, check != nil)
		if err != nil {
			return nil, false, err
		}
		if check != nil {
			check(&cc)
			cc.Payload = nil
		}
		// A long chain is held whole until the walk ends: keep only the
		// record (copied out of the commit's bytes) and the links.
		cc.Record = append([]byte(nil), cc.Record...)
		cc.Commit.Message, cc.Commit.Signature = nil, nil
		out = append(out, cc)
		if len(cc.Commit.Parents) == 0 {
			break
		}
		id = cc.Commit.Parents[0]
	}
	reverse(out)
	return out, stop.IsZero(), nil
}

// WalkAll reads the whole chain from head, oldest first, following first
// parents. A commit that cannot be a chain link is returned with Err set; a
// commit that cannot be read at all ends the walk there (its Err says why).
func WalkAll(objs *gitstore.Repo, head gitstore.Oid) []Commit {
	var out []Commit
	seen := map[gitstore.Oid]bool{}
	for id := head; !id.IsZero(); {
		if seen[id] {
			out = append(out, Commit{ID: id, Err: errors.New("chain loops")})
			break
		}
		seen[id] = true
		cc, err := Read(objs, id)
		cc.Err = err
		out = append(out, cc)
		if len(cc.Commit.Parents) == 0 {
			break
		}
		id = cc.Commit.Parents[0]
	}
	reverse(out)
	return out
}

func reverse[T any](xs []T) {
	for i, j := 0, len(xs)-1; i < j; i, j = i+1, j-1 {
		xs[i], xs[j] = xs[j], xs[i]
	}
}

// Walk reads the chain from head toward the root, newest first, calling fn
// for each commit without holding the chain in memory. A commit that cannot
// be read ends the walk after fn sees it with Err set. fn returning false
// stops the walk.
func Walk(objs *gitstore.Repo, head gitstore.Oid, fn func(Commit) bool) {
	seen := map[gitstore.Oid]struct{}{}
	for id := head; !id.IsZero(); {
		if _, loop := seen[id]; loop {
			fn(Commit{ID: id, Err: errors.New("chain loops")})
			return
		}
		seen[id] = struct{}{}
		cc, err := Read(objs, id)
		cc.Err = err
		if !fn(cc) || len(cc.Commit.Parents) == 0 {
			return
		}
		id = cc.Commit.Parents[0]
	}
}
