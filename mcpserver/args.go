package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/postbody"
	"github.com/bernstein/bernstein/refs"
)

// Tool arguments are decoded by internal/postbody, the decoder the HTTP API
// and the CLI's batch share, so that every refusal names the one field that
// is wrong, in the words the advertised schema uses, and alike everywhere.

func bad(field, format string, args ...any) error {
	return &artifact.InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// readArgs reads a tool call's arguments object (none, or null, is an
// empty one).
func readArgs(raw json.RawMessage) (*postbody.Object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	o, err := postbody.ReadObject(raw)
	var m *postbody.MalformedError
	if errors.As(err, &m) {
		return nil, bad("arguments", "are %s", m.Error())
	}
	return o, err
}

// postArgs are the decoded arguments of bernstein_post_artifact.
type postArgs struct {
	task, key string
	payload   artifact.Payload
}

func decodePost(raw json.RawMessage) (*postArgs, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	p, err := postbody.Decode(raw, postbody.MCP)
	var m *postbody.MalformedError
	if errors.As(err, &m) {
		return nil, bad("arguments", "are %s", m.Error())
	}
	if err != nil {
		return nil, err
	}
	return &postArgs{task: p.Task, key: p.Key, payload: p.Payload}, nil
}

func decodeHandle(raw json.RawMessage) (string, error) {
	a, err := readArgs(raw)
	if err != nil {
		return "", err
	}
	if u := a.Unknown([]string{"task_id"}); len(u) > 0 {
		for _, f := range u {
			if postbody.IdentityFields[f] {
				return "", bad(f, "is not an argument: the caller's identity comes from the transport (the server's --agent and --claim-token over stdio, the bearer claim token over HTTP)")
			}
		}
		return "", bad(u[0], "is not an argument of %s (it takes task_id)", ToolTaskHandle)
	}
	t, err := a.String("task_id")
	if err != nil {
		return "", err
	}
	if err := refs.ValidateTaskID(t); err != nil {
		return "", bad("task_id", "%s", strings.TrimPrefix(err.Error(), "task id "))
	}
	return t, nil
}
