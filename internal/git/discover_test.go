package git

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiscoverAgreesWithGit: finding the git directory without starting git
// gives what `git rev-parse` says, for every layout bernstein meets.
func TestDiscoverAgreesWithGit(t *testing.T) {
	root := t.TempDir()
	run := func(dir string, args ...string) string { return gitIn(t, dir, args...) }
	run(root, "init", "-q", "plain")
	os.MkdirAll(filepath.Join(root, "plain", "a", "b"), 0o755)
	run(filepath.Join(root, "plain"), "commit", "-q", "--allow-empty", "-m", "c")
	run(filepath.Join(root, "plain"), "worktree", "add", "-q", filepath.Join(root, "wt"))
	run(root, "init", "-q", "--bare", "bare.git")
	run(root, "init", "-q", "--separate-git-dir", filepath.Join(root, "sep.git"), "sep")
	cases := []string{
		filepath.Join(root, "plain"),
		filepath.Join(root, "plain", "a", "b"),
		filepath.Join(root, "plain", ".git"),
		filepath.Join(root, "wt"),
		filepath.Join(root, "bare.git"),
		filepath.Join(root, "sep"),
	}
	for _, dir := range cases {
		own, common, bare, ok := discover(dir)
		if !ok {
			t.Fatalf("%s: not discovered", dir)
		}
		want := strings.Split(run(dir, "rev-parse", "--path-format=absolute", "--git-common-dir", "--is-bare-repository", "--absolute-git-dir"), "\n")
		wantOwn, _ := filepath.EvalSymlinks(want[2])
		if gotOwn, _ := filepath.EvalSymlinks(own); gotOwn != wantOwn {
			t.Fatalf("%s: own git directory %s, git says %s", dir, own, want[2])
		}
		wantDir, _ := filepath.EvalSymlinks(want[0])
		gotDir, _ := filepath.EvalSymlinks(common)
		if gotDir != wantDir {
			t.Fatalf("%s: discovered %s, git says %s", dir, common, want[0])
		}
		if dir == filepath.Join(root, "bare.git") && !bare {
			t.Fatalf("%s: not seen as bare", dir)
		}
		if dir == filepath.Join(root, "plain") && bare {
			t.Fatalf("%s: seen as bare", dir)
		}
	}
	if _, _, _, ok := discover(t.TempDir()); ok {
		t.Fatalf("a folder outside any repository was discovered")
	}
}

// gitIn runs git in dir with a fixed identity and returns its trimmed output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
