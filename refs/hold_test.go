package refs

import (
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// TestHoldSaysNothingOfTheCommit: a hold's ref is at its new value before
// the transaction commits as after, so it never decides whether an intent
// took effect: an intent whose moving ref is still at its old value did
// not, whatever its hold reads.
func TestHoldSaysNothingOfTheCommit(t *testing.T) {
	a, b := gitstore.Oid{1}, gitstore.Oid{2}
	in := Intent{Updates: []Update{{Ref: Archive("w"), Old: a, New: a}, {Ref: Ledger("T-1"), Old: gitstore.ZeroOid, New: b}}}
	vals := map[string]gitstore.Oid{Archive("w"): a}
	cur := func(ref string) (gitstore.Oid, error) { return vals[ref], nil }
	if ok, err := in.committed(cur); err != nil || ok {
		t.Fatalf("before the ledger moved: committed %v %v", ok, err)
	}
	vals[Ledger("T-1")] = b
	if ok, err := in.committed(cur); err != nil || !ok {
		t.Fatalf("after: committed %v %v", ok, err)
	}
	parsed, ok, err := ParseIntent([]byte(in.Encode()))
	if err != nil || !ok || len(parsed.Updates) != 2 {
		t.Fatalf("the intent with a hold does not read back: %v %v %+v", ok, err, parsed)
	}
	for _, bad := range []Update{{Ref: Ledger("T-1"), Old: gitstore.ZeroOid, New: gitstore.ZeroOid}} {
		if _, _, err := ParseIntent([]byte(Intent{Updates: []Update{bad}}.Encode())); err == nil {
			t.Errorf("%+v read as an update", bad)
		}
	}
}
