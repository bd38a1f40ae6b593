package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/refs"
)

// Tool arguments are decoded by hand so that every refusal names the one
// field that is wrong, in the words the advertised schema uses.

func bad(field, format string, args ...any) error {
	return &artifact.InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// identityArgs are arguments a caller might try to claim an identity with.
var identityArgs = map[string]bool{"agent": true, "claim_token": true, "token": true, "actor": true, "caller": true}

type arguments struct {
	tool   string
	fields map[string]json.RawMessage
}

// decodeArgs reads a tool call's arguments object and refuses any field
// the tool does not take.
func decodeArgs(tool string, raw json.RawMessage, allowed ...string) (*arguments, error) {
	a := &arguments{tool: tool, fields: map[string]json.RawMessage{}}
	raw = bytes.TrimSpace(raw)
	if len(raw) != 0 && !bytes.Equal(raw, []byte("null")) {
		if raw[0] != '{' {
			return nil, bad("arguments", "must be a JSON object")
		}
		if err := json.Unmarshal(raw, &a.fields); err != nil {
			return nil, bad("arguments", "are not a valid JSON object: %v", err)
		}
	}
	ok := map[string]bool{}
	for _, f := range allowed {
		ok[f] = true
	}
	var unknown []string
	for f := range a.fields {
		if !ok[f] {
			unknown = append(unknown, f)
		}
	}
	sort.Strings(unknown)
	for _, f := range unknown {
		if identityArgs[f] {
			return nil, bad(f, "is not an argument: the caller's identity comes from the transport (the server's --agent and --claim-token over stdio, the bearer claim token over HTTP)")
		}
	}
	if len(unknown) > 0 {
		return nil, bad(unknown[0], "is not an argument of %s (it takes %s)", tool, strings.Join(allowed, ", "))
	}
	return a, nil
}

func (a *arguments) has(field string) bool {
	_, ok := a.fields[field]
	return ok
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// str reads a required string field.
func (a *arguments) str(field string) (string, error) {
	raw, ok := a.fields[field]
	if !ok {
		return "", bad(field, "is missing")
	}
	var s string
	if isNull(raw) || json.Unmarshal(raw, &s) != nil {
		return "", bad(field, "must be a string")
	}
	return s, nil
}

// strings reads a required array of strings.
func (a *arguments) strs(field string) ([]string, error) {
	raw, ok := a.fields[field]
	if !ok {
		return nil, bad(field, "is missing")
	}
	return stringArray(field, raw)
}

func stringArray(field string, raw json.RawMessage) ([]string, error) {
	var items []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, bad(field, "must be an array of strings")
	}
	out := make([]string, len(items))
	for i, it := range items {
		if isNull(it) || json.Unmarshal(it, &out[i]) != nil {
			return nil, bad(fmt.Sprintf("%s[%d]", field, i), "must be a string")
		}
	}
	return out, nil
}

// table reads a required array of arrays of strings.
func (a *arguments) table(field string) ([][]string, error) {
	raw, ok := a.fields[field]
	if !ok {
		return nil, bad(field, "is missing: a table needs columns and rows ([] for none)")
	}
	var items []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, bad(field, "must be an array of rows, each an array of strings")
	}
	if len(items) > artifact.MaxRows {
		return nil, bad(field, "has %d rows (at most %d)", len(items), artifact.MaxRows)
	}
	out := make([][]string, len(items))
	for i, it := range items {
		row, err := stringArray(fmt.Sprintf("%s[%d]", field, i), it)
		if err != nil {
			return nil, err
		}
		out[i] = row
	}
	return out, nil
}

// taskID reads and checks the task_id field.
func (a *arguments) taskID() (string, error) {
	t, err := a.str("task_id")
	if err != nil {
		return "", err
	}
	if err := refs.ValidateTaskID(t); err != nil {
		return "", bad("task_id", "%s", strings.TrimPrefix(err.Error(), "task id "))
	}
	return t, nil
}

// postArgs are the decoded arguments of bernstein_post_artifact.
type postArgs struct {
	task, key string
	payload   artifact.Payload
}

// typeFields are the fields each artifact type takes.
var typeFields = map[string][]string{
	artifact.TypeReport: {"body"},
	artifact.TypeTable:  {"columns", "rows"},
	artifact.TypeLink:   {"url", "link_kind"},
}

var payloadFields = []string{"body", "columns", "rows", "url", "link_kind"}

func decodePost(raw json.RawMessage) (*postArgs, error) {
	a, err := decodeArgs(ToolPostArtifact, raw, append([]string{"task_id", "key", "artifact_type"}, payloadFields...)...)
	if err != nil {
		return nil, err
	}
	p := &postArgs{}
	if p.task, err = a.taskID(); err != nil {
		return nil, err
	}
	if p.key, err = a.str("key"); err != nil {
		return nil, err
	}
	if err := artifact.ValidateKey(p.key); err != nil {
		return nil, err
	}
	typ, err := a.str("artifact_type")
	if err != nil {
		if !a.has("artifact_type") {
			return nil, bad("artifact_type", "is missing: want one of %s", strings.Join(artifact.Types, ", "))
		}
		return nil, err
	}
	takes, ok := typeFields[typ]
	if !ok {
		return nil, bad("artifact_type", "%q is not one of %s", typ, strings.Join(artifact.Types, ", "))
	}
	for _, f := range payloadFields {
		if a.has(f) && !slices.Contains(takes, f) {
			return nil, bad(f, "does not apply to artifact_type %s (a %s takes %s)", typ, typ, strings.Join(takes, " and "))
		}
	}
	p.payload.Type = typ
	switch typ {
	case artifact.TypeReport:
		if !a.has("body") {
			return nil, bad("body", "is missing: a report needs a markdown body")
		}
		if p.payload.Body, err = a.str("body"); err != nil {
			return nil, err
		}
	case artifact.TypeTable:
		if !a.has("columns") {
			return nil, bad("columns", "is missing: a table needs columns and rows ([] for none)")
		}
		if p.payload.Columns, err = a.strs("columns"); err != nil {
			return nil, err
		}
		if p.payload.Rows, err = a.table("rows"); err != nil {
			return nil, err
		}
	case artifact.TypeLink:
		if !a.has("url") {
			return nil, bad("url", "is missing: a link needs url and link_kind")
		}
		if p.payload.URL, err = a.str("url"); err != nil {
			return nil, err
		}
		if !a.has("link_kind") {
			return nil, bad("link_kind", "is missing: want one of %s", strings.Join(artifact.LinkKinds, ", "))
		}
		if p.payload.LinkKind, err = a.str("link_kind"); err != nil {
			return nil, err
		}
	}
	// The payload's own checks name the field too (rows[2][1], url, ...).
	if _, err := p.payload.Canonical(); err != nil {
		return nil, err
	}
	return p, nil
}

func decodeHandle(raw json.RawMessage) (string, error) {
	a, err := decodeArgs(ToolTaskHandle, raw, "task_id")
	if err != nil {
		return "", err
	}
	return a.taskID()
}
