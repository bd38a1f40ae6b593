package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/server"
)

// The event log and its replay: events that an earlier or another server
// published, events older than the bus's memory, the stream.reset and
// task.reset events, and several servers on one repository.

// nextIs reads the next event and fails unless it is the artifact event of
// key's version v: a marker posted after the last event a test expects, so
// that nothing came between (no event twice, nothing extra), as an event
// stream delivers in the order of publication.
func (c *sse) nextIs(key string, v int) sseEvent {
	c.t.Helper()
	e := c.next(server.EventArtifact, server.EventWork, server.EventTransition, server.EventProgress, server.EventReset, server.EventStreamGap)
	if e.Type != server.EventArtifact || e.Data["key"] != key || e.Data["version"] != float64(v) {
		c.t.Fatalf("an event before the marker %s v%d: %s %s", key, v, e.Type, e.Raw)
	}
	return e
}

// artifacts waits for n task.artifact events and returns them; anything
// else on the stream but task.progress fails the test.
func (c *sse) artifacts(n int) []sseEvent {
	c.t.Helper()
	var out []sseEvent
	for len(out) < n {
		e := c.next(server.EventArtifact, server.EventWork, server.EventTransition, server.EventReset, server.EventStreamGap)
		if e.Type != server.EventArtifact {
			c.t.Fatalf("waiting for %d task.artifact events, got %s %s after %d", n, e.Type, e.Raw, len(out))
		}
		out = append(out, e)
	}
	return out
}

// versions are the versions of artifact events, as "key@version".
func versionsOf(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		if e.Type == server.EventArtifact {
			out = append(out, fmt.Sprintf("%s@%v", e.Data["key"], e.Data["version"]))
		}
	}
	return out
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func idsOf(t *testing.T, evs []sseEvent) []int64 {
	t.Helper()
	var out []int64
	for _, e := range evs {
		out = append(out, id(t, e.ID))
	}
	return out
}

func sameStrings(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// logIDs reads the ids of the repository's event log, in file order.
func logIDs(t *testing.T, dir string) []int64 {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, ".git", "bernstein", "events", "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var e struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if e.ID != 0 {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// wantUniqueIncreasing fails unless ids only grow.
func wantUniqueIncreasing(t *testing.T, what string, ids []int64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("%s: id %d follows %d (ids %v)", what, ids[i], ids[i-1], ids)
		}
	}
}

// TestEventsTwoServers: several servers on one repository number every
// event once. Server A (in this process) leads; server B (a `bernstein
// serve` process) follows A's log. Both streams carry the same events under
// the same ids. When A stops, B takes the lead and numbers on; A, started
// again, follows B, and a client that resumes on A with an id it got from B
// gets what it missed once. When B is killed (no clean exit: the kernel
// drops its lock), A takes the lead again. The log's ids never repeat.
func TestEventsTwoServers(t *testing.T) {
	r := newTaskRepo(t, "TS-1")
	hsA, stopA := r.serve()
	b := startServeChild(t, r.dir, r.home, 0)
	stream := server.EventsPath + "?task=TS-1"
	cA := connect(t, hsA.URL+stream, "")
	cB := connect(t, b.base+stream, "")

	for _, v := range []string{"v1", "v2", "v3"} {
		r.post("k", v)
	}
	gotA, gotB := cA.artifacts(3), cB.artifacts(3)
	want := []string{"k@1", "k@2", "k@3"}
	if !sameStrings(versionsOf(gotA), want) || !sameStrings(versionsOf(gotB), want) {
		t.Fatalf("versions: A %v, B %v, want %v", versionsOf(gotA), versionsOf(gotB), want)
	}
	for i := range gotA {
		if gotA[i].ID != gotB[i].ID || gotA[i].Raw != gotB[i].Raw {
			t.Fatalf("event %d: A has %s %s, B has %s %s", i, gotA[i].ID, gotA[i].Raw, gotB[i].ID, gotB[i].Raw)
		}
	}
	wantUniqueIncreasing(t, "A's events", idsOf(t, gotA))
	lastA := gotA[2].ID
	cA.close()

	// A stops: B takes the lead.
	stopA()
	r.post("k", "v4")
	r.post("k", "v5")
	got := cB.artifacts(2)
	if !sameStrings(versionsOf(got), []string{"k@4", "k@5"}) || id(t, got[0].ID) <= id(t, lastA) {
		t.Fatalf("after the leader stopped, B sent %v with ids %v (the last before: %s)", versionsOf(got), idsOf(t, got), lastA)
	}
	wantUniqueIncreasing(t, "B's events", idsOf(t, append(gotB, got...)))

	// A again, now following B: a client resumes on A from A's last id.
	hsA, stopA = r.serve()
	defer stopA()
	cA = connect(t, hsA.URL+stream, lastA)
	resumed := cA.artifacts(2)
	if !sameStrings(versionsOf(resumed), []string{"k@4", "k@5"}) || resumed[0].ID != got[0].ID || resumed[1].ID != got[1].ID {
		t.Fatalf("resumed on A from %s: %v %v, want B's %v %v", lastA, versionsOf(resumed), idsOf(t, resumed), versionsOf(got), idsOf(t, got))
	}
	r.post("k", "v6")
	a6, b6 := cA.artifacts(1)[0], cB.artifacts(1)[0]
	if a6.ID != b6.ID || a6.Data["version"] != float64(6) {
		t.Fatalf("v6: A %s %s, B %s %s", a6.ID, a6.Raw, b6.ID, b6.Raw)
	}

	// B dies without a word: A takes the lead; B's client comes to A.
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.done
	cB.close()
	r.post("k", "v7")
	a7 := cA.artifacts(1)[0]
	if a7.Data["version"] != float64(7) || id(t, a7.ID) <= id(t, a6.ID) {
		t.Fatalf("after B was killed, A sent %s %s", a7.ID, a7.Raw)
	}
	cB = connect(t, hsA.URL+stream, b6.ID)
	if e := cB.artifacts(1)[0]; e.ID != a7.ID {
		t.Fatalf("B's client resumed on A from %s: %s %s, want %s", b6.ID, e.ID, e.Raw, a7.ID)
	}
	// Nothing more: no event twice. The next event either client gets is
	// the marker's.
	r.post("marker", "after the last one")
	for _, c := range []*sse{cA, cB} {
		c.nextIs("marker", 1)
		c.close()
	}
	ids := logIDs(t, r.dir)
	wantUniqueIncreasing(t, "the log", ids)
	if len(ids) < 7 {
		t.Fatalf("the log holds %d events: %v", len(ids), ids)
	}
}

// TestEventsReplayFromLog: a server that did not publish the events a
// client asks for (a new process over the same log) derives them from the
// log, once, in order, then goes on live; so does one whose memory no
// longer holds them.
func TestEventsReplayFromLog(t *testing.T) {
	r := newTaskRepo(t, "RL-1")
	small := server.WithRingSize(server.Options{}, 4)
	hs, stop := r.serveWith(small)
	c := connect(t, hs.URL+server.EventsPath, "")
	for i := 1; i <= 10; i++ {
		r.post("k", "version "+jsonNumber(i))
	}
	all := c.artifacts(10)
	c.close()
	// Older than the ring (4 events): 9 events from event 1 on, the first
	// ones read back from the log.
	c = connect(t, hs.URL+server.EventsPath, all[0].ID)
	got := c.artifacts(9)
	for i, e := range got {
		if e.ID != all[i+1].ID || e.Raw != all[i+1].Raw {
			t.Fatalf("replayed event %d: %s %s, want %s %s", i, e.ID, e.Raw, all[i+1].ID, all[i+1].Raw)
		}
	}
	// Nothing after the replay but what comes next.
	r.post("k", "version 11")
	all = append(all, c.nextIs("k", 11))
	c.close()
	stop()

	// A new server over the same log: it published none of these.
	hs, stop = r.serveWith(small)
	defer stop()
	c = connect(t, hs.URL+server.EventsPath+"?task=RL-1", all[2].ID)
	got = c.artifacts(len(all) - 3)
	if !sameStrings(versionsOf(got), versionsOf(all[3:])) {
		t.Fatalf("replayed by a new server from %s: %v, want %v", all[2].ID, versionsOf(got), versionsOf(all[3:]))
	}
	for i, e := range got {
		if e.ID != all[i+3].ID || e.Raw != all[i+3].Raw {
			t.Fatalf("replayed event %d: %s %s, want %s %s", i, e.ID, e.Raw, all[i+3].ID, all[i+3].Raw)
		}
	}
	r.post("k", "live")
	if e := c.artifacts(1)[0]; e.Data["version"] != float64(12) || id(t, e.ID) <= id(t, all[10].ID) {
		t.Fatalf("live after the replay: %s %s", e.ID, e.Raw)
	}
	c.close()
}

// TestEventsStreamReset: a client whose events the server does not have
// gets stream.reset first (then the stream goes on from the server's
// latest event): an id beyond the server's latest one, and an id of a log
// that was removed.
func TestEventsStreamReset(t *testing.T) {
	r := newTaskRepo(t, "SR-1")
	hs, stop := r.serve()
	c := connect(t, hs.URL+server.EventsPath, "")
	r.post("k", "v1")
	first := c.artifacts(1)[0]
	c.close()

	// Beyond the latest event.
	beyond := jsonNumber(id(t, first.ID) + 1000)
	c = connect(t, hs.URL+server.EventsPath, beyond)
	e := c.next(server.EventStreamGap, server.EventArtifact)
	if e.Type != server.EventStreamGap || e.ID != first.ID || !strings.Contains(e.Data["reason"].(string), beyond) {
		t.Fatalf("resuming beyond the latest event: %s %s %s", e.Type, e.ID, e.Raw)
	}
	r.post("k", "v2")
	if e := c.artifacts(1)[0]; e.Data["version"] != float64(2) {
		t.Fatalf("after stream.reset: %s", e.Raw)
	}
	c.close()
	stop()

	// The log is removed while no server runs: the next one starts a new
	// log, and the old id is not one of its events.
	if err := os.RemoveAll(filepath.Join(r.dir, ".git", "bernstein", "events")); err != nil {
		t.Fatal(err)
	}
	// A new log numbers from the clock: the new server's runs an hour on.
	later := func() time.Time { return time.Now().Add(time.Hour) }
	hs, stop = r.serveWith(server.WithClock(server.Options{}, later))
	defer stop()
	r.post("k", "v3")
	probe := connect(t, hs.URL+server.EventsPath, "")
	r.post("k", "v4")
	probe.artifacts(1)
	probe.close()
	c = connect(t, hs.URL+server.EventsPath, first.ID)
	e = c.next(server.EventStreamGap, server.EventArtifact)
	if e.Type != server.EventStreamGap || !strings.Contains(e.Data["reason"].(string), first.ID) {
		t.Fatalf("resuming from an id of a removed log: %s %s", e.Type, e.Raw)
	}
	c.close()
}

// TestEventsTaskReset: a chain rolled back with plain git is a task.reset
// (reload the task), live and when a client resumes across it from the
// log; the events of rows the chain no longer holds are not replayed.
func TestEventsTaskReset(t *testing.T) {
	r := newTaskRepo(t, "TR-1")
	hs, stop := r.serve()
	c := connect(t, hs.URL+server.EventsPath+"?task=TR-1", "")
	r.post("k", "v1")
	v1 := c.artifacts(1)[0]
	oldHead := r.git("rev-parse", refs.Journal("TR-1"))
	r.post("k", "v2")
	v2 := c.artifacts(1)[0]
	r.git("update-ref", refs.Journal("TR-1"), oldHead)
	e := c.next(server.EventReset)
	if e.Data["task_id"] != "TR-1" || e.Data["reason"] == "" {
		t.Fatalf("task.reset: %s", e.Raw)
	}
	resetID := e.ID
	c.close()
	stop()

	// A new server replays from v1: v2's row is gone, the reset stays.
	hs, stop = r.serve()
	defer stop()
	c = connect(t, hs.URL+server.EventsPath+"?task=TR-1", v1.ID)
	var got []sseEvent
	for {
		e := c.next(server.EventArtifact, server.EventReset)
		got = append(got, e)
		if e.Type == server.EventReset {
			break
		}
	}
	c.close()
	for _, e := range got {
		if e.ID == v2.ID {
			t.Fatalf("the event of a row the journal no longer holds was replayed: %s", e.Raw)
		}
	}
	if last := got[len(got)-1]; last.ID != resetID {
		t.Fatalf("replayed task.reset %s, want %s", last.ID, resetID)
	}
}

// TestEventsUnfinishedBatch: a leader that crashed while writing a batch
// leaves its entries without the line that closes the batch. The next
// leader cuts them (their events were never published: a batch is logged
// before any client sees it, unless the log could not be written) and
// numbers past their ids.
func TestEventsUnfinishedBatch(t *testing.T) {
	r := newTaskRepo(t, "UB-1")
	hs, stop := r.serve()
	c := connect(t, hs.URL+server.EventsPath, "")
	r.post("k", "v1")
	v1 := c.artifacts(1)[0]
	c.close()
	stop()
	logPath := filepath.Join(r.dir, ".git", "bernstein", "events", "log")
	torn := id(t, v1.ID) + 1
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `{"id":%d,"type":"task.artifact","task":"UB-1","chain":"journal","index":1,"commit":"%s"}`+"\n", torn, strings.Repeat("0", 40))
	fmt.Fprintf(f, `{"id":%d,"type":"task.artif`, torn+1)
	f.Close()

	hs, stop = r.serve()
	defer stop()
	c = connect(t, hs.URL+server.EventsPath, "")
	r.post("k", "v2")
	v2 := c.artifacts(1)[0]
	c.close()
	if id(t, v2.ID) <= torn {
		t.Fatalf("the next leader's event %s reuses an id of the unfinished batch (%d)", v2.ID, torn)
	}
	for _, n := range logIDs(t, r.dir) {
		if n == torn {
			t.Fatalf("the unfinished batch is still in the log: %v", logIDs(t, r.dir))
		}
	}
}
