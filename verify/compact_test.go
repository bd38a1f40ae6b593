package verify

import (
	"testing"

	"github.com/bernstein/bernstein/record"
)

// TestBindingDigestCoversEveryField: the index trusts equal digests to mean
// equal bindings, so a change to any one field the spine entry binds (and
// BindingDiff compares) must change the digest, including a field moved to
// its neighbour.
func TestBindingDigestCoversEveryField(t *testing.T) {
	h1, h2 := record.Sum([]byte("one")), record.Sum([]byte("two"))
	base := record.SpineArtifactEntry{TaskID: "T-1", Key: "notes", Version: 2, ContentHash: h1, PrevVersionHash: h2, JournalIndex: 5, Actor: "agent"}
	changes := map[string]func(*record.SpineArtifactEntry){
		"task_id":           func(e *record.SpineArtifactEntry) { e.TaskID = "T-2" },
		"key":               func(e *record.SpineArtifactEntry) { e.Key = "notez" },
		"version":           func(e *record.SpineArtifactEntry) { e.Version = 3 },
		"content_hash":      func(e *record.SpineArtifactEntry) { e.ContentHash = h2 },
		"prev_version_hash": func(e *record.SpineArtifactEntry) { e.PrevVersionHash = "" },
		"journal_index":     func(e *record.SpineArtifactEntry) { e.JournalIndex = 4 },
		"actor":             func(e *record.SpineArtifactEntry) { e.Actor = "mallory" },
		"task/key shifted":  func(e *record.SpineArtifactEntry) { e.Key, e.TaskID = "", "T-1notes" },
		"version/index":     func(e *record.SpineArtifactEntry) { e.Version, e.JournalIndex = 5, 2 },
	}
	want := entryDigest(&base)
	for name, change := range changes {
		e := base
		change(&e)
		if entryDigest(&e) == want {
			t.Errorf("%s: the digest does not change", name)
		}
		if len(BindingDiff(e.TaskID, &Version{Key: e.Key, Version: e.Version, ContentHash: e.ContentHash, PrevVersionHash: e.PrevVersionHash, JournalIndex: e.JournalIndex}, e.Actor, "", &base, "")) == 0 {
			t.Errorf("%s: BindingDiff sees no difference", name)
		}
	}
	same := base
	if entryDigest(&same) != want {
		t.Error("equal bindings, different digests")
	}
}
