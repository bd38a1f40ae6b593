package artifact

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTableFromCSV(t *testing.T) {
	cases := []struct {
		name string
		in   string
		cols []string
		rows [][]string
	}{
		{"header and rows", "name,score\nann,3\nbob,4\n", []string{"name", "score"}, [][]string{{"ann", "3"}, {"bob", "4"}}},
		{"no final newline", "a,b\n1,2", []string{"a", "b"}, [][]string{{"1", "2"}}},
		{"CRLF", "a,b\r\n1,2\r\n", []string{"a", "b"}, [][]string{{"1", "2"}}},
		{"header only", "a,b\n", []string{"a", "b"}, [][]string{}},
		{"quoted comma newline quote", "a,b\n\"x,y\",\"multi\nline \"\"q\"\"\"\n", []string{"a", "b"}, [][]string{{"x,y", "multi\nline \"q\""}}},
		{"blank lines skipped", "a\n\n1\n\n2\n", []string{"a"}, [][]string{{"1"}, {"2"}}},
		{"spaces kept", " a , b \n 1 , 2 \n", []string{" a ", " b "}, [][]string{{" 1 ", " 2 "}}},
		{"ragged rows kept for Validate", "a,b\n1\n1,2,3\n", []string{"a", "b"}, [][]string{{"1"}, {"1", "2", "3"}}},
		{"unicode", "clé,😀\né,\u2028\n", []string{"clé", "😀"}, [][]string{{"é", "\u2028"}}},
		{"empty cells", "a,b\n,\n", []string{"a", "b"}, [][]string{{"", ""}}},
		// A UTF-8 byte-order mark (Excel's "CSV UTF-8") is not part of the
		// first column's name; one elsewhere is data and is kept.
		{"BOM", "\ufeffa,b\n1,2\n", []string{"a", "b"}, [][]string{{"1", "2"}}},
		{"BOM CRLF", "\ufeffa,b\r\n1,2\r\n", []string{"a", "b"}, [][]string{{"1", "2"}}},
		{"BOM before a quoted name", "\ufeff\"a,x\",b\n", []string{"a,x", "b"}, [][]string{}},
		{"BOM header only", "\ufeffonly", []string{"only"}, [][]string{}},
		{"BOM inside a cell kept", "a\n\ufeffx\n", []string{"a"}, [][]string{{"\ufeffx"}}},
		{"second BOM kept", "\ufeff\ufeffa\n", []string{"\ufeffa"}, [][]string{}},
	}
	for _, c := range cases {
		p, err := TableFromCSV(strings.NewReader(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if p.Type != TypeTable || !reflect.DeepEqual(p.Columns, c.cols) || !reflect.DeepEqual(p.Rows, c.rows) {
			t.Errorf("%s: got %q %q, want %q %q", c.name, p.Columns, p.Rows, c.cols, c.rows)
		}
		if p.Rows == nil {
			t.Errorf("%s: Rows is nil, want an empty table", c.name)
		}
	}
	// A ragged table comes back from CSV and is then refused by Validate.
	p, _ := TableFromCSV(strings.NewReader("a,b\n1\n"))
	var ie *InputError
	if err := p.Validate(); !errors.As(err, &ie) || ie.Field != "rows[0]" {
		t.Errorf("ragged CSV table: Validate = %v, want an error on rows[0]", err)
	}
	// A header-only CSV is a valid empty table whose canonical form has rows [].
	p, _ = TableFromCSV(strings.NewReader("only\n"))
	if b, err := p.Canonical(); err != nil || string(b) != `{"columns":["only"],"rows":[],"type":"table","v":1}` {
		t.Errorf("header-only table canonical = %s, %v", b, err)
	}

	for name, in := range map[string]string{
		"empty":            "",
		"only blank lines": "\n\n",
		"bare quote":       "a,b\nx\"y,1\n",
		"unterminated":     "a\n\"open\n",
		"text after quote": "a\n\"x\"y\n",
		"BOM alone":        "\ufeff",
		"BOM and newline":  "\ufeff\n",
	} {
		_, err := TableFromCSV(strings.NewReader(in))
		if !errors.As(err, &ie) || ie.Field != "csv" {
			t.Errorf("%s: TableFromCSV = %v, want an InputError on csv", name, err)
		}
	}
}

func TestParseCSVRecord(t *testing.T) {
	good := map[string][]string{
		"a,b,c":            {"a", "b", "c"},
		"a,b\n":            {"a", "b"},
		"a,b\r\n":          {"a", "b"},
		"single":           {"single"},
		"":                 {""},
		",":                {"", ""},
		`"x,y",z`:          {"x,y", "z"},
		`a,"b""c"`:         {"a", `b"c`},
		"\"two\nlines\",x": {"two\nlines", "x"},
		" sp , ace ":       {" sp ", " ace "},
		"é,😀":              {"é", "😀"},
		"a,b\n\n":          {"a", "b"},
		"\ufeffa,b":        {"a", "b"},
		"\ufeff\"x,y\",z":  {"x,y", "z"},
		"\ufeff":           {""},
		"a,\ufeffb":        {"a", "\ufeffb"},
	}
	for in, want := range good {
		got, err := ParseCSVRecord("row", in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseCSVRecord(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"a\nb", "a,b\nc,d\n", `"open`, `x"y`, `"x"y`} {
		_, err := ParseCSVRecord("column", in)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "column" {
			t.Errorf("ParseCSVRecord(%q) = %v, want an InputError on column", in, err)
		}
	}
}

// TestCSVBOMNeverNamesAColumn: whatever a BOM-prefixed CSV holds, its first
// column name never starts with the mark, and it reads as the same CSV
// without it.
func TestCSVBOMNeverNamesAColumn(t *testing.T) {
	for _, in := range []string{"a,b\n1,2\n", "a\n", "\"a\"\n", "a;b\n", "\"\",x\n"} {
		plain, err1 := TableFromCSV(strings.NewReader(in))
		bom, err2 := TableFromCSV(strings.NewReader("\ufeff" + in))
		if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(plain, bom) {
			t.Errorf("%q: with a BOM %q, %v; without %q, %v", in, bom.Columns, err2, plain.Columns, err1)
		}
		if len(bom.Columns) > 0 && strings.HasPrefix(bom.Columns[0], "\ufeff") {
			t.Errorf("%q: first column %q keeps the BOM", in, bom.Columns[0])
		}
	}
}
