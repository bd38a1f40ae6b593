package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// TestReadBatchesWholeOnly: a reader of the log (a follower, or a bus
// taking the lead) takes only whole batches: the entries of a batch whose
// closing line is not written yet, or is cut short, are left for later,
// and the offset stops after the last whole batch.
func TestReadBatchesWholeOnly(t *testing.T) {
	whole := `{"id":5,"type":"task.artifact","task":"T","chain":"journal","index":0,"commit":"c0"}` + "\n" +
		`{"id":6,"type":"task.progress","task":"T","vector":"v"}` + "\n" +
		`{"heads":{"T":{"journal_rows":1,"ledger_rows":2}},"vectors":{"T":"v"},"last":6,"end":true}` + "\n"
	for _, tail := range []string{
		"",
		`{"id":7,"type":"task.artifact","task":"T","chain":"journal","index":1,"commit":"c1"}` + "\n",
		`{"id":7,"type":"task.artifact","task":"T","chain":"journal","index":1,"commit":"c1"}` + "\n" + `{"last":7,"en`,
	} {
		p := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(p, []byte(whole+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		bs, off, maxID, err := readBatches(f, 0)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || len(bs[0].entries) != 2 || bs[0].last != 6 || bs[0].vectors["T"] != "v" || bs[0].heads["T"].JournalRows != 1 {
			t.Fatalf("tail %q: batches %+v", tail, bs)
		}
		if off != int64(len(whole)) {
			t.Fatalf("tail %q: offset %d, want %d", tail, off, len(whole))
		}
		if want := int64(6); tail != "" {
			want = 7
			if maxID != want {
				t.Fatalf("tail %q: largest id %d, want %d", tail, maxID, want)
			}
		}
	}
}

// TestBusReadsWhatChanged: after its first scan, a leader re-reads only the
// tasks the writers' audit mirrors name since (or a watcher named), not
// every ref: a post's event is published with no scan of every task; a
// task moved by plain git with no audit entry is read when the watcher
// names it; a rewritten packed-refs (git pack-refs) makes it scan, since
// such a move names no loose ref.
func TestBusReadsWhatChanged(t *testing.T) {
	s, dir := newInternalStore(t)
	toks := map[string]string{}
	for _, id := range []string{"T-1", "T-2", "T-3"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		tok, err := s.Claim(id, "agent-"+id)
		if toks[id] = tok; err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewBus(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	scans := b.scans.Load()
	post := func(task string, i int) {
		t.Helper()
		if _, err := s.Post(bernstein.PostRequest{Task: task, Key: "k", Agent: "agent-" + task, ClaimToken: toks[task],
			Payload: artifact.Payload{Type: "report", Body: fmt.Sprintf("body %d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	artifacts := func() map[string]int {
		b.mu.Lock()
		defer b.mu.Unlock()
		n := map[string]int{}
		for _, e := range b.ring {
			if e.Type == EventArtifact {
				n[e.Task]++
			}
		}
		return n
	}
	post("T-2", 1)
	if err := b.scanChanged(nil); err != nil {
		t.Fatal(err)
	}
	if got := artifacts(); got["T-2"] != 1 || len(got) != 1 {
		t.Fatalf("after a post to T-2, artifact events %v", got)
	}
	if b.scans.Load() != scans {
		t.Fatalf("a post made the bus scan every task")
	}
	// Nothing new: nothing published, still no scan.
	if err := b.scanChanged(nil); err != nil {
		t.Fatal(err)
	}
	if got := artifacts(); got["T-2"] != 1 || len(got) != 1 || b.scans.Load() != scans {
		t.Fatalf("a quiet round: events %v, scans %d (was %d)", got, b.scans.Load(), scans)
	}

	// T-3's journal moved by plain git: set back one row before the bus
	// looked (the audit mirror names T-3, whose journal then reads as
	// the bus knew it), then forward again. No audit entry names that
	// move; the watcher's name does.
	post("T-3", 2)
	for i := 0; i < 2; i++ { // the post, then the re-read of what the walk named
		if err := b.scanChanged(nil); err != nil {
			t.Fatal(err)
		}
	}
	post("T-3", 3)
	head := strings.TrimSpace(gitOut(t, dir, "rev-parse", "refs/bernstein/journal/T-3"))
	gitOut(t, dir, "update-ref", "refs/bernstein/journal/T-3", head+"^")
	for i := 0; i < 2; i++ {
		if err := b.scanChanged(nil); err != nil {
			t.Fatal(err)
		}
	}
	gitOut(t, dir, "update-ref", "refs/bernstein/journal/T-3", head)
	if err := b.scanChanged(nil); err != nil { // no hint: T-3 is not read
		t.Fatal(err)
	}
	before := artifacts()["T-3"]
	if err := b.scanChanged(map[string]bool{"T-3": true}); err != nil {
		t.Fatal(err)
	}
	if after := artifacts()["T-3"]; after != before+1 || b.scans.Load() != scans {
		t.Fatalf("the watcher named T-3: artifact events %d then %d, scans %d (was %d)", before, after, b.scans.Load(), scans)
	}

	gitOut(t, dir, "pack-refs", "--all")
	if err := b.scanChanged(nil); err != nil {
		t.Fatal(err)
	}
	if b.scans.Load() != scans+1 {
		t.Fatalf("packed-refs rewritten: %d scans, want %d", b.scans.Load(), scans+1)
	}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestReplayReadsFromMark: a replay from an id reads the log from the mark
// before it, not from its start, and returns exactly the events after the
// id (those the bus published, in order).
func TestReplayReadsFromMark(t *testing.T) {
	s, _ := newInternalStore(t)
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "T-1", Title: "t"}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Claim("T-1", "agent")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBus(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.every = 1 // a mark at every batch
	if err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		if _, err := s.Post(bernstein.PostRequest{Task: "T-1", Key: "k", Agent: "agent", ClaimToken: tok,
			Payload: artifact.Payload{Type: "report", Body: fmt.Sprintf("body %d", i)}}); err != nil {
			t.Fatal(err)
		}
		if err := b.scanChanged(nil); err != nil {
			t.Fatal(err)
		}
	}
	b.mu.Lock()
	ring := append([]Event(nil), b.ring...)
	upto := b.last + 1
	b.mu.Unlock()
	fi, err := os.Stat(b.logPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(ring) != 12 {
		t.Fatalf("%d events published, want one a post", len(ring))
	}
	from := ring[len(ring)-4].ID // the last three posts' events come after it
	evs, err := b.replay(from, upto, "")
	if err != nil {
		t.Fatal(err)
	}
	var got, want []int64
	for _, e := range evs {
		got = append(got, e.ID)
	}
	for _, e := range ring[len(ring)-3:] {
		want = append(want, e.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("replay after %d: %v, want %v", from, got, want)
	}
	if read := b.replayed.Load(); read*3 > fi.Size() {
		t.Fatalf("a replay of the last 3 of %d events read %d of the log's %d bytes", len(ring), read, fi.Size())
	}
}

// TestBusClosedRunEndsQuietly: a bus closed while its Run still runs (serve
// shutting down) ends Run without reporting a scan fault; a log line there
// would be an alarm with nothing behind it.
func TestBusClosedRunEndsQuietly(t *testing.T) {
	s, _ := newInternalStore(t)
	var logged strings.Builder
	b, err := NewBus(s, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Scan(); !errors.Is(err, errBusClosed) {
		t.Fatalf("a scan after Close: %v, want the closed bus's error", err)
	}
	// The deadline only bounds a Run that would go on polling a closed bus.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Run(ctx); err != nil {
		t.Fatalf("Run on a closed bus: %v", err)
	}
	if logged.Len() != 0 {
		t.Fatalf("a closed bus logged:\n%s", logged.String())
	}
}

// newInternalStore is a new repository with writer w, opened; it is closed
// when the test ends. dir is its work tree.
func newInternalStore(t *testing.T) (*bernstein.Store, string) {
	t.Helper()
	dir, home := filepath.Join(t.TempDir(), "repo"), filepath.Join(t.TempDir(), "home")
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	opts := bernstein.Options{Repo: dir, Home: home}
	if _, err := bernstein.Init(opts, "w"); err != nil {
		t.Fatal(err)
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// TestBusRestartReadsWhatChanged: a bus that starts over a log holding the
// repository's state reads no task's chains; one that starts after a post
// made while no server ran reads that task only, and publishes its events.
func TestBusRestartReadsWhatChanged(t *testing.T) {
	s, _ := newInternalStore(t)
	var tok string
	for _, id := range []string{"T-1", "T-2", "T-3", "T-4"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		var err error
		if tok, err = s.Claim(id, "agent"); err != nil {
			t.Fatal(err)
		}
	}
	start := func() *Bus {
		t.Helper()
		b, err := NewBus(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Scan(); err != nil {
			b.Close()
			t.Fatal(err)
		}
		return b
	}
	b := start()
	if n := b.feeds.Load(); n != 4 {
		t.Fatalf("a first start read %d tasks, want 4", n)
	}
	b.Close()
	b = start()
	if n := b.feeds.Load(); n != 0 {
		t.Fatalf("a start over an up-to-date log read %d tasks", n)
	}
	last := b.LastID()
	b.Close()
	if _, err := s.Post(bernstein.PostRequest{Task: "T-4", Key: "k", Agent: "agent", ClaimToken: tok,
		Payload: artifact.Payload{Type: "report", Body: "while down"}}); err != nil {
		t.Fatal(err)
	}
	b = start()
	defer b.Close()
	if n := b.feeds.Load(); n != 1 {
		t.Fatalf("a start after one task moved read %d tasks, want 1", n)
	}
	evs, _, _, err := b.since(last, "")
	if err != nil {
		t.Fatal(err)
	}
	var arts []string
	for _, e := range evs {
		if e.Type == EventArtifact {
			arts = append(arts, e.Task)
		}
	}
	if len(arts) != 1 || arts[0] != "T-4" {
		t.Fatalf("events after the restart: %s", eventIDs(evs))
	}
}
