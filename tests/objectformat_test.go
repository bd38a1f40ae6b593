package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
)

// sha256Repo makes a sha256 repository with one commit, as a user would,
// and a worktree of it; it skips when this git cannot.
func sha256Repo(t *testing.T) (repo, worktree string) {
	t.Helper()
	root := t.TempDir()
	repo = filepath.Join(root, "r")
	if out, err := exec.Command("git", "init", "-q", "--object-format=sha256", repo).CombinedOutput(); err != nil {
		t.Skipf("git cannot make a sha256 repository: %s", out)
	}
	worktree = filepath.Join(root, "wt")
	for _, args := range [][]string{
		{"-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-q", "--allow-empty", "-m", "x"},
		{"worktree", "add", "-q", worktree},
	} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return repo, worktree
}

// treeState lists every file under dir with a hash of its content, mode
// and modification time: what "nothing touched" compares.
func treeState(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		line := strings.TrimPrefix(p, dir) + " " + fi.Mode().String() + " " + fi.ModTime().String()
		if !d.IsDir() {
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		}
		out = append(out, line)
		return nil
	})
	sort.Strings(out)
	return out
}

// TestObjectFormatSHA256Refused: init and every other command refuse a
// sha256 repository up front, naming the object format, and write nothing:
// no key in BERNSTEIN_HOME, no file in the git directory, and git keeps
// working in it.
func TestObjectFormatSHA256Refused(t *testing.T) {
	repo, worktree := sha256Repo(t)
	home := filepath.Join(t.TempDir(), "home")
	gitDir := filepath.Join(repo, ".git")
	before := treeState(t, gitDir)
	wantMsg := "uses the sha256 object format; bernstein supports sha1 repositories only"

	// The library: Init and Open, from the work tree, the git directory and
	// a linked worktree.
	for _, dir := range []string{repo, gitDir, worktree} {
		opts := bernstein.Options{Repo: dir, Home: home}
		if _, err := bernstein.Init(opts, "w"); !errors.Is(err, bernstein.ErrRepositoryFormat) || !strings.Contains(err.Error(), wantMsg) {
			t.Fatalf("Init(%s) = %v, want the sha256 refusal", dir, err)
		}
		if s, err := bernstein.Open(opts); !errors.Is(err, bernstein.ErrRepositoryFormat) || !strings.Contains(err.Error(), wantMsg) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open(%s) = %v, want the sha256 refusal", dir, err)
		}
	}

	// The CLI: init and read-only commands alike.
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(cliBin, append([]string{"--repo", repo}, args...)...)
		cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+home, "BERNSTEIN_FORCE_TTY=0")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	for _, args := range [][]string{
		{"init"},
		{"init", "--writer", "w"},
		{"task", "list"},
		{"task", "create", "T-1", "--title", "t"},
		{"artifact", "list", "T-1"},
		{"audit", "verify"},
	} {
		out, errOut, code := run(args...)
		if code == 0 {
			t.Fatalf("%v exits 0\n%s%s", args, out, errOut)
		}
		if args[0] == "init" && code != 1 {
			t.Errorf("%v exits %d, want 1", args, code)
		}
		line := strings.TrimSpace(errOut)
		if !strings.Contains(line, wantMsg) || strings.Contains(line, "\n") {
			t.Errorf("%v: stderr %q is not one line naming the object format", args, errOut)
		}
		if strings.Contains(errOut, "index") {
			t.Errorf("%v: stderr %q reports a damaged pack", args, errOut)
		}
	}

	// Nothing was written.
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(home)
		t.Errorf("BERNSTEIN_HOME was created (%v): %v", err, ents)
	}
	if after := treeState(t, gitDir); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("the git directory changed:\nbefore\n%s\nafter\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	for _, args := range [][]string{{"fsck", "--strict"}, {"log", "--oneline"}, {"gc", "-q"}, {"fsck", "--strict"}} {
		out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput()
		if err != nil || (args[0] == "fsck" && strings.TrimSpace(string(out)) != "") {
			t.Fatalf("git %v afterwards: %v\n%s", args, err, out)
		}
	}
}

// TestInitMakesSHA1Repository: the repository init creates is a sha1 one
// even when the user's git would make sha256 repositories by default.
func TestInitMakesSHA1Repository(t *testing.T) {
	if out, err := exec.Command("git", "init", "-q", "--object-format=sha256", t.TempDir()).CombinedOutput(); err != nil {
		t.Skipf("git cannot make a sha256 repository: %s", out)
	}
	t.Setenv("GIT_DEFAULT_HASH", "sha256")
	dir := filepath.Join(t.TempDir(), "new")
	res, err := bernstein.Init(bernstein.Options{Repo: dir, Home: filepath.Join(t.TempDir(), "home")}, "w")
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if !res.RepoCreated || !res.KeyPublished {
		t.Fatalf("Init = %+v", res)
	}
	cmd := exec.Command("git", "-C", dir, "rev-parse", "--show-object-format")
	if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "sha1" {
		t.Fatalf("object format %q, %v; want sha1", out, err)
	}
	if out, err := exec.Command("git", "-C", dir, "fsck", "--strict", "--no-dangling").CombinedOutput(); err != nil {
		t.Fatalf("git fsck: %v\n%s", err, out)
	}
}
