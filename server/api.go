package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/chunkbuf"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The task API (docs/http.md, "API"): JSON under /api/v1, thin over the
// library. Its documents are the ones the CLI prints with --output-json
// (bernstein.TaskListDoc, ArtifactListDoc, ArtifactShowDoc, ProductionsDoc,
// TaskInfo, progress.Wire), plus the task detail and the journal, which
// the CLI has no command for. Every error is one APIError naming the field
// at fault. openapi.json describes all of it.

// APIPrefix is where the API is mounted.
const APIPrefix = "/api/v1"

// api is the state the API keeps for one Server: its memo.
type api struct {
	s    *Server
	memo *memo
	// keepAnswers is listKeepsAnswers (tests lower it).
	keepAnswers int
}

// apis holds each Server's API state (one memo per Server, however many
// handlers it hands out).
var apis sync.Map // *Server -> *api

func (s *Server) api() *api {
	if a, ok := apis.Load(s); ok {
		return a.(*api)
	}
	a, _ := apis.LoadOrStore(s, &api{s: s, memo: newMemo(), keepAnswers: listKeepsAnswers})
	return a.(*api)
}

// apiRoutes are the API's paths and the methods each answers, for the
// 405 answers (with Allow) of the others.
var apiRoutes = []struct {
	path    string
	methods string
}{
	{"/tasks", "GET, HEAD"},
	{"/tasks/{id}", "GET, HEAD"},
	{"/tasks/{id}/artifacts", "GET, HEAD, POST"},
	{"/tasks/{id}/artifacts/{key}", "GET, HEAD"},
	{"/tasks/{id}/artifacts/{key}/diff", "GET, HEAD"},
	{"/tasks/{id}/progress", "GET, HEAD"},
	{"/tasks/{id}/journal", "GET, HEAD"},
	{"/artifacts", "GET, HEAD"},
	{"/openapi.json", "GET, HEAD"},
	{"/events", "GET, HEAD"},
}

// routeAPI mounts the task API under /api/v1 (docs/http.md).
func (s *Server) routeAPI(mux *http.ServeMux) {
	a := s.api()
	mux.HandleFunc("GET "+APIPrefix+"/tasks", a.tasks)
	mux.HandleFunc("GET "+APIPrefix+"/tasks/{id}", a.task)
	mux.HandleFunc("GET "+APIPrefix+"/tasks/{id}/artifacts", a.artifacts)
	mux.HandleFunc("POST "+APIPrefix+"/tasks/{id}/artifacts", a.post)
	mux.HandleFunc("GET "+APIPrefix+"/tasks/{id}/artifacts/{key}", a.artifact)
	mux.HandleFunc("GET "+APIPrefix+"/tasks/{id}/artifacts/{key}/diff", a.diff)
	mux.HandleFunc("GET "+APIPrefix+"/tasks/{id}/progress", a.progress)
	mux.HandleFunc("GET "+APIPrefix+"/tasks/{id}/journal", a.journal)
	mux.HandleFunc("GET "+APIPrefix+"/artifacts", a.productions)
	mux.HandleFunc("GET "+APIPrefix+"/openapi.json", serveOpenAPI)
	// Every other method on those paths is a 405 and every other path
	// under the API a 404, both as JSON errors (the mux would answer them
	// in plain text).
	for _, rt := range apiRoutes {
		allow := rt.methods
		mux.HandleFunc(APIPrefix+rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method", fmt.Sprintf("%s is not allowed here (allowed: %s)", r.Method, allow))
		})
	}
	mux.HandleFunc(APIPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "path", fmt.Sprintf("%s is not a path of the API (see %s/openapi.json)", r.URL.EscapedPath(), APIPrefix))
	})
}

// fail answers err: an unknown task or artifact is a 404, bad input a 400,
// a chain the store will not write on because it holds unproven rows a 409,
// anything else a 500.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	var in *artifact.InputError
	var unknown *bernstein.UnknownArtifactError
	switch {
	case errors.Is(err, bernstein.ErrUnknownTask):
		writeError(w, http.StatusNotFound, "task_id", err.Error())
	case errors.As(err, new(*refs.BadRefError)):
		// The task's journal or ledger ref cannot be read as one
		// (docs/trust.md, Refs that cannot be read): tampered, never
		// rendered; the message names the ref.
		writeError(w, http.StatusConflict, "task_id", err.Error())
	case errors.Is(err, bernstein.ErrUnproven):
		// The request is sound; the task's state refuses it until the
		// chain is repaired (the message names the chain and the index).
		writeError(w, http.StatusConflict, "task_id", err.Error())
	case errors.As(err, &unknown):
		field := "key"
		if unknown.Pinned {
			field = "version"
		}
		writeError(w, http.StatusNotFound, field, err.Error())
	case errors.As(err, &in):
		writeError(w, http.StatusBadRequest, in.Field, in.Msg)
	default:
		a.s.opts.Logger.Error("api", "method", r.Method, "path", r.URL.EscapedPath(), "err", err)
		writeError(w, http.StatusInternalServerError, "", err.Error())
	}
}

// taskID reads and checks the task id of the path, before anything reads
// a ref: an id that is not one (a '..', a '/' from '%2F', ...) is a 400.
func taskID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := refs.ValidateTaskID(id); err != nil {
		writeError(w, http.StatusBadRequest, "task_id", strings.TrimPrefix(err.Error(), "task id "))
		return "", false
	}
	return id, true
}

// view takes a consistent snapshot for task ("" for every task).
func (a *api) view(w http.ResponseWriter, r *http.Request, task string) (*bernstein.ReadView, bool) {
	v, err := a.s.store.ReadView(task)
	if err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return v, true
}

// Memo names.
const (
	memoTask        = "task"
	memoReport      = "report"
	memoJournal     = "journal"
	memoProductions = "productions"
	memoList        = "list"
	memoPageList    = "pagelist"
)

// listKeepsAnswers is how many tasks a list may have and still keep each
// task's answers in the memo (for the pages of single tasks and the next
// list). A longer list only uses the answers already kept: keeping two
// answers for each of 100,000 tasks would push each other out of the memo
// before any was used again, and hold hundreds of MB for the collector to
// mark throughout the list (docs/scaling.md, "Cold lists").
const listKeepsAnswers = 4096

// taskInfo is v.Task(task), memoized.
func (a *api) taskInfo(v *bernstein.ReadView, task string) (*bernstein.TaskInfo, error) {
	key, err := v.TaskKey(task)
	if err != nil {
		return nil, err
	}
	val, err := a.memo.get(memoTask+"\x00"+task, key, func() (any, int64, error) {
		info, err := v.Task(task)
		return info, 4096, err
	})
	if err != nil {
		return nil, err
	}
	return val.(*bernstein.TaskInfo), nil
}

// taskInfoKept is taskInfo, or (keep false) the answer taskInfo kept, if
// any, else v.Task(task) not kept.
func (a *api) taskInfoKept(v *bernstein.ReadView, task string, keep bool) (*bernstein.TaskInfo, error) {
	if keep {
		return a.taskInfo(v, task)
	}
	key, err := v.TaskKey(task)
	if err != nil {
		return nil, err
	}
	val, err := a.memo.use(memoTask+"\x00"+task, key, func() (any, error) { return v.Task(task) })
	if err != nil {
		return nil, err
	}
	return val.(*bernstein.TaskInfo), nil
}

// reportKept is reportWith, or (keep false) the answer reportWith kept, if
// any, else check(task) not kept.
func (a *api) reportKept(v *bernstein.ReadView, task string, check func(string) (*verify.TaskReport, error), keep bool) (*verify.TaskReport, error) {
	if keep {
		return a.reportWith(v, task, check)
	}
	key, err := v.TaskKey(task)
	if err != nil {
		return nil, err
	}
	val, err := a.memo.use(memoReport+"\x00"+task, key, func() (any, error) { return check(task) })
	if err != nil {
		return nil, err
	}
	return val.(*verify.TaskReport), nil
}

// report is v.Artifacts(task), memoized.
func (a *api) report(v *bernstein.ReadView, task string) (*verify.TaskReport, error) {
	return a.reportWith(v, task, v.Artifacts)
}

// reportWith is report computed by verify (a list's verifier shares one
// spine index among its tasks).
func (a *api) reportWith(v *bernstein.ReadView, task string, check func(string) (*verify.TaskReport, error)) (*verify.TaskReport, error) {
	key, err := v.TaskKey(task)
	if err != nil {
		return nil, err
	}
	val, err := a.memo.get(memoReport+"\x00"+task, key, func() (any, int64, error) {
		rep, err := check(task)
		if err != nil {
			return nil, 0, err
		}
		size := int64(1024)
		for _, ver := range rep.Versions {
			size += 512 + int64(len(ver.Payload))
		}
		return rep, size, nil
	})
	if err != nil {
		return nil, err
	}
	return val.(*verify.TaskReport), nil
}

// journalRows is v.Journal(task), memoized.
func (a *api) journalRows(v *bernstein.ReadView, task string) ([]bernstein.FeedRow, error) {
	key, err := v.JournalKey(task)
	if err != nil {
		return nil, err
	}
	val, err := a.memo.get(memoJournal+"\x00"+task, key, func() (any, int64, error) {
		rows, err := v.Journal(task)
		if err != nil {
			return nil, 0, err
		}
		size := int64(1024)
		for _, row := range rows {
			size += 512 + int64(len(row.Row.Data))
		}
		return rows, size, nil
	})
	if err != nil {
		return nil, err
	}
	return val.([]bernstein.FeedRow), nil
}

// pageOf reads ?limit= and ?cursor=; a limit that is not a number is a
// 400 naming it (check refuses the rest, before anything is read).
func pageOf(w http.ResponseWriter, r *http.Request, check func(bernstein.Page) error) (bernstein.Page, bool) {
	q := r.URL.Query()
	var p bernstein.Page
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit", fmt.Sprintf("%q is not a number of entries from 1 to %d", q.Get("limit"), bernstein.MaxPageLimit))
			return p, false
		}
		p.Limit = n
	}
	if q.Has("cursor") {
		if p.Cursor = q.Get("cursor"); p.Cursor == "" {
			writeError(w, http.StatusBadRequest, "cursor", "an empty cursor is not one (leave it out for the first page)")
			return p, false
		}
	}
	if err := check(p); err != nil {
		var in *artifact.InputError
		if errors.As(err, &in) {
			writeError(w, http.StatusBadRequest, in.Field, in.Msg)
		} else {
			writeError(w, http.StatusBadRequest, "", err.Error())
		}
		return p, false
	}
	return p, true
}

// GET /api/v1/tasks[?limit=N][&cursor=C]: 'task list --output-json'.
func (a *api) tasks(w http.ResponseWriter, r *http.Request) {
	p, ok := pageOf(w, r, bernstein.CheckTaskPage)
	if !ok {
		return
	}
	asOf := a.memo.now()
	v, ids, next, err := a.s.store.PageView(p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	list, err := a.listBody(v, ids, p, asOf)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	head, tail, err := bernstein.TaskListFrame(bernstein.TaskListCompact, list.n, next, v.BadArchives())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.FormatInt(int64(len(head))+list.elems.Len()+int64(len(tail))+1, 10))
	w.WriteHeader(http.StatusOK)
	// The kept list is written as it is, not copied into a response.
	w.Write(head)
	if list.n > 0 {
		list.elems.WriteTo(w)
	}
	w.Write(append(tail, '\n'))
}

// listAnswer is a list's tasks as GET /api/v1/tasks serves them: n
// entries, encoded (compact, each as json.Marshal writes it, separated by
// commas) into memory that holds no pointers.
type listAnswer struct {
	elems chunkbuf.Buffer
	n     int
}

// listBody is the list of the tasks ids of the view, encoded, kept as one
// answer for the page p under the view's ListKey of its ids, as
// listEntries keeps a list's entries. Each task is encoded as it is read,
// so the list holds its encoding and not its tasks' answers; the tasks'
// answers are kept in the memo only while the list has at most
// listKeepsAnswers tasks.
func (a *api) listBody(v *bernstein.ReadView, ids []string, p bernstein.Page, asOf time.Time) (*listAnswer, error) {
	key, err := v.ListKey(ids)
	if err != nil {
		return nil, err
	}
	name := memoList + "\x00" + p.Cursor + "\x00" + strconv.Itoa(p.Limit)
	val, err := a.memo.getAsOf(name, key, asOf, func() (any, int64, error) {
		l := &listAnswer{}
		tw := bernstein.NewTaskListElements(&l.elems, bernstein.TaskListCompact)
		err := a.eachEntry(v, ids, len(ids) <= a.keepAnswers, func(e bernstein.TaskListEntry) error {
			l.n++
			return tw.Task(e)
		})
		if err != nil {
			return nil, 0, err
		}
		return l, 1024 + l.elems.Len(), nil
	})
	if err != nil {
		return nil, err
	}
	return val.(*listAnswer), nil
}

// taskList is every task of the view with its integrity (listEntries; the
// view was taken at asOf).
func (a *api) taskList(v *bernstein.ReadView, asOf time.Time) ([]bernstein.TaskListEntry, error) {
	ids, err := v.TaskIDs()
	if err != nil {
		return nil, err
	}
	return a.listEntries(v, ids, bernstein.Page{}, asOf)
}

// listEntries is the entries of listBody's list, decoded and kept as one
// answer for the page p (every task when p is the zero Page), under the view's ListKey of its ids, used when
// it was complete less than memoMaxAge before asOf (when the view was
// taken: the snapshot of a large repository takes seconds): a list
// asked for again while none of its tasks' refs, the spines, the keys and
// the trust set moved costs one snapshot and one lookup, not one per task.
// One answer a list, not two a task: however many tasks there are, a list
// cannot push its own answers out before the next list reads them (it
// fits in the memo's bytes, or it is not kept at all), and its age runs
// from when it was complete, so a list that takes longer than memoMaxAge
// to compute is still kept for the next one.
func (a *api) listEntries(v *bernstein.ReadView, ids []string, p bernstein.Page, asOf time.Time) ([]bernstein.TaskListEntry, error) {
	key, err := v.ListKey(ids)
	if err != nil {
		return nil, err
	}
	name := memoPageList + "\x00" + p.Cursor + "\x00" + strconv.Itoa(p.Limit)
	val, err := a.memo.getAsOf(name, key, asOf, func() (any, int64, error) {
		// The entries of the API's list of the same tasks, decoded: one
		// verification of each task for both (the API's list, when kept,
		// costs this list a decoding).
		l, err := a.listBody(v, ids, p, asOf)
		if err != nil {
			return nil, 0, err
		}
		tasks, err := decodeEntries(l)
		if err != nil {
			return nil, 0, err
		}
		return tasks, listSize(tasks), nil
	})
	if err != nil {
		return nil, err
	}
	return val.([]bernstein.TaskListEntry), nil
}

// decodeEntries decodes a list's encoded entries.
func decodeEntries(l *listAnswer) ([]bernstein.TaskListEntry, error) {
	dec := json.NewDecoder(io.MultiReader(strings.NewReader("["), l.elems.Reader(), strings.NewReader("]")))
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("the list's entries: %w", err)
	}
	tasks := make([]bernstein.TaskListEntry, 0, l.n)
	for dec.More() {
		var e bernstein.TaskListEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("the list's entries: %w", err)
		}
		tasks = append(tasks, e)
	}
	if len(tasks) != l.n {
		return nil, fmt.Errorf("the list's entries: %d decoded, %d encoded", len(tasks), l.n)
	}
	return tasks, nil
}

// listSize is roughly what a list's entries hold in memory, about 1 KiB a
// task with one artifact (measured: 1.08 KB a task at 1,000 tasks).
func listSize(tasks []bernstein.TaskListEntry) int64 {
	size := int64(1024)
	for _, t := range tasks {
		size += 1024 + int64(len(t.ID)+len(t.Title)) + 96*int64(len(t.Artifacts)) + 256*int64(len(t.Evidence)+len(t.Gates))
	}
	return size
}

// eachEntry calls fn with each task of ids and its integrity, in order,
// through the memo (keep: each answer computed is kept; else only answers
// already kept are used).
func (a *api) eachEntry(v *bernstein.ReadView, ids []string, keep bool, fn func(bernstein.TaskListEntry) error) error {
	lv := v.ListVerifier()
	for _, id := range ids {
		info, err := a.taskInfoKept(v, id, keep)
		if errors.Is(err, bernstein.ErrUnknownTask) {
			continue
		}
		if e, ok := bernstein.UnreadableEntry(id, err); ok {
			if err := fn(e); err != nil { // read past: listed as tampered
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("task %s: %w", id, err)
		}
		rep, err := a.reportKept(v, id, lv.Artifacts, keep)
		if err != nil {
			return fmt.Errorf("task %s: %w", id, err)
		}
		if err := fn(bernstein.TaskListEntry{TaskInfo: info, Integrity: bernstein.NewTaskIntegrity(info, rep)}); err != nil {
			return err
		}
	}
	return nil
}

// TaskDetail is the document of GET /api/v1/tasks/{id}: the task as 'task
// show --output-json' prints it, its artifacts as 'artifact list <task>
// --output-json' prints them, and the id of the latest event published
// before they were read (a client that follows the event stream from there
// misses nothing).
type TaskDetail struct {
	Task        *bernstein.TaskInfo       `json:"task"`
	Artifacts   bernstein.ArtifactListDoc `json:"artifacts"`
	LastEventID int64                     `json:"last_event_id"`
}

// GET /api/v1/tasks/{id}.
func (a *api) task(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	last := a.s.bus.LastID()
	v, ok := a.view(w, r, id)
	if !ok {
		return
	}
	info, err := a.taskInfo(v, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	rep, err := a.report(v, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, TaskDetail{Task: info, Artifacts: bernstein.NewArtifactListDoc(rep), LastEventID: last})
}

// GET /api/v1/tasks/{id}/artifacts: 'artifact list <task> --output-json'.
func (a *api) artifacts(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
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
	writeJSON(w, http.StatusOK, bernstein.NewArtifactListDoc(rep))
}

// GET /api/v1/tasks/{id}/artifacts/{key}[?version=N][&strict=true]:
// 'artifact show <task> <key> --output-json'. A version whose content is
// withheld (tampered, its journal broken or rolled back, or not verified
// with strict) is a 200 whose payload is null and content_withheld says
// why: the document is the answer, as the CLI prints it.
func (a *api) artifact(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	key := r.PathValue("key")
	if err := artifact.ValidateKey(key); err != nil {
		a.fail(w, r, err)
		return
	}
	sel := bernstein.ShowSelection{Key: key}
	q := r.URL.Query()
	if q.Has("version") {
		n, err := strconv.ParseInt(q.Get("version"), 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "version", fmt.Sprintf("%q is not a version number (1, 2, ...)", q.Get("version")))
			return
		}
		sel.Version = &n
	}
	if q.Has("strict") {
		b, err := strconv.ParseBool(q.Get("strict"))
		if err != nil {
			writeError(w, http.StatusBadRequest, "strict", fmt.Sprintf("%q is not true or false", q.Get("strict")))
			return
		}
		sel.Strict = b
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
	doc, err := bernstein.NewArtifactShowDoc(rep, sel)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

// GET /api/v1/tasks/{id}/progress: 'task progress --output-json', the wire
// form with its proof.
func (a *api) progress(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	v, ok := a.view(w, r, id)
	if !ok {
		return
	}
	info, err := a.taskInfo(v, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var wire *progress.Wire = info.Progress
	writeJSON(w, http.StatusOK, wire)
}

// Journal pages: at most maxJournalLimit rows, journalLimit unless asked.
const (
	journalLimit    = 1000
	maxJournalLimit = 10000
)

// GET /api/v1/tasks/{id}/journal[?after=N][&limit=M]: the journal rows
// after index N (all rows without it), oldest first, at most M of them.
func (a *api) journal(w http.ResponseWriter, r *http.Request) {
	id, ok := taskID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	after, limit := int64(-1), journalLimit
	if q.Has("after") {
		n, err := strconv.ParseInt(q.Get("after"), 10, 64)
		if err != nil || n < -1 {
			writeError(w, http.StatusBadRequest, "after", fmt.Sprintf("%q is not a journal index (-1, 0, 1, ...)", q.Get("after")))
			return
		}
		after = n
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > maxJournalLimit {
			writeError(w, http.StatusBadRequest, "limit", fmt.Sprintf("%q is not a number of rows from 1 to %d", q.Get("limit"), maxJournalLimit))
			return
		}
		limit = n
	}
	v, ok := a.view(w, r, id)
	if !ok {
		return
	}
	rows, err := a.journalRows(v, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, bernstein.NewJournalDoc(id, rows, after, limit))
}

// GET /api/v1/artifacts[?limit=N][&cursor=C]: 'artifact list --output-json' without a task.
func (a *api) productions(w http.ResponseWriter, r *http.Request) {
	p, ok := pageOf(w, r, bernstein.CheckProductionsPage)
	if !ok {
		return
	}
	v, ok := a.view(w, r, "")
	if !ok {
		return
	}
	val, err := a.memo.get(memoProductions, v.SpineKey(), func() (any, int64, error) {
		ps, err := v.Productions()
		return ps, int64(256 * len(ps)), err
	})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ps, next, err := bernstein.ProductionsPageOf(val.([]verify.Production), p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	doc := bernstein.NewProductionsDoc(ps)
	doc.NextCursor = next
	writeJSON(w, http.StatusOK, doc)
}
