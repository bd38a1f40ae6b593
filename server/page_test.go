package server_test

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/server"
)

// pageServer serves the pages of the repository at dir (a fresh store and
// server, not watching: a test scans the bus itself).
func pageServer(t *testing.T, dir, home string) (*server.Server, *httptest.Server) {
	t.Helper()
	s, err := bernstein.Open(bernstein.Options{Repo: dir, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(s, server.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
		s.Close()
	})
	return srv, hs
}

func (r *repo) postPayload(key string, p artifact.Payload) *bernstein.PostResult {
	r.t.Helper()
	res, err := r.store.Post(bernstein.PostRequest{Task: r.task, Key: key, Agent: "agent-1", ClaimToken: r.token, Payload: p})
	if err != nil {
		r.t.Fatalf("post %s: %v", key, err)
	}
	return res
}

func report(body string) artifact.Payload {
	return artifact.Payload{Type: artifact.TypeReport, Body: body}
}

// get fetches a path and returns the status, the headers and the body.
func get(t *testing.T, hs *httptest.Server, path string) (int, http.Header, string) {
	t.Helper()
	res, err := http.Get(hs.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, string(b)
}

// getPage fetches a page that must answer status, with the page headers.
func getPage(t *testing.T, hs *httptest.Server, path string, status int) string {
	t.Helper()
	code, h, b := get(t, hs, path)
	if code != status {
		t.Fatalf("GET %s: %d, want %d\n%s", path, code, status, b)
	}
	checkPageHeaders(t, path, h)
	if ct := h.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	checkInert(t, path, b)
	return b
}

func checkPageHeaders(t *testing.T, path string, h http.Header) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Fatalf("GET %s: %s is %q, want %q", path, k, got, v)
		}
	}
}

// checkInert parses doc as a browser would and fails on anything that could
// run: a script other than the page's own, an event handler attribute, a
// javascript: (or any non-web) URL, an inline style, embedded content. The
// pages' own forms (GET to a path of this origin, with search, hidden and
// select fields and a submit button) and the timeline's SVG (shapes, text
// and links to a fragment of the page) are the only forms and SVG allowed.
func checkInert(t *testing.T, where, doc string) {
	t.Helper()
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("%s: parse: %v", where, err)
	}
	scripts := 0
	var walk func(n *html.Node, form, svg bool)
	walk = func(n *html.Node, form, svg bool) {
		if n.Type == html.ElementNode {
			if svg {
				switch n.Data {
				case "svg", "line", "polyline", "circle", "text", "title", "a":
				default:
					t.Fatalf("%s: element %s in the timeline: %s", where, n.Data, render(n))
				}
				for _, a := range n.Attr {
					k := strings.ToLower(a.Key)
					if strings.HasPrefix(k, "on") || k == "style" || strings.Contains(k, "href") && !strings.HasPrefix(a.Val, "#") {
						t.Fatalf("%s: attribute %s in the timeline: %s", where, k, render(n))
					}
				}
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					walk(c, form, svg)
				}
				return
			}
			switch n.Data {
			case "script":
				scripts++
				src := attr(n, "src")
				if !strings.HasPrefix(src, server.AssetsPrefix+"app.js?v=") || n.FirstChild != nil || len(n.Attr) != 2 {
					t.Fatalf("%s: a script that is not the page's own: %s", where, render(n))
				}
			case "svg":
				if attr(n, "class") != "timeline-chart" {
					t.Fatalf("%s: element svg: %s", where, render(n))
				}
				svg = true
			case "form":
				if form || attr(n, "method") != "get" || !strings.HasPrefix(attr(n, "action"), "/") || strings.HasPrefix(attr(n, "action"), "//") {
					t.Fatalf("%s: a form that is not the pages' own: %s", where, render(n))
				}
				form = true
			case "select", "option", "label":
				if !form {
					t.Fatalf("%s: %s outside the pages' forms: %s", where, n.Data, render(n))
				}
			case "iframe", "frame", "frameset", "object", "embed", "img", "math", "style", "base",
				"video", "audio", "source", "picture", "portal", "template", "noscript", "textarea", "button":
				if n.Data == "button" && attr(n, "class") == "copy" && attr(n, "type") == "button" {
					break
				}
				if n.Data == "button" && form && attr(n, "type") == "submit" {
					break
				}
				t.Fatalf("%s: element %s: %s", where, n.Data, render(n))
			case "link":
				if rel := attr(n, "rel"); !(rel == "stylesheet" && strings.HasPrefix(attr(n, "href"), server.AssetsPrefix)) && !(rel == "icon" && attr(n, "href") == "data:,") {
					t.Fatalf("%s: %s", where, render(n))
				}
			case "meta":
				if attr(n, "http-equiv") != "" {
					t.Fatalf("%s: %s", where, render(n))
				}
			case "input":
				typ := attr(n, "type")
				if !(typ == "checkbox" && has(n, "disabled")) && !(form && (typ == "search" || typ == "hidden")) {
					t.Fatalf("%s: %s", where, render(n))
				}
			}
			for _, a := range n.Attr {
				k := strings.ToLower(a.Key)
				if strings.HasPrefix(k, "on") || k == "style" || k == "srcdoc" || k == "formaction" || k == "action" && n.Data != "form" {
					t.Fatalf("%s: attribute %s: %s", where, k, render(n))
				}
				if k == "href" || k == "src" || k == "xlink:href" || k == "data" || k == "poster" {
					checkURL(t, where, n, a.Val)
				}
				if k == "target" && n.Data == "a" && !strings.Contains(attr(n, "rel"), "noopener") {
					t.Fatalf("%s: target without noopener: %s", where, render(n))
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, form || n.Data == "form" && n.Type == html.ElementNode, svg || n.Data == "svg" && n.Type == html.ElementNode)
		}
	}
	walk(root, false, false)
	if scripts > 1 {
		t.Fatalf("%s: %d scripts", where, scripts)
	}
}

// checkURL allows a path on this origin, an http(s) URL, or the empty
// icon; a browser strips tabs and newlines and ignores leading spaces and
// case, so they are stripped here too.
func checkURL(t *testing.T, where string, n *html.Node, v string) {
	t.Helper()
	u := strings.Map(func(r rune) rune {
		if r < 0x21 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToLower(v))
	switch {
	case u == "data:," && n.Data == "link":
	case strings.HasPrefix(u, "http://"), strings.HasPrefix(u, "https://"):
	case strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "//"):
	case strings.HasPrefix(u, "#") && n.Data == "a":
	default:
		t.Fatalf("%s: URL %q: %s", where, v, render(n))
	}
}

func attr(n *html.Node, k string) string {
	for _, a := range n.Attr {
		if a.Key == k {
			return a.Val
		}
	}
	return ""
}

func has(n *html.Node, k string) bool {
	for _, a := range n.Attr {
		if a.Key == k {
			return true
		}
	}
	return false
}

func render(n *html.Node) string {
	var b bytes.Buffer
	html.Render(&b, n)
	s := b.String()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// find returns the elements of doc for which match holds.
func find(t *testing.T, doc string, match func(n *html.Node) bool) []*html.Node {
	t.Helper()
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return findIn(root, match)
}

// findIn returns the elements under root for which match holds.
func findIn(root *html.Node, match func(n *html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	return out
}

// versions returns the version articles of doc, "key/n" to element.
func versions(t *testing.T, doc string) map[string]*html.Node {
	out := map[string]*html.Node{}
	for _, n := range find(t, doc, func(n *html.Node) bool { return n.Data == "article" && has(n, "data-version") }) {
		out[attr(n, "data-key")+"/"+attr(n, "data-version")] = n
	}
	return out
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

func byClass(n *html.Node, class string) *html.Node {
	if n.Type == html.ElementNode {
		for _, c := range strings.Fields(attr(n, "class")) {
			if c == class {
				return n
			}
		}
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := byClass(c, class); f != nil {
			return f
		}
	}
	return nil
}

// TestPageTaskList: / lists every task with its phase, claim, earned steps
// and proof, each linking to its page with the id percent-encoded.
func TestPageTaskList(t *testing.T) {
	r := newTaskRepo(t, "L:1")
	if _, err := r.store.CreateTask(bernstein.TaskSpec{ID: "L-2.b", Title: "second"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Transition("L:1", record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Checkpoint("L:1", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	_, hs := pageServer(t, r.dir, r.home)
	doc := getPage(t, hs, "/", http.StatusOK)
	rows := find(t, doc, func(n *html.Node) bool { return n.Data == "tr" && has(n, "data-task") })
	if len(rows) != 2 || attr(rows[0], "data-task") != "L-2.b" || attr(rows[1], "data-task") != "L:1" {
		t.Fatalf("rows: %d\n%s", len(rows), doc)
	}
	one := rows[1]
	if attr(one, "data-phase") != "started" || attr(one, "data-proof-state") != "verified" {
		t.Fatalf("row: %s", render(one))
	}
	link := byClass(one, "task-link")
	if link == nil || attr(link, "href") != "/tasks/L%3A1" || text(link) != "L:1" {
		t.Fatalf("link: %s", render(one))
	}
	if c := byClass(one, "claim"); c == nil || text(c) != "agent-1" {
		t.Fatalf("claim: %s", render(one))
	}
	if e := byClass(one, "earned"); e == nil || text(e) != "1" {
		t.Fatalf("earned steps: %s", render(one))
	}
	if attr(byClass(rows[0], "task-link"), "href") != "/tasks/L-2.b" {
		t.Fatalf("link: %s", render(rows[0]))
	}
	// The listed links resolve.
	getPage(t, hs, "/tasks/L%3A1", http.StatusOK)
	getPage(t, hs, "/tasks/L-2.b", http.StatusOK)
}

// TestPageTask: the strip and the artifacts panel, each version with its
// badge, run position, poster, writer and spine entry; the body carries
// the event stream's URL from the bus's last event.
func TestPageTask(t *testing.T) {
	r := newTaskRepo(t, "P:1")
	r.postPayload("summary", report("# First\n\nfirst findings"))
	if _, err := r.store.Transition("P:1", record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Checkpoint("P:1", "HEAD", ""); err != nil {
		t.Fatal(err)
	}
	head := r.git("rev-parse", "HEAD")
	v2 := r.postPayload("summary", report("second *findings*"))
	r.postPayload("timings", artifact.Payload{Type: artifact.TypeTable, Columns: []string{"step", "ms"}, Rows: [][]string{{"parse", "12"}, {"plan", "40"}}})
	r.postPayload("preview", artifact.Payload{Type: artifact.TypeLink, URL: "https://preview.example.com/p?a=1&b=2", LinkKind: artifact.LinkPreview})

	srv, hs := pageServer(t, r.dir, r.home)
	if err := srv.Bus().Scan(); err != nil { // the first scan takes the repository as it is
		t.Fatal(err)
	}
	start := srv.Bus().LastID()
	r.postPayload("summary", report("third, after the bus started"))
	if err := srv.Bus().Scan(); err != nil {
		t.Fatal(err)
	}
	last := srv.Bus().LastID()
	if last == start {
		t.Fatal("the bus published nothing")
	}
	doc := getPage(t, hs, "/tasks/P%3A1", http.StatusOK)

	bodies := find(t, doc, func(n *html.Node) bool { return n.Data == "body" })
	b := bodies[0]
	if attr(b, "data-task") != "P:1" || attr(b, "data-task-path") != "/tasks/P%3A1" || attr(b, "data-page") != "task" ||
		attr(b, "data-last-event-id") != strconv.FormatInt(last, 10) ||
		attr(b, "data-events") != fmt.Sprintf("/api/v1/events?task=P%%3A1&last_event_id=%d", last) {
		t.Fatalf("body: %s", render(b))
	}
	if find(t, doc, func(n *html.Node) bool { return attr(n, "id") == "live-status" }) == nil {
		t.Fatal("no live status")
	}

	// The strip.
	strips := find(t, doc, func(n *html.Node) bool { return attr(n, "id") == "progress-strip" })
	if len(strips) != 1 {
		t.Fatalf("%d strips", len(strips))
	}
	s := strips[0]
	w, err := r.store.Progress("P:1")
	if err != nil {
		t.Fatal(err)
	}
	if attr(s, "data-vector-hash") != w.VectorHash || attr(s, "data-proof-state") != "verified" || attr(s, "data-phase") != "started" ||
		attr(s, "data-earned-steps") != "1" {
		t.Fatalf("strip: %s", render(s))
	}
	fields := map[string]string{}
	for _, n := range find(t, doc, func(n *html.Node) bool { return has(n, "data-field") }) {
		fields[attr(n, "data-field")] = strings.TrimSpace(text(n))
	}
	for k, v := range map[string]string{"earned_steps": "1", "checkpoints": "1", "diffs_captured": "0", "gates_passed": "0",
		"gate_attempts": "0", "evidence_passed": "0", "evidence_declared": "0", "ledger_phase": "started",
		"claim_agent": "agent-1", "vector_hash": w.VectorHash[:12], "proof_state": "verified"} {
		if fields[k] != v {
			t.Errorf("strip field %s = %q, want %q", k, fields[k], v)
		}
	}
	if !strings.Contains(text(s), "earned, not posted") {
		t.Errorf("the strip does not say progress is earned: %s", text(s))
	}

	// The artifacts panel: keys in the order they were first posted,
	// newest version first.
	groups := find(t, doc, func(n *html.Node) bool { return n.Data == "section" && has(n, "data-key") })
	var keys []string
	for _, g := range groups {
		keys = append(keys, attr(g, "data-key")+"@"+attr(g, "data-latest"))
	}
	if strings.Join(keys, " ") != "summary@3 timings@1 preview@1" {
		t.Fatalf("groups %v", keys)
	}
	vs := versions(t, doc)
	if len(vs) != 5 {
		t.Fatalf("%d versions", len(vs))
	}
	for k, v := range vs {
		if attr(v, "data-state") != "verified" || attr(v, "data-withheld") != "false" {
			t.Errorf("%s: %s", k, render(v))
		}
		if badge := byClass(v, "badge"); badge == nil || text(badge) != "verified" {
			t.Errorf("%s: badge", k)
		}
	}
	sv2 := vs["summary/2"]
	if attr(sv2, "data-journal-index") != strconv.FormatInt(v2.JournalIndex, 10) {
		t.Fatalf("summary v2: %s", render(sv2))
	}
	pos := byClass(sv2, "run-position")
	if attr(pos, "data-checkpoint") != head || attr(pos, "data-checkpoint-index") != "1" || !strings.Contains(text(pos), head[:7]) ||
		!strings.Contains(text(pos), "journal #2") {
		t.Fatalf("run position: %s", render(pos))
	}
	if p := byClass(vs["summary/1"], "run-position"); has(p, "data-checkpoint") || !strings.Contains(text(p), "before any checkpoint") {
		t.Fatalf("run position of v1: %s", render(p))
	}
	if a := byClass(sv2, "actor"); text(a) != "agent-1" {
		t.Fatalf("actor: %s", render(sv2))
	}
	if wr := byClass(sv2, "writer"); text(wr) != v2.Writer {
		t.Fatalf("writer: %s, want %s", render(wr), v2.Writer)
	}
	if h := byClass(sv2, "spine-hash"); text(h) != string(v2.SpineEntryHash) {
		t.Fatalf("spine hash: %s", render(sv2))
	}
	if c := byClass(sv2, "copy"); c == nil || attr(c, "data-copy") != string(v2.SpineEntryHash) {
		t.Fatalf("copy button: %s", render(sv2))
	}
	// Only the latest of a key carries its content; the earlier ones link
	// to their own page, inside the expandable history.
	if byClass(vs["summary/3"], "content") == nil || !strings.Contains(text(vs["summary/3"]), "third, after the bus started") {
		t.Fatalf("latest content: %s", render(vs["summary/3"]))
	}
	if view := byClass(sv2, "view"); byClass(sv2, "content") != nil || view == nil || attr(view.FirstChild, "href") != "/tasks/P%3A1/versions/summary/2" {
		t.Fatalf("history entry: %s", render(sv2))
	}
	if p := sv2.Parent.Parent.Parent; p.Data != "details" || !strings.Contains(attr(p, "class"), "history") {
		t.Fatalf("v2 is not in the history: %s", render(p))
	}
	if md := byClass(vs["summary/3"], "markdown"); md == nil {
		t.Fatal("no markdown")
	}
	tab := findIn(vs["timings/1"], func(n *html.Node) bool { return n.Data == "table" })
	if len(tab) != 1 || attr(tab[0], "data-rows") != "2" || !strings.Contains(text(tab[0]), "plan") {
		t.Fatalf("table: %s", render(vs["timings/1"]))
	}
	links := find(t, doc, func(n *html.Node) bool { return n.Data == "a" && strings.Contains(attr(n, "class"), "artifact-link") })
	if len(links) != 1 || attr(links[0], "href") != "https://preview.example.com/p?a=1&b=2" || attr(links[0], "rel") != "noopener noreferrer" ||
		attr(links[0], "target") != "_blank" || attr(links[0], "data-link-kind") != "preview" {
		t.Fatalf("link: %v", links)
	}

	// The version's own page shows v2's content.
	page := getPage(t, hs, "/tasks/P%3A1/versions/summary/2", http.StatusOK)
	if !strings.Contains(page, "<em>findings</em>") {
		t.Fatalf("version page: %s", page)
	}
}

// TestPageNotFound: unknown tasks, keys and versions, and ids that are not
// ids, answer 404 pages (with the page headers); ".." never reaches the
// store.
func TestPageNotFound(t *testing.T) {
	r := newTaskRepo(t, "N-1")
	r.postPayload("summary", report("body"))
	_, hs := pageServer(t, r.dir, r.home)
	for _, p := range []string{
		"/tasks/NOPE", "/tasks/a..b", "/tasks/%2E%2E", "/tasks/..%2Fetc", "/tasks/N-1%2F..", "/tasks/%3Cscript%3E", "/tasks/-x",
		"/tasks/N-1/versions/summary/2", "/tasks/N-1/versions/summary/0", "/tasks/N-1/versions/summary/x", "/tasks/N-1/versions/nope/1",
		"/tasks/N-1/versions/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E/1", "/tasks/NOPE/versions/summary/1",
		"/tasks/NOPE/fragments/strip", "/tasks/N-1/fragments/artifacts/nope", "/tasks/N-1/fragments/versions/summary/9",
		"/tasks/a..b/fragments/strip",
	} {
		doc := getPage(t, hs, p, http.StatusNotFound)
		if strings.Contains(doc, "<script>") || strings.Contains(doc, "<img") {
			t.Fatalf("%s: %s", p, doc)
		}
	}
	// The store was never asked about "..": nothing of the kind exists.
	if _, err := os.Stat(filepath.Join(r.dir, ".git", "refs", "bernstein", "ledger", "..")); err != nil {
		t.Log(err)
	}
	if code, _, _ := get(t, hs, "/static/nope.js"); code != http.StatusNotFound {
		t.Fatalf("unknown asset: %d", code)
	}
}

// TestPageEncodedIDs: ids with ':' and '.' reach their task encoded or not.
func TestPageEncodedIDs(t *testing.T) {
	r := newTaskRepo(t, "ns:T.1")
	r.postPayload("a.b-c_d", report("dotted key"))
	_, hs := pageServer(t, r.dir, r.home)
	for _, p := range []string{"/tasks/ns%3AT.1", "/tasks/ns:T.1", "/tasks/ns%3aT%2E1"} {
		doc := getPage(t, hs, p, http.StatusOK)
		if !strings.Contains(doc, `data-task="ns:T.1"`) || !strings.Contains(doc, `data-task-path="/tasks/ns%3AT.1"`) {
			t.Fatalf("%s: %s", p, doc)
		}
	}
	doc := getPage(t, hs, "/tasks/ns%3AT.1/versions/a.b-c_d/1", http.StatusOK)
	if !strings.Contains(doc, "dotted key") {
		t.Fatal(doc)
	}
	frag := getPage(t, hs, "/tasks/ns%3AT.1/fragments/artifacts/a.b-c_d", http.StatusOK)
	if !strings.Contains(frag, `data-key="a.b-c_d"`) {
		t.Fatal(frag)
	}
}

// TestPageCSP: every page, fragment and asset carries the policy; pages
// have no inline script or style, and the assets are served with their
// types.
func TestPageCSP(t *testing.T) {
	r := newTaskRepo(t, "C-1")
	r.postPayload("summary", report("body"))
	_, hs := pageServer(t, r.dir, r.home)
	for _, p := range []string{"/", "/tasks/C-1", "/tasks/C-1/versions/summary/1", "/tasks/C-1/fragments/strip",
		"/tasks/C-1/fragments/artifacts/summary", "/tasks/C-1/fragments/versions/summary/1", "/tasks/NOPE"} {
		code, h, doc := get(t, hs, p)
		checkPageHeaders(t, p, h)
		checkInert(t, p, doc)
		if code != http.StatusOK && p != "/tasks/NOPE" {
			t.Fatalf("%s: %d", p, code)
		}
		if strings.Contains(doc, "style=") || strings.Contains(doc, "<style") {
			t.Fatalf("%s: inline style", p)
		}
	}
	doc := getPage(t, hs, "/tasks/C-1", http.StatusOK)
	var css, js string
	for _, n := range find(t, doc, func(n *html.Node) bool { return n.Data == "link" || n.Data == "script" }) {
		if n.Data == "script" {
			js = attr(n, "src")
		} else if attr(n, "rel") == "stylesheet" {
			css = attr(n, "href")
		}
	}
	for path, ctype := range map[string]string{css: "text/css; charset=utf-8", js: "text/javascript; charset=utf-8"} {
		code, h, body := get(t, hs, path)
		if code != http.StatusOK || h.Get("Content-Type") != ctype || len(body) < 100 {
			t.Fatalf("%s: %d %s", path, code, h.Get("Content-Type"))
		}
		checkPageHeaders(t, path, h)
		if strings.Contains(body, "eval(") || strings.Contains(body, "new Function") || strings.Contains(body, "http://") ||
			strings.Contains(body, "https://") {
			t.Fatalf("%s reaches beyond the page's origin or evaluates code", path)
		}
	}
}

// TestPageFragments: the fragments the task page's script fetches on an
// event: the strip, a key's group, one version with its content.
func TestPageFragments(t *testing.T) {
	r := newTaskRepo(t, "F-1")
	r.postPayload("summary", report("one"))
	r.postPayload("summary", report("two **bold**"))
	_, hs := pageServer(t, r.dir, r.home)

	strip := getPage(t, hs, "/tasks/F-1/fragments/strip", http.StatusOK)
	if !strings.HasPrefix(strip, `<section id="progress-strip"`) || strings.Contains(strip, "<html") {
		t.Fatalf("strip: %s", strip)
	}
	group := getPage(t, hs, "/tasks/F-1/fragments/artifacts/summary", http.StatusOK)
	if !strings.HasPrefix(group, `<section class="artifact-group"`) || len(versions(t, group)) != 2 {
		t.Fatalf("group: %s", group)
	}
	ver := getPage(t, hs, "/tasks/F-1/fragments/versions/summary/1", http.StatusOK)
	vs := versions(t, ver)
	if !strings.HasPrefix(ver, "<article") || len(vs) != 1 || attr(vs["summary/1"], "data-state") != "verified" ||
		!strings.Contains(text(vs["summary/1"]), "one") {
		t.Fatalf("version: %s", ver)
	}
	ver = getPage(t, hs, "/tasks/F-1/fragments/versions/summary/2", http.StatusOK)
	if !strings.Contains(ver, "<strong>bold</strong>") {
		t.Fatalf("version 2: %s", ver)
	}
}

// TestPageXSS: hostile titles, report bodies, table cells and column
// names, and link URLs render inert; keys and agents outside their
// alphabets and javascript: links never get in.
func TestPageXSS(t *testing.T) {
	const title = `<script>alert("title")</script><img src=x onerror=alert(1)> "' onmouseover=alert(1) javascript:alert(1)`
	r := newTaskRepo(t, "X-1")
	if _, err := r.store.CreateTask(bernstein.TaskSpec{ID: "X-2", Title: title}); err != nil {
		t.Fatal(err)
	}
	tok2, err := r.store.Claim("X-2", "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	bodies := []string{
		"<script>alert(1)</script>",
		"<img src=x onerror=alert(1)>",
		"[click](javascript:alert(1)) [c2](JaVaScRiPt:alert(1)) [c3](  javascript:alert(1)) [c4](java\tscript:alert(1))",
		"<a href=\"javascript:alert(1)\">a</a> <a href=x onclick=alert(1)>b</a>",
		"![img](https://example.com/x.png) ![i2](javascript:alert(1)) <svg onload=alert(1)></svg>",
		"<iframe src=https://example.com></iframe><object data=x></object><embed src=x><style>body{}</style>",
		"[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) [vb](vbscript:msgbox)",
		"<details open ontoggle=alert(1)><summary>x</summary></details><form action=x><button formaction=javascript:alert(1)>b</button></form>",
		"| a | b |\n|---|---|\n| <script>alert(1)</script> | <img src=x onerror=alert(1)> |\n",
		"[ok](https://example.com/\"onmouseover=\"alert(1)) <https://example.com/<script>> www.example.com/\"><script>",
		"```html\n<script>alert(1)</script>\n```\n\n`<img onerror=alert(1)>`",
		"<!-- --><script>alert(1)</script><!-- --> <math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
		"[x]: javascript:alert(1)\n\n[ref][x]",
	}
	for i, b := range bodies {
		r.postPayload(fmt.Sprintf("r%d", i), report(b))
	}
	r.postPayload("cells", artifact.Payload{Type: artifact.TypeTable,
		Columns: []string{"<script>alert(1)</script>", `" onmouseover="alert(1)`, "<img src=x onerror=alert(1)>"},
		Rows: [][]string{
			{"<script>alert(1)</script>", `"><img src=x onerror=alert(1)>`, "javascript:alert(1)"},
			{"</td></tr></table><script>alert(1)</script>", "<a href=javascript:alert(1)>x</a>", "&lt;script&gt;"},
		}})
	r.postPayload("link", artifact.Payload{Type: artifact.TypeLink, URL: `https://example.com/"><script>alert(1)</script>?q='onmouseover=alert(1)`, LinkKind: artifact.LinkDocument})
	if _, err := r.store.Post(bernstein.PostRequest{Task: "X-2", Key: "summary", Agent: "agent-1", ClaimToken: tok2, Payload: report(title)}); err != nil {
		t.Fatal(err)
	}

	// What the validators keep out.
	for _, p := range []artifact.Payload{
		{Type: artifact.TypeLink, URL: "javascript:alert(1)", LinkKind: artifact.LinkPreview},
		{Type: artifact.TypeLink, URL: "JAVASCRIPT:alert(1)//https://x", LinkKind: artifact.LinkPreview},
		{Type: artifact.TypeLink, URL: "data:text/html,<script>alert(1)</script>", LinkKind: artifact.LinkPreview},
		{Type: artifact.TypeLink, URL: " https://example.com", LinkKind: artifact.LinkPreview},
	} {
		if _, err := r.store.Post(bernstein.PostRequest{Task: r.task, Key: "bad", Agent: "agent-1", ClaimToken: r.token, Payload: p}); err == nil {
			t.Fatalf("link %q was accepted", p.URL)
		}
	}
	for _, key := range []string{"<script>", `a"b`, "a b", "<img src=x onerror=alert(1)>", "../x", "-x"} {
		if _, err := r.store.Post(bernstein.PostRequest{Task: r.task, Key: key, Agent: "agent-1", ClaimToken: r.token, Payload: report("x")}); err == nil {
			t.Fatalf("key %q was accepted", key)
		}
	}
	if _, err := r.store.Claim("X-2", "<script>"); err == nil {
		t.Fatal("an agent named <script> was accepted")
	}

	_, hs := pageServer(t, r.dir, r.home)
	pages := []string{"/", "/tasks/X-1", "/tasks/X-2", "/tasks/X-2/versions/summary/1", "/tasks/X-1/fragments/artifacts/cells",
		"/tasks/X-1/fragments/versions/link/1"}
	for i := range bodies {
		pages = append(pages, fmt.Sprintf("/tasks/X-1/versions/r%d/1", i), fmt.Sprintf("/tasks/X-1/fragments/versions/r%d/1", i))
	}
	for _, p := range pages {
		doc := getPage(t, hs, p, http.StatusOK) // checkInert: no script but ours, no on*, no javascript:
		if strings.Contains(strings.ToLower(doc), "<script>alert") || strings.Contains(doc, "<img src=x") {
			t.Fatalf("%s: unescaped markup\n%s", p, doc)
		}
	}
	// The hostile text is shown as text.
	doc := getPage(t, hs, "/", http.StatusOK)
	rows := find(t, doc, func(n *html.Node) bool { return n.Data == "tr" && attr(n, "data-task") == "X-2" })
	if len(rows) != 1 || text(byClass(rows[0], "title")) != title {
		t.Fatalf("title: %s", render(rows[0]))
	}
	doc = getPage(t, hs, "/tasks/X-1/fragments/artifacts/cells", http.StatusOK)
	cells := find(t, doc, func(n *html.Node) bool { return n.Data == "td" })
	if len(cells) != 6 || text(cells[0]) != "<script>alert(1)</script>" || text(cells[3]) != "</td></tr></table><script>alert(1)</script>" ||
		text(cells[5]) != "&lt;script&gt;" {
		t.Fatalf("cells: %s", doc)
	}
	ths := find(t, doc, func(n *html.Node) bool { return n.Data == "th" && attr(n, "scope") == "col" })
	if len(ths) != 4 || text(ths[2]) != `" onmouseover="alert(1)` {
		t.Fatalf("columns: %s", doc)
	}
	doc = getPage(t, hs, "/tasks/X-1/fragments/versions/link/1", http.StatusOK)
	links := find(t, doc, func(n *html.Node) bool { return n.Data == "a" && strings.Contains(attr(n, "class"), "artifact-link") })
	if len(links) != 1 || !strings.HasPrefix(attr(links[0], "href"), "https://example.com/") || strings.ContainsAny(attr(links[0], "href"), `"<> `) ||
		attr(links[0], "rel") != "noopener noreferrer" {
		t.Fatalf("link: %s", doc)
	}
	// A markdown link keeps http(s) only, opening apart from the page.
	doc = getPage(t, hs, "/tasks/X-1/versions/r9/1", http.StatusOK)
	for _, a := range find(t, doc, func(n *html.Node) bool { return n.Data == "a" && byClass(n, "vnum") == nil && attr(n, "class") == "" }) {
		if attr(a, "href") == "/" || strings.HasPrefix(attr(a, "href"), "/tasks/") {
			continue
		}
		if !strings.HasPrefix(attr(a, "href"), "https://") && !strings.HasPrefix(attr(a, "href"), "http://") ||
			!strings.Contains(attr(a, "rel"), "noopener") || !strings.Contains(attr(a, "rel"), "noreferrer") || attr(a, "target") != "_blank" {
			t.Fatalf("markdown link: %s", render(a))
		}
	}
}

// TestPageTampered: in a copy of a repository whose blobs were altered,
// the tampered versions render as withheld, saying why, and their content
// appears nowhere; the others render as before.
func TestPageTampered(t *testing.T) {
	r := newTaskRepo(t, "TP-1")
	r.postPayload("summary", report("first body, alpha"))
	v2 := r.postPayload("summary", report("SECRET-SECOND-BODY with distinct words"))
	r.postPayload("summary", report("third body, gamma"))
	last := r.postPayload("notes", report("SECRET-LATEST-NOTES of the only version"))

	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", r.dir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	tamperBlobs(t, copyDir, map[string]string{v2.Blob: "SECRET-SECOND", last.Blob: "SECRET-LATEST"})

	// The original still verifies.
	_, orig := pageServer(t, r.dir, r.home)
	for k, v := range versions(t, getPage(t, orig, "/tasks/TP-1", http.StatusOK)) {
		if attr(v, "data-state") != "verified" {
			t.Fatalf("original %s: %s", k, render(v))
		}
	}

	_, hs := pageServer(t, copyDir, r.home)
	for _, p := range []string{"/tasks/TP-1", "/tasks/TP-1/versions/summary/2", "/tasks/TP-1/versions/notes/1",
		"/tasks/TP-1/fragments/versions/summary/2", "/tasks/TP-1/fragments/artifacts/notes", "/tasks/TP-1/fragments/artifacts/summary"} {
		doc := getPage(t, hs, p, http.StatusOK)
		if strings.Contains(doc, "SECRET") {
			t.Fatalf("%s shows tampered content:\n%s", p, doc)
		}
		for k, v := range versions(t, doc) {
			tampered := k == "summary/2" || k == "notes/1"
			if tampered != (attr(v, "data-state") == "tampered") {
				t.Fatalf("%s: %s is %s", p, k, attr(v, "data-state"))
			}
			if !tampered {
				continue
			}
			wh := byClass(v, "withheld")
			if attr(v, "data-withheld") != "true" || wh == nil || !strings.HasPrefix(text(wh), "content withheld: ") ||
				!strings.Contains(text(wh), strings.Replace(k, "/", " v", 1)) {
				t.Fatalf("%s: %s does not say why its content is withheld: %s", p, k, render(v))
			}
			if b := byClass(v, "badge"); text(b) != "tampered" {
				t.Fatalf("%s: %s badge %s", p, k, render(b))
			}
			if byClass(v, "content") != nil {
				t.Fatalf("%s: %s has content", p, k)
			}
			// The blob failed before the spine entry: the writer is the
			// one the row's commit names, and says so.
			if wr := byClass(v, "writer"); wr != nil && text(wr) != v2.Writer+" (unproven: as its commit names it)" {
				t.Fatalf("%s: %s writer %q", p, k, text(wr))
			}
		}
	}
	doc := getPage(t, hs, "/tasks/TP-1", http.StatusOK)
	if !strings.Contains(doc, "third body, gamma") {
		t.Fatal("the intact latest version is not shown")
	}
	// The integrity panel counts them, first on the page.
	in := find(t, doc, func(n *html.Node) bool { return attr(n, "id") == "integrity" })
	if len(in) != 1 || attr(in[0], "data-state") != "tampered" || attr(in[0], "data-tampered") != "2" || attr(in[0], "data-verified") != "2" ||
		attr(in[0], "data-total") != "4" || !strings.Contains(text(in[0]), "2 of 4 versions tampered") {
		t.Fatalf("the integrity panel: %v", in)
	}
	vs := versions(t, doc)
	// A tampered earlier version is never collapsed out of sight, and its
	// card says what failed once.
	s2 := vs["summary/2"]
	for p := s2.Parent; p != nil; p = p.Parent {
		if p.Data == "details" {
			t.Fatalf("the tampered v2 is inside a <details>: %s", render(p))
		}
	}
	if p := s2.Parent.Parent; !strings.Contains(attr(p, "class"), "flagged-list") {
		t.Fatalf("the tampered v2 is not in the flagged list: %s", render(p))
	}
	reason := text(byClass(s2, "withheld-reason"))
	if reason == "" || strings.Count(text(s2), reason) != 1 || byClass(s2, "state-reason") != nil {
		t.Fatalf("the card of v2 does not say what failed exactly once: %s", render(s2))
	}
	if g := find(t, doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "data-key") == "summary" }); len(g) != 1 ||
		!strings.Contains(attr(g[0], "class"), "has-tampered") || !strings.Contains(text(g[0]), "1 tampered") {
		t.Fatalf("the group of summary does not say it holds a tampered version")
	}
	// The task list reads it tampered.
	rows := find(t, getPage(t, hs, "/", http.StatusOK), func(n *html.Node) bool { return n.Data == "tr" && has(n, "data-task") })
	if len(rows) != 1 || attr(rows[0], "data-integrity") != "tampered" || !strings.Contains(attr(rows[0], "class"), "integrity-tampered") {
		t.Fatalf("the task list: %v", rows)
	}
}

// tamperBlobs makes every object of the repository at dir loose and flips
// one byte of each blob, inside the marker it holds.
func tamperBlobs(t *testing.T, dir string, blobs map[string]string) {
	t.Helper()
	packDir := filepath.Join(dir, ".git", "objects", "pack")
	packs, _ := filepath.Glob(filepath.Join(packDir, "*.pack"))
	stash := t.TempDir()
	for _, p := range packs {
		// A pack gone here was merged by a compaction still running:
		// the caller must let it finish (close its store) first.
		if err := os.Rename(p, filepath.Join(stash, filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
		os.Remove(strings.TrimSuffix(p, ".pack") + ".idx")
	}
	for _, p := range packs {
		data, err := os.ReadFile(filepath.Join(stash, filepath.Base(p)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "-C", dir, "unpack-objects", "-q")
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("unpack-objects: %v %s", err, out)
		}
	}
	for blob, marker := range blobs {
		path := filepath.Join(dir, ".git", "objects", blob[:2], blob[2:])
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("loose blob: %v", err)
		}
		zr, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		i := bytes.Index(plain, []byte(marker))
		if i < 0 {
			t.Fatalf("blob %s does not hold %q", blob, marker)
		}
		plain[i+len(marker)-1] ^= 0x01
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write(plain)
		zw.Close()
		os.Chmod(path, 0o644)
		if err := os.WriteFile(path, z.Bytes(), 0o444); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPageTable4096: a table at the row limit, about as large as a payload
// may be, renders every row in its scrolling box, fast and in a page of
// reasonable size.
func TestPageTable4096(t *testing.T) {
	r := newTaskRepo(t, "BIG-1")
	cols := []string{"id", "name", "value", "note"}
	rows := make([][]string, artifact.MaxRows)
	for i := range rows {
		rows[i] = []string{strconv.Itoa(i), fmt.Sprintf("row <b>%d</b>", i), strings.Repeat("v", 150), fmt.Sprintf("note & %d", i)}
	}
	p := artifact.Payload{Type: artifact.TypeTable, Columns: cols, Rows: rows}
	b, err := p.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < artifact.MaxPayloadBytes*3/4 {
		t.Fatalf("payload of %d bytes: make it larger", len(b))
	}
	r.postPayload("big", p)
	_, hs := pageServer(t, r.dir, r.home)
	start := time.Now()
	code, _, doc := get(t, hs, "/tasks/BIG-1")
	took := time.Since(start)
	if code != http.StatusOK {
		t.Fatalf("%d", code)
	}
	if took > 5*time.Second {
		t.Fatalf("the page took %v", took)
	}
	if len(doc) > 4*artifact.MaxPayloadBytes {
		t.Fatalf("the page is %d bytes for a payload of %d", len(doc), len(b))
	}
	checkInert(t, "table page", doc)
	tables := find(t, doc, func(n *html.Node) bool { return n.Data == "table" && attr(n, "class") == "data-table" })
	if len(tables) != 1 || attr(tables[0], "data-rows") != "4096" || attr(tables[0], "data-columns") != "4" {
		t.Fatalf("tables: %d", len(tables))
	}
	if wrap := tables[0].Parent; !strings.Contains(attr(wrap, "class"), "table-wrap") {
		t.Fatalf("the table is not in its scrolling box: %s", render(wrap))
	}
	n := strings.Count(doc, "<tr><th scope=\"row\"")
	if n != artifact.MaxRows {
		t.Fatalf("%d rows rendered", n)
	}
	if n := strings.Count(doc, `<td class="l">`); n != artifact.MaxRows {
		t.Fatalf("%d long cells marked to wrap, want %d", n, artifact.MaxRows)
	}
	if !strings.Contains(doc, "<td>row &lt;b&gt;4095&lt;/b&gt;</td>") {
		t.Fatal("the last row is missing or unescaped")
	}
	t.Logf("%d-byte payload: %d-byte page in %v", len(b), len(doc), took)
}

// TestPageLiveContract: what the task page's script relies on. The stream
// URL in the page resumes from the bus's last event at render time, so a
// post landing between the render and the connection still arrives; each
// task.artifact names a version whose fragment the page can fetch.
func TestPageLiveContract(t *testing.T) {
	r := newTaskRepo(t, "LV:1")
	srv, hs := pageServer(t, r.dir, r.home)
	scan := func() {
		t.Helper()
		if err := srv.Bus().Scan(); err != nil {
			t.Fatal(err)
		}
	}
	scan() // the first scan takes the repository as it is
	start := srv.Bus().LastID()
	r.post("summary", "first")
	scan()
	doc := getPage(t, hs, "/tasks/LV%3A1", http.StatusOK)
	b := find(t, doc, func(n *html.Node) bool { return n.Data == "body" })[0]
	events := attr(b, "data-events")
	if want := fmt.Sprintf("%s?task=LV%%3A1&last_event_id=%d", server.EventsPath, srv.Bus().LastID()); events != want || srv.Bus().LastID() == start {
		t.Fatalf("data-events %q, want %q", events, want)
	}
	if v := versions(t, doc)["summary/1"]; v == nil {
		t.Fatal("v1 is not on the page")
	}
	// Posted after the render, before the script connects.
	r.post("summary", "second, before the connection")
	scan()
	c := connect(t, hs.URL+events, "")
	defer c.close()
	if e := c.next(server.EventArtifact); e.Data["key"] != "summary" || e.Data["version"] != float64(2) {
		t.Fatalf("first event after the render: %s", e.Raw)
	}
	frag := getPage(t, hs, "/tasks/LV%3A1/fragments/versions/summary/2", http.StatusOK)
	if v := versions(t, frag)["summary/2"]; v == nil || !strings.Contains(text(v), "second, before the connection") {
		t.Fatalf("version fragment: %s", frag)
	}
	r.post("notes", "a new key, live")
	scan()
	e := c.next(server.EventArtifact)
	if e.Data["key"] != "notes" || e.Data["version"] != float64(1) {
		t.Fatalf("event %s", e.Raw)
	}
	frag = getPage(t, hs, "/tasks/LV%3A1/fragments/artifacts/notes", http.StatusOK)
	if v := versions(t, frag)["notes/1"]; v == nil || attr(v, "data-state") != "verified" || !strings.Contains(text(v), "a new key, live") ||
		attr(v, "data-journal-index") != fmt.Sprint(e.Data["journal_index"]) {
		t.Fatalf("group fragment: %s", frag)
	}
}
