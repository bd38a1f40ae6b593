package hooks

import "github.com/bernstein/bernstein/verify"

// The remote guard's checks live in verify (verify/guard.go), which also
// checks what was added since an audit checkpoint (`audit verify
// --since`); the hooks run them on what a push brings or sends.
type (
	Update   = verify.Update
	Problem  = verify.Problem
	FirstUse = verify.FirstUse
	Stats    = verify.Stats
	Result   = verify.Result
	Guard    = verify.Guard
)
