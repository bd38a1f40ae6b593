package server

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The pages (docs/http.md, "Pages"): rendered on the server, usable without
// JavaScript; the script only adds the live part (the event stream) and the
// copy buttons. Every value that comes from a repository (titles, keys,
// actors, writers, reasons, table cells, link URLs, markdown) is untrusted:
// html/template escapes it, and rendered markdown goes through bluemonday.

// Page routes.
const (
	PagesTasks   = "/"
	PagesTask    = "/tasks/"
	AssetsPrefix = "/static/"
)

// ContentSecurityPolicy is sent with every page, fragment and asset: no
// inline script or style, nothing from another origin, no framing; forms
// (the filters and the comparison's choice, all GET) submit to this origin
// only.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// routePages mounts the pages: / (the tasks), /tasks/{id} (one task),
// /tasks/{id}/versions/{key}/{n} (one artifact version), the fragments the
// task page's script fetches when an event arrives, and the assets. The
// templates, assets and the markdown renderer are prepared here, before the
// first request, rather than at process start.
func (s *Server) routePages(mux *http.ServeMux) {
	templates()
	assets()
	markdown()
	reportPolicy()
	mux.HandleFunc("GET /{$}", s.pageTasks)
	mux.HandleFunc("GET /tasks/{id}", s.pageTask)
	mux.HandleFunc("GET /tasks/{id}/versions/{key}/{n}", s.pageVersion)
	mux.HandleFunc("GET /tasks/{id}/diff/{key}", s.pageDiff)
	mux.HandleFunc("GET /tasks/{id}/fragments/strip", s.fragmentStrip)
	mux.HandleFunc("GET /tasks/{id}/fragments/integrity", s.fragmentIntegrity)
	mux.HandleFunc("GET /tasks/{id}/fragments/timeline", s.fragmentTimeline)
	mux.HandleFunc("GET /tasks/{id}/fragments/artifacts/{key}", s.fragmentGroup)
	mux.HandleFunc("GET /tasks/{id}/fragments/versions/{key}/{n}", s.fragmentVersion)
	mux.HandleFunc("GET /static/{file}", serveAsset)
}

// pageHeaders sets the headers every page response carries.
func pageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// write renders template name of set into a buffer first, so that a failure
// is a clean 500 rather than half a page.
func (s *Server) write(w http.ResponseWriter, status int, set, name string, data any) {
	var b bytes.Buffer
	if err := templates()[set].ExecuteTemplate(&b, name, data); err != nil {
		s.opts.Logger.Error("render", "template", set+"/"+name, "err", err)
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString("<!doctype html><title>error</title><p>The page could not be rendered.</p>\n")
	}
	h := w.Header()
	pageHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// problem renders the error page (or, for a fragment, a bare paragraph).
func (s *Server) problem(w http.ResponseWriter, status int, fragment bool, msg string) {
	if fragment {
		s.write(w, status, "task", "problem", problemPage{Status: status, Message: msg})
		return
	}
	s.write(w, status, "problem", "base", page{Title: http.StatusText(status), Main: problemPage{Status: status, Message: msg}})
}

// storeProblem turns a store error into a page: an unknown task is a 404.
func (s *Server) storeProblem(w http.ResponseWriter, fragment bool, task string, err error) {
	if errors.Is(err, bernstein.ErrUnknownTask) {
		s.problem(w, http.StatusNotFound, fragment, fmt.Sprintf("There is no task %s.", task))
		return
	}
	var ie *artifact.InputError
	if errors.As(err, &ie) {
		s.problem(w, http.StatusNotFound, fragment, ie.Error())
		return
	}
	if errors.As(err, new(*refs.BadRefError)) {
		// Tampered: said, naming the ref, never rendered.
		s.problem(w, http.StatusConflict, fragment, err.Error()+".")
		return
	}
	s.opts.Logger.Error("page", "task", task, "err", err)
	s.problem(w, http.StatusInternalServerError, fragment, "Reading the task failed: "+err.Error())
}

// taskParam is the task id of the request's path. An id that is not valid
// (it contains "..", a "/" or anything outside [A-Za-z0-9_.:-]) never
// reaches the store.
func (s *Server) taskParam(w http.ResponseWriter, r *http.Request, fragment bool) (string, bool) {
	id := r.PathValue("id")
	if err := refs.ValidateTaskID(id); err != nil {
		s.problem(w, http.StatusNotFound, fragment, "There is no such task: "+err.Error()+".")
		return "", false
	}
	return id, true
}

// versionParams are the key and version of the request's path.
func (s *Server) versionParams(w http.ResponseWriter, r *http.Request, fragment bool) (string, int64, bool) {
	key := r.PathValue("key")
	if err := artifact.ValidateKey(key); err != nil {
		s.problem(w, http.StatusNotFound, fragment, "There is no such artifact: "+err.Error()+".")
		return "", 0, false
	}
	if r.PathValue("n") == "" {
		return key, 0, true
	}
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 1 {
		s.problem(w, http.StatusNotFound, fragment, "There is no such version: versions are numbered from 1.")
		return "", 0, false
	}
	return key, n, true
}

// TaskPath is the path of task's page, its id percent-encoded (':'
// included, so that no client reads it as a scheme).
func TaskPath(task string) string {
	return PagesTask + pathSegment(task)
}

// VersionPath is the path of one artifact version's page.
func VersionPath(task, key string, n int64) string {
	return TaskPath(task) + "/versions/" + pathSegment(key) + "/" + strconv.FormatInt(n, 10)
}

func pathSegment(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ":", "%3A")
}

// eventsURL is the stream a task page listens to, resuming after the
// event the page was rendered at.
func eventsURL(task string, last int64) string {
	return EventsPath + "?task=" + url.QueryEscape(task) + "&last_event_id=" + strconv.FormatInt(last, 10)
}

// The pages read through the API's memo (api.go): a task's answers are
// computed once for every open page, fragment and API client while its refs
// and the trust set stay, and are the same answers the API gives.

// readInfo is one task's TaskInfo, memoized.
func (s *Server) readInfo(id string) (*bernstein.TaskInfo, error) {
	v, err := s.store.ReadView(id)
	if err != nil {
		return nil, err
	}
	return s.api().taskInfo(v, id)
}

// readReport is one task's verification, memoized.
func (s *Server) readReport(id string) (*verify.TaskReport, error) {
	v, err := s.store.ReadView(id)
	if err != nil {
		return nil, err
	}
	rep, err := s.api().report(v, id)
	if err == nil {
		// A journal ref that cannot be read as one: the task is tampered,
		// every fragment of it a 409 naming the ref (storeProblem).
		err = rep.UnreadableError()
	}
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// pageTask is GET /tasks/{id}: the progress strip and the artifacts panel.
func (s *Server) pageTask(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskParam(w, r, false)
	if !ok {
		return
	}
	// The page is current up to the bus's last event: read it before the
	// store, so that an event for anything the page does not show has a
	// later id (the script takes what it already shows as a no-op).
	last := s.bus.LastID()
	v, err := s.readTask(id, r.URL.Query())
	if err != nil {
		s.storeProblem(w, false, id, err)
		return
	}
	s.write(w, http.StatusOK, "task", "base", page{
		Title: id + " · " + v.Info.Title,
		Body:  body{Page: "task", Task: id, TaskPath: TaskPath(id), Events: eventsURL(id, last), LastEventID: strconv.FormatInt(last, 10)},
		Main:  v,
	})
}

// pageVersion is GET /tasks/{id}/versions/{key}/{n}: one version with its
// content, whether it is the latest or not.
func (s *Server) pageVersion(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskParam(w, r, false)
	if !ok {
		return
	}
	key, n, ok := s.versionParams(w, r, false)
	if !ok {
		return
	}
	v, err := s.readVersion(id, key, n)
	if err != nil {
		s.storeProblem(w, false, id, err)
		return
	}
	if v == nil {
		s.problem(w, http.StatusNotFound, false, fmt.Sprintf("Task %s has no version %d of %s.", id, n, key))
		return
	}
	s.write(w, http.StatusOK, "version", "base", page{
		Title: fmt.Sprintf("%s · %s v%d", id, key, n),
		Body:  body{Page: "version", Task: id, TaskPath: TaskPath(id)},
		Main:  versionPage{Task: id, TaskPath: TaskPath(id), Version: *v},
	})
}

// fragmentStrip is GET /tasks/{id}/fragments/strip: the progress strip
// alone, which the task page swaps in on task.progress and task.transition.
func (s *Server) fragmentStrip(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskParam(w, r, true)
	if !ok {
		return
	}
	info, err := s.readInfo(id)
	if err != nil {
		s.storeProblem(w, true, id, err)
		return
	}
	s.write(w, http.StatusOK, "task", "strip", newStrip(info))
}

// fragmentGroup is GET /tasks/{id}/fragments/artifacts/{key}: one key's
// group, which the task page inserts when a new key's first version lands.
func (s *Server) fragmentGroup(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskParam(w, r, true)
	if !ok {
		return
	}
	key, _, ok := s.versionParams(w, r, true)
	if !ok {
		return
	}
	rep, err := s.readReport(id)
	if err != nil {
		s.storeProblem(w, true, id, err)
		return
	}
	for _, g := range buildGroups(id, rep) {
		if g.Key == key {
			s.write(w, http.StatusOK, "task", "group", g)
			return
		}
	}
	s.problem(w, http.StatusNotFound, true, fmt.Sprintf("Task %s has no artifact %s.", id, key))
}

// fragmentVersion is GET /tasks/{id}/fragments/versions/{key}/{n}: one
// version's article with its content, which the task page inserts in place
// when task.artifact names it.
func (s *Server) fragmentVersion(w http.ResponseWriter, r *http.Request) {
	id, ok := s.taskParam(w, r, true)
	if !ok {
		return
	}
	key, n, ok := s.versionParams(w, r, true)
	if !ok {
		return
	}
	v, err := s.readVersion(id, key, n)
	if err != nil {
		s.storeProblem(w, true, id, err)
		return
	}
	if v == nil {
		s.problem(w, http.StatusNotFound, true, fmt.Sprintf("Task %s has no version %d of %s.", id, n, key))
		return
	}
	s.write(w, http.StatusOK, "task", "version", *v)
}

// readTask reads what the task page shows, from one snapshot of its refs;
// q holds the panel's pins, filter and page.
func (s *Server) readTask(id string, q url.Values) (*taskPage, error) {
	v, err := s.store.ReadView(id)
	if err != nil {
		return nil, err
	}
	info, err := s.api().taskInfo(v, id)
	if err != nil {
		return nil, err
	}
	rep, err := s.api().report(v, id)
	if err != nil {
		return nil, err
	}
	tl, err := s.readTimeline(v, id, info, rep)
	if err != nil {
		return nil, err
	}
	return &taskPage{
		Info: info, Path: TaskPath(id), Integrity: newIntegrityView(info, rep), Strip: newStrip(info), Timeline: tl,
		Keys: newKeyPanel(id, buildGroups(id, rep), q), Verified: rep.Verified(), Versions: len(rep.Versions),
	}, nil
}

// readVersion reads one version with its content (nil if there is none).
func (s *Server) readVersion(id, key string, n int64) (*versionView, error) {
	rep, err := s.readReport(id)
	if err != nil {
		return nil, err
	}
	ver := rep.Find(key, n)
	if ver == nil {
		return nil, nil
	}
	at := runPositions(rep.RowList)
	v := newVersion(id, rep, ver, at[ver.JournalIndex], true)
	return &v, nil
}
