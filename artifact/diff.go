package artifact

import (
	"fmt"
	"strconv"
	"strings"
)

// Comparing two versions of an artifact (docs/cli.md, "Comparing versions"):
// a report by the lines of its markdown, a table by rows and cells, a link by
// its URL and kind. Pure: the caller verifies both versions first and hands
// over their payloads.

// Change kinds of a table row.
const (
	RowAdded   = "added"
	RowRemoved = "removed"
	RowChanged = "changed"
)

// Line ops of a hunk.
const (
	LineContext = "context"
	LineAdded   = "added"
	LineRemoved = "removed"
)

// DiffContext is the number of unchanged lines a hunk shows around a change,
// as diff -u and git diff do.
const DiffContext = 3

// maxEdits bounds the edit script searched line by line. Past it, what is
// left between the common head and tail is shown as removed whole and added
// whole: a correct diff, not a minimal one, at a bounded cost.
const maxEdits = 1000

// Diff is what changed from one payload (From) to another (To). Exactly one
// of Report, Table and Link is set: Report for two reports, or for two
// payloads of different types (compared by their text forms); Table for two
// tables; Link for two links.
type Diff struct {
	FromType string      `json:"from_type"`
	ToType   string      `json:"to_type"`
	Same     bool        `json:"same"`
	Report   *ReportDiff `json:"report"`
	Table    *TableDiff  `json:"table"`
	Link     *LinkDiff   `json:"link"`
}

// ReportDiff is a line diff of two texts: the hunks, and the same as one
// unified diff.
type ReportDiff struct {
	Added   int    `json:"added"`
	Removed int    `json:"removed"`
	Hunks   []Hunk `json:"hunks"`
	// Unified is the diff in the unified format without its file header
	// lines (the surface names the versions): "" when the texts are equal.
	Unified string `json:"unified"`
}

// Hunk is one run of changes with its context. Starts are 1-based line
// numbers; a side with no lines starts at the line before (0 at the top),
// as in the unified format.
type Hunk struct {
	FromStart int        `json:"from_start"`
	FromLines int        `json:"from_lines"`
	ToStart   int        `json:"to_start"`
	ToLines   int        `json:"to_lines"`
	Lines     []DiffLine `json:"lines"`
}

// DiffLine is one line of a hunk. NoNewline marks the last line of a text
// that does not end in a line break ("\\ No newline at end of file").
type DiffLine struct {
	Op        string `json:"op"` // context, added, removed
	Text      string `json:"text"`
	NoNewline bool   `json:"no_newline"`
}

// TableDiff compares two tables. Rows are matched on the columns both tables
// have (by name); a removed row followed by an added one is the same row
// changed, and its changed cells are named by column. Row numbers are
// 1-based.
type TableDiff struct {
	Columns        []string    `json:"columns"` // the To table's
	ColumnsAdded   []string    `json:"columns_added"`
	ColumnsRemoved []string    `json:"columns_removed"`
	RowsAdded      int         `json:"rows_added"`
	RowsRemoved    int         `json:"rows_removed"`
	RowsChanged    int         `json:"rows_changed"`
	RowsSame       int         `json:"rows_same"`
	Rows           []RowChange `json:"rows"`
}

// RowChange is one row that is not the same in both tables.
type RowChange struct {
	Change string `json:"change"` // added, removed, changed
	// From and To are the row's numbers in each table (0 where it is not).
	From int `json:"from"`
	To   int `json:"to"`
	// Row is the row's cells: To's for added and changed, From's for removed.
	Row   []string     `json:"row"`
	Cells []CellChange `json:"cells"` // changed: the cells that differ
}

// CellChange is one cell of a changed row.
type CellChange struct {
	Column string `json:"column"`
	From   string `json:"from"`
	To     string `json:"to"`
}

// LinkDiff compares two links.
type LinkDiff struct {
	FromURL     string `json:"from_url"`
	ToURL       string `json:"to_url"`
	URLChanged  bool   `json:"url_changed"`
	FromKind    string `json:"from_kind"`
	ToKind      string `json:"to_kind"`
	KindChanged bool   `json:"kind_changed"`
}

// Compare compares payload from with payload to.
func Compare(from, to Payload) Diff {
	d := Diff{FromType: from.Type, ToType: to.Type}
	switch {
	case from.Type == TypeTable && to.Type == TypeTable:
		d.Table = compareTables(from, to)
		d.Same = d.Table.RowsAdded+d.Table.RowsRemoved+d.Table.RowsChanged == 0 &&
			len(d.Table.ColumnsAdded)+len(d.Table.ColumnsRemoved) == 0 && strings.Join(from.Columns, "\x00") == strings.Join(to.Columns, "\x00")
	case from.Type == TypeLink && to.Type == TypeLink:
		d.Link = &LinkDiff{FromURL: from.URL, ToURL: to.URL, URLChanged: from.URL != to.URL,
			FromKind: from.LinkKind, ToKind: to.LinkKind, KindChanged: from.LinkKind != to.LinkKind}
		d.Same = !d.Link.URLChanged && !d.Link.KindChanged
	default:
		d.Report = CompareText(Text(from), Text(to))
		d.Same = from.Type == to.Type && d.Report.Added+d.Report.Removed == 0
	}
	return d
}

// CompareText diffs two texts line by line.
func CompareText(from, to string) *ReportDiff {
	a, b := splitLines(from), splitLines(to)
	ops := diffSeq(len(a), len(b), func(i, j int) bool { return a[i] == b[j] })
	rd := &ReportDiff{Hunks: []Hunk{}}
	for _, op := range ops {
		switch op.kind {
		case opDel:
			rd.Removed++
		case opIns:
			rd.Added++
		}
	}
	rd.Hunks = hunks(ops, a, b)
	var u strings.Builder
	for _, h := range rd.Hunks {
		fmt.Fprintf(&u, "@@ -%s +%s @@\n", span(h.FromStart, h.FromLines), span(h.ToStart, h.ToLines))
		for _, l := range h.Lines {
			switch l.Op {
			case LineAdded:
				u.WriteByte('+')
			case LineRemoved:
				u.WriteByte('-')
			default:
				u.WriteByte(' ')
			}
			u.WriteString(l.Text)
			u.WriteByte('\n')
			if l.NoNewline {
				u.WriteString("\\ No newline at end of file\n")
			}
		}
	}
	rd.Unified = u.String()
	return rd
}

// span is a hunk side as the unified format writes it: "start,count", or
// "start" alone for a count of 1.
func span(start, n int) string {
	if n == 1 {
		return strconv.Itoa(start)
	}
	return strconv.Itoa(start) + "," + strconv.Itoa(n)
}

// noEOL marks, inside the comparison only, a last line without a line
// break: "a" at the end of a text is not the line "a\n".
const noEOL = "\x00"

// splitLines splits text into lines without their ends. A last line without
// an end counts as a line (marked noEOL); an empty text has none.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if lines[len(lines)-1] == "" {
		return lines[:len(lines)-1]
	}
	lines[len(lines)-1] += noEOL
	return lines
}

// diffLine is a line of a hunk, its noEOL mark turned into NoNewline.
func diffLine(op, text string) DiffLine {
	if t, ok := strings.CutSuffix(text, noEOL); ok {
		return DiffLine{Op: op, Text: t, NoNewline: true}
	}
	return DiffLine{Op: op, Text: text}
}

// Text is a payload's text form: a report's markdown, a table as the rows
// of a GitHub-flavoured markdown table (one line a row; "|" and line breaks
// in a cell escaped), a link as its URL and kind. It is what 'artifact
// diff' compares payloads of different types by, and what git's textconv
// shows (docs/format.md, "Diffing with git").
func Text(p Payload) string {
	switch p.Type {
	case TypeReport:
		return p.Body
	case TypeTable:
		var b strings.Builder
		b.WriteString(mdRow(p.Columns))
		seps := make([]string, len(p.Columns))
		for i := range seps {
			seps[i] = "---"
		}
		b.WriteString("|" + strings.Join(seps, "|") + "|\n")
		for _, r := range p.Rows {
			b.WriteString(mdRow(r))
		}
		return b.String()
	case TypeLink:
		return "link: " + p.URL + "\nkind: " + p.LinkKind + "\n"
	}
	return ""
}

// mdRow is one markdown table row.
func mdRow(cells []string) string {
	esc := make([]string, len(cells))
	for i, c := range cells {
		esc[i] = " " + EscapeCell(c) + " "
	}
	return "|" + strings.Join(esc, "|") + "|\n"
}

// EscapeCell writes a cell on one line: "\" as "\\", "|" as "\|", a line
// break as "\n", a carriage return as "\r", a tab as "\t".
func EscapeCell(c string) string {
	if !strings.ContainsAny(c, "\\|\n\r\t") {
		return c
	}
	r := strings.NewReplacer(`\`, `\\`, "|", `\|`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return r.Replace(c)
}

func compareTables(from, to Payload) *TableDiff {
	td := &TableDiff{Columns: to.Columns, ColumnsAdded: []string{}, ColumnsRemoved: []string{}, Rows: []RowChange{}}
	fromCol := map[string]int{}
	for i, c := range from.Columns {
		fromCol[c] = i
	}
	toCol := map[string]int{}
	for i, c := range to.Columns {
		toCol[c] = i
	}
	// The columns both have, in To's order: rows are compared on these.
	type pair struct {
		name string
		f, t int
	}
	var common []pair
	for i, c := range to.Columns {
		if f, ok := fromCol[c]; ok {
			common = append(common, pair{c, f, i})
		} else {
			td.ColumnsAdded = append(td.ColumnsAdded, c)
		}
	}
	for _, c := range from.Columns {
		if _, ok := toCol[c]; !ok {
			td.ColumnsRemoved = append(td.ColumnsRemoved, c)
		}
	}
	cell := func(row []string, i int) string {
		if i < len(row) {
			return row[i]
		}
		return ""
	}
	key := func(row []string, side int) string {
		var b strings.Builder
		for _, p := range common {
			i := p.t
			if side == 0 {
				i = p.f
			}
			c := cell(row, i)
			b.WriteString(strconv.Itoa(len(c)))
			b.WriteByte(':')
			b.WriteString(c)
		}
		return b.String()
	}
	fk := make([]string, len(from.Rows))
	for i, r := range from.Rows {
		fk[i] = key(r, 0)
	}
	tk := make([]string, len(to.Rows))
	for i, r := range to.Rows {
		tk[i] = key(r, 1)
	}
	ops := diffSeq(len(fk), len(tk), func(i, j int) bool { return fk[i] == tk[j] })
	changed := func(fi, ti int) RowChange {
		rc := RowChange{Change: RowChanged, From: fi + 1, To: ti + 1, Row: to.Rows[ti]}
		for _, p := range common {
			if a, b := cell(from.Rows[fi], p.f), cell(to.Rows[ti], p.t); a != b {
				rc.Cells = append(rc.Cells, CellChange{Column: p.name, From: a, To: b})
			}
		}
		return rc
	}
	// alike: rows that agree on at least half of the common columns.
	alike := func(f, t []string) bool {
		same := 0
		for _, p := range common {
			if cell(f, p.f) == cell(t, p.t) {
				same++
			}
		}
		return 2*same >= len(common) && same > 0
	}
	// A block of removed rows next to a block of added ones: the same rows
	// changed. A row pairs first with one whose first common cell is the
	// same (a keyed table: "parse" stays "parse"), then in order with one
	// it is alike; the others are removed and added.
	for i := 0; i < len(ops); {
		if ops[i].kind == opEq {
			td.RowsSame++
			i++
			continue
		}
		var dels, ins []int
		for ; i < len(ops) && ops[i].kind != opEq; i++ {
			if ops[i].kind == opDel {
				dels = append(dels, ops[i].a)
			} else {
				ins = append(ins, ops[i].b)
			}
		}
		pairOf := map[int]int{} // ins index -> del index
		usedDel := map[int]bool{}
		if len(common) > 0 {
			for _, ti := range ins {
				for _, fi := range dels {
					if !usedDel[fi] && cell(from.Rows[fi], common[0].f) == cell(to.Rows[ti], common[0].t) {
						pairOf[ti], usedDel[fi] = fi, true
						break
					}
				}
			}
		}
		var freeDel []int
		for _, fi := range dels {
			if !usedDel[fi] {
				freeDel = append(freeDel, fi)
			}
		}
		for _, ti := range ins {
			if _, ok := pairOf[ti]; !ok && len(freeDel) > 0 && alike(from.Rows[freeDel[0]], to.Rows[ti]) {
				pairOf[ti], usedDel[freeDel[0]] = freeDel[0], true
				freeDel = freeDel[1:]
			}
		}
		// Removed rows first (at their place in From), then To's rows in
		// order, each added or changed.
		for _, fi := range dels {
			if !usedDel[fi] {
				td.Rows = append(td.Rows, RowChange{Change: RowRemoved, From: fi + 1, Row: from.Rows[fi]})
				td.RowsRemoved++
			}
		}
		for _, ti := range ins {
			if fi, ok := pairOf[ti]; ok {
				td.Rows = append(td.Rows, changed(fi, ti))
				td.RowsChanged++
			} else {
				td.Rows = append(td.Rows, RowChange{Change: RowAdded, To: ti + 1, Row: to.Rows[ti]})
				td.RowsAdded++
			}
		}
	}
	return td
}

// --- sequences ---

const (
	opEq = iota
	opDel
	opIns
)

// edit is one step of an edit script: a line (or row) of a kept (eq),
// removed (del) or of b added (ins).
type edit struct {
	kind int
	a, b int // indexes into a and b (a for del, b for ins, both for eq)
}

// diffSeq is a shortest edit script from a sequence of n items to one of m
// (Myers' algorithm), with eq telling items apart. The common head and tail
// are taken off first; past maxEdits the middle is replaced whole.
func diffSeq(n, m int, eq func(i, j int) bool) []edit {
	head := 0
	for head < n && head < m && eq(head, head) {
		head++
	}
	tail := 0
	for tail < n-head && tail < m-head && eq(n-1-tail, m-1-tail) {
		tail++
	}
	out := make([]edit, 0, n+m)
	for i := 0; i < head; i++ {
		out = append(out, edit{opEq, i, i})
	}
	out = append(out, myers(head, n-tail, head, m-tail, eq)...)
	for k := tail; k > 0; k-- {
		out = append(out, edit{opEq, n - k, m - k})
	}
	return out
}

// myers is the edit script from a[a0:a1] to b[b0:b1]: the forward greedy
// search, keeping each round's furthest reaching paths to trace the script
// back.
func myers(a0, a1, b0, b1 int, eq func(i, j int) bool) []edit {
	n, m := a1-a0, b1-b0
	whole := func() []edit {
		out := make([]edit, 0, n+m)
		for i := a0; i < a1; i++ {
			out = append(out, edit{opDel, i, 0})
		}
		for j := b0; j < b1; j++ {
			out = append(out, edit{opIns, 0, j})
		}
		return out
	}
	if n == 0 || m == 0 {
		return whole()
	}
	limit := min(n+m, maxEdits)
	off := limit + 1
	v := make([]int, 2*off+1) // v[off+k]: the furthest x reached on diagonal k = x-y
	// trace[d] holds v[-d..d] after round d.
	var trace [][]int32
	found := -1
	for d := 0; d <= limit && found < 0; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down from diagonal k+1: an insertion
			} else {
				x = v[off+k-1] + 1 // right from diagonal k-1: a deletion
			}
			y := x - k
			for x < n && y < m && eq(a0+x, b0+y) {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
			}
		}
		row := make([]int32, 2*d+1)
		for k := -d; k <= d; k++ {
			row[k+d] = int32(v[off+k])
		}
		trace = append(trace, row)
	}
	if found < 0 {
		return whole()
	}
	var rev []edit
	x, y := n, m
	for d := found; d > 0; d-- {
		prev := trace[d-1]
		at := func(k int) int { return int(prev[k+d-1]) }
		k := x - y
		pk := k - 1
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, edit{opEq, a0 + x, b0 + y})
		}
		if pk == k+1 {
			rev = append(rev, edit{opIns, 0, b0 + py})
		} else {
			rev = append(rev, edit{opDel, a0 + px, 0})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, edit{opEq, a0 + x, b0 + y})
	}
	out := make([]edit, 0, len(rev))
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return groupChanges(out)
}

// groupChanges orders each run of changes as its deletions, then its
// insertions, as unified diffs show them.
func groupChanges(ops []edit) []edit {
	out := make([]edit, 0, len(ops))
	for i := 0; i < len(ops); {
		if ops[i].kind == opEq {
			out = append(out, ops[i])
			i++
			continue
		}
		j := i
		for j < len(ops) && ops[j].kind != opEq {
			j++
		}
		for _, e := range ops[i:j] {
			if e.kind == opDel {
				out = append(out, e)
			}
		}
		for _, e := range ops[i:j] {
			if e.kind == opIns {
				out = append(out, e)
			}
		}
		i = j
	}
	return out
}

// hunks groups an edit script into hunks with DiffContext lines of context:
// changes closer than twice that share a hunk, as diff -u makes them.
func hunks(ops []edit, a, b []string) []Hunk {
	out := []Hunk{}
	// aPos and bPos: the 0-based line each op starts at, on each side.
	aPos, bPos := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for i, op := range ops {
		aPos[i+1], bPos[i+1] = aPos[i], bPos[i]
		if op.kind != opIns {
			aPos[i+1]++
		}
		if op.kind != opDel {
			bPos[i+1]++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == opEq {
			i++
			continue
		}
		first, last := i, i
		for j := i + 1; j < len(ops); j++ {
			if ops[j].kind == opEq {
				continue
			}
			if j-last-1 > 2*DiffContext {
				break
			}
			last = j
		}
		lo, hi := max(first-DiffContext, 0), min(last+DiffContext, len(ops)-1)
		h := Hunk{FromStart: aPos[lo], ToStart: bPos[lo]}
		for _, op := range ops[lo : hi+1] {
			switch op.kind {
			case opEq:
				h.Lines = append(h.Lines, diffLine(LineContext, a[op.a]))
				h.FromLines++
				h.ToLines++
			case opDel:
				h.Lines = append(h.Lines, diffLine(LineRemoved, a[op.a]))
				h.FromLines++
			case opIns:
				h.Lines = append(h.Lines, diffLine(LineAdded, b[op.b]))
				h.ToLines++
			}
		}
		// 1-based starts; a side with no lines names the line before it.
		if h.FromLines > 0 {
			h.FromStart++
		}
		if h.ToLines > 0 {
			h.ToStart++
		}
		out = append(out, h)
		i = hi + 1
	}
	return out
}
