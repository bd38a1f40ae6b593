package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/server"
)

// A task ref (its journal or ledger) that plain git points at something
// that cannot be read as its chain (a blob, a tree, a tag, a missing
// object, a commit carrying no record) blocks no reader: every listing
// lists every other task as before and lists that one as tampered, naming
// the ref; task show of it says tampered and shows nothing; audit verify
// reports it as a failure naming the ref; the other tasks are written as
// before.

// taskRefForgery points ref, with plain git, at something that is not a
// chain, and returns the ref's new value as git holds it.
type taskRefForgery struct {
	name  string
	forge func(f *fixture, ref string) string
}

var taskRefForgeries = []taskRefForgery{
	{"blob", func(f *fixture, ref string) string {
		o := f.blob("not a chain")
		f.git("update-ref", ref, o)
		return o
	}},
	{"tree", func(f *fixture, ref string) string {
		o := f.rev(ref + "^{tree}")
		f.git("update-ref", ref, o)
		return o
	}},
	{"tag", func(f *fixture, ref string) string {
		// An annotated tag of the honest head: a tag object, not a commit.
		f.git("tag", "-a", "-m", "a tag", "forged-tag", ref)
		o := f.rev("refs/tags/forged-tag")
		f.git("tag", "-d", "forged-tag")
		f.git("update-ref", ref, o)
		return o
	}},
	{"missing", func(f *fixture, ref string) string {
		// git update-ref refuses an absent object: the loose ref file is
		// written directly, as git would write it.
		o := strings.Repeat("7", 40)
		if err := os.WriteFile(filepath.Join(f.dir, ".git", filepath.FromSlash(ref)), []byte(o+"\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
		if got := strings.TrimSpace(f.git("rev-parse", "--verify", "--quiet", ref)); got != o {
			f.t.Fatalf("the forged ref reads %q in git, want %s", got, o)
		}
		return o
	}},
	{"a loose ref that is not an object id", func(f *fixture, ref string) string {
		// The loose file written by hand over the honest one; git reads
		// past it (rev-parse does not resolve it), so it has no value: the
		// zero id names it.
		if err := os.WriteFile(filepath.Join(f.dir, ".git", filepath.FromSlash(ref)), []byte("garbage\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
		if got, err := exec.Command("git", "-C", f.dir, "rev-parse", "--verify", "--quiet", ref).Output(); err == nil {
			f.t.Fatalf("the forged ref reads %q in git, want no value", got)
		}
		return strings.Repeat("0", 40)
	}},
	{"commit without a record", func(f *fixture, ref string) string {
		o := strings.TrimSpace(f.git("-c", "user.name=mallory", "-c", "user.email=mallory@bernstein", "commit-tree", "-p", ref, "-m", "not a row", f.rev(ref+"^{tree}")))
		f.git("update-ref", ref, o)
		return o
	}},
}

// listingOf is one listing as it reads: the entries by task id, each as
// its JSON object, in order.
type listingOf struct {
	ids     []string
	entries map[string]map[string]any
	next    string
}

func parseTaskList(t *testing.T, what, doc string) listingOf {
	t.Helper()
	var d struct {
		Tasks      []map[string]any `json:"tasks"`
		NextCursor string           `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, doc)
	}
	l := listingOf{entries: map[string]map[string]any{}, next: d.NextCursor}
	for _, e := range d.Tasks {
		id, _ := e["id"].(string)
		l.ids = append(l.ids, id)
		l.entries[id] = e
	}
	return l
}

// taskListings are the listings of every task: the CLI's (whole and in
// pages) and the HTTP API's (whole and in pages) as JSON, and the rows of
// the task list page by task.
func taskListings(t *testing.T, f *fixture) (map[string]listingOf, map[string]string) {
	t.Helper()
	lists := map[string]listingOf{}
	for _, args := range [][]string{
		{"task", "list", "--output-json"},
		{"task", "list", "--output-json", "--limit", "2"},
		{"task", "list", "--output-json", "--limit", "2", "--cursor", "A-1"},
		{"task", "list", "--output-json", "--limit", "1", "--cursor", "B-1"},
	} {
		out, errOut, code := f.cli("", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errOut)
		}
		lists["cli "+strings.Join(args[2:], " ")] = parseTaskList(t, strings.Join(args, " "), out)
	}
	s := f.open()
	defer s.Close()
	srv, err := server.New(s, server.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); srv.Close() }()
	get := func(path string) string {
		res, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	for _, q := range []string{"", "?limit=2", "?limit=2&cursor=A-1", "?limit=1&cursor=B-1"} {
		lists["GET /api/v1/tasks"+q] = parseTaskList(t, "GET /api/v1/tasks"+q, get("/api/v1/tasks"+q))
	}
	rows := map[string]string{}
	for _, m := range taskRow.FindAllStringSubmatch(get("/"), -1) {
		rows[m[1]] = m[0]
	}
	return lists, rows
}

// taskRow is one task's row of the task list page.
var taskRow = regexp.MustCompile(`(?s)<tr class="task[^"]*" data-task="([^"]+)".*?</tr>`)

// unreadableTaskFixture makes three open tasks, each claimed with one
// post, and returns the claim token of A-1.
func unreadableTaskFixture(t *testing.T) (*fixture, string) {
	f := newFixture(t)
	s := f.open()
	var tokA string
	for _, id := range []string{"A-1", "B-1", "C-1"} {
		tok := f.claimed(s, id, "agent")
		f.post(s, id, "summary", "agent", tok, report("# "+id))
		if id == "A-1" {
			tokA = tok
		}
	}
	s.Close()
	return f, tokA
}

func TestUnreadableTaskRefBlocksNoReader(t *testing.T) {
	for _, kind := range []string{"ledger", "journal"} {
		for _, fg := range taskRefForgeries {
			t.Run(kind+"/"+strings.ReplaceAll(fg.name, " ", "_"), func(t *testing.T) {
				f, tokA := unreadableTaskFixture(t)
				before, rowsBefore := taskListings(t, f)
				productsBefore, _, code := f.cli("", "artifact", "list", "--output-json")
				if code != 0 {
					t.Fatalf("artifact list: exit %d", code)
				}
				showBefore, _, _ := f.cli("", "task", "show", "A-1", "--output-json")
				if out, errOut, code := f.cli("", "audit", "verify", "--checkpoint", "cp"); code != 0 {
					t.Fatalf("audit verify before the forgery: exit %d\n%s%s", code, out, errOut)
				}

				ref := "refs/bernstein/" + kind + "/B-1"
				at := fg.forge(f, ref)
				// What every reader names: the ref and its value.
				named := ref + " (at " + at + ") cannot be read as a " + kind

				after, rowsAfter := taskListings(t, f)
				for name, b := range before {
					a := after[name]
					if !reflect.DeepEqual(a.ids, b.ids) || a.next != b.next {
						t.Errorf("%s: tasks %v next %q, want %v next %q as before", name, a.ids, a.next, b.ids, b.next)
					}
					for _, id := range b.ids {
						if id == "B-1" {
							continue
						}
						if !reflect.DeepEqual(a.entries[id], b.entries[id]) {
							t.Errorf("%s: %s differs\nbefore: %v\nafter:  %v", name, id, b.entries[id], a.entries[id])
						}
					}
					if e, ok := a.entries["B-1"]; ok {
						in, _ := e["integrity"].(map[string]any)
						if in["state"] != "tampered" || !strings.Contains(in["reason"].(string), named) {
							t.Errorf("%s: B-1's integrity %v, want tampered naming %q", name, in, named)
						}
						// Nothing of the task is rendered.
						if e["phase"] != "" || e["progress"] != nil || e["title"] != "" {
							t.Errorf("%s: B-1 is rendered: %v", name, e)
						}
					}
				}
				for id, row := range rowsBefore {
					if id == "B-1" {
						if r := rowsAfter[id]; !strings.Contains(r, `data-integrity="tampered"`) || !strings.Contains(r, named) {
							t.Errorf("the task list page's row of B-1 is not tampered naming %s:\n%s", ref, r)
						}
						continue
					}
					if rowsAfter[id] != row {
						t.Errorf("the task list page's row of %s differs\nbefore: %s\nafter:  %s", id, row, rowsAfter[id])
					}
				}

				// Text: exit 0, the task named on stderr; --strict: exit 2.
				out, errOut, code := f.cli("", "task", "list")
				if code != 0 || !strings.Contains(errOut, "note: task B-1 is tampered: "+named) || !strings.Contains(out, "A-1") || !strings.Contains(out, "C-1") {
					t.Errorf("task list: exit %d\n%s%s", code, out, errOut)
				}
				for _, args := range [][]string{{"task", "list", "--strict"}, {"task", "list", "--strict", "--limit", "1", "--cursor", "A-1"}} {
					if _, errOut, code := f.cli("", args...); code != 2 || !strings.Contains(errOut, "B-1") {
						t.Errorf("%v: exit %d %s, want 2 naming B-1", args, code, errOut)
					}
				}
				// A page without it is judged as before.
				if _, errOut, code := f.cli("", "task", "list", "--strict", "--limit", "1", "--cursor", "B-1"); code != 0 {
					t.Errorf("task list --strict of the page after B-1: exit %d %s", code, errOut)
				}

				if got, errOut, code := f.cli("", "artifact", "list", "--output-json"); code != 0 || got != productsBefore {
					t.Errorf("artifact list: exit %d %s\n%s\nwant\n%s", code, errOut, got, productsBefore)
				}

				// task show of it: tampered, naming the ref, nothing shown.
				for _, args := range [][]string{{"task", "show", "B-1"}, {"task", "show", "B-1", "--output-json"}} {
					out, errOut, code := f.cli("", args...)
					if code != 2 || out != "" || !strings.Contains(errOut, "task B-1 is tampered: "+named) {
						t.Errorf("%v: exit %d\nstdout %q\nstderr %q", args, code, out, errOut)
					}
				}
				if kind == "journal" {
					// artifact show of any key of it: tampered, as task
					// show says it (never "has no artifact"); the API
					// and the page's fragments answer 409 alike.
					for _, args := range [][]string{{"artifact", "show", "B-1", "summary"}, {"artifact", "show", "B-1", "summary", "--output-json"},
						{"artifact", "show", "B-1", "summary", "--version", "1"}, {"artifact", "show", "B-1", "nokey"}} {
						out, errOut, code := f.cli("", args...)
						if code != 2 || out != "" || !strings.Contains(errOut, "task B-1 is tampered: "+named) {
							t.Errorf("%v: exit %d\nstdout %q\nstderr %q", args, code, out, errOut)
						}
					}
					apiTampered(t, f, named, "/api/v1/tasks/B-1/artifacts/summary", "/api/v1/tasks/B-1/artifacts/summary?version=1",
						"/tasks/B-1/fragments/artifacts/summary")
				}
				if got, _, code := f.cli("", "task", "show", "A-1", "--output-json"); code != 0 || got != showBefore {
					t.Errorf("task show A-1: exit %d\n%s\nwant\n%s", code, got, showBefore)
				}

				// audit verify, full and since the checkpoint: tampered, a
				// failure naming the ref.
				auditNames(t, f, ref, false)
				auditNames(t, f, ref, false, "--since", "cp")

				// Writers of the other tasks are not blocked.
				if out, errOut, code := f.cli("", "artifact", "post", "A-1", "more", "--type", "report", "--body", "# more",
					"--agent", "agent", "--claim-token", tokA); code != 0 {
					t.Fatalf("post to A-1: exit %d %s%s", code, out, errOut)
				}
				if _, errOut, code := f.cli("", "task", "create", "N-1", "--title", "new"); code != 0 {
					t.Fatalf("task create: exit %d %s", code, errOut)
				}
				out, errOut, code = f.cli("", "task", "list", "--output-json")
				if l := parseTaskList(t, "task list", out); code != 0 || !reflect.DeepEqual(l.ids, []string{"A-1", "B-1", "C-1", "N-1"}) {
					t.Errorf("task list after the writes: exit %d %v %s", code, l.ids, errOut)
				}
			})
		}
	}
}

// TestHonestTaskRefsAreNotReadPast: no false alarm. Tasks written by
// bernstein, open, ended, reopened and packed, list with no task tampered.
func TestHonestTaskRefsAreNotReadPast(t *testing.T) {
	f, _ := unreadableTaskFixture(t)
	s := f.open()
	endedTask(t, f, s, "E-1")
	if _, errOut, code := f.cli("", "task", "reopen", "E-1", "--reason", "again"); code != 0 {
		t.Fatalf("reopen: exit %d %s", code, errOut)
	}
	s.Close()
	f.git("pack-refs", "--all")
	for _, args := range [][]string{{"task", "list", "--strict"}, {"task", "list", "--strict", "--limit", "2"}} {
		if out, errOut, code := f.cli("", args...); code != 0 || strings.Contains(errOut, "tampered") {
			t.Fatalf("%v over honest refs: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	for _, id := range []string{"A-1", "E-1"} {
		if _, errOut, code := f.cli("", "task", "show", id); code != 0 {
			t.Fatalf("task show %s: exit %d %s", id, code, errOut)
		}
	}
}

// TestPushPastUnreadableTaskRef: a local task ref that cannot be read as
// its chain (its head a blob, a missing object, a loose file that is no
// object id, a commit with no record,
// or a chain commit whose parent is missing or no commit) is not pushed
// and holds no other ref back: a new task and the audit entries go, the remote keeps its honest
// head of the forged ref and gets none of a forged task it did not have,
// and push names what it read past.
func TestPushPastUnreadableTaskRef(t *testing.T) {
	cases := []taskRefForgery{taskRefForgeries[0], taskRefForgeries[3], taskRefForgeries[4], taskRefForgeries[5], {"parent missing", func(f *fixture, ref string) string {
		// The honest head's bytes with its parent swapped for an absent
		// one: a commit carrying a record, below which the chain breaks.
		raw := f.git("cat-file", "commit", ref)
		parent := strings.TrimSpace(f.git("rev-parse", ref+"~1"))
		forged := strings.Replace(raw, "parent "+parent, "parent "+strings.Repeat("6", 40), 1)
		if forged == raw {
			f.t.Fatalf("the head of %s names no parent %s", ref, parent)
		}
		o := strings.TrimSpace(f.git2(forged, "hash-object", "-t", "commit", "-w", "--literally", "--stdin"))
		f.git("update-ref", ref, o)
		return o
	}}, {"parent of no commit's shape", func(f *fixture, ref string) string {
		raw := f.git("cat-file", "commit", ref)
		parent := strings.TrimSpace(f.git("rev-parse", ref+"~1"))
		junk := strings.TrimSpace(f.git2("not a commit\n", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"))
		o := strings.TrimSpace(f.git2(strings.Replace(raw, "parent "+parent, "parent "+junk, 1), "hash-object", "-t", "commit", "-w", "--literally", "--stdin"))
		f.git("update-ref", ref, o)
		return o
	}}}
	for _, fg := range cases {
		t.Run(strings.ReplaceAll(fg.name, " ", "_"), func(t *testing.T) {
			f, _ := unreadableTaskFixture(t)
			bare := filepath.Join(t.TempDir(), "remote.git")
			if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			f.git("remote", "add", "origin", bare)
			if out, errOut, code := f.cli("", "push", "origin"); code != 0 {
				t.Fatalf("push: %d %s %s", code, out, errOut)
			}
			ref := "refs/bernstein/ledger/B-1"
			honest := f.rev(ref)
			at := fg.forge(f, ref)
			// A task the remote does not have yet, forged alike.
			if _, errOut, code := f.cli("", "task", "create", "M-1", "--title", "forged"); code != 0 {
				t.Fatalf("task create: exit %d %s", code, errOut)
			}
			if _, errOut, code := f.cli("", "task", "abandon", "M-1", "--reason", "a second row"); code != 0 {
				t.Fatalf("task abandon: exit %d %s", code, errOut)
			}
			refM := "refs/bernstein/ledger/M-1"
			atM := fg.forge(f, refM)
			if _, errOut, code := f.cli("", "task", "create", "N-1", "--title", "new"); code != 0 {
				t.Fatalf("task create: exit %d %s", code, errOut)
			}
			out, errOut, code := f.cli("", "push", "origin")
			if code != 0 || !strings.Contains(errOut, "warning: "+ref+" (at "+at+") cannot be read as a ledger") ||
				!strings.Contains(errOut, "warning: "+refM+" (at "+atM+") cannot be read as a ledger") {
				t.Fatalf("push past %s and %s: exit %d\n%s%s", ref, refM, code, out, errOut)
			}
			remote := refsOf(t, bare, refs.Prefix)
			if remote[ref] != honest || remote[refM] != "" || remote[refs.Ledger("N-1")] != f.rev(refs.Ledger("N-1")) || remote[refs.Audit("test-writer")] != f.rev(refs.Audit("test-writer")) {
				t.Fatalf("the remote after the push: %v", remote)
			}
		})
	}
}

// apiTampered checks that each GET of paths answers 409 naming named.
func apiTampered(t *testing.T, f *fixture, named string, paths ...string) {
	t.Helper()
	s := f.open()
	defer s.Close()
	srv, err := server.New(s, server.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); srv.Close() }()
	for _, p := range paths {
		res, err := http.Get(hs.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusConflict || !strings.Contains(string(b), named) {
			t.Errorf("GET %s: %d %s, want 409 naming %s", p, res.StatusCode, b, named)
		}
	}
}
