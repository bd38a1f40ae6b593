package server_test

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"reflect"
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

// TestTaskListNamesUnreadableArchive: an archive ref that plain git
// pointed at a commit of another tree (a journal row's) is read past by
// every task list, and each says so as 'bernstein task list' does:
// GET /api/v1/tasks, whole and paged, lists it in archives_read_past (ref,
// value, reason, the CLI's message), as the description requires, and the
// task list page shows a notice naming it; the tasks read as before. With
// no such ref, archives_read_past is [] and the page has no notice.
func TestTaskListNamesUnreadableArchive(t *testing.T) {
	r := newTaskRepo(t, "T-1")
	r.post("k", "# one")
	if _, err := r.store.CreateTask(bernstein.TaskSpec{ID: "T-2", Title: "two"}); err != nil {
		t.Fatal(err)
	}
	queries := []string{"", "?limit=1", "?limit=1&cursor=T-1"}
	page := func(c *apiClient) string {
		res, err := http.Get(c.base + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /: %d\n%s", res.StatusCode, b)
		}
		return html.UnescapeString(string(b))
	}
	c := newAPIClient(t, r)
	before := map[string][]bernstein.TaskListEntry{}
	for _, q := range queries {
		var doc map[string]json.RawMessage
		c.get("/tasks"+q, http.StatusOK, &doc)
		if got := string(doc["archives_read_past"]); got != "[]" {
			t.Fatalf("GET /tasks%s with no archive ref read past: archives_read_past %s, want []", q, got)
		}
		var list bernstein.TaskListDoc
		c.get("/tasks"+q, http.StatusOK, &list)
		before[q] = list.Tasks
	}
	if p := page(c); strings.Contains(p, "read-past") || strings.Contains(p, "cannot be read as an archive") {
		t.Fatalf("the task list page warns of nothing read past:\n%s", p)
	}

	ref := "refs/bernstein/archive/mallory"
	forged := r.git("rev-parse", "refs/bernstein/journal/T-1")
	r.git("update-ref", ref, forged)
	c = newAPIClient(t, r)
	want := ref + " (at " + forged + ") cannot be read as an archive: "
	for _, q := range queries {
		var got bernstein.TaskListDoc
		c.get("/tasks"+q, http.StatusOK, &got)
		var read []map[string]string
		var doc map[string]json.RawMessage
		c.get("/tasks"+q, http.StatusOK, &doc)
		if err := json.Unmarshal(doc["archives_read_past"], &read); err != nil {
			t.Fatal(err)
		}
		if len(read) != 1 || read[0]["ref"] != ref || read[0]["at"] != forged || read[0]["reason"] == "" ||
			read[0]["message"] != want+read[0]["reason"] {
			t.Fatalf("GET /tasks%s: archives_read_past %s, want %s at %s", q, doc["archives_read_past"], ref, forged)
		}
		if !reflect.DeepEqual(got.Tasks, before[q]) {
			t.Fatalf("GET /tasks%s: the tasks read %+v, were %+v", q, got.Tasks, before[q])
		}
	}
	p := page(c)
	if !strings.Contains(p, `class="read-past bad" role="alert" data-ref="`+ref+`"`) || !strings.Contains(p, want) ||
		!strings.Contains(p, "the tasks only it holds are not listed (run 'bernstein audit verify')") {
		t.Fatalf("the task list page names no archive ref read past:\n%s", p)
	}
}
