package record

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"
)

// addGoldenSeeds adds every golden record as a seed.
func addGoldenSeeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

func FuzzCanonicalizeJSON(f *testing.F) {
	addGoldenSeeds(f)
	for _, s := range []string{
		`{"b":1,"a":[1e30,4.50,-0,"\u20ac\u000f\/"]}`, `[]`, `"\ud83d\ude00"`, `"\ud800"`,
		`{"a":1,"a":2}`, `{}]`, `1e400`, `333333333.33333329`, "\"\u2028\"", `{"\u0080":1,"\r":2}`,
		`[[[[[]]]]]`, `null`, `-1.5e-7`, `{"":{"":[{"":null}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := CanonicalizeJSON(in)
		if err != nil {
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("output %q is not valid UTF-8 JSON", out)
		}
		again, err := CanonicalizeJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", in, out, again, err)
		}
		if err := CheckCanonical(out); err != nil {
			t.Fatalf("CheckCanonical(own output %q) = %v", out, err)
		}
		if (CheckCanonical(in) == nil) != bytes.Equal(in, out) {
			t.Fatalf("CheckCanonical(%q) disagrees with CanonicalizeJSON", in)
		}
		// Same data: encoding/json reads both to equal values (numbers as float64).
		var a, b any
		if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed: %q -> %q", in, out)
		}
	})
}

func FuzzParseRow(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(validRow))
	f.Add([]byte(`{"Kind":"evil","actor":"a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := ParseRow(in)
		if err != nil {
			return
		}
		// What was read is exactly what a writer of r writes.
		if !bytes.Equal(r.Bytes(), in) || r.Hash() != Sum(in) {
			t.Fatalf("parsed row re-encodes differently: %q -> %q", in, r.Bytes())
		}
		if r.V != Version || r.Kind == "" || r.TaskID == "" || r.Index < 0 {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func FuzzParseSpineEntry(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(validArtifactEntry))
	f.Add([]byte(validSealEntry))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := ParseSpineEntry(in)
		if err != nil {
			return
		}
		if (e.Artifact == nil) == (e.Seal == nil) {
			t.Fatalf("entry %q has %v artifact and %v seal", in, e.Artifact != nil, e.Seal != nil)
		}
		var v any = e.Seal
		if e.Artifact != nil {
			v = e.Artifact
		}
		if !bytes.Equal(MustCanonical(v), in) || e.Hash != Sum(in) || !bytes.Equal(e.Bytes, in) {
			t.Fatalf("parsed entry re-encodes differently: %q", in)
		}
	})
}

func FuzzParseAuditEntry(f *testing.F) {
	addGoldenSeeds(f)
	f.Add([]byte(validAudit))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := ParseAuditEntry(in)
		if err != nil {
			return
		}
		if !bytes.Equal(a.Bytes(), in) {
			t.Fatalf("parsed audit entry re-encodes differently: %q -> %q", in, a.Bytes())
		}
		if err := CheckCanonical(a.MACBytes()); err != nil {
			t.Fatalf("MACBytes not canonical: %v", err)
		}
	})
}

func FuzzRecordFromMessage(f *testing.F) {
	f.Add([]byte("s\n\n{}\n"))
	f.Add([]byte("s\n\n{}\nx\n"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		rec, err := RecordFromMessage(msg)
		if err != nil {
			return
		}
		if len(rec) == 0 || bytes.IndexByte(rec, '\n') >= 0 || !bytes.HasSuffix(msg, append(append([]byte("\n\n"), rec...), '\n')) {
			t.Fatalf("RecordFromMessage(%q) = %q", msg, rec)
		}
	})
}
