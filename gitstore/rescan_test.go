package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
)

// The tests here force interleavings of a reader's rescan with writers and
// compactions through the reader's testHookListed, which runs between the
// listing of the pack directory and the opening of what it listed.

// listedOnce sets testHookListed to run do once, on rd's first rescan, and
// returns a pointer to the number of rescans rd made.
func listedOnce(t *testing.T, rd *Repo, do func()) *int {
	t.Helper()
	rescans := 0
	rd.testHookListed = func(r *Repo) {
		if r != rd {
			return
		}
		rescans++
		if rescans == 1 {
			do()
		}
	}
	t.Cleanup(func() { rd.testHookListed = nil })
	return &rescans
}

// TestReadPackVanishesAfterListing is the race behind a reader that reported
// an object missing during compactions: the reader lists the pack
// directory, a compaction then writes the merged pack (not in the listing)
// and deletes its inputs, among them the pack holding the object, which the
// reader had listed but not yet opened. The lookup must scan again.
func TestReadPackVanishesAfterListing(t *testing.T) {
	for _, lookup := range []string{"Read", "Has"} {
		t.Run(lookup, func(t *testing.T) {
			dir := newBare(t)
			w := openRepo(t, dir)
			old := blob("mapped by the reader\n")
			if _, err := w.WritePack([]Object{old}); err != nil {
				t.Fatal(err)
			}
			rd := openRepo(t, dir)
			o := blob("written after the reader opened\n")
			if _, err := w.WritePack([]Object{o}); err != nil {
				t.Fatal(err)
			}
			compacted := false
			rescans := listedOnce(t, rd, func() {
				n, err := w.Compact(1)
				if err != nil || n != 2 {
					t.Errorf("Compact in the hook = %d, %v", n, err)
				}
				compacted = true
			})
			switch lookup {
			case "Read":
				if _, data, err := rd.ReadVerified(o.ID); err != nil || !bytes.Equal(data, o.Data) {
					t.Fatalf("Read after a compaction between listing and opening: %v", err)
				}
			case "Has":
				if !rd.Has(o.ID) {
					t.Fatal("Has false after a compaction between listing and opening")
				}
			}
			if !compacted || *rescans < 2 {
				t.Fatalf("compacted %v, %d rescans: the interleaving was not forced", compacted, *rescans)
			}
			if rd.PackCount() != 1 {
				t.Fatalf("reader maps %d packs, want the merged one", rd.PackCount())
			}
			// The object read before is still there too, and a truly missing
			// one is reported after one settled rescan.
			if _, _, err := rd.Read(old.ID); err != nil {
				t.Fatal(err)
			}
			before := *rescans
			if _, _, err := rd.Read(HashObject(TypeBlob, []byte("never"))); !errors.Is(err, ErrMissing) {
				t.Fatalf("missing object: %v", err)
			}
			if *rescans != before+1 {
				t.Fatalf("a miss on a settled directory took %d rescans, want 1", *rescans-before)
			}
		})
	}
}

// TestReadPackMappedMeanwhile: between a lookup's miss and its rescan,
// something else on the same Repo maps the pack holding the object (a
// concurrent lookup's rescan, or a write of the same objects, which yields
// the same pack). The rescan then finds nothing new to map, but the lookup
// missed on an older pack set and must look again.
func TestReadPackMappedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(rd *Repo, o Object) error
	}{
		{"rescan", func(rd *Repo, o Object) error {
			_, err := rd.rescan()
			return err
		}},
		{"write", func(rd *Repo, o Object) error {
			_, err := rd.WritePack([]Object{o})
			return err
		}},
	} {
		for _, lookup := range []string{"Read", "Has"} {
			t.Run(tc.name+"/"+lookup, func(t *testing.T) {
				dir := newBare(t)
				w := openRepo(t, dir)
				rd := openRepo(t, dir)
				o := blob("mapped by someone else meanwhile\n")
				if _, err := w.WritePack([]Object{o}); err != nil {
					t.Fatal(err)
				}
				nested := false
				listedOnce(t, rd, func() {
					// Run the other party without re-entering this hook.
					hook := rd.testHookListed
					rd.testHookListed = nil
					defer func() { rd.testHookListed = hook }()
					if err := tc.do(rd, o); err != nil {
						t.Error(err)
					}
					nested = true
				})
				switch lookup {
				case "Read":
					if _, data, err := rd.Read(o.ID); err != nil || !bytes.Equal(data, o.Data) {
						t.Fatalf("Read: %v", err)
					}
				case "Has":
					if !rd.Has(o.ID) {
						t.Fatal("Has false")
					}
				}
				if !nested {
					t.Fatal("the interleaving was not forced")
				}
			})
		}
	}
}

// TestReadRescansBounded: while every rescan finds a listed pack gone
// (replaced by a newer one written after the listing), a lookup for an
// object that is nowhere gives up after maxRescans rescans.
func TestReadRescansBounded(t *testing.T) {
	for _, lookup := range []string{"Read", "Has"} {
		t.Run(lookup, func(t *testing.T) {
			dir := newBare(t)
			w := openRepo(t, dir)
			rd := openRepo(t, dir)
			replace := func(prev string, k int) string {
				base, err := w.WritePack([]Object{blob(fmt.Sprintf("pack %d\n", k))})
				if err != nil {
					t.Fatal(err)
				}
				if prev != "" {
					os.Remove(prev + ".idx")
					os.Remove(prev + ".pack")
				}
				return base
			}
			last := replace("", 0)
			rescans := 0
			rd.testHookListed = func(r *Repo) {
				if r != rd {
					return
				}
				rescans++
				if rescans > 3*maxRescans {
					return // let a runaway loop settle, and fail below
				}
				last = replace(last, rescans)
			}
			t.Cleanup(func() { rd.testHookListed = nil })
			id := HashObject(TypeBlob, []byte("nowhere"))
			switch lookup {
			case "Read":
				if _, _, err := rd.Read(id); !errors.Is(err, ErrMissing) {
					t.Fatalf("Read: %v", err)
				}
			case "Has":
				if rd.Has(id) {
					t.Fatal("Has true")
				}
			}
			if rescans != maxRescans {
				t.Fatalf("%d rescans, want %d", rescans, maxRescans)
			}
		})
	}
}
