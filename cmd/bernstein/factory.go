package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/servecmd"
)

// Every command has the shape of the GitHub CLI's: an options struct, a
// constructor (newXCmd) that only parses flags into it, and a run function
// (xRun) that does the work on the options' streams. A constructor takes a
// runF that, when not nil, runs instead of the run function, so that tests
// can capture the parsed options; tests drive the run functions with
// in-memory streams.

// IO is where a command reads and writes; tests swap it.
type IO struct {
	In     io.Reader
	Out    io.Writer
	Err    io.Writer
	IsTTY  bool // stdout is a terminal: tables, not tab-separated lines
	ErrTTY bool // stderr is a terminal: progress may rewrite its line
}

func newIO() *IO {
	tty := term.IsTerminal(int(os.Stdout.Fd()))
	if v := os.Getenv("BERNSTEIN_FORCE_TTY"); v != "" {
		tty = v != "0" && v != "false"
	}
	return &IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, IsTTY: tty, ErrTTY: term.IsTerminal(int(os.Stderr.Fd()))}
}

// factory is what every command is built from: its streams and the global
// flags, which name the repository (read when the command runs, after
// cobra parsed them).
type factory struct {
	IO             *IO
	repo           string
	allowedSigners string
}

// Options are the library's options the global flags (and their
// environment variables) give.
func (f *factory) Options() bernstein.Options {
	as := f.allowedSigners
	if as == "" {
		as = os.Getenv("BERNSTEIN_ALLOWED_SIGNERS")
	}
	o := bernstein.Options{Repo: f.repo, AllowedSigners: as}
	// Warnings after a committed write go to stderr.
	if w := f.IO.Err; w != nil {
		o.Warn = func(msg string) { fmt.Fprintln(w, "warning: "+msg) }
	}
	return o
}

// Store opens the repository the global flags name.
func (f *factory) Store() (*bernstein.Store, error) {
	return bernstein.Open(f.Options())
}

// openFunc opens a store: a command's options hold one, so that its run
// function opens the repository only once its input is known to be good.
type openFunc func() (*bernstein.Store, error)

// withStore opens the store, runs use on it and closes it: the one place a
// command opens the repository.
var withStore = servecmd.WithStore

// envDefault is a flag's value, else its environment variable's.
func envDefault(flag, env string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(env)
}
