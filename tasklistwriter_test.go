package bernstein_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// TestTaskListWriterWritesWhatEncodingJSONWrites: a list written a task at
// a time is, byte for byte, what encoding/json writes for the whole
// document: json.Marshal's bytes in the compact style (the API's), a
// json.Encoder's indented with HTML not escaped in the indented style (the
// CLI's). No tasks, one, several with characters JSON escapes and HTML
// would, with and without a next cursor and archive refs read past.
func TestTaskListWriterWritesWhatEncodingJSONWrites(t *testing.T) {
	entry := func(id, title string) bernstein.TaskListEntry {
		return bernstein.TaskListEntry{
			TaskInfo: &bernstein.TaskInfo{ID: id, Title: title, Phase: "working", Evidence: []ledger.Producer{},
				Gates: []ledger.Gate{}, Artifacts: map[string]int64{"b": 2, "a": 1}, Progress: &progress.Wire{}},
			Integrity: bernstein.TaskIntegrity{State: verify.Tampered, Reason: "a <b> & \"c\"\n"},
		}
	}
	past := []refs.BadRef{{Ref: "refs/bernstein/archive/w", Reason: `not an archive: "tasks": [] "tasks":[] <b>`}}
	cases := []struct {
		tasks []bernstein.TaskListEntry
		next  string
		past  []refs.BadRef
	}{
		{},
		{tasks: []bernstein.TaskListEntry{entry("T-1", "one")}},
		{tasks: []bernstein.TaskListEntry{entry("T-1", "<script>\u2028"), entry("T-2", ""), entry("T-3", "\"tasks\": []")}},
		{tasks: []bernstein.TaskListEntry{entry("T-1", "x"), entry("T-2", "y")}, next: "T-2"},
		{tasks: []bernstein.TaskListEntry{entry("T-1", "x")}, next: "T-1", past: past},
		{past: past},
	}
	for i, c := range cases {
		doc := bernstein.NewTaskListDoc(c.tasks, c.past)
		doc.NextCursor = c.next
		compact, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var indented bytes.Buffer
		enc := json.NewEncoder(&indented)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(doc); err != nil {
			t.Fatal(err)
		}
		for _, st := range []struct {
			style bernstein.TaskListStyle
			want  []byte
		}{{bernstein.TaskListCompact, compact}, {bernstein.TaskListIndented, indented.Bytes()}} {
			var got bytes.Buffer
			w := bernstein.NewTaskListWriter(&got, st.style)
			for _, e := range c.tasks {
				if err := w.Task(e); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(c.next, c.past); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), st.want) {
				t.Fatalf("case %d, style %d, written a task at a time:\n%s\nencoding/json:\n%s", i, st.style, got.Bytes(), st.want)
			}
			// The elements written apart, then put in a document (as the
			// server keeps a list and serves it again).
			var elems, doc bytes.Buffer
			ew := bernstein.NewTaskListElements(&elems, st.style)
			for _, e := range c.tasks {
				if err := ew.Task(e); err != nil {
					t.Fatal(err)
				}
			}
			head, tail, err := bernstein.TaskListFrame(st.style, len(c.tasks), c.next, c.past)
			if err != nil {
				t.Fatal(err)
			}
			doc.Write(head)
			doc.Write(elems.Bytes())
			doc.Write(tail)
			if !bytes.Equal(doc.Bytes(), st.want) {
				t.Fatalf("case %d, style %d, elements put in a document:\n%s\nencoding/json:\n%s", i, st.style, doc.Bytes(), st.want)
			}
		}
	}
}
