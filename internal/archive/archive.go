// Package archive is the codec of the archive of ended tasks
// (docs/archive.md): the tree of an archive commit, which holds each
// archived task's two chain heads as gitlinks at t/<hh>/<task>/journal and
// t/<hh>/<task>/ledger beside the commit's record and its signature.
//
// It builds such trees (rewriting only the shards an update touches) and
// reads them (one entry, every entry, or what changed between two commits),
// through a *gitstore.Repo, and refuses a tree that is not in that exact
// shape with one error naming what is wrong: anyone can write a tree, so a
// reader takes nothing on trust. It does not write objects or refs, and it
// does not read or check the record: that is its callers' part.
package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// Names in an archive commit's tree.
const (
	// TasksDir is the root's subtree of shards, the root's only entry.
	TasksDir = "t"
	// JournalLink and LedgerLink are a task tree's two gitlinks.
	JournalLink = "journal"
	LedgerLink  = "ledger"
)

// MaxAdd is the most tasks one archive commit adds: its parents are the
// previous commit and two heads a task, 513 at most.
const MaxAdd = 256

// Entry is one archived task: the heads of its journal and its ledger.
type Entry struct {
	Task    string
	Journal gitstore.Oid
	Ledger  gitstore.Oid
}

// Shard is the shard of a task: the first byte of the SHA-256 of the task
// id, in lowercase hex.
func Shard(task string) string {
	sum := sha256.Sum256([]byte(task))
	return hex.EncodeToString(sum[:1])
}

// Path is the task's tree in an archive commit: t/<hh>/<escaped task>, the
// escape being the one of ref names (refs.EscapeTask).
func Path(task string) string {
	return TasksDir + "/" + Shard(task) + "/" + refs.EscapeTask(task)
}

// Parents are the parents of an archive commit: the previous archive commit
// (none for the first), then the journal and ledger heads of each entry it
// adds, in the order given, each once. Git follows no gitlink, neither for
// reachability nor in gc, fsck, push or clone; these parents are what keep
// every archived chain reachable from the archive ref alone.
func Parents(prev gitstore.Oid, add []Entry) []gitstore.Oid {
	out := make([]gitstore.Oid, 0, 1+2*len(add))
	seen := map[gitstore.Oid]bool{}
	put := func(id gitstore.Oid) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	if !prev.IsZero() {
		put(prev)
	}
	for _, e := range add {
		put(e.Journal)
		put(e.Ledger)
	}
	return out
}

// taskTree is the tree of one entry.
func taskTree(e Entry) gitstore.Object {
	return gitstore.NewObject(gitstore.TypeTree, gitstore.EncodeTree([]gitstore.TreeEntry{
		{Mode: gitstore.ModeGitlink, Name: JournalLink, ID: e.Journal},
		{Mode: gitstore.ModeGitlink, Name: LedgerLink, ID: e.Ledger},
	}))
}

// MalformedError is an archive tree (or the archive commit) that is not in
// the archive's shape.
type MalformedError struct {
	Tree gitstore.Oid // the tree (or commit) at fault
	What string
	// Commit is set when the object at fault is the archive commit itself
	// (not a commit, or one git cannot parse).
	Commit bool
}

func (e *MalformedError) Error() string {
	kind := "tree"
	if e.Commit {
		kind = "commit"
	}
	return fmt.Sprintf("malformed archive %s %s: %s", kind, e.Tree, e.What)
}

// Unreadable reports whether err, from a reader of this package, says
// that the archive commit read cannot be read as an archive: a
// MalformedError, or an object of it that is not in the repository (git
// moves an archive ref only once it holds the commit, its trees and, as
// its parents, the heads it names, so an absent one was never written by
// an archive writer). Any other error (the object store could not be
// read) is not the archive's.
func Unreadable(err error) bool {
	var m *MalformedError
	return errors.As(err, &m) || errors.Is(err, gitstore.ErrMissing)
}

func malformed(tree gitstore.Oid, format string, args ...any) error {
	return &MalformedError{Tree: tree, What: fmt.Sprintf(format, args...)}
}
