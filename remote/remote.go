// Package remote moves refs/bernstein/* between a repository and its git
// remotes: push, fetch (through remote-tracking refs), the refspecs of a
// remote, clone, and the divergence of a ref both sides moved.
package remote

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/txn"
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

// Syncer moves one repository's refs to and from its remotes; its ref
// moves go through the repository's writer, under its lock.
type Syncer struct {
	c *core.Repo
	w *txn.Writer
	// argBudget replaces pushArgBudget when it is not 0 (tests).
	argBudget int
	witness   *WitnessPolicy // nil: no witness is asked or checked
}

// NewSyncer is the syncer of repository c, whose writer is w; argBudget,
// when not 0, bounds the bytes of refspecs a push passes on git's command
// line instead of the default (tests).
func NewSyncer(c *core.Repo, w *txn.Writer, argBudget int) *Syncer {
	return &Syncer{c: c, w: w, argBudget: argBudget}
}

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
	Kind   string `json:"kind"` // journal, ledger, spine, audit, key (a writer's key ref), keys, repository, anchors, checkpoints, archive, fork_journal, fork_ledger, other
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
		writer(refs.SpinePrefix, "spine"), writer(refs.AuditPrefix, "audit"), writer(refs.Prefix+"writers/", "key"),
		writer(refs.AnchorsPrefix, "anchors"), writer(refs.CheckpointsPrefix, "checkpoints"), writer(refs.ArchivePrefix, "archive"):
		if in.Kind == "key" {
			// refs/bernstein/writers/<writer>.<key>: one ref per key.
			if w, _, err := refs.ParseWriterRef(ref); err == nil {
				in.Writer = w
			}
		}
	case ref == refs.Prefix+"keys":
		in.Kind = "keys"
	case ref == refs.Repository:
		in.Kind = "repository"
	case strings.HasPrefix(ref, refs.ForksPrefix):
		if w, kind, t, _, err := refs.ParseFork(ref); err == nil {
			in.Kind, in.Writer, in.Task = "fork_"+kind, w, t
		}
	}
	return in
}

// What names the ref for a person: "task T-1 (journal)", "writer host-a
// (spine)", "the keys ref".
func (in RefInfo) What() string {
	switch {
	case in.Task != "" && strings.HasPrefix(in.Kind, "fork_"):
		return fmt.Sprintf("task %s (writer %s's fork of its %s)", in.Task, in.Writer, strings.TrimPrefix(in.Kind, "fork_"))
	case in.Task != "":
		return fmt.Sprintf("task %s (%s)", in.Task, in.Kind)
	case in.Writer != "":
		return fmt.Sprintf("writer %s (%s)", in.Writer, in.Kind)
	case in.Kind == "keys":
		return "the published keys (" + in.Ref + ")"
	case in.Kind == "repository":
		return "the repository's identity (" + in.Ref + ")"
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
	remote     string // the remote's name, for Meaning
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
		remote := d.remote
		if remote == "" {
			remote = "REMOTE"
		}
		return "two hosts wrote to task " + d.Task + ": each host keeps its own rows; nothing was overwritten. To take the remote's rows as the truth and record this host's again on top of them: 'bernstein task adopt " + d.Task + " " + remote + "' (docs/remotes.md, Divergence)"
	case "spine", "audit", "key":
		return "only writer " + d.Writer + " writes this chain, so either its identity (BERNSTEIN_HOME) is in use on two hosts or a chain was rewritten: find out which before anything else"
	case "keys":
		return "two hosts published keys into the one keys ref on their own: fetch before bernstein init on a new host"
	case "repository":
		return "this repository and the remote are two repositories (each minted its own identity, docs/format.md): a clone made before the remote had one ran bernstein init on its own; clone the remote again (bernstein clone) and init there"
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

// List lists the repository's git remotes, as 'git remote' does.
func List(gitDir string) ([]string, error) {
	out, errb, err := git.Cmd{Policy: git.User, GitDir: gitDir, Args: []string{"remote"}}.Run()
	if err != nil {
		return nil, fmt.Errorf("git remote: %s", git.Message(errb))
	}
	return strings.Fields(string(out)), nil
}

// Check refuses a remote the repository does not have (ErrUnknownRemote).
// A remote defined in the repository's own config file is found without
// starting git; any other (included files, the user's config) is asked of
// git.
func Check(gitDir, remote string) error {
	if remote == "" {
		return fmt.Errorf("%w: the remote name is empty", ErrUnknownRemote)
	}
	if git.FileHasSection(gitDir, "remote", remote) {
		return nil
	}
	names, err := List(gitDir)
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
