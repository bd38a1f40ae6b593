package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport speaks MCP as newline-delimited JSON over in and out. When
// the client closes its input, the calls it already sent are answered
// before the session ends: a client that writes its requests and closes the
// pipe still reads every response (a post that was made is never left
// unacknowledged).
func StdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	calls := &inFlight{}
	calls.cond = sync.NewCond(&calls.mu)
	return &mcp.IOTransport{
		Reader: &drainingReader{in: bufio.NewReaderSize(in, 64<<10), calls: calls},
		Writer: &answeringWriter{out: out, calls: calls},
	}
}

// drainWait bounds how long the end of input waits for outstanding answers.
const drainWait = 2 * time.Minute

// maxCountedLine is the longest input line whose calls are counted; the
// SDK refuses longer lines itself.
const maxCountedLine = mcp.DefaultMaxLineLength + 1

// inFlight counts the calls read and the responses written.
type inFlight struct {
	mu       sync.Mutex
	cond     *sync.Cond
	calls    int
	answered int
	closed   bool // the session is closing: nothing more will be answered
}

func (f *inFlight) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (f *inFlight) add(calls, answered int) {
	f.mu.Lock()
	f.calls += calls
	f.answered += answered
	f.mu.Unlock()
	f.cond.Broadcast()
}

// wait returns once every call read has been answered, or after limit.
func (f *inFlight) wait(limit time.Duration) {
	timer := time.AfterFunc(limit, f.close)
	defer timer.Stop()
	f.mu.Lock()
	for f.answered < f.calls && !f.closed {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

// messages counts, in one JSON-RPC line (a message or a batch), the calls
// (id and method) and the responses (id, no method).
func messages(line []byte) (calls, responses int) {
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	var ms []msg
	line = bytes.TrimSpace(line)
	if len(line) > 0 && line[0] == '[' {
		if json.Unmarshal(line, &ms) != nil {
			return 0, 0
		}
	} else {
		var m msg
		if json.Unmarshal(line, &m) != nil {
			return 0, 0
		}
		ms = []msg{m}
	}
	for _, m := range ms {
		hasID := len(m.ID) > 0 && !bytes.Equal(m.ID, []byte("null"))
		switch {
		case hasID && m.Method != "":
			calls++
		case hasID:
			responses++
		}
	}
	return calls, responses
}

// drainingReader passes the input through line by line, counting calls,
// and holds back the end of input until they are answered.
type drainingReader struct {
	in    *bufio.Reader
	calls *inFlight
	line  []byte // the line being read (kept whole up to maxCountedLine)
	rest  []byte // bytes read but not yet returned
	long  bool   // the current line is too long to count
}

func (r *drainingReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		chunk, err := r.in.ReadSlice('\n')
		if len(chunk) > 0 {
			r.rest = append(r.rest[:0], chunk...)
			if !r.long {
				r.line = append(r.line, chunk...)
				if len(r.line) > maxCountedLine {
					r.long, r.line = true, r.line[:0]
				}
			}
			if chunk[len(chunk)-1] == '\n' {
				if !r.long {
					if n, _ := messages(r.line); n > 0 {
						r.calls.add(n, 0)
					}
				}
				r.line, r.long = r.line[:0], false
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(r.line) > 0 && !r.long {
				// A last line without its newline is a message too.
				if n, _ := messages(r.line); n > 0 {
					r.calls.add(n, 0)
				}
				r.line = r.line[:0]
			}
			if len(r.rest) > 0 {
				break
			}
			if err == io.EOF {
				r.calls.wait(drainWait)
			}
			return 0, err
		}
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

func (r *drainingReader) Close() error {
	r.calls.close()
	return nil
}

// answeringWriter passes output through, counting the responses: the SDK
// writes one whole line (a message or a batch) per Write.
type answeringWriter struct {
	out   io.Writer
	calls *inFlight
}

func (w *answeringWriter) Write(p []byte) (int, error) {
	n, err := w.out.Write(p)
	if _, answered := messages(p); answered > 0 {
		w.calls.add(0, answered)
	}
	return n, err
}

func (w *answeringWriter) Close() error {
	w.calls.close()
	return nil
}
