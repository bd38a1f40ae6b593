package bernstein

import (
	"errors"
	"fmt"
	"os"

	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/remote"
)

// Remotes (package remote; docs/remotes.md): push, fetch and clone move
// refs/bernstein/* between hosts through an ordinary git remote, never
// forced; a ref both sides moved is a divergence, reported with both heads.

// TrackingRoot is the namespace of the remote-tracking copies of
// refs/bernstein/*: refs/bernstein-remotes/<remote>/<rest>.
const TrackingRoot = remote.TrackingRoot

// PushRefspec is the push refspec RemoteSetup configures: every local
// refs/bernstein/* ref to the same name, fast-forward only.
const PushRefspec = remote.PushRefspec

// TrackingPrefix is where the remote-tracking copies of remote's
// refs/bernstein/* refs live.
func TrackingPrefix(name string) string { return remote.TrackingPrefix(name) }

// TrackingRef names the remote-tracking copy of ref (a refs/bernstein/* ref).
func TrackingRef(name, ref string) string { return remote.TrackingRef(name, ref) }

// FetchRefspec is the fetch refspec RemoteSetup configures: the remote's
// refs/bernstein/* into its remote-tracking refs, fast-forward only.
func FetchRefspec(name string) string { return remote.FetchRefspec(name) }

// DescribeRef names what ref holds.
func DescribeRef(ref string) RefInfo { return remote.DescribeRef(ref) }

// Errors of the remote commands; callers branch on them.
var (
	// ErrUnknownRemote: the repository has no remote of that name.
	ErrUnknownRemote = remote.ErrUnknownRemote
	// ErrDiverged: a ref moved on both sides (see DivergedError).
	ErrDiverged = remote.ErrDiverged
	// ErrNotFastForward: FastForward was given an update that would drop
	// commits.
	ErrNotFastForward = remote.ErrNotFastForward
	// ErrHeldBack: a fetch left refs behind the remote's heads because what
	// they hold does not verify here (see HeldBackError).
	ErrHeldBack = remote.ErrHeldBack
	// ErrNotDiverged: Adopt was asked to resolve a task that did not
	// diverge from the remote's.
	ErrNotDiverged = remote.ErrNotDiverged
)

// The remote commands' results and errors (package remote).
type (
	RefInfo            = remote.RefInfo
	RefChange          = remote.RefChange
	Divergence         = remote.Divergence
	DivergedError      = remote.DivergedError
	RemoteSetupResult  = remote.RemoteSetupResult
	FetchResult        = remote.FetchResult
	FetchOptions       = remote.FetchOptions
	PushResult         = remote.PushResult
	AutoArchive        = remote.AutoArchive
	Rejection          = remote.Rejection
	RejectedError      = remote.RejectedError
	RemoteRefusedError = remote.RemoteRefusedError
	PrePushError       = remote.PrePushError
	HeldBack           = remote.HeldBack
	HeldBackError      = remote.HeldBackError
	UntrustedError     = remote.UntrustedError
	UntrustedWriter    = remote.UntrustedWriter
	AdoptResult        = remote.AdoptResult
	AdoptedChain       = remote.AdoptedChain
	DroppedRow         = remote.DroppedRow
)

// Remotes lists the repository's git remotes, as 'git remote' does.
func (s *Store) Remotes() ([]string, error) { return remote.List(s.core.GitDir) }

// Settle finishes any write a killed writer left half done (its intent in a
// kept pack's .keep file), under the writer lock, as the next post would.
// After it, refs/bernstein/* holds only whole transactions.
func (s *Store) Settle() error { return s.w.Settle() }

// FastForward moves local refs/bernstein/* refs forward, all or none: each
// update's New must descend from its Old (a zero Old creates the ref), in
// one ref transaction under the writer lock, as a post moves them; a ref
// that moved since fails it with refs.ErrConflict, nothing moved. The
// objects must be in the repository already (fetched).
func (s *Store) FastForward(updates []refs.Update) error { return s.sync.FastForward(updates) }

// Fetch brings remote's refs/bernstein/* into the remote-tracking refs
// refs/bernstein-remotes/<remote>/*, then moves the local refs forward to
// them in one transaction, each only to commits that verify here and never
// this host's own chains (remote.Syncer.Fetch): a ref that diverged, and
// what depends on it, stays (*DivergedError); what does not verify is held
// back (*HeldBackError).
func (s *Store) Fetch(name string) (*FetchResult, error) { return s.sync.Fetch(name) }

// FetchWith is Fetch, reading the remote as o says: o.Full reads every
// refs/bernstein/* ref of the remote, where a fetch after the first reads
// the per-writer refs and the tasks their new entries name
// (docs/remotes.md, fetch).
func (s *Store) FetchWith(name string, o FetchOptions) (*FetchResult, error) {
	return s.sync.FetchWith(name, o)
}

// Adopt resolves a divergence of task with remote: the remote's chains of
// the task become the truth, this host's own rows the remote lacks are
// recorded again on top of them, and a signed supersede entry in this
// host's spine and audit mirror names what was dropped, which stays in
// this host's fork refs (remote.Syncer.Adopt; docs/remotes.md, Divergence).
func (s *Store) Adopt(name, task string) (*AdoptResult, error) { return s.sync.Adopt(name, task) }

// Push sends every local refs/bernstein/* ref that this host moved past the
// remote's head, in one atomic push, never forced (see remote.Syncer.Push
// for what it retries and which errors it returns).
//
// Before it pushes, Push archives this writer's own tasks that ended long
// enough ago, as the repository's policy says (PushWith, ArchivePolicy).
func (s *Store) Push(name string) (*PushResult, error) { return s.PushWith(name, PushOptions{}) }

// CheckRemote reports ErrUnknownRemote unless the repository o names has
// remote.
func CheckRemote(o Options, name string) error {
	dir := repoDir(o)
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return fmt.Errorf("%w: %s does not exist", ErrNotRepository, dir)
	}
	_, gitDir, _, err := git.Locate(dir)
	if err != nil {
		return err
	}
	return remote.Check(gitDir, name)
}

// RemoteSetup configures remote so that plain `git fetch` and `git push`
// move refs/bernstein/* safely, and fast-forward only (remote.Setup says
// which refspecs). It refuses a remote the repository does not have.
func RemoteSetup(o Options, name string) (*RemoteSetupResult, error) {
	_, gitDir, _, err := git.Locate(repoDir(o))
	if err != nil {
		return nil, err
	}
	if err := git.CheckObjectFormat(gitDir); err != nil {
		return nil, err
	}
	return remote.Setup(gitDir, name)
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
	abs, err := remote.CloneRepo(url, dir)
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
	// A fetch that held back what does not verify still made the clone,
	// of everything else: it is reported with the clone's result.
	var held error
	// The first fetch from a remote reads every ref (it has no remote-
	// tracking spine yet); git clone wrote them, so the fetch is asked to.
	if res.Fetch, err = s.FetchWith("origin", FetchOptions{Full: true}); errors.Is(err, ErrHeldBack) {
		held = err
	} else if err != nil {
		return res, err
	}
	if res.Writers, err = s.PublishedWriterKeys(); err != nil {
		return res, err
	}
	return res, held
}
