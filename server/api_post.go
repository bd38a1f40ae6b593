package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/record"
)

// POST /api/v1/tasks/{id}/artifacts posts one artifact version as the MCP
// tool bernstein_post_artifact does over HTTP: the caller is the bearer
// claim token, never a field of the body, and the body is the tool's
// arguments without task_id (the task is the path's).
//
//   - 401: no bearer token, or one that is no live claim's (there is no
//     caller to record a refusal for; nothing is written). A token of a
//     claim row no trusted writer signed, in the ledger of the task posted
//     to, is not a 401: its post is refused by the store as claim_unproven
//     (403), recorded with the agent that row names.
//   - 413: the request is over MaxPostBytes (read no further), or the
//     report body or the canonical payload is over 1 MiB.
//   - 400: the body is not one JSON object.
//   - 422: a JSON object that is not a valid post (a field missing, of the
//     wrong type, unknown or not of its artifact_type; a value out of its
//     limits): the error names the field, nothing is written.
//   - 403: the token's claim does not cover the task (unclaimed_task,
//     claim_scope_violation) or the task's ledger holds rows no trusted
//     writer signed (claim_unproven); 404 when the task does not exist.
//     These are refusals of the store: each is recorded in the audit
//     mirror, as over MCP and the CLI.
//   - 409: the task's journal holds rows no trusted writer signed: the
//     store writes nothing on top of them (ErrUnproven; the message names
//     the chain and the index).
//   - 201: the receipt (bernstein.PostResult), with Location naming the
//     version.

// MaxPostBytes bounds a post's request body: MCP's bound, room for a 1 MiB
// payload written with the worst JSON escaping a client may use.
const MaxPostBytes = mcpserver.MaxRequestBytes

// postFields are the fields a post takes, and typeFields those of each
// artifact type (as the MCP tool's).
var (
	postFields    = []string{"key", "artifact_type", "body", "columns", "rows", "url", "link_kind"}
	payloadFields = []string{"body", "columns", "rows", "url", "link_kind"}
	typeFields    = map[string][]string{
		artifact.TypeReport: {"body"},
		artifact.TypeTable:  {"columns", "rows"},
		artifact.TypeLink:   {"url", "link_kind"},
	}
	// identityFields are fields a caller might try to claim an identity with.
	identityFields = map[string]bool{"agent": true, "claim_token": true, "token": true, "actor": true, "caller": true}
)

// postError is a refusal of the body, with its status.
type postError struct {
	status int
	field  string
	msg    string
}

func (e *postError) Error() string { return e.field + ": " + e.msg }

func invalid(field, format string, args ...any) error {
	return &postError{http.StatusUnprocessableEntity, field, fmt.Sprintf(format, args...)}
}

// claimBearer reads an 'Authorization: Bearer' token.
func claimBearer(r *http.Request) (string, bool) {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
		return "", false
	}
	return f[1], true
}

func (a *api) post(w http.ResponseWriter, r *http.Request) {
	task, ok := taskID(w, r)
	if !ok {
		return
	}
	token, ok := claimBearer(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bernstein"`)
		writeError(w, http.StatusUnauthorized, "claim_token", "no bearer claim token: send 'Authorization: Bearer <token>' with the token 'bernstein task claim' printed")
		return
	}
	caller, err := a.s.store.ClaimByToken(token)
	if err != nil {
		var ok bool
		if caller, ok = a.unprovenClaim(task, token); !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bernstein", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "claim_token", "the bearer claim token matches no live claim (released, completed or never issued)")
			return
		}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxPostBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "request", fmt.Sprintf("is more than %d bytes: a payload is at most %d bytes in canonical form", MaxPostBytes, artifact.MaxPayloadBytes))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "request", "could not be read: "+err.Error())
		return
	}
	key, payload, err := decodePostBody(raw)
	var pe *postError
	var bad *artifact.InputError
	switch {
	case errors.As(err, &pe):
		writeError(w, pe.status, pe.field, pe.msg)
		return
	case errors.As(err, &bad):
		writeError(w, http.StatusUnprocessableEntity, bad.Field, bad.Msg)
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	res, err := a.s.store.PostAsCaller(bernstein.PostRequest{Task: task, Key: key, Agent: caller.Agent, ClaimToken: token, Payload: payload})
	var refused *bernstein.RefusedError
	var in *artifact.InputError
	switch {
	case errors.As(err, &refused):
		msg := fmt.Sprintf("refused (%s): %s; the refusal is recorded in the audit mirror", refused.Reason, refused.Detail)
		switch {
		case refused.Reason == record.ReasonClaimUnproven:
			writeError(w, http.StatusForbidden, "task_id", msg)
		case refused.Reason == record.ReasonUnclaimedTask && !a.exists(task):
			writeError(w, http.StatusNotFound, "task_id", msg)
		default:
			writeError(w, http.StatusForbidden, "claim_token", msg)
		}
		return
	case errors.As(err, &in):
		writeError(w, http.StatusUnprocessableEntity, in.Field, in.Msg)
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", fmt.Sprintf("%s/tasks/%s/artifacts/%s?version=%d", APIPrefix, PathTask(task), url.PathEscape(key), res.Version))
	writeJSON(w, http.StatusCreated, res)
}

// unprovenClaim is the claimant of a claim row of task's ledger that no
// trusted writer signed and whose token is token (a forged claim): its
// post goes to the store, which refuses it (claim_unproven) and records the
// refusal, as for the CLI. Only a task whose ledger holds rows at fault is
// read for it (from the memo), so a garbage token costs what it did.
func (a *api) unprovenClaim(task, token string) (*bernstein.Claimant, bool) {
	v, err := a.s.store.ReadView(task)
	if err != nil {
		return nil, false
	}
	info, err := a.taskInfo(v, task)
	if err != nil || info.Progress == nil {
		return nil, false
	}
	for _, f := range info.Progress.Proof.RowsAtFault {
		if f.Chain == "ledger" {
			return a.s.store.UnprovenClaim(task, token)
		}
	}
	return nil, false
}

// PathTask writes a task id as a path segment: ':' as %3A, so that no
// client reads it as a scheme ('.' may stay: it is never a whole segment).
func PathTask(task string) string {
	return strings.ReplaceAll(url.PathEscape(task), ":", "%3A")
}

// exists reports whether task has a ledger now.
func (a *api) exists(task string) bool {
	v, err := a.s.store.ReadView(task)
	if err != nil {
		return true // cannot tell: do not call it unknown
	}
	_, err = v.Task(task)
	return !errors.Is(err, bernstein.ErrUnknownTask)
}

// decodePostBody reads a post's body: one JSON object of postFields. Every
// refusal names the one field that is wrong, in the words of the MCP tool
// (mcpserver/args.go), so that both surfaces refuse alike.
func decodePostBody(raw []byte) (string, artifact.Payload, error) {
	var p artifact.Payload
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", p, &postError{http.StatusBadRequest, "request", "is empty: send a JSON object (key, artifact_type, and the fields of the type)"}
	}
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		return "", p, &postError{http.StatusBadRequest, "request", fmt.Sprintf("is not valid JSON: %v", err)}
	}
	if raw[0] != '{' {
		return "", p, &postError{http.StatusBadRequest, "request", "must be a JSON object"}
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", p, &postError{http.StatusBadRequest, "request", fmt.Sprintf("is not a JSON object: %v", err)}
	}
	var unknown []string
	for f := range fields {
		if !slices.Contains(postFields, f) {
			unknown = append(unknown, f)
		}
	}
	sort.Strings(unknown)
	for _, f := range unknown {
		if identityFields[f] {
			return "", p, invalid(f, "is not a field of a post: the caller's identity is the bearer claim token")
		}
		if f == "task_id" {
			return "", p, invalid(f, "is not a field of a post: the task is the one the path names")
		}
	}
	if len(unknown) > 0 {
		return "", p, invalid(unknown[0], "is not a field of a post (it takes %s)", strings.Join(postFields, ", "))
	}
	has := func(f string) bool { _, ok := fields[f]; return ok }
	str := func(f string) (string, error) {
		raw, ok := fields[f]
		if !ok {
			return "", invalid(f, "is missing")
		}
		var s string
		if isJSONNull(raw) || json.Unmarshal(raw, &s) != nil {
			return "", invalid(f, "must be a string")
		}
		return s, nil
	}
	key, err := str("key")
	if err != nil {
		return "", p, err
	}
	if err := artifact.ValidateKey(key); err != nil {
		return "", p, err
	}
	if !has("artifact_type") {
		return "", p, invalid("artifact_type", "is missing: want one of %s", strings.Join(artifact.Types, ", "))
	}
	typ, err := str("artifact_type")
	if err != nil {
		return "", p, err
	}
	takes, ok := typeFields[typ]
	if !ok {
		return "", p, invalid("artifact_type", "%s is not one of %s", strconv.Quote(typ), strings.Join(artifact.Types, ", "))
	}
	for _, f := range payloadFields {
		if has(f) && !slices.Contains(takes, f) {
			return "", p, invalid(f, "does not apply to artifact_type %s (a %s takes %s)", typ, typ, strings.Join(takes, " and "))
		}
	}
	p.Type = typ
	switch typ {
	case artifact.TypeReport:
		if !has("body") {
			return "", p, invalid("body", "is missing: a report needs a markdown body")
		}
		if p.Body, err = str("body"); err != nil {
			return "", p, err
		}
		if len(p.Body) > artifact.MaxPayloadBytes {
			return "", p, &postError{http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("is %d bytes (at most %d)", len(p.Body), artifact.MaxPayloadBytes)}
		}
	case artifact.TypeTable:
		if !has("columns") {
			return "", p, invalid("columns", "is missing: a table needs columns and rows ([] for none)")
		}
		if p.Columns, err = stringArray("columns", fields["columns"]); err != nil {
			return "", p, err
		}
		if !has("rows") {
			return "", p, invalid("rows", "is missing: a table needs columns and rows ([] for none)")
		}
		if p.Rows, err = tableRows("rows", fields["rows"]); err != nil {
			return "", p, err
		}
	case artifact.TypeLink:
		if !has("url") {
			return "", p, invalid("url", "is missing: a link needs url and link_kind")
		}
		if p.URL, err = str("url"); err != nil {
			return "", p, err
		}
		if !has("link_kind") {
			return "", p, invalid("link_kind", "is missing: want one of %s", strings.Join(artifact.LinkKinds, ", "))
		}
		if p.LinkKind, err = str("link_kind"); err != nil {
			return "", p, err
		}
	}
	// The payload's own checks name the field too (rows[2][1], url, ...);
	// only its size is a 413.
	if _, err := p.Canonical(); err != nil {
		var in *artifact.InputError
		if errors.As(err, &in) && in.Field == "payload" {
			return "", p, &postError{http.StatusRequestEntityTooLarge, in.Field, in.Msg}
		}
		if errors.As(err, &in) {
			return "", p, invalid(in.Field, "%s", in.Msg)
		}
		return "", p, err
	}
	return key, p, nil
}

func isJSONNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// stringArray reads an array of strings.
func stringArray(field string, raw json.RawMessage) ([]string, error) {
	var items []json.RawMessage
	if isJSONNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, invalid(field, "must be an array of strings")
	}
	out := make([]string, len(items))
	for i, it := range items {
		if isJSONNull(it) || json.Unmarshal(it, &out[i]) != nil {
			return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "must be a string")
		}
	}
	return out, nil
}

// tableRows reads an array of arrays of strings.
func tableRows(field string, raw json.RawMessage) ([][]string, error) {
	var items []json.RawMessage
	if isJSONNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, invalid(field, "must be an array of rows, each an array of strings")
	}
	if len(items) > artifact.MaxRows {
		return nil, invalid(field, "has %d rows (at most %d)", len(items), artifact.MaxRows)
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
