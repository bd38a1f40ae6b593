package tests

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestBadInputWritesNothing: every bad input is one clear error naming the
// field, and neither refs nor objects change.
func TestBadInputWritesNothing(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "OK-1", "agent")
	f.post(s, "OK-1", "summary", "agent", tok, report("fine"))

	cols65 := make([]string, 65)
	for i := range cols65 {
		cols65[i] = "c" + strings.Repeat("x", i)
	}
	huge := strings.Repeat("a", artifact.MaxPayloadBytes) // canonical form exceeds 1 MiB by the wrapper
	cases := []struct {
		name, task, key, field string
		p                      artifact.Payload
	}{
		{"task with ..", "a..b", "k", "task_id", report("x")},
		{"task with /", "a/b", "k", "task_id", report("x")},
		{"task with NUL", "a\x00b", "k", "task_id", report("x")},
		{"task with newline", "a\nb", "k", "task_id", report("x")},
		{"task with space", "a b", "k", "task_id", report("x")},
		{"task too long", strings.Repeat("t", 129), "k", "task_id", report("x")},
		{"task empty", "", "k", "task_id", report("x")},
		{"key starting with .", "OK-1", ".hidden", "key", report("x")},
		{"key with /", "OK-1", "a/b", "key", report("x")},
		{"key too long", "OK-1", strings.Repeat("k", 129), "key", report("x")},
		{"empty report", "OK-1", "k", "body", report("")},
		{"blank report", "OK-1", "k", "body", report(" \n\t ")},
		{"wrong cell count", "OK-1", "k", "rows[1]", artifact.Payload{Type: "table", Columns: []string{"a", "b"}, Rows: [][]string{{"1", "2"}, {"3"}}}},
		{"65 columns", "OK-1", "k", "columns", artifact.Payload{Type: "table", Columns: cols65}},
		{"payload over 1 MiB", "OK-1", "k", "payload", report(huge)},
		{"link kind video", "OK-1", "k", "link_kind", artifact.Payload{Type: "link", URL: "https://example.com", LinkKind: "video"}},
		{"javascript url", "OK-1", "k", "url", artifact.Payload{Type: "link", URL: "javascript:alert(1)", LinkKind: "preview"}},
		{"control char in body", "OK-1", "k", "body", report("bell \x07 here")},
		{"control char in cell", "OK-1", "k", "rows[0][0]", artifact.Payload{Type: "table", Columns: []string{"a"}, Rows: [][]string{{"esc \x1b"}}}},
		{"unknown type", "OK-1", "k", "artifact_type", artifact.Payload{Type: "video"}},
	}
	refsBefore := f.refsSnapshot()
	objectsBefore := f.objectFiles()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Post(bernstein.PostRequest{Task: c.task, Key: c.key, Agent: "agent", ClaimToken: tok, Payload: c.p})
			var in *artifact.InputError
			if !errors.As(err, &in) {
				t.Fatalf("want an input error naming %s, got %v", c.field, err)
			}
			if in.Field != c.field {
				t.Fatalf("error names field %q, want %q: %v", in.Field, c.field, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
	if got := f.refsSnapshot(); got != refsBefore {
		t.Fatalf("bad input moved refs")
	}
	if got := f.objectFiles(); !reflect.DeepEqual(got, objectsBefore) {
		t.Fatalf("bad input wrote objects: %v", got)
	}
}

// TestBadInputCLI: the same refusals through the CLI: exit 1, one line on
// stderr naming the field, nothing written.
func TestBadInputCLI(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "OK-1", "agent")
	s.Close()
	post := func(task, key string, args ...string) []string {
		return append([]string{"artifact", "post", task, key, "--agent", "agent", "--claim-token", tok}, args...)
	}
	cols := []string{}
	for i := 0; i < 65; i++ {
		cols = append(cols, "--column", "c"+strings.Repeat("x", i))
	}
	cases := []struct {
		name  string
		stdin string
		args  []string
		field string
	}{
		{"task with ..", "", post("a..b", "k", "--type", "report", "--body", "x"), "task_id"},
		{"task with /", "", post("a/b", "k", "--type", "report", "--body", "x"), "task_id"},
		{"task with newline", "", post("a\nb", "k", "--type", "report", "--body", "x"), "task_id"},
		{"task with space", "", post("a b", "k", "--type", "report", "--body", "x"), "task_id"},
		{"task too long", "", post(strings.Repeat("t", 129), "k", "--type", "report", "--body", "x"), "task_id"},
		{"key starting with .", "", post("OK-1", ".k", "--type", "report", "--body", "x"), "key"},
		{"empty report", "", post("OK-1", "k", "--type", "report", "--body-file", "-"), "body"},
		{"no body", "", post("OK-1", "k", "--type", "report"), "body"},
		{"wrong cell count", "a,b\n1,2\n3\n", post("OK-1", "k", "--type", "table", "--csv", "-"), "rows[1]"},
		{"65 columns", "", post("OK-1", "k", append([]string{"--type", "table"}, cols...)...), "columns"},
		{"1 MiB + 1 byte", strings.Repeat("x", 1<<20+1), post("OK-1", "k", "--type", "report", "--body-file", "-"), "body-file"},
		{"link kind video", "", post("OK-1", "k", "--type", "link", "--url", "https://e.com", "--kind", "video"), "link_kind"},
		{"javascript url", "", post("OK-1", "k", "--type", "link", "--url", "javascript:alert(1)", "--kind", "preview"), "url"},
		{"control characters", "", post("OK-1", "k", "--type", "report", "--body", "a\x1bb"), "body"},
		{"flag of another type", "", post("OK-1", "k", "--type", "link", "--url", "https://e.com", "--kind", "preview", "--body", "x"), "body"},
		{"no type", "", post("OK-1", "k", "--body", "x"), "type"},
	}
	refsBefore := f.refsSnapshot()
	objectsBefore := f.objectFiles()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := f.cli(c.stdin, c.args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
			}
			if out != "" {
				t.Fatalf("stdout is not empty: %q", out)
			}
			line := strings.TrimSpace(errOut)
			if strings.Contains(line, "\n") || !strings.HasPrefix(line, "bernstein: invalid "+c.field+":") {
				t.Fatalf("stderr %q does not name %s in one line", errOut, c.field)
			}
		})
	}
	if f.refsSnapshot() != refsBefore || !reflect.DeepEqual(f.objectFiles(), objectsBefore) {
		t.Fatalf("bad input through the CLI wrote something")
	}
}
