package project

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/git"
)

// A stored patch is the same bytes on every host for the same two trees
// (docs/format.md, Patches): git computes it with the options below, in a
// throw-away git directory that borrows the repository's objects
// (GIT_OBJECT_DIRECTORY), under the git layer's Isolated policy, whose
// environment is built from nothing (docs/architecture.md). So no
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
	args := append(append([]string{"diff-tree"}, fixedDiffOptions...), base.String(), head.String())
	out, stderr, err := git.Cmd{Policy: git.Isolated, Dir: sandbox, Config: fixedDiffConfig, Args: args, Env: []string{
		"HOME=" + sandbox, // no ~/.gitconfig, no ~/.config/git/attributes
		"XDG_CONFIG_HOME=" + sandbox,
		"GIT_DIR=" + sandbox,
		"GIT_OBJECT_DIRECTORY=" + objectsDir, // its info/alternates are read as usual
		"GIT_CONFIG_SYSTEM=/dev/null",
	}}.Run()
	if err != nil {
		return nil, diffStat{}, fmt.Errorf("git diff-tree %s %s: %v: %s", base, head, err, strings.TrimSpace(string(stderr)))
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

// Patch is what a diff capture records: the two commits, their trees, and
// the patch between the trees with its counts.
type Patch struct {
	Base, Head            *Commit
	Bytes                 []byte
	Files, Added, Removed int64
}

// Diff computes the patch from base's tree to head's (none when the trees
// are the same) with the fixed options.
func Diff(c *core.Repo, base, head *Commit) (*Patch, error) {
	p := &Patch{Base: base, Head: head}
	if base.Commit.Tree == head.Commit.Tree {
		return p, nil
	}
	patch, st, err := fixedDiff(filepath.Join(c.GitDir, "objects"), base.Commit.Tree, head.Commit.Tree)
	if err != nil {
		return nil, err
	}
	p.Bytes, p.Files, p.Added, p.Removed = patch, st.files, st.added, st.removed
	return p, nil
}
