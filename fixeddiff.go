package bernstein

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
)

// A stored patch is the same bytes on every host for the same two trees
// (docs/format.md, Patches): git computes it with the options below, in a
// throw-away git directory that borrows the repository's objects
// (GIT_OBJECT_DIRECTORY), with an environment built from nothing. So no
// configuration is read (the repository's, the user's, the system's, or one
// passed in GIT_CONFIG_*), no attributes file (the work tree's
// .gitattributes, info/attributes, the user's or the system's), no replace
// refs and no GIT_EXTERNAL_DIFF or GIT_DIFF_OPTS.

// fixedDiffConfig is the configuration every patch is computed under, given
// with -c (nothing else is read).
var fixedDiffConfig = []string{"core.quotePath=true", "core.bigFileThreshold=512m", "diff.suppressBlankEmpty=false"}

// fixedDiffOptions are the options of git diff-tree for every patch; the
// two trees follow them. Binary files are shown as "Binary files ...
// differ" with their blob ids on the index line: a --binary patch carries
// deflated bytes, which differ between zlib builds.
var fixedDiffOptions = []string{"-r", "--numstat", "-p", "--full-index", "--no-color", "--no-ext-diff", "--no-textconv",
	"--src-prefix=a/", "--dst-prefix=b/", "-U3", "--inter-hunk-context=0", "--no-renames", "--diff-algorithm=myers",
	"--indent-heuristic", "--submodule=short", "--ignore-submodules=none", "--no-relative"}

// diffStat is what a patch changes, as git's --numstat counts it.
type diffStat struct {
	files, added, removed int64
}

// fixedDiff returns the patch from tree base to tree head of the objects in
// objectsDir, computed with the fixed options, and its counts (a binary
// file counts as a file with no lines).
func fixedDiff(objectsDir string, base, head gitstore.Oid) ([]byte, diffStat, error) {
	sandbox, err := os.MkdirTemp("", "bernstein-diff-*")
	if err != nil {
		return nil, diffStat{}, fmt.Errorf("diff: %w", err)
	}
	defer os.RemoveAll(sandbox)
	// A git directory of its own: an unborn HEAD and no config, no
	// info/attributes, no refs (so no refs/replace).
	if err := os.Mkdir(filepath.Join(sandbox, "refs"), 0o755); err != nil {
		return nil, diffStat{}, fmt.Errorf("diff: %w", err)
	}
	if err := os.WriteFile(filepath.Join(sandbox, "HEAD"), []byte("ref: refs/heads/none\n"), 0o644); err != nil {
		return nil, diffStat{}, fmt.Errorf("diff: %w", err)
	}
	args := make([]string, 0, 2*len(fixedDiffConfig)+len(fixedDiffOptions)+3)
	for _, c := range fixedDiffConfig {
		args = append(args, "-c", c)
	}
	args = append(append(append(args, "diff-tree"), fixedDiffOptions...), base.String(), head.String())
	cmd := exec.Command("git", args...)
	cmd.Dir = sandbox
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + sandbox, // no ~/.gitconfig, no ~/.config/git/attributes
		"XDG_CONFIG_HOME=" + sandbox,
		"GIT_DIR=" + sandbox,
		"GIT_OBJECT_DIRECTORY=" + objectsDir, // its info/alternates are read as usual
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_NO_REPLACE_OBJECTS=1",
		"LC_ALL=C",
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, diffStat{}, fmt.Errorf("git diff-tree %s %s: %v: %s", base, head, err, strings.TrimSpace(stderr.String()))
	}
	// The numstat lines come first, then a blank line and the patch.
	if len(out) == 0 {
		return nil, diffStat{}, nil
	}
	stat, patch, ok := bytes.Cut(out, []byte("\n\n"))
	if !ok || !bytes.HasPrefix(patch, []byte("diff --git ")) {
		return nil, diffStat{}, errors.New("git diff-tree: output is not numstat lines, a blank line and a patch")
	}
	var st diffStat
	for _, line := range strings.Split(string(stat), "\n") {
		fs := strings.SplitN(line, "\t", 3)
		if len(fs) < 3 {
			return nil, diffStat{}, fmt.Errorf("git diff-tree: numstat line %q", line)
		}
		st.files++
		a, _ := strconv.ParseInt(fs[0], 10, 64) // "-" for a binary file counts 0
		r, _ := strconv.ParseInt(fs[1], 10, 64)
		st.added += a
		st.removed += r
	}
	return patch, st, nil
}
