package remote

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/refs"
)

// PrePushError reports a push the repository's pre-push hook stopped:
// nothing was sent.
type PrePushError struct {
	Remote   string
	Hook     string   // the hook's path
	Status   int      // its exit status (-1: killed by a signal)
	Messages []string // the lines it printed
}

// Summary is the error without the hook's messages, for a caller that shows
// them already.
func (e *PrePushError) Summary() string {
	return fmt.Sprintf("the pre-push hook %s stopped the push to %s (exit status %d); nothing was sent", e.Hook, e.Remote, e.Status)
}

func (e *PrePushError) Error() string {
	if len(e.Messages) == 0 {
		return e.Summary()
	}
	return e.Summary() + ": " + strings.Join(e.Messages, "; ")
}

// runPrePush runs the repository's pre-push hook, if it has one, on the
// push plan is about to make, the way git push runs it: in the top of the
// work tree (the git directory of a bare repository), with the remote's
// name and push URL as arguments and one line per ref on its input,
// "<local ref> <local commit> <remote ref> <remote commit>". The remote's
// commit is its head as last fetched (zeros when unknown), which this host
// has: the push is never forced, so a remote that moved since rejects it
// anyway, and Push fetches and plans again. git would pass the remote's
// live head instead, which the check cannot read when another host moved
// it (bernstein's pre-push check refuses such a head: a forced push over
// it would drop commits nobody here saw), so every race would end as the
// hook's refusal rather than as a divergence naming the task.
func (s *Syncer) runPrePush(remote string, plan []refs.Update) error {
	args := []string{"--path-format=absolute", "--git-path", "hooks/pre-push"}
	if !s.c.Bare {
		args = append(args, "--show-toplevel")
	}
	lines, err := git.RevParse(s.c.Dir, args...)
	want := 1 // the hook's path, then the top of the work tree
	if !s.c.Bare {
		want = 2
	}
	if err != nil || len(lines) != want {
		msg := ""
		var rp *git.RevParseError
		if errors.As(err, &rp) {
			msg = rp.Msg
		}
		return fmt.Errorf("find the pre-push hook: git rev-parse: %s", msg)
	}
	hook, dir := lines[0], s.c.GitDir
	if !s.c.Bare {
		dir = lines[1]
	}
	fi, err := os.Stat(hook)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pre-push hook: %w", err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		s.c.Warn("the pre-push hook %s was ignored because it is not set as executable (as git ignores it)", hook)
		return nil
	}
	url, errb2, err := git.Cmd{Policy: git.User, GitDir: s.c.GitDir, Args: []string{"remote", "get-url", "--push", remote}}.Run()
	if err != nil {
		return fmt.Errorf("git remote get-url --push %s: %s", remote, git.Message(errb2))
	}
	var in bytes.Buffer
	for _, u := range plan {
		local := u.Ref
		if u.New.IsZero() {
			local = "(delete)" // as git gives a deletion
		}
		fmt.Fprintf(&in, "%s %s %s %s\n", local, u.New, u.Ref, u.Old)
	}
	run := exec.Command(hook, remote, strings.TrimSpace(string(url)))
	run.Dir = dir
	run.Stdin = &in
	var said bytes.Buffer
	run.Stdout, run.Stderr = &said, &said
	err = run.Run()
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("run the pre-push hook %s: %w", hook, err)
	}
	e := &PrePushError{Remote: remote, Hook: hook, Status: ee.ExitCode(), Messages: []string{}}
	for _, l := range strings.Split(said.String(), "\n") {
		if l = strings.TrimRight(l, " \t\r"); l != "" {
			e.Messages = append(e.Messages, l)
		}
	}
	return e
}
