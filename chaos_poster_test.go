package bernstein_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
)

// The poster's side of the chaos harness (chaos_test.go): how a poster
// process acknowledges a post, and how it tells the harness its store
// compacted packs.

// ackOut serializes what a poster process writes to its stdout and its
// acknowledgement log.
var ackOut struct {
	sync.Mutex
	once sync.Once
	log  *os.File
}

// printAck acknowledges res: "ok <version> <task> <key> <spine entry hash>
// <journal index>" on stdout. With BERNSTEIN_TEST_ACKLOG (a folder), the
// same line is first appended to this process's file in it and synced, so
// that an acknowledgement the harness never read (the poster was killed
// before it printed, or the harness before it remembered) is still checked.
// A poster that cannot log exits 1, which the harness reports.
func printAck(res *bernstein.PostResult) {
	line := fmt.Sprintf("ok %d %s %s %s %d\n", res.Version, res.Task, res.Key, res.SpineEntryHash, res.JournalIndex)
	ackOut.Lock()
	defer ackOut.Unlock()
	if dir := os.Getenv("BERNSTEIN_TEST_ACKLOG"); dir != "" {
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
		if _, err := ackOut.log.WriteString(line); err != nil {
			fmt.Fprintln(os.Stderr, "acknowledgement log:", err)
			os.Exit(1)
		}
		if err := ackOut.log.Sync(); err != nil {
			fmt.Fprintln(os.Stderr, "acknowledgement log:", err)
			os.Exit(1)
		}
	}
	os.Stdout.WriteString(line)
}

func syncPath(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// chaosPosterHooks: with BERNSTEIN_TEST_COUNT_COMPACTIONS set, the poster
// prints "compacted" each time its store's compaction has installed a
// merged pack (the pack directory synced, called from Compact), the only
// place a compaction shows from outside the store.
func chaosPosterHooks() {
	if os.Getenv("BERNSTEIN_TEST_COUNT_COMPACTIONS") == "" || gitstore.FaultHook != nil {
		return
	}
	gitstore.FaultHook = func(step string) error {
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
