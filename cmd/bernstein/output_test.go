package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestTableBox: on a terminal, tables are drawn as the table library the
// CLI used before drew them (the expected boxes below are that library's
// output for the same rows): header centred and as written, cells
// left-aligned and trimmed, line breaks within a cell, wide and combining
// characters measured by display width, short rows padded.
func TestTableBox(t *testing.T) {
	for _, c := range []struct {
		name   string
		header []string
		rows   [][]string
		want   string
	}{
		{"multi-line, tab, wide", []string{"KEY", "VERSION", "a", "日本語"},
			[][]string{{"summary", "3", "multi\nline cell", "x"}, {"k", "12", "tab\there", "wide 漢字 here"}}, `┌─────────┬─────────┬─────────────┬────────────────┐
│   KEY   │ VERSION │      a      │     日本語     │
├─────────┼─────────┼─────────────┼────────────────┤
│ summary │ 3       │ multi       │ x              │
│         │         │ line cell   │                │
│ k       │ 12      │ tab    here │ wide 漢字 here │
└─────────┴─────────┴─────────────┴────────────────┘
`},
		{"header only", []string{"A"}, nil, `┌───┐
│ A │
└───┘
`},
		{"uneven rows", []string{"A", "B"}, [][]string{{"only one"}, {"1", "2", "3"}}, `┌──────────┬───┬───┐
│    A     │ B │   │
├──────────┼───┼───┤
│ only one │   │   │
│ 1        │ 2 │ 3 │
└──────────┴───┴───┘
`},
		{"trimmed, combining", []string{"H1", "h 2"}, [][]string{{"  padded  ", "e\u0301"}}, `┌────────┬─────┐
│   H1   │ h 2 │
├────────┼─────┤
│ padded │ é   │
└────────┴─────┘
`},
	} {
		var out bytes.Buffer
		tb := newTable(&IO{Out: &out, IsTTY: true}, c.header...)
		for _, r := range c.rows {
			tb.row(r...)
		}
		if err := tb.render(); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want {
			t.Errorf("%s:\n got:\n%s\nwant:\n%s", c.name, out.String(), c.want)
		}
	}
}

// TestTablePiped: piped, a table is tab-separated lines without a header.
func TestTablePiped(t *testing.T) {
	var out bytes.Buffer
	tb := newTable(&IO{Out: &out}, "KEY", "VERSION")
	tb.row("summary", "3")
	tb.row("k", "12")
	if err := tb.render(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "summary\t3\nk\t12\n" {
		t.Fatalf("%q", out.String())
	}
}

// TestTableCellControls: a cell cannot move a terminal's cursor: line
// breaks of any kind become lines, other control characters U+FFFD.
func TestTableCellControls(t *testing.T) {
	var out bytes.Buffer
	tb := newTable(&IO{Out: &out, IsTTY: true}, "C")
	tb.row("a\r\nb\rc\x1b[2Jd\u009be")
	if err := tb.render(); err != nil {
		t.Fatal(err)
	}
	want := "┌──────────┐\n│    C     │\n├──────────┤\n│ a        │\n│ b        │\n│ c\ufffd[2Jd\ufffde │\n└──────────┘\n"
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	if strings.ContainsAny(out.String(), "\x1b\r\u009b") {
		t.Fatalf("control characters left: %q", out.String())
	}
}
