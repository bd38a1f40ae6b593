package refs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// TestSnapshotReadsPastBadLooseTaskRef: a journal or ledger ref whose loose
// file plain git (or a hand) filled with what is not an object id is read
// past by a snapshot: it is named (BadLoose), a read of it is a
// *BadRefError naming it, never the packed value of the same ref beneath it
// (git reads the loose file first and does not resolve the ref either), and
// every other ref reads as git reads it. Any other ref's such file still
// fails the snapshot.
func TestSnapshotReadsPastBadLooseTaskRef(t *testing.T) {
	dir, c := newRepo(t, 2)
	for _, ref := range []string{LedgerPrefix + "A-1", LedgerPrefix + "B-1", JournalPrefix + "B-1", JournalPrefix + "C-1"} {
		git(t, dir, "update-ref", ref, c[0].String())
	}
	git(t, dir, "pack-refs", "--all", "--prune")
	git(t, dir, "update-ref", LedgerPrefix+"A-1", c[1].String())                        // loose over packed
	bad := []string{JournalPrefix + "C-1", JournalPrefix + "D-1", LedgerPrefix + "B-1"} // sorted
	content := map[string]string{JournalPrefix + "D-1": "ref: refs/heads/main\n"}       // symbolic; the others garbage
	for _, ref := range bad {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, filepath.FromSlash(ref))), 0o755); err != nil {
			t.Fatal(err)
		}
		c, ok := content[ref]
		if !ok {
			c = "garbage\n"
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(ref)), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := rev(t, dir, ref); got != "" {
			t.Fatalf("git reads %s as %s, want nothing", ref, got)
		}
	}
	// What git reads: the others, as they are, with a warning for each
	// bad one ("warning: ignoring broken ref ...").
	want := map[string]string{}
	for n, o := range gitRefs(t, dir, Prefix) {
		if strings.HasPrefix(n, "refs/") {
			want[n] = o
		}
	}
	if len(want) != 2 || want[LedgerPrefix+"A-1"] != c[1].String() || want[JournalPrefix+"B-1"] != c[0].String() {
		t.Fatalf("git reads %v", want)
	}

	for _, scope := range [][]string{{Prefix}, {LedgerPrefix, JournalPrefix}, {LedgerPrefix + "A-1", LedgerPrefix + "B-1", JournalPrefix + "B-1", JournalPrefix + "C-1", JournalPrefix + "D-1"}} {
		s, err := Reader{Dir: dir}.Snapshot(scope...)
		if err != nil {
			t.Fatalf("snapshot of %v: %v", scope, err)
		}
		got := map[string]string{}
		for _, p := range []string{LedgerPrefix, JournalPrefix} {
			if !s.covers(p) {
				continue
			}
			vals, _, err := s.List(p)
			if err != nil {
				t.Fatal(err)
			}
			for n, o := range vals {
				got[n] = o.String()
			}
		}
		if s.covers(LedgerPrefix) && !reflect.DeepEqual(got, want) {
			t.Errorf("snapshot of %v lists %v, want %v", scope, got, want)
		}
		var named []string
		for _, b := range s.BadLoose(Prefix) {
			named = append(named, b.Ref)
			if !b.At.IsZero() || !strings.Contains(b.Reason, `"garbage"`) && !strings.Contains(b.Reason, "symbolic ref") {
				t.Errorf("snapshot of %v: %+v", scope, b)
			}
		}
		if !reflect.DeepEqual(named, bad) {
			t.Errorf("snapshot of %v names %v, want %v", scope, named, bad)
		}
		for _, ref := range bad {
			o, err := s.ReadOptional(ref)
			var be *BadRefError
			if !errors.As(err, &be) || be.Ref != ref || !o.IsZero() {
				t.Errorf("snapshot of %v: %s reads %s, %v; want a *BadRefError naming it", scope, ref, o, err)
			}
		}
		for ref, v := range want {
			if o, err := s.ReadOptional(ref); err != nil || o.String() != v {
				t.Errorf("snapshot of %v: %s reads %s, %v; want %s", scope, ref, o, err, v)
			}
		}
		ids, err := TaskIDs(s)
		if s.covers(LedgerPrefix) && (err != nil || !reflect.DeepEqual(ids, []string{"A-1", "B-1"})) {
			t.Errorf("snapshot of %v: task ids %v, %v", scope, ids, err)
		}
	}

	// Any other ref's loose file that is no object id reads as the stand-in
	// of its bytes, which names no object: git reads no value there.
	if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(SpinePrefix)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(SpinePrefix+"w")), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := rev(t, dir, SpinePrefix+"w"); got != "" {
		t.Fatalf("git reads %s as %s, want nothing", SpinePrefix+"w", got)
	}
	s, err := (Reader{Dir: dir}).Snapshot(Prefix)
	if err != nil {
		t.Fatalf("snapshot over a spine ref of garbage: %v", err)
	}
	standIn := gitstore.LooseStandIn([]byte("garbage\n"))
	if o, err := s.ReadOptional(SpinePrefix + "w"); err != nil || o != standIn || !o.IsLooseStandIn() {
		t.Fatalf("the spine ref reads %s, %v; want the stand-in %s", o, err, standIn)
	}
	if vals, _, err := s.List(SpinePrefix); err != nil || vals[SpinePrefix+"w"] != standIn {
		t.Fatalf("the spines list %v, %v", vals, err)
	}
	if o, err := (Reader{Dir: dir}).ReadOptional(SpinePrefix + "w"); err != nil || o != standIn {
		t.Fatalf("the reader reads the spine ref as %s, %v", o, err)
	}
	if len(s.BadLoose(SpinePrefix)) != 0 {
		t.Fatalf("the spine ref is listed as a bad task ref: %v", s.BadLoose(SpinePrefix))
	}
}
