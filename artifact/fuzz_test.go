package artifact

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/record"
)

// FuzzPayloadValidate builds payloads of every type from fuzzed strings: a
// payload that validates encodes canonically and parses back to itself; a
// refusal is always an *InputError naming a field.
func FuzzPayloadValidate(f *testing.F) {
	f.Add(uint8(0), "# hi\n", "a,b", "1,2", "https://a.b/", "preview")
	f.Add(uint8(1), "", "name,é", "\"x,y\",\u2028", "javascript:alert(1)", "video")
	f.Add(uint8(2), "\x00", ",", "", "http://:80/", "document")
	f.Add(uint8(3), " ", "a,a", "1", "https://h/\x7f", "dashboard")
	f.Fuzz(func(t *testing.T, kind uint8, body, colsCSV, rowCSV, url, linkKind string) {
		var p Payload
		switch kind % 4 {
		case 0:
			p = Payload{Type: TypeReport, Body: body}
		case 1:
			c, _ := ParseCSVRecord("columns", colsCSV)
			r, _ := ParseCSVRecord("row", rowCSV)
			p = Payload{Type: TypeTable, Columns: c, Rows: [][]string{r}}
		case 2:
			p = Payload{Type: TypeLink, URL: url, LinkKind: linkKind}
		case 3:
			p = Payload{Type: body, Body: rowCSV, URL: url, LinkKind: linkKind}
		}
		verr := p.Validate()
		b, cerr := p.Canonical()
		for _, err := range []error{verr, cerr} {
			var ie *InputError
			if err != nil && (!errors.As(err, &ie) || ie.Field == "" || strings.Contains(err.Error(), "\n")) {
				t.Fatalf("refusal %v is not a one-line InputError naming a field", err)
			}
		}
		if verr != nil {
			if cerr == nil {
				t.Fatalf("Validate refused (%v) but Canonical accepted %+v", verr, p)
			}
			return
		}
		if cerr != nil {
			var ie *InputError
			if !errors.As(cerr, &ie) || ie.Field != "payload" || len(b) != 0 {
				t.Fatalf("valid payload refused by Canonical: %v", cerr)
			}
			return
		}
		if len(b) > MaxPayloadBytes {
			t.Fatalf("canonical form of %d bytes accepted", len(b))
		}
		if err := record.CheckCanonical(b); err != nil {
			t.Fatalf("Canonical output not canonical: %v", err)
		}
		q, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(Canonical(p)) = %v for %q", err, b)
		}
		want := p
		if want.Type == TypeTable && want.Rows == nil {
			want.Rows = [][]string{}
		}
		if !reflect.DeepEqual(q, want) {
			t.Fatalf("Parse(Canonical(p)) = %#v, want %#v", q, want)
		}
		if p.Type == TypeLink && !(strings.HasPrefix(strings.ToLower(p.URL), "http://") || strings.HasPrefix(strings.ToLower(p.URL), "https://")) {
			t.Fatalf("accepted URL %q", p.URL)
		}
	})
}

// FuzzParse: whatever Parse accepts is a valid payload whose canonical bytes
// are exactly the input.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"Body":"evil","body":"hi","type":"report","v":1}`))
	f.Add([]byte(`{"columns":["a"],"rows":null,"type":"table","v":1}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := Parse(in)
		if err != nil {
			return
		}
		// A stored payload is held to the format's rules, not to the
		// input-only ones (a link URL without credentials).
		if err := p.validate(false); err != nil {
			t.Fatalf("Parse accepted an invalid payload %q: %v", in, err)
		}
		b, err := p.canonical(false)
		if err != nil || !bytes.Equal(b, in) {
			t.Fatalf("Parse(%q) re-encodes to %q, %v", in, b, err)
		}
	})
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", ".a", "a/b", "a\n", strings.Repeat("k", 128), strings.Repeat("k", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		ok := key != "" && len(key) <= MaxKeyBytes && isAlnum(key[0])
		for i := 0; ok && i < len(key); i++ {
			ok = isAlnum(key[i]) || strings.IndexByte("_.-", key[i]) >= 0
		}
		if (err == nil) != ok {
			t.Fatalf("ValidateKey(%q) = %v, want ok=%v", key, err, ok)
		}
	})
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
