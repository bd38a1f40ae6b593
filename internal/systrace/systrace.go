// Package systrace runs a test binary's child under strace and reads back
// the file system calls that durability rests on (fsync, rename, unlink), so
// tests can check their order against what the disk requires.
package systrace

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Event is one traced call: an fsync of Path, a rename From to Path, an
// unlink of Path, a create (an open with O_CREAT that succeeded) of Path, or
// a write to Path (Fd is the descriptor written to: 1 is stdout).
type Event struct {
	Call string // fsync, rename, unlink, create, write
	Path string
	From string
	Fd   int
}

var (
	reOpen   = regexp.MustCompile(`^openat\(AT_FDCWD(?:<[^>]*>)?, "([^"]+)", [^)]*\) = (\d+)`)
	reFsync  = regexp.MustCompile(`^f(?:data)?sync\((\d+)<([^>]*)>\) = 0`)
	reClose  = regexp.MustCompile(`^close\((\d+)(?:<[^>]*>)?\)`)
	reRename = regexp.MustCompile(`^rename(?:at2?)?\((?:AT_FDCWD(?:<[^>]*>)?, )?"([^"]+)", (?:AT_FDCWD(?:<[^>]*>)?, )?"([^"]+)"(?:, \w+)?\) = 0`)
	reWrite  = regexp.MustCompile(`^write\((\d+)<([^>]*)>, `)
	reUnlink = regexp.MustCompile(`^unlink(?:at)?\((?:AT_FDCWD(?:<[^>]*>)?, )?"([^"]+)"(?:, \w+)?\) = 0`)
	rePid    = regexp.MustCompile(`^(\d+) +(.*)$`)
	reSpaces = regexp.MustCompile(`\s+=`)
)

// Child runs the test binary itself (with -test.run=^$, so only its
// TestMain runs) under strace with env added, and returns its calls and its
// output. It skips the test where strace is missing or cannot trace.
func Child(t testing.TB, env ...string) ([]Event, string) {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	// -y prints each fd's path, so an fsync names what it synced even when
	// another thread's close and open of the same fd number interleave.
	cmd := exec.Command(strace, "-f", "-y", "-qq", "-e", "trace=openat,close,fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat,write", "-o", trace, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("ptrace")) || bytes.Contains(out, []byte("Operation not permitted")) {
			t.Skipf("strace cannot trace here: %s", out)
		}
		t.Fatalf("child under strace: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(string(raw)), string(out)
}

// Parse reads strace -f -y output into events.
func Parse(raw string) []Event {
	// Join "<unfinished ...>" lines with their "<... resumed>" ends.
	pending := map[string]string{}
	fds := map[string]string{}
	var evs []Event
	for _, line := range strings.Split(raw, "\n") {
		m := rePid.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pid, rest := m[1], m[2]
		if strings.HasSuffix(rest, "<unfinished ...>") {
			pending[pid] = strings.TrimRight(strings.TrimSuffix(rest, "<unfinished ...>"), " ")
			continue
		}
		if strings.HasPrefix(rest, "<... ") {
			_, after, ok := strings.Cut(rest, "resumed>")
			if !ok {
				continue
			}
			rest = pending[pid] + after
			delete(pending, pid)
		}
		rest = reSpaces.ReplaceAllString(rest, " =")
		switch {
		case reOpen.MatchString(rest):
			s := reOpen.FindStringSubmatch(rest)
			fds[s[2]] = s[1]
			if strings.Contains(rest, "O_CREAT") {
				evs = append(evs, Event{Call: "create", Path: s[1]})
			}
		case reWrite.MatchString(rest):
			s := reWrite.FindStringSubmatch(rest)
			fd, _ := strconv.Atoi(s[1])
			evs = append(evs, Event{Call: "write", Path: s[2], Fd: fd})
		case reFsync.MatchString(rest):
			s := reFsync.FindStringSubmatch(rest)
			evs = append(evs, Event{Call: "fsync", Path: s[2]})
		case reClose.MatchString(rest):
			delete(fds, reClose.FindStringSubmatch(rest)[1])
		case reRename.MatchString(rest):
			s := reRename.FindStringSubmatch(rest)
			evs = append(evs, Event{Call: "rename", From: s[1], Path: s[2]})
		case reUnlink.MatchString(rest):
			evs = append(evs, Event{Call: "unlink", Path: reUnlink.FindStringSubmatch(rest)[1]})
		}
	}
	return evs
}

// Find returns the index of the first event of call on path at or after
// from, or -1.
func Find(evs []Event, call, path string, from int) int {
	for i := from; i < len(evs); i++ {
		if evs[i].Call == call && evs[i].Path == path {
			return i
		}
	}
	return -1
}
