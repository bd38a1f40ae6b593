package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/server"
)

// An archived task reads exactly as it did before it was archived
// (docs/archive.md, Reading): every surface, byte for byte.

// endedTasks makes A-1 and B:2 (artifacts posted, then abandoned), C-3
// (open) and D-4 (abandoned, never archived).
func endedTasks(t *testing.T, f *fixture, s *bernstein.Store) {
	t.Helper()
	f.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "first")
	for _, task := range []string{"A-1", "B:2", "C-3", "D-4"} {
		tok := f.claimed(s, task, "agent")
		f.post(s, task, "summary", "agent", tok, report("# one of "+task))
		if _, err := s.Checkpoint(task, "HEAD", ""); err != nil {
			t.Fatal(err)
		}
		f.post(s, task, "summary", "agent", tok, report("# two of "+task))
		f.post(s, task, "grid", "agent", tok, artifact.Payload{Type: artifact.TypeTable, Columns: []string{"a"}, Rows: [][]string{{task}}})
		if task == "C-3" {
			continue
		}
		if _, err := s.Transition(task, record.KindTaskAbandoned, "", "done with it"); err != nil {
			t.Fatal(err)
		}
	}
}

// surfaces reads every document of the tasks: the HTTP API's (a server of
// its own, as serve runs one), the CLI's, and the Store's audit.
var lastEventID = regexp.MustCompile(`"last_event_id":[0-9]+`)

func surfaces(t *testing.T, f *fixture) map[string]string {
	t.Helper()
	return surfacesOf(t, f, true, "A-1", "B:2", "C-3", "D-4")
}

// surfacesOf is surfaces, with audit verify when audit is set.
func surfacesOf(t *testing.T, f *fixture, audit bool, tasks ...string) map[string]string {
	t.Helper()
	s := f.open()
	srv, err := server.New(s, server.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); srv.Close() }()
	out := map[string]string{}
	get := func(path string) {
		res, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// The event id a document carries is the server's own (its log
		// starts afresh with each server), not the task's.
		out["GET "+path] = fmt.Sprintf("%d %s", res.StatusCode, lastEventID.ReplaceAllString(string(b), `"last_event_id":N`))
	}
	get("/api/v1/tasks")
	get("/api/v1/tasks?limit=1")
	get("/api/v1/artifacts")
	for _, task := range tasks {
		get("/api/v1/tasks?limit=2&cursor=" + task)
		task = strings.ReplaceAll(task, ":", "%3A")
		for _, p := range []string{"", "/artifacts", "/artifacts/summary", "/artifacts/grid", "/progress", "/journal", "/journal?limit=2"} {
			get("/api/v1/tasks/" + task + p)
		}
	}
	cli := func(args ...string) {
		stdout, stderr, code := f.cli("", args...)
		if code != 0 {
			t.Fatalf("bernstein %s: %d %s", strings.Join(args, " "), code, stderr)
		}
		out["cli "+strings.Join(args, " ")] = stdout
	}
	cli("task", "list", "--output-json")
	for _, task := range tasks {
		cli("task", "list", "--output-json", "--limit", "2", "--cursor", task)
		cli("task", "show", task, "--output-json")
		cli("artifact", "list", task, "--output-json")
		cli("artifact", "show", task, "summary", "--output-json")
		cli("task", "progress", task, "--output-json")
	}
	if !audit {
		return out
	}
	rep, err := s.AuditVerify(bernstein.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Verified {
		t.Fatalf("audit verify fails: %+v", rep)
	}
	b, _ := json.Marshal(rep)
	out["audit verify"] = string(b)
	return out
}

func TestArchivedTasksReadAsBefore(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	endedTasks(t, f, s)
	before := surfaces(t, f)
	res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"A-1", "B:2"}})
	if err != nil || len(res.Archived) != 2 {
		t.Fatalf("archive: %v %+v", err, res)
	}
	if got := f.git("for-each-ref", "refs/bernstein/journal/", "refs/bernstein/ledger/"); strings.Contains(got, "A-1") || strings.Contains(got, "B%3A2") {
		t.Fatalf("the archived tasks' refs are still there:\n%s", got)
	}
	check := func(when string) {
		after := surfaces(t, f)
		for k, want := range before {
			if after[k] != want {
				t.Errorf("%s %s: differs after archiving\nbefore: %.300s\nafter:  %.300s", when, k, want, after[k])
			}
		}
	}
	check("archived")
	f.git("pack-refs", "--all")
	check("after pack-refs --all")
	f.git("gc", "--prune=now", "-q")
	check("after gc --prune=now")
}
