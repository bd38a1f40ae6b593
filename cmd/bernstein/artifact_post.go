package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/postbody"
)

// 'artifact post': one post from flags, or a batch from stdin (--stdin).

type artifactPostOptions struct {
	IO    *IO
	Store openFunc

	Task, Key  string
	Agent      string // default $BERNSTEIN_AGENT
	ClaimToken string // default $BERNSTEIN_CLAIM_TOKEN
	payloadFlags
	JSON  bool
	Stdin bool // a batch, one post a line
	// PerPostFlags are the per-post flags given on the command line (a
	// batch refuses them: each line names its own).
	PerPostFlags []string
}

// payloadFlags are the flags (or a batch line's fields) a payload is made of.
type payloadFlags struct {
	Type           string
	BodyFile, Body string
	BodySet        bool // --body given (an empty body is a body)
	CSVFile        string
	Columns, Rows  []string
	URL, Kind      string
}

const artifactPostLong = `Post an artifact to a task. Only the holder of the task's live claim may post:
pass --agent and --claim-token (or BERNSTEIN_AGENT and BERNSTEIN_CLAIM_TOKEN).

  --type report --body-file FILE|-        a markdown body (or --body TEXT)
  --type table  --csv FILE|-              first CSV line = column names
  --type table  --column C ... --row "a,b" ...
  --type link   --url URL --kind preview|dashboard|document

The payload is stored as a git blob, an artifact_posted row is appended to the
task's journal, a signed entry to the writer's spine and an HMAC entry to its
audit mirror, and the three refs move in one atomic transaction.

Limits: key 1-128 of letters, digits, _ . - (starting with a letter or digit);
payload at most 1 MiB; tables at most 64 columns, 4096 rows, 4096 characters a
cell; URLs http(s) only, at most 4096 characters; no control characters other
than tab, newline and carriage return.

Exit status: 0 posted; 1 bad input or error (nothing written); 3 refused
because the agent does not hold the task's claim (the refusal is recorded in
the audit mirror).

Batch: --stdin (no task or key arguments) reads one post per line, as a JSON
object whose fields are the flags' names:

  {"task": "T-1", "key": "notes", "type": "report", "body": "# Notes"}
  {"task": "T-1", "key": "grid", "type": "table", "column": ["a", "b"],
   "row": ["1,2"]}
  {"task": "T-2", "key": "site", "type": "link", "url": "https://x.test",
   "kind": "preview", "agent": "agent-2", "claim-token": "bct_..."}

(each object on one line; "body-file" and "csv" name files, not stdin; blank
lines are skipped). "agent" and "claim-token" default to --agent and
--claim-token, then to BERNSTEIN_AGENT and BERNSTEIN_CLAIM_TOKEN. Every line
is checked before anything is written: bad input in any line writes nothing
and names the line and the field. Then all posts are written together, in
order, as one durable write (one pack, one ref transaction): a crash leaves
all of them or none. Each line gets one JSON line on stdout, in order:
{"line": N, "status": "posted", ...the receipt, as --output-json prints it,
"tampered" included...}, or {"line": N, "status":
"refused", "task", "key", "agent", "reason", "error"} (recorded in the audit
mirror), or {"line": N, "status": "failed", "task", "key", "error"} (nothing
of that post written). At most 10000 posts and 64 MiB of payloads a batch.

Exit status with --stdin: 0 every post posted; 1 bad input or error (nothing
written, nothing on stdout), or some post failed; 3 some posts refused for
want of the claim, every other one posted.`

// batchFlags are the per-post flags a batch takes from its lines instead.
var batchFlags = []string{"type", "body", "body-file", "csv", "column", "row", "url", "kind"}

func newArtifactPostCmd(f *factory, runF func(*artifactPostOptions) error) *cobra.Command {
	o := &artifactPostOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "post <task> <key> --type report|table|link ...",
		Short: "Post an artifact version to a task whose claim you hold",
		Long:  artifactPostLong,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.Stdin {
				if len(args) > 0 {
					return fmt.Errorf("--stdin takes no arguments: each line names its task and key")
				}
				return nil
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				o.Task, o.Key = args[0], args[1]
			}
			o.BodySet = cmd.Flags().Changed("body")
			for _, name := range batchFlags {
				if cmd.Flags().Changed(name) {
					o.PerPostFlags = append(o.PerPostFlags, name)
				}
			}
			o.Agent, o.ClaimToken = envDefault(o.Agent, "BERNSTEIN_AGENT"), envDefault(o.ClaimToken, "BERNSTEIN_CLAIM_TOKEN")
			if runF != nil {
				return runF(o)
			}
			if o.Stdin {
				return postBatchRun(o)
			}
			return artifactPostRun(o)
		},
	}
	addPostFlags(cmd, o)
	return cmd
}

func addPostFlags(cmd *cobra.Command, o *artifactPostOptions) {
	f := cmd.Flags()
	f.StringVar(&o.Agent, "agent", "", "the posting agent (default $BERNSTEIN_AGENT)")
	f.StringVar(&o.ClaimToken, "claim-token", "", "the agent's claim token (default $BERNSTEIN_CLAIM_TOKEN)")
	f.StringVar(&o.Type, "type", "", "artifact type: report, table or link")
	f.StringVar(&o.BodyFile, "body-file", "", "report: read the markdown body from FILE ('-' for stdin)")
	f.StringVar(&o.Body, "body", "", "report: the markdown body")
	f.StringVar(&o.CSVFile, "csv", "", "table: read CSV from FILE ('-' for stdin); the first line names the columns")
	f.StringArrayVar(&o.Columns, "column", nil, "table: a column name (repeatable, in order)")
	f.StringArrayVar(&o.Rows, "row", nil, "table: one row as a CSV line (repeatable)")
	f.StringVar(&o.URL, "url", "", "link: the URL (http or https)")
	f.StringVar(&o.Kind, "kind", "", "link: preview, dashboard or document")
	f.BoolVar(&o.JSON, "output-json", false, "print the receipt as JSON")
	f.BoolVar(&o.Stdin, "stdin", false, "post a batch: one JSON object a line on stdin, written together (see above)")
}

func artifactPostRun(o *artifactPostOptions) error {
	p, err := o.payload(o.IO)
	if err != nil {
		return err
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.Post(bernstein.PostRequest{Task: o.Task, Key: o.Key, Agent: o.Agent, ClaimToken: o.ClaimToken, Payload: p})
		var refused *bernstein.RefusedError
		if errors.As(err, &refused) {
			return exitCode(3, err)
		}
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, res)
		}
		fmt.Fprintf(o.IO.Out, "posted %s v%d to %s (journal index %d, spine entry %s)\n", res.Key, res.Version, res.Task, res.JournalIndex, res.SpineEntryHash)
		return nil
	})
}

// batchFields are the fields of a line of `artifact post --stdin`: the
// flags of one post.
var batchFields = []string{"task", "key", "type", "body", "body-file", "csv", "column", "row", "url", "kind", "agent", "claim-token"}

// maxBatchLine bounds one line: a payload of the largest size, every
// character escaped.
const maxBatchLine = 8 * artifact.MaxPayloadBytes

// postBatchRun is `artifact post --stdin`.
func postBatchRun(o *artifactPostOptions) error {
	if len(o.PerPostFlags) > 0 {
		return &artifact.InputError{Field: o.PerPostFlags[0], Msg: "does not apply with --stdin: each line names its own"}
	}
	reqs, lines, err := readBatch(o.IO, o.Agent, o.ClaimToken)
	if err != nil {
		return err
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		outs, err := s.PostBatch(reqs)
		var bad *bernstein.BatchInputError
		if errors.As(err, &bad) {
			if bad.Index >= len(lines) {
				return bad.Err
			}
			return lineError(lines[bad.Index], batchFieldError(bad.Err))
		}
		if err != nil {
			return err
		}
		return printBatch(o.IO, reqs, lines, outs)
	})
}

// readBatch reads and checks every line of a batch: the posts, and the
// line each came from.
func readBatch(in *IO, agent, token string) ([]bernstein.PostRequest, []int, error) {
	var reqs []bernstein.PostRequest
	var lines []int
	r := bufio.NewReaderSize(in.In, 64<<10)
	for n := 1; ; n++ {
		raw, err := readLine(r)
		if err == io.EOF && raw == nil {
			break
		}
		if err != nil && err != io.EOF {
			return nil, nil, lineError(n, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		req, err := parseBatchLine(in, raw, agent, token)
		if err != nil {
			return nil, nil, lineError(n, err)
		}
		reqs = append(reqs, req)
		lines = append(lines, n)
	}
	if len(reqs) == 0 {
		return nil, nil, fmt.Errorf("no posts on stdin: give one JSON object a line")
	}
	return reqs, lines, nil
}

// printBatch prints one JSON line a post, and the batch's exit.
func printBatch(sio *IO, reqs []bernstein.PostRequest, lines []int, outs []bernstein.PostOutcome) error {
	enc := json.NewEncoder(sio.Out)
	enc.SetEscapeHTML(false)
	refused, failed := 0, 0
	for i, out := range outs {
		var v any
		var refusal *bernstein.RefusedError
		switch {
		case out.Err == nil:
			v = struct {
				Line   int    `json:"line"`
				Status string `json:"status"`
				*bernstein.PostResult
			}{lines[i], "posted", out.Result}
		case errors.As(out.Err, &refusal):
			refused++
			v = struct {
				Line   int    `json:"line"`
				Status string `json:"status"`
				Task   string `json:"task"`
				Key    string `json:"key"`
				Agent  string `json:"agent"`
				Reason string `json:"reason"`
				Error  string `json:"error"`
			}{lines[i], "refused", reqs[i].Task, reqs[i].Key, reqs[i].Agent, refusal.Reason, out.Err.Error()}
		default:
			failed++
			v = struct {
				Line   int    `json:"line"`
				Status string `json:"status"`
				Task   string `json:"task"`
				Key    string `json:"key"`
				Error  string `json:"error"`
			}{lines[i], "failed", reqs[i].Task, reqs[i].Key, out.Err.Error()}
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%d of %d posts failed (see their lines)", failed, len(outs))
	case refused > 0:
		return exitCode(3, fmt.Errorf("%d of %d posts refused (see their lines)", refused, len(outs)))
	}
	return nil
}

// lineError says which line of a batch is bad, and why.
func lineError(n int, err error) error {
	return fmt.Errorf("line %d: %s", n, userMessage(err))
}

// readLine reads one line (without its end), refusing one longer than
// maxBatchLine.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxBatchLine {
			return nil, fmt.Errorf("longer than %d bytes", maxBatchLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) == 0 {
			return nil, io.EOF
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}

// parseBatchLine reads one line's post, with the decoder MCP and the HTTP
// API share (internal/postbody): valid UTF-8, no lone surrogate, no field
// twice.
func parseBatchLine(in *IO, raw []byte, agent, token string) (bernstein.PostRequest, error) {
	obj, err := postbody.ReadObject(raw)
	if err != nil {
		return bernstein.PostRequest{}, err
	}
	if u := obj.Unknown(batchFields); len(u) > 0 {
		return bernstein.PostRequest{}, fmt.Errorf("%q: not a field of a post (%s)", u[0], strings.Join(batchFields, ", "))
	}
	req := bernstein.PostRequest{Agent: agent, ClaimToken: token}
	pf := payloadFlags{BodySet: obj.Has("body")}
	var lineAgent, lineToken string
	strs := []namedField[string]{{"task", &req.Task}, {"key", &req.Key}, {"type", &pf.Type}, {"body", &pf.Body}, {"body-file", &pf.BodyFile},
		{"csv", &pf.CSVFile}, {"url", &pf.URL}, {"kind", &pf.Kind}, {"agent", &lineAgent}, {"claim-token", &lineToken}}
	lists := []namedField[[]string]{{"column", &pf.Columns}, {"row", &pf.Rows}}
	if err := readFields(obj, strs, obj.String); err != nil {
		return bernstein.PostRequest{}, err
	}
	if err := readFields(obj, lists, obj.Strings); err != nil {
		return bernstein.PostRequest{}, err
	}
	for field, v := range map[string]string{"body-file": pf.BodyFile, "csv": pf.CSVFile} {
		if v == "-" {
			return bernstein.PostRequest{}, &artifact.InputError{Field: field, Msg: "cannot be '-': stdin holds the batch; name a file"}
		}
	}
	if req.Payload, err = pf.payload(in); err != nil {
		return bernstein.PostRequest{}, batchFieldError(err)
	}
	if lineAgent != "" {
		req.Agent = lineAgent
	}
	if lineToken != "" {
		req.ClaimToken = lineToken
	}
	return req, nil
}

// namedField is a field of a batch line and where its value goes.
type namedField[T any] struct {
	name string
	v    *T
}

// readFields reads the fields a line has, in order: the first bad one is
// the error.
func readFields[T any](obj *postbody.Object, fields []namedField[T], read func(string) (T, error)) error {
	for _, f := range fields {
		if !obj.Has(f.name) {
			continue
		}
		v, err := read(f.name)
		if err != nil {
			return err
		}
		*f.v = v
	}
	return nil
}

// batchFieldError names a field as a batch line spells it.
func batchFieldError(err error) error {
	var ie *artifact.InputError
	if !errors.As(err, &ie) {
		return err
	}
	names := map[string]string{"task_id": "task", "claim_token": "claim-token", "columns": "column"}
	if n, ok := names[ie.Field]; ok {
		return &artifact.InputError{Field: n, Msg: strings.ReplaceAll(ie.Msg, "pass --claim-token or set BERNSTEIN_CLAIM_TOKEN", "give \"claim-token\", --claim-token or BERNSTEIN_CLAIM_TOKEN")}
	}
	return err
}

func readInput(in *IO, field, path string) ([]byte, error) {
	var r io.Reader = in.In
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, &artifact.InputError{Field: field, Msg: err.Error()}
		}
		defer f.Close()
		r = f
	}
	// One byte past the limit is enough to refuse an oversized payload.
	b, err := readLimited(r, artifact.MaxPayloadBytes+1)
	if err != nil {
		return nil, &artifact.InputError{Field: field, Msg: err.Error()}
	}
	if len(b) > artifact.MaxPayloadBytes {
		return nil, &artifact.InputError{Field: field, Msg: fmt.Sprintf("is more than %d bytes", artifact.MaxPayloadBytes)}
	}
	return b, nil
}

func readLimited(r io.Reader, n int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, n))
}

func badInput(field, msg string) error { return &artifact.InputError{Field: field, Msg: msg} }

// payload assembles the artifact payload from the flags, refusing flags that
// belong to another type.
func (o *payloadFlags) payload(in *IO) (artifact.Payload, error) {
	switch o.Type {
	case artifact.TypeReport:
		return o.report(in)
	case artifact.TypeTable:
		return o.table(in)
	case artifact.TypeLink:
		if err := o.others(map[string]bool{"body": o.BodySet, "body-file": o.BodyFile != "", "csv": o.CSVFile != "", "column": o.Columns != nil, "row": o.Rows != nil}); err != nil {
			return artifact.Payload{}, err
		}
		return artifact.Payload{Type: o.Type, URL: o.URL, LinkKind: o.Kind}, nil
	case "":
		return artifact.Payload{}, badInput("type", "is missing: pass --type report, table or link")
	}
	return artifact.Payload{}, badInput("type", strconv.Quote(o.Type)+" is not one of report, table, link")
}

// others refuses the flags of another type that are set: the error names
// the first in alphabetical order and lists the rest, the same whatever
// the order the flags were given in.
func (o *payloadFlags) others(flags map[string]bool) error {
	var set []string
	for name, on := range flags {
		if on {
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	sort.Strings(set)
	msg := "does not apply to --type " + o.Type
	if len(set) > 1 {
		msg += " (nor do --" + strings.Join(set[1:], ", --") + ")"
	}
	return badInput(set[0], msg)
}

func (o *payloadFlags) report(in *IO) (artifact.Payload, error) {
	if err := o.others(map[string]bool{"csv": o.CSVFile != "", "column": o.Columns != nil, "row": o.Rows != nil, "url": o.URL != "", "kind": o.Kind != ""}); err != nil {
		return artifact.Payload{}, err
	}
	switch {
	case o.BodyFile != "" && o.BodySet:
		return artifact.Payload{}, badInput("body", "give --body or --body-file, not both")
	case o.BodyFile != "":
		b, err := readInput(in, "body-file", o.BodyFile)
		if err != nil {
			return artifact.Payload{}, err
		}
		return artifact.Payload{Type: o.Type, Body: string(b)}, nil
	case o.BodySet:
		return artifact.Payload{Type: o.Type, Body: o.Body}, nil
	}
	return artifact.Payload{}, badInput("body", "a report needs --body-file FILE|- or --body TEXT")
}

func (o *payloadFlags) table(in *IO) (artifact.Payload, error) {
	if err := o.others(map[string]bool{"body": o.BodySet, "body-file": o.BodyFile != "", "url": o.URL != "", "kind": o.Kind != ""}); err != nil {
		return artifact.Payload{}, err
	}
	if o.CSVFile != "" {
		if o.Columns != nil || o.Rows != nil {
			return artifact.Payload{}, badInput("csv", "give --csv or --column/--row, not both")
		}
		b, err := readInput(in, "csv", o.CSVFile)
		if err != nil {
			return artifact.Payload{}, err
		}
		return artifact.TableFromCSV(bytes.NewReader(b))
	}
	if o.Columns == nil {
		return artifact.Payload{}, badInput("columns", "a table needs --csv FILE|- or --column NAME ... with --row CSV ...")
	}
	rows := [][]string{}
	for i, r := range o.Rows {
		cells, err := artifact.ParseCSVRecord("row["+strconv.Itoa(i)+"]", r)
		if err != nil {
			return artifact.Payload{}, err
		}
		rows = append(rows, cells)
	}
	return artifact.Payload{Type: o.Type, Columns: o.Columns, Rows: rows}, nil
}
