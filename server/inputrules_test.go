package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/server"
)

// The input rules of a post, as one table run on every surface: the
// library (Post and PostAsCaller), the CLI's flags, the CLI's batch
// (`artifact post --stdin`), MCP over stdio (`bernstein mcp`, raw lines),
// MCP over HTTP (the SDK's client at /mcp) and the HTTP API's POST. A bad
// input is one error naming the same field everywhere, in one line, and
// writes nothing (no ref moves, no object file appears); MCP and the API
// say it in the same words, and so does the library; a good input posts
// the same payload everywhere.

// surfaces, in the order they run.
const (
	sLib   = "library"
	sCLI   = "cli"
	sBatch = "batch"
	sStdio = "mcp-stdio"
	sMCP   = "mcp-http"
	sAPI   = "api"
)

var allSurfaces = []string{sLib, sCLI, sBatch, sStdio, sMCP, sAPI}

// member is one member of a post, in MCP's and the API's names. Its value
// is a string (written as is, invalid UTF-8 and all), []string, [][]string,
// or rawJSON (written verbatim: other JSON types, escapes).
type member struct {
	name  string
	value any
}

type rawJSON string

// inputCase is one post. field is the field every surface names ("" for a
// good post); status the API's; other names, per surface, another field it
// names ("-": the surface cannot say this input, e.g. a JSON type on the
// command line, or says it as another input, e.g. a missing row is an empty
// table on the command line; the case is not run there). words lists the surfaces whose message is their own (the
// others say the API's words).
type inputCase struct {
	name    string
	task    string // "" is the claimed task
	members []member
	field   string
	status  int
	other   map[string]string
	words   []string
	says    string            // words every surface's message holds
	want    *artifact.Payload // for a good post: what is stored (default: the members)
}

func m(name string, v any) member { return member{name, v} }

func rep(key, body string) []member {
	return []member{m("key", key), m("artifact_type", "report"), m("body", body)}
}

func tbl(cols []string, rows any) []member {
	return []member{m("key", "t"), m("artifact_type", "table"), m("columns", cols), m("rows", rows)}
}

func lnk(u, kind string) []member {
	return []member{m("key", "l"), m("artifact_type", "link"), m("url", u), m("link_kind", kind)}
}

// jsonOnly marks an input only JSON can carry (the library and the flags
// cannot say it).
var jsonOnly = map[string]string{sLib: "-", sCLI: "-"}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func inputCases() []inputCase {
	cols65 := make([]string, 65)
	for i := range cols65 {
		cols65[i] = "c" + strings.Repeat("x", i)
	}
	rows4097 := make([][]string, artifact.MaxRows+1)
	for i := range rows4097 {
		rows4097[i] = []string{"x"}
	}
	huge := strings.Repeat("a", artifact.MaxPayloadBytes) // the canonical form is over 1 MiB by its wrapper
	return []inputCase{
		// The task.
		{name: "task with ..", task: "a..b", members: rep("k", "x"), field: "task_id", status: 400},
		{name: "task with /", task: "a/b", members: rep("k", "x"), field: "task_id", status: 400},
		{name: "task with NUL", task: "a\x00b", members: rep("k", "x"), field: "task_id", status: 400, other: map[string]string{sCLI: "-"}},
		{name: "task with newline", task: "a\nb", members: rep("k", "x"), field: "task_id", status: 400},
		{name: "task with space", task: "a b", members: rep("k", "x"), field: "task_id", status: 400},
		{name: "task too long", task: strings.Repeat("t", 129), members: rep("k", "x"), field: "task_id", status: 400},
		{name: "task starting with -", task: "-T", members: rep("k", "x"), field: "task_id", status: 400},
		{name: "task empty", task: "\x00empty", members: rep("k", "x"), field: "task_id", status: 400, other: map[string]string{sAPI: "-"}},
		{name: "task not a string", task: "\x00number", members: rep("k", "x"), field: "task_id", other: with(jsonOnly, sAPI, "-")},
		// The key.
		{name: "key starting with .", members: rep(".hidden", "x"), field: "key", status: 422},
		{name: "key with /", members: rep("a/b", "x"), field: "key", status: 422},
		{name: "key ../x", members: rep("../x", "x"), field: "key", status: 422},
		{name: "key with space", members: rep("a key", "x"), field: "key", status: 422},
		{name: "key too long", members: rep(strings.Repeat("k", 129), "x"), field: "key", status: 422},
		{name: "key missing", members: []member{m("artifact_type", "report"), m("body", "b")}, field: "key", status: 422, words: []string{sLib, sCLI, sBatch}},
		{name: "key not a string", members: []member{m("key", rawJSON(`7`)), m("artifact_type", "report"), m("body", "b")}, field: "key", status: 422, other: jsonOnly},
		// The type.
		{name: "type missing", members: []member{m("key", "k"), m("body", "b")}, field: "artifact_type", status: 422, other: map[string]string{sCLI: "type", sBatch: "type"}, words: []string{sCLI, sBatch}},
		{name: "type unknown", members: []member{m("key", "k"), m("artifact_type", "video"), m("body", "b")}, field: "artifact_type", status: 422, other: map[string]string{sCLI: "type", sBatch: "type"}, words: []string{sCLI, sBatch}},
		{name: "type null", members: []member{m("key", "k"), m("artifact_type", rawJSON(`null`)), m("body", "b")}, field: "artifact_type", status: 422, other: with(jsonOnly, sBatch, "type")},
		// A report.
		{name: "body missing", members: []member{m("key", "k"), m("artifact_type", "report")}, field: "body", status: 422, words: []string{sLib, sCLI, sBatch}},
		{name: "body empty", members: rep("k", ""), field: "body", status: 422},
		{name: "body blank", members: rep("k", " \n\t "), field: "body", status: 422},
		{name: "body not a string", members: []member{m("key", "k"), m("artifact_type", "report"), m("body", []string{"x"})}, field: "body", status: 422, other: jsonOnly},
		{name: "body NUL", members: rep("k", "a\x00b"), field: "body", status: 422},
		{name: "body bell", members: rep("k", "bell \x07 here"), field: "body", status: 422},
		{name: "body escape", members: rep("k", "a\x1bb"), field: "body", status: 422},
		{name: "body over 1 MiB", members: rep("k", huge+"a"), field: "body", status: 413, other: map[string]string{sCLI: "body-file"}, words: []string{sCLI}},
		{name: "payload over 1 MiB", members: rep("k", huge), field: "payload", status: 413},
		{name: "payload over 1 MiB by escapes", members: rep("k", "x"+strings.Repeat("\n", artifact.MaxPayloadBytes/2)), field: "payload", status: 413},
		// Text that is not UTF-8: the CLI's flags and every JSON surface
		// alike (encoding/json would store U+FFFD).
		{name: "body raw 0xff", members: rep("k", "a\xffb"), field: "body", status: 422},
		{name: "body UTF-8 surrogate", members: rep("k", "a\xed\xa0\x80b"), field: "body", status: 422},
		{name: "body lone surrogate", members: []member{m("key", "k"), m("artifact_type", "report"), m("body", rawJSON(`"a\ud800b"`))}, field: "body", status: 422, other: jsonOnly},
		{name: "body lone low surrogate", members: []member{m("key", "k"), m("artifact_type", "report"), m("body", rawJSON(`"\udc00"`))}, field: "body", status: 422, other: jsonOnly},
		{name: "key lone surrogate", members: []member{m("key", rawJSON(`"k\ud83d"`)), m("artifact_type", "report"), m("body", "b")}, field: "key", status: 422, other: jsonOnly},
		{name: "cell raw 0xff", members: tbl([]string{"a"}, [][]string{{"\xff"}}), field: "rows[0][0]", status: 422, other: map[string]string{sBatch: "row[0]"}},
		{name: "column raw 0xff", members: tbl([]string{"a", "b\xff"}, [][]string{}), field: "columns[1]", status: 422, other: map[string]string{sBatch: "column[1]"}},
		{name: "url raw 0xff", members: lnk("https://x.example/\xff", "preview"), field: "url", status: 422},
		// A member given twice: refused, not the last one taken.
		{name: "key twice", members: []member{m("key", "a"), m("key", "b"), m("artifact_type", "report"), m("body", "x")}, field: "key", status: 422, other: jsonOnly},
		{name: "body twice", members: []member{m("key", "k"), m("artifact_type", "report"), m("body", "x"), m("\\u0062ody", "y")}, field: "body", status: 422, other: jsonOnly},
		// A table.
		{name: "columns missing", members: []member{m("key", "t"), m("artifact_type", "table"), m("rows", [][]string{})}, field: "columns", status: 422, words: []string{sLib, sCLI, sBatch}, other: map[string]string{sBatch: "column"}},
		{name: "rows missing", members: []member{m("key", "t"), m("artifact_type", "table"), m("columns", []string{"a"})}, field: "rows", status: 422, other: map[string]string{sLib: "-", sCLI: "-", sBatch: "-"}}, // an empty table there
		{name: "columns not an array", members: tbl(nil, [][]string{}), field: "columns", status: 422, other: with(jsonOnly, sBatch, "column")},
		{name: "columns a string", members: []member{m("key", "t"), m("artifact_type", "table"), m("columns", "a"), m("rows", [][]string{})}, field: "columns", status: 422, other: with(jsonOnly, sBatch, "column")},
		{name: "no columns", members: tbl([]string{}, [][]string{}), field: "columns", status: 422, other: map[string]string{sBatch: "column"}, words: []string{sCLI}},
		{name: "65 columns", members: tbl(cols65, [][]string{}), field: "columns", status: 422, other: map[string]string{sBatch: "column"}},
		{name: "blank column", members: tbl([]string{"a", " "}, [][]string{}), field: "columns[1]", status: 422},
		{name: "repeated column", members: tbl([]string{"a", "a"}, [][]string{}), field: "columns[1]", status: 422},
		{name: "column with a BOM", members: tbl([]string{"a", "\ufeffb"}, [][]string{}), field: "columns[1]", status: 422},
		{name: "row with too few cells", members: tbl([]string{"a", "b"}, [][]string{{"1", "2"}, {"3"}}), field: "rows[1]", status: 422},
		{name: "row with too many cells", members: tbl([]string{"a"}, [][]string{{"1", "2"}}), field: "rows[0]", status: 422},
		{name: "cell not a string", members: tbl([]string{"a", "b"}, rawJSON(`[["1",2]]`)), field: "rows[0][1]", status: 422, other: with(jsonOnly, sBatch, "-")},
		{name: "row not an array", members: tbl([]string{"a"}, rawJSON(`["1"]`)), field: "rows[0]", status: 422, other: with(jsonOnly, sBatch, "-")},
		{name: "rows null", members: tbl([]string{"a"}, rawJSON(`null`)), field: "rows", status: 422, other: with(jsonOnly, sBatch, "-")},
		{name: "4097 rows", members: tbl([]string{"a"}, rows4097), field: "rows", status: 422},
		{name: "cell NUL", members: tbl([]string{"a"}, [][]string{{"\x00"}}), field: "rows[0][0]", status: 422, other: map[string]string{sCLI: "-"}},
		{name: "cell escape", members: tbl([]string{"a"}, [][]string{{"esc \x1b"}}), field: "rows[0][0]", status: 422},
		// A link.
		{name: "url missing", members: []member{m("key", "l"), m("artifact_type", "link"), m("link_kind", "preview")}, field: "url", status: 422, words: []string{sLib, sCLI, sBatch}},
		{name: "link kind missing", members: []member{m("key", "l"), m("artifact_type", "link"), m("url", "https://x.example")}, field: "link_kind", status: 422},
		{name: "link kind video", members: lnk("https://x.example", "video"), field: "link_kind", status: 422},
		{name: "javascript url", members: lnk("javascript:alert(1)", "preview"), field: "url", status: 422},
		{name: "ftp url", members: lnk("ftp://x.example", "preview"), field: "url", status: 422},
		{name: "url without host", members: lnk("https://", "preview"), field: "url", status: 422},
		{name: "url with password", members: lnk("https://user:s3cr3t@host.example/", "dashboard"), field: "url", status: 422, says: "password"},
		{name: "url with user", members: lnk("https://s3cr3t@host.example/dash", "dashboard"), field: "url", status: 422, says: "password"},
		{name: "url with password on loopback", members: lnk("http://user:s3cr3t@127.0.0.1:3000/d/x", "dashboard"), field: "url", status: 422, says: "password"},
		{name: "url with password in capitals", members: lnk("HTTPS://USER:s3cr3t@HOST.EXAMPLE/", "dashboard"), field: "url", status: 422, says: "password"},
		// Fields of another type, and fields no post takes.
		{name: "report with url", members: append(rep("k", "b"), m("url", "https://x.example")), field: "url", status: 422, other: map[string]string{sLib: "artifact_type"}, words: []string{sLib, sCLI, sBatch}},
		{name: "link with body", members: append(lnk("https://x.example", "preview"), m("body", "x")), field: "body", status: 422, other: map[string]string{sLib: "artifact_type"}, words: []string{sLib, sCLI, sBatch}},
		{name: "report with rows", members: append(rep("k", "b"), m("rows", [][]string{})), field: "rows", status: 422, other: map[string]string{sLib: "artifact_type", sCLI: "-", sBatch: "row"}, words: []string{sLib, sBatch}},
		{name: "link with rows", members: append(lnk("https://x.example", "preview"), m("rows", [][]string{})), field: "rows", status: 422, other: map[string]string{sLib: "artifact_type", sCLI: "-", sBatch: "row"}, words: []string{sLib, sBatch}},
		{name: "an agent field", members: append(rep("k", "b"), m("agent", "mallory")), field: "agent", status: 422, other: with(jsonOnly, sBatch, "-"), words: []string{sStdio, sMCP}},
		{name: "a claim token field", members: append(rep("k", "b"), m("claim_token", "bct_x")), field: "claim_token", status: 422, other: with(jsonOnly, sBatch, "-"), words: []string{sStdio, sMCP}},
		{name: "an unknown field", members: append(rep("k", "b"), m("colour", "red")), field: "colour", status: 422, other: with(jsonOnly, sBatch, "-"), words: []string{sStdio, sMCP}},
		{name: "a task_id field on the API", members: append(rep("k", "b"), m("task_id", "T-2")), field: "task_id", status: 422, other: map[string]string{sLib: "-", sCLI: "-", sBatch: "-", sStdio: "-", sMCP: "-"}},
		// Good posts: stored as given, everywhere.
		{name: "a report", members: rep("r", "# Notes\n\nnon-ASCII: é, ü, 😀, \u2028.")},
		{name: "a report with escapes", members: []member{m("key", "r"), m("artifact_type", "report"), m("body", rawJSON(`"\ud83d\ude00 \u00e9 \"q\" \\ \/"`))}, other: jsonOnly,
			want: &artifact.Payload{Type: "report", Body: "😀 é \"q\" \\ /"}},
		{name: "a table", members: tbl([]string{"name", "score"}, [][]string{{"ann", "3"}, {"bo, \"b\"", "é"}})},
		{name: "an empty table", members: tbl([]string{"a"}, [][]string{})},
		{name: "a link", members: lnk("https://host.example/@team?by=a@b", "dashboard")},
	}
}

// taskOf is the case's task for the library, the flags and the API.
func (c inputCase) taskOf(claimed string) string {
	switch c.task {
	case "":
		return claimed
	case "\x00empty":
		return ""
	}
	return c.task
}

// taskJSON is the case's task as a JSON value (MCP's task_id, the batch's
// task).
func (c inputCase) taskJSON(claimed string) string {
	if c.task == "\x00number" {
		return "7"
	}
	return jsonString(c.taskOf(claimed))
}

// jsonString writes s as a JSON string, escaping only what JSON requires:
// every other byte is written as it is, invalid UTF-8 included.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func jsonValue(v any) string {
	switch x := v.(type) {
	case rawJSON:
		return string(x)
	case string:
		return jsonString(x)
	case []string:
		if x == nil {
			return "null"
		}
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = jsonString(s)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case [][]string:
		if x == nil {
			return "null"
		}
		parts := make([]string, len(x))
		for i, r := range x {
			parts[i] = jsonValue(r)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	panic(fmt.Sprintf("no JSON for %T", v))
}

// jsonObject writes members (names as they are: escapes stay escapes).
func jsonObject(members []member) string {
	parts := make([]string, len(members))
	for i, mb := range members {
		parts[i] = `"` + mb.name + `":` + jsonValue(mb.value)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// payloadOf is the payload the members say, for the library and the flags;
// ok is false when they cannot say it (a JSON type, a name twice, a field
// no payload has).
func payloadOf(members []member) (key string, p artifact.Payload, ok bool) {
	seen := map[string]bool{}
	for _, mb := range members {
		if seen[mb.name] {
			return "", p, false
		}
		seen[mb.name] = true
		var good bool
		switch mb.name {
		case "key":
			key, good = mb.value.(string)
		case "artifact_type":
			p.Type, good = mb.value.(string)
		case "body":
			p.Body, good = mb.value.(string)
		case "columns":
			p.Columns, good = mb.value.([]string)
			good = good && p.Columns != nil
		case "rows":
			p.Rows, good = mb.value.([][]string)
			good = good && p.Rows != nil
		case "url":
			p.URL, good = mb.value.(string)
		case "link_kind":
			p.LinkKind, good = mb.value.(string)
		}
		if !good {
			return "", p, false
		}
	}
	return key, p, true
}

// csvLine writes one row as a CSV line (--row, a batch's row).
func csvLine(cells []string) string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write(cells)
	w.Flush()
	return strings.TrimSuffix(b.String(), "\n")
}

// outcome is what one surface made of a case: the field named and the
// words, or the blob of the version it posted.
type outcome struct {
	field, msg string
	blob       string
	na         bool // the surface cannot say this input
}

func (o outcome) String() string {
	if o.blob != "" {
		return "posted " + o.blob
	}
	return fmt.Sprintf("invalid %s: %.200s", o.field, o.msg)
}

// inputRig holds every surface over one repository.
type inputRig struct {
	t     *testing.T
	r     *repo
	http  *apiClient
	mcp   *mcp.ClientSession
	stdio *rawStdio
	ctx   context.Context
	id    int
}

func (g *inputRig) lib(c inputCase) []outcome {
	key, p, ok := payloadOf(c.members)
	if !ok || c.task == "\x00number" {
		return []outcome{{na: true}}
	}
	var outs []outcome
	for _, post := range []func(bernstein.PostRequest) (*bernstein.PostResult, error){g.r.store.Post, g.r.store.PostAsCaller} {
		res, err := post(bernstein.PostRequest{Task: c.taskOf(g.r.task), Key: key, Agent: "agent-1", ClaimToken: g.r.token, Payload: p})
		var in *artifact.InputError
		switch {
		case err == nil:
			outs = append(outs, outcome{blob: res.Blob})
		case errors.As(err, &in):
			if strings.Contains(err.Error(), "\n") {
				g.t.Errorf("%s: the library's error is not one line: %q", c.name, err)
			}
			outs = append(outs, outcome{field: in.Field, msg: in.Msg})
		default:
			g.t.Errorf("%s: the library: %v (not an input error)", c.name, err)
			outs = append(outs, outcome{field: "?", msg: err.Error()})
		}
	}
	return outs
}

// cliOutcome reads a command's result: a receipt with a blob, or exit 1
// with one line naming a field (and nothing on stdout).
func (g *inputRig) cliOutcome(name string, stdout, stderr string, code int, batch bool) outcome {
	if code == 0 {
		var res struct {
			Blob string `json:"blob"`
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Blob == "" {
			g.t.Errorf("%s: exit 0 with %q", name, stdout)
		}
		return outcome{blob: res.Blob}
	}
	line := strings.TrimSuffix(stderr, "\n")
	if code != 1 || stdout != "" || strings.Contains(line, "\n") {
		g.t.Errorf("%s: exit %d, stdout %q, stderr %q: want exit 1, nothing on stdout, one line", name, code, stdout, stderr)
	}
	line = strings.TrimPrefix(line, "bernstein: ")
	if batch {
		line = strings.TrimPrefix(line, "line 1: ")
	}
	rest, ok := strings.CutPrefix(line, "invalid ")
	field, msg, ok2 := strings.Cut(rest, ": ")
	if !ok || !ok2 {
		return outcome{field: "?", msg: line}
	}
	return outcome{field: field, msg: msg}
}

func (g *inputRig) runCLI(stdin string, args ...string) (string, string, int) {
	cmd := exec.Command(cliBin, append([]string{"--repo", g.r.dir}, args...)...)
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+g.r.home, "BERNSTEIN_FORCE_TTY=0")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		g.t.Fatalf("run bernstein: %v", err)
	}
	code := 0
	if ee != nil {
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

func (g *inputRig) cli(c inputCase) []outcome {
	key, p, ok := payloadOf(c.members)
	if !ok || c.task == "\x00number" {
		return []outcome{{na: true}}
	}
	args := []string{"artifact", "post", "--agent", "agent-1", "--claim-token", g.r.token, "--output-json"}
	stdin := ""
	if p.Type != "" {
		args = append(args, "--type", p.Type)
	}
	switch {
	case p.Body == "" && hasMember(c.members, "body"), len(p.Body) > 64<<10, strings.Contains(p.Body, "\x00"):
		// Empty, beyond what one argument may hold, or holding a NUL:
		// from a file.
		args, stdin = append(args, "--body-file", "-"), p.Body
	case p.Body != "":
		args = append(args, "--body", p.Body)
	}
	for _, col := range p.Columns {
		args = append(args, "--column", col)
	}
	for _, row := range p.Rows {
		args = append(args, "--row", csvLine(row))
	}
	if p.URL != "" {
		args = append(args, "--url", p.URL)
	}
	if p.LinkKind != "" {
		args = append(args, "--kind", p.LinkKind)
	}
	args = append(args, "--", c.taskOf(g.r.task), key)
	for _, a := range args {
		if strings.Contains(a, "\x00") {
			return []outcome{{na: true}} // no argument holds a NUL
		}
	}
	out, errOut, code := g.runCLI(stdin, args...)
	outs := []outcome{g.cliOutcome(c.name+" (cli)", out, errOut, code, false)}
	// A table with columns again, from a CSV file (--csv -).
	if p.Type == artifact.TypeTable && len(p.Columns) > 0 && !hasMember(c.members, "url") && !hasMember(c.members, "body") {
		doc := csvLine(p.Columns) + "\n"
		for _, r := range p.Rows {
			doc += csvLine(r) + "\n"
		}
		args := []string{"artifact", "post", "--agent", "agent-1", "--claim-token", g.r.token, "--output-json", "--type", "table", "--csv", "-", "--", c.taskOf(g.r.task), key}
		out, errOut, code := g.runCLI(doc, args...)
		outs = append(outs, g.cliOutcome(c.name+" (cli --csv)", out, errOut, code, false))
	}
	return outs
}

func hasMember(members []member, name string) bool {
	for _, mb := range members {
		if mb.name == name {
			return true
		}
	}
	return false
}

// batchNames are the batch's names of MCP's fields, and batchFields the
// names its errors give them (the payload's own checks keep theirs).
var (
	batchNames  = map[string]string{"task_id": "task", "artifact_type": "type", "columns": "column", "rows": "row", "link_kind": "kind"}
	batchFields = map[string]string{"task_id": "task", "artifact_type": "type", "columns": "column"}
)

func (g *inputRig) batch(c inputCase) []outcome {
	parts := []string{`"task":` + c.taskJSON(g.r.task)}
	for _, mb := range c.members {
		name := mb.name
		if n, ok := batchNames[name]; ok {
			name = n
		}
		v := jsonValue(mb.value)
		if mb.name == "rows" {
			rows, ok := mb.value.([][]string)
			if !ok || rows == nil {
				return []outcome{{na: true}}
			}
			lines := make([]string, len(rows))
			for i, r := range rows {
				lines[i] = csvLine(r)
			}
			v = jsonValue(lines)
		}
		parts = append(parts, `"`+name+`":`+v)
	}
	line := "{" + strings.Join(parts, ",") + "}\n"
	out, errOut, code := g.runCLI(line, "artifact", "post", "--stdin", "--agent", "agent-1", "--claim-token", g.r.token)
	if code == 0 {
		var res struct {
			Status string `json:"status"`
			Blob   string `json:"blob"`
		}
		if json.Unmarshal([]byte(out), &res) != nil || res.Status != "posted" {
			g.t.Errorf("%s (batch): exit 0 with %q", c.name, out)
		}
		return []outcome{{blob: res.Blob}}
	}
	return []outcome{g.cliOutcome(c.name+" (batch)", out, errOut, code, true)}
}

// mcpArgs are the case's arguments of bernstein_post_artifact.
func (g *inputRig) mcpArgs(c inputCase) string {
	return "{" + `"task_id":` + c.taskJSON(g.r.task) + "," + strings.TrimPrefix(jsonObject(c.members), "{")
}

// toolOutcome reads a tools/call result.
func toolOutcome(t *testing.T, name string, isError bool, text string, structured json.RawMessage) outcome {
	if !isError {
		var res struct {
			Blob string `json:"blob"`
		}
		if json.Unmarshal(structured, &res) != nil || res.Blob == "" {
			t.Errorf("%s: a result without a receipt: %s", name, structured)
		}
		return outcome{blob: res.Blob}
	}
	if strings.Contains(text, "\n") {
		t.Errorf("%s: the error is not one line: %q", name, text)
	}
	rest, ok := strings.CutPrefix(text, "invalid ")
	field, msg, ok2 := strings.Cut(rest, ": ")
	if !ok || !ok2 {
		return outcome{field: "?", msg: text}
	}
	return outcome{field: field, msg: msg}
}

func (g *inputRig) mcpHTTP(c inputCase) []outcome {
	res, err := g.mcp.CallTool(g.ctx, &mcp.CallToolParams{Name: "bernstein_post_artifact", Arguments: json.RawMessage(g.mcpArgs(c))})
	if err != nil {
		g.t.Errorf("%s (mcp over HTTP): a protocol error instead of a tool result: %v", c.name, err)
		return []outcome{{field: "?", msg: err.Error()}}
	}
	text := ""
	if len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	sc, _ := json.Marshal(res.StructuredContent)
	return []outcome{toolOutcome(g.t, c.name+" (mcp over HTTP)", res.IsError, text, sc)}
}

func (g *inputRig) mcpStdio(c inputCase) []outcome {
	g.id++
	line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"bernstein_post_artifact","arguments":%s}}`, g.id, g.mcpArgs(c))
	reply := g.stdio.call(line, g.id)
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Structured json.RawMessage `json:"structuredContent"`
	}
	// A refusal is one text; a post is its text and a resource_link to the
	// version it made (docs/mcp.md).
	want := 1
	if !bytes.Contains(reply, []byte(`"isError":true`)) {
		want = 2
	}
	if err := json.Unmarshal(reply, &res); err != nil || len(res.Content) != want || res.Content[0].Type != "text" ||
		want == 2 && res.Content[1].Type != "resource_link" {
		g.t.Errorf("%s (mcp over stdio): %s", c.name, reply)
		return []outcome{{field: "?", msg: string(reply)}}
	}
	return []outcome{toolOutcome(g.t, c.name+" (mcp over stdio)", res.IsError, res.Content[0].Text, res.Structured)}
}

func (g *inputRig) api(c inputCase) []outcome {
	if c.task == "\x00number" || c.task == "\x00empty" {
		return []outcome{{na: true}}
	}
	res, b := g.http.post(server.PathTask(c.taskOf(g.r.task)), "Bearer "+g.r.token, []byte(jsonObject(c.members)))
	if res.StatusCode == http.StatusCreated {
		var rec struct {
			Blob string `json:"blob"`
		}
		json.Unmarshal(b, &rec)
		return []outcome{{blob: rec.Blob}}
	}
	var e server.APIError
	if json.Unmarshal(b, &e) != nil {
		g.t.Errorf("%s (api): %d %s", c.name, res.StatusCode, short(b))
	}
	if res.StatusCode != c.status {
		g.t.Errorf("%s (api): status %d, want %d (%s)", c.name, res.StatusCode, c.status, short(b))
	}
	return []outcome{{field: e.Error.Field, msg: e.Error.Message}}
}

// rawStdio is `bernstein mcp` spoken to in raw lines.
type rawStdio struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Reader
	cmd *exec.Cmd
}

func startRawStdio(t *testing.T, r *repo) *rawStdio {
	cmd := exec.Command(cliBin, "--repo", r.dir, "mcp", "--agent", "agent-1", "--claim-token", r.token)
	cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+r.home)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &rawStdio{t: t, in: in, out: bufio.NewReaderSize(out, 1<<20), cmd: cmd}
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("bernstein mcp: %v", err)
		}
	})
	s.call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"table","version":"1"}}}`, 0)
	s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *rawStdio) send(line string) {
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatal(err)
	}
}

// call sends a request line and returns the result of its answer.
func (s *rawStdio) call(line string, id int) json.RawMessage {
	s.send(line)
	for {
		l, err := s.out.ReadBytes('\n')
		if err != nil {
			s.t.Fatalf("reading bernstein mcp: %v", err)
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(l, &msg); err != nil {
			s.t.Fatalf("bernstein mcp wrote %q", l)
		}
		if string(msg.ID) != strconv.Itoa(id) {
			continue // a notification
		}
		if msg.Error != nil {
			s.t.Fatalf("call %d: a protocol error: %s", id, msg.Error)
		}
		return msg.Result
	}
}

// objectFiles lists the files of the repository's object directory.
func objectFiles(dir string) []string {
	var out []string
	root := filepath.Join(dir, ".git", "objects")
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, strings.TrimPrefix(p, root))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestInputRules runs the table of inputs on every surface.
func TestInputRules(t *testing.T) {
	apiTestDone(t)
	r := newTaskRepo(t, "T-1")
	g := &inputRig{t: t, r: r, http: newAPIClient(t, r)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g.ctx = ctx
	cl := mcp.NewClient(&mcp.Implementation{Name: "table", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.http.base + server.MCPPath,
		HTTPClient: &http.Client{Transport: bearerTransport(r.token)}, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	g.mcp = cs
	g.stdio = startRawStdio(t, r)
	run := map[string]func(inputCase) []outcome{sLib: g.lib, sCLI: g.cli, sBatch: g.batch, sStdio: g.mcpStdio, sMCP: g.mcpHTTP, sAPI: g.api}

	cases := inputCases()
	ran := map[string]int{} // outcomes checked, by surface
	var good []inputCase
	refsBefore, objectsBefore := r.bernsteinRefs(), objectFiles(r.dir)
	for _, c := range cases {
		if c.field == "" {
			good = append(good, c)
			continue
		}
		results := map[string]outcome{}
		for _, sf := range allSurfaces {
			want := c.field
			if o, ok := c.other[sf]; ok {
				want = o
			} else if sf == sBatch {
				if n, ok := batchFields[want]; ok {
					want = n
				}
			}
			if want == "-" {
				continue
			}
			for _, o := range run[sf](c) {
				if o.na {
					t.Errorf("%s on %s: the surface cannot say it, want invalid %s", c.name, sf, want)
					continue
				}
				if o.blob != "" || o.field != want {
					t.Errorf("%s on %s: %v, want invalid %s", c.name, sf, o, want)
				}
				if strings.Contains(o.msg, "s3cr3t") || !strings.Contains(o.msg, c.says) {
					t.Errorf("%s on %s: %q repeats the URL's secret or does not say %q", c.name, sf, o.msg, c.says)
				}
				results[sf] = o
				ran[sf]++
			}
		}
		// One rule, one wording: MCP's and the library's are the API's (but
		// for the surfaces whose words are their own).
		ref, ok := results[sAPI]
		if !ok {
			ref, ok = results[sStdio]
		}
		for sf, o := range results {
			if ok && o.field == ref.field && o.msg != ref.msg && !contains(c.words, sf) {
				t.Errorf("%s: %s says %q, the API %q", c.name, sf, o.msg, ref.msg)
			}
		}
	}
	for _, sf := range allSurfaces {
		if ran[sf] < 40 {
			t.Errorf("%s said only %d bad inputs", sf, ran[sf])
		}
	}
	t.Logf("bad inputs checked by surface: %v", ran)
	if after := r.bernsteinRefs(); after != refsBefore {
		t.Errorf("bad input moved refs:\n%s\nwas\n%s", after, refsBefore)
	}
	if after := objectFiles(r.dir); !reflect.DeepEqual(after, objectsBefore) {
		t.Errorf("bad input wrote object files: %v, was %v", after, objectsBefore)
	}

	// A good post: every surface stores the payload the members say.
	for _, c := range good {
		want := c.want
		if want == nil {
			_, p, _ := payloadOf(c.members)
			want = &p
		}
		for _, sf := range allSurfaces {
			if c.other[sf] == "-" {
				continue
			}
			for _, o := range run[sf](c) {
				if o.blob == "" {
					t.Errorf("%s on %s: %v, want it posted", c.name, sf, o)
					continue
				}
				got, err := artifact.Parse([]byte(r.git("cat-file", "blob", o.blob)))
				if err != nil {
					t.Fatal(err)
				}
				norm := func(p artifact.Payload) artifact.Payload {
					if p.Type == artifact.TypeTable && p.Rows == nil {
						p.Rows = [][]string{}
					}
					return p
				}
				if !reflect.DeepEqual(norm(got), norm(*want)) {
					t.Errorf("%s on %s: stored %+q, want %+q", c.name, sf, got, *want)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
