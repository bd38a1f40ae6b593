package tests

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/refs"
)

// TestPackedRefsTwoValues: packed-refs listing one ref twice, with two
// values (a hand edit, a broken tool), is a ref store git and bernstein
// could read differently. bernstein reads neither value: every surface
// says the ref store is inconsistent, naming the file and the ref, and none
// calls the chain tampered. With the wrong line deleted, everything
// verifies again.
func TestPackedRefsTwoValues(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	tok := f.claimed(s, "T-1", "agent")
	f.post(s, "T-1", "summary", "agent", tok, report("one"))
	f.post(s, "T-1", "summary", "agent", tok, report("two"))
	s.Close()
	f.git("pack-refs", "--all")
	journal := refs.Journal("T-1")
	head := strings.TrimSpace(f.git("rev-parse", journal))
	older := strings.TrimSpace(f.git("rev-parse", journal+"~1"))
	packed := filepath.Join(f.dir, ".git", "packed-refs")
	b, err := os.ReadFile(packed)
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	line := head + " " + journal + "\n"
	if !strings.Contains(good, line) {
		t.Fatalf("packed-refs lacks %q:\n%s", line, good)
	}
	bad := strings.Replace(good, line, older+" "+journal+"\n"+line, 1)
	if err := os.WriteFile(packed, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	gitSees := strings.TrimSpace(f.git("rev-parse", journal))
	if gitSees != head && gitSees != older {
		t.Fatalf("git reads %s", gitSees)
	}

	_, err = f.open().Task("T-1")
	if !errors.Is(err, refs.ErrInconsistent) || !strings.Contains(err.Error(), journal) || !strings.Contains(err.Error(), packed) {
		t.Fatalf("the library reads a ref store with two values for %s: %v", journal, err)
	}
	for _, args := range [][]string{{"task", "show", "T-1"}, {"task", "list"}, {"artifact", "show", "T-1", "summary"}, {"audit", "verify"}} {
		out, errOut, code := f.cli("", args...)
		want := 1
		if args[0] == "audit" {
			want = 2 // an operational error, not "something tampered"
		}
		if code != want || !strings.Contains(errOut, "the ref store is inconsistent") || !strings.Contains(errOut, journal) ||
			strings.Contains(strings.ToLower(out+errOut), "tampered") {
			t.Fatalf("%v with two values for %s in packed-refs: exit %d\n%s%s", args, journal, code, out, errOut)
		}
	}
	// Repaired: the line of the value the ref should not hold deleted.
	if err := os.WriteFile(packed, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify after the repair: exit %d\n%s%s", code, out, errOut)
	}
}
