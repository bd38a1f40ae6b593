package record

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current code")

// goldenCase is one record whose canonical bytes are pinned.
type goldenCase struct {
	name  string // file testdata/golden/<name>.json
	bytes []byte
}

const goldenDir = "testdata/golden"
const goldenHashes = goldenDir + "/hashes.txt"

// checkGoldens compares every case byte for byte with its golden file and
// its sha256 with the hashes file, or rewrites both under -update.
func checkGoldens(t *testing.T, cases []goldenCase) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, c := range cases {
			if err := os.WriteFile(filepath.Join(goldenDir, c.name+".json"), c.bytes, 0o644); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, c.name+" "+string(Sum(c.bytes)))
		}
		sort.Strings(lines)
		if err := os.WriteFile(goldenHashes, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	hashes := readGoldenHashes(t)
	if len(hashes) != len(cases) {
		t.Errorf("%s lists %d records, the test has %d", goldenHashes, len(hashes), len(cases))
	}
	for _, c := range cases {
		want, err := os.ReadFile(filepath.Join(goldenDir, c.name+".json"))
		if err != nil {
			t.Errorf("%s: %v (run go test -update)", c.name, err)
			continue
		}
		if !bytes.Equal(c.bytes, want) {
			t.Errorf("%s: canonical bytes changed\n got: %s\nwant: %s", c.name, c.bytes, want)
		}
		if got := Sum(c.bytes); got != hashes[c.name] {
			t.Errorf("%s: hash %s, golden hash %s", c.name, got, hashes[c.name])
		}
		// The golden file itself is canonical: keys sorted, no white space,
		// no trailing newline, minimal escaping.
		if err := CheckCanonical(want); err != nil {
			t.Errorf("%s: golden file is not canonical: %v", c.name, err)
		}
	}
}

func readGoldenHashes(t *testing.T) map[string]Hash {
	t.Helper()
	f, err := os.Open(goldenHashes)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	defer f.Close()
	out := map[string]Hash{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, h, ok := strings.Cut(sc.Text(), " ")
		if !ok || !Hash(h).Valid() {
			t.Fatalf("%s: bad line %q", goldenHashes, sc.Text())
		}
		out[name] = Hash(h)
	}
	return out
}

// Fixed values so the goldens never move.
var (
	gHash1 = Sum([]byte("row one"))
	gHash2 = Sum([]byte("row two"))
	gHash3 = Sum([]byte("spine entry"))
	gHash4 = Sum([]byte("payload"))
	gBlob  = "2b1d0f5e0f1c6ad9c8d1d4e1c57f0a8c4d1b3e22"
	// gMACKey is the HMAC-SHA256 key of the audit goldens.
	gMACKey = []byte("bernstein test hmac key: 32bytes")
)

func mustRow(t *testing.T, kind, task string, index int64, prev Hash, actor string, data any) Row {
	t.Helper()
	r, err := NewRow(kind, task, index, prev, actor, data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func journalGoldenRows(t *testing.T) map[string]Row {
	task := "proj:feature-42"
	return map[string]Row{
		"journal_artifact_posted": mustRow(t, KindArtifactPosted, task, 0, "", "agent-7", ArtifactPosted{
			Key: "summary", ArtifactType: "report", Version: 1, ContentHash: gHash4, Blob: gBlob,
			Size: 1234, LinkKind: "", PrevVersionHash: "", SpineEntryHash: gHash3,
		}),
		"journal_artifact_posted_v2_link": mustRow(t, KindArtifactPosted, task, 3, gHash2, "agent-7", ArtifactPosted{
			Key: "preview.url", ArtifactType: "link", Version: 2, ContentHash: gHash4, Blob: gBlob,
			Size: 88, LinkKind: "preview", PrevVersionHash: gHash3, SpineEntryHash: gHash1,
		}),
		"journal_checkpoint": mustRow(t, KindCheckpoint, task, 1, gHash1, "agent-7", map[string]any{
			"commit":  "8b7c2f0a3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b",
			"message": "wip: parser handles \"quoted\" fields\n\nand tabs\t",
			"files":   []string{"a/b.go", "ü/ñ.txt"},
		}),
		"journal_diff_captured": mustRow(t, KindDiffCaptured, task, 2, gHash2, "agent-7", map[string]any{
			"base":          "1111111111111111111111111111111111111111",
			"head":          "2222222222222222222222222222222222222222",
			"patch_blob":    gBlob,
			"patch_sha256":  gHash4,
			"files_changed": 3,
			"insertions":    120,
			"deletions":     7,
		}),
		// The rows as this version writes them (progress schema 3): the
		// trees the fold compares.
		"journal_checkpoint_trees": mustRow(t, KindCheckpoint, task, 6, gHash1, "orchestrator", Checkpoint{
			Commit: "8b7c2f0a3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b", Tree: "3c4e9cd789d88d8d89c1073707c3585e41b0e614",
			ParentTree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
		}),
		"journal_diff_captured_trees": mustRow(t, KindDiffCaptured, task, 7, gHash2, "orchestrator", DiffCaptured{
			Base: "1111111111111111111111111111111111111111", Head: "2222222222222222222222222222222222222222",
			BaseTree: "4b825dc642cb6eb9a060e54bf8d69288fbee4904", HeadTree: "3c4e9cd789d88d8d89c1073707c3585e41b0e614",
			Patch: Output{Path: "outputs/000007-diff.patch", Blob: gBlob, Hash: gHash4, Size: 120}, Files: 1, Added: 3, Removed: 0,
		}),
		"journal_gate_attempt": mustRow(t, KindGateAttempt, task, 4, gHash1, "agent-7", map[string]any{
			"gate":          "unit-tests",
			"command":       "go test ./... -run 'Test.*' </dev/null",
			"exit_code":     1,
			"passed":        false,
			"duration_ms":   15320,
			"output_blob":   gBlob,
			"output_sha256": gHash4,
		}),
		"journal_evidence_result": mustRow(t, KindEvidenceResult, task, 5, gHash2, "agent-7", map[string]any{
			"producer":    "coverage",
			"kind":        "metric",
			"required":    true,
			"exit_code":   0,
			"value":       0.875,
			"ratio":       1e-7,
			"big":         1e21,
			"output_blob": gBlob,
			"details":     map[string]any{"z": nil, "a": []any{}, "é": "\u2028", "ctl": "\x01\x1f\x7f"},
		}),
	}
}

func spineGoldenEntries() map[string]any {
	return map[string]any{
		"spine_artifact_first": SpineArtifactEntry{
			SpineHeader: SpineHeader{V: Version, Writer: "host-a-1f2e3d", Seq: 0, Prev: "", Kind: SpineArtifact},
			TaskID:      "proj:feature-42", Key: "summary", Version: 1, ContentHash: gHash4,
			PrevVersionHash: "", JournalIndex: 0, Actor: "agent-7",
		},
		"spine_artifact_next": SpineArtifactEntry{
			SpineHeader: SpineHeader{V: Version, Writer: "host-a-1f2e3d", Seq: 7, Prev: gHash1, Kind: SpineArtifact},
			TaskID:      "T.1", Key: "results_table", Version: 3, ContentHash: gHash4,
			PrevVersionHash: gHash3, JournalIndex: 12, Actor: "agent \"quoted\"",
		},
		"spine_journal_seal": SpineSealEntry{
			SpineHeader: SpineHeader{V: Version, Writer: "host-a-1f2e3d", Seq: 8, Prev: gHash2, Kind: SpineJournalSeal},
			TaskID:      "proj:feature-42", Head: gHash1, Rows: 13, LedgerIndex: 6, Transition: KindTaskCompleted,
		},
	}
}

func auditGoldenEntries(t *testing.T) map[string]AuditEntry {
	mac := func(a AuditEntry) AuditEntry {
		m := hmac.New(sha256.New, gMACKey)
		m.Write(a.MACBytes())
		a.HMAC = hex.EncodeToString(m.Sum(nil))
		return a
	}
	first := mac(AuditEntry{V: Version, Writer: "host-a-1f2e3d", Seq: 0, Event: EventArtifactPosted, Actor: "agent-7",
		TaskID: "proj:feature-42", Resource: string(gHash3),
		Details: MustCanonical(map[string]any{"key": "summary", "version": 1}), PrevHMAC: ""})
	refused := mac(AuditEntry{V: Version, Writer: "host-a-1f2e3d", Seq: 1, Event: EventArtifactRefused, Actor: "intruder",
		TaskID: "proj:feature-42", Resource: "summary",
		Details: MustCanonical(map[string]any{"reason": ReasonClaimScopeViolation}), PrevHMAC: first.HMAC})
	transition := mac(AuditEntry{V: Version, Writer: "host-a-1f2e3d", Seq: 2, Event: KindTaskReleased, Actor: "agent-7",
		TaskID: "proj:feature-42", Resource: string(gHash1),
		Details: MustCanonical(map[string]any{"reason": "handing over"}), PrevHMAC: refused.HMAC})
	return map[string]AuditEntry{
		"audit_artifact_posted":  first,
		"audit_artifact_refused": refused,
		"audit_task_released":    transition,
	}
}

func TestGoldenRecords(t *testing.T) {
	var cases []goldenCase
	for name, r := range journalGoldenRows(t) {
		b := r.Bytes()
		// What was written parses back to itself with the same hash.
		p, err := ParseRow(b)
		if err != nil {
			t.Fatalf("%s: ParseRow: %v", name, err)
		}
		if p.Hash() != Sum(b) || r.Hash() != Sum(b) || !bytes.Equal(p.Bytes(), b) {
			t.Errorf("%s: row hash does not survive a parse", name)
		}
		cases = append(cases, goldenCase{name, b})
	}
	for name, e := range spineGoldenEntries() {
		b := MustCanonical(e)
		p, err := ParseSpineEntry(b)
		if err != nil {
			t.Fatalf("%s: ParseSpineEntry: %v", name, err)
		}
		if p.Hash != Sum(b) || !bytes.Equal(p.Bytes, b) {
			t.Errorf("%s: spine entry hash does not survive a parse", name)
		}
		switch x := e.(type) {
		case SpineArtifactEntry:
			if p.Artifact == nil || *p.Artifact != x || p.Seal != nil || p.Header != x.SpineHeader {
				t.Errorf("%s: parsed %+v, want %+v", name, p.Artifact, x)
			}
		case SpineSealEntry:
			if p.Seal == nil || *p.Seal != x || p.Artifact != nil || p.Header != x.SpineHeader {
				t.Errorf("%s: parsed %+v, want %+v", name, p.Seal, x)
			}
		}
		cases = append(cases, goldenCase{name, b})
	}
	for name, a := range auditGoldenEntries(t) {
		b := a.Bytes()
		p, err := ParseAuditEntry(b)
		if err != nil {
			t.Fatalf("%s: ParseAuditEntry: %v", name, err)
		}
		if !bytes.Equal(p.Bytes(), b) || !bytes.Equal(p.MACBytes(), a.MACBytes()) {
			t.Errorf("%s: audit entry does not survive a parse", name)
		}
		// The MAC covers exactly the entry without its hmac field.
		if bytes.Contains(a.MACBytes(), []byte(`"hmac"`)) || !bytes.Contains(b, []byte(`"hmac":"`+a.HMAC+`"`)) {
			t.Errorf("%s: hmac placement wrong: %s / %s", name, a.MACBytes(), b)
		}
		m := hmac.New(sha256.New, gMACKey)
		m.Write(p.MACBytes())
		if hex.EncodeToString(m.Sum(nil)) != p.HMAC {
			t.Errorf("%s: HMAC does not verify after a parse", name)
		}
		cases = append(cases, goldenCase{name + "_mac_input", a.MACBytes()}, goldenCase{name, b})
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].name < cases[j].name })
	checkGoldens(t, cases)
}

// TestGoldenAuditMACPinned pins one HMAC value independently of the golden
// files, so a change of the MAC input is caught even under -update.
func TestGoldenAuditMACPinned(t *testing.T) {
	a := AuditEntry{V: 1, Writer: "w", Seq: 0, Event: "task.created", Actor: "a", TaskID: "t", Resource: "r", Details: []byte(`{}`)}
	want := `{"actor":"a","details":{},"event":"task.created","prev_hmac":"","resource":"r","seq":0,"task_id":"t","v":1,"writer":"w"}`
	if got := string(a.MACBytes()); got != want {
		t.Fatalf("MACBytes = %s\nwant %s", got, want)
	}
	m := hmac.New(sha256.New, gMACKey)
	m.Write([]byte(want))
	a.HMAC = hex.EncodeToString(m.Sum(nil))
	wantFull := `{"actor":"a","details":{},"event":"task.created","hmac":"` + a.HMAC + `","prev_hmac":"","resource":"r","seq":0,"task_id":"t","v":1,"writer":"w"}`
	if got := string(a.Bytes()); got != wantFull {
		t.Fatalf("Bytes = %s\nwant %s", got, wantFull)
	}
	row := mustRow(t, KindCheckpoint, "t", 0, "", "a", map[string]int{"b": 1, "a": 2})
	if got, want := string(row.Bytes()), `{"actor":"a","data":{"a":2,"b":1},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`; got != want {
		t.Fatalf("row = %s\nwant %s", got, want)
	}
	if got, want := row.Hash(), Sum([]byte(`{"actor":"a","data":{"a":2,"b":1},"index":0,"kind":"checkpoint","prev":"","task_id":"t","v":1}`)); got != want {
		t.Fatalf("row hash %s, want %s", got, want)
	}
}
