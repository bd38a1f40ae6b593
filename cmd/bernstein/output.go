package main

import (
	"bytes"
	"sort"
	"strings"

	"github.com/clipperhouse/displaywidth"
)

// table renders rows as a box-drawn table on a terminal and as
// tab-separated lines (no header) when piped, so scripts get stable
// columns. The box is drawn here rather than by a table library: every
// command links this file, and a table library's package initialisation
// (width caches, regular expressions) would be paid at every start, piped
// or not (docs/performance.md, Start-up).
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
		drawBox(&b, t.header, t.rows)
	}
	_, err := t.io.Out.Write([]byte(b.String()))
	return err
}

// drawBox draws header and rows in a box:
//
//	┌─────────┬─────────┐
//	│   KEY   │ VERSION │
//	├─────────┼─────────┤
//	│ summary │ 3       │
//	└─────────┴─────────┘
//
// Header names are centred and shown as they are (not upper-cased, so
// that columns "a" and "A" stay apart); cells are left-aligned, trimmed of
// surrounding spaces, and a cell with line breaks takes several lines.
// Widths are display widths (wide East Asian characters count two columns,
// combining marks none). A row shorter than the widest gets empty cells.
func drawBox(b *strings.Builder, header []string, rows [][]string) {
	cols := len(header)
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	if cols == 0 {
		return
	}
	split := func(r []string) [][]string {
		out := make([][]string, cols)
		for i := range out {
			if i < len(r) {
				out[i] = cellLines(r[i])
			} else {
				out[i] = []string{""}
			}
		}
		return out
	}
	head := split(header)
	body := make([][][]string, len(rows))
	for i, r := range rows {
		body[i] = split(r)
	}
	widths := make([]int, cols)
	measure := func(cells [][]string) {
		for c, lines := range cells {
			for _, l := range lines {
				widths[c] = max(widths[c], displaywidth.String(l))
			}
		}
	}
	if len(header) > 0 {
		measure(head)
	}
	for _, cells := range body {
		measure(cells)
	}
	rule := func(left, mid, right string) {
		b.WriteString(left)
		for c, w := range widths {
			if c > 0 {
				b.WriteString(mid)
			}
			b.WriteString(strings.Repeat("─", w+2))
		}
		b.WriteString(right)
		b.WriteByte('\n')
	}
	line := func(cells [][]string, centre bool) {
		height := 1
		for _, lines := range cells {
			height = max(height, len(lines))
		}
		for n := 0; n < height; n++ {
			b.WriteString("│")
			for c, lines := range cells {
				s := ""
				if n < len(lines) {
					s = lines[n]
				}
				pad := widths[c] - displaywidth.String(s)
				left := 0
				if centre {
					left = pad / 2
				}
				b.WriteByte(' ')
				b.WriteString(strings.Repeat(" ", left))
				b.WriteString(s)
				b.WriteString(strings.Repeat(" ", pad-left))
				b.WriteString(" │")
			}
			b.WriteByte('\n')
		}
	}
	rule("┌", "┬", "┐")
	if len(header) > 0 {
		line(head, true)
		if len(body) > 0 {
			rule("├", "┼", "┤")
		}
	}
	for _, cells := range body {
		line(cells, false)
	}
	rule("└", "┴", "┘")
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

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
