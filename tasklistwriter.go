package bernstein

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/bernstein/bernstein/refs"
)

// A list of 100,000 tasks is a document of over 100 MB. encoding/json
// builds a document whole (and, indented, a second copy), and a list that
// keeps every entry until it is encoded holds every task's answer at once:
// the collector then marks hundreds of MB at each cycle of the list. A
// TaskListWriter writes the document a task at a time, each entry as it is
// read, so neither the entries nor the document are held.

// TaskListStyle is how a TaskListWriter lays out its document.
type TaskListStyle int

const (
	// TaskListCompact is json.Marshal's bytes (HTML escaped, no newline at
	// the end): what the HTTP API serves.
	TaskListCompact TaskListStyle = iota
	// TaskListIndented is a json.Encoder's with SetIndent("", "  ") and
	// SetEscapeHTML(false) (a newline at the end): what the CLI prints.
	TaskListIndented
)

// TaskListWriter writes a TaskListDoc one task at a time, byte for byte
// what encoding/json writes for the whole document in its style. Write
// each task with Task, in order, then Close with the rest of the document.
type TaskListWriter struct {
	w     io.Writer
	style TaskListStyle
	n     int
	one   bytes.Buffer
	enc   *json.Encoder
	err   error
	bare  bool // the tasks' elements only (NewTaskListElements)
}

// NewTaskListWriter starts a document on w.
func NewTaskListWriter(w io.Writer, style TaskListStyle) *TaskListWriter {
	t := &TaskListWriter{w: w, style: style}
	t.enc = json.NewEncoder(&t.one)
	if style == TaskListIndented {
		t.enc.SetIndent("    ", "  ")
		t.enc.SetEscapeHTML(false)
	}
	return t
}

// NewTaskListElements writes the tasks' elements only, separated as in the
// document, without the document around them: TaskListFrame gives what
// goes around them (a server keeps a list's elements and serves them
// again).
func NewTaskListElements(w io.Writer, style TaskListStyle) *TaskListWriter {
	t := NewTaskListWriter(w, style)
	t.bare = true
	return t
}

// TaskListFrame is what goes before and after the elements of n tasks in
// their document (what a TaskListWriter from NewTaskListElements wrote for
// them): head, the elements, then tail are the document, whose length a
// server so knows before it writes it.
func TaskListFrame(style TaskListStyle, n int, next string, readPast []refs.BadRef) (head, tail []byte, err error) {
	var h, tl bytes.Buffer
	t := NewTaskListWriter(&h, style)
	if n > 0 {
		before, _, err := t.frame(TaskListDoc{})
		if err != nil {
			return nil, nil, err
		}
		h.Write(before)
		h.WriteString(t.open())
		t.n = n
	}
	t.w = &tl
	if err := t.Close(next, readPast); err != nil {
		return nil, nil, err
	}
	return h.Bytes(), tl.Bytes(), nil
}

// frame encodes doc (its tasks left empty) in the writer's style, and cuts
// it where its tasks go: tasks is the document's first field, so the cut
// is at its first occurrence.
func (t *TaskListWriter) frame(doc TaskListDoc) (before, after []byte, err error) {
	doc.Tasks = []TaskListEntry{}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	cut := `"tasks":[]`
	if t.style == TaskListIndented {
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		cut = `"tasks": []`
	}
	if err := enc.Encode(doc); err != nil {
		return nil, nil, err
	}
	out := b.Bytes()
	if t.style == TaskListCompact {
		out = bytes.TrimSuffix(out, []byte("\n")) // json.Marshal adds none
	}
	before, after, ok := bytes.Cut(out, []byte(cut))
	if !ok {
		return nil, nil, fmt.Errorf("task list: no tasks field in %q", out)
	}
	return before, after, nil
}

// Task writes the next task.
func (t *TaskListWriter) Task(e TaskListEntry) error {
	if t.err != nil {
		return t.err
	}
	if t.n == 0 && !t.bare {
		before, _, err := t.frame(TaskListDoc{})
		if err != nil {
			t.err = err
			return err
		}
		t.write(before)
		t.write([]byte(t.open()))
	}
	t.one.Reset()
	if err := t.enc.Encode(e); err != nil {
		t.err = err
		return err
	}
	b := bytes.TrimSuffix(t.one.Bytes(), []byte("\n"))
	switch {
	case t.style == TaskListIndented && t.n > 0:
		t.write([]byte(",\n    "))
	case t.style == TaskListIndented:
		t.write([]byte("\n    "))
	case t.n > 0:
		t.write([]byte(","))
	}
	t.write(b)
	t.n++
	return t.err
}

// open is how the style opens the tasks' array.
func (t *TaskListWriter) open() string {
	if t.style == TaskListIndented {
		return `"tasks": [`
	}
	return `"tasks":[`
}

// Close writes the rest of the document: its next cursor and the archive
// refs the list read past.
func (t *TaskListWriter) Close(next string, readPast []refs.BadRef) error {
	if t.err != nil {
		return t.err
	}
	doc := NewTaskListDoc(nil, readPast)
	doc.NextCursor = next
	before, after, err := t.frame(doc)
	if err != nil {
		return err
	}
	if t.n == 0 {
		// No task written: the document is encoding/json's as it stands.
		t.write(before)
		t.write([]byte(t.open() + "]"))
		t.write(after)
		return t.err
	}
	if t.style == TaskListIndented {
		t.write([]byte("\n  ]"))
	} else {
		t.write([]byte("]"))
	}
	t.write(after)
	return t.err
}

func (t *TaskListWriter) write(b []byte) {
	if t.err == nil {
		_, t.err = t.w.Write(b)
	}
}
