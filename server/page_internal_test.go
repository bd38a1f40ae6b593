package server

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// A forged row can carry what no validator lets in (a key, an actor, a
// writer, a commit id of any text); a page renders even that inert.
const hostile = `"><script>alert(1)</script><img src=x onerror=alert(1)> ' onmouseover='alert(1)' javascript:alert(1)`

func TestRenderHostileRowData(t *testing.T) {
	v := versionView{
		Task: "T" + hostile, Key: "k" + hostile, Version: 1, Type: "report" + hostile, LinkKind: hostile,
		State: "tampered", Reason: hostile, Actor: hostile, Writer: hostile, JournalIndex: 3,
		At:         &bernstein.RunPosition{JournalIndex: 2, Commit: hostile},
		SpineEntry: "sha256:" + hostile, ContentHash: hostile, Path: VersionPath("T"+hostile, "k"+hostile, 1),
		Withheld: hostile,
	}
	shown := v
	shown.State, shown.Withheld, shown.Content = "verified", "", true
	shown.Version = 2
	shown.Body = content{Link: &linkView{URL: "javascript:alert(1)", Kind: hostile, Safe: true}}
	table := shown
	table.Version = 3
	table.Body = content{Table: &artifact.Payload{Type: "table", Columns: []string{hostile}, Rows: [][]string{{hostile}}}}
	g := group{Task: v.Task, Key: v.Key, Type: hostile, Latest: table, History: []versionView{shown}, Flagged: []versionView{v},
		DiffPath: DiffPath(v.Task, v.Key), Numbers: []int64{3, 2, 1}, From: 2, To: 3, PinLink: "/tasks/x?pin=" + hostile}
	iv := integrityView{Task: hostile, TaskIntegrity: bernstein.TaskIntegrity{State: hostile, Reason: hostile, ProgressProof: hostile,
		JournalIdentity: hostile, JournalIdentityReason: hostile}, Identity: hostile}
	tl := timeline{Task: hostile, Rows: 2, Shown: 2, Width: hostile, Height: 10, Line: hostile, LineBox: hostile, Left: hostile, Span: hostile,
		FaultAt: 1, FaultReason: hostile, Marks: []tlMark{{Index: 0, Kind: hostile, Label: hostile, What: hostile, Moved: hostile, X: hostile,
			Class: hostile, Proof: hostile, Actor: hostile, Work: true, Version: &tlVersion{Key: hostile, State: hostile, X: hostile, Anchor: "#" + hostile}}},
		Versions: []tlVersion{{Key: hostile, State: hostile, X: hostile, Anchor: "#" + hostile}}, Ticks: []tlTick{{X: hostile, Label: hostile}}}
	kp := keyPanel{Task: hostile, Path: TaskPath(hostile), Groups: []group{g}, All: 2, Matching: 1, Filter: hostile, Pins: hostile,
		Index: []keyChip{{Key: hostile, Anchor: "#artifact-" + hostile, State: hostile, Tampered: 1, Pinned: true}}, Page: 1, Pages: 2, Next: "/tasks/x?kpage=2"}
	st := strip{Task: v.Task, Phase: hostile, Claim: hostile, P: progress.Wire{VectorHash: hostile,
		Proof: progress.Proof{State: hostile, RowsAtFault: []record.RowFault{{Chain: hostile, Writer: hostile, State: hostile, Reason: hostile}}}}}
	for _, c := range []struct {
		name string
		data any
	}{{"group", g}, {"version", v}, {"version", shown}, {"strip", st}, {"integrity", iv}, {"timeline", tl}, {"keys", kp},
		{"problem", problemPage{Status: 404, Message: hostile}}} {
		var b bytes.Buffer
		if err := templates()["task"].ExecuteTemplate(&b, c.name, c.data); err != nil {
			t.Fatal(err)
		}
		assertInert(t, c.name, b.String())
		if strings.Contains(b.String(), "<script>alert") || strings.Contains(b.String(), "<img src=x") {
			t.Fatalf("%s: %s", c.name, b.String())
		}
	}
	tp := page{Title: hostile, Body: body{Page: "task", Task: hostile, TaskPath: TaskPath(hostile), Events: eventsURL(hostile, 7), LastEventID: "7"},
		Main: &taskPage{Info: &bernstein.TaskInfo{ID: hostile, Title: hostile}, Integrity: iv, Strip: st, Timeline: tl, Keys: kp}}
	var b bytes.Buffer
	if err := templates()["task"].ExecuteTemplate(&b, "base", tp); err != nil {
		t.Fatal(err)
	}
	assertInert(t, "page", b.String())

	// The comparison page, with what a payload can carry on every side.
	side := versionRef{ArtifactVersionDoc: bernstein.ArtifactVersionDoc{Key: hostile, Version: 1, Type: hostile, LinkKind: hostile, State: hostile,
		Reason: hostile, Actor: hostile}, Path: VersionPath(hostile, hostile, 1), Anchor: TaskPath(hostile) + "#" + hostile, Why: true}
	td := &artifact.TableDiff{ColumnsAdded: []string{hostile}, ColumnsRemoved: []string{hostile}, Rows: []artifact.RowChange{
		{Change: artifact.RowChanged, From: 1, To: 1, Row: []string{hostile}, Cells: []artifact.CellChange{{Column: hostile, From: hostile, To: hostile}}},
		{Change: artifact.RowRemoved, From: 2, Row: []string{hostile}}}}
	rd := artifact.CompareText(hostile+"\n", hostile+"x\n")
	for _, d := range []*artifact.Diff{
		{FromType: hostile, ToType: "report", Report: rd},
		{FromType: "table", ToType: "table", Table: td},
		{FromType: "link", ToType: "link", Link: &artifact.LinkDiff{FromURL: "javascript:alert(1)", ToURL: hostile, URLChanged: true, FromKind: hostile, ToKind: hostile, KindChanged: true}},
		nil,
	} {
		dp := diffPage{Task: hostile, Key: hostile, TaskPath: TaskPath(hostile), Path: DiffPath(hostile, hostile), From: side, To: side, Numbers: []int64{1},
			Doc: &bernstein.ArtifactDiffDoc{Diff: d, Refused: hostile}}
		if d != nil {
			dp.Doc.Refused = ""
		}
		if d != nil && d.Table != nil {
			dp.Table = newTableDiffView([]string{hostile}, []string{hostile}, td)
		}
		var b bytes.Buffer
		if err := templates()["diff"].ExecuteTemplate(&b, "base", page{Title: hostile, Body: body{Page: "diff", Task: hostile}, Main: dp}); err != nil {
			t.Fatal(err)
		}
		assertInert(t, "diff page", b.String())
		if strings.Contains(b.String(), "<script>alert") || strings.Contains(b.String(), "<img src=x") || strings.Contains(b.String(), `href="javascript`) {
			t.Fatalf("diff page: %s", b.String())
		}
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

func TestWebURL(t *testing.T) {
	for u, want := range map[string]bool{
		"https://example.com": true, "HTTP://example.com/x": true, "javascript:alert(1)": false, "JavaScript:alert(1)": false,
		"//example.com": false, "/local": false, "data:text/html,x": false, "https:///nohost": false, "vbscript:x": false,
	} {
		if webURL(u) != want {
			t.Errorf("webURL(%q) = %v", u, !want)
		}
	}
}

func TestRenderMarkdownSanitizes(t *testing.T) {
	out, err := renderMarkdown("<script>alert(1)</script>\n\n[a](javascript:alert(1)) [b](https://example.com) ![c](https://example.com/c.png) <b onclick=x>d</b>\n\n# h {#progress-strip}")
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, bad := range []string{"<script", "javascript:", "<img", "onclick", "id=", "<b"} {
		if strings.Contains(s, bad) {
			t.Errorf("%q in %s", bad, s)
		}
	}
	if !strings.Contains(s, `<a href="https://example.com" rel="nofollow noreferrer noopener" target="_blank">b</a>`) {
		t.Errorf("link: %s", s)
	}
}

// assertInert fails on any script, event handler, style or non-web URL.
func assertInert(t *testing.T, where, doc string) {
	t.Helper()
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script":
				ok := false
				for _, a := range n.Attr {
					ok = ok || a.Key == "src" && strings.HasPrefix(a.Val, AssetsPrefix+"app.js?v=")
				}
				if !ok || n.FirstChild != nil {
					t.Fatalf("%s: a script: %s", where, doc)
				}
			case "img", "iframe", "object", "embed", "style":
				t.Fatalf("%s: element %s: %s", where, n.Data, doc)
			case "svg":
				if c := attr(n, "class"); c != "timeline-chart" && c != "line-box" {
					t.Fatalf("%s: element svg: %s", where, doc)
				}
			case "form":
				if attr(n, "method") != "get" || !strings.HasPrefix(attr(n, "action"), "/") || strings.HasPrefix(attr(n, "action"), "//") {
					t.Fatalf("%s: form: %s", where, doc)
				}
			}
			for _, a := range n.Attr {
				k, v := strings.ToLower(a.Key), strings.ToLower(strings.TrimSpace(a.Val))
				if strings.HasPrefix(k, "on") || k == "style" {
					t.Fatalf("%s: attribute %s", where, k)
				}
				if (k == "href" || k == "src") && !(strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "//") ||
					strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "#") || v == "data:,") {
					t.Fatalf("%s: %s=%q", where, k, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
}
