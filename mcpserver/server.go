// Package mcpserver serves bernstein's MCP tools over the library: posting
// an artifact to a task whose live claim the caller holds, and reading a
// task's handle with its progress vector. The caller's identity comes from
// the transport (the stdio server's agent and claim tokens, or the bearer
// claim token of an HTTP request), never from a tool argument.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// Caller is who makes a tool call, as its transport established it.
type Caller struct {
	// Agent is the calling agent; "" when the transport carries no identity.
	Agent string
	// Tokens are the claim tokens the caller holds (one per claimed task).
	Tokens []string
}

// Identity resolves the caller of one tool call from its transport.
type Identity func(ctx context.Context, req *mcp.CallToolRequest) (Caller, error)

// AgentIdentity is the identity of a stdio server: it runs as one agent,
// holding the claim tokens it was started with.
func AgentIdentity(agent string, tokens ...string) Identity {
	c := Caller{Agent: agent, Tokens: append([]string(nil), tokens...)}
	return func(context.Context, *mcp.CallToolRequest) (Caller, error) { return c, nil }
}

// Options configure New.
type Options struct {
	// Identity resolves each call's caller. Nil means no identity: the
	// handle can be read, nothing can be posted.
	Identity Identity
	// Version is the server version announced at initialization.
	Version string
	// Logger receives the SDK's log; nil logs nothing.
	Logger *slog.Logger
	// ResourceTasks are the tasks whose artifact versions are listed as
	// resources; nil means the tasks of the identity's live claims (a stdio
	// server's claim tokens). Reads and subscriptions are checked against
	// each caller's claims whatever is listed.
	ResourceTasks []string
}

// New returns an MCP server with bernstein's tools over store.
func New(store *bernstein.Store, o Options) *mcp.Server {
	s := &server{store: store, identity: o.Identity, reported: map[*mcp.ServerSession]map[string]int64{}}
	if s.identity == nil {
		s.identity = AgentIdentity("")
	}
	version := o.Version
	if version == "" {
		version = "dev"
	}
	res := newResources(s)
	s.res = res
	srv := mcp.NewServer(&mcp.Implementation{Name: "bernstein", Title: "bernstein", Version: version}, &mcp.ServerOptions{
		Logger:             o.Logger,
		SubscribeHandler:   res.subscribe,
		UnsubscribeHandler: res.unsubscribe,
		Instructions: "bernstein keeps the work of agent tasks in a git repository. Post reports, tables and links " +
			"with " + ToolPostArtifact + " to a task whose live claim you hold (your identity is the transport's: " +
			"the server's --agent and claim tokens over stdio, the bearer claim token over HTTP). Read where a task " +
			"stands with " + ToolTaskHandle + ": its progress can only be earned by recorded work, never set.",
	})
	srv.AddTool(&mcp.Tool{
		Name:  ToolPostArtifact,
		Title: "Post an artifact to a claimed task",
		Description: "Post one artifact version (report, table or link) under a key to a task whose live claim the " +
			"caller holds. Reposting a key makes its next version. A caller without the claim is refused and the " +
			"refusal is recorded in the audit mirror. Limits: key 1-128 of letters, digits, _ . -; payload at most " +
			"1 MiB; tables at most 64 columns, 4096 rows, 4096 characters a cell; URLs http(s) only, at most 4096 " +
			"characters; no control characters other than tab, newline and carriage return.",
		InputSchema:  raw(postInputSchema()),
		OutputSchema: raw(postOutputSchema()),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: false, OpenWorldHint: ptr(false)},
	}, s.post)
	srv.AddTool(&mcp.Tool{
		Name:  ToolTaskHandle,
		Title: "Read a task's handle",
		Description: "Read the task handle: taskId, status (working, input_required, completed, failed, cancelled), " +
			"journalHead, spineHead, progress (the progress vector's wire form), progressHash (= progress.vector_hash) " +
			"and receiptHash over all of them. Progress is a projection of recorded work (checkpoints, diffs, gate " +
			"and evidence runs); artifacts never move it and no tool sets it.",
		InputSchema:  raw(handleInputSchema()),
		OutputSchema: raw(handleOutputSchema()),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, s.handle)
	res.srv = srv
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: latestTmpl, Name: "latest", Title: "The latest version of an artifact",
		Description: "The latest version of an artifact key of a task whose id holds no ':', re-verified on every read " +
			"(a tampered version is an error, never content). Subscribe to bernstein://<task>/<key>/latest for a key, " +
			"or bernstein://<task> for every key of a task.",
		MIMEType: payloadMIME,
	}, res.read)
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: latestPathTmpl, Name: "latest-path", Title: "The latest version of an artifact (task id with ':')",
		Description: "The latest version of an artifact key of a task whose id holds ':', written %3A (build:lint is " +
			"bernstein:///build%3Alint/<key>/latest), re-verified on every read. Subscribe to it for a key, or to " +
			"bernstein:///<task> for every key of the task.",
		MIMEType: payloadMIME,
	}, res.read)
	for _, tmpl := range []string{versionTmpl, versionPathTmpl} {
		srv.AddResourceTemplate(&mcp.ResourceTemplate{
			URITemplate: tmpl, Name: "version", Title: "One version of an artifact",
			Description: "One version of an artifact key of a task (bernstein:///<task>/<key>/v<N> for a task id with ':'), " +
				"as listed in resources/list; a version of a task whose journal cannot be read is an error saying the task is tampered.",
			MIMEType: payloadMIME,
		}, res.readUnlisted)
	}
	tasks := o.ResourceTasks
	if tasks == nil {
		tasks = res.scope()
	}
	for _, t := range tasks {
		res.track(t)
	}
	return srv
}

func ptr[T any](v T) *T { return &v }

type server struct {
	store    *bernstein.Store
	identity Identity
	res      *resources

	mu sync.Mutex
	// reported holds, per session, the most earned steps reported per task.
	reported map[*mcp.ServerSession]map[string]int64
}

// errNoIdentity refuses a post to a stdio server started without --agent.
// The call is fine: the server has nobody to post as.
var errNoIdentity = errors.New("cannot post: this server has no caller identity: start 'bernstein mcp' with --agent and --claim-token (or BERNSTEIN_AGENT and BERNSTEIN_CLAIM_TOKEN), or call over HTTP with a bearer claim token")

// toolError is a refusal the caller reads: isError, one line of text.
func toolError(err error) *mcp.CallToolResult {
	var in *artifact.InputError
	msg := err.Error()
	if errors.As(err, &in) {
		msg = "invalid " + in.Field + ": " + in.Msg
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// structured returns v as the result's structured content and, for clients
// that read only text, as its JSON text.
func structured(v any) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{StructuredContent: json.RawMessage(b), Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
}

func (s *server) post(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, err := decodePost(req.Params.Arguments)
	if err != nil {
		return toolError(err), nil
	}
	caller, err := s.identity(ctx, req)
	if err != nil {
		return toolError(err), nil
	}
	if caller.Agent == "" {
		return toolError(errNoIdentity), nil
	}
	token := s.tokenFor(caller, args.task)
	res, err := s.store.PostAsCaller(bernstein.PostRequest{
		Task: args.task, Key: args.key, Agent: caller.Agent, ClaimToken: token, Payload: args.payload,
	})
	var refused *bernstein.RefusedError
	if errors.As(err, &refused) {
		msg := fmt.Sprintf("refused (%s): %s; the refusal is recorded in the audit mirror", refused.Reason, refused.Detail)
		switch {
		case token == "" && len(caller.Tokens) == 0:
			msg += " (this server holds no claim token: start it with --claim-token)"
		case token == "":
			msg += fmt.Sprintf(" (none of this server's claim tokens is %s's live claim on %s)", caller.Agent, args.task)
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil
	}
	if err != nil {
		return toolError(err), nil
	}
	s.notify(ctx, req, args.task)
	s.res.refresh(ctx, args.task) // subscribers hear of the new version before the caller does
	out, err := structured(res)
	if err == nil {
		out.Content = append(out.Content, resourceLink(res))
	}
	return out, err
}

// tokenFor picks, among the caller's claim tokens, the one of its live
// claim on task. With one token there is nothing to pick: the store checks
// it. With none that fits, the post goes on without a token and the store
// refuses it, recording the refusal.
func (s *server) tokenFor(c Caller, task string) string {
	if len(c.Tokens) == 1 {
		return c.Tokens[0]
	}
	for _, t := range c.Tokens {
		if cl, err := s.store.ClaimByToken(t); err == nil && cl.Task == task && cl.Agent == c.Agent {
			return t
		}
	}
	return ""
}

func (s *server) handle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	task, err := decodeHandle(req.Params.Arguments)
	if err != nil {
		return toolError(err), nil
	}
	h, err := s.store.TaskHandle(task)
	if err != nil {
		return toolError(err), nil
	}
	s.notify(ctx, req, task)
	return structured(h)
}

// notify sends notifications/progress when the call carries a progress
// token and task's earned steps rose above the most this session has been
// told for it (the first time: above 0). So a notification's progress only
// grows: artifacts, gate attempts and phase changes never notify, and a
// step taken back (a producer failing again) is not reported until the
// steps pass the mark again. Total is declared gates plus declared evidence
// producers, the one number of steps a task states in advance; it is left
// out when the task declares none, or when progress (which counts
// checkpoints and diffs too) has gone past it.
func (s *server) notify(ctx context.Context, req *mcp.CallToolRequest, task string) {
	token := req.Params.GetProgressToken()
	ss := req.Session
	if token == nil || ss == nil {
		return
	}
	info, err := s.store.Task(task)
	if err != nil || info.Progress == nil {
		return
	}
	w := info.Progress
	s.mu.Lock()
	seen := s.reported[ss]
	if seen == nil {
		seen = map[string]int64{}
		s.reported[ss] = seen
		go func() {
			ss.Wait()
			s.mu.Lock()
			delete(s.reported, ss)
			s.mu.Unlock()
		}()
	}
	if w.EarnedSteps <= seen[task] {
		s.mu.Unlock()
		return
	}
	seen[task] = w.EarnedSteps
	s.mu.Unlock()
	_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: token,
		Progress:      float64(w.EarnedSteps),
		Total:         float64(progressTotal(info)),
		Message:       fmt.Sprintf("task %s: %s (vector %s)", w.TaskID, w.Vector.String(), w.VectorHash),
	})
}

// progressTotal is a notification's total: the declared gates (by name) and
// evidence producers, or 0 (left out) when there are none or when the
// earned steps have gone past them.
func progressTotal(info *bernstein.TaskInfo) int64 {
	gates := map[string]bool{}
	for _, g := range info.Gates {
		gates[g.Name] = true
	}
	total := int64(len(gates)) + info.Progress.EvidenceDeclared
	if total < info.Progress.EarnedSteps {
		return 0
	}
	return total
}
