package refs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bernstein/bernstein/gitstore"
)

var syscallEISDIR = syscall.EISDIR

// Errors a transaction reports; callers branch on them.
var (
	// ErrConflict: a ref was not at the expected old value (compare-and-swap lost).
	ErrConflict = errors.New("ref changed concurrently")
	// ErrLocked: another process holds a ref's lock file beyond the wait.
	ErrLocked = errors.New("ref locked by another process")
)

// Update moves Ref from Old to New. A zero Old means the ref must not exist;
// a zero New deletes it.
type Update struct {
	Ref string
	Old gitstore.Oid
	New gitstore.Oid
}

// Transactor applies atomic multi-ref updates through a long-lived
// `git update-ref --stdin` co-process, so every update takes git's own lock
// files, checks old values under those locks, and commits all refs or none.
type Transactor struct {
	GitDir   string        // the repository's git directory
	LockWait time.Duration // how long to wait for a ref lock held by someone else

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bytes.Buffer
	done   chan struct{}
}

func (t *Transactor) start() error {
	wait := t.LockWait
	if wait == 0 {
		wait = 5 * time.Second
	}
	cmd := exec.Command("git",
		"-c", "core.fsync=reference",
		"-c", "core.fsyncMethod=fsync",
		"-c", "core.warnAmbiguousRefs=false",
		"-c", fmt.Sprintf("core.filesRefLockTimeout=%d", wait.Milliseconds()),
		"update-ref", "--stdin")
	cmd.Env = append(os.Environ(), "GIT_DIR="+t.GitDir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Its own process group: a signal aimed at our group (Ctrl-C) must not
	// kill git between renaming one ref and the next.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start git update-ref: %w", err)
	}
	t.cmd, t.stdin, t.stdout, t.stderr = cmd, stdin, bufio.NewReader(stdout), &stderr
	t.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(cmd, t.done)
	return nil
}

// Apply commits updates atomically. On ErrConflict or ErrLocked nothing moved.
func (t *Transactor) Apply(updates []Update) error {
	if len(updates) == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cmd == nil {
		if err := t.start(); err != nil {
			return err
		}
	}
	var b strings.Builder
	b.WriteString("start\n")
	for _, u := range updates {
		old := u.Old.String()
		fmt.Fprintf(&b, "update %s %s %s\n", u.Ref, u.New.String(), old)
	}
	b.WriteString("prepare\n")
	if _, err := io.WriteString(t.stdin, b.String()); err != nil {
		return t.fail("send transaction", err)
	}
	if err := t.expect("start: ok"); err != nil {
		return err
	}
	if err := t.expect("prepare: ok"); err != nil {
		return err
	}
	if _, err := io.WriteString(t.stdin, "commit\n"); err != nil {
		return t.fail("send commit", err)
	}
	if err := t.expect("commit: ok"); err != nil {
		return err
	}
	// git syncs each ref's lock file before renaming it; syncing the parent
	// directories (all at once) makes the renames themselves durable. A new
	// ref may have created directories: their parents are synced too.
	dirs := map[string]bool{}
	refsDir := filepath.Join(t.GitDir, "refs")
	for _, u := range updates {
		d := filepath.Dir(filepath.Join(t.GitDir, filepath.FromSlash(u.Ref)))
		dirs[d] = true
		if u.Old.IsZero() {
			for p := filepath.Dir(d); len(p) >= len(refsDir); p = filepath.Dir(p) {
				dirs[p] = true
			}
		}
	}
	errs := make(chan error, len(dirs))
	for d := range dirs {
		go func(d string) { errs <- gitstore.SyncDir(d) }(d)
	}
	var first error
	for range dirs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (t *Transactor) expect(want string) error {
	line, err := t.stdout.ReadString('\n')
	if err != nil {
		return t.fail(want, err)
	}
	if strings.TrimSpace(line) != want {
		return t.fail(want, fmt.Errorf("unexpected reply %q", strings.TrimSpace(line)))
	}
	return nil
}

// fail tears the co-process down and classifies what git said.
func (t *Transactor) fail(step string, cause error) error {
	t.stdin.Close()
	<-t.done
	msg := strings.TrimSpace(t.stderr.String())
	t.cmd = nil
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "file exists") || strings.Contains(low, "unable to create") && strings.Contains(low, ".lock"):
		return fmt.Errorf("%w: %s", ErrLocked, firstLine(msg))
	case strings.Contains(low, "but expected") || strings.Contains(low, "reference already exists") ||
		strings.Contains(low, "unable to resolve reference") || strings.Contains(low, "is at "):
		return fmt.Errorf("%w: %s", ErrConflict, firstLine(msg))
	case msg != "":
		return fmt.Errorf("git update-ref: %s", firstLine(msg))
	}
	return fmt.Errorf("git update-ref (%s): %w", step, cause)
}

func firstLine(s string) string {
	s = strings.TrimPrefix(s, "fatal: ")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Close ends the co-process.
func (t *Transactor) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cmd == nil {
		return nil
	}
	t.stdin.Close()
	<-t.done
	t.cmd = nil
	return nil
}
