package witnesstest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process whose output lines are watched for readiness.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed

	mu   sync.Mutex
	tail []string // the last lines of its output, for failure messages
}

// startProc starts cmd and calls onLine with each line it writes to stdout
// or stderr.
func startProc(cmd *exec.Cmd, onLine func(string)) (*proc, error) {
	r, wr := io.Pipe()
	cmd.Stdout, cmd.Stderr = wr, wr
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.keep(sc.Text())
			onLine(sc.Text())
		}
		io.Copy(io.Discard, r)
	}()
	go func() {
		p.err = cmd.Wait()
		wr.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) keep(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tail = append(p.tail, line); len(p.tail) > 40 {
		p.tail = p.tail[1:]
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// await returns the first value sent on ready, or an error if the process
// exits or the timeout passes first.
func await[T any](p *proc, ready <-chan T, timeout time.Duration) (T, error) {
	var zero T
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ready:
		return v, nil
	case <-p.exited:
		return zero, fmt.Errorf("%s exited (%v):\n%s", p.cmd.Path, p.err, p.output())
	case <-timer.C:
		return zero, fmt.Errorf("%s not ready after %v:\n%s", p.cmd.Path, timeout, p.output())
	}
}

// awaitListening waits until addr accepts a connection. litewitness logs
// "listening" just before it binds, so a refused connection is retried until
// it binds or exits.
func (p *proc) awaitListening(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	backoff := time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			return nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("connecting to %s: %w\n%s", addr, err, p.output())
		}
		retry := time.NewTimer(backoff)
		select {
		case <-p.exited:
			retry.Stop()
			return fmt.Errorf("%s exited (%v):\n%s", p.cmd.Path, p.err, p.output())
		case <-ctx.Done():
			retry.Stop()
			return fmt.Errorf("%s not listening on %s after %v:\n%s", p.cmd.Path, addr, timeout, p.output())
		case <-retry.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// stop interrupts the process and waits for it, killing it if it lingers.
func (p *proc) stop() {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
		return
	case <-time.After(30 * time.Second):
	}
	p.cmd.Process.Kill()
	<-p.exited
}
