package main

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

// TestTaskListJSONOneTaskAtATime: 'task list --output-json' writes its
// document a task at a time, and what it writes is, byte for byte, what
// encoding/json writes for the whole document (indented, HTML not
// escaped): no tasks, one, several with characters JSON escapes and HTML
// would, with and without a next cursor.
func TestTaskListJSONOneTaskAtATime(t *testing.T) {
	entry := func(id, title string) bernstein.TaskListEntry {
		return bernstein.TaskListEntry{
			TaskInfo: &bernstein.TaskInfo{ID: id, Title: title, Phase: "working", Evidence: []ledger.Producer{},
				Gates: []ledger.Gate{}, Artifacts: map[string]int64{"b": 2, "a": 1}, Progress: &progress.Wire{}},
			Integrity: bernstein.TaskIntegrity{State: verify.Tampered, Reason: "a <b> & \"c\"\n"},
		}
	}
	docs := []bernstein.TaskListDoc{
		{},
		{Tasks: []bernstein.TaskListEntry{}},
		{Tasks: []bernstein.TaskListEntry{entry("T-1", "one")}},
		{Tasks: []bernstein.TaskListEntry{entry("T-1", "<script>\u2028"), entry("T-2", ""), entry("T-3", "\"tasks\": []")}},
		{Tasks: []bernstein.TaskListEntry{entry("T-1", "x"), entry("T-2", "y")}, NextCursor: "T-2"},
	}
	for i, doc := range docs {
		// The last document names an archive ref read past, whose reason
		// holds what the frame is cut at.
		var past []refs.BadRef
		if i == len(docs)-1 {
			past = []refs.BadRef{{Ref: "refs/bernstein/archive/w", Reason: `not an archive: "tasks": [] <b>`}}
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(bernstein.NewTaskListDoc(doc.Tasks, past)); err != nil {
			t.Fatal(err)
		}
		if doc.NextCursor != "" {
			want.Reset()
			d := bernstein.NewTaskListDoc(doc.Tasks, past)
			d.NextCursor = doc.NextCursor
			if err := enc.Encode(d); err != nil {
				t.Fatal(err)
			}
		}
		var got bytes.Buffer
		d := bernstein.NewTaskListDoc(doc.Tasks, past)
		d.NextCursor = doc.NextCursor
		if err := printTaskList(&IO{Out: &got}, d); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("written a task at a time:\n%s\nencoding/json:\n%s", got.String(), want.String())
		}
	}
}
