package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

const validRow = `{"actor":"a","data":{"x":1},"index":2,"kind":"checkpoint","prev":"sha256:6ef20a03c2e6e16dfaacff82e0ba008587356d86911a2d17c2e594eefe11a38d","task_id":"t:1","v":1}`

func TestParseRowAcceptsCanonical(t *testing.T) {
	r, err := ParseRow([]byte(validRow))
	if err != nil {
		t.Fatal(err)
	}
	want := Row{V: 1, Kind: KindCheckpoint, TaskID: "t:1", Index: 2, Prev: "sha256:6ef20a03c2e6e16dfaacff82e0ba008587356d86911a2d17c2e594eefe11a38d", Actor: "a", Data: json.RawMessage(`{"x":1}`)}
	if r.V != want.V || r.Kind != want.Kind || r.TaskID != want.TaskID || r.Index != want.Index || r.Prev != want.Prev || r.Actor != want.Actor || !bytes.Equal(r.Data, want.Data) {
		t.Errorf("ParseRow = %+v, want %+v", r, want)
	}
	if r.Hash() != Sum([]byte(validRow)) {
		t.Error("hash of the parsed row differs from the hash of its bytes")
	}
	var d struct {
		X int `json:"x"`
	}
	if err := r.DecodeData(&d); err != nil || d.X != 1 {
		t.Errorf("DecodeData = %v, %+v", err, d)
	}
	var other struct {
		Y int `json:"y"`
	}
	if err := r.DecodeData(&other); err == nil {
		t.Error("DecodeData accepted an unknown field")
	}
}

func TestParseRowRefusals(t *testing.T) {
	cases := map[string]string{
		"leading space":      " " + validRow,
		"trailing newline":   validRow + "\n",
		"unsorted keys":      `{"v":1,"actor":"a","data":{"x":1},"index":2,"kind":"checkpoint","prev":"","task_id":"t"}`,
		"spaces":             `{"actor": "a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"non-canonical data": `{"actor":"a","data":{"x":1.0},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"unknown field":      `{"actor":"a","data":{},"extra":1,"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"case-variant key":   `{"Kind":"evil","actor":"a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"upper-case key":     `{"KIND":"checkpoint","actor":"a","data":{},"index":0,"prev":"","task_id":"t","v":1}`,
		"missing actor":      `{"data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"missing prev":       `{"actor":"a","data":{},"index":0,"kind":"checkpoint","task_id":"t","v":1}`,
		"missing data":       `{"actor":"a","index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"missing kind":       `{"actor":"a","data":{},"index":0,"prev":"","task_id":"t","v":1}`,
		"empty kind":         `{"actor":"a","data":{},"index":0,"kind":"","prev":"","task_id":"t","v":1}`,
		"empty task":         `{"actor":"a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"","v":1}`,
		"negative index":     `{"actor":"a","data":{},"index":-1,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"fractional index":   `{"actor":"a","data":{},"index":1.5,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"string index":       `{"actor":"a","data":{},"index":"0","kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"version 2":          `{"actor":"a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":2}`,
		"version 0":          `{"actor":"a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":0}`,
		"no version":         `{"actor":"a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t"}`,
		"duplicate key":      `{"actor":"a","actor":"b","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`,
		"array":              `[]`,
		"null":               `null`,
		"empty":              ``,
		"invalid UTF-8":      "{\"actor\":\"\xff\",\"data\":{},\"index\":0,\"kind\":\"checkpoint\",\"prev\":\"\",\"task_id\":\"t\",\"v\":1}",
	}
	for name, in := range cases {
		if r, err := ParseRow([]byte(in)); err == nil {
			t.Errorf("%s: ParseRow accepted %s as %+v", name, in, r)
		}
	}
	if _, err := ParseRow([]byte(" " + validRow)); !errors.Is(err, ErrNotCanonical) {
		t.Errorf("non-canonical row: %v, want ErrNotCanonical", err)
	}
}

func TestNewRow(t *testing.T) {
	r, err := NewRow(KindGateAttempt, "t", 3, "sha256:x", "me", map[string]any{"b": "<", "a": []int{}})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Data) != `{"a":[],"b":"<"}` || r.V != Version || r.Index != 3 || r.Kind != KindGateAttempt {
		t.Errorf("NewRow = %+v (data %s)", r, r.Data)
	}
	if _, err := NewRow(KindGateAttempt, "t", 0, "", "me", math.NaN()); err == nil || !strings.Contains(err.Error(), KindGateAttempt) {
		t.Errorf("NewRow(NaN) = %v, want an error naming the kind", err)
	}
}

const (
	validArtifactEntry = `{"actor":"a","content_hash":"sha256:c","journal_index":0,"key":"k","kind":"artifact","prev":"","prev_version_hash":"","seq":0,"task_id":"t","v":1,"version":1,"writer":"w"}`
	validSealEntry     = `{"head":"sha256:h","kind":"journal_seal","ledger_index":4,"prev":"sha256:p","rows":3,"seq":1,"task_id":"t","transition":"task.completed","v":1,"writer":"w"}`
)

func TestParseSpineEntry(t *testing.T) {
	e, err := ParseSpineEntry([]byte(validArtifactEntry))
	if err != nil {
		t.Fatal(err)
	}
	if e.Artifact == nil || e.Seal != nil || e.Artifact.Key != "k" || e.Header.Writer != "w" || e.Hash != Sum([]byte(validArtifactEntry)) {
		t.Errorf("artifact entry = %+v", e)
	}
	s, err := ParseSpineEntry([]byte(validSealEntry))
	if err != nil {
		t.Fatal(err)
	}
	if s.Seal == nil || s.Artifact != nil || s.Seal.Rows != 3 || s.Seal.LedgerIndex != 4 || s.Header.Seq != 1 || s.Seal.Transition != KindTaskCompleted {
		t.Errorf("seal entry = %+v", s)
	}
	bad := map[string]string{
		"unknown kind":           strings.Replace(validSealEntry, `"journal_seal"`, `"other"`, 1),
		"seal field in artifact": strings.Replace(validArtifactEntry, `"actor":"a",`, `"actor":"a","head":"x",`, 1),
		"artifact field in seal": strings.Replace(validSealEntry, `"head":"sha256:h",`, `"head":"sha256:h","key":"k",`, 1),
		"version 2":              strings.Replace(validSealEntry, `"v":1`, `"v":2`, 1),
		"not canonical":          strings.Replace(validSealEntry, `"rows":3`, `"rows":3.0`, 1),
		"trailing newline":       validSealEntry + "\n",
		"missing actor":          strings.Replace(validArtifactEntry, `"actor":"a",`, ``, 1),
		"missing transition":     strings.Replace(validSealEntry, `,"transition":"task.completed"`, ``, 1),
		"case-variant key":       strings.Replace(validSealEntry, `{"head"`, `{"Rows":9,"head"`, 1),
		"upper-case kind key":    strings.Replace(validSealEntry, `"kind":"journal_seal"`, `"kinD":"journal_seal"`, 1),
		"not an object":          `"x"`,
	}
	for name, in := range bad {
		if e, err := ParseSpineEntry([]byte(in)); err == nil {
			t.Errorf("%s: ParseSpineEntry accepted %s as %+v", name, in, e)
		}
	}
}

const validAudit = `{"actor":"a","details":{},"event":"task.created","hmac":"00","prev_hmac":"","resource":"r","seq":0,"task_id":"t","v":1,"writer":"w"}`

func TestParseAuditEntry(t *testing.T) {
	a, err := ParseAuditEntry([]byte(validAudit))
	if err != nil {
		t.Fatal(err)
	}
	if a.Event != "task.created" || a.HMAC != "00" || string(a.Details) != "{}" || !bytes.Equal(a.Bytes(), []byte(validAudit)) {
		t.Errorf("ParseAuditEntry = %+v", a)
	}
	bad := map[string]string{
		"unknown field":    strings.Replace(validAudit, `"actor":"a",`, `"actor":"a","extra":0,`, 1),
		"version 2":        strings.Replace(validAudit, `"v":1`, `"v":2`, 1),
		"not canonical":    strings.Replace(validAudit, `"details":{}`, `"details":{ }`, 1),
		"missing hmac":     strings.Replace(validAudit, `"hmac":"00",`, ``, 1),
		"missing details":  strings.Replace(validAudit, `"details":{},`, ``, 1),
		"case-variant key": strings.Replace(validAudit, `{"actor"`, `{"HMAC":"11","actor"`, 1),
		"trailing data":    validAudit + " ",
	}
	for name, in := range bad {
		if e, err := ParseAuditEntry([]byte(in)); err == nil {
			t.Errorf("%s: ParseAuditEntry accepted %s as %+v", name, in, e)
		}
	}
}

func TestMessageRoundTrip(t *testing.T) {
	rec := []byte(validRow)
	msg := Message("checkpoint t:1", rec)
	if want := "checkpoint t:1\n\n" + validRow + "\n"; string(msg) != want {
		t.Fatalf("Message = %q, want %q", msg, want)
	}
	got, err := RecordFromMessage(msg)
	if err != nil || !bytes.Equal(got, rec) {
		t.Fatalf("RecordFromMessage = %q, %v", got, err)
	}
	bad := map[string]string{
		"no blank line":        "summary\n" + validRow + "\n",
		"no newline at end":    "summary\n\n" + validRow,
		"extra line":           "summary\n\n" + validRow + "\nSigned-off-by: x\n",
		"two records":          "summary\n\n" + validRow + "\n" + validRow + "\n",
		"extra trailing lines": "summary\n\n" + validRow + "\n\n",
		"empty record":         "summary\n\n\n",
		"nothing after blank":  "summary\n\n",
		"empty":                "",
		"summary only":         "summary\n",
	}
	for name, m := range bad {
		if got, err := RecordFromMessage([]byte(m)); !errors.Is(err, ErrNoRecord) {
			t.Errorf("%s: RecordFromMessage(%q) = %q, %v; want ErrNoRecord", name, m, got, err)
		}
	}
}
