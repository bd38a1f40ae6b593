package bernstein

import "github.com/bernstein/bernstein/internal/diffdriver"

// git's own diffs of artifact versions (internal/diffdriver; docs/format.md,
// "Diffing with git").

// DiffDriver is the name of the driver: diff.<DiffDriver>.textconv.
const DiffDriver = diffdriver.Name

// DiffAttributes is the line of $GIT_DIR/info/attributes that gives the
// journal's artifact paths the driver.
const DiffAttributes = diffdriver.Attributes

// DiffTextconv is the driver's command.
const DiffTextconv = diffdriver.Textconv

// DiffDriverResult says what SetupDiffDriver changed.
type DiffDriverResult = diffdriver.Result

// SetupDiffDriver sets up the driver in the repository at dir (a work tree
// or a git directory): the attributes line and, in the repository's config
// (not the user's), diff.bernstein.textconv, unless it is set already.
// Running it again changes nothing.
func SetupDiffDriver(dir string) (*DiffDriverResult, error) { return diffdriver.Setup(dir) }
