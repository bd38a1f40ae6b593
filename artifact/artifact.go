// Package artifact owns artifact payloads: the three types, their canonical
// bytes (what is stored as the version's blob), and the limits every payload
// and key must respect. It does no I/O.
package artifact

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bernstein/bernstein/internal/ident"
	"github.com/bernstein/bernstein/record"
)

// Artifact types.
const (
	TypeReport = "report"
	TypeTable  = "table"
	TypeLink   = "link"
)

// Link kinds.
const (
	LinkPreview   = "preview"
	LinkDashboard = "dashboard"
	LinkDocument  = "document"
)

// Types and LinkKinds list the accepted values.
var (
	Types     = []string{TypeReport, TypeTable, TypeLink}
	LinkKinds = []string{LinkPreview, LinkDashboard, LinkDocument}
)

// Limits on input (docs/format.md, Limits).
const (
	MaxPayloadBytes = 1 << 20
	MaxColumns      = 64
	MaxRows         = 4096
	MaxCellChars    = 4096
	MaxURLChars     = 4096
	MaxKeyBytes     = 128
)

// InputError is bad input: it names the field and what is wrong with it.
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

func bad(field, format string, args ...any) error {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidateKey checks an artifact key.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return bad("key", "is empty")
	case len(key) > MaxKeyBytes:
		return bad("key", "is %d bytes long (at most %d)", len(key), MaxKeyBytes)
	case !ident.Match(key, MaxKeyBytes, "_.-", false):
		return bad("key", "%q is invalid: use letters, digits and _ . - and start with a letter or digit", quote(key))
	}
	return nil
}

func quote(s string) string {
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

// Payload is one artifact version's content. Exactly the fields of its type
// are set; its canonical bytes are what the version's blob holds.
type Payload struct {
	Type     string     `json:"type"`
	Body     string     `json:"body,omitempty"`
	Columns  []string   `json:"columns,omitempty"`
	Rows     [][]string `json:"rows,omitempty"`
	URL      string     `json:"url,omitempty"`
	LinkKind string     `json:"link_kind,omitempty"`
}

// canonical forms per type: rows are always present for a table, even empty.
type reportPayload struct {
	V    int    `json:"v"`
	Type string `json:"type"`
	Body string `json:"body"`
}

type tablePayload struct {
	V       int        `json:"v"`
	Type    string     `json:"type"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

type linkPayload struct {
	V        int    `json:"v"`
	Type     string `json:"type"`
	URL      string `json:"url"`
	LinkKind string `json:"link_kind"`
}

// Canonical validates p and returns its canonical bytes.
func (p Payload) Canonical() ([]byte, error) {
	return p.canonical(true)
}

// canonical is Canonical; input says whether p is new input (which must
// also pass the input-only rules) rather than a payload read back from a
// repository.
func (p Payload) canonical(input bool) ([]byte, error) {
	if err := p.validate(input); err != nil {
		return nil, err
	}
	var v any
	switch p.Type {
	case TypeReport:
		v = reportPayload{record.Version, p.Type, p.Body}
	case TypeTable:
		rows := p.Rows
		if rows == nil {
			rows = [][]string{}
		}
		v = tablePayload{record.Version, p.Type, p.Columns, rows}
	case TypeLink:
		v = linkPayload{record.Version, p.Type, p.URL, p.LinkKind}
	}
	b, err := record.Canonical(v)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxPayloadBytes {
		return nil, bad("payload", "is %d bytes in canonical form (at most %d)", len(b), MaxPayloadBytes)
	}
	return b, nil
}

// Validate checks p, as new input, against the limits without encoding it.
func (p Payload) Validate() error {
	return p.validate(true)
}

// validate checks p. The input-only rules (a link URL carries no
// credentials) apply to new input alone: a payload a repository already
// holds stays readable and verifiable under the rules it was written under.
func (p Payload) validate(input bool) error {
	switch p.Type {
	case TypeReport:
		if p.Columns != nil || p.Rows != nil || p.URL != "" || p.LinkKind != "" {
			return bad("artifact_type", "report takes only body")
		}
		if strings.TrimSpace(p.Body) == "" {
			return bad("body", "is empty: a report needs a markdown body")
		}
		if len(p.Body) > MaxPayloadBytes {
			return bad("body", "is %d bytes (at most %d)", len(p.Body), MaxPayloadBytes)
		}
		return checkText("body", p.Body)
	case TypeTable:
		if p.Body != "" || p.URL != "" || p.LinkKind != "" {
			return bad("artifact_type", "table takes only columns and rows")
		}
		return validateTable(p.Columns, p.Rows)
	case TypeLink:
		if p.Body != "" || p.Columns != nil || p.Rows != nil {
			return bad("artifact_type", "link takes only url and link_kind")
		}
		return validateLink(p.URL, p.LinkKind, input)
	case "":
		return bad("artifact_type", "is missing: want one of %s", strings.Join(Types, ", "))
	}
	return bad("artifact_type", "%q is not one of %s", quote(p.Type), strings.Join(Types, ", "))
}

func validateTable(cols []string, rows [][]string) error {
	if len(cols) == 0 {
		return bad("columns", "a table needs at least one column")
	}
	if len(cols) > MaxColumns {
		return bad("columns", "has %d columns (at most %d)", len(cols), MaxColumns)
	}
	seen := map[string]bool{}
	for i, c := range cols {
		f := fmt.Sprintf("columns[%d]", i)
		if strings.TrimSpace(c) == "" {
			return bad(f, "is empty")
		}
		if seen[c] {
			return bad(f, "%q repeats an earlier column", quote(c))
		}
		seen[c] = true
		if err := checkCell(f, c); err != nil {
			return err
		}
	}
	if len(rows) > MaxRows {
		return bad("rows", "has %d rows (at most %d)", len(rows), MaxRows)
	}
	for i, r := range rows {
		if len(r) != len(cols) {
			return bad(fmt.Sprintf("rows[%d]", i), "has %d cells, the table has %d columns", len(r), len(cols))
		}
		for j, c := range r {
			if err := checkCell(fmt.Sprintf("rows[%d][%d]", i, j), c); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkCell(field, s string) error {
	if n := utf8.RuneCountInString(s); n > MaxCellChars {
		return bad(field, "is %d characters (at most %d)", n, MaxCellChars)
	}
	return checkText(field, s)
}

func validateLink(raw, kind string, input bool) error {
	switch kind {
	case LinkPreview, LinkDashboard, LinkDocument:
	case "":
		return bad("link_kind", "is missing: want one of %s", strings.Join(LinkKinds, ", "))
	default:
		return bad("link_kind", "%q is not one of %s", quote(kind), strings.Join(LinkKinds, ", "))
	}
	if raw == "" {
		return bad("url", "is empty")
	}
	if n := utf8.RuneCountInString(raw); n > MaxURLChars {
		return bad("url", "is %d characters (at most %d)", n, MaxURLChars)
	}
	if !utf8.ValidString(raw) {
		return bad("url", "is not valid UTF-8")
	}
	for _, r := range raw {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return bad("url", "contains a control or space character (%U)", r)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, credentials and all: name only
		// what is wrong with it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return bad("url", "does not parse: %v", err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		if u.Scheme == "" {
			return bad("url", "has no scheme: want http or https")
		}
		return bad("url", "scheme %q is not allowed: want http or https", quote(u.Scheme))
	}
	if u.Hostname() == "" {
		return bad("url", "has no host")
	}
	if input && u.User != nil {
		// Artifacts are pushed with refs/bernstein/* to every remote and
		// cannot be removed from history: a password here would be
		// published for good. The error does not repeat it.
		return bad("url", "holds a user name or password (user:password@host): links are pushed to every remote and kept in history, so they must not carry credentials")
	}
	return nil
}

// checkText refuses invalid UTF-8 and control characters other than tab,
// newline and carriage return.
func checkText(field, s string) error {
	if !utf8.ValidString(s) {
		return bad(field, "is not valid UTF-8")
	}
	for i, r := range s {
		if r == '\t' || r == '\n' || r == '\r' {
			continue
		}
		if unicode.Is(unicode.Cc, r) {
			return bad(field, "contains control character %U at byte %d", r, i)
		}
	}
	return nil
}

// Parse decodes canonical payload bytes (as stored in a version's blob).
func Parse(b []byte) (Payload, error) {
	if p, ok := parseExact(b); ok {
		return p, nil
	}
	return parseGeneral(b)
}

func parseGeneral(b []byte) (Payload, error) {
	if err := record.CheckCanonical(b); err != nil {
		return Payload{}, err
	}
	var head struct {
		V    int    `json:"v"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return Payload{}, err
	}
	if head.V != record.Version {
		return Payload{}, fmt.Errorf("payload: unsupported version %d", head.V)
	}
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var err error
	switch head.Type {
	case TypeReport:
		var r reportPayload
		err = dec.Decode(&r)
		p = Payload{Type: r.Type, Body: r.Body}
	case TypeTable:
		var t tablePayload
		err = dec.Decode(&t)
		p = Payload{Type: t.Type, Columns: t.Columns, Rows: t.Rows}
	case TypeLink:
		var l linkPayload
		err = dec.Decode(&l)
		p = Payload{Type: l.Type, URL: l.URL, LinkKind: l.LinkKind}
	default:
		return Payload{}, fmt.Errorf("payload: unknown type %q", head.Type)
	}
	if err != nil {
		return Payload{}, fmt.Errorf("payload: %w", err)
	}
	// encoding/json matches keys case-insensitively and tolerates missing
	// fields and nulls: only bytes that Canonical gives back are a payload.
	c, err := p.canonical(false)
	if err != nil {
		return Payload{}, fmt.Errorf("payload: %w", err)
	}
	if !bytes.Equal(c, b) {
		return Payload{}, errors.New("payload: fields differ from the payload format (missing, misspelt, repeated or null)")
	}
	return p, nil
}

// parseExact is Parse's direct path for a payload that is exactly the
// canonical form of one payload type (what every post writes): decoded
// member by member in the one order canonical form allows, then held to
// the same last check as Parse, that its canonical bytes are b. Whatever it
// does not take goes the general way, which gives the reason.
func parseExact(b []byte) (Payload, bool) {
	var p Payload
	var v int
	switch {
	case bytes.HasPrefix(b, []byte(`{"body":`)):
		var r reportPayload
		if record.DecodeExact(b, &r) != nil || r.Type != TypeReport {
			return Payload{}, false
		}
		v, p = r.V, Payload{Type: r.Type, Body: r.Body}
	case bytes.HasPrefix(b, []byte(`{"columns":`)):
		var t tablePayload
		if record.DecodeExact(b, &t) != nil || t.Type != TypeTable {
			return Payload{}, false
		}
		v, p = t.V, Payload{Type: t.Type, Columns: t.Columns, Rows: t.Rows}
	case bytes.HasPrefix(b, []byte(`{"link_kind":`)):
		var l linkPayload
		if record.DecodeExact(b, &l) != nil || l.Type != TypeLink {
			return Payload{}, false
		}
		v, p = l.V, Payload{Type: l.Type, URL: l.URL, LinkKind: l.LinkKind}
	default:
		return Payload{}, false
	}
	if v != record.Version {
		return Payload{}, false
	}
	c, err := p.canonical(false)
	if err != nil || !bytes.Equal(c, b) {
		return Payload{}, false
	}
	return p, true
}

// utf8BOM is the byte-order mark some editors and spreadsheets write at the
// start of a UTF-8 file. It is not part of the first column's name.
const utf8BOM = "\ufeff"

// TableFromCSV reads a table whose first record is the column names. A
// leading UTF-8 byte-order mark is dropped.
func TableFromCSV(r io.Reader) (Payload, error) {
	br := bufio.NewReader(r)
	if b, err := br.Peek(len(utf8BOM)); err == nil && string(b) == utf8BOM {
		br.Discard(len(utf8BOM))
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil {
		return Payload{}, bad("csv", "%v", err)
	}
	if len(recs) == 0 {
		return Payload{}, bad("csv", "is empty: the first line must name the columns")
	}
	rows := recs[1:]
	if rows == nil {
		rows = [][]string{}
	}
	return Payload{Type: TypeTable, Columns: recs[0], Rows: rows}, nil
}

// ParseCSVRecord parses one CSV line (a --row or --column value). A leading
// UTF-8 byte-order mark is dropped, as TableFromCSV drops it.
func ParseCSVRecord(field, line string) ([]string, error) {
	cr := csv.NewReader(strings.NewReader(strings.TrimPrefix(line, utf8BOM)))
	cr.FieldsPerRecord = -1
	rec, err := cr.Read()
	if err == io.EOF {
		return []string{""}, nil
	}
	if err != nil {
		return nil, bad(field, "%v", err)
	}
	if _, err := cr.Read(); err != io.EOF {
		return nil, bad(field, "holds more than one line")
	}
	return rec, nil
}
