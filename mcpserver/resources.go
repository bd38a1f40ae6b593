package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Every artifact version is a resource, bernstein://<task>/<key>/v<N>,
// registered with the SDK (which lists, pages and reads them, and tells
// clients when the list changes); bernstein://<task>/<key>/latest is a
// template for a key's latest version. A client subscribes to a key
// (bernstein://<task>/<key>/latest) or a whole task (bernstein://<task>);
// when a version lands, from this process or any other, the SDK sends
// notifications/resources/updated to those subscribers. Only the tasks in
// the caller's claim scope are registered, read or subscribed to
// (docs/mcp.md, Resources).

const (
	uriScheme   = "bernstein://"
	payloadMIME = "application/json"
	latestTmpl  = uriScheme + "{task}/{key}/latest"
	// latestPathTmpl is the template of the tasks whose id holds ':'.
	latestPathTmpl = uriScheme + "/{task}/{key}/latest"
	// versionTmpl and versionPathTmpl route a version URI the server has
	// not registered to readUnlisted.
	versionTmpl     = uriScheme + "{task}/{key}/v{version}"
	versionPathTmpl = uriScheme + "/{task}/{key}/v{version}"
)

// A task id without ':' is the URI's authority: bernstein://T-1/notes/v1.
// One holding ':' cannot be (build:lint reads as a host and a port, and
// T: or T:01 would be read as T and T:1 by a WHATWG URL parser), so its
// URI has an empty authority and the task, its ':' written %3A, as the
// first path segment: bernstein:///build%3Alint/notes/v1. Both are what
// RFC 6570 expansion of their template makes of the id. Every task has one
// spelling: parseURI reads others (so the claim scope judges them alike)
// and the handlers refuse them.

// taskRoot is the URI of a task without its scheme.
func taskRoot(task string) string {
	if !strings.Contains(task, ":") {
		return task
	}
	return "/" + strings.ReplaceAll(task, ":", "%3A")
}

// VersionURI names one artifact version.
func VersionURI(task, key string, version int64) string {
	return fmt.Sprintf("%s%s/%s/v%d", uriScheme, taskRoot(task), key, version)
}

// LatestURI names a key's latest version; subscribing to it follows the key.
func LatestURI(task, key string) string { return uriScheme + taskRoot(task) + "/" + key + "/latest" }

// TaskURI is what a client subscribes to to follow every key of a task.
func TaskURI(task string) string { return uriScheme + taskRoot(task) }

// resourceRef is a parsed bernstein:// URI: a task, a key's latest (version
// 0), or one version.
type resourceRef struct {
	task, key string
	version   int64
}

// uri is the one spelling of what r names.
func (r resourceRef) uri() string {
	switch {
	case r.key == "":
		return TaskURI(r.task)
	case r.version == 0:
		return LatestURI(r.task, r.key)
	}
	return VersionURI(r.task, r.key, r.version)
}

// parseURI reads a bernstein:// URI in the authority or the path form, its
// percent-escapes decoded. It accepts spellings other than r.uri(): a
// caller checks the claim scope on r.task first, then canonical.
func parseURI(uri string) (resourceRef, error) {
	rest, ok := strings.CutPrefix(uri, uriScheme)
	if !ok {
		return resourceRef{}, fmt.Errorf("not a bernstein:// URI: %q", uri)
	}
	rest = strings.TrimPrefix(rest, "/") // the path form
	parts := strings.Split(rest, "/")
	for i, p := range parts {
		d, err := url.PathUnescape(p)
		if err != nil {
			return resourceRef{}, fmt.Errorf("%s: %w", uri, err)
		}
		parts[i] = d
	}
	var r resourceRef
	switch len(parts) {
	case 1:
		r.task = parts[0]
	case 3:
		r.task, r.key = parts[0], parts[1]
		if parts[2] != "latest" {
			n, err := strconv.ParseInt(strings.TrimPrefix(parts[2], "v"), 10, 64)
			if !strings.HasPrefix(parts[2], "v") || err != nil || n < 1 || "v"+strconv.FormatInt(n, 10) != parts[2] {
				return resourceRef{}, fmt.Errorf("%s: the last part is v<N> or latest", uri)
			}
			r.version = n
		}
		if err := artifact.ValidateKey(r.key); err != nil {
			return resourceRef{}, fmt.Errorf("%s: %w", uri, err)
		}
	default:
		return resourceRef{}, fmt.Errorf("%s: a resource is bernstein://<task>/<key>/v<N> or .../latest, a subscription also bernstein://<task>", uri)
	}
	if err := refs.ValidateTaskID(r.task); err != nil {
		return resourceRef{}, fmt.Errorf("%s: %w", uri, err)
	}
	return r, nil
}

// canonical refuses a URI that names r in a spelling other than its own.
func canonical(uri string, r resourceRef) error {
	if want := r.uri(); uri != want {
		return invalidParams("%s is not the URI of this resource of task %s: it is %s", uri, r.task, want)
	}
	return nil
}

func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// resources registers the artifact versions of the tasks in scope with the
// server and tells subscribers of new ones.
type resources struct {
	s   *server
	srv *mcp.Server

	mu    sync.Mutex // serializes refreshes
	heads map[string]bernstein.Heads
	seen  map[string]bool // version URIs registered

	wmu      sync.Mutex
	watchers map[*mcp.ServerSession]bool
	stop     func()
}

func newResources(s *server) *resources {
	return &resources{s: s, heads: map[string]bernstein.Heads{}, seen: map[string]bool{}, watchers: map[*mcp.ServerSession]bool{}}
}

// inScope checks that the caller of a request holds a live claim on task:
// the claim scope of resources.
func (r *resources) inScope(ctx context.Context, extra *mcp.RequestExtra, task string) error {
	c, err := r.s.identity(ctx, &mcp.CallToolRequest{Extra: extra})
	if err != nil {
		return invalidParams("%v", err)
	}
	if c.Agent == "" {
		return invalidParams("%v", errNoIdentity)
	}
	for _, t := range c.Tokens {
		if cl, err := r.s.store.ClaimByToken(t); err == nil && cl.Task == task && cl.Agent == c.Agent {
			return nil
		}
	}
	return invalidParams("task %s is outside this caller's claim scope: an agent reads and subscribes to the artifacts of the tasks whose live claim it holds", task)
}

// scope is the tasks whose live claims the identity's caller holds, as the
// server starts (a stdio server's claim tokens).
func (r *resources) scope() []string {
	c, err := r.s.identity(context.Background(), &mcp.CallToolRequest{})
	if err != nil || c.Agent == "" {
		return nil
	}
	var tasks []string
	for _, t := range c.Tokens {
		if cl, err := r.s.store.ClaimByToken(t); err == nil && cl.Agent == c.Agent {
			tasks = append(tasks, cl.Task)
		}
	}
	return tasks
}

// track registers task's versions and follows its journal from now on.
func (r *resources) track(task string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.heads[task]; ok {
		return
	}
	r.heads[task] = bernstein.Heads{}
	r.refreshLocked(context.Background(), task)
}

// refresh registers the versions task's journal gained since the last look
// and tells the subscribers of the task and of each key that moved.
func (r *resources) refresh(ctx context.Context, task string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.heads[task]; ok {
		r.refreshLocked(ctx, task)
	}
}

func (r *resources) refreshAll(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for task := range r.heads {
		r.refreshLocked(ctx, task)
	}
}

func (r *resources) refreshLocked(ctx context.Context, task string) {
	since := r.heads[task]
	f, err := r.s.store.TaskFeed(task, since)
	if err != nil {
		return // an unknown or unreadable task has nothing to list; reads say why
	}
	r.heads[task] = f.Heads
	moved := map[string]bool{}
	for _, row := range f.Rows {
		if row.Chain != "journal" || row.Row.Kind != record.KindArtifactPosted || row.Proof == verify.Tampered {
			continue
		}
		var d record.ArtifactPosted
		if row.Row.DecodeData(&d) != nil {
			continue
		}
		uri := VersionURI(task, d.Key, d.Version)
		if !r.seen[uri] {
			r.seen[uri] = true
			r.srv.AddResource(&mcp.Resource{
				URI: uri, Name: fmt.Sprintf("%s/%s/v%d", task, d.Key, d.Version), MIMEType: payloadMIME, Size: d.Size,
				Title:       fmt.Sprintf("%s v%d (%s) of task %s", d.Key, d.Version, d.ArtifactType, task),
				Description: fmt.Sprintf("artifact %s version %d of task %s, content %s, spine entry %s", d.Key, d.Version, task, d.ContentHash, d.SpineEntryHash),
			}, r.read)
		}
		moved[d.Key] = true
	}
	if f.Reset || len(moved) > 0 {
		for key := range moved {
			r.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: LatestURI(task, key)})
		}
		r.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: TaskURI(task)})
	}
}

// readUnlisted answers a version URI the server has not registered: one
// of a task in the caller's scope whose journal ref cannot be read as one
// (so none of its versions is listed) is the task tampered, named, as a
// read of its latest version says; any other is not found, as before.
func (r *resources) readUnlisted(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	ref, err := parseURI(uri)
	if err != nil || ref.key == "" || ref.version == 0 || canonical(uri, ref) != nil || r.inScope(ctx, req.Extra, ref.task) != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	rep, err := r.s.store.Artifacts(ref.task)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err := rep.UnreadableError(); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	return nil, mcp.ResourceNotFoundError(uri)
}

// read re-verifies the version a URI names and returns its payload's
// canonical JSON; a version that does not verify is an error, never content.
func (r *resources) read(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	ref, err := parseURI(uri)
	if err != nil || ref.key == "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err := r.inScope(ctx, req.Extra, ref.task); err != nil {
		return nil, err
	}
	if err := canonical(uri, ref); err != nil {
		return nil, err
	}
	rep, err := r.s.store.Artifacts(ref.task)
	if errors.Is(err, bernstein.ErrUnknownTask) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	if err := rep.UnreadableError(); err != nil {
		// The task's journal ref cannot be read as one: tampered, named.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	var v *verify.Version
	if ref.version == 0 {
		v, _ = rep.Shown(ref.key)
	} else {
		v = rep.Find(ref.key, ref.version)
	}
	if v == nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	payload, why := rep.Content(v)
	if payload == nil {
		state := "withheld"
		if v.State == verify.Tampered {
			state = "tampered"
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("%s v%d of task %s is %s: %s", v.Key, v.Version, ref.task, state, why)}
	}
	meta := mcp.Meta{"state": v.State, "version": v.Version, "content_hash": string(v.ContentHash),
		"spine_entry_hash": string(v.SpineEntryHash), "writer": v.Writer, "journal_index": v.JournalIndex}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
		URI: uri, MIMEType: payloadMIME, Text: string(payload), Meta: meta,
	}}}, nil
}

// subscribe admits subscriptions to a task or a key in the caller's claim
// scope, and watches the refs while any session subscribes, so that posts
// by other processes reach the subscribers.
func (r *resources) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	ref, err := parseURI(req.Params.URI)
	if err != nil {
		return invalidParams("%v", err)
	}
	if ref.version != 0 {
		return invalidParams("%s: a version never changes; subscribe to %s or %s", req.Params.URI, LatestURI(ref.task, ref.key), TaskURI(ref.task))
	}
	if err := r.inScope(ctx, req.Extra, ref.task); err != nil {
		return err
	}
	if err := canonical(req.Params.URI, ref); err != nil {
		return err
	}
	r.track(ref.task)
	return r.watch(req.Session)
}

func (r *resources) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error { return nil }

// watch starts the ref watch for session (once), which ends with the
// session when no other session still watches.
func (r *resources) watch(ss *mcp.ServerSession) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if ss == nil || r.watchers[ss] {
		return nil
	}
	if len(r.watchers) == 0 {
		stop, err := watchRefs(r.s.store.GitDir(), func() { r.refreshAll(context.Background()) })
		if err != nil {
			return err
		}
		r.stop = stop
	}
	r.watchers[ss] = true
	go func() {
		ss.Wait()
		r.wmu.Lock()
		defer r.wmu.Unlock()
		delete(r.watchers, ss)
		if len(r.watchers) == 0 && r.stop != nil {
			r.stop()
			r.stop = nil
		}
	}()
	return nil
}

// watchRefs calls changed when a journal ref may have moved, as the event
// bus of `bernstein serve` watches them: fsnotify on the directories whose
// entries a ref update renames (the journals' folder, and the git
// directory for packed-refs), and a slow poll as a safety net. The watches
// are in place when it returns.
func watchRefs(gitDir string, changed func()) (stop func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch refs: %w", err)
	}
	journals := filepath.Join(gitDir, "refs", "bernstein", "journal")
	os.MkdirAll(journals, 0o755)
	for _, d := range []string{gitDir, journals} {
		if err := w.Add(d); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", d, err)
		}
	}
	done := make(chan struct{})
	go func() {
		poll := time.NewTicker(2 * time.Second)
		defer poll.Stop()
		for {
			select {
			case <-done:
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Dir(ev.Name) == gitDir && filepath.Base(ev.Name) != "packed-refs" {
					continue
				}
			case <-w.Errors:
			case <-poll.C:
			}
			changed()
		}
	}()
	return func() { close(done); w.Close() }, nil
}

// resourceLink is the link a post's result carries to the new version.
func resourceLink(res *bernstein.PostResult) *mcp.ResourceLink {
	size := res.Size
	return &mcp.ResourceLink{
		URI: VersionURI(res.Task, res.Key, res.Version), Name: fmt.Sprintf("%s/%s/v%d", res.Task, res.Key, res.Version),
		Title: fmt.Sprintf("%s v%d of task %s", res.Key, res.Version, res.Task), MIMEType: payloadMIME, Size: &size,
	}
}
