package mcpserver_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/mcpserver"
	"github.com/bernstein/bernstein/record"
)

// canonicalVectorFields are the fields vector_hash covers (docs/cli.md, Progress vector).
var canonicalVectorFields = []string{"schema_version", "task_id", "checkpoints", "diffs_captured", "gate_attempts",
	"gates_passed", "evidence_declared", "evidence_passed", "ledger_phase", "ledger_attempts", "terminal"}

// readHandle reads a handle and checks what a client can check alone: the
// fields, progressHash against the canonical vector, and receiptHash
// against the canonical bytes of the other fields.
func readHandle(t *testing.T, c *client, task string) map[string]any {
	t.Helper()
	h := ok[map[string]any](t, c.call(mcpserver.ToolTaskHandle, map[string]any{"task_id": task}))
	var keys []string
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"journalHead", "progress", "progressHash", "receiptHash", "spineHead", "status", "taskId"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("handle fields %v, want %v", keys, want)
	}
	if h["taskId"] != task {
		t.Errorf("taskId = %v", h["taskId"])
	}
	p := h["progress"].(map[string]any)
	if h["progressHash"] != p["vector_hash"] {
		t.Errorf("progressHash %v != progress.vector_hash %v", h["progressHash"], p["vector_hash"])
	}
	vec := map[string]any{}
	for _, f := range canonicalVectorFields {
		v, ok := p[f]
		if !ok {
			t.Fatalf("progress lacks %s", f)
		}
		vec[f] = v
	}
	b, err := record.Canonical(vec)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != h["progressHash"] {
		t.Errorf("progressHash %v, the canonical vector hashes to %s", h["progressHash"], got)
	}
	body := map[string]any{}
	for k, v := range h {
		if k != "receiptHash" {
			body[k] = v
		}
	}
	rb, err := record.Canonical(body)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(record.Sum(rb)); got != h["receiptHash"] {
		t.Errorf("receiptHash %v, the other fields hash to %s", h["receiptHash"], got)
	}
	return h
}

func num(v any) int64 { return int64(v.(float64)) }

func TestTaskHandle(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1", "unit", "lint")
	tok := r.claim("T-1", "agent-1")
	c := serveAs(t, r, "agent-1", tok)

	h0 := readHandle(t, c, "T-1")
	p0 := h0["progress"].(map[string]any)
	if h0["status"] != "working" || h0["journalHead"] != "" || h0["spineHead"] != "" ||
		p0["ledger_phase"] != "claimed" || num(p0["evidence_declared"]) != 2 || num(p0["earned_steps"]) != 0 {
		t.Errorf("handle of a claimed task: %v", h0)
	}
	lib, err := r.store.TaskHandle("T-1")
	if err != nil {
		t.Fatal(err)
	}
	if h0["receiptHash"] != string(lib.ReceiptHash) || h0["progressHash"] != lib.ProgressHash {
		t.Errorf("the tool and the library disagree: %v vs %+v", h0, lib)
	}

	// An artifact moves the heads, never the progress.
	post := ok[postResult](t, c.call(mcpserver.ToolPostArtifact, report("T-1", "summary", "# v1")))
	h1 := readHandle(t, c, "T-1")
	info, err := r.store.Task("T-1")
	if err != nil {
		t.Fatal(err)
	}
	if h1["spineHead"] != post.SpineEntryHash || h1["journalHead"] != string(info.JournalHead) || h1["journalHead"] == "" {
		t.Errorf("heads after a post: %v (spine entry %s, journal head %s)", h1, post.SpineEntryHash, info.JournalHead)
	}
	if h1["progressHash"] != h0["progressHash"] || h1["receiptHash"] == h0["receiptHash"] {
		t.Errorf("a post moved progress (%v -> %v) or left the receipt (%v)", h0["progressHash"], h1["progressHash"], h1["receiptHash"])
	}

	// A checkpoint is earned work: the vector moves.
	r.checkpoint("T-1")
	h2 := readHandle(t, c, "T-1")
	p2 := h2["progress"].(map[string]any)
	if h2["progressHash"] == h1["progressHash"] || num(p2["checkpoints"]) != 1 || num(p2["earned_steps"]) != 1 {
		t.Errorf("after a checkpoint: %v", h2)
	}

	// Fifty reports later the vector has not moved; the journal has.
	for i := 0; i < 50; i++ {
		ok[postResult](t, c.call(mcpserver.ToolPostArtifact, report("T-1", fmt.Sprintf("note-%d", i%5), fmt.Sprintf("report %d", i))))
	}
	h3 := readHandle(t, c, "T-1")
	if h3["progressHash"] != h2["progressHash"] || h3["journalHead"] == h2["journalHead"] || h3["receiptHash"] == h2["receiptHash"] {
		t.Errorf("after fifty reports: progress %v -> %v, journal %v -> %v", h2["progressHash"], h3["progressHash"], h2["journalHead"], h3["journalHead"])
	}
	if p3 := h3["progress"].(map[string]any); num(p3["journal_rows"]) != 52 || num(p3["earned_steps"]) != 1 {
		t.Errorf("progress after fifty reports: %v", p3)
	}
}

func TestTaskHandleStatus(t *testing.T) {
	r := newRepo(t)
	c := serveAs(t, r, "agent-1")
	status := func(task string) string {
		t.Helper()
		return readHandle(t, c, task)["status"].(string)
	}
	r.createTask("T-1")
	if s := status("T-1"); s != "working" {
		t.Errorf("created: %s", s)
	}
	r.claim("T-1", "agent-1")
	r.transition("T-1", record.KindTaskStarted)
	if s := status("T-1"); s != "working" {
		t.Errorf("started: %s", s)
	}
	r.transition("T-1", record.KindTaskSuspended)
	if s := status("T-1"); s != "input_required" {
		t.Errorf("suspended: %s", s)
	}
	r.transition("T-1", record.KindTaskResumed)
	r.transition("T-1", record.KindTaskCompleted)
	if s := status("T-1"); s != "completed" {
		t.Errorf("completed: %s", s)
	}
	r.createTask("T-2")
	r.claim("T-2", "agent-1")
	r.transition("T-2", record.KindTaskFailed)
	if s := status("T-2"); s != "failed" {
		t.Errorf("failed: %s", s)
	}
	r.createTask("T-3")
	r.transition("T-3", record.KindTaskAbandoned)
	if s := status("T-3"); s != "cancelled" {
		t.Errorf("abandoned: %s", s)
	}
}

func TestProgressNotifications(t *testing.T) {
	r := newRepo(t)
	r.createTask("T-1", "unit", "lint")
	tok := r.claim("T-1", "agent-1")
	c := serveAs(t, r, "agent-1", tok)
	handle := func(token string) {
		t.Helper()
		res, err := c.callWith(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"}, token)
		if err != nil || res.IsError {
			t.Fatalf("handle: %v %v", err, res)
		}
	}

	handle("h0") // nothing earned yet: nothing to report
	r.checkpoint("T-1")
	handle("h1")
	p := c.waitProgress("h1")
	if p.Progress != 1 || p.Total != 2 {
		t.Errorf("after a checkpoint: progress %v of %v, want 1 of 2", p.Progress, p.Total)
	}

	// Reports do not move the vector: no notification for any of them.
	for i := 0; i < 50; i++ {
		res, err := c.callWith(mcpserver.ToolPostArtifact, report("T-1", "note", fmt.Sprintf("report %d", i)), fmt.Sprintf("p%d", i))
		if err != nil || res.IsError {
			t.Fatalf("post %d: %v %v", i, err, res)
		}
	}
	handle("h2")

	// A post after a checkpoint reports the advance.
	r.checkpoint("T-1")
	res, err := c.callWith(mcpserver.ToolPostArtifact, report("T-1", "note", "after the second checkpoint"), "p50")
	if err != nil || res.IsError {
		t.Fatalf("post: %v %v", err, res)
	}
	if p := c.waitProgress("p50"); p.Progress != 2 || p.Total != 2 {
		t.Errorf("after the second checkpoint: progress %v of %v", p.Progress, p.Total)
	}
	// The session's notifications arrive in order: p50's came last, so any
	// notification for the reports or h0/h2 would be here by now.
	var got []any
	for _, n := range c.progressSeen() {
		got = append(got, n.ProgressToken)
	}
	if !reflect.DeepEqual(got, []any{"h1", "p50"}) {
		t.Errorf("notifications for %v, want [h1 p50]", got)
	}

	// A new session has heard nothing yet: earned steps are reported at once.
	c2 := serveAs(t, r, "agent-1", tok)
	if _, err := c2.callWith(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"}, "n0"); err != nil {
		t.Fatal(err)
	}
	if p := c2.waitProgress("n0"); p.Progress != 2 {
		t.Errorf("new session: progress %v", p.Progress)
	}
	// A call without a progress token is never notified.
	r.checkpoint("T-1")
	if _, err := c2.callWith(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.callWith(mcpserver.ToolTaskHandle, map[string]any{"task_id": "T-1"}, "n1"); err != nil {
		t.Fatal(err)
	}
	if p := c2.waitProgress("n1"); p.Progress != 3 {
		t.Errorf("progress %v, want 3", p.Progress)
	}
	if n := len(c2.progressSeen()); n != 2 {
		t.Errorf("second session got %d notifications, want 2", n)
	}
}

// TestProgressNotificationsOnlyGrow: a notification's progress is the
// task's earned steps and only grows within a session (issue 17, path 5):
// a vector that moves without earning (a failed gate attempt), a step taken
// back (a producer failing after it passed) and the same count earned again
// notify nothing. Its total is the declared gates and producers, sent while
// progress has not gone past it, never when the task declares none.
func TestProgressNotificationsOnlyGrow(t *testing.T) {
	r := newRepo(t)
	flags := t.TempDir()
	flag := func(name string) string { return filepath.Join(flags, name) }
	if _, err := r.store.CreateTask(bernstein.TaskSpec{ID: "N-1",
		Gates:    []ledger.Gate{{Name: "build", Command: "test -f " + flag("build-ok")}},
		Evidence: []ledger.Producer{{Name: "tests", Kind: "command", Command: "test -f " + flag("tests-ok"), Required: true}}}); err != nil {
		t.Fatal(err)
	}
	r.createTask("M-1")
	tok := r.claim("N-1", "agent-1")
	r.transition("N-1", record.KindTaskStarted)
	c := serveAs(t, r, "agent-1", tok)
	handle := func(task, token string) {
		t.Helper()
		res, err := c.callWith(mcpserver.ToolTaskHandle, map[string]any{"task_id": task}, token)
		if err != nil || res.IsError {
			t.Fatalf("handle %s: %v %v", task, err, res)
		}
	}
	setFlag := func(name string, on bool) {
		if on {
			os.WriteFile(flag(name), nil, 0o644)
		} else {
			os.Remove(flag(name))
		}
	}
	evidence := func() {
		t.Helper()
		if _, err := r.store.RunEvidence("N-1", nil, bernstein.RunOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		token           string
		progress, total float64
	}
	var wants []want
	step := func(token string, do func(), notify bool, progress, total float64) {
		t.Helper()
		if do != nil {
			do()
		}
		handle("N-1", token)
		if notify {
			wants = append(wants, want{token, progress, total})
		}
	}
	step("h0", nil, false, 0, 0)                                                                     // nothing earned
	step("h1", func() { r.checkpoint("N-1") }, true, 1, 2)                                           // 1 of the 2 declared
	step("h2", func() { r.store.RunGate("N-1", "build", nil, bernstein.RunOptions{}) }, false, 0, 0) // moved, earned nothing
	step("h3", func() { setFlag("tests-ok", true); evidence() }, true, 2, 2)
	step("h4", func() { setFlag("tests-ok", false); evidence() }, false, 0, 0) // taken back: 1
	step("h5", func() { setFlag("tests-ok", true); evidence() }, false, 0, 0)  // 2 again: not above 2
	step("h6", func() { r.checkpoint("N-1") }, true, 3, 0)                     // past the declared 2: no total
	step("h7", func() { setFlag("build-ok", true); r.store.RunGate("N-1", "build", nil, bernstein.RunOptions{}) }, true, 4, 0)
	// A task that declares nothing has no total.
	r.checkpoint("M-1")
	handle("M-1", "m1")
	wants = append(wants, want{"m1", 1, 0})
	c.waitProgress("m1")
	var got []want
	for _, n := range c.progressSeen() {
		got = append(got, want{n.ProgressToken.(string), n.Progress, n.Total})
	}
	if !reflect.DeepEqual(got, wants) {
		t.Fatalf("notifications\n got %+v\nwant %+v", got, wants)
	}
}
