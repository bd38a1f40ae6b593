package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// diffParams reads the key and the ?from=, ?to= and ?strict= of a diff
// request; on bad input it calls bad with the parameter and why, and returns
// false. A page's form sends an empty field for the default (emptyDefault).
func diffParams(r *http.Request, emptyDefault bool, bad func(field, msg string)) (bernstein.DiffSelection, bool) {
	sel := bernstein.DiffSelection{Key: r.PathValue("key")}
	if err := artifact.ValidateKey(sel.Key); err != nil {
		bad("key", err.(*artifact.InputError).Msg)
		return sel, false
	}
	q := r.URL.Query()
	for _, name := range []string{"from", "to"} {
		if !q.Has(name) || (emptyDefault && q.Get(name) == "") {
			continue
		}
		n, err := strconv.ParseInt(q.Get(name), 10, 64)
		if err != nil || n < 1 {
			bad(name, fmt.Sprintf("%q is not a version number (1, 2, ...)", q.Get(name)))
			return sel, false
		}
		if name == "from" {
			sel.From = &n
		} else {
			sel.To = &n
		}
	}
	if q.Has("strict") {
		b, err := strconv.ParseBool(q.Get("strict"))
		if err != nil {
			bad("strict", fmt.Sprintf("%q is not true or false", q.Get("strict")))
			return sel, false
		}
		sel.Strict = b
	}
	return sel, true
}

// diffErrorField names the parameter an unknown version came from.
func diffErrorField(sel bernstein.DiffSelection, err error) string {
	var unknown *bernstein.UnknownArtifactError
	var none *bernstein.NoEarlierVersionError
	switch {
	case errors.As(err, &none):
		return "from"
	case errors.As(err, &unknown) && unknown.Pinned:
		if sel.From != nil && *sel.From == unknown.Version {
			return "from"
		}
		return "to"
	}
	return "key"
}

// GET /api/v1/tasks/{id}/artifacts/{key}/diff[?from=A][&to=B][&strict=true]:
// 'artifact diff <task> <key> [A [B]] --output-json'. A version that may not
// be shown is refused, not compared: a 200 whose diff is null and refused
// says why, as the CLI prints it (and exits 2).
func (a *api) diff(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	sel, ok := diffParams(r, false, func(field, msg string) { writeError(w, http.StatusBadRequest, field, msg) })
	if !ok {
		return
	}
	v, ok := a.view(w, r, id)
	if !ok {
		return
	}
	rep, err := a.report(v, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	doc, err := bernstein.NewArtifactDiffDoc(rep, sel)
	if errors.Is(err, bernstein.ErrUnknownArtifact) {
		writeError(w, http.StatusNotFound, diffErrorField(sel, err), err.Error())
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}
