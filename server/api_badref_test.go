package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
)

// TestTaskListPastUnreadableTaskRef: GET /api/v1/tasks (whole and paged)
// over a task whose ledger ref plain git pointed at a tree lists it as
// tampered, naming the ref, with nothing of it rendered (progress null),
// as the description allows, and the other task as before; the task's own
// reads (its detail, progress, page) are 409 naming the ref.
func TestTaskListPastUnreadableTaskRef(t *testing.T) {
	r := newTaskRepo(t, "T-1")
	r.post("k", "# one")
	if _, err := r.store.CreateTask(bernstein.TaskSpec{ID: "T-2", Title: "forged"}); err != nil {
		t.Fatal(err)
	}
	before := newAPIClient(t, r)
	var want bernstein.TaskListDoc
	before.get("/tasks", http.StatusOK, &want)
	ref := "refs/bernstein/ledger/T-2"
	tree := r.git("rev-parse", ref+"^{tree}")
	r.git("update-ref", ref, tree)

	c := newAPIClient(t, r)
	for _, q := range []string{"", "?limit=2", "?limit=1&cursor=T-1"} {
		var got struct {
			Tasks []map[string]any `json:"tasks"`
		}
		c.get("/tasks"+q, http.StatusOK, &got)
		var t2 map[string]any
		for _, e := range got.Tasks {
			if e["id"] == "T-2" {
				t2 = e
			}
		}
		if t2 == nil {
			t.Fatalf("GET /tasks%s: T-2 is not listed: %v", q, got.Tasks)
		}
		in := t2["integrity"].(map[string]any)
		if in["state"] != "tampered" || !strings.Contains(in["reason"].(string), ref+" (at "+tree+") cannot be read as a ledger") || t2["progress"] != nil {
			t.Fatalf("GET /tasks%s: T-2 is %v", q, t2)
		}
	}
	// The task's own reads: 409, naming the ref, nothing rendered.
	for _, path := range []string{"/tasks/T-2", "/tasks/T-2/progress"} {
		e := c.wantError(path, http.StatusConflict, "task_id")
		if !strings.Contains(e.Error.Message, "task T-2 is tampered: "+ref+" (at "+tree+")") {
			t.Fatalf("GET %s: %q", path, e.Error.Message)
		}
	}
	res, err := http.Get(c.base + "/tasks/T-2")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusConflict || !strings.Contains(string(body), ref) {
		t.Fatalf("the task page: %d\n%s", res.StatusCode, body)
	}
	var got bernstein.TaskListDoc
	c.get("/tasks?limit=1", http.StatusOK, &got)
	if len(got.Tasks) != 1 || got.Tasks[0].ID != "T-1" || got.Tasks[0].Integrity != want.Tasks[0].Integrity || got.Tasks[0].LedgerHead != want.Tasks[0].LedgerHead {
		t.Fatalf("T-1 reads %+v, was %+v", got.Tasks, want.Tasks[0])
	}
	// A journal ref at a tree: the journal's read is 409 as well.
	jref := "refs/bernstein/journal/T-1"
	jtree := r.git("rev-parse", jref+"^{tree}")
	r.git("update-ref", jref, jtree)
	if e := c.wantError("/tasks/T-1/journal", http.StatusConflict, "task_id"); !strings.Contains(e.Error.Message, "task T-1 is tampered: "+jref+" (at "+jtree+")") {
		t.Fatalf("GET /tasks/T-1/journal: %q", e.Error.Message)
	}
}
