package tests

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestLinkCredentialsWriteNothing: a link whose URL carries a user name or
// password is bad input on every path into the store (Post, PostAsCaller,
// the CLI): one line naming url and saying why, without the secret, and
// nothing written (no ref moves, no object, no audit entry).
func TestLinkCredentialsWriteNothing(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T-1", "agent")
	f.post(s, "T-1", "summary", "agent", tok, report("fine"))
	refsBefore, objectsBefore := f.refsSnapshot(), f.objectFiles()

	urls := []string{
		"https://user:s3cr3t@host.example/",
		"https://s3cr3t@host.example/dash",
		"http://user:s3cr3t@127.0.0.1:3000/d/x",
		"HTTPS://USER:s3cr3t@HOST.EXAMPLE/",
	}
	for _, u := range urls {
		p := artifact.Payload{Type: artifact.TypeLink, URL: u, LinkKind: artifact.LinkDashboard}
		for name, post := range map[string]func(bernstein.PostRequest) (*bernstein.PostResult, error){
			"Post": s.Post, "PostAsCaller": s.PostAsCaller,
		} {
			_, err := post(bernstein.PostRequest{Task: "T-1", Key: "dash", Agent: "agent", ClaimToken: tok, Payload: p})
			var ie *artifact.InputError
			if !errors.As(err, &ie) || ie.Field != "url" {
				t.Fatalf("%s %s = %v, want an input error on url", name, u, err)
			}
			if msg := err.Error(); strings.Contains(msg, "s3cr3t") || !strings.Contains(msg, "password") || strings.Contains(msg, "\n") {
				t.Fatalf("%s %s: error %q", name, u, msg)
			}
		}
		out, errOut, code := f.cli("", "artifact", "post", "T-1", "dash", "--agent", "agent", "--claim-token", tok,
			"--type", "link", "--url", u, "--kind", "dashboard")
		line := strings.TrimSpace(errOut)
		if code != 1 || out != "" || !strings.HasPrefix(line, "bernstein: invalid url: ") || strings.Contains(line, "\n") || strings.Contains(line, "s3cr3t") {
			t.Fatalf("CLI post of %s: exit %d, stdout %q, stderr %q", u, code, out, errOut)
		}
	}
	if f.refsSnapshot() != refsBefore || !reflect.DeepEqual(f.objectFiles(), objectsBefore) {
		t.Fatal("a link with credentials wrote something")
	}
	// The same link without them is posted.
	f.post(s, "T-1", "dash", "agent", tok, artifact.Payload{Type: artifact.TypeLink, URL: "https://host.example/@team?by=a@b", LinkKind: artifact.LinkDashboard})
}

// TestCSVBOMThroughCLI: a CSV file with a UTF-8 byte-order mark (as
// spreadsheets save it) posts the column names without it, from --csv and
// from --column/--row.
func TestCSVBOMThroughCLI(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "T-1", "agent")
	s.Close()
	post := func(stdin, key string, args ...string) artifact.Payload {
		t.Helper()
		args = append([]string{"artifact", "post", "T-1", key, "--agent", "agent", "--claim-token", tok, "--type", "table", "--output-json"}, args...)
		out, errOut, code := f.cli(stdin, args...)
		if code != 0 {
			t.Fatalf("post %s: exit %d: %s", key, code, errOut)
		}
		var res struct {
			Blob string `json:"blob"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Blob == "" {
			t.Fatalf("post %s: %q: %v", key, out, err)
		}
		p, err := artifact.Parse([]byte(f.git("cat-file", "blob", res.Blob)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := []string{"name", "score"}
	if p := post("\ufeffname,score\r\nann,3\r\n", "csv", "--csv", "-"); !reflect.DeepEqual(p.Columns, want) || !reflect.DeepEqual(p.Rows, [][]string{{"ann", "3"}}) {
		t.Errorf("--csv with a BOM: columns %q rows %q", p.Columns, p.Rows)
	}
	if p := post("", "rows", "--column", "name", "--column", "score", "--row", "\ufeffann,3"); !reflect.DeepEqual(p.Rows, [][]string{{"ann", "3"}}) {
		t.Errorf("--row with a BOM: rows %q", p.Rows)
	}
	// A column name given as such that starts with a BOM is refused, not
	// changed, and nothing is written; through the library too (MCP and
	// HTTP post through it).
	before := f.refsSnapshot()
	_, errOut, code := f.cli("", "artifact", "post", "T-1", "named", "--agent", "agent", "--claim-token", tok, "--type", "table", "--column", "name", "--column", "\ufeffscore", "--row", "ann,3")
	if code != 1 || errOut != "bernstein: invalid columns[1]: starts with a byte-order mark (U+FEFF), which does not show but makes it another name: remove it\n" {
		t.Errorf("--column with a BOM: exit %d, %q", code, errOut)
	}
	s = f.open()
	defer s.Close()
	_, err := s.Post(bernstein.PostRequest{Task: "T-1", Key: "named", Agent: "agent", ClaimToken: tok,
		Payload: artifact.Payload{Type: artifact.TypeTable, Columns: []string{"\ufeffname"}, Rows: [][]string{}}})
	var in *artifact.InputError
	if !errors.As(err, &in) || in.Field != "columns[0]" {
		t.Errorf("Post with a BOM column: %v", err)
	}
	if after := f.refsSnapshot(); after != before {
		t.Errorf("a refused column wrote refs:\n%s\n%s", before, after)
	}
}
