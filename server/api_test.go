package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/server"
)

// apiClient talks to a server's API over httptest and checks every response
// against the OpenAPI description (openapi_test.go).
type apiClient struct {
	t    *testing.T
	base string
	srv  *server.Server
	spec *apiSpec
	http *http.Client
}

// newAPIClient serves r's repository (a fresh store, not watching: the API
// needs no bus) and returns a client of it.
func newAPIClient(t *testing.T, r *repo) *apiClient {
	t.Helper()
	s, err := bernstein.Open(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(s, server.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
		s.Close()
	})
	return &apiClient{t: t, base: hs.URL, srv: srv, spec: loadSpec(t), http: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// do sends one request (path as sent: escaped, dot segments and all) and
// checks the response against the description.
func (c *apiClient) do(method, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	// The path goes out exactly as written (no client-side cleaning).
	req.URL.Opaque = "//" + req.URL.Host + path
	if i := strings.IndexByte(path, '?'); i >= 0 {
		req.URL.Opaque = "//" + req.URL.Host + path[:i]
	}
	for k, v := range hdr {
		if k == "Host" {
			// In origin form: a request line in absolute form names the
			// host itself, and the server takes that over the header.
			req.Host = v
			req.URL.Opaque = strings.TrimPrefix(req.URL.Opaque, "//"+req.URL.Host)
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	p := path
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	c.spec.check(c.t, method, p, res, b)
	return res, b
}

// get GETs an API path, wants status, and decodes the body into v (nil: not).
func (c *apiClient) get(path string, status int, v any) []byte {
	c.t.Helper()
	res, body := c.do(http.MethodGet, server.APIPrefix+path, nil, nil)
	if res.StatusCode != status {
		c.t.Fatalf("GET %s: %d, want %d\n%s", path, res.StatusCode, status, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			c.t.Fatalf("GET %s: %v\n%s", path, err, body)
		}
	}
	return body
}

// wantError GETs path and wants an error with status naming field.
func (c *apiClient) wantError(path string, status int, field string) server.APIError {
	c.t.Helper()
	var e server.APIError
	c.get(path, status, &e)
	if e.Error.Field != field || e.Error.Message == "" {
		c.t.Errorf("GET %s: error %+v, want field %q", path, e.Error, field)
	}
	return e
}

// cliJSON runs the bernstein binary and decodes its stdout, whatever its
// exit status.
func (r *repo) cliJSON(v any, args ...string) {
	r.t.Helper()
	cmd := exec.Command(cliBin, append([]string{"--repo", r.dir}, args...)...)
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+r.home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		r.t.Fatalf("bernstein %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
}

// sameDoc checks that the API answered the document the CLI prints.
func sameDoc(t *testing.T, what string, api, cli any) {
	t.Helper()
	if !reflect.DeepEqual(api, cli) {
		a, _ := json.MarshalIndent(api, "", " ")
		c, _ := json.MarshalIndent(cli, "", " ")
		t.Errorf("%s: the API and the CLI differ:\nAPI %s\nCLI %s", what, a, c)
	}
}

// apiRepo is a repository with a task whose id needs care in a path
// (T:1.a), holding two versions of a report with a checkpoint between
// them, a table without rows and a link; and a task T-2 with none.
func apiRepo(t *testing.T) *repo {
	t.Helper()
	r := newTaskRepo(t, "T:1.a")
	r.post("summary", "# first\n\nalpha")
	r.cli("checkpoint", r.task, "--commit", "HEAD")
	r.post("summary", "# second <b>bold</b> & more")
	r.cli("artifact", "post", r.task, "grid", "--type", "table", "--column", "a", "--column", "b", "--agent", "agent-1", "--claim-token", r.token)
	r.cli("artifact", "post", r.task, "site", "--type", "link", "--url", "https://preview.example.com/x", "--kind", "preview", "--agent", "agent-1", "--claim-token", r.token)
	r.cli("task", "create", "T-2", "--title", "empty")
	return r
}

// TestAPIReads: every read endpoint answers the document the CLI prints,
// for an id with ':' and '.', sent raw and percent-encoded.
func TestAPIReads(t *testing.T) {
	apiTestDone(t)
	r := apiRepo(t)
	c := newAPIClient(t, r)

	var list, cliList any
	c.get("/tasks", 200, &list)
	r.cliJSON(&cliList, "task", "list", "--output-json")
	sameDoc(t, "task list", list, cliList)

	var cliTask, cliArtifacts any
	r.cliJSON(&cliTask, "task", "show", "T:1.a", "--output-json")
	r.cliJSON(&cliArtifacts, "artifact", "list", "T:1.a", "--output-json")
	for _, id := range []string{"T:1.a", "T%3A1.a", "T%3a1%2Ea"} {
		var detail map[string]any
		c.get("/tasks/"+id, 200, &detail)
		sameDoc(t, "task detail's task", detail["task"], cliTask)
		sameDoc(t, "task detail's artifacts", detail["artifacts"], cliArtifacts)
		if _, ok := detail["last_event_id"].(float64); !ok {
			t.Errorf("no last_event_id: %v", detail["last_event_id"])
		}
		var arts any
		c.get("/tasks/"+id+"/artifacts", 200, &arts)
		sameDoc(t, "artifact list", arts, cliArtifacts)
	}
	var detail server.TaskDetail
	c.get("/tasks/T%3A1.a", 200, &detail)
	if detail.Task.Progress == nil || detail.Task.Progress.Proof.State != "verified" || detail.Task.ClaimAgent != "agent-1" ||
		len(detail.Artifacts.Artifacts) != 4 || detail.Artifacts.Artifacts[1].State != "verified" {
		t.Errorf("detail: %+v", detail)
	}

	for _, show := range [][]string{
		{"summary", ""}, {"summary", "?version=1"}, {"summary", "?version=2&strict=true"}, {"grid", ""}, {"site", "?strict=false"},
	} {
		var api, cli any
		c.get("/tasks/T:1.a/artifacts/"+show[0]+show[1], 200, &api)
		args := []string{"artifact", "show", "T:1.a", show[0], "--output-json"}
		switch show[1] {
		case "?version=1":
			args = append(args, "--version", "1")
		case "?version=2&strict=true":
			args = append(args, "--version", "2", "--strict")
		}
		r.cliJSON(&cli, args...)
		sameDoc(t, "artifact show "+show[0]+show[1], api, cli)
	}
	var shown bernstein.ArtifactShowDoc
	c.get("/tasks/T%3A1.a/artifacts/summary", 200, &shown)
	if shown.Payload == nil || shown.Payload.Body != "# second <b>bold</b> & more" || shown.Version != 2 || len(shown.History) != 2 {
		t.Errorf("show: %+v", shown)
	}

	var prog, cliProg any
	c.get("/tasks/T:1.a/progress", 200, &prog)
	r.cliJSON(&cliProg, "task", "progress", "T:1.a", "--output-json")
	sameDoc(t, "progress", prog, cliProg)

	var prods, cliProds any
	c.get("/artifacts", 200, &prods)
	r.cliJSON(&cliProds, "artifact", "list", "--output-json")
	sameDoc(t, "productions", prods, cliProds)

	// A task without artifacts: an empty list, not an error.
	var empty bernstein.ArtifactListDoc
	c.get("/tasks/T-2/artifacts", 200, &empty)
	if empty.Task != "T-2" || empty.Artifacts == nil || len(empty.Artifacts) != 0 {
		t.Errorf("empty list: %+v", empty)
	}
	c.get("/tasks/T-2", 200, nil)
}

// TestAPIJournal: the rows with their run positions, paged by after and
// limit.
func TestAPIJournal(t *testing.T) {
	apiTestDone(t)
	r := apiRepo(t)
	c := newAPIClient(t, r)
	var j bernstein.JournalDoc
	c.get("/tasks/T%3A1.a/journal", 200, &j)
	if j.Task != "T:1.a" || j.After != -1 || j.JournalRows != 5 || len(j.Rows) != 5 || j.NextAfter != nil {
		t.Fatalf("journal: %+v", j)
	}
	kinds := []string{"artifact_posted", "checkpoint", "artifact_posted", "artifact_posted", "artifact_posted"}
	head := r.git("rev-parse", refs.Journal("T:1.a"))
	for i, row := range j.Rows {
		if row.JournalIndex != int64(i) || row.Kind != kinds[i] || row.Proof != "verified" || row.Writer != "test-writer" ||
			!strings.HasPrefix(string(row.RowHash), "sha256:") || len(row.Commit) != 40 {
			t.Errorf("row %d: %+v", i, row)
		}
		if i > 0 && row.Prev != j.Rows[i-1].RowHash {
			t.Errorf("row %d: prev %s, the row before is %s", i, row.Prev, j.Rows[i-1].RowHash)
		}
		if (i <= 1) != (row.RunPosition == nil) || i > 1 && row.RunPosition.JournalIndex != 1 {
			t.Errorf("row %d: run position %+v", i, row.RunPosition)
		}
	}
	if j.Rows[4].Commit != head {
		t.Errorf("the last row's commit %s, the journal's head %s", j.Rows[4].Commit, head)
	}
	var a struct {
		Key     string `json:"key"`
		Version int64  `json:"version"`
	}
	if json.Unmarshal(j.Rows[2].Data, &a) != nil || a.Key != "summary" || a.Version != 2 {
		t.Errorf("row 2's data: %s", j.Rows[2].Data)
	}
	var page bernstein.JournalDoc
	c.get("/tasks/T:1.a/journal?after=1&limit=2", 200, &page)
	if page.After != 1 || len(page.Rows) != 2 || page.Rows[0].JournalIndex != 2 || page.NextAfter == nil || *page.NextAfter != 3 {
		t.Errorf("page: %+v", page)
	}
	c.get(fmt.Sprintf("/tasks/T:1.a/journal?after=%d", *page.NextAfter), 200, &page)
	if len(page.Rows) != 1 || page.Rows[0].JournalIndex != 4 || page.NextAfter != nil {
		t.Errorf("last page: %+v", page)
	}
	c.get("/tasks/T:1.a/journal?after=9", 200, &page)
	if len(page.Rows) != 0 || page.Rows == nil || page.JournalRows != 5 {
		t.Errorf("after the end: %+v", page)
	}
	c.get("/tasks/T-2/journal", 200, &page)
	if len(page.Rows) != 0 || page.JournalRows != 0 {
		t.Errorf("empty journal: %+v", page)
	}
}

// TestAPIErrors: every read error is one JSON error naming the field; bad
// ids never reach the store.
func TestAPIErrors(t *testing.T) {
	apiTestDone(t)
	r := apiRepo(t)
	c := newAPIClient(t, r)
	for _, bad := range []string{"%2E%2E", "a%2F..%2Fb", "T..1", "T-1%2F..%2FT-2", ".hidden", "%00", "T%201", strings.Repeat("a", 129)} {
		for _, suffix := range []string{"", "/artifacts", "/artifacts/summary", "/progress", "/journal"} {
			c.wantError("/tasks/"+bad+suffix, 400, "task_id")
		}
	}
	for _, id := range []string{"NOPE", "T-9"} {
		for _, suffix := range []string{"", "/artifacts", "/artifacts/summary", "/progress", "/journal"} {
			c.wantError("/tasks/"+id+suffix, 404, "task_id")
		}
	}
	c.wantError("/tasks/T:1.a/artifacts/.key", 400, "key")
	c.wantError("/tasks/T:1.a/artifacts/a%20b", 400, "key")
	c.wantError("/tasks/T:1.a/artifacts/nope", 404, "key")
	c.wantError("/tasks/T:1.a/artifacts/summary?version=3", 404, "version")
	for _, v := range []string{"0", "-1", "x", "", "1.5"} {
		c.wantError("/tasks/T:1.a/artifacts/summary?version="+v, 400, "version")
	}
	c.wantError("/tasks/T:1.a/artifacts/summary?strict=maybe", 400, "strict")
	for _, q := range []string{"after=-2", "after=x", "limit=0", "limit=10001", "limit=x"} {
		field, _, _ := strings.Cut(q, "=")
		c.wantError("/tasks/T:1.a/journal?"+q, 400, field)
	}

	// Other methods are 405 with Allow, other paths 404: JSON both.
	for _, m := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/tasks/T-2", "GET, HEAD"},
		{http.MethodPut, "/tasks/T-2/artifacts", "GET, HEAD, POST"},
		{http.MethodPost, "/tasks", "GET, HEAD"},
		{http.MethodPost, "/tasks/T-2/progress", "GET, HEAD"},
		{http.MethodPatch, "/artifacts", "GET, HEAD"},
		{http.MethodPost, "/events", "GET, HEAD"},
	} {
		res, body := c.do(m.method, server.APIPrefix+m.path, nil, nil)
		var e server.APIError
		if res.StatusCode != 405 || res.Header.Get("Allow") != m.allow || json.Unmarshal(body, &e) != nil || e.Error.Field != "method" {
			t.Errorf("%s %s: %d Allow %q %s", m.method, m.path, res.StatusCode, res.Header.Get("Allow"), body)
		}
	}
	for _, p := range []string{"/nope", "/tasks/T-2/nope", "/tasks/T-2/artifacts/a/b", "/", "/tasks/"} {
		res, body := c.do(http.MethodGet, server.APIPrefix+p, nil, nil)
		var e server.APIError
		if res.StatusCode != 404 || json.Unmarshal(body, &e) != nil || e.Error.Field != "path" {
			t.Errorf("GET %s: %d %s", p, res.StatusCode, body)
		}
	}
}

// TestAPIDotSegments: a raw '.' or '..' segment never names a task. The mux
// resolves dot segments as RFC 3986 says a client must (so that
// /tasks/a/../T-2 means /tasks/T-2) and says so with a redirect to the
// resolved path, before any handler runs: the request is not answered with
// another task's document under the path it named, and no id holding '..'
// reaches the store. Encoded dots ('%2E%2E') are not dot segments: they
// are a task id, refused with a 400.
func TestAPIDotSegments(t *testing.T) {
	apiTestDone(t)
	r := apiRepo(t)
	c := newAPIClient(t, r)
	for _, p := range []struct{ path, location string }{
		{"/tasks/a/../T-2", server.APIPrefix + "/tasks/T-2"},
		{"/tasks/T:1.a/artifacts/../../T-2/artifacts", server.APIPrefix + "/tasks/T-2/artifacts"},
		{"/tasks/./T-2/progress", server.APIPrefix + "/tasks/T-2/progress"},
		{"/tasks/..", server.APIPrefix + "/"},
		{"/tasks/T-2/..", server.APIPrefix + "/tasks"},
	} {
		res, body := c.do(http.MethodGet, server.APIPrefix+p.path, nil, nil)
		if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != p.location {
			t.Errorf("GET %s: %d Location %q, want a redirect to %s\n%s", p.path, res.StatusCode, res.Header.Get("Location"), p.location, body)
		}
		if bytes.Contains(body, []byte(`"task"`)) {
			t.Errorf("GET %s answered a task:\n%s", p.path, body)
		}
	}
	// Encoded, the dots stay in the id and are refused.
	c.wantError("/tasks/%2E%2E", 400, "task_id")
	c.wantError("/tasks/%2e%2e/artifacts", 400, "task_id")
	c.wantError("/tasks/a%2F%2E%2E%2FT-2", 400, "task_id")
	// A POST is redirected the same way (307 keeps the method), never
	// posted to the task the dots lead to.
	res, _ := c.do(http.MethodPost, server.APIPrefix+"/tasks/x/../T:1.a/artifacts", []byte(`{"key":"k","artifact_type":"report","body":"b"}`),
		map[string]string{"Authorization": "Bearer " + r.token})
	if res.StatusCode != http.StatusTemporaryRedirect {
		t.Errorf("POST with dot segments: %d", res.StatusCode)
	}
	var arts bernstein.ArtifactListDoc
	c.get("/tasks/T:1.a/artifacts", 200, &arts)
	if len(arts.Artifacts) != 4 {
		t.Errorf("a redirected post was posted: %d versions", len(arts.Artifacts))
	}
}

// TestAPITampered: in a tampered copy, a tampered version carries its state
// and reason and no content, in the show document, the list and the
// detail; the other versions still render.
func TestAPITampered(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T-1")
	r.post("summary", "first body")
	r.post("summary", "SECRET-SECOND-BODY")
	r.post("summary", "third body")
	var v2 bernstein.ArtifactShowDoc
	r.cliJSON(&v2, "artifact", "show", "T-1", "summary", "--version", "2", "--output-json")
	blob := r.git("rev-parse", v2.Commit+":"+bernstein.ArtifactPath("summary", 2))
	tamperBlob(t, r.dir, blob, "SECRET")

	c := newAPIClient(t, r)
	body := c.get("/tasks/T-1/artifacts/summary?version=2", 200, &v2)
	if v2.State != "tampered" || v2.Reason == "" || v2.Payload != nil || v2.Withheld == "" || bytes.Contains(body, []byte("SECRET")) {
		t.Errorf("tampered version: %s", body)
	}
	var cli any
	var api any
	json.Unmarshal(body, &api)
	r.cliJSON(&cli, "artifact", "show", "T-1", "summary", "--version", "2", "--output-json")
	sameDoc(t, "tampered show", api, cli)
	var list bernstein.ArtifactListDoc
	c.get("/tasks/T-1/artifacts", 200, &list)
	if list.Verified || list.Artifacts[1].State != "tampered" || list.Artifacts[0].State != "verified" {
		t.Errorf("list: %+v", list)
	}
	body = c.get("/tasks/T-1", 200, nil)
	if bytes.Contains(body, []byte("SECRET")) || !bytes.Contains(body, []byte(`"tampered"`)) {
		t.Errorf("detail: %s", body)
	}
	var latest bernstein.ArtifactShowDoc
	c.get("/tasks/T-1/artifacts/summary", 200, &latest)
	if latest.Version != 3 || latest.Payload == nil || latest.Payload.Body != "third body" {
		t.Errorf("latest: %+v", latest)
	}
	// The task list reads the task as tampered, counting its versions, as
	// 'task list' does.
	var tasks bernstein.TaskListDoc
	body = c.get("/tasks", 200, &tasks)
	if len(tasks.Tasks) != 1 || tasks.Tasks[0].Integrity.State != "tampered" ||
		tasks.Tasks[0].Integrity.Versions != (bernstein.VersionCounts{Verified: 2, Tampered: 1}) ||
		tasks.Tasks[0].Integrity.ProgressProof != "verified" || !tasks.Tasks[0].Integrity.JournalOpen ||
		!strings.Contains(tasks.Tasks[0].Integrity.Reason, "1 of 3 versions tampered") {
		t.Errorf("task list: %s", body)
	}
	var apiList, cliList any
	json.Unmarshal(body, &apiList)
	r.cliJSON(&cliList, "task", "list", "--output-json")
	sameDoc(t, "tampered task list", apiList, cliList)
}

// tamperBlob flips one byte of blob's content (after marker) in a loose
// copy of it, every pack unpacked first, as a disk or an attacker would.
func tamperBlob(t *testing.T, dir, blob, marker string) {
	t.Helper()
	git := func(stdin []byte, args ...string) []byte {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return out
	}
	content := git(nil, "cat-file", "blob", blob)
	i := bytes.Index(content, []byte(marker))
	if i < 0 {
		t.Fatalf("blob %s does not hold %q", blob, marker)
	}
	content[i] ^= 0x01
	// Write the changed bytes under the blob's own name: the object id no
	// longer matches its content.
	objects := dir + "/.git/objects"
	packs, _ := os.ReadDir(objects + "/pack")
	for _, p := range packs {
		if strings.HasSuffix(p.Name(), ".pack") {
			data, err := os.ReadFile(objects + "/pack/" + p.Name())
			if err != nil {
				t.Fatal(err)
			}
			os.Rename(objects+"/pack/"+p.Name(), t.TempDir()+"/"+p.Name())
			os.Remove(objects + "/pack/" + strings.TrimSuffix(p.Name(), ".pack") + ".idx")
			git(data, "unpack-objects", "-q")
		}
	}
	forged := strings.TrimSpace(string(git(content, "hash-object", "-w", "--stdin")))
	src, dst := objects+"/"+forged[:2]+"/"+forged[2:], objects+"/"+blob[:2]+"/"+blob[2:]
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dst, 0o644)
	if err := os.WriteFile(dst, data, 0o444); err != nil {
		t.Fatal(err)
	}
	if got := string(git(nil, "cat-file", "blob", blob)); got != string(content) {
		t.Fatalf("the blob was not replaced")
	}
}

// TestAPIMemo: 100 clients reading the same task cost one verification;
// the answer is kept while the refs it was computed from stay where they
// are, and computed again when one moves, whichever process moved it.
func TestAPIMemo(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T-1")
	r.post("summary", "one")
	r.cli("task", "create", "T-2")
	tok2 := strings.TrimSpace(r.cli("task", "claim", "T-2", "--agent", "agent-2"))
	c := newAPIClient(t, r)

	bodies := make([][]byte, 100)
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(c.base + server.APIPrefix + "/tasks/T-1")
			if err != nil {
				t.Error(err)
				return
			}
			bodies[i], _ = io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Errorf("%d %s", res.StatusCode, bodies[i])
			}
		}()
	}
	wg.Wait()
	var first server.TaskDetail
	json.Unmarshal(bodies[0], &first)
	for _, b := range bodies[1:] {
		var d server.TaskDetail
		json.Unmarshal(b, &d)
		if !reflect.DeepEqual(d.Task, first.Task) || !reflect.DeepEqual(d.Artifacts, first.Artifacts) {
			t.Fatalf("the clients read different tasks:\n%s\n%s", bodies[0], b)
		}
	}
	computed := func(name string) int { return c.srv.APIComputations(name, "T-1") }
	if computed("report") != 1 || computed("task") != 1 {
		t.Fatalf("100 readers: %d verifications, %d task folds", computed("report"), computed("task"))
	}
	// The other reads of the task share the answers.
	c.get("/tasks/T-1/artifacts", 200, nil)
	c.get("/tasks/T-1/artifacts/summary", 200, nil)
	c.get("/tasks/T-1/progress", 200, nil)
	c.get("/tasks", 200, nil)
	if computed("report") != 1 || computed("task") != 1 {
		t.Fatalf("other reads recomputed: %d, %d", computed("report"), computed("task"))
	}

	// A post by another process moves the task's journal: computed again,
	// once, and the new version is there.
	r.post("summary", "two")
	var shown bernstein.ArtifactShowDoc
	c.get("/tasks/T-1/artifacts/summary", 200, &shown)
	c.get("/tasks/T-1", 200, nil)
	if shown.Version != 2 || shown.Payload.Body != "two" || computed("report") != 2 || computed("task") != 2 {
		t.Fatalf("after a post: v%d, %d verifications, %d folds", shown.Version, computed("report"), computed("task"))
	}
	c.get("/tasks/T-1/journal", 200, nil)
	c.get("/tasks/T-1/journal?after=0", 200, nil)
	if computed("journal") != 1 {
		t.Fatalf("the journal was read %d times", computed("journal"))
	}
	// A post to another task moves only a spine: the task's verification
	// reads every spine, so it is computed again; its journal rows are not.
	r.cli("artifact", "post", "T-2", "k", "--type", "report", "--body", "b", "--agent", "agent-2", "--claim-token", tok2)
	c.get("/tasks/T-1/artifacts", 200, nil)
	c.get("/tasks/T-1/journal", 200, nil)
	if computed("report") != 3 || computed("journal") != 1 {
		t.Fatalf("after another task's post: %d verifications, %d journal reads", computed("report"), computed("journal"))
	}
	var prods bernstein.ProductionsDoc
	c.get("/artifacts", 200, &prods)
	c.get("/artifacts", 200, &prods)
	if len(prods.Artifacts) != 2 || c.srv.APIComputations("productions", "") != 1 {
		t.Fatalf("productions: %+v, computed %d times", prods, c.srv.APIComputations("productions", ""))
	}
}

// TestAPIPages: GET /api/v1/tasks and /api/v1/artifacts in pages of
// limit, each after the cursor the page before named, join into the
// unpaged list (and the CLI's pages are the same documents); a limit or
// cursor that is not one is a 400 naming it.
func TestAPIPages(t *testing.T) {
	apiTestDone(t)
	r := apiRepo(t)
	r.cli("task", "create", "T-3", "--title", "third")
	c := newAPIClient(t, r)

	var all bernstein.TaskListDoc
	c.get("/tasks", 200, &all)
	if len(all.Tasks) != 3 || all.NextCursor != "" {
		t.Fatalf("unpaged: %d tasks, next %q", len(all.Tasks), all.NextCursor)
	}
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		q := "/tasks?limit=2"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		var page bernstein.TaskListDoc
		c.get(q, 200, &page)
		var cli bernstein.TaskListDoc
		args := []string{"task", "list", "--output-json", "--limit", "2"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		r.cliJSON(&cli, args...)
		sameDoc(t, "task list page "+q, page, cli)
		if len(page.Tasks) == 0 || len(page.Tasks) > 2 || pages > 2 {
			t.Fatalf("page %s: %d tasks", q, len(page.Tasks))
		}
		for _, e := range page.Tasks {
			ids = append(ids, e.ID)
		}
		if page.NextCursor == "" {
			break
		}
		if page.NextCursor != page.Tasks[len(page.Tasks)-1].ID {
			t.Fatalf("next cursor %q is not the page's last task", page.NextCursor)
		}
		cursor = page.NextCursor
	}
	// T-2 < T-3 < T:1.a in byte order, as git sorts the refs.
	if want := []string{"T-2", "T-3", "T:1.a"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("pages list %v, want %v", ids, want)
	}

	var prods bernstein.ProductionsDoc
	c.get("/artifacts?limit=2", 200, &prods)
	if len(prods.Artifacts) != 2 || prods.NextCursor != prods.Artifacts[1].URI {
		t.Fatalf("first page of keys: %+v", prods)
	}
	var rest bernstein.ProductionsDoc
	c.get("/artifacts?limit=2&cursor="+url.QueryEscape(prods.NextCursor), 200, &rest)
	if len(rest.Artifacts) != 1 || rest.NextCursor != "" || rest.Artifacts[0].URI != "bernstein://T:1.a/summary" {
		t.Errorf("last page of keys: %+v", rest)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=", "cursor=", "cursor=%2E%2E", "cursor=a%2Fb"} {
		field, _, _ := strings.Cut(q, "=")
		c.wantError("/tasks?"+q, 400, field)
	}
	for _, q := range []string{"limit=0", "limit=1001", "cursor=", "cursor=T-2", "cursor=bernstein://..%2Fx/k", "cursor=bernstein://T-2/"} {
		field, _, _ := strings.Cut(q, "=")
		c.wantError("/artifacts?"+q, 400, field)
	}
}

// TestAPILongListKeepsNoAnswers: a list longer than the bound of tasks
// whose answers a list keeps uses the answers already kept and keeps none
// of its own, and serves the document the CLI prints (encoded a task at a
// time). A list within the bound keeps them (TestAPIMemo).
func TestAPILongListKeepsNoAnswers(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T-1")
	r.post("summary", "one <b>&</b>")
	r.cli("task", "create", "T-2", "--title", "two \u2028 <i>")
	c := newAPIClient(t, r)
	c.srv.SetListKeepsAnswers(1)
	computed := func(name, task string) int { return c.srv.APIComputations(name, task) }

	var list bernstein.TaskListDoc
	c.get("/tasks", 200, &list)
	var cli bernstein.TaskListDoc
	r.cliJSON(&cli, "task", "list", "--output-json")
	sameDoc(t, "task list", list, cli)
	if len(list.Tasks) != 2 || computed("report", "T-1") != 1 || computed("report", "T-2") != 1 {
		t.Fatalf("a list of 2: %d tasks, T-1 verified %d times, T-2 %d times", len(list.Tasks), computed("report", "T-1"), computed("report", "T-2"))
	}
	// The task list page reads the API's list, kept: no task is verified
	// again for it.
	page0, err := http.Get(c.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page0.Body.Close()
	if page0.StatusCode != 200 || computed("report", "T-1") != 1 || computed("report", "T-2") != 1 || computed("list", "\x000") != 1 {
		t.Fatalf("the task list page after the list: %d; T-1 verified %d times, T-2 %d times, the list computed %d times (want 1, 1, 1)",
			page0.StatusCode, computed("report", "T-1"), computed("report", "T-2"), computed("list", "\x000"))
	}
	// The list kept no answer of T-1: reading it verifies it again, and
	// keeps that answer.
	c.get("/tasks/T-1", 200, nil)
	if n := computed("report", "T-1"); n != 2 {
		t.Fatalf("T-1 read after the list: verified %d times in all, want 2 (the list kept nothing)", n)
	}
	// A page of the same tasks is another list: it uses T-1's kept answer
	// and verifies T-2 again.
	var page bernstein.TaskListDoc
	c.get("/tasks?limit=2", 200, &page)
	if len(page.Tasks) != 2 || computed("report", "T-1") != 2 || computed("report", "T-2") != 2 {
		t.Fatalf("a page of 2: %d tasks, T-1 verified %d times (want 2), T-2 %d times (want 2)", len(page.Tasks), computed("report", "T-1"), computed("report", "T-2"))
	}
	// The document is json.Marshal's of the list, byte for byte.
	res, err := http.Get(c.base + server.APIPrefix + "/tasks")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != string(want)+"\n" {
		t.Fatalf("GET /api/v1/tasks:\n%s\njson.Marshal of the document:\n%s", body, want)
	}
	if res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Fatalf("headers: %v", res.Header)
	}
}
