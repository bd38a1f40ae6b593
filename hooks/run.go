package hooks

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// RunOptions are what a hook run gets from git and from its script.
type RunOptions struct {
	Hook   string   // PreReceive, PrePush or PostCommit
	Args   []string // git's arguments to the hook
	Dir    string   // the directory git ran the hook in
	Stdin  io.Reader
	Stderr io.Writer
	Stdout io.Writer
	// Home is the BERNSTEIN_HOME of the run: the pin file the guard
	// trusts, the writer that records checkpoints.
	Home string
	// AllowedSigners is an allowed_signers file the pre-push check trusts
	// as well (the remote guard trusts its pin file only).
	AllowedSigners string
	Task           string // PostCommit: the task to checkpoint
	TrustFirstUse  bool   // PreReceive
}

// Exit statuses of a hook run.
const (
	ExitOK      = 0 // accepted (and post-commit, always)
	ExitRefused = 1 // a check failed, or the chained hook refused
	ExitError   = 2 // the check could not run; the push is refused as well
)

// Run runs one hook and returns its exit status.
func Run(o RunOptions) int {
	switch o.Hook {
	case PreReceive:
		return runGuard(o)
	case PrePush:
		return runPrePush(o)
	case PostCommit:
		return runPostCommit(o)
	}
	fmt.Fprintf(o.Stderr, "bernstein hooks run: unknown hook %q (pre-receive, pre-push or post-commit)\n", o.Hook)
	return ExitError
}

func (o RunOptions) dir() string {
	if o.Dir != "" {
		return o.Dir
	}
	return "."
}

// open opens the store of the repository the hook runs in, with the home
// of the run (never BERNSTEIN_REPO, which a pusher's environment may carry
// into a local remote's hook).
func (o RunOptions) open(allowedSigners string) (*bernstein.Store, error) {
	dir, err := filepath.Abs(o.dir())
	if err != nil {
		return nil, err
	}
	return bernstein.Open(bernstein.Options{Repo: dir, Home: o.Home, AllowedSigners: allowedSigners})
}

// ParseReceive parses a pre-receive hook's input: "<old> <new> <ref>" lines.
func ParseReceive(in []byte) ([]Update, error) {
	var out []Update
	sc := bufio.NewScanner(bytes.NewReader(in))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("input line %d: want \"<old> <new> <ref>\", got %q", n, line)
		}
		old, err := gitstore.ParseOid(f[0])
		if err != nil {
			return nil, fmt.Errorf("input line %d: %v", n, err)
		}
		nw, err := gitstore.ParseOid(f[1])
		if err != nil {
			return nil, fmt.Errorf("input line %d: %v", n, err)
		}
		out = append(out, Update{Ref: f[2], Old: old, New: nw})
	}
	return out, sc.Err()
}

// PushLine is one line of a pre-push hook's input.
type PushLine struct {
	LocalRef, RemoteRef string
	Local, Remote       gitstore.Oid
}

// ParsePrePush parses a pre-push hook's input: "<local ref> <local sha>
// <remote ref> <remote sha>" lines.
func ParsePrePush(in []byte) ([]PushLine, error) {
	var out []PushLine
	sc := bufio.NewScanner(bytes.NewReader(in))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("input line %d: want \"<local ref> <local sha> <remote ref> <remote sha>\", got %q", n, line)
		}
		local, err := gitstore.ParseOid(f[1])
		if err != nil {
			return nil, fmt.Errorf("input line %d: %v", n, err)
		}
		remote, err := gitstore.ParseOid(f[3])
		if err != nil {
			return nil, fmt.Errorf("input line %d: %v", n, err)
		}
		out = append(out, PushLine{LocalRef: f[0], Local: local, RemoteRef: f[2], Remote: remote})
	}
	return out, sc.Err()
}

// Objects opens the object store a pre-receive hook must read: git's
// GIT_OBJECT_DIRECTORY (the quarantine holding what the push brings) with
// GIT_ALTERNATE_OBJECT_DIRECTORIES (the repository's own objects), else the
// repository's objects directory.
func Objects(gitDir string) (*gitstore.Repo, error) {
	dir := os.Getenv("GIT_OBJECT_DIRECTORY")
	if dir == "" {
		return gitstore.Open(filepath.Join(gitDir, "objects"))
	}
	alts, err := SplitAlternates(os.Getenv("GIT_ALTERNATE_OBJECT_DIRECTORIES"))
	if err != nil {
		return nil, fmt.Errorf("GIT_ALTERNATE_OBJECT_DIRECTORIES: %w", err)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(gitDir, dir)
	}
	for i, a := range alts {
		if !filepath.IsAbs(a) {
			alts[i] = filepath.Join(gitDir, a)
		}
	}
	return gitstore.OpenWithAlternates(dir, alts)
}

// SplitAlternates splits a GIT_ALTERNATE_OBJECT_DIRECTORIES value: paths
// separated by ':', each one possibly C-quoted as git quotes it.
func SplitAlternates(v string) ([]string, error) {
	var out []string
	for len(v) > 0 {
		if v[0] == ':' {
			v = v[1:]
			continue
		}
		if v[0] != '"' {
			p, rest, _ := strings.Cut(v, ":")
			out = append(out, p)
			v = rest
			continue
		}
		end := 1
		for end < len(v) && v[end] != '"' {
			if v[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(v) {
			return nil, fmt.Errorf("unterminated quoted path in %q", v)
		}
		p, err := strconv.Unquote(v[:end+1])
		if err != nil {
			return nil, fmt.Errorf("quoted path %s: %v", v[:end+1], err)
		}
		out = append(out, p)
		v = v[end+1:]
	}
	return out, nil
}

// runGuard is the remote guard: it checks what a push adds to refs/bernstein/*
// and refuses the whole push when anything does not check.
func runGuard(o RunOptions) int {
	say := func(format string, args ...any) { fmt.Fprintf(o.Stderr, "bernstein guard: "+format+"\n", args...) }
	in, err := io.ReadAll(o.Stdin)
	if err != nil {
		say("cannot read the push's ref updates: %v; push refused", err)
		return ExitError
	}
	updates, err := ParseReceive(in)
	if err != nil {
		say("%v; push refused", err)
		return ExitError
	}
	s, err := o.open("")
	if err != nil {
		say("%v; push refused", err)
		return ExitError
	}
	defer s.Close()
	trust, err := s.Trust()
	if err != nil {
		say("%v; push refused", err)
		return ExitError
	}
	objs, err := Objects(s.GitDir())
	if err != nil {
		say("%v; push refused", err)
		return ExitError
	}
	defer objs.Close()
	g := &Guard{Objects: objs, Refs: refs.Reader{Dir: s.GitDir()}, Trust: trust, TrustFirstUse: o.TrustFirstUse, Repo: s.GitDir()}
	res := g.Check(updates)
	if len(res.Problems) > 0 {
		for _, p := range res.Problems {
			say("refused %s", p)
		}
		say("push refused: %d problem(s); no ref was updated", len(res.Problems))
		return ExitRefused
	}
	remember, err := guardLogs(s, objs, updates)
	if err != nil {
		say("refused: %v; no ref was updated", err)
		return ExitRefused
	}
	if code := runChained(o, in); code != 0 {
		say("the chained %s hook refused the push (exit status %d)", o.Hook, code)
		return ExitRefused
	}
	if err := remember(); err != nil {
		say("refused: %v; no ref was updated", err)
		return ExitRefused
	}
	// A push that gives this repository its identity: what was pinned for
	// it before goes over to the identity, as will the keys pinned now.
	if id := newIdentity(objs, updates); id != "" {
		if err := s.AdoptIdentity(id); err != nil {
			say("refused: %v; no ref was updated", err)
			return ExitRefused
		}
	}
	if len(res.FirstUse) > 0 {
		if err := pinFirstUse(s, res.FirstUse); err != nil {
			say("refused: %v; no ref was updated", err)
			return ExitRefused
		}
		for _, f := range res.FirstUse {
			say("pinned writer %s's key %s on first use (pin file %s)", f.Writer, f.Fingerprint, s.PinFile())
		}
	}
	return ExitOK
}

// guardLogs checks the writers' logs the push moves against the guard's
// witnesses (docs/trust.md, Witnesses).
func guardLogs(s *bernstein.Store, objs *gitstore.Repo, updates []Update) (func() error, error) {
	m := map[string]gitstore.Oid{}
	for _, u := range updates {
		if !u.New.IsZero() {
			m[u.Ref] = u.New
		}
	}
	return s.GuardLogs(objs, m)
}

// newIdentity is the id of the identity a push creates
// (refs/bernstein/repository, which the remote lacks), "" when it creates
// none.
func newIdentity(objs *gitstore.Repo, updates []Update) string {
	for _, u := range updates {
		if u.Ref != refs.Repository || !u.Old.IsZero() || u.New.IsZero() {
			continue
		}
		var id string
		chain.Walk(objs, u.New, func(cc chain.Commit) bool {
			if r, err := record.ParseRepositoryRecord(cc.Record); cc.Err == nil && err == nil {
				id = r.ID
			}
			return true
		})
		return id
	}
	return ""
}

// pinFirstUse pins the keys a guard took on first use, through the pin
// file's own lock: a concurrent push that pinned another key for the same
// writer first makes this one fail with bernstein.ErrKeyChanged.
func pinFirstUse(s *bernstein.Store, fs []FirstUse) error {
	f, err := os.CreateTemp("", "bernstein-first-use-*.allowed_signers")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	var writers []string
	for _, u := range fs {
		fmt.Fprintln(f, keys.FirstUseComment) // the writer may act on its own tasks only
		fmt.Fprintln(f, keys.AllowedSignersLine(u.Writer, u.Key))
		writers = append(writers, u.Writer)
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = s.PinKeys(bernstein.PinOptions{Writers: writers, From: f.Name()})
	return err
}

// runPrePush checks what a push is about to send, against this
// repository's trust, before it leaves.
func runPrePush(o RunOptions) int {
	say := func(format string, args ...any) { fmt.Fprintf(o.Stderr, "bernstein pre-push: "+format+"\n", args...) }
	in, err := io.ReadAll(o.Stdin)
	if err != nil {
		say("cannot read the push's refs: %v; push stopped", err)
		return ExitError
	}
	lines, err := ParsePrePush(in)
	if err != nil {
		say("%v; push stopped", err)
		return ExitError
	}
	s, err := o.open(o.AllowedSigners)
	if err != nil {
		say("%v; push stopped", err)
		return ExitError
	}
	defer s.Close()
	trust, err := s.Trust()
	if err != nil {
		say("%v; push stopped", err)
		return ExitError
	}
	var updates []Update
	var problems []Problem
	for _, l := range lines {
		if !strings.HasPrefix(l.RemoteRef, refs.Prefix) {
			continue
		}
		if !l.Remote.IsZero() && !l.Local.IsZero() && !s.Objects().Has(l.Remote) {
			problems = append(problems, Problem{Ref: l.RemoteRef, Check: "non_fast_forward",
				Reason: fmt.Sprintf("the remote's %s is at %s, which this repository does not have: the push would replace commits it never saw (fetch first)", l.RemoteRef, l.Remote.String()[:12])})
			continue
		}
		updates = append(updates, Update{Ref: l.RemoteRef, Old: l.Remote, New: l.Local})
	}
	g := &Guard{Objects: s.Objects(), Refs: refs.Reader{Dir: s.GitDir()}, Trust: trust, Local: true}
	res := g.Check(updates)
	problems = append(problems, res.Problems...)
	if len(problems) > 0 {
		for _, p := range problems {
			say("refused %s", p)
		}
		say("push stopped: %d problem(s); nothing was sent", len(problems))
		return ExitRefused
	}
	if code := runChained(o, in); code != 0 {
		say("the chained %s hook stopped the push (exit status %d)", o.Hook, code)
		return ExitRefused
	}
	return ExitOK
}

// runPostCommit records the commit just made as a checkpoint of the task.
// It never blocks the commit: a failure is one line on stderr.
func runPostCommit(o RunOptions) int {
	s, err := o.open("")
	if err == nil {
		var res *bernstein.WorkResult
		res, err = s.Checkpoint(o.Task, "HEAD", "")
		s.Close()
		switch {
		case err == nil && res.Note != "":
			// An empty commit, an amend that kept the tree: the row
			// stands, the step is not earned, and the line says why.
			fmt.Fprintf(o.Stderr, "bernstein: checkpoint row %d of task %s %s\n", res.JournalIndex, res.Task, res.Note)
		case err == nil:
			fmt.Fprintf(o.Stderr, "bernstein: checkpoint row %d of task %s recorded\n", res.JournalIndex, res.Task)
		}
	}
	if err != nil {
		fmt.Fprintf(o.Stderr, "bernstein: the commit stands, but its checkpoint of task %s was not recorded: %s\n", o.Task, oneLine(err.Error()))
	}
	runChained(o, nil)
	return ExitOK
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// runChained runs the hook that was there before ours, if any, with git's
// arguments and the same input, and returns its exit status.
func runChained(o RunOptions, in []byte) int {
	r, err := Locate(o.dir())
	if err != nil {
		fmt.Fprintf(o.Stderr, "bernstein: cannot find the hooks directory to run a chained hook: %v\n", err)
		return ExitError
	}
	path := filepath.Join(r.HooksDir, o.Hook+ChainedSuffix)
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(o.Stderr, "bernstein: chained hook %s: %v\n", path, err)
		return ExitError
	}
	if fi.Mode().Perm()&0o111 == 0 {
		// As git does with a hook that is not executable.
		fmt.Fprintf(o.Stderr, "bernstein: the chained hook %s was ignored because it is not set as executable\n", path)
		return 0
	}
	cmd := exec.Command(path, o.Args...)
	cmd.Dir = o.dir()
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if code := ee.ExitCode(); code > 0 {
				return code
			}
			return ExitError // killed by a signal
		}
		fmt.Fprintf(o.Stderr, "bernstein: chained hook %s: %v\n", path, err)
		return ExitError
	}
	return 0
}
