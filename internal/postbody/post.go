package postbody

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/refs"
)

// Names of a post's fields, as MCP's arguments and the HTTP API's body
// spell them.
const (
	FieldTask     = "task_id"
	FieldKey      = "key"
	FieldType     = "artifact_type"
	FieldBody     = "body"
	FieldColumns  = "columns"
	FieldRows     = "rows"
	FieldURL      = "url"
	FieldLinkKind = "link_kind"
)

// PayloadFields are the fields of a payload, and TypeFields those each
// artifact type takes.
var (
	PayloadFields = []string{FieldBody, FieldColumns, FieldRows, FieldURL, FieldLinkKind}
	TypeFields    = map[string][]string{
		artifact.TypeReport: {FieldBody},
		artifact.TypeTable:  {FieldColumns, FieldRows},
		artifact.TypeLink:   {FieldURL, FieldLinkKind},
	}
)

// IdentityFields are fields a caller might try to claim an identity with.
var IdentityFields = map[string]bool{"agent": true, "claim_token": true, "token": true, "actor": true, "caller": true}

// Surface is where a post comes from: it decides whether the task is a
// field, and the words of the refusals that say which surface they are.
type Surface int

const (
	// MCP is the arguments of the tool bernstein_post_artifact: task_id is
	// a field.
	MCP Surface = iota
	// HTTP is the body of POST /api/v1/tasks/{id}/artifacts: the task is
	// the path's.
	HTTP
)

// Fields are the fields a post takes on s.
func (s Surface) Fields() []string {
	f := []string{FieldKey, FieldType}
	if s == MCP {
		f = append([]string{FieldTask}, f...)
	}
	return append(f, PayloadFields...)
}

// unknown refuses field, which s does not take.
func (s Surface) unknown(field string) error {
	switch {
	case s == MCP && IdentityFields[field]:
		return bad(field, "is not an argument: the caller's identity comes from the transport (the server's --agent and --claim-token over stdio, the bearer claim token over HTTP)")
	case s == MCP:
		return bad(field, "is not an argument of bernstein_post_artifact (it takes %s)", strings.Join(s.Fields(), ", "))
	case IdentityFields[field]:
		return bad(field, "is not a field of a post: the caller's identity is the bearer claim token")
	case field == FieldTask:
		return bad(field, "is not a field of a post: the task is the one the path names")
	}
	return bad(field, "is not a field of a post (it takes %s)", strings.Join(s.Fields(), ", "))
}

// Post is a decoded post: Task is "" on HTTP (the path names it).
type Post struct {
	Task, Key string
	Payload   artifact.Payload
}

// TooLargeError is a refusal for size (a body or a canonical payload over
// 1 MiB): HTTP answers it 413.
type TooLargeError struct{ artifact.InputError }

func (e *TooLargeError) Unwrap() error { return &e.InputError }

// Decode reads the JSON object raw as a post on s. A refusal is a
// MalformedError (raw is not one JSON object), a TooLargeError or an
// artifact.InputError naming the one field that is wrong; the payload has
// passed artifact's checks.
func Decode(raw []byte, s Surface) (Post, error) {
	var p Post
	o, err := ReadObject(raw)
	if err != nil {
		return p, err
	}
	if u := o.Unknown(s.Fields()); len(u) > 0 {
		for _, f := range u {
			if IdentityFields[f] || f == FieldTask {
				return p, s.unknown(f)
			}
		}
		return p, s.unknown(u[0])
	}
	if s == MCP {
		if p.Task, err = o.String(FieldTask); err != nil {
			return p, err
		}
		if err := refs.ValidateTaskID(p.Task); err != nil {
			return p, bad(FieldTask, "%s", strings.TrimPrefix(err.Error(), "task id "))
		}
	}
	if p.Key, err = o.String(FieldKey); err != nil {
		return p, err
	}
	if err := artifact.ValidateKey(p.Key); err != nil {
		return p, err
	}
	if !o.Has(FieldType) {
		return p, bad(FieldType, "is missing: want one of %s", strings.Join(artifact.Types, ", "))
	}
	typ, err := o.String(FieldType)
	if err != nil {
		return p, err
	}
	takes, ok := TypeFields[typ]
	if !ok {
		return p, bad(FieldType, "%q is not one of %s", typ, strings.Join(artifact.Types, ", "))
	}
	for _, f := range PayloadFields {
		if o.Has(f) && !slices.Contains(takes, f) {
			return p, bad(f, "does not apply to artifact_type %s (a %s takes %s)", typ, typ, strings.Join(takes, " and "))
		}
	}
	pl := &p.Payload
	pl.Type = typ
	switch typ {
	case artifact.TypeReport:
		if !o.Has(FieldBody) {
			return p, bad(FieldBody, "is missing: a report needs a markdown body")
		}
		if pl.Body, err = o.String(FieldBody); err != nil {
			return p, err
		}
		if len(pl.Body) > artifact.MaxPayloadBytes {
			return p, &TooLargeError{artifact.InputError{Field: FieldBody, Msg: fmt.Sprintf("is %d bytes (at most %d)", len(pl.Body), artifact.MaxPayloadBytes)}}
		}
	case artifact.TypeTable:
		if !o.Has(FieldColumns) {
			return p, bad(FieldColumns, "is missing: a table needs columns and rows ([] for none)")
		}
		if pl.Columns, err = o.Strings(FieldColumns); err != nil {
			return p, err
		}
		if pl.Rows, err = o.Rows(FieldRows); err != nil {
			return p, err
		}
	case artifact.TypeLink:
		if !o.Has(FieldURL) {
			return p, bad(FieldURL, "is missing: a link needs url and link_kind")
		}
		if pl.URL, err = o.String(FieldURL); err != nil {
			return p, err
		}
		if !o.Has(FieldLinkKind) {
			return p, bad(FieldLinkKind, "is missing: want one of %s", strings.Join(artifact.LinkKinds, ", "))
		}
		if pl.LinkKind, err = o.String(FieldLinkKind); err != nil {
			return p, err
		}
	}
	// The payload's own checks name the field too (rows[2][1], url, ...);
	// only its size is too large.
	if _, err := pl.Canonical(); err != nil {
		var in *artifact.InputError
		if errors.As(err, &in) && in.Field == "payload" {
			return p, &TooLargeError{*in}
		}
		return p, err
	}
	return p, nil
}
