package record

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// Records are encoded and decoded on every read and write, so the common
// shapes (structs of strings, integers, booleans, nested structs, slices and
// raw canonical JSON) take a direct path: one reflection walk to write the
// canonical bytes, one scan to validate them, and an exact decoder that
// accepts only the member names of the target type, each exactly once.
// Anything else falls back to the general path above.

var errSlow = errors.New("needs the general path")

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

var (
	rawType       = reflect.TypeOf(json.RawMessage(nil))
	numberType    = reflect.TypeOf(json.Number(""))
	marshalerType = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textType      = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

// field is one JSON member of a struct type.
type field struct {
	name      string
	index     []int
	omitEmpty bool
}

var fieldCache sync.Map // reflect.Type -> []field (sorted by name) or error

// fieldsOf lists t's JSON members in canonical order, flattening embedded
// structs without tags, as encoding/json does for these simple shapes.
func fieldsOf(t reflect.Type) ([]field, error) {
	if v, ok := fieldCache.Load(t); ok {
		if err, bad := v.(error); bad {
			return nil, err
		}
		return v.([]field), nil
	}
	var fs []field
	var walk func(t reflect.Type, index []int) error
	walk = func(t reflect.Type, index []int) error {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(append([]int(nil), index...), i)
			if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
				if err := walk(sf.Type, idx); err != nil {
					return err
				}
				continue
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" || strings.Contains(opts, "string") {
				return errSlow
			}
			fs = append(fs, field{name: name, index: idx, omitEmpty: strings.Contains(opts, "omitempty")})
		}
		return nil
	}
	err := walk(t, nil)
	if err == nil {
		sort.Slice(fs, func(i, j int) bool { return lessUTF16(fs[i].name, fs[j].name) })
		for i := 1; i < len(fs); i++ {
			if fs[i].name == fs[i-1].name {
				err = errSlow // encoding/json's conflict rules apply
			}
		}
	}
	if err != nil {
		fieldCache.Store(t, err)
		return nil, err
	}
	fieldCache.Store(t, fs)
	return fs, nil
}

// encodeFast writes the canonical form of v, or returns errSlow.
func encodeFast(buf *bytes.Buffer, v reflect.Value) error {
	if !v.IsValid() {
		buf.WriteString("null")
		return nil
	}
	t := v.Type()
	if t == rawType {
		raw := v.Bytes()
		if raw == nil {
			buf.WriteString("null")
			return nil
		}
		if validateCanonical(raw) != nil {
			return errSlow
		}
		buf.Write(raw)
		return nil
	}
	if t == numberType {
		s, err := canonicalNumber(v.String())
		if err != nil {
			return err
		}
		buf.WriteString(s)
		return nil
	}
	if t.Implements(marshalerType) || t.Implements(textType) ||
		(t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(marshalerType)) {
		return errSlow
	}
	switch t.Kind() {
	case reflect.String:
		encodeString(buf, v.String())
	case reflect.Bool:
		if v.Bool() {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := v.Int()
		if n > 1<<53 || n < -(1<<53) {
			buf.WriteString(FormatNumber(float64(n)))
		} else {
			buf.WriteString(strconv.FormatInt(n, 10))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n := v.Uint()
		if n > 1<<53 {
			buf.WriteString(FormatNumber(float64(n)))
		} else {
			buf.WriteString(strconv.FormatUint(n, 10))
		}
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("number %v is not representable", f)
		}
		buf.WriteString(FormatNumber(f))
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			buf.WriteString("null")
			return nil
		}
		return encodeFast(buf, v.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return errSlow // base64, as encoding/json writes []byte
		}
		if v.IsNil() {
			buf.WriteString("null")
			return nil
		}
		fallthrough
	case reflect.Array:
		buf.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := encodeFast(buf, v.Index(i)); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return errSlow
		}
		if v.IsNil() {
			buf.WriteString("null")
			return nil
		}
		keys := v.MapKeys()
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.String()
		}
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		sort.Slice(order, func(i, j int) bool { return lessUTF16(names[order[i]], names[order[j]]) })
		buf.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				buf.WriteByte(',')
			}
			encodeString(buf, names[i])
			buf.WriteByte(':')
			if err := encodeFast(buf, v.MapIndex(keys[i])); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case reflect.Struct:
		fs, err := fieldsOf(t)
		if err != nil {
			return err
		}
		buf.WriteByte('{')
		first := true
		for _, f := range fs {
			fv := v.FieldByIndex(f.index)
			if f.omitEmpty && isEmpty(fv) {
				continue
			}
			if !first {
				buf.WriteByte(',')
			}
			first = false
			encodeString(buf, f.name)
			buf.WriteByte(':')
			if err := encodeFast(buf, fv); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return errSlow
	}
	return nil
}

func hasField(fs []field, name string) bool {
	for _, f := range fs {
		if f.name == name {
			return true
		}
	}
	return false
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// validateCanonical reports whether b is exactly one JSON value in RFC 8785
// form: no white space, members in order without repeats, minimal string
// escapes, valid UTF-8 without lone surrogates, and canonical numbers.
func validateCanonical(b []byte) error {
	s := scanner{b: b}
	if err := s.value(0); err != nil {
		return err
	}
	if s.i != len(b) {
		return s.errf("trailing data")
	}
	return nil
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) errf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", ErrNotCanonical, s.i, fmt.Sprintf(format, args...))
}

func (s *scanner) value(depth int) error {
	if depth > maxDepth {
		return s.errf("nested too deeply")
	}
	if s.i >= len(s.b) {
		return s.errf("unexpected end")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.i++
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			return nil
		}
		var prev string
		for n := 0; ; n++ {
			start := s.i
			if err := s.str(); err != nil {
				return err
			}
			key, err := memberName(s.b[start:s.i])
			if err != nil {
				return s.errf("%v", err)
			}
			if n > 0 && !lessUTF16(prev, key) {
				return s.errf("member %q out of order or repeated", key)
			}
			prev = key
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return s.errf("want ':'")
			}
			s.i++
			if err := s.value(depth + 1); err != nil {
				return err
			}
			if s.i >= len(s.b) {
				return s.errf("unexpected end")
			}
			if s.b[s.i] == '}' {
				s.i++
				return nil
			}
			if s.b[s.i] != ',' {
				return s.errf("want ',' or '}'")
			}
			s.i++
		}
	case c == '[':
		s.i++
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return nil
		}
		for {
			if err := s.value(depth + 1); err != nil {
				return err
			}
			if s.i >= len(s.b) {
				return s.errf("unexpected end")
			}
			if s.b[s.i] == ']' {
				s.i++
				return nil
			}
			if s.b[s.i] != ',' {
				return s.errf("want ',' or ']'")
			}
			s.i++
		}
	case c == '"':
		return s.str()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.num()
	}
	return s.errf("unexpected %q", s.b[s.i])
}

func (s *scanner) lit(w string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		return s.errf("bad literal")
	}
	s.i += len(w)
	return nil
}

// str checks a string in canonical form: only '"', '\\' and C0 controls are
// escaped, with the short forms where JSON has them.
func (s *scanner) str() error {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.errf("want a string")
	}
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return nil
		case c < 0x20:
			return s.errf("raw control character in string")
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return s.errf("unexpected end")
			}
			switch e := s.b[s.i+1]; e {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				r := hex4(s.b, s.i+2)
				if r < 0 || r >= 0x20 || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t' ||
					!bytes.Equal(s.b[s.i+2:s.i+6], []byte(fmt.Sprintf("%04x", r))) {
					return s.errf("escape that canonical form does not use")
				}
				s.i += 6
			default:
				return s.errf("escape that canonical form does not use")
			}
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n <= 1 {
				return s.errf("invalid UTF-8")
			}
			s.i += n
		}
	}
	return s.errf("unterminated string")
}

func (s *scanner) num() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits {
		return s.errf("bad number")
	}
	simple := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			simple = false
			s.i++
			continue
		}
		break
	}
	lit := string(s.b[start:s.i])
	if simple && !(s.b[digits] == '0' && s.i-digits > 1) && lit != "-0" && s.i-digits <= 16 {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil && n <= 1<<53 && n >= -(1<<53) {
			return nil
		}
	}
	c, err := canonicalNumber(lit)
	if err != nil || c != lit {
		return s.errf("number %s is not in canonical form", lit)
	}
	return nil
}

// unquote decodes a JSON string already validated by the scanner.
func unquote(q []byte) (string, error) {
	body := q[1 : len(q)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), nil
	}
	var out string
	if err := json.Unmarshal(q, &out); err != nil {
		return "", err
	}
	return out, nil
}

// member is one name/value pair of a canonical object.
type member struct {
	name string
	raw  []byte
}

// members splits a canonical object into its members, in order, checking as
// it goes that the whole of b is one object in canonical form (so a record
// is validated and split in a single pass).
func members(b []byte) ([]member, error) { return membersInto(b, nil) }

// membersInto is members appending to out, which callers give a backing
// array on their stack. Member names without escapes share b's bytes: they
// live only as long as the decoding that asked for them.
func membersInto(b []byte, out []member) ([]member, error) {
	s := scanner{b: b}
	if len(b) < 2 || b[0] != '{' {
		return nil, s.errf("want an object")
	}
	s.i = 1
	if b[1] == '}' {
		if len(b) != 2 {
			return nil, s.errf("trailing data")
		}
		return out, nil
	}
	for {
		start := s.i
		if err := s.str(); err != nil {
			return nil, err
		}
		name, err := memberName(b[start:s.i])
		if err != nil {
			return nil, s.errf("%v", err)
		}
		if len(out) > 0 && !lessUTF16(out[len(out)-1].name, name) {
			return nil, s.errf("member %q out of order or repeated", name)
		}
		if s.i >= len(b) || b[s.i] != ':' {
			return nil, s.errf("want ':'")
		}
		s.i++
		vs := s.i
		if err := s.value(1); err != nil {
			return nil, err
		}
		out = append(out, member{name, b[vs:s.i]})
		if s.i >= len(b) {
			return nil, s.errf("unexpected end")
		}
		switch b[s.i] {
		case '}':
			if s.i+1 != len(b) {
				s.i++
				return nil, s.errf("trailing data")
			}
			return out, nil
		case ',':
			s.i++
		default:
			return nil, s.errf("want ',' or '}'")
		}
	}
}

// memberName is unquote for a member name: without escapes, the name is
// the bytes between the quotes, not copied.
func memberName(q []byte) (string, error) {
	body := q[1 : len(q)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		if len(body) == 0 {
			return "", nil
		}
		return unsafe.String(&body[0], len(body)), nil
	}
	return unquote(q)
}

// decodeExact decodes canonical bytes b into dst (a pointer). Objects must
// carry exactly the members of the target struct (those tagged omitempty may
// be absent), so there is one byte form per value and nothing is ignored.
func decodeExact(b []byte, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return errors.New("decode target must be a non-nil pointer")
	}
	return decodeValue(b, v.Elem())
}

func decodeValue(b []byte, v reflect.Value) error {
	t := v.Type()
	switch {
	case t == rawType:
		v.SetBytes(append([]byte(nil), b...))
		return nil
	case t.Kind() == reflect.Struct:
		if _, err := fieldsOf(t); err != nil {
			return json.Unmarshal(b, v.Addr().Interface())
		}
		var buf [16]member
		ms, err := membersInto(b, buf[:0])
		if err != nil {
			return err
		}
		return decodeStruct(b, ms, v)
	case t.Kind() == reflect.String:
		if len(b) == 0 || b[0] != '"' {
			return fmt.Errorf("want a string, have %.20s", b)
		}
		s, err := unquote(b)
		if err != nil {
			return err
		}
		v.SetString(s)
		return nil
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil || v.OverflowInt(n) {
			return fmt.Errorf("want an integer, have %.20s", b)
		}
		v.SetInt(n)
		return nil
	case t.Kind() == reflect.Bool:
		switch string(b) {
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			return fmt.Errorf("want a boolean, have %.20s", b)
		}
		return nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8:
		if string(b) == "null" {
			v.Set(reflect.Zero(t))
			return nil
		}
		if len(b) < 2 || b[0] != '[' {
			return fmt.Errorf("want an array, have %.20s", b)
		}
		var elems [][]byte
		s := scanner{b: b, i: 1}
		for b[s.i] != ']' {
			start := s.i
			if err := s.value(1); err != nil {
				return err
			}
			elems = append(elems, b[start:s.i])
			if b[s.i] == ',' {
				s.i++
			}
		}
		out := reflect.MakeSlice(t, len(elems), len(elems))
		for i, e := range elems {
			if err := decodeValue(e, out.Index(i)); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		v.Set(out)
		return nil
	}
	return json.Unmarshal(b, v.Addr().Interface())
}

// decodeStruct decodes the members ms of the canonical object b into the
// struct v: exactly the members of its type, in order, those tagged
// omitempty optional.
func decodeStruct(b []byte, ms []member, v reflect.Value) error {
	fs, err := fieldsOf(v.Type())
	if err != nil {
		return json.Unmarshal(b, v.Addr().Interface())
	}
	j := 0
	for _, m := range ms {
		if !hasField(fs, m.name) {
			return fmt.Errorf("unknown field %q", m.name)
		}
		for j < len(fs) && fs[j].name != m.name {
			if !fs[j].omitEmpty {
				return fmt.Errorf("missing member %q", fs[j].name)
			}
			j++
		}
		if j == len(fs) {
			return fmt.Errorf("unknown member %q", m.name)
		}
		if err := decodeValue(m.raw, v.FieldByIndex(fs[j].index)); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		j++
	}
	for ; j < len(fs); j++ {
		if !fs[j].omitEmpty {
			return fmt.Errorf("missing member %q", fs[j].name)
		}
	}
	return nil
}
