package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// TestPageTaskListIntegrity: the task list reads a task with a tampered
// version as tampered, first, whatever its id; it counts every task's
// versions; a phase filter and a search narrow it; past a page it pages.
func TestPageTaskListIntegrity(t *testing.T) {
	r := newTaskRepo(t, "Z-tampered")
	r.postPayload("summary", report("fine"))
	bad := r.postPayload("summary", report("SECRET-BODY here"))
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("A-%d", i)
		if _, err := r.store.CreateTask(bernstein.TaskSpec{ID: id, Title: fmt.Sprintf("planner %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.store.Claim("A-1", "agent-9"); err != nil {
		t.Fatal(err)
	}
	tamperBlobs(t, r.dir, map[string]string{bad.Blob: "SECRET"})
	_, hs := pageServer(t, r.dir, r.home)
	rowsOf := func(doc string) []string {
		var out []string
		for _, n := range find(t, doc, func(n *html.Node) bool { return n.Data == "tr" && has(n, "data-task") }) {
			out = append(out, attr(n, "data-task")+"/"+attr(n, "data-integrity"))
		}
		return out
	}
	doc := getPage(t, hs, "/", http.StatusOK)
	if got := strings.Join(rowsOf(doc), " "); got != "Z-tampered/tampered A-0/verified A-1/verified A-2/verified" {
		t.Fatalf("rows: %s", got)
	}
	row := find(t, doc, func(n *html.Node) bool { return n.Data == "tr" && attr(n, "data-task") == "Z-tampered" })[0]
	v := byClass(row, "versions")
	if attr(v, "data-verified") != "1" || attr(v, "data-tampered") != "1" || attr(v, "data-unverifiable") != "0" ||
		!strings.Contains(text(byClass(row, "integrity")), "1 of 2 versions tampered") || text(byClass(row, "journal-identity")) != "open" {
		t.Fatalf("the tampered row: %s", render(row))
	}
	sum := find(t, doc, func(n *html.Node) bool { return attr(n, "id") == "tasks-summary" })
	if len(sum) != 1 || attr(sum[0], "data-tampered") != "1" || attr(sum[0], "data-total") != "4" {
		t.Fatalf("summary: %v", sum)
	}
	if got := strings.Join(rowsOf(getPage(t, hs, "/?phase=claimed", http.StatusOK)), " "); got != "Z-tampered/tampered A-1/verified" {
		t.Fatalf("phase claimed: %s", got)
	}
	if got := strings.Join(rowsOf(getPage(t, hs, "/?q=PLANNER+2", http.StatusOK)), " "); got != "A-2/verified" {
		t.Fatalf("search: %s", got)
	}
	if doc := getPage(t, hs, "/?q=nothing-like-it", http.StatusOK); len(rowsOf(doc)) != 0 || !strings.Contains(doc, `id="no-match"`) {
		t.Fatalf("no match: %s", doc)
	}
	// An unknown phase is no filter; a page past the last is the last.
	if n := len(rowsOf(getPage(t, hs, "/?phase=bogus&page=99", http.StatusOK))); n != 4 {
		t.Fatalf("%d rows", n)
	}
}

// TestPageTaskListPages: 450 tasks are three pages, each linking to the
// next and the one before, the tampered one first on the first.
func TestPageTaskListPages(t *testing.T) {
	r := newTaskRepo(t, "P-tampered")
	bad := r.postPayload("k", report("SECRET-X"))
	for i := 0; i < 449; i++ {
		if _, err := r.store.CreateTask(bernstein.TaskSpec{ID: fmt.Sprintf("P-%03d", i), Title: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// 450 tasks start a compaction of packs in the background: wait for
	// it (Close) before the packs are unpacked under it.
	r.store.Close()
	tamperBlobs(t, r.dir, map[string]string{bad.Blob: "SECRET"})
	_, hs := pageServer(t, r.dir, r.home)
	seen := map[string]bool{}
	path := "/"
	for page := 1; path != ""; page++ {
		doc := getPage(t, hs, path, http.StatusOK)
		rows := find(t, doc, func(n *html.Node) bool { return n.Data == "tr" && has(n, "data-task") })
		if page == 1 && attr(rows[0], "data-task") != "P-tampered" {
			t.Fatalf("first row: %s", render(rows[0]))
		}
		want := 200
		if page == 3 {
			want = 50
		}
		if len(rows) != want {
			t.Fatalf("page %d: %d rows", page, len(rows))
		}
		for _, n := range rows {
			if seen[attr(n, "data-task")] {
				t.Fatalf("%s twice", attr(n, "data-task"))
			}
			seen[attr(n, "data-task")] = true
		}
		path = ""
		for _, a := range find(t, doc, func(n *html.Node) bool { return n.Data == "a" && attr(n, "rel") == "next" }) {
			path = attr(a, "href")
		}
		if page > 3 {
			t.Fatal("more than three pages")
		}
	}
	if len(seen) != 450 {
		t.Fatalf("%d tasks seen", len(seen))
	}
}

// TestPageKeys: keys in the order they were first posted, pinned ones
// first; a filter narrows them; each group offers its versions to compare.
func TestPageKeys(t *testing.T) {
	r := newTaskRepo(t, "K-1")
	for _, k := range []string{"zeta-report", "alpha", "mid.table", "alpha", "beta"} {
		r.postPayload(k, report("body of "+k))
	}
	_, hs := pageServer(t, r.dir, r.home)
	keysOf := func(doc string) string {
		var out []string
		for _, g := range find(t, doc, func(n *html.Node) bool { return n.Data == "section" && has(n, "data-key") }) {
			out = append(out, attr(g, "data-key"))
		}
		return strings.Join(out, " ")
	}
	doc := getPage(t, hs, "/tasks/K-1", http.StatusOK)
	if got := keysOf(doc); got != "zeta-report alpha mid.table beta" {
		t.Fatalf("order: %s", got)
	}
	if got := keysOf(getPage(t, hs, "/tasks/K-1?pin=beta,mid.table,nosuch", http.StatusOK)); got != "beta mid.table zeta-report alpha" {
		t.Fatalf("pinned: %s", got)
	}
	if got := keysOf(getPage(t, hs, "/tasks/K-1?key=TA", http.StatusOK)); got != "zeta-report mid.table beta" {
		t.Fatalf("filter: %s", got)
	}
	// The pin link of alpha pins it.
	alpha := find(t, doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "data-key") == "alpha" })[0]
	pin := byClass(alpha, "pin")
	if pin == nil || attr(pin, "href") != "/tasks/K-1?pin=alpha" {
		t.Fatalf("pin link: %s", render(alpha))
	}
	// alpha has two versions: its comparison offers both, v1 against v2.
	form := findIn(alpha, func(n *html.Node) bool { return n.Data == "form" })
	if len(form) != 1 || attr(form[0], "action") != "/tasks/K-1/diff/alpha" || has(form[0], "hidden") {
		t.Fatalf("compare form: %s", render(alpha))
	}
	sel := findIn(form[0], func(n *html.Node) bool { return n.Data == "option" && has(n, "selected") })
	if len(sel) != 2 || attr(sel[0], "value") != "1" || attr(sel[1], "value") != "2" {
		t.Fatalf("defaults: %s", render(form[0]))
	}
	beta := find(t, doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "data-key") == "beta" })[0]
	if f := findIn(beta, func(n *html.Node) bool { return n.Data == "form" }); len(f) != 1 || !has(f[0], "hidden") {
		t.Fatalf("a key of one version offers a comparison: %s", render(beta))
	}
}

// TestPageKeysPages: 250 keys are three pages of keys; the index names
// every key, linking to the page that shows it.
func TestPageKeysPages(t *testing.T) {
	r := newTaskRepo(t, "KP-1")
	var reqs []bernstein.PostRequest
	for i := 0; i < 250; i++ {
		reqs = append(reqs, bernstein.PostRequest{Task: "KP-1", Key: fmt.Sprintf("k%03d", i), Agent: "agent-1", ClaimToken: r.token, Payload: report("b")})
	}
	if _, err := r.store.PostBatch(reqs); err != nil {
		t.Fatal(err)
	}
	_, hs := pageServer(t, r.dir, r.home)
	doc := getPage(t, hs, "/tasks/KP-1?kpage=3", http.StatusOK)
	groups := find(t, doc, func(n *html.Node) bool { return n.Data == "section" && has(n, "data-key") })
	if len(groups) != 50 || attr(groups[0], "data-key") != "k200" {
		t.Fatalf("page 3: %d groups from %s", len(groups), attr(groups[0], "data-key"))
	}
	chips := find(t, doc, func(n *html.Node) bool { return n.Data == "li" && has(n, "data-key") })
	if len(chips) != 250 {
		t.Fatalf("%d keys in the index", len(chips))
	}
	if a := findIn(chips[0], func(n *html.Node) bool { return n.Data == "a" }); attr(a[0], "href") != "/tasks/KP-1#artifact-k000" {
		t.Fatalf("k000 links to %s", attr(a[0], "href"))
	}
	if a := findIn(chips[249], func(n *html.Node) bool { return n.Data == "a" }); attr(a[0], "href") != "#artifact-k249" {
		t.Fatalf("k249 links to %s", attr(a[0], "href"))
	}
	keys := find(t, doc, func(n *html.Node) bool { return attr(n, "id") == "keys" })[0]
	if attr(keys, "data-last-page") != "true" || attr(keys, "data-pages") != "3" {
		t.Fatalf("keys: %s", render(keys)[:200])
	}
}

// TestPageDiff: the comparison page shows a changed table cell, named by
// its column, a report's changed lines and a link's URL; a tampered side is
// refused and its content is nowhere on the page.
func TestPageDiff(t *testing.T) {
	r := newTaskRepo(t, "D-1")
	tab := func(rows ...[]string) artifact.Payload {
		return artifact.Payload{Type: artifact.TypeTable, Columns: []string{"step", "ms"}, Rows: rows}
	}
	r.postPayload("timings", tab([]string{"parse", "12"}, []string{"lex", "7"}))
	r.postPayload("timings", tab([]string{"parse", "12"}, []string{"lex", "9"}, []string{"link", "3"}))
	r.postPayload("notes", report("one\ntwo\n"))
	bad := r.postPayload("notes", report("one\nSECRET-TWO\n"))
	r.postPayload("notes", report("one\nthree\n"))
	_, hs := pageServer(t, r.dir, r.home)

	doc := getPage(t, hs, "/tasks/D-1/diff/timings", http.StatusOK)
	cells := find(t, doc, func(n *html.Node) bool { return n.Data == "td" && attr(n, "data-changed") == "true" })
	if len(cells) != 1 || attr(cells[0], "data-column") != "ms" || text(byTag(cells[0], "del")) != "7" || text(byTag(cells[0], "ins")) != "9" {
		t.Fatalf("changed cells: %v\n%s", cells, doc)
	}
	added := find(t, doc, func(n *html.Node) bool { return n.Data == "tr" && attr(n, "data-change") == "added" })
	if len(added) != 1 || !strings.Contains(text(added[0]), "link") {
		t.Fatalf("added rows: %v", added)
	}
	doc = getPage(t, hs, "/tasks/D-1/diff/notes?from=1&to=3", http.StatusOK)
	ops := find(t, doc, func(n *html.Node) bool { return n.Data == "tr" && has(n, "data-op") && attr(n, "data-op") != "context" })
	if len(ops) != 2 || !strings.Contains(text(ops[0]), "two") || !strings.Contains(text(ops[1]), "three") {
		t.Fatalf("lines: %v", ops)
	}
	// The page's own form: empty fields are the defaults.
	getPage(t, hs, "/tasks/D-1/diff/notes?from=&to=", http.StatusOK)
	getPage(t, hs, "/tasks/D-1/diff/notes?from=x", http.StatusBadRequest)
	getPage(t, hs, "/tasks/D-1/diff/notes?from=9", http.StatusNotFound)
	getPage(t, hs, "/tasks/D-1/diff/nokey", http.StatusNotFound)
	getPage(t, hs, "/tasks/D-9/diff/notes", http.StatusNotFound)

	tamperBlobs(t, r.dir, map[string]string{bad.Blob: "SECRET"})
	_, hs = pageServer(t, r.dir, r.home)
	for _, q := range []string{"?from=1&to=2", "?from=2", "?from=2&to=3"} {
		doc := getPage(t, hs, "/tasks/D-1/diff/notes"+q, http.StatusOK)
		if strings.Contains(doc, "SECRET") {
			t.Fatalf("%s shows tampered content", q)
		}
		ref := find(t, doc, func(n *html.Node) bool { return attr(n, "id") == "diff-refused" })
		if len(ref) != 1 || !strings.Contains(text(ref[0]), "v2 is tampered") || find(t, doc, func(n *html.Node) bool { return has(n, "data-op") }) != nil {
			t.Fatalf("%s: not refused: %s", q, doc)
		}
	}
	if doc := getPage(t, hs, "/tasks/D-1/diff/notes?from=1&to=3", http.StatusOK); strings.Contains(doc, `id="diff-refused"`) {
		t.Fatal("v1 against v3 is refused")
	}
}

// TestPageTimeline: the timeline's marks are the journal's rows, each
// saying what it earned as the fold counts it; its line ends at the strip's
// earned steps; each version sits at its row, linked to its card; a forged
// row and the rows after it are marked as not counting.
func TestPageTimeline(t *testing.T) {
	r := forgeryRepo(t) // F-1: gate build, evidence tests; a checkpoint, then summary v1
	s := r.storeOpen()
	task := r.task
	for _, step := range []func() error{
		func() error { _, err := s.Checkpoint(task, "HEAD", ""); return err }, // the same commit: nothing
		func() error {
			if err := os.WriteFile(filepath.Join(r.dir, "plan.txt"), []byte("a plan\n"), 0o644); err != nil {
				return err
			}
			r.git("add", "plan.txt")
			r.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "plan")
			_, err := s.CaptureDiff(task, "HEAD~1", "HEAD", "")
			return err
		},
		func() error { _, err := s.RunGate(task, "build", nil, bernstein.RunOptions{}); return err },
		func() error { _, err := s.RunGate(task, "build", nil, bernstein.RunOptions{}); return err }, // again: nothing
		func() error { _, err := s.RunEvidence(task, nil, bernstein.RunOptions{}); return err },
		func() error {
			_, err := s.Post(bernstein.PostRequest{Task: task, Key: "summary", Agent: "agent", ClaimToken: r.token, Payload: report("v2")})
			return err
		},
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	_, hs := pageServer(t, r.dir, r.home)
	check := func(faultAt int) {
		t.Helper()
		var j bernstein.JournalDoc
		getJSON(t, hs, "/api/v1/tasks/F-1/journal", &j)
		doc := getPage(t, hs, "/tasks/F-1/fragments/timeline", http.StatusOK)
		items := find(t, doc, func(n *html.Node) bool { return n.Data == "li" && has(n, "data-index") })
		if len(items) != len(j.Rows) {
			t.Fatalf("%d rows listed, the journal has %d", len(items), len(j.Rows))
		}
		marks := map[string]*html.Node{}
		for _, m := range find(t, doc, func(n *html.Node) bool { return n.Data == "a" && strings.HasPrefix(attr(n, "class"), "mark ") }) {
			marks[attr(m, "data-index")] = m
		}
		vmarks := map[string]*html.Node{}
		for _, m := range find(t, doc, func(n *html.Node) bool { return n.Data == "a" && strings.HasPrefix(attr(n, "class"), "vmark") }) {
			vmarks[attr(m, "data-index")] = m
		}
		for i, row := range j.Rows {
			idx := strconv.Itoa(i)
			li := items[i]
			if attr(li, "data-index") != idx || attr(li, "data-kind") != row.Kind || attr(li, "data-proof") != row.Proof {
				t.Errorf("row %d (%s, %s): %s", i, row.Kind, row.Proof, render(li))
			}
			counts := faultAt < 0 || i < faultAt
			if attr(li, "data-counts") != strconv.FormatBool(counts) {
				t.Errorf("row %d counts %s, want %v", i, attr(li, "data-counts"), counts)
			}
			if !counts && !strings.Contains(text(li), "does not count") {
				t.Errorf("row %d: %s", i, text(li))
			}
			switch row.Kind {
			case record.KindArtifactPosted:
				var a record.ArtifactPosted
				if err := jsonUnmarshal(row.Data, &a); err != nil {
					t.Fatal(err)
				}
				vm := vmarks[idx]
				if counts && (vm == nil || attr(vm, "href") != fmt.Sprintf("#v-%s-%d", a.Key, a.Version) || attr(vm, "data-state") != "verified") {
					t.Errorf("row %d: version mark %v", i, vm)
				}
				if marks[idx] != nil {
					t.Errorf("row %d: an artifact has a work mark", i)
				}
			default:
				if marks[idx] == nil || attr(marks[idx], "data-kind") != row.Kind || attr(marks[idx], "href") != "#tl-row-"+idx {
					t.Errorf("row %d: mark %v", i, marks[idx])
				}
			}
		}
		// What each counted row earned, by hand: checkpoint +1, summary v1,
		// the same checkpoint, diff +1, build +1, build again, tests +1, v2.
		earned := []string{"1", "0", "0", "1", "1", "0", "1", "0"}
		whys := map[int]string{2: progress.TreeCounted, 5: "passed before"}
		for i, e := range earned {
			if faultAt >= 0 && i >= faultAt {
				break
			}
			if attr(items[i], "data-earned") != e {
				t.Errorf("row %d earned %s, want %s: %s", i, attr(items[i], "data-earned"), e, text(items[i]))
			}
			if w, ok := whys[i]; ok && !strings.Contains(text(items[i]), "earned nothing: ") || ok && !strings.Contains(text(items[i]), w) {
				t.Errorf("row %d does not say why it earned nothing: %s", i, text(items[i]))
			}
		}
		var w struct {
			EarnedSteps int64 `json:"earned_steps"`
		}
		getJSON(t, hs, "/api/v1/tasks/F-1/progress", &w)
		tl := find(t, doc, func(n *html.Node) bool { return attr(n, "id") == "timeline" })[0]
		if attr(tl, "data-earned") != strconv.FormatInt(w.EarnedSteps, 10) || attr(tl, "data-fault-at") != strconv.Itoa(faultAt) {
			t.Errorf("timeline: earned %s, the progress says %d; fault at %s, want %d", attr(tl, "data-earned"), w.EarnedSteps, attr(tl, "data-fault-at"), faultAt)
		}
		checkInert(t, "timeline", doc)
	}
	check(-1)
	// A gate row forged (unsigned) with plain git, then an honest post:
	// both are marked as not counting, and the line ends where it did.
	g := forgetest.Variants[0].New(t, r.dir, "test-writer")
	for _, f := range forgetest.Forgeries {
		if f.Name == "gate" {
			f.Rows(g, task)
		}
	}
	n := len(strings.Split(strings.TrimSpace(r.git("log", "--format=%H", refs.Journal(task))), "\n"))
	check(n - 1)
}

func byTag(n *html.Node, tag string) *html.Node {
	if f := findIn(n, func(c *html.Node) bool { return c.Data == tag }); len(f) > 0 {
		return f[0]
	}
	return nil
}

// storeOpen opens a store of the repository, closed with the test.
func (r *repo) storeOpen() *bernstein.Store {
	r.t.Helper()
	s, err := bernstein.Open(r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { s.Close() })
	return s
}

// getJSON GETs path (200) and decodes its body into v.
func getJSON(t *testing.T, hs *httptest.Server, path string, v any) {
	t.Helper()
	code, _, body := get(t, hs, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
