// Package record owns the canonical byte form of every bernstein record
// (RFC 8785 JSON), the sha256 identities computed over it, and the record types
// themselves: journal and ledger rows, spine entries, audit entries.
package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNotCanonical reports bytes that parse as JSON but are not in RFC 8785 form.
var ErrNotCanonical = errors.New("not canonical JSON")

// Canonical returns the RFC 8785 bytes of v. v may be any value encoding/json
// can marshal; the result has sorted keys, no insignificant white space and
// the shortest number form.
func Canonical(v any) ([]byte, error) {
	buf := encodeBufs.Get().(*bytes.Buffer)
	buf.Reset()
	err := encodeFast(buf, reflect.ValueOf(v))
	var out []byte
	if err == nil {
		out = bytes.Clone(buf.Bytes()) // one allocation of the exact size
	}
	if buf.Cap() <= 64<<10 {
		encodeBufs.Put(buf)
	}
	if err == nil {
		return out, nil
	}
	if err != errSlow {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return CanonicalizeJSON(raw)
}

// encodeBufs are the buffers Canonical encodes into before copying out.
var encodeBufs = sync.Pool{New: func() any { b := new(bytes.Buffer); b.Grow(1024); return b }}

// MustCanonical is Canonical for values whose encoding cannot fail (records
// built by this module from strings and integers).
func MustCanonical(v any) []byte {
	b, err := Canonical(v)
	if err != nil {
		panic(fmt.Sprintf("record: canonical form of %T: %v", v, err))
	}
	return b
}

// CanonicalizeJSON re-encodes one JSON document in RFC 8785 form.
func CanonicalizeJSON(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("invalid UTF-8 in JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	// dec.More() misses a stray ']' or '}': look at the rest directly.
	if len(bytes.Trim(raw[dec.InputOffset():], " \t\r\n")) != 0 {
		return nil, errors.New("trailing data after JSON value")
	}
	// encoding/json silently keeps the last of duplicate member names and
	// turns lone surrogate escapes into U+FFFD; RFC 8785 (I-JSON) requires
	// an error for both.
	members, lone := scanStrings(raw)
	if lone {
		return nil, errors.New("lone surrogate escape in JSON string")
	}
	if countMembers(v) != members {
		return nil, errors.New("duplicate member name in JSON object")
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := encodeValue(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// scanStrings walks the syntactically valid JSON text raw and returns the
// number of object members (each has exactly one ':' outside strings) and
// whether a string escapes a UTF-16 surrogate that is not half of a pair.
func scanStrings(raw []byte) (members int, lone bool) {
	inStr := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inStr {
			switch c {
			case '"':
				inStr = true
			case ':':
				members++
			}
			continue
		}
		switch c {
		case '"':
			inStr = false
		case '\\':
			if i+1 >= len(raw) || raw[i+1] != 'u' {
				i++ // skip the escaped character
				continue
			}
			r := hex4(raw, i+2)
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				lone = true
			case r >= 0xd800 && r <= 0xdbff:
				if i+7 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					lone = true
				} else if lo := hex4(raw, i+8); lo < 0xdc00 || lo > 0xdfff {
					lone = true
				} else {
					i += 6 // the low half
				}
			}
			i += 5
		}
	}
	return members, lone
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

// countMembers is the number of object members in a decoded value.
func countMembers(v any) int {
	n := 0
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			n += countMembers(e)
		}
	case map[string]any:
		n = len(x)
		for _, e := range x {
			n += countMembers(e)
		}
	}
	return n
}

// DecodeExact decodes canonical bytes b into dst (a pointer to a struct of
// strings, integers, booleans, slices and nested such structs): b must be
// in canonical form and carry exactly the members of dst's type, those
// tagged omitempty optional, so there is one byte form per value.
func DecodeExact(b []byte, dst any) error { return decodeExact(b, dst) }

// CheckCanonical returns nil when b is exactly its own canonical form.
func CheckCanonical(b []byte) error {
	if validateCanonical(b) == nil {
		return nil
	}
	c, err := CanonicalizeJSON(b)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	if !bytes.Equal(c, b) {
		return ErrNotCanonical
	}
	return nil
}

func encodeValue(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		if x {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case string:
		encodeString(buf, x)
	case json.Number:
		s, err := canonicalNumber(string(x))
		if err != nil {
			return err
		}
		buf.WriteString(s)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := encodeValue(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// RFC 8785 orders keys by their UTF-16 code units.
		sort.Slice(keys, func(i, j int) bool { return lessUTF16(keys[i], keys[j]) })
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			encodeString(buf, k)
			buf.WriteByte(':')
			if err := encodeValue(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("unsupported JSON value %T", v)
	}
	return nil
}

func lessUTF16(a, b string) bool {
	if isASCII(a) && isASCII(b) {
		return a < b
	}
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// encodeString writes s as RFC 8785 prescribes: only '"', '\\' and C0
// controls are escaped, with the short forms where JSON has them.
func encodeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf.WriteString(s[start:i])
		switch c {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		default:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[c>>4])
			buf.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
}

// canonicalNumber formats a JSON number the way ECMAScript's Number.toString
// does, which is what RFC 8785 requires.
func canonicalNumber(lit string) (string, error) {
	// Integers inside the exactly representable range are the common case.
	if !strings.ContainsAny(lit, ".eE") {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil && n <= 1<<53 && n >= -(1<<53) {
			return strconv.FormatInt(n, 10), nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("number %s is not representable", lit)
	}
	return FormatNumber(f), nil
}

// FormatNumber is ECMAScript Number.prototype.toString for finite f.
func FormatNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	neg := f < 0
	if neg {
		f = -f
	}
	// Shortest round-trip digits and decimal exponent.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expStr)
	n := exp + 1 // position of the decimal point relative to digits
	k := len(digits)
	var out string
	switch {
	case k <= n && n <= 21:
		out = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		out = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		out = "0." + strings.Repeat("0", -n) + digits
	default:
		sign := "+"
		if n-1 < 0 {
			sign = "-"
		}
		ex := n - 1
		if ex < 0 {
			ex = -ex
		}
		if k == 1 {
			out = digits + "e" + sign + strconv.Itoa(ex)
		} else {
			out = digits[:1] + "." + digits[1:] + "e" + sign + strconv.Itoa(ex)
		}
	}
	if neg {
		return "-" + out
	}
	return out
}

// Hash is a content identity written "sha256:<64 lowercase hex>".
type Hash string

// HashPrefix is the algorithm prefix of every Hash.
const HashPrefix = "sha256:"

// Sum returns the Hash of b.
func Sum(b []byte) Hash {
	s := sha256.Sum256(b)
	return Hash(HashPrefix + hex.EncodeToString(s[:]))
}

// HashOf returns the Hash of the canonical bytes of v.
func HashOf(v any) (Hash, []byte, error) {
	b, err := Canonical(v)
	if err != nil {
		return "", nil, err
	}
	return Sum(b), b, nil
}

// Valid reports whether h is well formed.
func (h Hash) Valid() bool {
	s := string(h)
	if !strings.HasPrefix(s, HashPrefix) || len(s) != len(HashPrefix)+64 {
		return false
	}
	for _, c := range s[len(HashPrefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Short is the first 12 hex digits, for display.
func (h Hash) Short() string {
	s := strings.TrimPrefix(string(h), HashPrefix)
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
