package main

import (
	"bytes"
	"sort"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// table renders rows with tablewriter on a terminal and as tab-separated
// lines (no header) when piped, so scripts get stable columns.
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
	if !t.io.IsTTY {
		var b strings.Builder
		for _, r := range t.rows {
			b.WriteString(strings.Join(r, "\t"))
			b.WriteByte('\n')
		}
		_, err := t.io.Out.Write([]byte(b.String()))
		return err
	}
	// Header names are shown as they are: tablewriter would upper-case
	// them, so that table columns "a" and "A" would both read "A".
	table := tablewriter.NewTable(t.io.Out, tablewriter.WithHeaderAutoFormat(tw.Off))
	h := make([]any, len(t.header))
	for i, c := range t.header {
		h[i] = c
	}
	table.Header(h...)
	for _, r := range t.rows {
		if err := table.Append(r); err != nil {
			return err
		}
	}
	return table.Render()
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
