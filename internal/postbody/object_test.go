package postbody_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/postbody"
)

// TestReadObjectRefuses: what encoding/json would take with a change (the
// last of a repeated name; U+FFFD for a raw invalid byte or a lone
// surrogate) is refused, naming the field where there is one.
func TestReadObjectRefuses(t *testing.T) {
	malformed := []struct{ in, why string }{
		{``, "it is empty"},
		{`{"a":`, "unexpected end of JSON input"},
		{`[1]`, "it is an array"},
		{`"x"`, "it is a string"},
		{`7`, "it is a number"},
		{`null`, "it is null"},
		{`true`, "it is a boolean"},
		{`{}{}`, "more than one JSON value"},
		{`{} x`, "more than one JSON value"},
		{"{\"\xff\":1}", "a member name is not valid UTF-8"},
		{`{"\ud800":1}`, "a member name is not valid UTF-8"},
		{"\xff", "invalid character"},
	}
	for _, c := range malformed {
		_, err := postbody.ReadObject([]byte(c.in))
		var m *postbody.MalformedError
		if !errors.As(err, &m) || !strings.Contains(m.Why, c.why) {
			t.Errorf("%q: %v, want malformed: %s", c.in, err, c.why)
		}
	}
	dups := []struct{ in, field string }{
		{`{"key":"a","key":"b"}`, "key"},
		{`{"key":"a","body":"x","key":"a"}`, "key"},
		{`{"key":"a","\u006bey":"b"}`, "key"},
		{`{ "rows" : [] , "rows":[["x"]] }`, "rows"},
	}
	for _, c := range dups {
		_, err := postbody.ReadObject([]byte(c.in))
		var in *artifact.InputError
		if !errors.As(err, &in) || in.Field != c.field || !strings.Contains(in.Msg, "twice") {
			t.Errorf("%s: %v, want %s given twice", c.in, err, c.field)
		}
	}
}

// TestStringRefuses: a string member that is not valid UTF-8 or escapes a
// lone surrogate is refused by name; a surrogate pair is one character.
func TestStringRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"\"a\xffb\"":            "is not valid UTF-8",
		"\"\xed\xa0\x80\"":      "is not valid UTF-8", // a surrogate in UTF-8's form
		`"a\ud800b"`:            `is not valid UTF-8: \ud800 is half`,
		`"\udc00"`:              `is not valid UTF-8: \udc00 is half`,
		`"\ude00\ud83d"`:        `is not valid UTF-8: \ude00 is half`,
		`"\ud83d\u0041"`:        `is not valid UTF-8: \ud83d is half`,
		`"\ud83d"`:              `is not valid UTF-8: \ud83d is half`,
		`"\\ud800"`:             "",
		`"\ud83d\ude00 \u00e9"`: "",
		`7`:                     "must be a string",
		`null`:                  "must be a string",
	} {
		s, err := postbody.String("body", json.RawMessage(in))
		if want == "" {
			var std string
			json.Unmarshal([]byte(in), &std)
			if err != nil || s != std {
				t.Errorf("%s: %q %v, want %q", in, s, err, std)
			}
			continue
		}
		var ie *artifact.InputError
		if !errors.As(err, &ie) || ie.Field != "body" || !strings.HasPrefix(ie.Msg, want) {
			t.Errorf("%s: %v, want body: %s", in, err, want)
		}
	}
	_, err := postbody.Strings("columns", json.RawMessage(`["a","\ud800"]`))
	var ie *artifact.InputError
	if !errors.As(err, &ie) || ie.Field != "columns[1]" {
		t.Errorf("a lone surrogate in an array: %v", err)
	}
}

// TestReadObjectAsEncodingJSON: on objects encoding/json reads without a
// change (valid UTF-8, no repeated name), ReadObject sees the same members
// with the same values, whatever the white space and nesting.
func TestReadObjectAsEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{}`,
		` { } `,
		`{"a":"x","b":[1,2,{"c":"}"}],"c":{"d":[]},"e":null,"f":true,"g":-1.5e3,"h":"\"\\"}`,
		"{\n\t\"key\" :\t\"k\" ,\r\n \"rows\":[ [ \"1\" , \"]\" ] ]\n}",
		`{"\u00e9":"\ud83d\ude00","":""}`,
	} {
		o, err := postbody.ReadObject([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var std map[string]json.RawMessage
		if err := json.Unmarshal([]byte(in), &std); err != nil {
			t.Fatal(err)
		}
		var names []string
		for k := range std {
			names = append(names, k)
			if !o.Has(k) {
				t.Errorf("%s: no member %q", in, k)
			}
		}
		if u := o.Unknown(names); len(u) != 0 {
			t.Errorf("%s: members encoding/json does not see: %q", in, u)
		}
		for k, v := range std {
			var a, b any
			json.Unmarshal(v, &a)
			if s, err := o.String(k); err == nil {
				b = s
			} else if ss, err := o.Strings(k); err == nil {
				b = toAny(ss)
			} else {
				continue
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s: member %q is %v, encoding/json %v", in, k, b, a)
			}
		}
	}
}

func toAny(ss []string) any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
