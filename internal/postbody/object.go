// Package postbody is the one decoder of a post's JSON: the arguments of
// the MCP tool bernstein_post_artifact, the body of the HTTP API's POST and
// a line of `artifact post --stdin` are each read by it. It reads a JSON
// object strictly (valid UTF-8, no lone surrogate escapes, no member name
// twice: encoding/json would store U+FFFD for the first two and keep the
// last of a repeated name) and names the field at fault in every refusal.
// The advertised schema of a post (MCP's input schema, the OpenAPI
// description's PostArtifact) is built here too, from the same fields.
package postbody

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/bernstein/bernstein/artifact"
)

// MalformedError says that the input is not one JSON object; each surface
// words it for what it calls the input ("request", "arguments", a line).
type MalformedError struct {
	Why string // "unexpected end of JSON input", "it is an array", ...
}

func (e *MalformedError) Error() string { return "not a JSON object: " + e.Why }

func bad(field, format string, args ...any) error {
	return &artifact.InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Object is one JSON object, its members not yet decoded.
type Object struct {
	members map[string]json.RawMessage
}

// ReadObject reads raw as one JSON object. It refuses (MalformedError) what
// is not exactly one JSON text, a value other than an object and a member
// name that is not valid UTF-8 or holds a lone surrogate escape; and
// (artifact.InputError naming the member) a member name given twice, as
// docs/format.md refuses it in records. Member values are checked when
// they are read.
func ReadObject(raw []byte) (*Object, error) {
	raw = bytes.TrimSpace(raw)
	if !json.Valid(raw) {
		if len(raw) == 0 {
			return nil, &MalformedError{"it is empty"}
		}
		var v json.RawMessage
		if json.NewDecoder(bytes.NewReader(raw)).Decode(&v) == nil {
			return nil, &MalformedError{"more than one JSON value"}
		}
		return nil, &MalformedError{json.Unmarshal(raw, &v).Error()}
	}
	if raw[0] != '{' {
		return nil, &MalformedError{"it is " + kindOf(raw[0])}
	}
	o := &Object{members: map[string]json.RawMessage{}}
	// raw is valid JSON: walk its members, name then value.
	i := skipSpace(raw, 1)
	for raw[i] != '}' {
		end := stringEnd(raw, i)
		qname := raw[i:end]
		if !utf8.Valid(qname) || loneSurrogate(qname) != "" {
			return nil, &MalformedError{"a member name is not valid UTF-8"}
		}
		var name string
		if err := json.Unmarshal(qname, &name); err != nil {
			return nil, &MalformedError{err.Error()}
		}
		i = skipSpace(raw, end)
		i = skipSpace(raw, i+1) // the ':'
		vend := valueEnd(raw, i)
		if _, dup := o.members[name]; dup {
			return nil, bad(printable(name), "is given twice: a member name may appear once in an object")
		}
		o.members[name] = raw[i:vend]
		i = skipSpace(raw, vend)
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return o, nil
}

// Has reports whether the object has member name.
func (o *Object) Has(name string) bool {
	_, ok := o.members[name]
	return ok
}

// Unknown returns the members not in allowed, sorted.
func (o *Object) Unknown(allowed []string) []string {
	ok := map[string]bool{}
	for _, f := range allowed {
		ok[f] = true
	}
	var out []string
	for f := range o.members {
		if !ok[f] {
			out = append(out, printable(f))
		}
	}
	sort.Strings(out)
	return out
}

// String reads a required string member.
func (o *Object) String(name string) (string, error) {
	raw, ok := o.members[name]
	if !ok {
		return "", bad(name, "is missing")
	}
	return String(name, raw)
}

// Strings reads a required array of strings.
func (o *Object) Strings(name string) ([]string, error) {
	raw, ok := o.members[name]
	if !ok {
		return nil, bad(name, "is missing")
	}
	return Strings(name, raw)
}

// Rows reads a required array of arrays of strings: a table's rows.
func (o *Object) Rows(name string) ([][]string, error) {
	raw, ok := o.members[name]
	if !ok {
		return nil, bad(name, "is missing: a table needs columns and rows ([] for none)")
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, bad(name, "must be an array of rows, each an array of strings")
	}
	if len(items) > artifact.MaxRows {
		return nil, bad(name, "has %d rows (at most %d)", len(items), artifact.MaxRows)
	}
	out := make([][]string, len(items))
	for i, it := range items {
		row, err := Strings(fmt.Sprintf("%s[%d]", name, i), it)
		if err != nil {
			return nil, err
		}
		out[i] = row
	}
	return out, nil
}

// String decodes the JSON value raw (valid JSON) as the string field
// names: not null, not another type, valid UTF-8 without lone surrogates.
func String(field string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", bad(field, "must be a string")
	}
	if !utf8.Valid(raw) {
		return "", bad(field, "is not valid UTF-8")
	}
	if esc := loneSurrogate(raw); esc != "" {
		return "", bad(field, "is not valid UTF-8: %s is half of a UTF-16 surrogate pair", esc)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", bad(field, "must be a string")
	}
	return s, nil
}

// Strings decodes the JSON value raw (valid JSON) as an array of strings.
func Strings(field string, raw json.RawMessage) ([]string, error) {
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, bad(field, "must be an array of strings")
	}
	out := make([]string, len(items))
	for i, it := range items {
		s, err := String(fmt.Sprintf("%s[%d]", field, i), it)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// kindOf names the JSON value that starts with c.
func kindOf(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// printable is a member name fit for an error message: names are valid
// UTF-8 (ReadObject refuses others), but may hold control characters.
func printable(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			q := fmt.Sprintf("%q", s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// stringEnd is the index just past the string that starts at b[i] (valid
// JSON).
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd is the index just past the value that starts at b[i] (valid
// JSON).
func valueEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			i = stringEnd(b, i) - 1
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		case ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i
			}
		}
	}
	return len(b)
}

// loneSurrogate returns the first escape in the JSON string q (quotes
// included) that is half of a UTF-16 surrogate pair without the other half
// ("\ud800"), or "".
func loneSurrogate(q []byte) string {
	for i := 1; i < len(q)-1; i++ {
		if q[i] != '\\' {
			continue
		}
		if q[i+1] != 'u' {
			i++
			continue
		}
		r := hex4(q, i+2)
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return string(q[i : i+6])
		case r >= 0xd800 && r <= 0xdbff:
			if i+11 < len(q) && q[i+6] == '\\' && q[i+7] == 'u' {
				if lo := hex4(q, i+8); lo >= 0xdc00 && lo <= 0xdfff {
					i += 11
					continue
				}
			}
			return string(q[i : i+6])
		}
		i += 5
	}
	return ""
}

// hex4 decodes the four hex digits at b[i:], or returns -1.
func hex4(b []byte, i int) int {
	if i+4 > len(b) {
		return -1
	}
	n := 0
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return n
}
