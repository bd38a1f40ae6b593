package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein/mcpserver"
)

// listTools returns the advertised tools by name.
func listTools(t *testing.T, c *client) map[string]*mcp.Tool {
	t.Helper()
	res, err := c.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	out := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		out[tool.Name] = tool
	}
	return out
}

// schemaDoc turns an advertised schema into plain JSON values.
func schemaDoc(t *testing.T, s any) map[string]any {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// resolve compiles an advertised schema with an independent validator.
func resolve(t *testing.T, s any) *jsonschema.Resolved {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var js jsonschema.Schema
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatalf("advertised schema does not parse as JSON Schema: %v", err)
	}
	rs, err := js.Resolve(nil)
	if err != nil {
		t.Fatalf("advertised schema does not resolve: %v", err)
	}
	return rs
}

func at(t *testing.T, m map[string]any, path ...string) any {
	t.Helper()
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("schema: %s is not an object", strings.Join(path, "."))
		}
		v = mm[p]
	}
	return v
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestToolsAdvertised(t *testing.T) {
	r := newRepo(t)
	tools := listTools(t, serveAs(t, r, "agent-1"))
	var names []string
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	// Two tools, and none of them sets progress.
	if want := []string{mcpserver.ToolPostArtifact, mcpserver.ToolTaskHandle}; !reflect.DeepEqual(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}

	in := schemaDoc(t, tools[mcpserver.ToolPostArtifact].InputSchema)
	checks := []struct {
		path []string
		want any
	}{
		{[]string{"type"}, "object"},
		{[]string{"additionalProperties"}, false},
		{[]string{"properties", "task_id", "pattern"}, `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`},
		{[]string{"properties", "task_id", "maxLength"}, 128.0},
		{[]string{"properties", "key", "pattern"}, `^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`},
		{[]string{"properties", "body", "maxLength"}, float64(1 << 20)},
		{[]string{"properties", "columns", "maxItems"}, 64.0},
		{[]string{"properties", "columns", "minItems"}, 1.0},
		{[]string{"properties", "columns", "items", "maxLength"}, 4096.0},
		{[]string{"properties", "rows", "maxItems"}, 4096.0},
		{[]string{"properties", "rows", "items", "items", "maxLength"}, 4096.0},
		{[]string{"properties", "url", "maxLength"}, 4096.0},
	}
	for _, c := range checks {
		if got := at(t, in, c.path...); got != c.want {
			t.Errorf("input schema %s = %v, want %v", strings.Join(c.path, "."), got, c.want)
		}
	}
	if got := strs(at(t, in, "required")); !reflect.DeepEqual(got, []string{"task_id", "key", "artifact_type"}) {
		t.Errorf("required = %v", got)
	}
	if got := strs(at(t, in, "properties", "artifact_type", "enum")); !reflect.DeepEqual(got, []string{"report", "table", "link"}) {
		t.Errorf("artifact_type enum = %v", got)
	}
	if got := strs(at(t, in, "properties", "link_kind", "enum")); !reflect.DeepEqual(got, []string{"preview", "dashboard", "document"}) {
		t.Errorf("link_kind enum = %v", got)
	}
	if p, _ := at(t, in, "properties", "url", "pattern").(string); !strings.HasPrefix(p, "^[Hh][Tt][Tt][Pp][Ss]?://") {
		t.Errorf("url pattern %q does not require http(s)", p)
	}
	// One branch per artifact type, naming exactly the fields it needs.
	branches := map[string][]string{}
	for _, b := range at(t, in, "oneOf").([]any) {
		bm := b.(map[string]any)
		branches[at(t, bm, "properties", "artifact_type", "const").(string)] = strs(bm["required"])
	}
	want := map[string][]string{"report": {"body"}, "table": {"columns", "rows"}, "link": {"url", "link_kind"}}
	if !reflect.DeepEqual(branches, want) {
		t.Errorf("oneOf branches = %v, want %v", branches, want)
	}

	hin := schemaDoc(t, tools[mcpserver.ToolTaskHandle].InputSchema)
	if got := strs(at(t, hin, "required")); !reflect.DeepEqual(got, []string{"task_id"}) || at(t, hin, "additionalProperties") != false {
		t.Errorf("task handle input schema = %v", hin)
	}
	if props := at(t, hin, "properties").(map[string]any); len(props) != 1 {
		t.Errorf("task handle takes %d arguments, want task_id alone", len(props))
	}
	for _, name := range names {
		tool := tools[name]
		if tool.OutputSchema == nil {
			t.Errorf("%s advertises no output schema", name)
		}
		resolve(t, tool.InputSchema)
		resolve(t, tool.OutputSchema)
	}
	hout := schemaDoc(t, tools[mcpserver.ToolTaskHandle].OutputSchema)
	if got := strs(at(t, hout, "properties", "status", "enum")); !reflect.DeepEqual(got, []string{"working", "input_required", "completed", "failed", "cancelled"}) {
		t.Errorf("status enum = %v", got)
	}
	if ann := tools[mcpserver.ToolTaskHandle].Annotations; ann == nil || !ann.ReadOnlyHint {
		t.Errorf("task handle is not marked read-only")
	}
}

// TestSchemaAgreesWithServer validates argument sets with an independent
// JSON Schema validator against the advertised schema and sends the same
// arguments to the server: what the schema accepts is posted, what it
// refuses the server refuses too, naming the field.
func TestSchemaAgreesWithServer(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1")
	tok := r.claim("T-1", "agent-1")
	c := serveAs(t, r, "agent-1", tok)
	rs := resolve(t, listTools(t, c)[mcpserver.ToolPostArtifact].InputSchema)

	base := func(typ string, kv ...any) map[string]any {
		m := map[string]any{"task_id": "T-1", "key": "k", "artifact_type": typ}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	many := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = fmt.Sprintf("c%d", i)
		}
		return out
	}
	cases := []struct {
		name  string
		args  map[string]any
		field string // "" when valid
	}{
		{"report", base("report", "body", "# Findings\n\nall good\t(tabbed)\r\n"), ""},
		{"table", base("table", "columns", []any{"a", "b"}, "rows", []any{[]any{"1", "2"}}), ""},
		{"empty table", base("table", "columns", []any{"a"}, "rows", []any{}), ""},
		{"link", base("link", "url", "https://example.com/d/1", "link_kind", "dashboard"), ""},
		{"upper-case scheme", base("link", "url", "HTTP://EXAMPLE.COM", "link_kind", "preview"), ""},
		{"report without body", base("report"), "body"},
		{"report with url", base("report", "body", "x", "url", "https://example.com"), "url"},
		{"table without rows", base("table", "columns", []any{"a"}), "rows"},
		{"table with body", base("table", "columns", []any{"a"}, "rows", []any{}, "body", "x"), "body"},
		{"link without kind", base("link", "url", "https://example.com"), "link_kind"},
		{"link kind", base("link", "url", "https://example.com", "link_kind", "video"), "link_kind"},
		{"ftp url", base("link", "url", "ftp://example.com/x", "link_kind", "document"), "url"},
		{"url with credentials", base("link", "url", "https://user:pass@example.com/", "link_kind", "document"), "url"},
		{"url with a user", base("link", "url", "https://user@example.com", "link_kind", "document"), "url"},
		{"url with @ in its path", base("link", "url", "https://example.com/@team/board?by=a@b", "link_kind", "dashboard"), ""},
		{"long url", base("link", "url", "https://example.com/"+strings.Repeat("a", 4096), "link_kind", "document"), "url"},
		{"type", base("pdf", "body", "x"), "artifact_type"},
		{"65 columns", base("table", "columns", many(65), "rows", []any{}), "columns"},
		{"no columns", base("table", "columns", []any{}, "rows", []any{}), "columns"},
		{"repeated column", base("table", "columns", []any{"a", "a"}, "rows", []any{}), "columns[1]"},
		{"long cell", base("table", "columns", []any{"a"}, "rows", []any{[]any{strings.Repeat("é", 4097)}}), "rows[0][0]"},
		{"control character", base("report", "body", "a\x1bb"), "body"},
		{"C1 control character", base("report", "body", "a\u0085b"), "body"},
		{"control character in a column", base("table", "columns", []any{"a\x7f"}, "rows", []any{}), "columns[0]"},
		{"byte-order mark starting a column", base("table", "columns", []any{"a", "\ufeffb"}, "rows", []any{}), "columns[1]"},
		{"byte-order mark inside a column", base("table", "columns", []any{"a\ufeffb"}, "rows", []any{}), ""},
		{"bad key", map[string]any{"task_id": "T-1", "key": "no spaces", "artifact_type": "report", "body": "x"}, "key"},
		{"no key", map[string]any{"task_id": "T-1", "artifact_type": "report", "body": "x"}, "key"},
		{"dotted task", map[string]any{"task_id": "a..b", "key": "k", "artifact_type": "report", "body": "x"}, "task_id"},
		{"identity argument", base("report", "body", "x", "agent", "agent-1"), "agent"},
	}
	before := r.bernsteinRefs()
	posted := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			schemaErr := rs.Validate(jsonValue(t, tc.args))
			res := c.call(mcpserver.ToolPostArtifact, tc.args)
			if tc.field == "" {
				if schemaErr != nil {
					t.Errorf("schema refuses valid arguments: %v", schemaErr)
				}
				if p := ok[postResult](t, res); p.Key != "k" {
					t.Errorf("posted %+v", p)
				}
				posted++
				return
			}
			if schemaErr == nil {
				t.Errorf("schema accepts arguments the server refuses (%s)", tc.field)
			}
			if msg := toolErr(t, res); !strings.HasPrefix(msg, "invalid "+tc.field+": ") {
				t.Errorf("error %q does not name %s", msg, tc.field)
			}
		})
	}
	// The refusals wrote nothing: only the valid posts moved refs.
	if posted == 0 || r.bernsteinRefs() == before {
		t.Fatal("valid posts wrote nothing")
	}
	if rows, _ := r.store.JournalRows("T-1"); len(rows) != posted {
		t.Errorf("journal has %d rows after %d valid posts", len(rows), posted)
	}
}

// jsonValue is v as a JSON decoder gives it (what a validator sees).
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOutputsMatchAdvertisedSchemas validates real results against the
// advertised output schemas.
func TestOutputsMatchAdvertisedSchemas(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1", "unit")
	tok := r.claim("T-1", "agent-1")
	c := serveAs(t, r, "agent-1", tok)
	tools := listTools(t, c)
	handleBefore := c.call(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"})
	results := map[string][]*mcp.CallToolResult{
		mcpserver.ToolTaskHandle: {handleBefore},
	}
	for _, args := range []map[string]any{
		report("T-1", "summary", "# hi"),
		{"task_id": "T-1", "key": "t", "artifact_type": "table", "columns": []string{"a"}, "rows": [][]string{{"1"}}},
		{"task_id": "T-1", "key": "l", "artifact_type": "link", "url": "https://example.com", "link_kind": "preview"},
		report("T-1", "summary", "# hi again"),
	} {
		results[mcpserver.ToolPostArtifact] = append(results[mcpserver.ToolPostArtifact], c.call(mcpserver.ToolPostArtifact, args))
	}
	r.checkpoint("T-1")
	results[mcpserver.ToolTaskHandle] = append(results[mcpserver.ToolTaskHandle], c.call(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"}))
	for name, rr := range results {
		rs := resolve(t, tools[name].OutputSchema)
		for i, res := range rr {
			if res.IsError {
				t.Fatalf("%s #%d: %s", name, i, text(res))
			}
			if err := rs.Validate(jsonValue(t, res.StructuredContent)); err != nil {
				t.Errorf("%s #%d: structured content does not match the output schema: %v", name, i, err)
			}
		}
	}
}
