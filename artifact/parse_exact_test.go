package artifact

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParseExact: the direct path takes only what the general path accepts,
// and reads it the same way; the general path is the oracle.
func FuzzParseExact(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"body":"hi","type":"report","v":1}`,
		`{"body":"hi","type":"report","v":2}`,
		`{"body":"hi","type":"link","v":1}`,
		`{"body":"h\u00e9","type":"report","v":1}`,
		`{"columns":["a"],"rows":null,"type":"table","v":1}`,
		`{"columns":["a","b"],"rows":[["1","2"]],"type":"table","v":1}`,
		`{"columns":["a"],"rows":[["1","2"]],"type":"table","v":1}`,
		`{"link_kind":"preview","type":"link","url":"https://example.org/x","v":1}`,
		`{"link_kind":"preview","type":"link","url":"https://u:p@example.org/","v":1}`,
		`{"link_kind":"other","type":"link","url":"https://example.org/","v":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p, ok := parseExact(in)
		if !ok {
			return
		}
		want, err := parseGeneral(in)
		if err != nil {
			t.Fatalf("direct path accepts %q, general path refuses: %v", in, err)
		}
		if !reflect.DeepEqual(p, want) {
			t.Fatalf("direct path reads %q as %+v, general path as %+v", in, p, want)
		}
	})
}

// TestParseExactTakesWhatPostsWrite: the payloads of every type that posts
// write take the direct path.
func TestParseExactTakesWhatPostsWrite(t *testing.T) {
	for _, p := range []Payload{
		{Type: TypeReport, Body: "# title\n\nbody é"},
		{Type: TypeTable, Columns: []string{"a", "b"}, Rows: [][]string{{"1", "2"}, {"3", ""}}},
		{Type: TypeTable, Columns: []string{"a"}},
		{Type: TypeLink, URL: "https://example.org/x?y=1", LinkKind: LinkPreview},
	} {
		b, err := p.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseExact(b)
		if !ok {
			t.Fatalf("%s payload %q does not take the direct path", p.Type, b)
		}
		want, err := parseGeneral(b)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: direct %+v, general %+v, %v", b, got, want, err)
		}
		if c, _ := got.Canonical(); !bytes.Equal(c, b) {
			t.Fatalf("%q re-encodes to %q", b, c)
		}
	}
}
