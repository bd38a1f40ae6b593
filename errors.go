package bernstein

import "github.com/bernstein/bernstein/internal/fold"

// ErrUnproven reports a chain the write path will not extend because it
// holds rows that are not proven.
var ErrUnproven = fold.ErrUnproven
