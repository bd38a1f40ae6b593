package main

import (
	"io"
	"sort"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// table renders rows as a box-drawn table on a terminal, drawn by
// tablewriter, and as tab-separated lines (no header) when piped, so
// scripts get stable columns. The library's package initialisation is paid
// at every start, piped or not (docs/performance.md, Start-up, measures it).
type table struct {
	io     *IO
	header []string
	rows   [][]string
}

func newTable(io *IO, header ...string) *table {
	return &table{io: io, header: header}
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) render() error {
	var b strings.Builder
	if !t.io.IsTTY {
		for _, r := range t.rows {
			b.WriteString(strings.Join(r, "\t"))
			b.WriteByte('\n')
		}
	} else {
		return drawTable(t.io.Out, t.header, t.rows)
	}
	_, err := t.io.Out.Write([]byte(b.String()))
	return err
}

// cellLines splits a cell into the lines it shows: at line breaks (LF, CRLF
// or CR), tabs as four spaces, any other control character as U+FFFD (so
// that a cell cannot move the terminal's cursor), each line trimmed of
// surrounding spaces.
func cellLines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	s = strings.ReplaceAll(s, "\t", "    ")
	s = strings.Map(func(r rune) rune {
		if r != '\n' && (r < 0x20 || r >= 0x7f && r < 0xa0) {
			return '\uFFFD'
		}
		return r
	}, s)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return lines
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// drawTable draws header and rows in a box:
//
//	┌─────────┬─────────┐
//	│   KEY   │ VERSION │
//	├─────────┼─────────┤
//	│ summary │ 3       │
//	└─────────┴─────────┘
//
// Header names are centred and shown as they are (no auto-format: columns
// "a" and "A" stay apart); cells are left-aligned, trimmed of surrounding
// spaces, never wrapped, and a cell with line breaks takes several lines.
// Widths are display widths (wide East Asian characters count two columns,
// combining marks none). A row shorter than the widest gets empty cells.
func drawTable(w io.Writer, header []string, rows [][]string) error {
	cols := len(header)
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	if cols == 0 {
		return nil
	}
	clean := func(r []string) []string {
		out := make([]string, cols)
		for i := range out {
			if i < len(r) {
				out[i] = strings.Join(cellLines(r[i]), "\n")
			}
		}
		return out
	}
	tbl := tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignCenter),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
	)
	if len(header) > 0 {
		h := clean(header)
		hs := make([]any, len(h))
		for i, c := range h {
			hs[i] = c
		}
		tbl.Header(hs...)
	}
	for _, r := range rows {
		if err := tbl.Append(clean(r)); err != nil {
			return err
		}
	}
	return tbl.Render()
}
