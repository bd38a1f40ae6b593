// Package diffdriver sets up git's own diffs of artifact versions
// (docs/format.md, "Diffing with git"): a textconv diff driver shows each
// version's payload as its text form (a report's markdown, a table one row
// a line, a link's URL and kind), so that `git diff
// A:artifacts/K/v1.json B:artifacts/K/v2.json` and `git log -p` show
// lines, not one line of JSON. 'bernstein init' and 'bernstein clone' set
// it up in the repository's own files: never in the user's configuration,
// never in a tracked .gitattributes.
package diffdriver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bernstein/bernstein/internal/git"
)

// Name is the name of the driver: diff.<Name>.textconv.
const Name = "bernstein"

// Attributes is the line of $GIT_DIR/info/attributes that gives the
// journal's artifact paths the driver. The pattern is anchored at the top
// of a tree, where row trees hold them.
const Attributes = "artifacts/*/v*.json diff=" + Name

// Textconv is the driver's command. git appends the path of a file
// holding the blob. Without bernstein on PATH, or for a file that is not a
// payload, the file's own bytes are shown, as without the driver.
const Textconv = `sh -c 'bernstein artifact textconv "$1" 2>/dev/null || cat "$1"' -`

// Result says what Setup changed.
type Result struct {
	// Attributes is the attributes file; AttributesAdded is set when the
	// line was added to it.
	Attributes      string `json:"attributes"`
	AttributesAdded bool   `json:"attributes_added"`
	// TextconvSet is set when diff.bernstein.textconv was set;
	// TextconvKept names the value kept when the repository's config set
	// it already to something else.
	TextconvSet  bool   `json:"textconv_set"`
	TextconvKept string `json:"textconv_kept,omitempty"`
}

// Changed reports whether anything was written.
func (r *Result) Changed() bool { return r.AttributesAdded || r.TextconvSet }

// Setup sets up the driver in the repository at dir (a work tree
// or a git directory): the attributes line and, in the repository's config
// (not the user's), diff.bernstein.textconv, unless it is set already.
// Running it again changes nothing.
func Setup(dir string) (*Result, error) {
	// The user's repository as their git finds it (where its git directory
	// keeps info/attributes; its own config).
	run := func(args ...string) (string, error) {
		out, stderr, err := git.Cmd{Policy: git.User, Dir: dir, Args: args}.Run()
		if err != nil {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(stderr)))
		}
		return strings.TrimSpace(string(out)), nil
	}
	attrs, err := run("rev-parse", "--path-format=absolute", "--git-path", "info/attributes")
	if err != nil {
		return nil, err
	}
	res := &Result{Attributes: attrs}
	old, err := os.ReadFile(attrs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	present := false
	for _, l := range strings.Split(string(old), "\n") {
		present = present || strings.TrimSpace(l) == Attributes
	}
	if !present {
		if err := os.MkdirAll(filepath.Dir(attrs), 0o755); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(attrs, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
			b.WriteByte('\n')
		}
		b.WriteString("# bernstein: artifact versions of its journals as text in git diff and git log -p (docs/format.md)\n")
		b.WriteString(Attributes + "\n")
		_, err = f.WriteString(b.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", attrs, err)
		}
		res.AttributesAdded = true
	}
	key := "diff." + Name + ".textconv"
	// The repository's own config only: a value the user set there is kept.
	cur, err := run("config", "--local", "--get", key)
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		return nil, err
	}
	switch cur {
	case Textconv:
	case "":
		if _, err := run("config", "--local", key, Textconv); err != nil {
			return nil, err
		}
		res.TextconvSet = true
	default:
		res.TextconvKept = cur
	}
	return res, nil
}
