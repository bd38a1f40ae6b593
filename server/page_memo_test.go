package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// TestPagesShareTheMemo: the pages and fragments read through the API's
// memo (the task list, which verifies every task, too). Each of them, alone on a fresh server, computes what it shows
// there (the task's fold, its verification) once; many open pages fetching
// their fragments after one post cost one verification of the task, not
// one each; a post computes it again.
func TestPagesShareTheMemo(t *testing.T) {
	r := newTaskRepo(t, "PM-1")
	r.post("summary", "first")
	get := func(base, path string) {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
	}
	// What each shows: the task (its fold) and its artifacts (verified).
	shows := []struct {
		path         string
		task, report int
	}{
		{"/", 1, 1},
		{"/?phase=claimed&q=pm", 1, 1},
		{"/tasks/PM-1", 1, 1},
		{"/tasks/PM-1/fragments/strip", 1, 0},
		{"/tasks/PM-1/fragments/integrity", 1, 1},
		{"/tasks/PM-1/fragments/timeline", 1, 1},
		{"/tasks/PM-1/diff/summary?from=1&to=1", 0, 1},
		{"/api/v1/tasks", 1, 1},
		{"/tasks/PM-1/fragments/artifacts/summary", 0, 1},
		{"/tasks/PM-1/fragments/versions/summary/1", 0, 1},
		{"/tasks/PM-1/versions/summary/1", 0, 1},
		{"/api/v1/tasks/PM-1", 1, 1},
	}
	for _, sh := range shows {
		srv, hs := pageServer(t, r.dir, r.home)
		get(hs.URL, sh.path)
		get(hs.URL, sh.path)
		if task, report := srv.APIComputations("task", "PM-1"), srv.APIComputations("report", "PM-1"); task != sh.task || report != sh.report {
			t.Errorf("%s twice: %d folds and %d verifications through the memo, want %d and %d", sh.path, task, report, sh.task, sh.report)
		}
	}
	srv, hs := pageServer(t, r.dir, r.home)
	for round := 1; round <= 2; round++ {
		var wg sync.WaitGroup
		for range 10 {
			for _, sh := range shows {
				wg.Add(1)
				go func() { defer wg.Done(); get(hs.URL, sh.path) }()
			}
		}
		wg.Wait()
		if n := srv.APIComputations("report", "PM-1"); n != round {
			t.Fatalf("round %d: 10 viewers of every page and fragment verified the task %d times, want %d", round, n, round)
		}
		if n := srv.APIComputations("task", "PM-1"); n != round {
			t.Fatalf("round %d: the task was folded %d times, want %d", round, n, round)
		}
		r.post("summary", "another")
	}
}

// TestListIsOneAnswer: a list (GET /api/v1/tasks, and the task list page
// with any filter) is kept as one answer: asked for again, it is not
// computed again, nor is any of its tasks. A ref of one of its tasks moved
// with plain git (no spine moves) makes it computed again, and the list
// shows the task as the ref now has it.
func TestListIsOneAnswer(t *testing.T) {
	r := newTaskRepo(t, "LM-1")
	r.post("summary", "first")
	r.post("summary", "second")
	srv, hs := pageServer(t, r.dir, r.home)
	rows := func() int64 {
		t.Helper()
		res, err := http.Get(hs.URL + "/api/v1/tasks")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var doc struct {
			Tasks []struct {
				ID          string `json:"id"`
				JournalRows int64  `json:"journal_rows"`
			} `json:"tasks"`
		}
		if err := json.NewDecoder(res.Body).Decode(&doc); err != nil || res.StatusCode != http.StatusOK || len(doc.Tasks) != 1 || doc.Tasks[0].ID != "LM-1" {
			t.Fatalf("GET /api/v1/tasks: %d %v %+v", res.StatusCode, err, doc)
		}
		return doc.Tasks[0].JournalRows
	}
	lists := func() int { return srv.APIComputations("list", "\x000") }
	journal := "refs/bernstein/journal/LM-1"
	count := func() int64 {
		n, err := strconv.ParseInt(r.git("rev-list", "--count", journal), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := count()
	for range 3 {
		if got := rows(); got != want {
			t.Fatalf("journal rows %d, git counts %d", got, want)
		}
	}
	for _, path := range []string{"/", "/?phase=claimed", "/?q=lm"} {
		res, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
	}
	if n, v := lists(), srv.APIComputations("report", "LM-1"); n != 1 || v != 1 {
		t.Fatalf("three lists and three task list pages: the list computed %d times, the task verified %d times; want 1 and 1", n, v)
	}
	r.git("update-ref", journal, journal+"^")
	if got, want := rows(), count(); got != want || lists() != 2 {
		t.Fatalf("after the journal ref moved back: journal rows %d, git counts %d; the list computed %d times, want 2", got, want, lists())
	}
}
