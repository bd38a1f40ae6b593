package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport speaks MCP as newline-delimited JSON over in and out.
//
// Each input line is one JSON-RPC message (or batch). A line that is not
// one is answered and skipped, and the session goes on: a line that is not
// JSON gets a -32700 parse error, JSON that is not a JSON-RPC message (or a
// batch the session cannot take) a -32600 invalid request, both with id
// null unless the message's own id could be read. Blank lines are ignored.
// A message must be on one line, as MCP's stdio transport requires: one
// spread over several lines is refused line by line. (The SDK's own
// transport ends the session on the first line it cannot take.)
//
// A call whose id is that of a call not yet answered is answered with a
// -32600 invalid request (with that id) and not passed on: the SDK would
// drop it without an answer.
//
// When the client closes its input, the calls it already sent are answered
// before the session ends: a client that writes its requests and closes the
// pipe still reads every response (a post that was made is never left
// unacknowledged).
func StdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	calls := &inFlight{inits: map[string]bool{}, pending: map[string]bool{}}
	calls.cond = sync.NewCond(&calls.mu)
	w := &answeringWriter{out: out, calls: calls}
	return &mcp.IOTransport{
		Reader: &drainingReader{in: bufio.NewReaderSize(in, 64<<10), calls: calls, out: w},
		Writer: w,
		// Every line the SDK reads has been checked and bounded here.
		MaxLineLength: -1,
	}
}

// drainWait bounds how long the end of input waits for outstanding answers.
const drainWait = 2 * time.Minute

// initWait bounds how long a batch waits for the answer to initialize.
const initWait = 30 * time.Second

// maxLine is the longest input line read as a message (the SDK's own
// bound); a longer one is answered as an invalid request and skipped.
const maxLine = mcp.DefaultMaxLineLength

// maxDepth is the deepest nesting of arrays and objects the SDK decodes.
const maxDepth = 1000

// batchesUntil is the first protocol version without JSON-RPC batches; the
// SDK ends a session that sends one once such a version is negotiated.
const batchesUntil = "2025-06-18"

// inFlight holds the ids of the calls read and not yet answered, and
// follows the initialize calls to learn the negotiated protocol version.
type inFlight struct {
	mu       sync.Mutex
	cond     *sync.Cond
	pending  map[string]bool // keys (keyOf) of the calls read and not yet answered
	closed   bool            // the session is closing: nothing more will be answered
	inits    map[string]bool // ids of initialize calls not yet answered
	protocol string          // the protocol version the server answered
}

func (f *inFlight) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cond.Broadcast()
}

// answered drops the calls of keys from the pending ones.
func (f *inFlight) answered(keys []string) {
	f.mu.Lock()
	for _, k := range keys {
		delete(f.pending, k)
	}
	f.mu.Unlock()
	f.cond.Broadcast()
}

// wait returns once every call read has been answered, or after limit.
func (f *inFlight) wait(limit time.Duration) {
	f.waitFor(limit, func() bool { return len(f.pending) == 0 })
}

// negotiated returns the protocol version once every initialize call read
// so far is answered (or after limit).
func (f *inFlight) negotiated(limit time.Duration) string {
	f.waitFor(limit, func() bool { return len(f.inits) == 0 })
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.protocol
}

// waitFor waits until done holds (called with f.mu held), the session
// closes or limit passes.
func (f *inFlight) waitFor(limit time.Duration, done func() bool) {
	expired := false
	timer := time.AfterFunc(limit, func() {
		f.mu.Lock()
		expired = true
		f.mu.Unlock()
		f.cond.Broadcast()
	})
	defer timer.Stop()
	f.mu.Lock()
	for !done() && !f.closed && !expired {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

// idKey is the key of a JSON-RPC id as the SDK sees it (1 and 1.0 are one
// id, 1 and "1" two), "" when raw is not a valid id.
func idKey(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil || !id.IsValid() {
		return ""
	}
	return keyOf(id)
}

func keyOf(id jsonrpc.ID) string { return fmt.Sprintf("%T %v", id.Raw(), id.Raw()) }

// wireMsg is what the transport reads of a message.
type wireMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result *struct {
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"result"`
}

func (m wireMsg) hasID() bool { return len(m.ID) > 0 && !bytes.Equal(m.ID, []byte("null")) }

// decodeLine reads one JSON-RPC line (a message or a batch) as wireMsgs.
func decodeLine(line []byte) ([]wireMsg, bool) {
	var ms []wireMsg
	line = bytes.TrimSpace(line)
	if len(line) > 0 && line[0] == '[' {
		if json.Unmarshal(line, &ms) != nil {
			return nil, false
		}
		return ms, true
	}
	var m wireMsg
	if json.Unmarshal(line, &m) != nil {
		return nil, false
	}
	return []wireMsg{m}, true
}

// drainingReader passes the input on line by line: it answers and drops
// the lines that are not JSON-RPC messages, counts the calls, and holds
// back the end of input until they are answered.
type drainingReader struct {
	in    *bufio.Reader
	calls *inFlight
	out   *answeringWriter // where refusals are written
	line  []byte           // the line being read
	rest  []byte           // bytes checked but not yet returned
	eof   bool
}

func (r *drainingReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		if r.eof {
			r.calls.wait(drainWait)
			return 0, io.EOF
		}
		line, tooLong, err := r.readLine()
		if err == io.EOF {
			r.eof = true
		} else if err != nil {
			return 0, err
		}
		if tooLong {
			if werr := r.out.refuse(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: the line is longer than %d bytes and was not read", maxLine)); werr != nil {
				return 0, werr
			}
			continue
		}
		if err := r.check(line); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// readLine reads up to the next newline (or the end of input), dropping
// what is beyond maxLine.
func (r *drainingReader) readLine() (line []byte, tooLong bool, err error) {
	if cap(r.line) > 1<<20 {
		r.line = nil // do not keep a large buffer for the whole session
	}
	r.line = r.line[:0]
	for {
		chunk, err := r.in.ReadSlice('\n')
		if !tooLong {
			if len(r.line)+len(chunk) > maxLine+2 { // the line, "\r\n"
				tooLong, r.line = true, r.line[:0]
			} else {
				r.line = append(r.line, chunk...)
			}
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			return r.line, tooLong, nil
		case io.EOF:
			return r.line, tooLong, io.EOF
		default:
			return nil, false, err
		}
	}
}

// check passes a line on to the SDK if it is a JSON-RPC message or batch
// the session can take, and answers it otherwise.
func (r *drainingReader) check(line []byte) error {
	line = bytes.Trim(line, " \t\r\n") // JSON's white space
	if len(line) == 0 {
		return nil
	}
	if !json.Valid(line) {
		var raw json.RawMessage
		err := json.Unmarshal(line, &raw)
		return r.out.refuse(nil, jsonrpc.CodeParseError, "Parse error: "+errText(err))
	}
	if depth(line) > maxDepth {
		return r.out.refuse(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: nested more than %d levels deep", maxDepth))
	}
	var msgs []jsonrpc.Message
	if line[0] == '[' {
		var why string
		if msgs, why = r.checkBatch(line); why != "" {
			return r.out.refuse(nil, jsonrpc.CodeInvalidRequest, "Invalid Request: "+why)
		}
	} else {
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			return r.out.refuse(readableID(line), jsonrpc.CodeInvalidRequest, "Invalid Request: "+errText(err))
		}
		msgs = []jsonrpc.Message{msg}
	}
	// Hold the calls as the SDK decodes them; a call whose id is still
	// pending is answered here (the SDK would drop it unanswered).
	r.calls.mu.Lock()
	for i, m := range msgs {
		req, ok := m.(*jsonrpc.Request)
		if !ok || !req.IsCall() || !r.calls.pending[keyOf(req.ID)] {
			continue
		}
		r.calls.mu.Unlock()
		b, _ := json.Marshal(req.ID.Raw())
		if len(msgs) > 1 {
			return r.out.refuse(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: batch message %d repeats the id %s of a call not yet answered", i, b))
		}
		return r.out.refuse(b, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: the id %s is that of a call not yet answered", b))
	}
	for _, m := range msgs {
		if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
			r.calls.pending[keyOf(req.ID)] = true
			if req.Method == "initialize" {
				r.calls.inits[keyOf(req.ID)] = true
			}
		}
	}
	r.calls.mu.Unlock()
	r.rest = append(append(r.rest[:0], line...), '\n')
	return nil
}

// checkBatch decodes a batch line, or says what is wrong with it.
func (r *drainingReader) checkBatch(line []byte) (msgs []jsonrpc.Message, why string) {
	var elems []json.RawMessage
	if err := json.Unmarshal(line, &elems); err != nil {
		return nil, "a batch must be an array of messages"
	}
	if len(elems) == 0 {
		return nil, "the batch is empty"
	}
	seen := map[string]bool{}
	for i, e := range elems {
		msg, err := jsonrpc.DecodeMessage(e)
		if err != nil {
			return nil, fmt.Sprintf("batch message %d: %s", i, errText(err))
		}
		msgs = append(msgs, msg)
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			continue
		}
		// The SDK (v1.8.0) answers a batch once every request in it has
		// its response; a notification never has one, so the batch would
		// never be answered (and two would end the session).
		if !req.IsCall() {
			return nil, fmt.Sprintf("batch message %d is a notification: send notifications on their own lines", i)
		}
		k := keyOf(req.ID)
		if seen[k] {
			return nil, fmt.Sprintf("batch message %d repeats the id %v", i, req.ID.Raw())
		}
		seen[k] = true
	}
	// The SDK reads the protocol version when it takes the line: decide on
	// the version the initialize calls already sent were answered with.
	if v := r.calls.negotiated(initWait); v >= batchesUntil {
		return nil, fmt.Sprintf("JSON-RPC batches are not part of MCP %s (the version of this session)", v)
	}
	return msgs, ""
}

// readableID is the id of an invalid message when it is a valid id.
func readableID(line []byte) json.RawMessage {
	var m struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil || m.ID == nil {
		return nil
	}
	id, err := jsonrpc.MakeID(m.ID)
	if err != nil || !id.IsValid() {
		return nil
	}
	b, err := json.Marshal(id.Raw())
	if err != nil {
		return nil
	}
	return b
}

// depth is how deeply arrays and objects nest in a valid JSON text.
func depth(b []byte) int {
	d, most, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if d++; d > most {
				most = d
			}
		case c == '}' || c == ']':
			d--
		}
	}
	return most
}

// errText is err's message on one line.
func errText(err error) string {
	if err == nil {
		return "not a JSON-RPC message"
	}
	return string(bytes.ReplaceAll([]byte(err.Error()), []byte("\n"), []byte(" ")))
}

func (r *drainingReader) Close() error {
	r.calls.close()
	return nil
}

// answeringWriter passes output through, dropping the calls it answers from
// the pending ones (the SDK writes one whole line, a message or a batch, per
// Write) and noting the protocol version initialize answers with.
type answeringWriter struct {
	mu    sync.Mutex // one line at a time: the SDK's and the refusals
	out   io.Writer
	calls *inFlight
}

func (w *answeringWriter) Write(p []byte) (int, error) {
	// The calls are no longer pending before their answers are out (as the
	// SDK forgets them): a client may reuse an id as soon as it reads the
	// answer.
	ms, _ := decodeLine(p)
	var answered []string
	for _, m := range ms {
		if !m.hasID() || m.Method != "" {
			continue
		}
		k := idKey(m.ID)
		answered = append(answered, k)
		w.calls.mu.Lock()
		if w.calls.inits[k] {
			delete(w.calls.inits, k)
			if m.Result != nil && m.Result.ProtocolVersion != "" {
				w.calls.protocol = m.Result.ProtocolVersion
			}
		}
		w.calls.mu.Unlock()
	}
	if len(answered) > 0 {
		w.calls.answered(answered)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}

// refuse writes a JSON-RPC error response for an input line that was not
// passed on; id is null when the line's own id could not be read.
func (w *answeringWriter) refuse(id json.RawMessage, code int64, msg string) error {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: code, Message: msg}})
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.out.Write(append(b, '\n'))
	return err
}

func (w *answeringWriter) Close() error {
	w.calls.close()
	return nil
}
