package bernstein

import (
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/ledger"
)

// The errors every command may meet, which callers branch on with
// errors.Is and errors.As. Those of one noun sit beside its methods: posts
// (RefusedError, BatchInputError), work (EndedError, ErrNoProducers), keys
// (ErrKeyChanged, ErrNotPinned), audit checkpoints (ErrNoCheckpoint,
// ErrBadCheckpoint), remotes (ErrUnknownRemote, ErrDiverged, …) and shown
// artifacts (ErrUnknownArtifact).

// ErrNotRepository reports a directory that is not in a git repository.
var ErrNotRepository = git.ErrNotRepository

// ErrRepositoryFormat is wrapped by the error Open and Init return for a
// repository whose format bernstein cannot write safely: one that git does
// not address by SHA-1 alone.
var ErrRepositoryFormat = git.ErrRepositoryFormat

// RepositoryFormatError names the repository and what about its format was
// refused.
type RepositoryFormatError = git.RepositoryFormatError

// ErrUnknownTask reports a task with no ledger.
var ErrUnknownTask = ledger.ErrUnknownTask

// ErrTaskExists refuses to create a task that has a ledger already; the
// error reads "task T already exists". The id is fine: the task is there.
var ErrTaskExists = ledger.ErrTaskExists

// ErrUnproven reports a chain the write path will not extend because it
// holds rows that are not proven.
var ErrUnproven = fold.ErrUnproven
