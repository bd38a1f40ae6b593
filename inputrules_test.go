package bernstein_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

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
