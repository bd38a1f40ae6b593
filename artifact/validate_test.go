package artifact

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// reportOverhead is len(`{"body":"","type":"report","v":1}`).
const reportOverhead = 33

func cols(n int) []string {
	c := make([]string, n)
	for i := range c {
		c[i] = "c" + strings.Repeat("x", i)
	}
	return c
}

func rowsOf(n, width int) [][]string {
	r := make([][]string, n)
	for i := range r {
		r[i] = make([]string, width)
	}
	return r
}

func TestBadInputNamesTheField(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	url4097 := "https://h.example/" + long(4097-len("https://h.example/"))
	cases := []struct {
		name  string
		p     Payload
		field string
	}{
		{"report empty body", Payload{Type: TypeReport}, "body"},
		{"report white-space body", Payload{Type: TypeReport, Body: " \t\r\n \u00a0\u2028"}, "body"},
		{"report body over 1 MiB", Payload{Type: TypeReport, Body: long(MaxPayloadBytes + 1)}, "body"},
		{"report canonical 1 MiB + 1", Payload{Type: TypeReport, Body: long(MaxPayloadBytes - reportOverhead + 1)}, "payload"},
		{"report escapes push canonical over 1 MiB", Payload{Type: TypeReport, Body: "x" + strings.Repeat("\n", MaxPayloadBytes/2)}, "payload"},
		{"report NUL", Payload{Type: TypeReport, Body: "a\x00b"}, "body"},
		{"report ESC", Payload{Type: TypeReport, Body: "colour \x1b[31mred"}, "body"},
		{"report DEL", Payload{Type: TypeReport, Body: "a\x7fb"}, "body"},
		{"report U+0085", Payload{Type: TypeReport, Body: "a\u0085b"}, "body"},
		{"report vertical tab", Payload{Type: TypeReport, Body: "a\vb"}, "body"},
		{"report form feed", Payload{Type: TypeReport, Body: "a\fb"}, "body"},
		{"report invalid UTF-8", Payload{Type: TypeReport, Body: "a\xffb"}, "body"},
		{"report truncated UTF-8", Payload{Type: TypeReport, Body: "a\xe2\x82"}, "body"},
		{"report with columns", Payload{Type: TypeReport, Body: "x", Columns: []string{"a"}}, "artifact_type"},
		{"report with url", Payload{Type: TypeReport, Body: "x", URL: "https://a.b"}, "artifact_type"},
		{"missing type", Payload{Body: "x"}, "artifact_type"},
		{"unknown type", Payload{Type: "video", Body: "x"}, "artifact_type"},
		{"type in upper case", Payload{Type: "REPORT", Body: "x"}, "artifact_type"},

		{"table no columns", Payload{Type: TypeTable}, "columns"},
		{"table 65 columns", Payload{Type: TypeTable, Columns: cols(65)}, "columns"},
		{"table 4097 rows", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: rowsOf(4097, 1)}, "rows"},
		{"table short row", Payload{Type: TypeTable, Columns: []string{"a", "b"}, Rows: [][]string{{"1", "2"}, {"1"}}}, "rows[1]"},
		{"table long row", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"1", "2"}}}, "rows[0]"},
		{"table empty row", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{}}}, "rows[0]"},
		{"table 4097-character cell", Payload{Type: TypeTable, Columns: []string{"a", "b"}, Rows: [][]string{{"", strings.Repeat("é", 4097)}}}, "rows[0][1]"},
		{"table 4097-character column", Payload{Type: TypeTable, Columns: []string{long(4097)}}, "columns[0]"},
		{"table duplicate column", Payload{Type: TypeTable, Columns: []string{"a", "b", "a"}}, "columns[2]"},
		{"table empty column", Payload{Type: TypeTable, Columns: []string{"a", ""}}, "columns[1]"},
		{"table blank column", Payload{Type: TypeTable, Columns: []string{" \t"}}, "columns[0]"},
		{"table NUL in cell", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"x"}, {"\x00"}}}, "rows[1][0]"},
		{"table ESC in cell", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"\x1b"}}}, "rows[0][0]"},
		{"table DEL in cell", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"\x7f"}}}, "rows[0][0]"},
		{"table U+0085 in cell", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"\u0085"}}}, "rows[0][0]"},
		{"table invalid UTF-8 cell", Payload{Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"\xc0\xaf"}}}, "rows[0][0]"},
		{"table control in column", Payload{Type: TypeTable, Columns: []string{"a\x01"}}, "columns[0]"},
		{"table invalid UTF-8 column", Payload{Type: TypeTable, Columns: []string{"\xff"}}, "columns[0]"},
		{"table with body", Payload{Type: TypeTable, Columns: []string{"a"}, Body: "x"}, "artifact_type"},
		{"table canonical over 1 MiB", Payload{Type: TypeTable, Columns: []string{"a", "b", "c", "d"}, Rows: func() [][]string {
			r := rowsOf(4096, 4)
			for i := range r {
				for j := range r[i] {
					r[i][j] = long(70)
				}
			}
			return r
		}()}, "payload"},

		{"link kind video", Payload{Type: TypeLink, URL: "https://a.b/", LinkKind: "video"}, "link_kind"},
		{"link kind missing", Payload{Type: TypeLink, URL: "https://a.b/"}, "link_kind"},
		{"link kind upper case", Payload{Type: TypeLink, URL: "https://a.b/", LinkKind: "Preview"}, "link_kind"},
		{"link javascript", Payload{Type: TypeLink, URL: "javascript:alert(1)", LinkKind: LinkPreview}, "url"},
		{"link JavaScript mixed case", Payload{Type: TypeLink, URL: "JavaScript://a.b/%0Aalert(1)", LinkKind: LinkPreview}, "url"},
		{"link ftp", Payload{Type: TypeLink, URL: "ftp://files.example.com/x", LinkKind: LinkDocument}, "url"},
		{"link file", Payload{Type: TypeLink, URL: "file:///etc/passwd", LinkKind: LinkDocument}, "url"},
		{"link data", Payload{Type: TypeLink, URL: "data:text/html,<script>", LinkKind: LinkDocument}, "url"},
		{"link no scheme", Payload{Type: TypeLink, URL: "example.com/x", LinkKind: LinkDocument}, "url"},
		{"link scheme-relative", Payload{Type: TypeLink, URL: "//example.com/x", LinkKind: LinkDocument}, "url"},
		{"link no host", Payload{Type: TypeLink, URL: "https:///path", LinkKind: LinkDocument}, "url"},
		{"link opaque http", Payload{Type: TypeLink, URL: "http:example.com", LinkKind: LinkDocument}, "url"},
		{"link port only", Payload{Type: TypeLink, URL: "http://:8080/x", LinkKind: LinkDocument}, "url"},
		{"link user only", Payload{Type: TypeLink, URL: "http://user@/x", LinkKind: LinkDocument}, "url"},
		{"link user and password", Payload{Type: TypeLink, URL: "https://user:pass@host/", LinkKind: LinkDocument}, "url"},
		{"link user name", Payload{Type: TypeLink, URL: "https://user@host.example/x", LinkKind: LinkPreview}, "url"},
		{"link token as user", Payload{Type: TypeLink, URL: "https://ghp_0123456789abcdef@github.com/o/r", LinkKind: LinkDocument}, "url"},
		{"link empty password", Payload{Type: TypeLink, URL: "https://user:@host/", LinkKind: LinkDocument}, "url"},
		{"link empty userinfo", Payload{Type: TypeLink, URL: "https://@host/", LinkKind: LinkDocument}, "url"},
		{"link credentials and port", Payload{Type: TypeLink, URL: "http://u:p@127.0.0.1:8080/", LinkKind: LinkDashboard}, "url"},
		{"link credentials upper-case scheme", Payload{Type: TypeLink, URL: "HTTPS://U:P@HOST/", LinkKind: LinkDashboard}, "url"},
		{"link credentials ipv6", Payload{Type: TypeLink, URL: "http://u:p@[::1]:9/", LinkKind: LinkDashboard}, "url"},
		{"link escaped credentials", Payload{Type: TypeLink, URL: "https://us%40er:p%3Ass@host/", LinkKind: LinkDocument}, "url"},
		{"link empty", Payload{Type: TypeLink, LinkKind: LinkDocument}, "url"},
		{"link over 4096 characters", Payload{Type: TypeLink, URL: url4097, LinkKind: LinkDocument}, "url"},
		{"link NUL", Payload{Type: TypeLink, URL: "https://a.b/\x00", LinkKind: LinkDocument}, "url"},
		{"link ESC", Payload{Type: TypeLink, URL: "https://a.b/\x1b", LinkKind: LinkDocument}, "url"},
		{"link DEL", Payload{Type: TypeLink, URL: "https://a.b/\x7f", LinkKind: LinkDocument}, "url"},
		{"link U+0085", Payload{Type: TypeLink, URL: "https://a.b/\u0085", LinkKind: LinkDocument}, "url"},
		{"link newline", Payload{Type: TypeLink, URL: "https://a.b/\nx", LinkKind: LinkDocument}, "url"},
		{"link tab", Payload{Type: TypeLink, URL: "https://a.b/\tx", LinkKind: LinkDocument}, "url"},
		{"link space", Payload{Type: TypeLink, URL: "https://a.b/ x", LinkKind: LinkDocument}, "url"},
		{"link invalid UTF-8", Payload{Type: TypeLink, URL: "https://a.b/\xff", LinkKind: LinkDocument}, "url"},
		{"link bad escape", Payload{Type: TypeLink, URL: "https://a.b/%zz", LinkKind: LinkDocument}, "url"},
		{"link with body", Payload{Type: TypeLink, URL: "https://a.b/", LinkKind: LinkDocument, Body: "x"}, "artifact_type"},
		{"link with rows", Payload{Type: TypeLink, URL: "https://a.b/", LinkKind: LinkDocument, Rows: [][]string{}}, "artifact_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, op := range []struct {
				name string
				fn   func() error
			}{
				{"Validate", c.p.Validate},
				{"Canonical", func() error { b, err := c.p.Canonical(); _ = b; return err }},
			} {
				err := op.fn()
				if c.field == "payload" && op.name == "Validate" {
					// Only the encoded size is wrong: Validate passes, Canonical refuses.
					if err != nil {
						t.Errorf("Validate = %v, want nil (only the canonical size is over)", err)
					}
					continue
				}
				var ie *InputError
				if !errors.As(err, &ie) {
					t.Fatalf("%s = %v, want *InputError", op.name, err)
				}
				if ie.Field != c.field {
					t.Errorf("%s: field %q (%v), want %q", op.name, ie.Field, err, c.field)
				}
				if !strings.HasPrefix(err.Error(), c.field+": ") || ie.Msg == "" || strings.ContainsAny(err.Error(), "\n\x00") {
					t.Errorf("%s: message %q is not one line naming %q", op.name, err, c.field)
				}
			}
		})
	}
}

func TestGoodInputAccepted(t *testing.T) {
	cell4096 := strings.Repeat("é", 4096)
	url4096 := "https://h.example/" + strings.Repeat("a", 4096-len("https://h.example/"))
	cases := map[string]Payload{
		"report tab newline CR":     {Type: TypeReport, Body: "a\tb\nc\r\nd"},
		"report exactly 1 MiB":      {Type: TypeReport, Body: strings.Repeat("a", MaxPayloadBytes-reportOverhead)},
		"report unicode":            {Type: TypeReport, Body: "é 😀 \u2028 \u00a0"},
		"table 64 columns":          {Type: TypeTable, Columns: cols(64)},
		"table 4096 rows":           {Type: TypeTable, Columns: []string{"a"}, Rows: rowsOf(4096, 1)},
		"table 4096-character cell": {Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{cell4096}}},
		"table empty cells":         {Type: TypeTable, Columns: []string{"a", "b"}, Rows: [][]string{{"", ""}}},
		"table cell tab newline":    {Type: TypeTable, Columns: []string{"a"}, Rows: [][]string{{"x\ty\r\nz"}}},
		"table case-distinct cols":  {Type: TypeTable, Columns: []string{"a", "A", " a"}},
		"link 4096 characters":      {Type: TypeLink, URL: url4096, LinkKind: LinkPreview},
		"link upper-case scheme":    {Type: TypeLink, URL: "HTTPS://Example.COM/", LinkKind: LinkDashboard},
		"link ip and port":          {Type: TypeLink, URL: "http://127.0.0.1:8080/x", LinkKind: LinkDashboard},
		"link ipv6":                 {Type: TypeLink, URL: "http://[::1]:9/", LinkKind: LinkDashboard},
		"link unicode path":         {Type: TypeLink, URL: "https://a.b/é", LinkKind: LinkDocument},
		"link @ in path":            {Type: TypeLink, URL: "https://social.example/@user", LinkKind: LinkDocument},
		"link @ in query":           {Type: TypeLink, URL: "https://a.b/search?q=a@b.c", LinkKind: LinkDocument},
		"link @ in fragment":        {Type: TypeLink, URL: "https://a.b/#a@b", LinkKind: LinkDocument},
	}
	for name, p := range cases {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: Validate = %v", name, err)
			continue
		}
		b, err := p.Canonical()
		if err != nil {
			t.Errorf("%s: Canonical = %v", name, err)
			continue
		}
		if name == "report exactly 1 MiB" && len(b) != MaxPayloadBytes {
			t.Errorf("%s: canonical is %d bytes, want exactly %d", name, len(b), MaxPayloadBytes)
		}
		q, err := Parse(b)
		if err != nil {
			t.Errorf("%s: Parse = %v", name, err)
			continue
		}
		want := p
		if want.Type == TypeTable && want.Rows == nil {
			want.Rows = [][]string{}
		}
		if !reflect.DeepEqual(q, want) {
			t.Errorf("%s: Parse(Canonical(p)) differs", name)
		}
	}
}

func TestValidateKey(t *testing.T) {
	good := []string{"a", "A", "0", "summary", "results.v2", "a-b_c.d", "9lives", strings.Repeat("k", 128), "a..b", "a.lock", "x-"}
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	bad := []string{"", ".hidden", "-flag", "_private", "a/b", "a b", "a\x00b", "a\nb", "a\n", strings.Repeat("k", 129),
		"é", "a:b", "a\\b", "a*", "a%2E", "\x00", " a", "a\t", strings.Repeat("k", 128) + "\n"}
	for _, k := range bad {
		err := ValidateKey(k)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "key" {
			t.Errorf("ValidateKey(%q) = %v, want an InputError on key", k, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\n\x00") {
			t.Errorf("ValidateKey(%q): message %q spans lines or holds NUL", k, err)
		}
	}
}

func TestParseRefusals(t *testing.T) {
	cases := map[string]string{
		"not canonical":       `{"body":"hi", "type":"report","v":1}`,
		"trailing newline":    `{"body":"hi","type":"report","v":1}` + "\n",
		"unsorted":            `{"type":"report","body":"hi","v":1}`,
		"unknown field":       `{"body":"hi","extra":1,"type":"report","v":1}`,
		"field of other type": `{"body":"hi","columns":["a"],"type":"report","v":1}`,
		"version 2":           `{"body":"hi","type":"report","v":2}`,
		"no version":          `{"body":"hi","type":"report"}`,
		"unknown type":        `{"body":"hi","type":"video","v":1}`,
		"no type":             `{"body":"hi","v":1}`,
		"case-variant key":    `{"Body":"evil","body":"hi","type":"report","v":1}`,
		"upper-case type key": `{"TYPE":"report","body":"hi","v":1}`,
		"missing body":        `{"type":"report","v":1}`,
		"empty body":          `{"body":"","type":"report","v":1}`,
		"NUL in body":         `{"body":"\u0000","type":"report","v":1}`,
		"rows null":           `{"columns":["a"],"rows":null,"type":"table","v":1}`,
		"rows missing":        `{"columns":["a"],"type":"table","v":1}`,
		"ragged rows":         `{"columns":["a"],"rows":[["1","2"]],"type":"table","v":1}`,
		"numeric cell":        `{"columns":["a"],"rows":[[1]],"type":"table","v":1}`,
		"javascript link":     `{"link_kind":"preview","type":"link","url":"javascript:x","v":1}`,
		"link kind missing":   `{"type":"link","url":"https://a.b/","v":1}`,
		"array":               `[]`,
		"empty":               ``,
	}
	for name, in := range cases {
		if p, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: Parse(%s) = %+v, want an error", name, in, p)
		}
	}
}

// TestLinkCredentialsRefused: a URL with a user name or password is refused
// as input with one line that names url and says why, without repeating the
// secret; a payload a repository already holds still parses, so history
// written before the rule stays readable and verifiable.
func TestLinkCredentialsRefused(t *testing.T) {
	for _, u := range []string{
		"https://alice:s3cr3t-pw@host.example/dash",
		"https://s3cr3t-pw@host.example/",
		"https://alice:s3cr3t-pw@host.example/%zz", // also refused, for not parsing
		"https://alice:s3cr3t-pw@host.example:notaport/",
	} {
		p := Payload{Type: TypeLink, URL: u, LinkKind: LinkDashboard}
		err := p.Validate()
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "url" {
			t.Fatalf("%s: Validate = %v, want an InputError on url", u, err)
		}
		if _, cerr := p.Canonical(); cerr == nil || cerr.Error() != err.Error() {
			t.Errorf("%s: Canonical = %v, Validate = %v", u, cerr, err)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error repeats the secret: %v", u, err)
		}
		if strings.Contains(u, "%zz") || strings.Contains(u, "notaport") {
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "password") || !strings.Contains(msg, "remote") {
			t.Errorf("%s: %q does not say what is wrong and why", u, msg)
		}
	}

	// Stored before the rule: Parse accepts it and gives the same bytes back.
	stored := []byte(`{"link_kind":"document","type":"link","url":"https://u:p@host.example/x","v":1}`)
	p, err := Parse(stored)
	if err != nil {
		t.Fatalf("Parse of a stored link with credentials: %v", err)
	}
	if p.URL != "https://u:p@host.example/x" {
		t.Errorf("Parse = %+v", p)
	}
	if err := p.Validate(); err == nil {
		t.Error("the same payload as new input is accepted")
	}
}
