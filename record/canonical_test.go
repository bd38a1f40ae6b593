package record

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical form.
var rfc8785NumberSamples = []struct {
	bits uint64
	want string
}{
	{0x0000000000000000, "0"},
	{0x8000000000000000, "0"}, // minus zero
	{0x0000000000000001, "5e-324"},
	{0x8000000000000001, "-5e-324"},
	{0x7fefffffffffffff, "1.7976931348623157e+308"},
	{0xffefffffffffffff, "-1.7976931348623157e+308"},
	{0x4340000000000000, "9007199254740992"},
	{0xc340000000000000, "-9007199254740992"},
	{0x4430000000000000, "295147905179352830000"},
	{0x44b52d02c7e14af5, "9.999999999999997e+22"},
	{0x44b52d02c7e14af6, "1e+23"},
	{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
	{0x444b1ae4d6e2ef4e, "999999999999999700000"},
	{0x444b1ae4d6e2ef4f, "999999999999999900000"},
	{0x444b1ae4d6e2ef50, "1e+21"},
	{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	{0x3eb0c6f7a0b5ed8d, "0.000001"},
	{0x41b3de4355555553, "333333333.3333332"},
	{0x41b3de4355555554, "333333333.33333325"},
	{0x41b3de4355555555, "333333333.3333333"},
	{0x41b3de4355555556, "333333333.3333334"},
	{0x41b3de4355555557, "333333333.33333343"},
	{0xbecbf647612f3696, "-0.0000033333333333333333"},
	{0x43143ff3c1cb0959, "1424953923781206.2"},
}

func TestFormatNumberRFC8785Samples(t *testing.T) {
	for _, s := range rfc8785NumberSamples {
		f := math.Float64frombits(s.bits)
		if got := FormatNumber(f); got != s.want {
			t.Errorf("FormatNumber(%016x = %v) = %q, want %q", s.bits, f, got, s.want)
		}
		// The same value written as a JSON literal canonicalizes the same way.
		lit := strconv.FormatFloat(f, 'g', -1, 64)
		got, err := CanonicalizeJSON([]byte(lit))
		if err != nil || string(got) != s.want {
			t.Errorf("CanonicalizeJSON(%s) = %q, %v; want %q", lit, got, err, s.want)
		}
	}
}

// testdata/numbers.txt holds Number.prototype.toString of thousands of
// doubles as node prints them (regenerate with node testdata/gen_numbers.js).
func TestFormatNumberMatchesECMAScript(t *testing.T) {
	f, err := os.Open("testdata/numbers.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		hexBits, want, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		if err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		x := math.Float64frombits(bits)
		if got := FormatNumber(x); got != want {
			t.Errorf("FormatNumber(%s = %v) = %q, ECMAScript says %q", hexBits, x, got, want)
		}
		// The ECMAScript form is itself canonical and a fixed point.
		if got, err := CanonicalizeJSON([]byte(want)); err != nil || string(got) != want {
			t.Errorf("CanonicalizeJSON(%s) = %q, %v", want, got, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 4000 {
		t.Fatalf("only %d vectors read", n)
	}
}

func TestCanonicalNumberLiterals(t *testing.T) {
	cases := map[string]string{
		"1e30":                          "1e+30",
		"1E30":                          "1e+30",
		"4.50":                          "4.5",
		"0.002":                         "0.002",
		"2e-3":                          "0.002",
		"1e-7":                          "1e-7",
		"0.0000001":                     "1e-7",
		"0.000001":                      "0.000001",
		"1E21":                          "1e+21",
		"1e20":                          "100000000000000000000",
		"100000000000000000000":         "100000000000000000000",
		"-0":                            "0",
		"-0.0":                          "0",
		"0.0":                           "0",
		"0e10":                          "0",
		"333333333.33333329":            "333333333.3333333",
		"9007199254740992":              "9007199254740992",
		"9007199254740993":              "9007199254740992",
		"-9007199254740993":             "-9007199254740992",
		"9007199254740991":              "9007199254740991",
		"123456789012345678901":         "123456789012345680000",
		"1.0":                           "1",
		"10":                            "10",
		"-10.50":                        "-10.5",
		"1e+2":                          "100",
		"12.5e-1":                       "1.25",
		"0.000000000000000000000000001": "1e-27",
		"1e-400":                        "0", // underflows to zero, as in ECMAScript
		"5e-324":                        "5e-324",
		"-1.5e300":                      "-1.5e+300",
		"18446744073709551616":          "18446744073709552000",
		"4.35":                          "4.35",
		"0.1":                           "0.1",
		"123e-20":                       "1.23e-18",
	}
	for in, want := range cases {
		got, err := CanonicalizeJSON([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("CanonicalizeJSON(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestFormatNumberZeroAndSign(t *testing.T) {
	if got := FormatNumber(math.Copysign(0, -1)); got != "0" {
		t.Errorf("FormatNumber(-0) = %q", got)
	}
	if got := FormatNumber(-1e21); got != "-1e+21" {
		t.Errorf("FormatNumber(-1e21) = %q", got)
	}
	if got := FormatNumber(-123.456); got != "-123.456" {
		t.Errorf("FormatNumber(-123.456) = %q", got)
	}
}

func TestCanonicalizeRefusesNonFiniteAndNonJSONNumbers(t *testing.T) {
	for _, in := range []string{
		"NaN", "nan", "Infinity", "-Infinity", "inf", "1e400", "-1e400", "1e309",
		"+1", "01", "-01", ".5", "1.", "0x10", "1e", "1e+", "--1", "1_000",
		"undefined", "True", "FALSE", "Null", "'a'",
		`{"a":NaN}`, `[Infinity]`,
	} {
		if got, err := CanonicalizeJSON([]byte(in)); err == nil {
			t.Errorf("CanonicalizeJSON(%s) = %q, want an error", in, got)
		}
	}
}

func TestCanonicalStringEscaping(t *testing.T) {
	short := map[byte]string{'\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}
	for c := 0; c < 0x20; c++ {
		want, ok := short[byte(c)]
		if !ok {
			want = `\u00` + string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15])
		}
		want = `"` + want + `"`
		// From a Go string through Canonical, and from an (upper-case)
		// JSON escape through CanonicalizeJSON.
		if got := MustCanonical(string(rune(c))); string(got) != want {
			t.Errorf("Canonical(U+%04X) = %s, want %s", c, got, want)
		}
		in := `"\u` + strings.ToUpper(strconv.FormatInt(int64(0x10000+c), 16)[1:]) + `"`
		if got, err := CanonicalizeJSON([]byte(in)); err != nil || string(got) != want {
			t.Errorf("CanonicalizeJSON(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	cases := []struct{ in, want string }{
		{`"\""`, `"\""`},
		{`"\\"`, `"\\"`},
		{`"\/"`, `"/"`},
		{`"/"`, `"/"`},
		{`"\u0041\u00e9"`, `"Aé"`},
		{`"\u007f"`, "\"\x7f\""},               // DEL is not escaped
		{`"\u0080"`, "\"\u0080\""},             // C1 control: not escaped
		{`"\u2028\u2029"`, "\"\u2028\u2029\""}, // unlike encoding/json
		{`"<>&"`, `"<>&"`},                     // no HTML escaping
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\uD83D\uDE00"`, `"😀"`},
		{`"€$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`, `"€$\u000f\nA'B\"\\\\\"/"`},
		{`"\ufeff"`, "\"\ufeff\""},
	}
	for _, c := range cases {
		if got, err := CanonicalizeJSON([]byte(c.in)); err != nil || string(got) != c.want {
			t.Errorf("CanonicalizeJSON(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	// Go values take the same path: encoding/json's HTML and U+2028 escapes are undone.
	if got, want := string(MustCanonical(map[string]string{"k": "<a href=\"x\">&\u2028</a>"})), "{\"k\":\"<a href=\\\"x\\\">&\u2028</a>\"}"; got != want {
		t.Errorf("Canonical(html) = %s, want %s", got, want)
	}
}

func TestCanonicalKeyOrderUTF16(t *testing.T) {
	// RFC 8785 section 3.2.3.
	in := `{
	  "\u20ac": "Euro Sign",
	  "\r": "Carriage Return",
	  "\ufb33": "Hebrew Letter Dalet With Dagesh",
	  "1": "One",
	  "\ud83d\ude00": "Emoji: Grinning Face",
	  "\u0080": "Control",
	  "\u00f6": "Latin Small Letter O With Diaeresis"
	}`
	want := "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"
	got, err := CanonicalizeJSON([]byte(in))
	if err != nil || string(got) != want {
		t.Fatalf("got %s, %v\nwant %s", got, err, want)
	}
	// Code point order would put U+FB33 before U+1F600; UTF-16 puts the
	// surrogate D83D first.
	if !lessUTF16("\U0001F600", "\uFB33") || lessUTF16("\uFB33", "\U0001F600") {
		t.Error("lessUTF16 does not order by UTF-16 code units")
	}
	cases := []struct {
		a, b string
		less bool
	}{
		{"a", "b", true}, {"b", "a", false}, {"a", "ab", true}, {"ab", "a", false},
		{"", "a", true}, {"a", "a", false}, {"B", "a", true}, {"z", "é", true},
		{"é", "\uffff", true}, {"\U00010000", "\uffff", true},
	}
	for _, c := range cases {
		if got := lessUTF16(c.a, c.b); got != c.less {
			t.Errorf("lessUTF16(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

func TestCanonicalRFC8785Example(t *testing.T) {
	// RFC 8785 section 3.2.4.
	in := `{
	  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
	  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
	  "literals": [null, true, false]
	}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
	got, err := CanonicalizeJSON([]byte(in))
	if err != nil || string(got) != want {
		t.Fatalf("got %s, %v\nwant %s", got, err, want)
	}
}

func TestCanonicalNested(t *testing.T) {
	cases := []struct{ in, want string }{
		{` { } `, `{}`},
		{"\t[ ]\r\n", `[]`},
		{`null`, `null`},
		{` true`, `true`},
		{`"x"`, `"x"`},
		{`[1, [2, [3, {"b": [], "a": {}}]], {"z": null, "y": false}]`, `[1,[2,[3,{"a":{},"b":[]}]],{"y":false,"z":null}]`},
		{`{"b": {"d": 1, "c": [ {"f": 1, "e": 2} ]}, "a": [ ]}`, `{"a":[],"b":{"c":[{"e":2,"f":1}],"d":1}}`},
		{`{"a":"\u0061", "\u0062": 2}`, `{"a":"a","b":2}`},
		{`{"10":1,"9":2,"1":3,"":4}`, `{"":4,"1":3,"10":1,"9":2}`},
	}
	for _, c := range cases {
		got, err := CanonicalizeJSON([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("CanonicalizeJSON(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	if got, err := CanonicalizeJSON([]byte(deep)); err != nil || string(got) != deep {
		t.Errorf("5000 nested arrays: %v", err)
	}
	tooDeep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	if _, err := CanonicalizeJSON([]byte(tooDeep)); err == nil {
		t.Error("20000 nested objects accepted")
	}
}

func TestCanonicalizeRefusals(t *testing.T) {
	cases := map[string]string{
		"invalid UTF-8 in string":   "\"a\xffb\"",
		"truncated UTF-8":           "\"\xe2\x82\"",
		"overlong UTF-8":            "\"\xc0\xaf\"",
		"UTF-8 surrogate":           "\"\xed\xa0\x80\"",
		"invalid UTF-8 outside":     "[1]\xff",
		"trailing value":            `{} {}`,
		"trailing number":           `1 2`,
		"trailing bracket":          `{}]`,
		"trailing brace":            `{} }`,
		"trailing bracket in array": `[1]]`,
		"trailing garbage":          `"a"x`,
		"trailing comma":            `[1,]`,
		"trailing comma in object":  `{"a":1,}`,
		"empty":                     ``,
		"only white space":          " \n\t",
		"comment":                   `{} // c`,
		"block comment":             `/* c */ {}`,
		"unquoted key":              `{a:1}`,
		"single quotes":             `{'a':1}`,
		"missing colon":             `{"a" 1}`,
		"unclosed object":           `{"a":1`,
		"unclosed array":            `[1`,
		"unclosed string":           `"abc`,
		"raw control in string":     "\"a\x01b\"",
		"raw newline in string":     "\"a\nb\"",
		"bad escape":                `"\x41"`,
		"short unicode escape":      `"\u41"`,
		"lone high surrogate":       `"\ud800"`,
		"lone low surrogate":        `"\udc00"`,
		"reversed surrogates":       `"\ude00\ud83d"`,
		"high then non-surrogate":   `"\ud83d\u0041"`,
		"high at end of key":        `{"a\ud83d":1}`,
		"duplicate key":             `{"a":1,"a":2}`,
		"duplicate key same value":  `{"a":1,"a":1}`,
		"duplicate key by escape":   `{"a":1,"\u0061":2}`,
		"nested duplicate key":      `[{"x":{"b":1,"b":1}}]`,
		"NUL byte":                  "\x00",
		"BOM":                       "\ufeff{}",
	}
	for name, in := range cases {
		if got, err := CanonicalizeJSON([]byte(in)); err == nil {
			t.Errorf("%s: CanonicalizeJSON(%q) = %q, want an error", name, in, got)
		}
		if err := CheckCanonical([]byte(in)); !errors.Is(err, ErrNotCanonical) {
			t.Errorf("%s: CheckCanonical(%q) = %v, want ErrNotCanonical", name, in, err)
		}
	}
	// Escaped backslashes before a 'u' are not unicode escapes.
	if got, err := CanonicalizeJSON([]byte(`"\\ud800"`)); err != nil || string(got) != `"\\ud800"` {
		t.Errorf(`"\\ud800" = %s, %v`, got, err)
	}
}

func TestCheckCanonical(t *testing.T) {
	good := []string{
		`{}`, `[]`, `0`, `-1`, `1e+30`, `"a"`, `null`,
		`{"a":1,"b":[true,false,null],"c":{"d":"\n"}}`,
		"\"\u2028/\x7f\"",
		`{"\r":1,"1":2}`,
		"{\"😀\":1,\"\ufb33\":2}",
	}
	for _, s := range good {
		if err := CheckCanonical([]byte(s)); err != nil {
			t.Errorf("CheckCanonical(%s) = %v", s, err)
		}
	}
	bad := []string{
		` {}`, `{} `, "{}\n", `{ }`, `[1, 2]`, `{"b":1,"a":2}`, `1.0`, `1E+30`, `1e30`,
		`"\u0041"`, `"\/"`, `"\u001F"`, `"\u000a"`, `-0`, `0.10`, `{"a" :1}`,
		"{\"\ufb33\":2,\"😀\":1}", `"\u2028"`, `"\u00e9"`, `100e-2`,
	}
	for _, s := range bad {
		if err := CheckCanonical([]byte(s)); !errors.Is(err, ErrNotCanonical) {
			t.Errorf("CheckCanonical(%s) = %v, want ErrNotCanonical", s, err)
		}
	}
}

func TestCanonicalGoValues(t *testing.T) {
	type inner struct {
		Z int    `json:"z"`
		A string `json:"a"`
	}
	v := struct {
		B     []inner        `json:"b"`
		A     map[string]any `json:"a"`
		F     float64        `json:"f"`
		Big   int64          `json:"big"`
		Empty []string       `json:"empty"`
		Nil   []string       `json:"nil"`
	}{
		B:     []inner{{Z: 1, A: "x"}},
		A:     map[string]any{"é": 1, "e": 2.5},
		F:     1e21,
		Big:   1 << 53,
		Empty: []string{},
	}
	want := `{"a":{"e":2.5,"é":1},"b":[{"a":"x","z":1}],"big":9007199254740992,"empty":[],"f":1e+21,"nil":null}`
	if got := string(MustCanonical(v)); got != want {
		t.Errorf("Canonical = %s\nwant %s", got, want)
	}
	if _, err := Canonical(math.NaN()); err == nil {
		t.Error("Canonical(NaN) succeeded")
	}
	if _, err := Canonical(make(chan int)); err == nil {
		t.Error("Canonical(chan) succeeded")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("MustCanonical(chan) did not panic")
			}
		}()
		MustCanonical(make(chan int))
	}()
	h, b, err := HashOf(map[string]int{"b": 1, "a": 2})
	if err != nil || string(b) != `{"a":2,"b":1}` || h != Sum(b) {
		t.Errorf("HashOf = %s, %s, %v", h, b, err)
	}
	if _, _, err := HashOf(math.Inf(1)); err == nil {
		t.Error("HashOf(+Inf) succeeded")
	}
}

func TestHash(t *testing.T) {
	if got := Sum(nil); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("Sum(empty) = %s", got)
	}
	if got := Sum([]byte("abc")); got != "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Sum(abc) = %s", got)
	}
	h := Sum([]byte("abc"))
	if !h.Valid() {
		t.Error("Sum result not Valid")
	}
	if got := h.Short(); got != "ba7816bf8f01" {
		t.Errorf("Short = %q", got)
	}
	if got := Hash("sha256:abc").Short(); got != "abc" {
		t.Errorf("Short of a short hash = %q", got)
	}
	hexPart := strings.TrimPrefix(string(h), HashPrefix)
	for _, bad := range []Hash{
		"", "sha256:", Hash(hexPart), Hash("sha1:" + hexPart),
		Hash(HashPrefix + strings.ToUpper(hexPart)),
		Hash(HashPrefix + hexPart[:63]),
		Hash(HashPrefix + hexPart + "0"),
		Hash(HashPrefix + hexPart[:63] + "g"),
		Hash("SHA256:" + hexPart),
		Hash(" " + string(h)),
	} {
		if bad.Valid() {
			t.Errorf("%q is Valid", bad)
		}
	}
}

func TestCanonicalIsIdempotentOnFixedInputs(t *testing.T) {
	for _, in := range []string{
		`{"b":[1,2.50,{"y":"\u00e9","x":null}],"a":"\u2028\t"}`,
		`[1e21,1e-7,-0,0.1,123456789012345678]`,
	} {
		once, err := CanonicalizeJSON([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		twice, err := CanonicalizeJSON(once)
		if err != nil || !bytes.Equal(once, twice) {
			t.Errorf("not idempotent: %s -> %s -> %s (%v)", in, once, twice, err)
		}
	}
}
