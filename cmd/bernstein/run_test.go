package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// The tests here drive the commands as the GitHub CLI's tests do: a
// constructor with a runF captures the options it parsed, and a run
// function runs on in-memory streams against a real repository, in
// process. The end-to-end scenarios stay in testdata/script.

// parse runs the command build makes on args and returns the options its
// constructor parsed (nil when it stopped before running).
func parse[O any](t *testing.T, f *factory, build func(*factory, func(*O) error) *cobra.Command, args ...string) (*O, error) {
	t.Helper()
	var got *O
	cmd := build(f, func(o *O) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return got, err
}

// mustParse is parse that fails the test on an error.
func mustParse[O any](t *testing.T, f *factory, build func(*factory, func(*O) error) *cobra.Command, args ...string) *O {
	t.Helper()
	o, err := parse(t, f, build, args...)
	if err != nil || o == nil {
		t.Fatalf("%v: %v (options %v)", args, err, o)
	}
	return o
}

func quietFactory() *factory {
	return &factory{IO: &IO{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}}
}

// withCtx adapts a constructor whose runF takes a context.
func withCtx[O any](build func(*factory, func(context.Context, *O) error) *cobra.Command) func(*factory, func(*O) error) *cobra.Command {
	return func(f *factory, runF func(*O) error) *cobra.Command {
		return build(f, func(_ context.Context, o *O) error { return runF(o) })
	}
}

// TestParsedOptions: each constructor only parses, into options that say
// what the command line asked for (defaults from the environment
// included).
func TestParsedOptions(t *testing.T) {
	t.Setenv("BERNSTEIN_AGENT", "env-agent")
	t.Setenv("BERNSTEIN_CLAIM_TOKEN", "env-token")
	t.Setenv("BERNSTEIN_READ_TOKEN", "env-read")
	t.Setenv("BERNSTEIN_REPO", "/env/repo")
	f := quietFactory()

	create := mustParse(t, f, newTaskCreateCmd, "T-1", "--title", "one", "--gate", "g=true", "--evidence", "e=x", "--optional-evidence", "o=y", "--output-json")
	if create.Spec.ID != "T-1" || create.Spec.Title != "one" || !reflect.DeepEqual(create.Gates, []string{"g=true"}) ||
		!reflect.DeepEqual(create.Evidence, []string{"e=x"}) || !reflect.DeepEqual(create.Optional, []string{"o=y"}) || !create.JSON {
		t.Errorf("task create: %+v", create)
	}
	if claim := mustParse(t, f, newTaskClaimCmd, "T-1"); claim.Agent != "env-agent" || claim.Task != "T-1" {
		t.Errorf("task claim takes $BERNSTEIN_AGENT: %+v", claim)
	}
	if claim := mustParse(t, f, newTaskClaimCmd, "T-1", "--agent", "a1"); claim.Agent != "a1" {
		t.Errorf("task claim --agent: %+v", claim)
	}
	complete := func(f *factory, runF func(*taskTransitionOptions) error) *cobra.Command {
		return newTaskTransitionCmd(f, "task.completed", runF)
	}
	if tr := mustParse(t, f, complete, "T-1", "--reason", "done"); tr.Kind != "task.completed" || tr.Reason != "done" || tr.Task != "T-1" {
		t.Errorf("task complete: %+v", tr)
	}

	post := mustParse(t, f, newArtifactPostCmd, "T-1", "k", "--type", "report", "--body", "")
	if post.Task != "T-1" || post.Key != "k" || !post.BodySet || post.Agent != "env-agent" || post.ClaimToken != "env-token" || post.Stdin {
		t.Errorf("artifact post: an empty --body is a body, the caller from the environment: %+v", post)
	}
	if post := mustParse(t, f, newArtifactPostCmd, "T-1", "k", "--type", "report"); post.BodySet {
		t.Errorf("artifact post without --body: BodySet")
	}
	batch := mustParse(t, f, newArtifactPostCmd, "--stdin", "--url", "u", "--type", "link", "--agent", "a2")
	if !batch.Stdin || batch.Task != "" || !reflect.DeepEqual(batch.PerPostFlags, []string{"type", "url"}) || batch.Agent != "a2" {
		t.Errorf("artifact post --stdin: per-post flags in the order a batch names them: %+v", batch)
	}
	if o, err := parse(t, f, newArtifactPostCmd, "--stdin", "T-1"); o != nil || err == nil || !strings.Contains(err.Error(), "--stdin takes no arguments") {
		t.Errorf("artifact post --stdin T-1: %v %v", o, err)
	}

	if show := mustParse(t, f, newArtifactShowCmd, "T-1", "k"); show.Version != nil {
		t.Errorf("artifact show without --version: %v", *show.Version)
	}
	if show := mustParse(t, f, newArtifactShowCmd, "T-1", "k", "--version", "0", "--strict"); show.Version == nil || *show.Version != 0 || !show.Strict {
		t.Errorf("artifact show --version 0 is a version asked for: %+v", show)
	}
	if at := mustParse(t, f, newArtifactAttestCmd, "T-1", "k", "--version", "0", "-o", "x.json", "--bundle"); at.Version == nil || *at.Version != 0 || at.Output != "x.json" || !at.Bundle {
		t.Errorf("artifact attest: %+v", at)
	}
	if d := mustParse(t, f, newArtifactDiffCmd, "T-1", "k", "v1", "3"); !reflect.DeepEqual(d.Versions, []string{"v1", "3"}) {
		t.Errorf("artifact diff: %+v", d)
	}
	if l := mustParse(t, f, newArtifactListCmd); l.Task != "" {
		t.Errorf("artifact list without a task: %+v", l)
	}

	if g := mustParse(t, f, newGateRunCmd, "T-1", "build", "--quiet", "--", "make", "-j2"); g.Task != "T-1" || g.Gate != "build" || !reflect.DeepEqual(g.Argv, []string{"make", "-j2"}) || !g.Quiet {
		t.Errorf("gate run: %+v", g)
	}
	if g, err := parse(t, f, newGateRunCmd, "T-1", "build", "make"); g != nil || exitOf(err) != 1 {
		t.Errorf("gate run with a command not after --: %v %v", g, err)
	}
	if ev := mustParse(t, f, newEvidenceRunCmd, "T-1", "a", "b"); !reflect.DeepEqual(ev.Producers, []string{"a", "b"}) {
		t.Errorf("evidence run: %+v", ev)
	}
	if d, err := parse(t, f, newDiffCaptureCmd, "T-1"); d != nil || exitOf(err) != 1 {
		t.Errorf("diff capture without --base: %v %v", d, err)
	}

	if in := mustParse(t, f, newInitCmd, "--ssh-agent"); !in.SSHAgent || in.AgentKey != "" {
		t.Errorf("init --ssh-agent: the agent's one key: %+v", in)
	}
	if in := mustParse(t, f, newInitCmd, "--ssh-agent", "SHA256:abc"); !in.SSHAgent || in.AgentKey != "SHA256:abc" {
		t.Errorf("init --ssh-agent KEY: %+v", in)
	}
	if in, err := parse(t, f, newInitCmd, "extra"); in != nil || err == nil {
		t.Errorf("init with an argument and no --ssh-agent: %v %v", in, err)
	}

	if h := mustParse(t, f, newHooksInstallCmd, "--checkpoint", "T-1"); !h.checkpointSet || h.checkpoint != "T-1" || h.Repo != "/env/repo" {
		t.Errorf("hooks install --checkpoint: %+v", h)
	}
	withRepo := &factory{IO: f.IO, repo: "/flag/repo"}
	if h := mustParse(t, withRepo, newHooksUninstallCmd, "--pre-push"); !h.prePush || h.Repo != "/flag/repo" {
		t.Errorf("hooks uninstall --repo: %+v", h)
	}

	// serve becomes bernstein-serve with the flags given, never with what
	// the environment holds (a read token stays out of the process list).
	if s := mustParse(t, f, newServeCmd, "--allow-remote", "--addr", "127.0.0.1:0"); !reflect.DeepEqual(s.Args, []string{"serve", "--addr=127.0.0.1:0", "--allow-remote=true"}) {
		t.Errorf("serve: %+v", s)
	}
	if s := mustParse(t, f, newServeCmd, "--read-token", "given"); !reflect.DeepEqual(s.Args, []string{"serve", "--read-token=given"}) {
		t.Errorf("serve --read-token: %+v", s)
	}
	if m := mustParse(t, f, withCtx(newMCPCmd), "--http", "127.0.0.1:0"); m.IdentitySet || m.HTTP != "127.0.0.1:0" || !reflect.DeepEqual(m.Args, []string{"mcp", "--http=127.0.0.1:0"}) {
		t.Errorf("mcp --http: %+v", m)
	}
	if m := mustParse(t, f, withCtx(newMCPCmd), "--claim-token", "t1", "--claim-token", "t2"); !m.IdentitySet || !reflect.DeepEqual(m.Tokens, []string{"t1", "t2"}) {
		t.Errorf("mcp --claim-token: %+v", m)
	}
	if c := mustParse(t, f, newCloneCmd, "file:///x.git", "dir"); c.URL != "file:///x.git" || c.Dir != "dir" {
		t.Errorf("clone: %+v", c)
	}
	if p := mustParse(t, f, newPushCmd); p.Remote != "origin" {
		t.Errorf("push: %+v", p)
	}
	if p := mustParse(t, f, newFetchCmd, "upstream", "--output-json"); p.Remote != "upstream" || !p.JSON {
		t.Errorf("fetch: %+v", p)
	}
}

// exitOf is the exit status an error from a command gives.
func exitOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	return 1
}

// buffers are in-memory streams for a run function.
func buffers(stdin string) (*IO, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &IO{In: strings.NewReader(stdin), Out: &out, Err: &errb}, &out, &errb
}

// opener opens the environment's repository as the global flags would.
func (e *cliEnv) opener(sio *IO) openFunc {
	f := &factory{IO: sio, repo: e.repo}
	return f.Store
}

// neverOpen is a store a run function must not open: its input is bad.
func neverOpen(t *testing.T) openFunc {
	return func() (*bernstein.Store, error) {
		t.Helper()
		t.Fatal("opened the repository for input it should have refused first")
		return nil, nil
	}
}

// TestRunFunctionsInMemory: the run functions post, batch and read on
// in-memory streams, as the binary does on its own.
func TestRunFunctionsInMemory(t *testing.T) {
	e := newCLIEnv(t)
	token := e.claimed("T-1", "a1")

	// A report from stdin ('--body-file -').
	sio, out, _ := buffers("# From stdin\n")
	post := &artifactPostOptions{IO: sio, Store: e.opener(sio), Task: "T-1", Key: "notes", Agent: "a1", ClaimToken: token,
		payloadFlags: payloadFlags{Type: "report", BodyFile: "-"}}
	if err := artifactPostRun(post); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "posted notes v1 to T-1 (journal index 0, spine entry ") {
		t.Fatalf("post: %q", out.String())
	}

	// A batch from stdin: one posted, one refused (exit 3).
	sio, out, _ = buffers(`{"task":"T-1","key":"grid","type":"table","column":["a"],"row":["1"]}` + "\n\n" +
		`{"task":"T-1","key":"grid","type":"table","column":["a"],"row":["2"],"claim-token":"bct_wrong"}` + "\n")
	batch := &artifactPostOptions{IO: sio, Store: e.opener(sio), Agent: "a1", ClaimToken: token, Stdin: true}
	if err := postBatchRun(batch); exitOf(err) != 3 {
		t.Fatalf("batch with a refused post: %v (exit %d)", err, exitOf(err))
	}
	type batchLine struct {
		Line    int    `json:"line"`
		Status  string `json:"status"`
		Version int64  `json:"version"`
		Reason  string `json:"reason"`
	}
	var lines []batchLine
	dec := json.NewDecoder(out)
	for dec.More() {
		var l batchLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 || lines[0].Line != 1 || lines[0].Status != "posted" || lines[0].Version != 1 ||
		lines[1].Line != 3 || lines[1].Status != "refused" || lines[1].Reason == "" {
		t.Fatalf("batch lines: %+v", lines)
	}

	// What was posted reads back: the report as it came on stdin.
	sio, out, _ = buffers("")
	if err := artifactShowRun(&artifactShowOptions{IO: sio, Store: e.opener(sio), Task: "T-1", Key: "notes"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "notes v1 (report) of task T-1: verified") || !strings.Contains(out.String(), "\n# From stdin\n") {
		t.Fatalf("show: %q", out.String())
	}
	sio, out, _ = buffers("")
	if err := taskShowRun(&taskShowOptions{IO: sio, Store: e.opener(sio), Task: "T-1"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"claim:    a1\n", "artifact: grid (latest v1)\n", "artifact: notes (latest v1)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("task show lacks %q:\n%s", want, out.String())
		}
	}
	// An unknown task exits 1 (the default), naming it.
	sio, _, _ = buffers("")
	if err := taskShowRun(&taskShowOptions{IO: sio, Store: e.opener(sio), Task: "T-9"}); exitOf(err) != 1 || !errors.Is(err, bernstein.ErrUnknownTask) {
		t.Fatalf("task show T-9: %v", err)
	}
}

// TestBadInputOpensNothing: a run function refuses bad input before it
// opens the repository, so the refusal is the same with or without one and
// nothing is written.
func TestBadInputOpensNothing(t *testing.T) {
	sio, _, _ := buffers("")
	never := neverOpen(t)
	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"post, no type", func() error {
			return artifactPostRun(&artifactPostOptions{IO: sio, Store: never, Task: "T-1", Key: "k"})
		}, "invalid type: is missing"},
		{"post, a flag of another type", func() error {
			return artifactPostRun(&artifactPostOptions{IO: sio, Store: never, Task: "T-1", Key: "k", payloadFlags: payloadFlags{Type: "link", URL: "https://x.test", Kind: "preview", BodySet: true}})
		}, "invalid body: does not apply to --type link"},
		{"batch, a per-post flag", func() error {
			return postBatchRun(&artifactPostOptions{IO: sio, Store: never, Stdin: true, PerPostFlags: []string{"kind", "url"}})
		}, "invalid kind: does not apply with --stdin"},
		{"batch, a bad line", func() error {
			in, _, _ := buffers(`{"task":"T-1","key":"k","type":"report","body":"x"}` + "\n" + `{"task":"T-1","key":"k","key":"j"}` + "\n")
			return postBatchRun(&artifactPostOptions{IO: in, Store: never, Stdin: true})
		}, "line 2: "},
		{"task create, a bad gate", func() error {
			return taskCreateRun(&taskCreateOptions{IO: sio, Store: never, Spec: bernstein.TaskSpec{ID: "T-1"}, Gates: []string{"nocommand"}})
		}, `invalid gate: "nocommand": want NAME=COMMAND`},
		{"show, a bad key", func() error {
			return artifactShowRun(&artifactShowOptions{IO: sio, Store: never, Task: "T-1", Key: "no key"})
		}, "invalid key"},
		{"diff, a bad version", func() error {
			return artifactDiffRun(&artifactDiffOptions{IO: sio, Store: never, Task: "T-1", Key: "k", Versions: []string{"v0"}})
		}, "invalid from"},
		{"mcp, identity over HTTP", func() error {
			return mcpRun(context.Background(), &mcpOptions{IO: sio, Store: never, HTTP: "127.0.0.1:0", IdentitySet: true})
		}, "--agent and --claim-token apply to the stdio server"},
		{"mcp, a token without its agent", func() error {
			t.Setenv("BERNSTEIN_AGENT", "")
			return mcpRun(context.Background(), &mcpOptions{IO: sio, Store: never, Tokens: []string{"bct_x"}})
		}, "a claim token needs its agent"},
	}
	for _, c := range cases {
		err := c.run()
		if err == nil || !strings.Contains(userMessage(err), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestAuditOpenFailureExits2: audit verify's operational errors exit 2,
// not 1 (which says tampered), and keep the hint the other commands give.
func TestAuditOpenFailureExits2(t *testing.T) {
	sio, out, _ := buffers("")
	notRepo := func() (*bernstein.Store, error) {
		return nil, fmt.Errorf("%w: /nowhere", bernstein.ErrNotRepository)
	}
	err := auditVerifyRun(&auditVerifyOptions{IO: sio, Store: notRepo})
	if exitOf(err) != 2 || !strings.Contains(err.Error(), "use --repo DIR or run 'bernstein init'") || out.Len() != 0 {
		t.Fatalf("audit verify outside a repository: %v (exit %d), stdout %q", err, exitOf(err), out.String())
	}
}

// maxCommandLines is the longest a function of the CLI may be: a command
// reads in one screen.
const maxCommandLines = 60

// TestCommandFunctionsAreShort: no function of the CLI, constructor or run
// function, is longer than maxCommandLines (help texts are constants).
func TestCommandFunctionsAreShort(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	server, err := filepath.Glob("../bernstein-serve/*.go") // the server program's commands have the same shape
	if err != nil || len(server) == 0 {
		t.Fatalf("the server program's sources: %v %v", server, err)
	}
	files = append(files, server...)
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n++
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if lines > maxCommandLines {
				t.Errorf("%s: %s is %d lines, more than %d: split it (docs/architecture.md, The CLI)", name, fd.Name.Name, lines, maxCommandLines)
			}
		}
	}
	if n < 100 {
		t.Fatalf("read only %d functions", n)
	}
}

// TestOtherTypesFlagsNamedInOrder: flags of another type are refused with
// one error that names the first of them alphabetically and lists the
// rest, whichever order they came in (a map's order once chose the name).
func TestOtherTypesFlagsNamedInOrder(t *testing.T) {
	for i := 0; i < 20; i++ {
		o := &payloadFlags{Type: "link", URL: "https://example.com", Kind: "preview", BodySet: true, Body: "x", CSVFile: "t.csv", Rows: []string{"a"}}
		_, err := o.payload(&IO{})
		var ie *artifact.InputError
		if !errors.As(err, &ie) || ie.Field != "body" || ie.Msg != "does not apply to --type link (nor do --csv, --row)" {
			t.Fatalf("run %d: %v, want body: does not apply to --type link (nor do --csv, --row)", i, err)
		}
	}
}
