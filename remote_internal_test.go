package bernstein

import (
	"github.com/bernstein/bernstein/remote"
)

// SetPushArgBudget is remote.SetPushArgBudget, for the root's tests.
func SetPushArgBudget(n int) (restore func()) { return remote.SetPushArgBudget(n) }

// PushTempRoot is where a large push keeps its temporary refs.
const PushTempRoot = remote.PushTempRoot
