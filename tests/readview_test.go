package tests

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestReadViewAnswersAsTheStore: a read view answers what the Store's own
// reads answer for the same refs (the HTTP API serves the one, the CLI
// prints the other), and its keys move exactly when the refs do.
func TestReadViewAnswersAsTheStore(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	f.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "first")
	tok := f.claimed(s, "T:1.a", "agent-1")
	f.post(s, "T:1.a", "summary", "agent-1", tok, report("# one"))
	if _, err := s.Checkpoint("T:1.a", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	f.post(s, "T:1.a", "summary", "agent-1", tok, report("# two"))
	f.post(s, "T:1.a", "grid", "agent-1", tok, artifact.Payload{Type: artifact.TypeTable, Columns: []string{"a"}, Rows: [][]string{{"1"}}})
	f.claimed(s, "T-2", "agent-2")

	for _, scope := range []string{"T:1.a", ""} {
		v, err := s.ReadView(scope)
		if err != nil {
			t.Fatal(err)
		}
		info, err := v.Task("T:1.a")
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.Task("T:1.a")
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "task", info, want)
		rep, err := v.Artifacts("T:1.a")
		if err != nil {
			t.Fatal(err)
		}
		wantRep, err := s.Artifacts("T:1.a")
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "artifacts", bernstein.NewArtifactListDoc(rep), bernstein.NewArtifactListDoc(wantRep))
		if !reflect.DeepEqual(rep.Versions, wantRep.Versions) {
			t.Errorf("versions differ:\n%+v\n%+v", rep.Versions, wantRep.Versions)
		}
		rows, err := v.Journal("T:1.a")
		if err != nil {
			t.Fatal(err)
		}
		feed, err := s.TaskFeed("T:1.a", bernstein.Heads{})
		if err != nil {
			t.Fatal(err)
		}
		var journal []bernstein.FeedRow
		for _, r := range feed.Rows {
			if r.Chain == "journal" {
				journal = append(journal, r)
			}
		}
		sameJSON(t, "journal", rows, journal)
		if len(rows) != 4 || rows[2].At == nil || rows[2].At.JournalIndex != 1 || rows[0].At != nil {
			t.Errorf("run positions: %+v", rows)
		}
		ps, err := v.Productions()
		if err != nil {
			t.Fatal(err)
		}
		wantPs, err := s.Productions()
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "productions", ps, wantPs)
	}

	all, err := s.ReadView("")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := all.TaskIDs()
	if err != nil || !reflect.DeepEqual(ids, []string{"T-2", "T:1.a"}) {
		t.Errorf("task ids: %v %v", ids, err)
	}
	one, _ := s.ReadView("T:1.a")
	k1, _ := one.TaskKey("T:1.a")
	kAll, _ := all.TaskKey("T:1.a")
	if k1 == "" || k1 != kAll {
		t.Errorf("the same refs give different keys: %q %q", k1, kAll)
	}
	if _, err := one.TaskKey("T-2"); err == nil {
		t.Error("a view of one task answered for another")
	}
	again, _ := s.ReadView("T:1.a")
	if k, _ := again.TaskKey("T:1.a"); k != k1 {
		t.Errorf("nothing moved, but the key did: %q %q", k, k1)
	}
	f.post(s, "T:1.a", "summary", "agent-1", tok, report("# three"))
	moved, _ := s.ReadView("T:1.a")
	if k, _ := moved.TaskKey("T:1.a"); k == k1 {
		t.Error("a post did not move the key")
	}
	spineBefore := one.SpineKey()
	if moved.SpineKey() == spineBefore {
		t.Error("a post did not move the spine key")
	}

	// Bad ids never reach a ref; unknown tasks are ErrUnknownTask.
	for _, bad := range []string{"..", "a/../b", "T..1", "", "a/b"} {
		if _, err := s.ReadView(bad); err == nil && bad != "" {
			t.Errorf("ReadView(%q) was accepted", bad)
		}
		if _, err := all.Task(bad); err == nil {
			t.Errorf("Task(%q) was accepted", bad)
		}
	}
	nv, _ := s.ReadView("nope")
	if _, err := nv.Task("nope"); !errors.Is(err, bernstein.ErrUnknownTask) {
		t.Errorf("unknown task: %v", err)
	}
	if _, err := nv.Artifacts("nope"); !errors.Is(err, bernstein.ErrUnknownTask) {
		t.Errorf("unknown task: %v", err)
	}
	if _, err := nv.Journal("nope"); !errors.Is(err, bernstein.ErrUnknownTask) {
		t.Errorf("unknown task: %v", err)
	}
}

func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s differs:\n got %s\nwant %s", what, g, w)
	}
}
