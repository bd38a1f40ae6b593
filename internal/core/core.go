// Package core is the handle every part of the library takes: one open
// repository (its git directories, object store, ref reader and
// transactor), the writer identity of this host and the keys this reader
// trusts, and the tree cache. It holds no chain state: folds, heads,
// the transaction and the indexes live in packages of their own, each
// given a *Repo.
package core

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/atomicfile"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/keys/pins"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Config is what Open needs beside the directory: the fields of
// bernstein.Options that reach the repository (their meaning is said there).
type Config struct {
	Home           string // "": keys.Home()
	AllowedSigners string
	LockWait       time.Duration
	Now            func() time.Time // nil: time.Now
	Warn           func(msg string) // nil: discarded
	FaultHook      func(step string) error
}

// Repo is one open repository.
type Repo struct {
	GitDir  string // the common git directory: refs and objects live here
	OwnDir  string // the worktree's own git directory: its HEAD lives here
	Bare    bool
	Dir     string // the directory the repository was opened from
	Home    string // BERNSTEIN_HOME
	Objects *gitstore.Repo
	Refs    refs.Reader
	Txr     *refs.Transactor
	Now     func() time.Time

	allowedSigners string
	warn           func(string)

	identOnce sync.Once
	ident     *keys.Identity
	identErr  error

	trustMu   sync.Mutex
	trust     *keys.TrustSet
	trustErr  error
	trustPins pins.Stamp // the pin file the trust set was read with

	treeMu sync.Mutex
	trees  map[gitstore.Oid][]gitstore.TreeEntry

	repoIDOnce sync.Once
	repoID     string

	identMu    sync.Mutex
	identStamp stamp // refStamp of the identity read (ok false: none)
	identID    string
	recorded   recordedState // RecordedIdentity's last read
	adopted    string        // AdoptIdentity's id, while the ref does not exist yet
}

// Open opens the repository dir is in. It creates nothing.
func Open(dir string, c Config) (*Repo, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("repository %s: %w", dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("repository %s is not a directory", dir)
	}
	ownDir, gitDir, bare, err := git.Locate(dir)
	if err != nil {
		return nil, err
	}
	// Before anything reads or writes objects: a sha256 repository would be
	// damaged by SHA-1 packs.
	if err := git.CheckObjectFormat(gitDir); err != nil {
		return nil, err
	}
	objects, err := gitstore.Open(filepath.Join(gitDir, "objects"))
	if err != nil {
		return nil, err
	}
	objects.FaultHook = c.FaultHook
	home := c.Home
	if home == "" {
		if home, err = keys.Home(); err != nil {
			return nil, err
		}
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	r := &Repo{
		GitDir: gitDir, OwnDir: ownDir, Bare: bare, Dir: dir, Home: home, Objects: objects,
		Refs: refs.Reader{Dir: gitDir, Archive: &archiveIndex{objs: objects}}, Txr: &refs.Transactor{GitDir: gitDir, LockWait: c.LockWait, FaultHook: c.FaultHook}, Now: now,
		allowedSigners: c.AllowedSigners, warn: c.Warn,
		trees: map[gitstore.Oid][]gitstore.TreeEntry{},
	}
	r.Txr.Warn = func(msg string) { r.Warn("%s", msg) }
	return r, nil
}

// Close releases the mapped packs.
func (r *Repo) Close() error { return r.Objects.Close() }

// Warn reports a problem that does not undo a committed write.
func (r *Repo) Warn(format string, args ...any) {
	if r.warn != nil {
		r.warn(fmt.Sprintf(format, args...))
	}
}

// Identity returns the local writer identity, loading it once. It never
// creates one.
func (r *Repo) Identity() (*keys.Identity, error) {
	r.identOnce.Do(func() {
		r.ident, r.identErr = keys.Load(r.Home)
	})
	return r.ident, r.identErr
}

// SetIdentity gives the repository the identity just created (by init),
// unless one was loaded already.
func (r *Repo) SetIdentity(id *keys.Identity) {
	r.identOnce.Do(func() { r.ident = id })
}

// Trust returns the keys this reader trusts: the --allowed-signers file,
// this repository's pin file (keys/pins) and the local writer's own key. A
// pin file changed since the last call (by `bernstein keys pin` in another
// process) is read again.
func (r *Repo) Trust() (*keys.TrustSet, error) {
	r.trustMu.Lock()
	defer r.trustMu.Unlock()
	stamp := r.PinFile().Stamp()
	if (r.trust != nil || r.trustErr != nil) && stamp == r.trustPins {
		return r.trust, r.trustErr
	}
	r.trust, r.trustErr = r.loadTrust()
	r.trustPins = stamp
	return r.trust, r.trustErr
}

func (r *Repo) loadTrust() (*keys.TrustSet, error) {
	var pinned []keys.AllowedSigner
	if r.allowedSigners != "" {
		as, err := keys.ReadAllowedSigners(r.allowedSigners)
		if err != nil {
			return nil, err
		}
		pinned = as
	}
	ps, err := r.PinFile().Read()
	if err != nil {
		return nil, err
	}
	pinned = append(pinned, ps...)
	id, err := r.Identity()
	if err != nil && !errors.Is(err, keys.ErrNoIdentity) {
		return nil, err
	}
	return keys.NewTrustSet(pinned, id), nil
}

// PinFile is this repository's pin file.
func (r *Repo) PinFile() pins.File { return pins.For(r.Home, r.RepoID(), r.GitDir) }

// RepoID names this repository among the files BERNSTEIN_HOME keeps per
// repository (pins, the heads this host's writer wrote, audit
// checkpoints): its identity's id (32 hex digits) when it has one (storage
// format 2, docs/format.md), so that a repository moved or copied keeps
// what this host remembers of it and one created again at the same path
// starts afresh; else (format 1, or a bare remote that no push has given
// its identity yet) PathID. It follows refs/bernstein/repository as it
// changes (init, upgrade, a fetch or push that brings it).
func (r *Repo) RepoID() string {
	if id := r.IdentityID(); id != "" {
		return id
	}
	return r.PathID()
}

// PathID is the first 8 bytes, in hex, of the SHA-256 of the git
// directory's absolute, real path: what names a repository without an
// identity in BERNSTEIN_HOME.
func (r *Repo) PathID() string {
	r.repoIDOnce.Do(func() {
		dir := r.GitDir
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		sum := sha256.Sum256([]byte(dir))
		r.repoID = hex.EncodeToString(sum[:8])
	})
	return r.repoID
}

// IdentityID is the id of the repository's identity, "" when it has none
// (or refs/bernstein/repository cannot be read: verify.Binding says why to
// every reader). It is read again when the ref or packed-refs changes. The
// identity this host's writer recorded for the repository is its id
// whatever the ref says (RecordedIdentity).
func (r *Repo) IdentityID() string {
	if id, _, ok := r.RecordedIdentity(); ok {
		return id
	}
	stamp := refStamp(r.GitDir, refs.Repository)
	r.identMu.Lock()
	defer r.identMu.Unlock()
	if r.identStamp == stamp && r.identStamp.ok {
		return r.identID
	}
	r.identStamp, r.identID = stamp, ""
	head, err := r.Refs.ReadOptional(refs.Repository)
	if err != nil || head.IsZero() {
		if err == nil {
			r.identID = r.adopted
		}
		return r.identID
	}
	cc, err := chain.Read(r.Objects, head)
	if err != nil {
		return ""
	}
	rec, err := record.ParseRepositoryRecord(cc.Record)
	if err != nil {
		return ""
	}
	r.identID = rec.ID
	return r.identID
}

// AdoptIdentity is for the remote guard, about to accept the push that
// gives this repository (a bare remote) its identity id: the pins the
// operator (or trust on first use) made for it before, kept under its path
// (PathID), are copied to the identity's pin file when that has none, and
// this handle keys its files by id from now on, before the ref exists.
func (r *Repo) AdoptIdentity(id string) error {
	r.identMu.Lock()
	r.adopted, r.identStamp = id, stamp{}
	r.identMu.Unlock()
	from, to := pins.For(r.Home, r.PathID(), r.GitDir), pins.For(r.Home, id, r.GitDir)
	b, err := os.ReadFile(from.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(to.Path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return atomicfile.Write(to.Path, b, 0o600)
}

// refStamp identifies the state of a ref's loose file and of packed-refs
// (size, modification time, inode), so that a value read under it is read
// again when either changes: compared as values, with no string made of
// them, as every read of the identity takes one.
func refStamp(gitDir, ref string) stamp {
	st := stamp{ok: true}
	for i, p := range [2]string{filepath.Join(gitDir, filepath.FromSlash(ref)), filepath.Join(gitDir, "packed-refs")} {
		st.files[i] = pathStamp(p)
	}
	return st
}

// stamp is a refStamp: the loose file's and packed-refs' fileStamps.
type stamp struct {
	ok    bool
	files [2]fileStamp
}

// fileStamp is one file's state (the zero value: missing).
type fileStamp struct {
	exists      bool
	size, mtime int64
	ino         uint64
}

// ReadTree returns the entries of tree id, from the tree cache when it has
// them.
func (r *Repo) ReadTree(id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if id == gitstore.EmptyTree {
		return nil, nil
	}
	r.treeMu.Lock()
	if es, ok := r.trees[id]; ok {
		r.treeMu.Unlock()
		return es, nil
	}
	r.treeMu.Unlock()
	data, err := r.Objects.ReadType(id, gitstore.TypeTree)
	if err != nil {
		return nil, err
	}
	es, err := gitstore.ParseTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	r.CacheTree(id, es)
	return es, nil
}

const treeCacheLimit = 4096

// CacheTree keeps the entries of tree id (a tree this process wrote, or read).
func (r *Repo) CacheTree(id gitstore.Oid, es []gitstore.TreeEntry) {
	r.treeMu.Lock()
	defer r.treeMu.Unlock()
	if len(r.trees) >= treeCacheLimit {
		r.trees = map[gitstore.Oid][]gitstore.TreeEntry{}
	}
	r.trees[id] = es
}

// CheckHomeOutside refuses a BERNSTEIN_HOME inside the repository, where its
// private keys could be committed or pushed.
func (r *Repo) CheckHomeOutside() error {
	home, err := filepath.Abs(r.Home)
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(home); err == nil {
		home = real
	}
	roots := []string{r.GitDir}
	if top := r.WorkTree(); top != "" {
		roots = append(roots, top)
	}
	for _, root := range roots {
		if root == "" {
			continue
		}
		if real, err := filepath.EvalSymlinks(root); err == nil {
			root = real
		}
		if rel, err := filepath.Rel(root, home); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return fmt.Errorf("BERNSTEIN_HOME %s is inside the repository %s: keep private keys outside it", home, root)
		}
	}
	return nil
}

// WorkTree is the top of the repository's work tree, "" for a bare
// repository (or when git cannot tell).
func (r *Repo) WorkTree() string {
	if r.Bare {
		return ""
	}
	top, err := git.TopLevel(r.Dir)
	if err != nil {
		return ""
	}
	return top
}
