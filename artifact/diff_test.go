package artifact

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// gnuDiffCounts counts the lines GNU diff (--minimal) adds and removes: an
// edit script it did not get from this package, of the shortest length.
func gnuDiffCounts(t *testing.T, dir, from, to string) (added, removed int) {
	t.Helper()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte(from), 0o644)
	os.WriteFile(b, []byte(to), 0o644)
	out, err := exec.Command("diff", "--minimal", "-U0", a, b).Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("diff: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
		case strings.HasPrefix(l, "+"):
			added++
		case strings.HasPrefix(l, "-"):
			removed++
		}
	}
	return added, removed
}

// gitApply applies a unified diff to from with git apply, which parses and
// checks the hunk headers, the context and the line-end markers itself.
func gitApply(t *testing.T, dir, from, unified string) string {
	t.Helper()
	f := filepath.Join(dir, "f.txt")
	os.WriteFile(f, []byte(from), 0o644)
	patch := "--- a/f.txt\n+++ b/f.txt\n" + unified
	cmd := exec.Command("git", "apply", "--whitespace=nowarn", "-")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, patch)
	}
	b, _ := os.ReadFile(f)
	return string(b)
}

// TestCompareTextAgainstDiffAndGit: for texts small and random, the hunks
// turn from into to when git applies them, and there are as many added and
// removed lines as GNU diff --minimal finds (a shortest edit script).
func TestCompareTextAgainstDiffAndGit(t *testing.T) {
	if _, err := exec.LookPath("diff"); err != nil {
		t.Fatal("GNU diff is required (diffutils)")
	}
	dir := t.TempDir()
	cases := [][2]string{
		{"", "a\n"},
		{"a\n", ""},
		{"a\nb\nc\n", "a\nB\nc\n"},
		{"a\nb\nc", "a\nb\nc\n"}, // only the last line break
		{"a\nb\nc\n", "a\nb\nc"},
		{"x\n", "x"},
		{"# T\n\none\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n", "# T\n\none\n2\nthree\nfour\nfive\nsix\nseven\neight\n9\nten\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n", "0\n1\n2\n3\n4\n5\n6\n8\n9\n10\n11\n12\n13\n14\n15\n16\n"},
	}
	rng := rand.New(rand.NewPCG(7, 22))
	words := []string{"alpha", "beta", "gamma", "delta", "", "| a | b |", "epsilon"}
	for range 120 {
		gen := func() string {
			var b strings.Builder
			for range rng.IntN(30) {
				b.WriteString(words[rng.IntN(len(words))])
				b.WriteByte('\n')
			}
			s := b.String()
			if s != "" && rng.IntN(4) == 0 {
				s = strings.TrimSuffix(s, "\n") + "tail"
			}
			return s
		}
		from := gen()
		to := from
		if rng.IntN(2) == 0 {
			to = gen()
		} else {
			lines := strings.SplitAfter(from, "\n")
			for i := range lines {
				if rng.IntN(5) == 0 {
					lines[i] = words[rng.IntN(len(words))] + "\n"
				}
			}
			to = strings.Join(lines, "")
		}
		cases = append(cases, [2]string{from, to})
	}
	for i, c := range cases {
		from, to := c[0], c[1]
		d := CompareText(from, to)
		wa, wr := gnuDiffCounts(t, dir, from, to)
		if d.Added != wa || d.Removed != wr {
			t.Errorf("case %d: +%d -%d, GNU diff --minimal +%d -%d\nfrom %q\nto   %q", i, d.Added, d.Removed, wa, wr, from, to)
		}
		if from == to {
			if d.Unified != "" || len(d.Hunks) != 0 {
				t.Errorf("case %d: equal texts give a diff: %q", i, d.Unified)
			}
			continue
		}
		if got := gitApply(t, dir, from, d.Unified); got != to {
			t.Errorf("case %d: git apply gives %q, want %q\n%s", i, got, to, d.Unified)
		}
	}
}

// TestCompareTextUnified pins the unified form against what GNU diff -u
// prints for the same texts (the same hunks, headers and lines): changes six
// lines apart share a hunk, seven apart do not.
func TestCompareTextUnified(t *testing.T) {
	lines := func(n int, change ...int) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			if slices.Contains(change, i) {
				fmt.Fprintf(&b, "changed %d\n", i)
			} else {
				fmt.Fprintf(&b, "line %d\n", i)
			}
		}
		return b.String()
	}
	cases := [][2]string{
		{"# Findings\n\n- parser: 12 ms\n- lexer: 7 ms\n- planner: 40 ms\n", "# Findings\n\n- parser: 12 ms\n- lexer: 9 ms\n- planner: 40 ms\n- total: 61 ms\n"},
		{lines(30), lines(30, 10, 17)}, // six unchanged lines between: one hunk
		{lines(30), lines(30, 10, 18)}, // seven: two hunks
		{lines(5), lines(5, 1, 5)},
		{"a\nb", "a\nc"},
	}
	dir := t.TempDir()
	for i, c := range cases {
		os.WriteFile(filepath.Join(dir, "a"), []byte(c[0]), 0o644)
		os.WriteFile(filepath.Join(dir, "b"), []byte(c[1]), 0o644)
		out, _ := exec.Command("diff", "-u", filepath.Join(dir, "a"), filepath.Join(dir, "b")).Output()
		want := strings.SplitAfterN(string(out), "\n", 3)[2] // past the --- and +++ lines
		if got := CompareText(c[0], c[1]).Unified; got != want {
			t.Errorf("case %d, unified:\n%s\nGNU diff -u:\n%s", i, got, want)
		}
	}
}

// TestCompareTextBounded: past maxEdits the middle is replaced whole, and
// the result is still a diff that git applies.
func TestCompareTextBounded(t *testing.T) {
	var a, b bytes.Buffer
	a.WriteString("head\n")
	b.WriteString("head\n")
	for i := range 3 * maxEdits {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	a.WriteString("tail\n")
	b.WriteString("tail\n")
	d := CompareText(a.String(), b.String())
	if d.Added != 3*maxEdits || d.Removed != 3*maxEdits {
		t.Fatalf("+%d -%d", d.Added, d.Removed)
	}
	if got := gitApply(t, t.TempDir(), a.String(), d.Unified); got != b.String() {
		t.Fatal("git apply does not give the second text")
	}
}

func TestCompareTables(t *testing.T) {
	from := Payload{Type: TypeTable, Columns: []string{"step", "ms", "note"}, Rows: [][]string{
		{"parse", "12", ""},
		{"lex", "7", "fast"},
		{"plan", "40", ""},
		{"emit", "3", ""},
	}}
	to := Payload{Type: TypeTable, Columns: []string{"step", "ms", "p99"}, Rows: [][]string{
		{"parse", "12", "20"},
		{"lex", "9", "11"},
		{"emit", "3", "5"},
		{"link", "8", "9"},
	}}
	d := Compare(from, to)
	if d.Table == nil || d.Report != nil || d.Link != nil || d.Same {
		t.Fatalf("%+v", d)
	}
	td := d.Table
	if !reflect.DeepEqual(td.ColumnsAdded, []string{"p99"}) || !reflect.DeepEqual(td.ColumnsRemoved, []string{"note"}) {
		t.Errorf("columns: +%v -%v", td.ColumnsAdded, td.ColumnsRemoved)
	}
	want := []RowChange{
		{Change: RowChanged, From: 2, To: 2, Row: []string{"lex", "9", "11"}, Cells: []CellChange{{Column: "ms", From: "7", To: "9"}}},
		{Change: RowRemoved, From: 3, Row: []string{"plan", "40", ""}},
		{Change: RowAdded, To: 4, Row: []string{"link", "8", "9"}},
	}
	// lex changed, plan removed: the block (lex, plan) -> (lex) pairs lex with lex.
	got := td.Rows
	if len(got) != 3 {
		t.Fatalf("rows: %+v", got)
	}
	byChange := map[string]RowChange{}
	for _, r := range got {
		byChange[r.Change] = r
	}
	for _, w := range want {
		if !reflect.DeepEqual(byChange[w.Change], w) {
			t.Errorf("%s: %+v, want %+v", w.Change, byChange[w.Change], w)
		}
	}
	if td.RowsAdded != 1 || td.RowsRemoved != 1 || td.RowsChanged != 1 || td.RowsSame != 2 {
		t.Errorf("counts: %+v", td)
	}
	if s := Compare(from, from); !s.Same || len(s.Table.Rows) != 0 {
		t.Errorf("a table compared with itself: %+v", s.Table)
	}
	// Rows that share no cell are one removed and one added, not changed;
	// rows alike on half their cells are the same row changed.
	a := Payload{Type: TypeTable, Columns: []string{"k", "v"}, Rows: [][]string{{"x", "1"}, {"plan", "40"}}}
	b := Payload{Type: TypeTable, Columns: []string{"k", "v"}, Rows: [][]string{{"y", "1"}, {"link", "8"}}}
	got2 := Compare(a, b).Table
	if got2.RowsChanged != 1 || got2.RowsAdded != 1 || got2.RowsRemoved != 1 {
		t.Errorf("pairing: %+v", got2.Rows)
	}
	if c := got2.Rows; len(c) != 3 || c[0].Change != RowRemoved || c[0].Row[0] != "plan" || c[1].Change != RowChanged ||
		!reflect.DeepEqual(c[1].Cells, []CellChange{{Column: "k", From: "x", To: "y"}}) || c[2].Change != RowAdded || c[2].Row[0] != "link" {
		t.Errorf("rows: %+v", c)
	}
	// A column renamed is a column removed and one added, however equal
	// its cells.
	renamed := Payload{Type: TypeTable, Columns: []string{"step", "millis", "note"}, Rows: from.Rows}
	if r := Compare(from, renamed); r.Same || len(r.Table.ColumnsAdded) != 1 || len(r.Table.Rows) != 0 {
		t.Errorf("renamed column: %+v", r.Table)
	}
}

func TestCompareLinksAndTypes(t *testing.T) {
	a := Payload{Type: TypeLink, URL: "https://a.example/x", LinkKind: LinkPreview}
	b := Payload{Type: TypeLink, URL: "https://a.example/y", LinkKind: LinkPreview}
	d := Compare(a, b)
	if d.Link == nil || !d.Link.URLChanged || d.Link.KindChanged || d.Same {
		t.Fatalf("%+v", d.Link)
	}
	c := Payload{Type: TypeLink, URL: a.URL, LinkKind: LinkDashboard}
	if d := Compare(a, c); !d.Link.KindChanged || d.Link.URLChanged {
		t.Fatalf("%+v", d.Link)
	}
	// A report that became a table is compared by their text forms.
	r := Payload{Type: TypeReport, Body: "| step | ms |\n|---|---|\n| parse | 12 |\n"}
	tb := Payload{Type: TypeTable, Columns: []string{"step", "ms"}, Rows: [][]string{{"parse", "12"}}}
	d = Compare(r, tb)
	if d.Report == nil || d.Same || d.FromType != TypeReport || d.ToType != TypeTable {
		t.Fatalf("%+v", d)
	}
	if d.Report.Added != 0 || d.Report.Removed != 0 {
		t.Errorf("the text forms differ: %s", d.Report.Unified)
	}
}

// TestTextEscapesCells: a table's text form keeps one line a row whatever
// its cells hold.
func TestTextEscapesCells(t *testing.T) {
	p := Payload{Type: TypeTable, Columns: []string{"a|b", "c"}, Rows: [][]string{{"x\ny", "back\\slash\ttab"}}}
	want := "| a\\|b | c |\n|---|---|\n| x\\ny | back\\\\slash\\ttab |\n"
	if got := Text(p); got != want {
		t.Errorf("%q\nwant %q", got, want)
	}
}
