package bernstein_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/bernstein/bernstein"
)

// The poster's side of the chaos harness (chaos_test.go): how a poster
// process acknowledges a post, and how it tells the harness its store
// compacted packs.

// ackOut serializes what a poster process writes to its stdout and its
// acknowledgement log.
var ackOut struct {
	sync.Mutex
	once    sync.Once
	log     *os.File
	pending []string // lines waiting for the next sync
	queued  int      // lines queued so far
	synced  int      // lines synced and printed so far
	syncing bool     // a caller is syncing a batch of lines
}

var ackSynced = sync.NewCond(&ackOut.Mutex)

// printAck acknowledges results: "ok <version> <task> <key> <spine entry
// hash> <journal index>" on stdout for each. With BERNSTEIN_TEST_ACKLOG (a
// folder), the same lines are first appended to this process's file in it
// and synced, so that an acknowledgement the harness never read (the poster
// was killed before it printed, or the harness before it remembered) is
// still checked. It returns once its lines are printed. Lines that callers
// queue while a sync runs go together in the next one (one fsync for all,
// none printed before it). A poster that cannot log exits 1, which the
// harness reports.
func printAck(results ...*bernstein.PostResult) {
	var lines []string
	for _, res := range results {
		lines = append(lines, fmt.Sprintf("ok %d %s %s %s %d\n", res.Version, res.Task, res.Key, res.SpineEntryHash, res.JournalIndex))
	}
	dir := os.Getenv("BERNSTEIN_TEST_ACKLOG")
	ackOut.Lock()
	defer ackOut.Unlock()
	if dir == "" {
		os.Stdout.WriteString(strings.Join(lines, ""))
		return
	}
	ackOut.once.Do(func() {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			err = syncPath(dir) // the file's name survives too
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "acknowledgement log:", err)
			os.Exit(1)
		}
		ackOut.log = f
	})
	ackOut.pending = append(ackOut.pending, lines...)
	ackOut.queued += len(lines)
	mine := ackOut.queued
	for ackOut.synced < mine {
		if ackOut.syncing {
			ackSynced.Wait()
			continue
		}
		batch := strings.Join(ackOut.pending, "")
		n := len(ackOut.pending)
		ackOut.pending, ackOut.syncing = nil, true
		ackOut.Unlock()
		_, err := ackOut.log.WriteString(batch)
		if err == nil {
			err = ackOut.log.Sync()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "acknowledgement log:", err)
			os.Exit(1)
		}
		ackOut.Lock()
		os.Stdout.WriteString(batch)
		ackOut.synced += n
		ackOut.syncing = false
		ackSynced.Broadcast()
	}
}

func syncPath(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// chaosPosterHook: with BERNSTEIN_TEST_COUNT_COMPACTIONS set, the poster's
// store prints "compacted" each time its compaction has installed a merged
// pack (the pack directory synced, called from Compact), the only place a
// compaction shows from outside the store.
func chaosPosterHook() func(step string) error {
	if os.Getenv("BERNSTEIN_TEST_COUNT_COMPACTIONS") == "" {
		return nil
	}
	return func(step string) error {
		if step == "pack dir synced" && calledFrom("/gitstore.(*Repo).Compact") {
			ackOut.Lock()
			os.Stdout.WriteString("compacted\n")
			ackOut.Unlock()
		}
		return nil
	}
}

// calledFrom reports whether a function whose name ends in suffix is on the
// caller's stack.
func calledFrom(suffix string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		fr, more := frames.Next()
		if strings.HasSuffix(fr.Function, suffix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// ack is one acknowledged post as a poster logged it.
type ack struct {
	task, key string
	version   int64
	spine     string
	index     int64
}

func (a ack) id() string { return fmt.Sprintf("%s %s %d", a.task, a.key, a.version) }

func parseAck(line string) (ack, bool) {
	var a ack
	_, err := fmt.Sscanf(line, "ok %d %s %s %s %d", &a.version, &a.task, &a.key, &a.spine, &a.index)
	return a, err == nil
}

// readAckLogs reads every poster's acknowledgement log from dir. A last
// line without its newline (the poster was killed while writing it, before
// the sync that acknowledges) is not an acknowledgement; torn counts those.
func readAckLogs(dir string) (acks []ack, torn int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, 0, err
		}
		lines := strings.SplitAfter(string(b), "\n")
		for _, l := range lines {
			if l == "" {
				continue
			}
			if !strings.HasSuffix(l, "\n") {
				torn++
				continue
			}
			a, ok := parseAck(strings.TrimSuffix(l, "\n"))
			if !ok {
				return nil, 0, fmt.Errorf("%s: not an acknowledgement: %q", e.Name(), l)
			}
			acks = append(acks, a)
		}
	}
	return acks, torn, nil
}
