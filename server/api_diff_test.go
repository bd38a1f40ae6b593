package server_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestAPIDiff: GET .../artifacts/{key}/diff answers the document 'artifact
// diff --output-json' prints, for a report, a table and a link, by default
// and for versions named; a tampered side is refused (a 200 whose diff is
// null) and its content is nowhere in the answer; bad parameters are a 400
// and unknown versions a 404, each naming the parameter.
func TestAPIDiff(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T-1")
	r.post("summary", "# Notes\n\nline a\nline b\n")
	r.post("summary", "# Notes\n\nline a\nline B\nSECRET-V2\n")
	r.post("summary", "# Notes\n\nline a\nline c\n")
	table := func(rows ...string) {
		args := []string{"artifact", "post", r.task, "timings", "--type", "table", "--column", "step", "--column", "ms", "--agent", "agent-1", "--claim-token", r.token}
		for _, row := range rows {
			args = append(args, "--row", row)
		}
		r.cli(args...)
	}
	table("parse,12", "lex,7")
	table("parse,12", "lex,9", "link,3")
	for _, u := range []string{"https://a.example/1", "https://a.example/2"} {
		r.cli("artifact", "post", r.task, "site", "--type", "link", "--url", u, "--kind", "preview", "--agent", "agent-1", "--claim-token", r.token)
	}
	c := newAPIClient(t, r)

	for _, q := range [][]string{
		{"timings", ""}, {"site", ""}, {"summary", "?from=1&to=3", "1", "3"}, {"summary", "?from=3&to=1", "3", "1"},
	} {
		var api, cli any
		c.get("/tasks/T-1/artifacts/"+q[0]+"/diff"+q[1], 200, &api)
		r.cliJSON(&cli, append([]string{"artifact", "diff", "T-1", q[0], "--output-json"}, q[2:]...)...)
		sameDoc(t, "artifact diff "+q[0]+q[1], api, cli)
	}
	var d bernstein.ArtifactDiffDoc
	c.get("/tasks/T-1/artifacts/timings/diff", 200, &d)
	if d.From.Version != 1 || d.To.Version != 2 || d.Refused != "" || d.Diff == nil || d.Diff.Table == nil {
		t.Fatalf("table diff: %+v", d)
	}
	td := d.Diff.Table
	if td.RowsChanged != 1 || td.RowsAdded != 1 || len(td.Rows) != 2 || td.Rows[0].Change != artifact.RowChanged ||
		len(td.Rows[0].Cells) != 1 || td.Rows[0].Cells[0] != (artifact.CellChange{Column: "ms", From: "7", To: "9"}) {
		t.Errorf("table diff: %+v", td)
	}
	c.get("/tasks/T-1/artifacts/summary/diff?from=1&to=3", 200, &d)
	if d.Diff.Report == nil || !strings.Contains(d.Diff.Report.Unified, "-line b\n+line c\n") {
		t.Errorf("report diff: %+v", d.Diff)
	}

	// v2 tampered: refused wherever it is a side, compared elsewhere.
	var v2 bernstein.ArtifactShowDoc
	r.cliJSON(&v2, "artifact", "show", "T-1", "summary", "--version", "2", "--output-json")
	tamperBlob(t, r.dir, r.git("rev-parse", v2.Commit+":"+bernstein.ArtifactPath("summary", 2)), "SECRET")
	// A new server: the first one keeps its answers while the refs stay
	// (up to 10 s), and the tampering moved no ref.
	c = newAPIClient(t, r)
	for _, q := range []string{"", "?from=1&to=2", "?from=2"} {
		body := c.get("/tasks/T-1/artifacts/summary/diff"+q, 200, &d)
		if d.Diff != nil || !strings.HasPrefix(d.Refused, "v2 is tampered: ") || bytes.Contains(body, []byte("SECRET")) {
			t.Errorf("diff%s with v2 tampered: %s", q, body)
		}
		var api, cli any
		json.Unmarshal(body, &api)
		args := []string{"artifact", "diff", "T-1", "summary", "--output-json"}
		if q == "?from=1&to=2" {
			args = append(args, "1", "2")
		} else if q == "?from=2" {
			args = append(args, "2")
		}
		r.cliJSON(&cli, args...)
		sameDoc(t, "refused diff"+q, api, cli)
	}
	c.get("/tasks/T-1/artifacts/summary/diff?from=1&to=3", 200, &d)
	if d.Diff == nil || d.Refused != "" {
		t.Errorf("v1 against v3 with v2 tampered: %+v", d)
	}
	c.get("/tasks/T-1/artifacts/summary/diff?from=1&to=3&strict=true", 200, &d)
	if d.Diff == nil {
		t.Errorf("strict, both verified: %+v", d)
	}

	c.wantError("/tasks/T-1/artifacts/summary/diff?from=x", 400, "from")
	c.wantError("/tasks/T-1/artifacts/summary/diff?to=0", 400, "to")
	c.wantError("/tasks/T-1/artifacts/summary/diff?strict=maybe", 400, "strict")
	c.wantError("/tasks/T-1/artifacts/-bad/diff", 400, "key")
	c.wantError("/tasks/T-1/artifacts/summary/diff?from=9", 404, "from")
	c.wantError("/tasks/T-1/artifacts/summary/diff?from=1&to=9", 404, "to")
	c.wantError("/tasks/T-1/artifacts/nokey/diff", 404, "key")
	c.wantError("/tasks/T-9/artifacts/summary/diff", 404, "task_id")
	c.wantError("/tasks/T..1/artifacts/summary/diff", 400, "task_id")
	r.post("single", "one version")
	c.wantError("/tasks/T-1/artifacts/single/diff", 404, "from")
}
