// Package git is bernstein's one way to git: every git subprocess, every
// read of git's configuration and the repository-format check go through
// it, each call under one of two environment policies (docs/architecture.md,
// The git layer). bernstein reads and writes objects and refs itself
// (gitstore, refs); git is asked only what git alone knows.
package git

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Policy says how much of the user's git environment a call sees.
type Policy int

const (
	// Isolated is for a call whose output bernstein stores or decides on,
	// and for local plumbing: an environment built from nothing but PATH
	// (and TMPDIR, git's own GIT_EXEC_PATH and tracing), so no system,
	// global or environment configuration, no global attributes file, no
	// variable that chooses another repository, object directory or index,
	// no replace refs, and messages in English. The repository's own config
	// file is still read (a command that must not depend on it sets its
	// options itself, or runs in a git directory of its own).
	Isolated Policy = iota
	// User is for questions about the user's own setup (where the
	// repository, its work tree and its hooks are; its remotes and their
	// URLs) and for the commands that talk to a remote (fetch, push,
	// clone): the user's environment and configuration as their own git
	// sees them (credential helpers, url.insteadOf, core.hooksPath,
	// safe.directory, proxies), with messages in English, which are read.
	User
)

// isolatedVars replace, for an Isolated call, what the user's environment
// would configure.
var isolatedVars = []string{
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_ATTR_NOSYSTEM=1",
	"GIT_NO_REPLACE_OBJECTS=1",
	// The global attributes file is read even without a global config.
	"GIT_CONFIG_COUNT=1",
	"GIT_CONFIG_KEY_0=core.attributesFile",
	"GIT_CONFIG_VALUE_0=/dev/null",
}

// Env is the environment of a git call under p; extra variables are added
// last, so they win.
func Env(p Policy, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LC_ALL" || k == "LANGUAGE" {
			continue
		}
		if p == Isolated && !kept(k) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LC_ALL=C", "LANGUAGE=")
	if p == Isolated {
		env = append(env, isolatedVars...)
	}
	return append(env, extra...)
}

// kept reports whether an Isolated call keeps the user's variable k: where
// programs and temporary files go, where git finds its own programs, and
// tracing (a user debugging bernstein wants it; it goes to stderr or a file).
func kept(k string) bool {
	switch k {
	case "PATH", "TMPDIR", "GIT_EXEC_PATH", "GIT_TRACE":
		return true
	}
	return strings.HasPrefix(k, "GIT_TRACE_") || strings.HasPrefix(k, "GIT_TRACE2")
}

// Cmd is one run of git.
type Cmd struct {
	Policy Policy
	Dir    string   // git -C Dir
	GitDir string   // git --git-dir GitDir
	Config []string // git -c key=value, each
	Args   []string
	Stdin  []byte
	Env    []string // further variables (they win over the policy's)
}

func (c Cmd) command() *exec.Cmd {
	var args []string
	if c.Dir != "" {
		args = append(args, "-C", c.Dir)
	}
	if c.GitDir != "" {
		args = append(args, "--git-dir", c.GitDir)
	}
	for _, kv := range c.Config {
		args = append(args, "-c", kv)
	}
	cmd := exec.Command("git", append(args, c.Args...)...)
	cmd.Env = Env(c.Policy, c.Env...)
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	return cmd
}

// Run runs c and returns what git printed on each stream.
func (c Cmd) Run() (stdout, stderr []byte, err error) {
	cmd := c.command()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

// Output runs c and returns its standard output; its error says "git
// <command>: " and git's message.
func (c Cmd) Output() ([]byte, error) {
	out, errb, err := c.Run()
	if err != nil {
		verb := ""
		if len(c.Args) > 0 {
			verb = c.Args[0]
		}
		return out, fmt.Errorf("git %s: %s", verb, Message(errb))
	}
	return out, nil
}

// ExitCode is the exit status of a git run that ran and failed, else -1.
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// Message is git's complaint, one line per line, without its prefixes.
func Message(stderr []byte) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(stderr)), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "hint:") {
			continue
		}
		l = strings.TrimPrefix(strings.TrimPrefix(l, "fatal: "), "error: ")
		lines = append(lines, l)
	}
	return strings.Join(lines, "; ")
}

// RevParse asks git rev-parse, in dir, about the user's repository (its
// directories, work tree and hooks, as the user's git finds them) and
// returns its lines of output.
func RevParse(dir string, args ...string) ([]string, error) {
	out, errb, err := Cmd{Policy: User, Dir: dir, Args: append([]string{"rev-parse"}, args...)}.Run()
	if err != nil {
		return nil, &RevParseError{Dir: dir, Msg: Message(errb)}
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// RevParseError is a rev-parse that failed; Msg is git's message.
type RevParseError struct {
	Dir, Msg string
}

func (e *RevParseError) Error() string { return e.Dir + ": " + e.Msg }

// TopLevel is the top of the work tree dir is in ("" with an error when it
// is in none, as in a bare repository).
func TopLevel(dir string) (string, error) {
	lines, err := RevParse(dir, "--show-toplevel")
	if err != nil {
		return "", err
	}
	return lines[0], nil
}

// Init makes a new repository in dir (git init), in the sha1 object format
// whatever the user's default (init.defaultObjectFormat,
// GIT_DEFAULT_HASH): bernstein writes SHA-1 objects only. Otherwise it is
// the user's repository, made as their own git init makes one (template,
// default branch).
func Init(dir string) error {
	// The variable takes precedence over the config, and a git too old to
	// know it makes sha1 repositories anyway.
	out, errb, err := Cmd{Policy: User, Args: []string{"init", "-q", dir}, Env: []string{"GIT_DEFAULT_HASH=sha1"}}.Run()
	if err != nil {
		return fmt.Errorf("git init %s: %s", dir, strings.TrimSpace(string(append(out, errb...))))
	}
	return nil
}

// EnsureRepo runs `git init` in dir when it is missing or empty (Init:
// the new repository uses the sha1 object format), and reports whether it
// did.
func EnsureRepo(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return false, err
	case len(ents) > 0:
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	if err := Init(dir); err != nil {
		return false, err
	}
	return true, nil
}

// fsyncComponents is what git syncs in a bernstein repository: its default
// (packs and their metadata) plus references. Without "reference", a `git
// pack-refs` or `git gc` that moves bernstein's refs into packed-refs does
// not sync that file, and a power cut could then lose a ref that a post had
// already made durable.
const fsyncComponents = "pack,derived-metadata,reference"

// ConfigureFsync sets core.fsync in the repository's own config unless it
// is set already (anywhere git reads it). It reports whether it set it.
func ConfigureFsync(gitDir string) (bool, error) {
	if IsConfigSet(gitDir, "core.fsync") {
		return false, nil
	}
	if err := SetConfig(gitDir, "core.fsync", fsyncComponents, false); err != nil {
		return false, fmt.Errorf("git config core.fsync: %w", err)
	}
	return true, nil
}
