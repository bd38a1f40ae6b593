package refs

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
)

// A ref of bernstein's that cannot be read as its kind (an archive ref
// whose commit is no archive, a journal or ledger ref whose chain holds an
// object that is missing, not a commit, or a commit that carries no
// record) is what plain git can write and no bernstein writer does. A read
// reads past it: it names it and reports it as tampered, and reads every
// other ref as before (docs/trust.md, Refs that cannot be read).

// BadRef is a ref a read could not read as its kind and read past: an
// archive ref contributes no entry (Snapshot.BadArchives); a task whose
// journal or ledger ref is one is listed as tampered, never rendered.
type BadRef struct {
	Ref    string
	At     gitstore.Oid // the ref's value
	Reason string
}

func (b BadRef) String() string {
	return fmt.Sprintf("%s (at %s) cannot be read as %s: %s", b.Ref, b.At, KindOf(b.Ref), b.Reason)
}

// MarshalJSON writes b as {"ref", "at", "reason", "message"}: message
// is String's.
func (b BadRef) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Ref     string `json:"ref"`
		At      string `json:"at"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}{b.Ref, b.At.String(), b.Reason, b.String()})
}

// KindOf names what a ref under refs/bernstein/ holds, with its article:
// "a journal", "a ledger", "an archive", ... ("a ref" for any other).
func KindOf(ref string) string {
	switch {
	case strings.HasPrefix(ref, JournalPrefix):
		return "a journal"
	case strings.HasPrefix(ref, LedgerPrefix):
		return "a ledger"
	case strings.HasPrefix(ref, ArchivePrefix):
		return "an archive"
	case strings.HasPrefix(ref, SpinePrefix):
		return "a spine"
	case strings.HasPrefix(ref, AuditPrefix):
		return "an audit chain"
	case strings.HasPrefix(ref, WritersPrefix), ref == Keys:
		return "a key record"
	case strings.HasPrefix(ref, CheckpointsPrefix):
		return "a checkpoint chain"
	case strings.HasPrefix(ref, AnchorsPrefix):
		return "an anchor chain"
	case strings.HasPrefix(ref, ForksPrefix):
		return "a fork"
	}
	return "a ref"
}

// BadRefError is a read's answer for a ref it cannot read as its kind:
// the ref is tampered. Err is what the read met.
type BadRefError struct {
	BadRef
	Err error
}

func (e *BadRefError) Error() string {
	if t, ok := TaskOf(e.Ref); ok {
		return fmt.Sprintf("task %s is tampered: %s (run 'bernstein audit verify')", t, e.BadRef)
	}
	return fmt.Sprintf("tampered: %s (run 'bernstein audit verify')", e.BadRef)
}

func (e *BadRefError) Unwrap() error { return e.Err }

// Unreadable is the *BadRefError of ref at value, which a read could not
// read as its kind because of err.
func Unreadable(ref string, at gitstore.Oid, err error) error {
	return &BadRefError{BadRef: BadRef{Ref: ref, At: at, Reason: err.Error()}, Err: err}
}
