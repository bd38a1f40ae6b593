package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bernstein/bernstein/internal/postbody"
	"github.com/bernstein/bernstein/server"
)

// The API's OpenAPI description is checked by a validator this project did
// not write: the description against the OpenAPI 3.1 schema by
// pb33f/libopenapi-validator, and (santhosh-tekuri/jsonschema, JSON Schema
// 2020-12) every API response the tests receive against the description: its status
// must be documented for its operation (5xx may fall to default), its
// documented headers present, its body valid against the documented
// schema. Bodies of accepted posts are checked against the request schema.
// TestOpenAPICoverage then checks that the tests received every documented
// status of every operation.

const specURL = "https://bernstein.invalid/api/v1/openapi.json"

type apiSpec struct {
	doc map[string]any
	c   *jsonschema.Compiler

	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
	seen     map[string]bool // "METHOD template status"
}

var (
	specOnce sync.Once
	theSpec  *apiSpec
	specErr  error
)

// loadSpec compiles the description once for all the tests.
func loadSpec(t *testing.T) *apiSpec {
	t.Helper()
	specOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(server.OpenAPI()))
		if err != nil {
			specErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource(specURL, doc); err != nil {
			specErr = err
			return
		}
		theSpec = &apiSpec{doc: doc.(map[string]any), c: c, compiled: map[string]*jsonschema.Schema{}, seen: map[string]bool{}}
	})
	if specErr != nil {
		t.Fatalf("openapi.json: %v", specErr)
	}
	return theSpec
}

// schema compiles the schema at a JSON pointer of the description.
func (sp *apiSpec) schema(t *testing.T, pointer string) *jsonschema.Schema {
	t.Helper()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if s, ok := sp.compiled[pointer]; ok {
		return s
	}
	s, err := sp.c.Compile(specURL + "#" + pointer)
	if err != nil {
		t.Fatalf("compile %s: %v", pointer, err)
	}
	sp.compiled[pointer] = s
	return s
}

func jsonPointer(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(p, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// resolve follows a local $ref of the description.
func (sp *apiSpec) resolve(v map[string]any) map[string]any {
	ref, ok := v["$ref"].(string)
	if !ok {
		return v
	}
	var cur any = sp.doc
	for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
		cur = cur.(map[string]any)[p]
	}
	return cur.(map[string]any)
}

// template finds the documented path an escaped request path matches.
func (sp *apiSpec) template(path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, server.APIPrefix)
	if !ok {
		return "", false
	}
	segs := strings.Split(rel, "/")
	for tmpl := range sp.doc["paths"].(map[string]any) {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		match := true
		for i := range ts {
			if !(strings.HasPrefix(ts[i], "{") && segs[i] != "") && ts[i] != segs[i] {
				match = false
				break
			}
		}
		if match {
			return tmpl, true
		}
	}
	return "", false
}

// short cuts a body for an error message.
func short(b []byte) []byte {
	if len(b) > 400 {
		return append(b[:400:400], "..."...)
	}
	return b
}

// check validates one API response against the description; a path or
// method the description does not have must be an Error document (the 404
// and 405 of the API). A 307 (the mux's, for a path with dot segments) is
// checked against the operation of the path it redirects to.
func (sp *apiSpec) check(t *testing.T, method, path string, res *http.Response, body []byte) {
	t.Helper()
	if method == http.MethodHead {
		return
	}
	media, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	tmpl, ok := sp.template(path)
	if res.StatusCode == http.StatusTemporaryRedirect {
		loc, err := url.Parse(res.Header.Get("Location"))
		if err != nil || loc.Path == "" {
			t.Errorf("%s %s: 307 to %q", method, path, res.Header.Get("Location"))
			return
		}
		tmpl, ok = sp.template(loc.EscapedPath())
	}
	var op map[string]any
	if ok {
		op, _ = sp.doc["paths"].(map[string]any)[tmpl].(map[string]any)[strings.ToLower(method)].(map[string]any)
	}
	if op == nil && res.StatusCode == http.StatusTemporaryRedirect {
		return // to a path the API does not have: its answer there is checked when followed
	}
	if op == nil {
		if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s is not in the description, and answered %d", method, path, res.StatusCode)
		}
		var inst any
		if media != "application/json" || json.Unmarshal(body, &inst) != nil {
			t.Errorf("%s %s: %d is not JSON (%s)\n%s", method, path, res.StatusCode, media, short(body))
			return
		}
		if err := sp.schema(t, "/components/schemas/Error").Validate(inst); err != nil {
			t.Errorf("%s %s: %d is not an Error document: %v\n%s", method, path, res.StatusCode, err, short(body))
		}
		return
	}
	status := strconv.Itoa(res.StatusCode)
	responses := op["responses"].(map[string]any)
	r, ok := responses[status].(map[string]any)
	where := jsonPointer("paths", tmpl, strings.ToLower(method), "responses", status)
	if !ok {
		if res.StatusCode < 500 || responses["default"] == nil {
			t.Errorf("%s %s (%s): status %d is not documented\n%s", method, path, tmpl, res.StatusCode, short(body))
			return
		}
		r, where = responses["default"].(map[string]any), jsonPointer("paths", tmpl, strings.ToLower(method), "responses", "default")
	}
	if ref, ok := r["$ref"].(string); ok {
		where = strings.TrimPrefix(ref, "#")
		r = sp.resolve(r)
	}
	sp.mu.Lock()
	sp.seen[fmt.Sprintf("%s %s %d", method, tmpl, res.StatusCode)] = true
	sp.mu.Unlock()
	headers, _ := r["headers"].(map[string]any)
	for name := range headers {
		if res.Header.Get(name) == "" {
			t.Errorf("%s %s: %d without its documented header %s", method, path, res.StatusCode, name)
		}
	}
	content, _ := r["content"].(map[string]any)
	if len(body) == 0 && media == "" && (content == nil || res.StatusCode == http.StatusTemporaryRedirect) {
		return // no body (a 307 to a POST has none)
	}
	if _, ok := content[media]; !ok {
		t.Errorf("%s %s: %d answered %q, which %s does not document\n%s", method, path, res.StatusCode, media, where, short(body))
		return
	}
	if media != "application/json" {
		return // text: documented as a string
	}
	var inst any
	if err := json.Unmarshal(body, &inst); err != nil {
		t.Errorf("%s %s: %d, body is not JSON: %v\n%s", method, path, res.StatusCode, err, body)
		return
	}
	if err := sp.schema(t, where+"/content/application~1json/schema").Validate(inst); err != nil {
		t.Errorf("%s %s: %d does not match %s: %v\n%s", method, path, res.StatusCode, where, err, short(body))
	}
}

// checkStream checks the head of an event stream against the description
// of GET /events, and returns the check of each event's data against the
// schema its type is documented with.
func (sp *apiSpec) checkStream(t *testing.T, res *http.Response) func(typ, data string) error {
	t.Helper()
	where := jsonPointer("paths", "/events", "get", "responses", "200")
	r := sp.resolve(sp.doc["paths"].(map[string]any)["/events"].(map[string]any)["get"].(map[string]any)["responses"].(map[string]any)["200"].(map[string]any))
	for name := range r["headers"].(map[string]any) {
		if res.Header.Get(name) == "" {
			t.Errorf("GET /events: 200 without its documented header %s", name)
		}
	}
	media, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	stream, ok := r["content"].(map[string]any)[media].(map[string]any)
	if !ok {
		t.Fatalf("GET /events: %q is not documented", media)
	}
	sp.mu.Lock()
	sp.seen["GET /events 200"] = true
	sp.mu.Unlock()
	types := stream["x-event-data"].(map[string]any)
	return func(typ, data string) error {
		ref, ok := types[typ].(map[string]any)
		if !ok {
			return fmt.Errorf("event type %s is not documented (%s)", typ, where)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: data is not JSON: %v", typ, err)
		}
		if err := sp.schema(t, strings.TrimPrefix(ref["$ref"].(string), "#")).Validate(inst); err != nil {
			return fmt.Errorf("%s does not match %s: %v\n%s", typ, ref["$ref"], err, short([]byte(data)))
		}
		return nil
	}
}

// checkRequest validates a request body the API accepted against the
// operation's request schema.
func (sp *apiSpec) checkRequest(t *testing.T, method, tmpl string, body []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("request body: %v", err)
	}
	where := jsonPointer("paths", tmpl, strings.ToLower(method), "requestBody", "content", "application/json", "schema")
	if err := sp.schema(t, where).Validate(inst); err != nil {
		t.Errorf("an accepted %s %s body does not match its schema: %v\n%s", method, tmpl, err, body)
	}
}

// TestOpenAPIDescription: openapi.json is a valid OpenAPI 3.1 document by
// the official schema; every schema in it compiles; it describes every
// route the API mounts and no other; GET /api/v1/openapi.json serves it.
func TestOpenAPIDescription(t *testing.T) {
	valid := func(b []byte) (bool, string) {
		doc, err := libopenapi.NewDocument(b)
		if err != nil {
			return false, err.Error()
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			return false, fmt.Sprint(errs)
		}
		ok, verrs := v.ValidateDocument()
		var msgs []string
		for _, e := range verrs {
			msgs = append(msgs, e.Error())
		}
		return ok, strings.Join(msgs, "; ")
	}
	if ok, why := valid(server.OpenAPI()); !ok {
		t.Fatalf("openapi.json is not a valid OpenAPI 3.1 document: %s", why)
	}
	// The validator does catch a broken description.
	broken := []byte(`{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":1}}}}}}`)
	if ok, _ := valid(broken); ok {
		t.Fatal("the validator accepted a response whose description is not a string")
	}

	sp := loadSpec(t)
	for name := range sp.doc["components"].(map[string]any)["schemas"].(map[string]any) {
		sp.schema(t, jsonPointer("components", "schemas", name))
	}
	var documented []string
	for tmpl, item := range sp.doc["paths"].(map[string]any) {
		for m, op := range item.(map[string]any) {
			if m == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(m)+" "+tmpl)
			if op.(map[string]any)["responses"] == nil {
				t.Errorf("%s %s documents no response", m, tmpl)
			}
		}
	}
	sort.Strings(documented)
	want := []string{
		"GET /artifacts", "GET /events", "GET /openapi.json", "GET /tasks", "GET /tasks/{id}", "GET /tasks/{id}/artifacts",
		"GET /tasks/{id}/artifacts/{key}", "GET /tasks/{id}/artifacts/{key}/diff", "GET /tasks/{id}/journal", "GET /tasks/{id}/progress", "POST /tasks/{id}/artifacts",
	}
	if strings.Join(documented, "\n") != strings.Join(want, "\n") {
		t.Errorf("documented operations:\n%s\nwant:\n%s", strings.Join(documented, "\n"), strings.Join(want, "\n"))
	}

	r := newTaskRepo(t, "T-1")
	c2 := newAPIClient(t, r)
	res, body := c2.do(http.MethodGet, server.APIPrefix+"/openapi.json", nil, nil)
	if res.StatusCode != http.StatusOK || !bytes.Equal(body, server.OpenAPI()) {
		t.Errorf("GET openapi.json: %d, %d bytes", res.StatusCode, len(body))
	}
}

// apiTestsRun counts the API tests that ran to their end: the coverage
// check means something only when all of them did.
var apiTestsRun = struct {
	sync.Mutex
	done map[string]bool
}{done: map[string]bool{}}

func apiTestDone(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			apiTestsRun.Lock()
			apiTestsRun.done[t.Name()] = true
			apiTestsRun.Unlock()
		}
	})
}

// apiTests are the tests whose responses TestOpenAPICoverage counts.
var apiTests = []string{
	"TestAPIPost", "TestAPIPostRefusals", "TestInputRules", "TestAPIReads", "TestAPIJournal", "TestAPIErrors",
	"TestAPIDotSegments", "TestAPITampered", "TestAPIMemo", "TestAPISurface", "TestAPIForgeries", "TestAPIDiff",
}

// TestOpenAPICoverage: the API tests received every status the description
// documents for every operation (default, the 500 of an unreadable
// repository, aside). It runs after them (go test runs a package's tests
// in file order), and only when all of them ran and passed.
func TestOpenAPICoverage(t *testing.T) {
	apiTestsRun.Lock()
	for _, name := range apiTests {
		if !apiTestsRun.done[name] {
			apiTestsRun.Unlock()
			t.Skipf("%s did not run (or failed): the coverage of the description is not known", name)
		}
	}
	apiTestsRun.Unlock()
	sp := loadSpec(t)
	var missing []string
	for tmpl, item := range sp.doc["paths"].(map[string]any) {
		for m, op := range item.(map[string]any) {
			if m == "parameters" {
				continue
			}
			for status := range op.(map[string]any)["responses"].(map[string]any) {
				key := fmt.Sprintf("%s %s %s", strings.ToUpper(m), tmpl, status)
				if status != "default" && !sp.seen[key] {
					missing = append(missing, key)
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("documented responses no test received:\n%s", strings.Join(missing, "\n"))
	}
}

// TestOpenAPIPostIsTheDecoders: the description's PostArtifact is the
// schema the post decoder advertises (internal/postbody, whose MCP form is
// the tool's input schema), so the API and MCP describe one post.
func TestOpenAPIPostIsTheDecoders(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(server.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(doc.Components.Schemas["PostArtifact"], &got); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(postbody.Schema(postbody.HTTP))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("openapi.json's PostArtifact is not the decoder's schema:\n%s\nwant\n%s", doc.Components.Schemas["PostArtifact"], b)
	}
}
