package bernstein

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// git's own diffs of artifact versions (docs/format.md, "Diffing with git"):
// a textconv diff driver shows each version's payload as its text form (a
// report's markdown, a table one row a line, a link's URL and kind), so that
// `git diff A:artifacts/K/v1.json B:artifacts/K/v2.json` and `git log -p`
// show lines, not one line of JSON. 'bernstein init' and 'bernstein clone'
// set it up in the repository's own files: never in the user's
// configuration, never in a tracked .gitattributes.

// DiffDriver is the name of the driver: diff.<DiffDriver>.textconv.
const DiffDriver = "bernstein"

// DiffAttributes is the line of $GIT_DIR/info/attributes that gives the
// journal's artifact paths the driver. The pattern is anchored at the top
// of a tree, where row trees hold them.
const DiffAttributes = "artifacts/*/v*.json diff=" + DiffDriver

// DiffTextconv is the driver's command. git appends the path of a file
// holding the blob. Without bernstein on PATH, or for a file that is not a
// payload, the file's own bytes are shown, as without the driver.
const DiffTextconv = `sh -c 'bernstein artifact textconv "$1" 2>/dev/null || cat "$1"' -`

// DiffDriverResult says what SetupDiffDriver changed.
type DiffDriverResult struct {
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
func (r *DiffDriverResult) Changed() bool { return r.AttributesAdded || r.TextconvSet }

// SetupDiffDriver sets up the driver in the repository at dir (a work tree
// or a git directory): the attributes line and, in the repository's config
// (not the user's), diff.bernstein.textconv, unless it is set already.
// Running it again changes nothing.
func SetupDiffDriver(dir string) (*DiffDriverResult, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(string(out)), nil
	}
	attrs, err := git("rev-parse", "--path-format=absolute", "--git-path", "info/attributes")
	if err != nil {
		return nil, err
	}
	res := &DiffDriverResult{Attributes: attrs}
	old, err := os.ReadFile(attrs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	present := false
	for _, l := range strings.Split(string(old), "\n") {
		present = present || strings.TrimSpace(l) == DiffAttributes
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
		b.WriteString(DiffAttributes + "\n")
		_, err = f.WriteString(b.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", attrs, err)
		}
		res.AttributesAdded = true
	}
	key := "diff." + DiffDriver + ".textconv"
	// The repository's own config only: a value the user set there is kept.
	cur, err := git("config", "--local", "--get", key)
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		return nil, err
	}
	switch cur {
	case DiffTextconv:
	case "":
		if _, err := git("config", "--local", key, DiffTextconv); err != nil {
			return nil, err
		}
		res.TextconvSet = true
	default:
		res.TextconvKept = cur
	}
	return res, nil
}
