package gitstore

import (
	"errors"
	"strings"
	"testing"
)

// TestLooseStandIn: the value of a ref whose loose file holds no object id
// names no object, is told apart from every id git computes here and from
// the zero id, depends on the file's bytes, and a read of it is a miss that
// says what it stands for.
func TestLooseStandIn(t *testing.T) {
	a, b := LooseStandIn([]byte("garbage\n")), LooseStandIn([]byte("garbage 2\n"))
	if !a.IsLooseStandIn() || !b.IsLooseStandIn() || a == b || a.IsZero() || a != LooseStandIn([]byte("garbage\n")) {
		t.Fatalf("stand-ins %s %s", a, b)
	}
	dir := newBare(t)
	for _, s := range []string{"one", "two", "three"} {
		id := strings.TrimSpace(gitIn(t, dir, []byte(s), "hash-object", "-w", "--stdin"))
		o, err := ParseOid(id)
		if err != nil || o.IsLooseStandIn() {
			t.Fatalf("git's id %s reads as a stand-in (%v)", id, err)
		}
	}
	if ZeroOid.IsLooseStandIn() {
		t.Fatal("the zero id is a stand-in")
	}
	_, _, err := openRepo(t, dir).Read(a)
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "loose file holds no object id") {
		t.Fatalf("read of a stand-in: %v", err)
	}
}
