package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/postbody"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/verify"
)

const deprecationWarning = "WARNING: 'bernstein artifacts' is deprecated and will be removed in v4.0.0: use 'bernstein artifact' instead."

// newArtifactCmd builds 'artifact' or, deprecated, 'artifacts': the same
// list and show, plus a warning on stderr for the plural.
func newArtifactCmd(g *globals, io *IO, plural bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifact",
		Short: "Post, list and show the artifacts of a task",
		Long: `Artifacts are typed payloads (report, table, link) that the holder of a task's
claim posts under a key. Each post of a key makes a new version whose record
names the previous version's spine entry: history is a chain, never an
overwrite. Listing and showing re-check every version against its journal row
and its spine entry; a tampered version is reported and its content withheld.`,
	}
	if plural {
		cmd.Use = "artifacts"
		cmd.Short = "Deprecated: use 'bernstein artifact'"
		cmd.Hidden = true
		cmd.PersistentPreRun = func(c *cobra.Command, args []string) {
			fmt.Fprintln(io.Err, deprecationWarning)
		}
		cmd.AddCommand(newArtifactListCmd(g, io), newArtifactShowCmd(g, io))
		return cmd
	}
	cmd.AddCommand(newArtifactPostCmd(g, io), newArtifactListCmd(g, io), newArtifactShowCmd(g, io), newArtifactDiffCmd(g, io), newArtifactTextconvCmd(io), newArtifactAttestCmd(g, io))
	return cmd
}

type postOptions struct {
	agent, token       string
	typ                string
	bodyFile, body     string
	csvFile            string
	columns, rows      []string
	url, kind          string
	asJSON             bool
	bodySet, csvSetVia bool
	stdin              bool
}

func newArtifactPostCmd(g *globals, io *IO) *cobra.Command {
	o := &postOptions{}
	cmd := &cobra.Command{
		Use:   "post <task> <key> --type report|table|link ...",
		Short: "Post an artifact version to a task whose claim you hold",
		Long: `Post an artifact to a task. Only the holder of the task's live claim may post:
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
  {"task": "T-1", "key": "grid", "type": "table", "column": ["a", "b"], "row": ["1,2"]}
  {"task": "T-2", "key": "site", "type": "link", "url": "https://x.test", "kind": "preview",
   "agent": "agent-2", "claim-token": "bct_..."}

(each object on one line; "body-file" and "csv" name files, not stdin; blank
lines are skipped). "agent" and "claim-token" default to --agent and
--claim-token, then to BERNSTEIN_AGENT and BERNSTEIN_CLAIM_TOKEN. Every line
is checked before anything is written: bad input in any line writes nothing
and names the line and the field. Then all posts are written together, in
order, as one durable write (one pack, one ref transaction): a crash leaves
all of them or none. Each line gets one JSON line on stdout, in order:
{"line": N, "status": "posted", ...the receipt...}, or {"line": N, "status":
"refused", "task", "key", "agent", "reason", "error"} (recorded in the audit
mirror), or {"line": N, "status": "failed", "task", "key", "error"} (nothing
of that post written). At most 10000 posts and 64 MiB of payloads a batch.

Exit status with --stdin: 0 every post posted; 1 bad input or error (nothing
written, nothing on stdout), or some post failed; 3 some posts refused for
want of the claim, every other one posted.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.stdin {
				if len(args) > 0 {
					return fmt.Errorf("--stdin takes no arguments: each line names its task and key")
				}
				return nil
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.stdin {
				return postBatch(g, io, o, cmd)
			}
			o.bodySet = cmd.Flags().Changed("body")
			p, err := o.payload(io)
			if err != nil {
				return err
			}
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			res, err := s.Post(bernstein.PostRequest{
				Task: args[0], Key: args[1],
				Agent:      envDefault(o.agent, "BERNSTEIN_AGENT"),
				ClaimToken: envDefault(o.token, "BERNSTEIN_CLAIM_TOKEN"),
				Payload:    p,
			})
			var refused *bernstein.RefusedError
			if errors.As(err, &refused) {
				return exitCode(3, err)
			}
			if err != nil {
				return err
			}
			if o.asJSON {
				return printJSON(io, res)
			}
			fmt.Fprintf(io.Out, "posted %s v%d to %s (journal index %d, spine entry %s)\n", res.Key, res.Version, res.Task, res.JournalIndex, res.SpineEntryHash)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.agent, "agent", "", "the posting agent (default $BERNSTEIN_AGENT)")
	f.StringVar(&o.token, "claim-token", "", "the agent's claim token (default $BERNSTEIN_CLAIM_TOKEN)")
	f.StringVar(&o.typ, "type", "", "artifact type: report, table or link")
	f.StringVar(&o.bodyFile, "body-file", "", "report: read the markdown body from FILE ('-' for stdin)")
	f.StringVar(&o.body, "body", "", "report: the markdown body")
	f.StringVar(&o.csvFile, "csv", "", "table: read CSV from FILE ('-' for stdin); the first line names the columns")
	f.StringArrayVar(&o.columns, "column", nil, "table: a column name (repeatable, in order)")
	f.StringArrayVar(&o.rows, "row", nil, "table: one row as a CSV line (repeatable)")
	f.StringVar(&o.url, "url", "", "link: the URL (http or https)")
	f.StringVar(&o.kind, "kind", "", "link: preview, dashboard or document")
	f.BoolVar(&o.asJSON, "output-json", false, "print the receipt as JSON")
	f.BoolVar(&o.stdin, "stdin", false, "post a batch: one JSON object a line on stdin, written together (see above)")
	return cmd
}

// batchFields are the fields of a line of `artifact post --stdin`: the
// flags of one post.
var batchFields = []string{"task", "key", "type", "body", "body-file", "csv", "column", "row", "url", "kind", "agent", "claim-token"}

// maxBatchLine bounds one line: a payload of the largest size, every
// character escaped.
const maxBatchLine = 8 * artifact.MaxPayloadBytes

// batchFlags are the per-post flags a batch takes from its lines instead.
var batchFlags = []string{"type", "body", "body-file", "csv", "column", "row", "url", "kind"}

// postBatch is `artifact post --stdin`.
func postBatch(g *globals, in *IO, o *postOptions, cmd *cobra.Command) error {
	for _, name := range batchFlags {
		if cmd.Flags().Changed(name) {
			return &artifact.InputError{Field: name, Msg: "does not apply with --stdin: each line names its own"}
		}
	}
	agent, token := envDefault(o.agent, "BERNSTEIN_AGENT"), envDefault(o.token, "BERNSTEIN_CLAIM_TOKEN")
	var reqs []bernstein.PostRequest
	var lines []int
	r := bufio.NewReaderSize(in.In, 64<<10)
	for n := 1; ; n++ {
		raw, err := readLine(r)
		if err == io.EOF && raw == nil {
			break
		}
		if err != nil && err != io.EOF {
			return lineError(n, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		req, err := parseBatchLine(in, raw, agent, token)
		if err != nil {
			return lineError(n, err)
		}
		reqs = append(reqs, req)
		lines = append(lines, n)
	}
	if len(reqs) == 0 {
		return fmt.Errorf("no posts on stdin: give one JSON object a line")
	}
	s, err := g.open()
	if err != nil {
		return err
	}
	defer s.Close()
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
	enc := json.NewEncoder(in.Out)
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
	o, err := postbody.ReadObject(raw)
	if err != nil {
		return bernstein.PostRequest{}, err
	}
	if u := o.Unknown(batchFields); len(u) > 0 {
		return bernstein.PostRequest{}, fmt.Errorf("%q: not a field of a post (%s)", u[0], strings.Join(batchFields, ", "))
	}
	str := func(f string) (string, error) {
		if !o.Has(f) {
			return "", nil
		}
		return o.String(f)
	}
	strs := func(f string) ([]string, error) {
		if !o.Has(f) {
			return nil, nil
		}
		return o.Strings(f)
	}
	po := &postOptions{bodySet: o.Has("body")}
	var task, key, lineAgent, lineToken string
	for _, f := range []struct {
		name string
		v    *string
	}{{"task", &task}, {"key", &key}, {"type", &po.typ}, {"body", &po.body}, {"body-file", &po.bodyFile}, {"csv", &po.csvFile},
		{"url", &po.url}, {"kind", &po.kind}, {"agent", &lineAgent}, {"claim-token", &lineToken}} {
		if *f.v, err = str(f.name); err != nil {
			return bernstein.PostRequest{}, err
		}
	}
	if po.columns, err = strs("column"); err != nil {
		return bernstein.PostRequest{}, err
	}
	if po.rows, err = strs("row"); err != nil {
		return bernstein.PostRequest{}, err
	}
	for field, v := range map[string]string{"body-file": po.bodyFile, "csv": po.csvFile} {
		if v == "-" {
			return bernstein.PostRequest{}, &artifact.InputError{Field: field, Msg: "cannot be '-': stdin holds the batch; name a file"}
		}
	}
	p, err := po.payload(in)
	if err != nil {
		return bernstein.PostRequest{}, batchFieldError(err)
	}
	req := bernstein.PostRequest{Task: task, Key: key, Agent: agent, ClaimToken: token, Payload: p}
	if lineAgent != "" {
		req.Agent = lineAgent
	}
	if lineToken != "" {
		req.ClaimToken = lineToken
	}
	return req, nil
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

// payload assembles the artifact payload from the flags, refusing flags that
// belong to another type.
func (o *postOptions) payload(in *IO) (artifact.Payload, error) {
	bad := func(field, msg string) error { return &artifact.InputError{Field: field, Msg: msg} }
	other := func(flags map[string]bool) error {
		for name, set := range flags {
			if set {
				return bad(name, "does not apply to --type "+o.typ)
			}
		}
		return nil
	}
	switch o.typ {
	case artifact.TypeReport:
		if err := other(map[string]bool{"csv": o.csvFile != "", "column": o.columns != nil, "row": o.rows != nil, "url": o.url != "", "kind": o.kind != ""}); err != nil {
			return artifact.Payload{}, err
		}
		switch {
		case o.bodyFile != "" && o.bodySet:
			return artifact.Payload{}, bad("body", "give --body or --body-file, not both")
		case o.bodyFile != "":
			b, err := readInput(in, "body-file", o.bodyFile)
			if err != nil {
				return artifact.Payload{}, err
			}
			return artifact.Payload{Type: o.typ, Body: string(b)}, nil
		case o.bodySet:
			return artifact.Payload{Type: o.typ, Body: o.body}, nil
		}
		return artifact.Payload{}, bad("body", "a report needs --body-file FILE|- or --body TEXT")
	case artifact.TypeTable:
		if err := other(map[string]bool{"body": o.bodySet, "body-file": o.bodyFile != "", "url": o.url != "", "kind": o.kind != ""}); err != nil {
			return artifact.Payload{}, err
		}
		if o.csvFile != "" {
			if o.columns != nil || o.rows != nil {
				return artifact.Payload{}, bad("csv", "give --csv or --column/--row, not both")
			}
			b, err := readInput(in, "csv", o.csvFile)
			if err != nil {
				return artifact.Payload{}, err
			}
			return artifact.TableFromCSV(bytesReader(b))
		}
		if o.columns == nil {
			return artifact.Payload{}, bad("columns", "a table needs --csv FILE|- or --column NAME ... with --row CSV ...")
		}
		rows := [][]string{}
		for i, r := range o.rows {
			cells, err := artifact.ParseCSVRecord("row["+strconv.Itoa(i)+"]", r)
			if err != nil {
				return artifact.Payload{}, err
			}
			rows = append(rows, cells)
		}
		return artifact.Payload{Type: o.typ, Columns: o.columns, Rows: rows}, nil
	case artifact.TypeLink:
		if err := other(map[string]bool{"body": o.bodySet, "body-file": o.bodyFile != "", "csv": o.csvFile != "", "column": o.columns != nil, "row": o.rows != nil}); err != nil {
			return artifact.Payload{}, err
		}
		return artifact.Payload{Type: o.typ, URL: o.url, LinkKind: o.kind}, nil
	case "":
		return artifact.Payload{}, bad("type", "is missing: pass --type report, table or link")
	}
	return artifact.Payload{}, bad("type", strconv.Quote(o.typ)+" is not one of report, table, link")
}

func newArtifactListCmd(g *globals, io *IO) *cobra.Command {
	var asJSON, strict bool
	cmd := &cobra.Command{
		Use:   "list [<task>]",
		Short: "List every version of a task's artifacts with its verify state",
		Long: `With a task: every version of every artifact key of the task, each re-checked
and reported verified, tampered or unverifiable (no pinned key for its
writer), plus the task's journal identity (verified only when a signed
journal seal matches the journal exactly).

The journal identity is shown on the first line on a terminal; piped, stdout
holds only the tab-separated rows, and an identity other than verified is
named on stderr, unless it is unverifiable only because the task is open (not
yet sealed by a terminal transition).

Exit status: 0 versions exist (even if some are tampered); 1 the task has
none or does not exist; 2 rows may be hidden: the journal chain is broken, or
the journal identity is mismatched (the journal differs from its signed seal,
e.g. it was moved back after the task was completed); 2 with --strict, some
version shown is not verified (tampered, or unverifiable: no pinned key for
its writer), or the journal identity of an ended task is unverifiable (an
open task's journal is unsealed, which --strict accepts).

Without a task: the artifact keys the local lineage spines carry, as
bernstein://<task>/<key> with the number of productions of each.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			if len(args) == 0 {
				return listProductions(s, io, asJSON)
			}
			rep, err := s.Artifacts(args[0])
			if errors.Is(err, bernstein.ErrUnknownTask) {
				return exitCode(1, err)
			}
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(io, bernstein.NewArtifactListDoc(rep)); err != nil {
					return err
				}
			} else {
				identity := "journal identity " + rep.JournalIdentity
				if rep.IdentityReason != "" {
					identity += " (" + rep.IdentityReason + ")"
				}
				if io.IsTTY {
					fmt.Fprintf(io.Out, "task %s: %s\n", rep.Task, identity)
				} else if rep.JournalIdentity != verify.IdentityMismatched && !identityExpected(s, rep) {
					// Piped, stdout keeps its columns; what is worth a
					// look goes to stderr (a mismatch is the exit error).
					fmt.Fprintf(io.Err, "note: task %s: %s\n", rep.Task, identity)
				}
				t := newTable(io, "KEY", "VERSION", "TYPE", "STATE", "INDEX", "CONTENT", "REASON")
				for _, v := range rep.Versions {
					typ := v.Type
					if v.LinkKind != "" {
						typ += "/" + v.LinkKind
					}
					t.row(v.Key, strconv.FormatInt(v.Version, 10), typ, v.State, strconv.FormatInt(v.JournalIndex, 10), v.ContentHash.Short(), v.Reason)
				}
				if err := t.render(); err != nil {
					return err
				}
			}
			switch {
			case rep.ChainBroken:
				msg := rep.ChainReason
				if rep.JournalIdentity == verify.IdentityMismatched {
					msg += "; journal identity mismatched"
					if !strings.Contains(rep.IdentityReason, rep.ChainReason) {
						msg += " (" + rep.IdentityReason + ")"
					}
				}
				return exitCode(2, errors.New(msg))
			case rep.JournalIdentity == verify.IdentityMismatched:
				return exitCode(2, fmt.Errorf("task %s: journal identity mismatched (%s): rows may be hidden", rep.Task, rep.IdentityReason))
			case len(rep.Versions) == 0:
				return exitCode(1, fmt.Errorf("task %s has no artifacts", rep.Task))
			}
			if strict {
				return strictList(s, rep)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print one JSON document")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 2 when any version shown is not verified (see above)")
	return cmd
}

// strictList is the exit of 'artifact list <task> --strict': 2 naming what
// is not verified, nil when everything is.
func strictList(s *bernstein.Store, rep *verify.TaskReport) error {
	var not []string
	for _, v := range rep.Versions {
		if v.State != verify.Verified {
			not = append(not, fmt.Sprintf("%s v%d %s", v.Key, v.Version, v.State))
		}
	}
	if !identityExpected(s, rep) {
		not = append(not, "journal identity "+rep.JournalIdentity+" ("+rep.IdentityReason+")")
	}
	if len(not) == 0 {
		return nil
	}
	if len(not) > 5 {
		not = append(not[:5], fmt.Sprintf("and %d more", len(not)-5))
	}
	return exitCode(2, fmt.Errorf("task %s: not verified (--strict): %s", rep.Task, strings.Join(not, ", ")))
}

// identityExpected tells an unverifiable journal identity that only says
// the task is open (no seal yet, or reopened after its seal) from one that
// deserves a look (a seal by a writer not pinned here, say).
func identityExpected(s *bernstein.Store, rep *verify.TaskReport) bool {
	switch rep.JournalIdentity {
	case verify.IdentityVerified:
		return true
	case verify.IdentityUnverifiable:
		rows, err := s.LedgerRows(rep.Task)
		if err != nil || len(rows) == 0 {
			return false
		}
		return !ledger.Terminal(ledger.PhaseOf(rows[len(rows)-1].Kind))
	}
	return false
}

func listProductions(s *bernstein.Store, io *IO, asJSON bool) error {
	ps, err := s.Productions()
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(io, bernstein.NewProductionsDoc(ps))
	}
	t := newTable(io, "ARTIFACT", "PRODUCTIONS")
	for _, p := range ps {
		t.row(p.URI, strconv.Itoa(p.Productions))
	}
	return t.render()
}

func newArtifactShowCmd(g *globals, io *IO) *cobra.Command {
	var asJSON, strict bool
	var version int64
	cmd := &cobra.Command{
		Use:   "show <task> <key>",
		Short: "Show the latest (or a given) version of an artifact, with its history",
		Long: `Show one version of an artifact (the latest unless --version N) after
re-checking it: the blob is re-hashed against the journal row, the row against
its spine entry, the spine entry's signature against the writer's key. A
tampered version is reported with the reason and its content is withheld.

Without --version it shows the latest version, except that a version written
by a writer this host does not trust (its key is published but not pinned)
is passed over for the latest verified one, and named. --version N shows
version N whatever its state, saying the state. --strict shows only a
verified version.

Exit status: 0 rendered; 1 unknown task, key or version; 2 content withheld:
the version is tampered (or, with --strict, not verified), or the task's
journal is broken or rolled back behind its spine (so its latest version may
not be the latest).

History lists every version of the key oldest first (journal order), in the
text output as in --output-json ("history"), as 'artifact list' does. The
actor is who posted a version (the agent); the writer is the host identity
whose signed spine entry seals it. A tampered version's writer is marked
unproven and labelled with where it was read: "as its spine entry names it"
when the check reached the spine entry the row names, else "as its commit
names it" (the row commit's committer); when neither names one, "writer
unknown: tampered". --output-json says the same in "writer_source"
(spine_entry, commit or "").`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			task, key := args[0], args[1]
			if err := artifact.ValidateKey(key); err != nil {
				return err
			}
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			rep, err := s.Artifacts(task)
			if errors.Is(err, bernstein.ErrUnknownTask) {
				return exitCode(1, err)
			}
			if err != nil {
				return err
			}
			sel := bernstein.ShowSelection{Key: key, Strict: strict}
			if cmd.Flags().Changed("version") {
				sel.Version = &version
			}
			doc, err := bernstein.NewArtifactShowDoc(rep, sel)
			if errors.Is(err, bernstein.ErrUnknownArtifact) {
				return exitCode(1, err)
			}
			if doc != nil {
				for _, p := range doc.PassedOver {
					fmt.Fprintf(io.Err, "note: %s v%d is newer but unverifiable here (%s); 'bernstein artifact show %s %s --version %d' shows it\n",
						p.Key, p.Version, p.Reason, task, key, p.Version)
				}
			}
			if err != nil {
				return err
			}
			v, payload, withheld := doc.Shown, doc.Payload, doc.Withheld
			if asJSON {
				if err := printJSON(io, doc); err != nil {
					return err
				}
			} else {
				renderShow(io, task, v, payload, withheld, doc.History)
			}
			if payload == nil {
				what := "withheld"
				if v.State == verify.Tampered {
					what = "tampered"
				}
				return exitCode(2, fmt.Errorf("%s v%d of task %s is %s: %s", v.Key, v.Version, task, what, withheld))
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&version, "version", 0, "show version N instead of the latest")
	cmd.Flags().BoolVar(&strict, "strict", false, "show only a verified version (exit 2 otherwise)")
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print one JSON document")
	return cmd
}

func renderShow(io *IO, task string, v *verify.Version, p *artifact.Payload, withheld string, history []bernstein.ArtifactVersionDoc) {
	w := io.Out
	typ := v.Type
	if v.LinkKind != "" {
		typ += "/" + v.LinkKind
	}
	state := v.State
	if p == nil && state != verify.Tampered {
		// The version checks, but what it is shown from does not (its
		// journal lost rows, or it is not verified under --strict): the
		// headline must not read as a verdict on what follows.
		state = "withheld (the version itself is " + state + ")"
	}
	fmt.Fprintf(w, "%s v%d (%s) of task %s: %s\n", v.Key, v.Version, typ, task, state)
	if v.Reason != "" {
		fmt.Fprintf(w, "reason:  %s\n", v.Reason)
	}
	fmt.Fprintf(w, "posted:  by %s at journal index %d (%s)\n", dash(v.Actor), v.JournalIndex, writerOf(v.Writer, v.WriterSource, v.State))
	fmt.Fprintf(w, "content: %s\n", v.ContentHash)
	fmt.Fprintf(w, "spine:   %s\n", v.SpineEntryHash)
	if v.PrevVersionHash != "" {
		fmt.Fprintf(w, "prev:    %s\n", v.PrevVersionHash)
	}
	fmt.Fprintf(w, "git:     git show %s:%s\n", v.Commit, bernstein.ArtifactPath(v.Key, v.Version))
	fmt.Fprintln(w)
	switch {
	case p == nil:
		fmt.Fprintf(w, "(content withheld: %s)\n", withheld)
	case p.Type == artifact.TypeReport:
		fmt.Fprint(w, p.Body)
		if len(p.Body) > 0 && p.Body[len(p.Body)-1] != '\n' {
			fmt.Fprintln(w)
		}
	case p.Type == artifact.TypeTable:
		if io.IsTTY {
			t := newTable(io, p.Columns...)
			for _, r := range p.Rows {
				t.row(r...)
			}
			t.render()
		} else {
			cw := csv.NewWriter(w)
			cw.Write(p.Columns)
			cw.WriteAll(p.Rows)
		}
	case p.Type == artifact.TypeLink:
		fmt.Fprintf(w, "%s (%s)\n", p.URL, p.LinkKind)
	}
	if len(history) > 1 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "history (oldest first):")
		for _, h := range history {
			fmt.Fprintf(w, "  v%d  %-12s index %-5d %s  by %s (%s)\n", h.Version, h.State, h.JournalIndex, shortHash(h.ContentHash), dash(h.Actor), writerOf(h.Writer, h.WriterSource, h.State))
		}
	}
}

// writerOf names the writer whose spine entry sealed a version. A tampered
// version's writer is unproven: it is labelled with where it was read (the
// spine entry the row names, or, when the check stopped before that, the
// row's commit), and is unknown when neither names one, which is said
// rather than printed as a dash.
func writerOf(writer, source, state string) string {
	switch {
	case writer != "" && state == verify.Tampered:
		return "writer " + writer + " as its " + sourceWord(source) + " names it, unproven: tampered"
	case writer != "":
		return "writer " + writer
	case state != "":
		return "writer unknown: " + state
	}
	return "writer unknown"
}

// sourceWord is where a version's writer was read, in words.
func sourceWord(source string) string {
	if source == verify.WriterFromSpineEntry {
		return "spine entry"
	}
	return "commit"
}

func shortHash(h string) string {
	if len(h) > 19 {
		return h[:19]
	}
	return h
}
