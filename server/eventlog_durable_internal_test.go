package server

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/systrace"
)

// EventLogChild is eventLogChild for TestMain, which runs it when the test
// binary is started as TestEventLogIsDurableBeforePublished's child.
var EventLogChild = eventLogChild

// eventLogChild, run under strace: a leading bus over a new repository in
// dir publishes the events of two posts, its log sealed after each batch.
// Before each post it creates dir/mark-post-N, and once the bus has
// published that post's events, dir/mark-published-N.
func eventLogChild(dir string) error {
	opts := bernstein.Options{Repo: filepath.Join(dir, "repo"), Home: filepath.Join(dir, "home")}
	if out, err := exec.Command("git", "init", "-q", opts.Repo).CombinedOutput(); err != nil {
		return fmt.Errorf("git init: %v %s", err, out)
	}
	if _, err := bernstein.Init(opts, "w"); err != nil {
		return err
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "T-1", Title: "t"}); err != nil {
		return err
	}
	tok, err := s.Claim("T-1", "agent")
	if err != nil {
		return err
	}
	b, err := NewBus(s, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	b.segment = 1
	if err := b.Scan(); err != nil {
		return err
	}
	for i := range 2 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("mark-post-%d", i)), nil, 0o644); err != nil {
			return err
		}
		before := b.LastID()
		if _, err := s.Post(bernstein.PostRequest{Task: "T-1", Key: "k", Agent: "agent", ClaimToken: tok,
			Payload: artifact.Payload{Type: "report", Body: fmt.Sprintf("body %d", i)}}); err != nil {
			return err
		}
		if err := b.scanChanged(nil); err != nil {
			return err
		}
		if b.LastID() <= before {
			return fmt.Errorf("post %d: no event published", i)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("mark-published-%d", i)), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// TestEventLogIsDurableBeforePublished: each batch of events is synced to
// the log before its events are published (an id a client was given is on
// the disk, so no leader after a power loss gives it to another event);
// the log's folder is synced once it is created; when the log is sealed,
// the next segment is synced before it is renamed into place and the folder
// is synced after the renames.
func TestEventLogIsDurableBeforePublished(t *testing.T) {
	dir := t.TempDir()
	evs, out := systrace.Child(t, "BERNSTEIN_TEST_EVENTLOG_CHILD="+dir)
	if !strings.Contains(out, "eventlog child ok") {
		t.Fatalf("the traced child failed: %s", out)
	}
	events := filepath.Join(dir, "repo", ".git", "bernstein", "events")
	log := filepath.Join(events, "log")
	// The log's name is synced (its folder) before anything is synced into it.
	created := systrace.Find(evs, "create", log, 0)
	if created < 0 {
		t.Fatalf("the log was not created in the trace")
	}
	if d, l := systrace.Find(evs, "fsync", events, created), systrace.Find(evs, "fsync", log, created); d < 0 || l < 0 || d > l {
		t.Errorf("the events folder was not synced between the log's creation and its first sync (%d, %d)", d, l)
	}
	for i := range 2 {
		post := systrace.Find(evs, "create", filepath.Join(dir, fmt.Sprintf("mark-post-%d", i)), 0)
		published := systrace.Find(evs, "create", filepath.Join(dir, fmt.Sprintf("mark-published-%d", i)), post)
		if post < 0 || published < 0 {
			t.Fatalf("post %d: marks not in the trace (%d, %d)", i, post, published)
		}
		synced := systrace.Find(evs, "fsync", log, post)
		if synced < 0 || synced > published {
			t.Errorf("post %d: the log was not synced between the post and the publication of its events (fsync at %d, published at %d)", i, synced, published)
		}
		// The seal after that batch: log.next synced, renamed onto log,
		// then the folder synced.
		onto := -1
		for j := post; j < published; j++ {
			if e := evs[j]; e.Call == "rename" && e.Path == log && e.From == filepath.Join(events, "log.next") {
				onto = j
			}
		}
		if onto < 0 {
			t.Fatalf("post %d: the log was not sealed (no rename of log.next onto log)", i)
		}
		nextSynced := -1
		for j := post; j < onto; j++ {
			if e := evs[j]; e.Call == "fsync" && strings.HasPrefix(filepath.Base(e.Path), ".log.next.tmp") {
				nextSynced = j
			}
		}
		if nextSynced < 0 {
			t.Errorf("post %d: the next segment was renamed onto log without being synced first", i)
		}
		if d := systrace.Find(evs, "fsync", events, onto); d < 0 || d > published {
			t.Errorf("post %d: the events folder was not synced after the seal's renames", i)
		}
	}
}
