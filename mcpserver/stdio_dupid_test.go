package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein/mcpserver"
)

// holdServer is an MCP server whose tool "hold" stays inside its handler,
// once it has said so on entered, until release is closed (with hold
// false it answers at once).
func holdServer() (srv *mcp.Server, entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 8), make(chan struct{})
	srv = mcp.NewServer(&mcp.Implementation{Name: "hold", Version: "1"}, nil)
	type in struct {
		Hold bool `json:"hold,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		if a.Hold {
			entered <- struct{}{}
			<-release
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	return srv, entered, release
}

// TestStdioDuplicateInFlightID: a call whose id is that of a call still in
// flight is answered at once with a -32600 error carrying that id (the SDK
// alone would drop it and the end of input would then wait two minutes for
// its answer); the call in flight is answered as usual, the id may be used
// again once answered, a batch holding it is refused whole, and closing the
// input ends the session at once.
func TestStdioDuplicateInFlightID(t *testing.T) {
	srv, entered, release := holdServer()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(ctx, mcpserver.StdioTransport(inR, outW))
		outW.Close()
	}()
	defer outR.Close()
	c := &stdioSession{t: t, in: inW, out: bufio.NewReader(outR), done: done}
	c.initialize("2025-03-26") // a version with JSON-RPC batches

	held := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"hold","arguments":{"hold":true}}}`
	quick := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"hold","arguments":{}}}`
	c.send(held)
	<-entered // call 7 is inside its handler
	c.send(quick)
	m := c.next()
	if string(m.ID) != "7" || m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "not yet answered") {
		t.Fatalf("a second call 7 while 7 is in flight: %s", m.raw)
	}
	c.send(`[{"jsonrpc":"2.0","id":8,"method":"ping"},` + quick + `]`)
	if m := c.next(); string(m.ID) != "null" || m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "batch message 1 repeats the id 7") {
		t.Fatalf("a batch repeating id 7: %s", m.raw)
	}
	close(release)
	if m := c.next(); string(m.ID) != "7" || m.Error != nil || !strings.Contains(string(m.Result), "done") {
		t.Fatalf("the call in flight: %s", m.raw)
	}
	// Answered: the id is free again.
	c.send(quick)
	if m := c.next(); string(m.ID) != "7" || m.Error != nil || !strings.Contains(string(m.Result), "done") {
		t.Fatalf("id 7 again once answered: %s", m.raw)
	}
	// Nothing is pending: the end of input ends the session at once.
	c.close()
}

// TestStdioDuplicateIDRealClient: the SDK's own client, whose call line is
// sent twice while the first copy is in flight, reads the JSON-RPC error
// for it; the session goes on serving it, and ends when it closes.
func TestStdioDuplicateIDRealClient(t *testing.T) {
	srv, entered, release := holdServer()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(ctx, mcpserver.StdioTransport(inR, outW))
		outW.Close()
	}()
	tap := &doubler{w: inW}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: tap}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tap.arm()
	callErr := make(chan error, 1)
	go func() {
		// Bounded: without its answer the call would wait for ever.
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{"hold": true}})
		callErr <- err
	}()
	<-entered
	err = <-callErr
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(je.Message, "not yet answered") {
		t.Fatalf("the client's call sent twice: %v", err)
	}
	close(release)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("the next call: %v %+v", err, res)
	}
	cs.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the session did not end after the client closed")
	}
}

// doubler passes the client's lines on, and once armed writes the next
// tools/call line twice.
type doubler struct {
	w     io.WriteCloser
	mu    sync.Mutex
	armed bool
}

func (d *doubler) arm() { d.mu.Lock(); d.armed = true; d.mu.Unlock() }

func (d *doubler) Write(p []byte) (int, error) {
	d.mu.Lock()
	twice := d.armed && bytes.Contains(p, []byte(`"tools/call"`))
	if twice {
		d.armed = false
	}
	d.mu.Unlock()
	if twice {
		if _, err := d.w.Write(p); err != nil {
			return 0, err
		}
	}
	return d.w.Write(p)
}

func (d *doubler) Close() error { return d.w.Close() }
