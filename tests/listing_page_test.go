package tests

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestTaskListPages: pages of a task list, each after the cursor the page
// before named, join into the whole list in git's own order of the ledger
// refs; a page reads only its own tasks (a task beyond it whose journal
// ref names no commit does not fail it, while the whole list fails on it);
// a limit or cursor that is not one is refused naming it, on the library
// and the CLI, before anything is read.
func TestTaskListPages(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	for _, id := range []string{"b-2", "a-1", "c-3", "b-10", "z-9"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: "task " + id}); err != nil {
			t.Fatal(err)
		}
	}
	tok := f.claimed(s, "d-4", "agent")
	f.post(s, "d-4", "k1", "agent", tok, report("one"))
	f.post(s, "d-4", "k2", "agent", tok, report("two"))
	f.post(s, "d-4", "k3", "agent", tok, report("three"))
	var want []string
	for _, ref := range strings.Fields(f.git("for-each-ref", "--format=%(refname)", "refs/bernstein/ledger/")) {
		want = append(want, strings.TrimPrefix(ref, "refs/bernstein/ledger/"))
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := s.TaskListPage(bernstein.Page{Cursor: cursor, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 || len(page) > 2 || pages > 3 {
			t.Fatalf("page after %q: %d tasks", cursor, len(page))
		}
		for _, e := range page {
			got = append(got, e.ID)
			if !e.Integrity.Verified() {
				t.Errorf("%s: %+v", e.ID, e.Integrity)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if !reflect.DeepEqual(got, want) || len(want) != 6 {
		t.Fatalf("pages list %v, git's ledger refs %v", got, want)
	}

	// The journal of the last task names a blob: the whole list reads past
	// it (the task listed tampered, naming the ref), the first page never
	// reads it.
	blob := strings.TrimSpace(f.git("hash-object", "-w", "--stdin"))
	f.git("update-ref", "refs/bernstein/journal/z-9", blob)
	all, err := s.TaskList()
	if err != nil || len(all) != len(want) || all[len(all)-1].ID != "z-9" || all[len(all)-1].Integrity.State != "tampered" ||
		!strings.Contains(all[len(all)-1].Integrity.Reason, "refs/bernstein/journal/z-9 (at "+blob+") cannot be read as a journal") {
		t.Fatalf("the whole list over a journal ref that names a blob: %v %+v", err, all)
	}
	page, next, err := s.TaskListPage(bernstein.Page{Limit: 2})
	if err != nil || len(page) != 2 || next != want[1] {
		t.Fatalf("first page: %d tasks, next %q, %v", len(page), next, err)
	}
	// Its ledger ref file holds no object id at all: the whole list reads
	// past it too (the task listed tampered, naming the ref, at no value);
	// a page reads only the names of the ledger refs, then the files of
	// its own tasks.
	if err := os.WriteFile(filepath.Join(f.dir, ".git", "refs", "bernstein", "ledger", "z-9"), []byte("not an object id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err = s.TaskList()
	if err != nil || len(all) != len(want) || all[len(all)-1].ID != "z-9" || all[len(all)-1].Integrity.State != "tampered" ||
		!strings.Contains(all[len(all)-1].Integrity.Reason, "refs/bernstein/ledger/z-9 (at "+strings.Repeat("0", 40)+") cannot be read as a ledger") {
		t.Fatalf("the whole list over a ledger ref file with no object id: %v %+v", err, all)
	}
	if page, next, err = s.TaskListPage(bernstein.Page{Limit: 2}); err != nil || len(page) != 2 || next != want[1] {
		t.Fatalf("first page beside an unreadable ref: %d tasks, next %q, %v", len(page), next, err)
	}

	for _, bad := range []struct {
		p     bernstein.Page
		field string
	}{{bernstein.Page{Limit: -1}, "limit"}, {bernstein.Page{Limit: 1001}, "limit"}, {bernstein.Page{Cursor: "../x"}, "cursor"}, {bernstein.Page{Cursor: "a/b"}, "cursor"}} {
		_, _, err := s.TaskListPage(bad.p)
		var in *artifact.InputError
		if !errors.As(err, &in) || in.Field != bad.field {
			t.Errorf("%+v: %v, want an input error naming %s", bad.p, err, bad.field)
		}
	}
	for _, args := range [][]string{{"--limit", "1001"}, {"--limit", "-3"}, {"--cursor", ".."}} {
		out, errOut, code := f.cli("", append([]string{"task", "list", "--output-json"}, args...)...)
		field := strings.TrimPrefix(args[0], "--")
		if code != 1 || out != "" || !strings.Contains(errOut, field) {
			t.Errorf("task list %v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	out, errOut, code := f.cli("", "task", "list", "--limit", "2", "--cursor", "b-2")
	if code != 0 || !strings.Contains(out, "c-3") || !strings.Contains(out, "d-4") || strings.Contains(out, "b-2") || !strings.Contains(errOut, "--cursor d-4") {
		t.Errorf("task list --limit 2 --cursor b-2: exit %d\n%s%s", code, out, errOut)
	}

	// The artifact keys, a page of one after the first.
	out, _, code = f.cli("", "artifact", "list", "--limit", "1", "--cursor", "bernstein://d-4/k1", "--output-json")
	var doc bernstein.ProductionsDoc
	decodeJSON(t, out, &doc)
	if code != 0 || len(doc.Artifacts) != 1 || doc.Artifacts[0].URI != "bernstein://d-4/k2" || doc.NextCursor != "bernstein://d-4/k2" {
		t.Errorf("artifact list page: exit %d %+v", code, doc)
	}
	if _, errOut, code := f.cli("", "artifact", "list", "d-4", "--limit", "1"); code != 1 || !strings.Contains(errOut, "no task") {
		t.Errorf("artifact list <task> --limit: exit %d %s", code, errOut)
	}
}

// TestTaskListPagesPackedAndLoose: a task whose ledger ref is both in
// packed-refs and loose (moved after git pack-refs) is on one page once;
// pages of every size join into git's own list of the ledger refs.
func TestTaskListPagesPackedAndLoose(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	for _, id := range []string{"a-1", "b-2", "c-3", "d-4", "e-5"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: "task " + id}); err != nil {
			t.Fatal(err)
		}
	}
	f.git("pack-refs", "--all")
	for _, id := range []string{"a-1", "c-3", "e-5"} {
		if _, err := s.Claim(id, "agent"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.dir, ".git", "refs", "bernstein", "ledger", "c-3")); err != nil {
		t.Fatalf("the claim left no loose ledger ref: %v", err)
	}
	if packed, err := os.ReadFile(filepath.Join(f.dir, ".git", "packed-refs")); err != nil || !strings.Contains(string(packed), "refs/bernstein/ledger/c-3") {
		t.Fatalf("c-3's ledger is not in packed-refs: %v", err)
	}
	want := strings.Fields(strings.ReplaceAll(f.git("for-each-ref", "--format=%(refname)", "refs/bernstein/ledger/"), "refs/bernstein/ledger/", ""))
	for limit := 1; limit <= 6; limit++ {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			page, next, err := s.TaskListPage(bernstein.Page{Cursor: cursor, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit || pages > len(want) {
				t.Fatalf("limit %d: page after %q: %d tasks", limit, cursor, len(page))
			}
			for _, e := range page {
				got = append(got, e.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if !reflect.DeepEqual(got, want) || len(want) != 5 {
			t.Fatalf("limit %d: pages list %v, git's ledger refs %v", limit, got, want)
		}
	}
}
