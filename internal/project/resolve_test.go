package project

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/git"
)

// TestHeadOfWorktree: HEAD is the worktree's own, with and without git.
func TestHeadOfWorktree(t *testing.T) {
	root := t.TempDir()
	git := func(dir string, args ...string) string { return gitIn(t, dir, args...) }
	main := filepath.Join(root, "main")
	git(root, "init", "-q", main)
	git(main, "commit", "-q", "--allow-empty", "-m", "on main")
	wt := filepath.Join(root, "wt")
	git(main, "worktree", "add", "-q", "-b", "side", wt)
	git(wt, "commit", "-q", "--allow-empty", "-m", "on side")
	for _, dir := range []string{main, wt} {
		s, err := Open(Options{Repo: dir, Home: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		want := git(dir, "rev-parse", "HEAD")
		if got, ok := s.resolvePlainCommit("HEAD"); !ok || got != want {
			t.Fatalf("%s: HEAD resolved to %s (%v), git says %s", dir, got, ok, want)
		}
		if got, err := s.resolveCommit("commit", "HEAD~0"); err != nil || got != want {
			t.Fatalf("%s: HEAD~0 through git: %s %v", dir, got, err)
		}
		if _, ok := s.resolvePlainCommit(strings.Repeat("ab", 20)); ok {
			t.Fatalf("an unknown id resolved")
		}
		s.Close()
	}
	// A detached HEAD.
	git(wt, "checkout", "-q", "--detach", "HEAD~1")
	s, _ := Open(Options{Repo: wt, Home: t.TempDir()})
	defer s.Close()
	if got, ok := s.resolvePlainCommit("HEAD"); !ok || got != git(wt, "rev-parse", "HEAD") {
		t.Fatalf("detached HEAD resolved to %s", got)
	}
}

// testRepo is a repository as this test resolves revisions in it.
type testRepo struct{ c *core.Repo }

func (r testRepo) resolvePlainCommit(rev string) (string, bool) { return resolvePlainCommit(r.c, rev) }

func (r testRepo) resolveCommit(field, rev string) (string, error) {
	return ResolveCommit(r.c, field, rev)
}

func (r testRepo) Close() error { return r.c.Close() }

// Options name the repository Open opens and its BERNSTEIN_HOME.
type Options struct{ Repo, Home string }

// Open opens the repository o names.
func Open(o Options) (testRepo, error) {
	c, err := core.Open(o.Repo, core.Config{Home: o.Home})
	return testRepo{c}, err
}

// gitIn runs git in dir with a fixed identity and returns its trimmed output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git.Cmd{Policy: git.User, Dir: dir, Args: args, Env: []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e"}}.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}
