package record

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// slowCanonical is the general path: encoding/json, then re-encoding.
func slowCanonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return CanonicalizeJSON(raw)
}

type embedded struct {
	A string `json:"a"`
	Z int64  `json:"z"`
}

type shapes struct {
	embedded
	Hash    Hash              `json:"hash"`
	Ints    []int             `json:"ints"`
	Nested  [][]string        `json:"nested"`
	Map     map[string]any    `json:"map"`
	Raw     json.RawMessage   `json:"raw"`
	Omit    string            `json:"omit,omitempty"`
	Ptr     *embedded         `json:"ptr"`
	Float   float64           `json:"float"`
	Big     int64             `json:"big"`
	Bools   map[string]bool   `json:"bools"`
	Empty   []string          `json:"empty"`
	Unicode string            `json:"unicode"`
	Ignored string            `json:"-"`
	private string            //nolint
	Strs    map[string]string `json:"strs"`
}

// TestFastEncoderMatchesGeneral: the direct encoder writes exactly what the
// general path writes, for every record shape and some awkward ones.
func TestFastEncoderMatchesGeneral(t *testing.T) {
	values := []any{
		Row{V: 1, Kind: KindCheckpoint, TaskID: "T:1", Index: 3, Prev: Sum([]byte("p")), Actor: "a", Data: json.RawMessage(`{"commit":"x"}`)},
		ArtifactPosted{Key: "k", ArtifactType: "report", Version: 2, ContentHash: Sum(nil)},
		SpineArtifactEntry{SpineHeader: SpineHeader{V: 1, Writer: "w", Seq: 9, Kind: SpineArtifact}, TaskID: "t", Key: "k"},
		SpineSealEntry{SpineHeader: SpineHeader{V: 1, Writer: "w", Kind: SpineJournalSeal}, Head: Sum(nil), Rows: 4},
		AuditEntry{V: 1, Writer: "w", Details: json.RawMessage(`{"a":[1,2,{"b":null}]}`), HMAC: "00"},
		GateAttempt{Gate: "g", Output: Output{Path: "p", Truncated: true}},
		shapes{embedded: embedded{A: "x\u2028\x7f\x01\"\\", Z: -5}, Ints: []int{0, -1, 1 << 50}, Nested: [][]string{{}, {"a"}},
			Map: map[string]any{"\u20ac": 1.5, "\r": "x", "1": []any{true, nil}, "\u00f6": map[string]any{}, "\U0001F600": 1e21},
			Raw: json.RawMessage(`[1,"a"]`), Ptr: &embedded{A: "p"}, Float: 0.1 + 0.2, Big: 1<<53 + 1, Bools: map[string]bool{"b": true, "a": false},
			Unicode: "日本語 ☃", Strs: map[string]string{}},
		map[string]any{"z": 1, "a": []string{"x"}},
		[]any{"a", 1, 2.5, false, nil},
		"plain", 42, true, nil, 1e-7, -0.0,
	}
	for i, v := range values {
		fast, err := Canonical(v)
		if err != nil {
			t.Fatalf("%d: fast: %v", i, err)
		}
		slow, err := slowCanonical(v)
		if err != nil {
			t.Fatalf("%d: slow: %v", i, err)
		}
		if !bytes.Equal(fast, slow) {
			t.Fatalf("%d: fast and general paths differ\nfast %s\nslow %s", i, fast, slow)
		}
		if err := validateCanonical(fast); err != nil {
			t.Fatalf("%d: the validator refuses canonical output %s: %v", i, fast, err)
		}
	}
	if _, err := Canonical(math.Inf(1)); err == nil {
		t.Fatalf("infinity encoded")
	}
}

// TestExactDecodeRoundTrip: decoding canonical bytes and encoding them again
// gives the same bytes, and near-misses are refused.
func TestExactDecodeRoundTrip(t *testing.T) {
	r := Row{V: 1, Kind: KindGateAttempt, TaskID: "T", Index: 1, Prev: Sum([]byte("x")), Actor: "a", Data: json.RawMessage(`{"gate":"g"}`)}
	b := r.Bytes()
	var back Row
	if err := decodeExact(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) || !bytes.Equal(back.Bytes(), b) {
		t.Fatalf("round trip: %+v", back)
	}
	for _, bad := range []string{
		`{"actor":"a","data":{},"index":1,"kind":"k","prev":"","task_id":"T"}`,                 // v missing
		`{"actor":"a","data":{},"extra":1,"index":1,"kind":"k","prev":"","task_id":"T","v":1}`, // unknown
		`{"Actor":"a","data":{},"index":1,"kind":"k","prev":"","task_id":"T","v":1}`,           // case differs
		`{"actor":1,"data":{},"index":1,"kind":"k","prev":"","task_id":"T","v":1}`,             // wrong type
		`{"actor":"a","data":{},"index":1.5,"kind":"k","prev":"","task_id":"T","v":1}`,         // not an integer
	} {
		var x Row
		if err := decodeExact([]byte(bad), &x); err == nil {
			t.Fatalf("decoded %s", bad)
		}
	}
}

// FuzzValidateMatchesCanonicalize: the fast validator accepts exactly the
// bytes that the general canonicalizer maps to themselves.
func FuzzValidateMatchesCanonicalize(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":1,"b":[true,null,"x"]}`, `{"b":1,"a":2}`, `1.0`, `1e21`, `"\u001f"`, `"\u001F"`,
		`"\/"`, `{"a":1,"a":2}`, `-0`, `0.1`, `100000000000000000000`, `"\ud800"`, `"\t"`, `"é"`, `{"\u00e9":1,"z":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast := validateCanonical(b) == nil
		c, err := CanonicalizeJSON(b)
		slow := err == nil && bytes.Equal(c, b)
		if fast != slow {
			t.Fatalf("validator says %v, canonicalizer says %v for %q", fast, slow, b)
		}
	})
}

// FuzzParseRowFast: the fast row reader accepts only what the exact decoder
// accepts, with the same result, and accepts every row the encoder writes.
func FuzzParseRowFast(f *testing.F) {
	for _, r := range []Row{
		{V: 1, Kind: KindCheckpoint, TaskID: "T:1", Index: 0, Actor: "a", Data: json.RawMessage(`{"commit":"x"}`)},
		{V: 1, Kind: "k", TaskID: "t", Index: 9, Prev: Sum([]byte("p")), Actor: "é\n", Data: json.RawMessage(`[1,{"a":null}]`)},
	} {
		f.Add(r.Bytes())
	}
	f.Add([]byte(`{"actor":"a","data":{},"index":1,"kind":"k","prev":"","task_id":"T","v":1} `))
	f.Add([]byte(`{"actor":"a","data":{},"index":01,"kind":"k","prev":"","task_id":"T","v":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := parseRowFast(b)
		var exact Row
		err := decodeExact(b, &exact)
		if ok && (err != nil || !reflect.DeepEqual(fast, exact)) {
			t.Fatalf("fast path accepted %q: %+v; exact decoder: %+v %v", b, fast, exact, err)
		}
		if err == nil && exact.V == 1 && !ok {
			if _, ok2 := parseRowFast(exact.Bytes()); !ok2 {
				t.Fatalf("fast path refuses the canonical row %s", exact.Bytes())
			}
		}
	})
}
