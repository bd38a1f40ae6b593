// Package servecmd is what the bernstein program and its HTTP server
// program, bernstein-serve, share: the server program's name, how bernstein
// finds and runs it, and the help and flags of the commands it runs
// ('bernstein serve', 'bernstein mcp --http').
//
// The server is a program of its own because Go initialises every linked
// package before main: the markdown renderer and HTML sanitizer only the
// pages need (goldmark, bluemonday, gorilla/css, x/net/html) would
// otherwise be initialised at the start of every CLI command, a post
// included (docs/performance.md, Start-up). This package imports neither
// them nor the server.
package servecmd

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/keys"
)

// Program is the name of the server program.
const Program = "bernstein-serve"

// InstallCommand installs bernstein and the server program side by side.
const InstallCommand = "go install github.com/bernstein/bernstein/cmd/...@latest"

// Install says how the server program is installed.
const Install = InstallCommand + " (installs bernstein and bernstein-serve side by side; 'make build' builds both into bin/)"

// DefaultAddr is where 'bernstein serve' listens unless told otherwise
// (server.DefaultAddr, which a test of bernstein-serve holds equal).
const DefaultAddr = "127.0.0.1:7420"

// MCPTools lists the MCP tools in the help of 'bernstein mcp' and 'serve'.
const MCPTools = `Tools:
  bernstein_post_artifact  task_id, key, artifact_type (report | table | link)
                           and per type body | columns + rows | url + link_kind:
                           post a version to a task whose live claim the
                           caller holds
  bernstein_task_handle    task_id: taskId, status, journalHead, spineHead,
                           progress, progressHash and receiptHash of a task`

// ServeUse and ServeShort are the first lines of serve's help.
const (
	ServeUse   = "serve [--addr ADDR] [--allow-remote] [--read-token T]"
	ServeShort = "Serve bernstein over HTTP: the pages, the task API, events and MCP"
)

// ServeLong is the help of 'bernstein serve'.
const ServeLong = `Serve bernstein over HTTP on ADDR, loopback only unless --allow-remote.

  /              the tasks; /tasks/{id} one task, live
  /api/v1        the task API (JSON); /api/v1/events the event stream (SSE)
  /mcp           the MCP tools over streamable HTTP; each request carries
                 'Authorization: Bearer <claim token>' (the token 'bernstein
                 task claim' printed), which stands for one agent on one task
                 and stops working the moment the claim is released or the
                 task ends (401)

` + MCPTools + `

Who may see what (docs/http.md, Security): on loopback, reads are open and
writes need a claim token. With --allow-remote every request but MCP's also
needs the read token: serve generates one at start (or takes --read-token,
or BERNSTEIN_READ_TOKEN) and prints the URL that carries it; a page opened
from that URL keeps the token in a cookie, and API clients send
'Authorization: Bearer <read token>'. A read token given without
--allow-remote is required on loopback too. Cross-origin writes are refused.

Every connection has read, write and idle timeouts; connections, event
streams and MCP sessions are capped, and idle MCP sessions are closed.

Port 0 picks a free port. The URL is printed on stderr once the server
listens.

The server is the program bernstein-serve, installed beside bernstein: 'make
build' builds both into bin/, and this installs both side by side:

  ` + InstallCommand + `

'bernstein serve' runs it in its own place, with the same arguments,
environment and streams.

Exit status: 0 on SIGINT/SIGTERM; 1 on bad flags, a repository that cannot
be opened, an address that cannot be listened on, or no bernstein-serve.`

// ServeFlags are serve's own flags.
type ServeFlags struct {
	Addr        string
	AllowRemote bool
	ReadToken   string // default $BERNSTEIN_READ_TOKEN (applied by the server program)
}

// Bind defines serve's flags on fs.
func (o *ServeFlags) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "addr", DefaultAddr, "listen on ADDR (host:port)")
	fs.BoolVar(&o.AllowRemote, "allow-remote", false, "allow an address that is not on loopback (requires a read token: generated unless given)")
	fs.StringVar(&o.ReadToken, "read-token", "", "the read token every request but MCP's must show (default $BERNSTEIN_READ_TOKEN; generated with --allow-remote)")
}

// PassOn is the command line the server program gets for a command that
// bernstein parsed: the command's name, then every flag given (its own and
// the global ones), as --name=value. Nothing taken from the environment is
// added (a read token in the environment stays there, out of the process
// list); the server program reads the environment itself.
func PassOn(name string, fs *pflag.FlagSet) []string {
	args := []string{name}
	fs.Visit(func(f *pflag.Flag) {
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}

// Locate finds the server program for the program at self: beside it
// first (where 'make build' and 'go install' put both), then on PATH.
func Locate(self string) (string, error) {
	var beside string
	if self != "" {
		beside = filepath.Join(filepath.Dir(self), Program)
		if isExecutable(beside) {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(Program); err == nil {
		return filepath.Abs(p)
	}
	where := "on PATH"
	if beside != "" {
		where = "at " + beside + " nor on PATH"
	}
	return "", fmt.Errorf("the HTTP server is the program %s, found neither %s: install it with %s", Program, where, Install)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Exec replaces this process with the server program, found beside this
// program or on PATH, run with args and this process's environment; its
// streams, process id, signals and exit status are then the server's. It
// returns only when the program is missing or cannot be run.
func Exec(args []string) error {
	self, err := os.Executable()
	if err != nil {
		self = ""
	}
	path, err := Locate(self)
	if err != nil {
		return err
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("run %s: %w", path, err)
}

// OpenMessage is the wording, in both programs, of the errors opening a
// repository can meet; ok is false for any other error.
func OpenMessage(err error) (msg string, ok bool) {
	switch {
	case errors.Is(err, keys.ErrNoIdentity):
		return "no writer identity in BERNSTEIN_HOME: run 'bernstein init' first", true
	case errors.Is(err, bernstein.ErrNotRepository):
		return err.Error() + " (use --repo DIR or run 'bernstein init' in an empty folder)", true
	}
	return "", false
}

// OneLine is the first line of s, trimmed: an error as both programs print it.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// WithStore opens the store, runs use on it and closes it: the one place a
// command of either program opens the repository.
func WithStore(open func() (*bernstein.Store, error), use func(*bernstein.Store) error) error {
	s, err := open()
	if err != nil {
		return err
	}
	defer s.Close()
	return use(s)
}

// UsageTemplate is cobra's usage template t fitted to 80 columns, as the
// rest of both programs' --help is written: flag descriptions wrap aligned
// under their column, and the closing line is shorter.
func UsageTemplate(t string) string {
	t = strings.ReplaceAll(t, ".FlagUsages |", ".FlagUsagesWrapped 80 |")
	return strings.ReplaceAll(t, "--help\" for more information about a command.", "--help\" for more about a command.")
}
