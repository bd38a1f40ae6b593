package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/postbody"
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

// postError is a refusal of the body, with its status.
type postError struct {
	status int
	field  string
	msg    string
}

func (e *postError) Error() string { return e.field + ": " + e.msg }

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

// decodePostBody reads a post's body with the decoder MCP and the CLI's
// batch share (internal/postbody): 400 when it is not one JSON object, 413
// for a body or payload over 1 MiB, 422 (an artifact.InputError) for the
// field that is wrong.
func decodePostBody(raw []byte) (string, artifact.Payload, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", artifact.Payload{}, &postError{http.StatusBadRequest, "request", "is empty: send a JSON object (key, artifact_type, and the fields of the type)"}
	}
	p, err := postbody.Decode(raw, postbody.HTTP)
	var m *postbody.MalformedError
	var big *postbody.TooLargeError
	switch {
	case errors.As(err, &m):
		return "", p.Payload, &postError{http.StatusBadRequest, "request", "is " + m.Error()}
	case errors.As(err, &big):
		return "", p.Payload, &postError{http.StatusRequestEntityTooLarge, big.Field, big.Msg}
	case err != nil:
		return "", p.Payload, err
	}
	return p.Key, p.Payload, nil
}
