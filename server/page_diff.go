package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/verify"
)

// The comparison page (GET /tasks/{id}/diff/{key}?from=A&to=B): two versions
// of a key, verified first, as 'artifact diff' compares them: a report's
// changed lines, a table's rows with their changed cells named by column, a
// link's URL and kind. A tampered (or withheld) side is refused: the page
// says why and shows no content. The task page's "Compare" form and this
// page's own pick the versions with a plain GET.

// diffPage is the comparison page.
type diffPage struct {
	Task, Key, TaskPath, Path string
	Doc                       *bernstein.ArtifactDiffDoc
	From, To                  versionRef
	Numbers                   []int64 // every version of the key, newest first
	Table                     *tableDiffView
}

// versionRef is one side of a comparison.
type versionRef struct {
	bernstein.ArtifactVersionDoc
	Path   string // its own page
	Anchor string // its card on the task page
	// Why is set to say why the side is not verified, unless the refusal
	// says it already.
	Why bool
}

// tableDiffView lays a table's changes out for the page.
type tableDiffView struct {
	*artifact.TableDiff
	Rows []tableDiffRow
}

type tableDiffRow struct {
	Change   string
	From, To int
	Cells    []tableDiffCell // in the To table's columns (the From table's for a removed row)
}

type tableDiffCell struct {
	Column      string
	Text        string // the cell
	Old         string // a changed cell's former text
	Changed     bool
	ColumnAdded bool
}

func newTableDiffView(from, to []string, td *artifact.TableDiff) *tableDiffView {
	v := &tableDiffView{TableDiff: td}
	added := map[string]bool{}
	for _, c := range td.ColumnsAdded {
		added[c] = true
	}
	for _, r := range td.Rows {
		row := tableDiffRow{Change: r.Change, From: r.From, To: r.To}
		cols := to
		if r.Change == artifact.RowRemoved {
			cols = from
		}
		changed := map[string]string{}
		for _, c := range r.Cells {
			changed[c.Column] = c.From
		}
		for i, c := range cols {
			cell := tableDiffCell{Column: c, ColumnAdded: r.Change != artifact.RowRemoved && added[c]}
			if i < len(r.Row) {
				cell.Text = r.Row[i]
			}
			if old, ok := changed[c]; ok {
				cell.Changed, cell.Old = true, old
			}
			row.Cells = append(row.Cells, cell)
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

// pageDiff is GET /tasks/{id}/diff/{key}.
func (s *Server) pageDiff(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskParam(w, r, false)
	if !ok {
		return
	}
	var msg string
	sel, ok := diffParams(r, true, func(field, m string) { msg = field + ": " + m })
	if !ok {
		s.problem(w, http.StatusBadRequest, false, "Cannot compare: "+msg+".")
		return
	}
	rep, err := s.readReport(id)
	if err != nil {
		s.storeProblem(w, false, id, err)
		return
	}
	doc, err := bernstein.NewArtifactDiffDoc(rep, sel)
	if errors.Is(err, bernstein.ErrUnknownArtifact) {
		s.problem(w, http.StatusNotFound, false, err.Error()+".")
		return
	}
	if err != nil {
		s.storeProblem(w, false, id, err)
		return
	}
	p := diffPage{Task: id, Key: sel.Key, TaskPath: TaskPath(id), Path: DiffPath(id, sel.Key), Doc: doc}
	side := func(d bernstein.ArtifactVersionDoc) versionRef {
		return versionRef{ArtifactVersionDoc: d, Path: VersionPath(id, d.Key, d.Version), Anchor: TaskPath(id) + "#v-" + d.Key + "-" + strconv.FormatInt(d.Version, 10),
			Why: doc.Refused == "" && d.State != verify.Verified && d.Reason != ""}
	}
	p.From, p.To = side(doc.From), side(doc.To)
	for i := len(rep.Versions) - 1; i >= 0; i-- {
		if v := rep.Versions[i]; v.Key == sel.Key {
			p.Numbers = append(p.Numbers, v.Version)
		}
	}
	if doc.Diff != nil && doc.Diff.Table != nil {
		// Both sides verified and parsed: their columns for the layout.
		var cols [2][]string
		for i, n := range []int64{doc.From.Version, doc.To.Version} {
			if c, _ := rep.Content(rep.Find(sel.Key, n)); c != nil {
				if pl, err := artifact.Parse(c); err == nil {
					cols[i] = pl.Columns
				}
			}
		}
		p.Table = newTableDiffView(cols[0], cols[1], doc.Diff.Table)
	}
	s.write(w, http.StatusOK, "diff", "base", page{
		Title: fmt.Sprintf("%s · %s v%d → v%d", id, sel.Key, doc.From.Version, doc.To.Version),
		Body:  body{Page: "diff", Task: id, TaskPath: TaskPath(id)},
		Main:  p,
	})
}
