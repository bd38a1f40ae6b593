package ledger

import "errors"

// ErrUnknownTask reports a task with no ledger.
var ErrUnknownTask = errors.New("unknown task")

// ErrTaskExists refuses to create a task that has a ledger already; the
// error reads "task T already exists". The id is fine: the task is there.
var ErrTaskExists = errors.New("already exists")
