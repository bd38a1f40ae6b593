package git

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotRepository reports a directory that is not in a git repository.
var ErrNotRepository = errors.New("not a git repository")

// Locate finds dir's own git directory (where its HEAD is), the common one
// (where the refs and objects are), and whether the repository is bare: as
// the user's git finds them, without starting git in the plain cases.
func Locate(dir string) (own, common string, bare bool, err error) {
	if own, c, bare, ok := discover(dir); ok {
		return own, c, bare, nil
	}
	lines, err := RevParse(dir, "--path-format=absolute", "--git-common-dir", "--is-bare-repository", "--absolute-git-dir")
	if err == nil && len(lines) < 3 {
		err = &RevParseError{Dir: dir}
	}
	if err != nil {
		var rp *RevParseError
		if errors.As(err, &rp) && (rp.Msg == "" || strings.Contains(rp.Msg, "not a git repository")) {
			return "", "", false, fmt.Errorf("%w: %s", ErrNotRepository, dir)
		}
		return "", "", false, err
	}
	return filepath.Clean(lines[2]), filepath.Clean(lines[0]), lines[1] == "true", nil
}

// discover finds the common git directory of the repository enclosing dir
// the way git does for the plain cases (a .git directory or gitfile in dir or
// an ancestor, or dir being a git directory itself), without starting git.
// ok is false when a case needs git's own discovery (GIT_DIR and friends in
// the environment, or anything unusual); the caller then asks git. own is
// the worktree's own git directory (where its HEAD is); common holds the refs
// and objects.
func discover(dir string) (own, common string, bare bool, ok bool) {
	for _, env := range []string{"GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM"} {
		if os.Getenv(env) != "" {
			return "", "", false, false
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", false, false
	}
	for d := abs; ; {
		dot := filepath.Join(d, ".git")
		if fi, err := os.Stat(dot); err == nil {
			gitDir := dot
			if !fi.IsDir() {
				b, err := os.ReadFile(dot)
				if err != nil || !bytes.HasPrefix(b, []byte("gitdir: ")) {
					return "", "", false, false
				}
				gitDir = strings.TrimSpace(string(b[len("gitdir: "):]))
				if !filepath.IsAbs(gitDir) {
					gitDir = filepath.Join(d, gitDir)
				}
			}
			c, ok := commonDir(gitDir)
			return filepath.Clean(gitDir), c, false, ok
		}
		if isGitDir(d) {
			c, ok := commonDir(d)
			return d, c, configBare(c), ok
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", "", false, false
		}
		d = parent
	}
}

// isGitDir reports whether d looks like a git directory (as git checks it).
func isGitDir(d string) bool {
	for _, p := range []string{"HEAD", "objects", "refs"} {
		if _, err := os.Stat(filepath.Join(d, p)); err != nil {
			return false
		}
	}
	return true
}

// commonDir follows a worktree's commondir file to the shared git directory.
func commonDir(gitDir string) (string, bool) {
	c := gitDir
	if b, err := os.ReadFile(filepath.Join(gitDir, "commondir")); err == nil {
		c = strings.TrimSpace(string(b))
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
	}
	c = filepath.Clean(c)
	if !isGitDir(c) {
		return "", false
	}
	// A repository format git alone understands (reftable refs, SHA-256
	// objects) goes through git's own discovery, which then refuses or
	// reports it.
	if ext := FileConfigValue(c, "extensions", "refstorage"); ext != "" && ext != "files" {
		return "", false
	}
	if ext := FileConfigValue(c, "extensions", "objectformat"); ext != "" && ext != "sha1" {
		return "", false
	}
	return c, true
}

func configBare(gitDir string) bool {
	return strings.EqualFold(FileConfigValue(gitDir, "core", "bare"), "true")
}
