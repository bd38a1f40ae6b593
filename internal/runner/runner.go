// Package runner runs the commands that produce work: a task's gates and
// evidence producers. A command runs in a process group of its own (killed
// whole at its timeout), with no input, and its combined output is kept up
// to a cap; its exit status, or why it could not start, is the outcome.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Options say where and how a command runs.
type Options struct {
	Dir     string        // working directory ("": the current one)
	Env     []string      // variables added to this process's environment
	Timeout time.Duration // 0: none
	Stream  io.Writer     // also copy the output here as it comes (optional)
	Limit   int           // bytes of output kept; the rest is drained
}

// Result is the outcome of one command.
type Result struct {
	ExitCode int64 // 128+N when killed by signal N; 127 when it could not start
	Output   []byte
}

// Run runs a shell command (sh -c shell), or argv directly when it is not
// nil, capturing its combined output up to o.Limit.
func Run(shell string, argv []string, o Options) Result {
	ctx := context.Background()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	var cmd *exec.Cmd
	if argv != nil {
		cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	} else {
		cmd = exec.CommandContext(ctx, "sh", "-c", shell)
	}
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.Stdin = nil
	buf := &capped{limit: o.Limit}
	var w io.Writer = buf
	if o.Stream != nil {
		w = io.MultiWriter(buf, o.Stream)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	run := Result{Output: buf.b}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		run.ExitCode = int64(ee.ExitCode())
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			run.ExitCode = 128 + int64(st.Signal())
		}
	default:
		// The command could not start: that is a failed attempt, with why.
		run.ExitCode = 127
		run.Output = append(run.Output, []byte(err.Error()+"\n")...)
	}
	if ctx.Err() == context.DeadlineExceeded {
		run.Output = append(run.Output, []byte(fmt.Sprintf("\nbernstein: killed after the %s timeout\n", o.Timeout))...)
	}
	return run
}

// capped keeps the first limit bytes written and discards the rest.
type capped struct {
	b     []byte
	limit int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.limit - len(c.b); room > 0 {
		if len(p) > room {
			c.b = append(c.b, p[:room]...)
		} else {
			c.b = append(c.b, p...)
		}
	}
	return len(p), nil
}

// ShellJoin quotes argv for display as one command line.
func ShellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
