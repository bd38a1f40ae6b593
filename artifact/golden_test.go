package artifact

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/record"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current code")

const (
	goldenDir    = "testdata/golden"
	goldenHashes = goldenDir + "/hashes.txt"
)

// goldenPayloads are pinned: their canonical bytes are what a version's blob
// holds, and their hashes are the content hashes rows and spines carry.
var goldenPayloads = map[string]Payload{
	"report": {Type: TypeReport, Body: "# Summary\n\nAll *green*: 42 tests, 0 failures.\n"},
	"report_unicode_escapes": {Type: TypeReport, Body: "## Ünïcödé ✓ 😀\n\n" +
		"quote \" backslash \\ slash / tab\there\r\nCRLF\n" +
		"<html> & 'single' \u2028 line sep, \u00a0 nbsp, \ufb33, \U0001F600, \u05d0"},
	"table": {Type: TypeTable, Columns: []string{"name", "passed", "ratio"}, Rows: [][]string{
		{"parser", "12", "0.5"},
		{"lexer", "7", "1"},
	}},
	"table_empty_rows": {Type: TypeTable, Columns: []string{"only column"}, Rows: nil},
	"table_unicode_escapes": {Type: TypeTable, Columns: []string{"clé", "\"quoted\"", "back\\slash", "emoji 😀"}, Rows: [][]string{
		{"é", "a\tb", "line1\nline2", ""},
		{"\u2028", "/", "<&>", "\U0001F600\ufb33"},
	}},
	"link_preview":   {Type: TypeLink, URL: "https://preview.example.com/pr/42?x=1&y=%20#frag", LinkKind: LinkPreview},
	"link_dashboard": {Type: TypeLink, URL: "http://grafana.internal:3000/d/abc", LinkKind: LinkDashboard},
	"link_document":  {Type: TypeLink, URL: "https://docs.example.org/ü/spec.pdf", LinkKind: LinkDocument},
}

func TestGoldenPayloads(t *testing.T) {
	names := make([]string, 0, len(goldenPayloads))
	for n := range goldenPayloads {
		names = append(names, n)
	}
	sort.Strings(names)
	got := map[string][]byte{}
	for _, n := range names {
		p := goldenPayloads[n]
		b, err := p.Canonical()
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		got[n] = b
		// Parse inverts Canonical.
		q, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: Parse: %v", n, err)
		}
		want := p
		if want.Type == TypeTable && want.Rows == nil {
			want.Rows = [][]string{}
		}
		if !reflect.DeepEqual(q, want) {
			t.Errorf("%s: Parse(Canonical(p)) = %#v, want %#v", n, q, want)
		}
	}
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(goldenDir, n+".json"), got[n], 0o644); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, n+" "+string(record.Sum(got[n])))
		}
		if err := os.WriteFile(goldenHashes, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	hashes := map[string]record.Hash{}
	f, err := os.Open(goldenHashes)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n, h, ok := strings.Cut(sc.Text(), " ")
		if !ok || !record.Hash(h).Valid() {
			t.Fatalf("bad hashes line %q", sc.Text())
		}
		hashes[n] = record.Hash(h)
	}
	if len(hashes) != len(names) {
		t.Errorf("%s has %d entries, want %d", goldenHashes, len(hashes), len(names))
	}
	for _, n := range names {
		want, err := os.ReadFile(filepath.Join(goldenDir, n+".json"))
		if err != nil {
			t.Errorf("%s: %v (run go test -update)", n, err)
			continue
		}
		if !bytes.Equal(got[n], want) {
			t.Errorf("%s: canonical bytes changed\n got: %s\nwant: %s", n, got[n], want)
		}
		if h := record.Sum(got[n]); h != hashes[n] {
			t.Errorf("%s: content hash %s, golden %s", n, h, hashes[n])
		}
		if err := record.CheckCanonical(want); err != nil {
			t.Errorf("%s: golden file not canonical: %v", n, err)
		}
	}
}

// TestPayloadCanonicalPinned spells out a few canonical forms literally, so
// they are checked even when the goldens are regenerated.
func TestPayloadCanonicalPinned(t *testing.T) {
	cases := []struct {
		p    Payload
		want string
	}{
		{Payload{Type: TypeReport, Body: "hi"}, `{"body":"hi","type":"report","v":1}`},
		{Payload{Type: TypeTable, Columns: []string{"b", "a"}}, `{"columns":["b","a"],"rows":[],"type":"table","v":1}`},
		{Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{}}, `{"columns":["a"],"rows":[],"type":"table","v":1}`},
		{Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"<\"é\">"}}}, `{"columns":["a"],"rows":[["<\"é\">"]],"type":"table","v":1}`},
		{Payload{Type: TypeLink, URL: "https://x.y/a?b=<c>", LinkKind: LinkDocument}, `{"link_kind":"document","type":"link","url":"https://x.y/a?b=<c>","v":1}`},
		{Payload{Type: TypeReport, Body: "a\tb\r\nc\u2028"}, "{\"body\":\"a\\tb\\r\\nc\u2028\",\"type\":\"report\",\"v\":1}"},
	}
	for _, c := range cases {
		b, err := c.p.Canonical()
		if err != nil || string(b) != c.want {
			t.Errorf("Canonical(%+v) = %s, %v\nwant %s", c.p, b, err, c.want)
		}
	}
}
