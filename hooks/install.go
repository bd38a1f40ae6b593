// Package hooks owns bernstein's git hooks: the remote guard (a pre-receive
// hook that refuses a push whose refs/bernstein/* updates do not check), the
// same check before a push leaves (pre-push), and the checkpoint hook (a
// post-commit hook that records each commit as a checkpoint row). Each hook
// is a one-line script that calls `bernstein hooks run NAME` by the absolute
// path of the binary that installed it; a hook that was there is kept and
// run after ours ("chained").
package hooks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/bernstein/bernstein/internal/git"
)

// Hook names (git's).
const (
	PreReceive = "pre-receive" // the remote guard, in a bare repository
	PrePush    = "pre-push"    // the guard's checks on what is about to leave
	PostCommit = "post-commit" // the checkpoint hook
)

// ChainedSuffix is appended to the name of a hook that was there before
// ours: ours runs it after its own work, with the same arguments and input.
const ChainedSuffix = ".chained"

// InstallOptions say which hook to install where, and what its runs need.
type InstallOptions struct {
	Repo string // a directory of the repository (the git directory of a bare one)
	Hook string // PreReceive, PrePush or PostCommit
	// Binary is the absolute path of the bernstein binary the script calls.
	Binary string
	// Home is the BERNSTEIN_HOME the hook runs with (its pin file, its
	// writer identity).
	Home string
	// Task is the task a post-commit hook checkpoints.
	Task string
	// TrustFirstUse makes a pre-receive guard pin the first key a writer
	// publishes.
	TrustFirstUse bool
}

// Installed says what Install or Uninstall did.
type Installed struct {
	Path    string // the hook file
	Chained string // the kept (or restored) earlier hook, "" when none
	// Unchanged: the same hook was installed already; nothing was written.
	Unchanged bool
	// Updated: a bernstein hook with other settings was replaced.
	Updated bool
}

// ErrNotInstalled reports an uninstall where no bernstein hook is.
var ErrNotInstalled = errors.New("not installed")

// Repo is what the hooks need to know of a repository.
type Repo struct {
	HooksDir string // core.hooksPath when set, else <git dir>/hooks
	Bare     bool
	GitDir   string // the common git directory
}

// Locate asks git where dir's repository keeps its hooks, so that
// core.hooksPath and linked worktrees are honoured as git honours them.
func Locate(dir string) (*Repo, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("repository %s: %w", dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("repository %s is not a directory", dir)
	}
	lines, err := git.RevParse(dir, "--path-format=absolute", "--is-bare-repository", "--git-common-dir", "--git-path", "hooks")
	if err != nil || len(lines) != 3 {
		msg := ""
		var rp *git.RevParseError
		if errors.As(err, &rp) {
			msg = rp.Msg
		}
		if msg == "" {
			msg = "not a git repository"
		}
		return nil, fmt.Errorf("%s: %s", dir, msg)
	}
	return &Repo{Bare: lines[0] == "true", GitDir: filepath.Clean(lines[1]), HooksDir: filepath.Clean(lines[2])}, nil
}

// CheckPlace refuses a hook in the wrong kind of repository: the guard
// belongs in the bare repository that receives pushes, the others in a
// working repository.
func (r *Repo) CheckPlace(hook string) error {
	switch hook {
	case PreReceive:
		if !r.Bare {
			return fmt.Errorf("%s is not a bare repository: the remote guard belongs in the bare repository that receives pushes (in a working repository, install --pre-push)", r.GitDir)
		}
	case PrePush, PostCommit:
		if r.Bare {
			return fmt.Errorf("%s is a bare repository: a %s hook belongs in a working repository (in a bare one, install --remote-guard)", r.GitDir, hook)
		}
	default:
		return fmt.Errorf("unknown hook %q", hook)
	}
	return nil
}

// quote quotes s for sh: single quotes, with each ' written '\”.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Script is the hook file: a shebang and one line that calls the binary.
func Script(o InstallOptions) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString("BERNSTEIN_HOME=" + quote(o.Home) + " exec " + quote(o.Binary) + " hooks run " + o.Hook)
	if o.Task != "" {
		b.WriteString(" --task " + quote(o.Task))
	}
	if o.TrustFirstUse {
		b.WriteString(" --trust-first-use")
	}
	b.WriteString(` -- "$@"` + "\n")
	return b.String()
}

// ours recognizes a hook file bernstein wrote, for any binary path.
var ours = regexp.MustCompile(`\A#!/bin/sh\nBERNSTEIN_HOME='[^\n]*' exec '[^\n]*' hooks run ([a-z-]+)[^\n]*\n\z`)

// isOurs reports whether the file at path is bernstein's hook named hook.
func isOurs(path, hook string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	m := ours.FindSubmatch(b)
	return m != nil && string(m[1]) == hook, nil
}

// Install writes the hook o names into the repository's hooks directory.
// A hook that is there already and is not bernstein's is kept: renamed
// NAME.chained, and run by ours. Installing the same hook twice writes
// nothing.
func Install(o InstallOptions) (*Installed, error) {
	if !filepath.IsAbs(o.Binary) || !filepath.IsAbs(o.Home) {
		return nil, errors.New("the hook needs the absolute paths of the binary and of BERNSTEIN_HOME")
	}
	r, err := Locate(o.Repo)
	if err != nil {
		return nil, err
	}
	if err := r.CheckPlace(o.Hook); err != nil {
		return nil, err
	}
	path := filepath.Join(r.HooksDir, o.Hook)
	chained := path + ChainedSuffix
	res := &Installed{Path: path}
	want := Script(o)
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		mine := false
		if fi.Mode().IsRegular() {
			if mine, err = isOurs(path, o.Hook); err != nil {
				return nil, err
			}
		}
		if mine {
			if _, err := os.Lstat(chained); err == nil {
				res.Chained = chained
			}
			if b, err := os.ReadFile(path); err == nil && string(b) == want && fi.Mode().Perm()&0o111 != 0 {
				res.Unchanged = true
				return res, nil
			}
			res.Updated = true
			break
		}
		// The hook stays in place until ours replaces it in one rename: it
		// is kept by a second link (NAME.chained), never moved away first,
		// so a crash at any step leaves the old hook or ours, never none.
		if cfi, err := os.Lstat(chained); err == nil {
			if !os.SameFile(fi, cfi) {
				return nil, fmt.Errorf("%s exists and is not bernstein's, and %s is taken already: move one of them away first", path, chained)
			}
			// An install stopped after keeping the hook: go on from there.
		} else if err := os.Link(path, chained); err != nil {
			return nil, fmt.Errorf("keeping the %s hook as %s: %w", o.Hook, chained, err)
		} else if err := syncDir(r.HooksDir); err != nil {
			return nil, err
		}
		res.Chained = chained
	}
	if err := os.MkdirAll(r.HooksDir, 0o755); err != nil {
		return nil, err
	}
	if err := writeExecutable(path, want); err != nil {
		return nil, err
	}
	return res, nil
}

// writeExecutable writes an executable file whole: a synced temporary file
// renamed over path, then the directory synced, so path is the old file or
// the new one at every instant, also after a crash.
func writeExecutable(path, content string) error {
	tmp := path + ".bernstein-tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o755) // whatever the umask
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes the renames and links in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Uninstall removes bernstein's hook named hook from the repository in dir
// and puts back the hook it had kept. A hook that is not bernstein's is left
// alone.
func Uninstall(dir, hook string) (*Installed, error) {
	r, err := Locate(dir)
	if err != nil {
		return nil, err
	}
	if err := r.CheckPlace(hook); err != nil {
		return nil, err
	}
	path := filepath.Join(r.HooksDir, hook)
	chained := path + ChainedSuffix
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: there is no %s hook in %s", ErrNotInstalled, hook, r.HooksDir)
	}
	if err != nil {
		return nil, err
	}
	mine := false
	if fi.Mode().IsRegular() {
		if mine, err = isOurs(path, hook); err != nil {
			return nil, err
		}
	}
	if !mine {
		return nil, fmt.Errorf("%w: the %s hook %s is not bernstein's; it was left as it is", ErrNotInstalled, hook, path)
	}
	res := &Installed{Path: path}
	if _, err := os.Lstat(chained); err == nil {
		if err := os.Rename(chained, path); err != nil {
			return nil, err
		}
		res.Chained = path
		return res, nil
	}
	return res, os.Remove(path)
}
