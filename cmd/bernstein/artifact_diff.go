package main

import (
	"fmt"
	goio "io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

type artifactDiffOptions struct {
	IO       *IO
	Store    openFunc
	Task     string
	Key      string
	Versions []string // from and to, as given (none, one or two)
	Strict   bool
	JSON     bool
}

const artifactDiffLong = `Compare two versions of an artifact key: by default the version before the
latest and the latest; with one version number, that version and the latest;
with two, the first and the second (in either order). Versions are numbers,
3 or v3.

Both versions are re-verified first, as 'artifact show' does; a version that
is tampered (or whose journal is broken or rolled back) is refused, not
compared, and so is one that is not verified with --strict. An unverifiable
version (no pinned key for its writer) is compared, and its state said.

  report  a unified diff of its markdown (3 lines of context), under
          "--- KEY vN (state, journal index I)" and "+++ ..." lines;
  table   the columns added and removed, then each row that is not the
          same: "- row N (vA): cells" removed, "+ row N: cells" added,
          "~ row N (vA row M): COLUMN: "old" -> "new", ..." changed, its
          changed cells named by column. Rows are matched on the columns
          both versions have; a removed row next to an added one is the
          same row changed;
  link    its URL and its kind, before and after.

Two versions of different types are compared by their text forms (a table
as markdown rows, a link as its URL and kind) as a unified diff.

--output-json prints the document GET /api/v1/tasks/{id}/artifacts/{key}/diff
answers: {"task", "key", "from", "to", "refused", "diff"}.

Exit status: 0 compared (whether or not they differ); 1 unknown task, key or
version, or a key with a single version and no version named; 2 refused: a
version is tampered or withheld (or not verified, with --strict).`

func newArtifactDiffCmd(f *factory, runF func(*artifactDiffOptions) error) *cobra.Command {
	o := &artifactDiffOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "diff <task> <key> [<from> [<to>]]",
		Short: "Compare two versions of an artifact",
		Long:  artifactDiffLong,
		Args:  cobra.RangeArgs(2, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task, o.Key, o.Versions = args[0], args[1], args[2:]
			if runF != nil {
				return runF(o)
			}
			return artifactDiffRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.Strict, "strict", false, "compare only verified versions (exit 2 otherwise)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print one JSON document")
	return cmd
}

func artifactDiffRun(o *artifactDiffOptions) error {
	if err := artifact.ValidateKey(o.Key); err != nil {
		return err
	}
	sel := bernstein.DiffSelection{Key: o.Key, Strict: o.Strict}
	for i, a := range o.Versions {
		n, err := parseVersionArg(a)
		if err != nil {
			return &artifact.InputError{Field: []string{"from", "to"}[i], Msg: err.Error()}
		}
		if i == 0 {
			sel.From = &n
		} else {
			sel.To = &n
		}
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		rep, err := s.Artifacts(o.Task)
		if err != nil {
			return err
		}
		doc, err := bernstein.NewArtifactDiffDoc(rep, sel)
		if err != nil {
			return err
		}
		if o.JSON {
			if err := printJSON(o.IO, doc); err != nil {
				return err
			}
		} else {
			renderDiff(o.IO, doc)
		}
		if doc.Refused != "" {
			return exitCode(2, fmt.Errorf("%s v%d and v%d of task %s not compared: %s", o.Key, doc.From.Version, doc.To.Version, o.Task, doc.Refused))
		}
		return nil
	})
}

// parseVersionArg reads a version number: 3 or v3.
func parseVersionArg(a string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(a, "v"), 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a version number (1, 2, ... or v1, v2, ...)", a)
	}
	return n, nil
}

// versionLine is the header of one side of a diff.
func versionLine(v bernstein.ArtifactVersionDoc) string {
	typ := v.Type
	if v.LinkKind != "" {
		typ += "/" + v.LinkKind
	}
	return fmt.Sprintf("%s v%d (%s, %s, journal index %d)", v.Key, v.Version, typ, v.State, v.JournalIndex)
}

// renderDiff prints a diff document as text.
func renderDiff(io *IO, doc *bernstein.ArtifactDiffDoc) {
	w := io.Out
	fmt.Fprintf(w, "--- %s\n", versionLine(doc.From))
	fmt.Fprintf(w, "+++ %s\n", versionLine(doc.To))
	d := doc.Diff
	if d == nil {
		fmt.Fprintf(w, "(not compared: %s)\n", doc.Refused)
		return
	}
	if d.FromType != d.ToType {
		fmt.Fprintf(w, "type: %s -> %s (compared by their text forms)\n", d.FromType, d.ToType)
	}
	if d.Same {
		fmt.Fprintln(w, "(the same)")
		return
	}
	switch {
	case d.Report != nil:
		fmt.Fprint(w, d.Report.Unified)
	case d.Table != nil:
		renderTableDiff(w, doc.From.Version, d.Table)
	case d.Link != nil:
		l := d.Link
		if l.URLChanged {
			fmt.Fprintf(w, "url:  %s -> %s\n", l.FromURL, l.ToURL)
		} else {
			fmt.Fprintf(w, "url:  %s (the same)\n", l.ToURL)
		}
		if l.KindChanged {
			fmt.Fprintf(w, "kind: %s -> %s\n", l.FromKind, l.ToKind)
		} else {
			fmt.Fprintf(w, "kind: %s (the same)\n", l.ToKind)
		}
	}
}

// renderTableDiff prints the columns and rows two versions of a table
// differ in; from is the older version's number.
func renderTableDiff(w goio.Writer, from int64, td *artifact.TableDiff) {
	if len(td.ColumnsAdded)+len(td.ColumnsRemoved) > 0 {
		var cs []string
		for _, c := range td.ColumnsAdded {
			cs = append(cs, "+"+strconv.Quote(c))
		}
		for _, c := range td.ColumnsRemoved {
			cs = append(cs, "-"+strconv.Quote(c))
		}
		fmt.Fprintf(w, "columns: %s\n", strings.Join(cs, ", "))
	}
	fmt.Fprintf(w, "rows: %d added, %d removed, %d changed, %d the same\n", td.RowsAdded, td.RowsRemoved, td.RowsChanged, td.RowsSame)
	for _, r := range td.Rows {
		switch r.Change {
		case artifact.RowAdded:
			fmt.Fprintf(w, "+ row %d: %s\n", r.To, cellsLine(r.Row))
		case artifact.RowRemoved:
			fmt.Fprintf(w, "- row %d (v%d): %s\n", r.From, from, cellsLine(r.Row))
		default:
			var cs []string
			for _, c := range r.Cells {
				cs = append(cs, fmt.Sprintf("%s: %s -> %s", c.Column, strconv.Quote(c.From), strconv.Quote(c.To)))
			}
			fmt.Fprintf(w, "~ row %d (v%d row %d): %s\n", r.To, from, r.From, strings.Join(cs, ", "))
		}
	}
}

// cellsLine is a row on one line: its cells, escaped, between " | ".
func cellsLine(row []string) string {
	out := make([]string, len(row))
	for i, c := range row {
		out[i] = artifact.EscapeCell(c)
	}
	return strings.Join(out, " | ")
}

// artifactTextconvOptions are git's textconv for artifact versions
// (docs/format.md, "Diffing with git"): it needs no repository.
type artifactTextconvOptions struct {
	IO   *IO
	File string
}

const artifactTextconvLong = `Print the payload in FILE as its text form: a report's markdown, a table as
markdown rows (one line a row; "|" and line breaks in a cell escaped), a link
as its URL and kind. A file that is not exactly a payload is printed as it is.
git runs it as the textconv of the diff driver 'bernstein init' sets up, so
that 'git diff' and 'git log -p' of artifact versions show lines of text.

Exit status: 0 printed; 1 FILE cannot be read.`

func newArtifactTextconvCmd(f *factory, runF func(*artifactTextconvOptions) error) *cobra.Command {
	o := &artifactTextconvOptions{IO: f.IO}
	return &cobra.Command{
		Use:    "textconv <file>",
		Short:  "Print an artifact payload as text (git's diff driver runs it)",
		Hidden: true,
		Long:   artifactTextconvLong,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.File = args[0]
			if runF != nil {
				return runF(o)
			}
			return artifactTextconvRun(o)
		},
	}
}

func artifactTextconvRun(o *artifactTextconvOptions) error {
	f, err := os.Open(o.File)
	if err != nil {
		return err
	}
	defer f.Close()
	// A payload is at most MaxPayloadBytes: anything longer is copied
	// through unread.
	b, err := readLimited(f, artifact.MaxPayloadBytes+1)
	if err != nil {
		return err
	}
	if p, err := artifact.Parse(b); err == nil && len(b) <= artifact.MaxPayloadBytes {
		_, err = o.IO.Out.Write([]byte(artifact.Text(p)))
		return err
	}
	if _, err := o.IO.Out.Write(b); err != nil {
		return err
	}
	_, err = goio.Copy(o.IO.Out, f)
	return err
}
