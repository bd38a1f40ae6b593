package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// The tests write through gitstore into a real repository and ask the real
// git binary what it holds.

func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return append(env, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
}

func runGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"--git-dir", dir}, args...)...)
	cmd.Env = gitEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := runGit(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testRepo is a bare repository opened through gitstore.
type testRepo struct {
	dir  string
	repo *gitstore.Repo
}

func newRepo(t testing.TB) *testRepo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "r.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	git(t, dir, "config", "gc.auto", "0")
	r, err := gitstore.Open(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &testRepo{dir: dir, repo: r}
}

func (r *testRepo) write(t testing.TB, objs ...gitstore.Object) {
	t.Helper()
	if _, err := r.repo.WritePack(objs); err != nil {
		t.Fatal(err)
	}
}

// tree writes a tree of es (sorted by gitstore) and returns its id.
func (r *testRepo) tree(t testing.TB, es ...gitstore.TreeEntry) gitstore.Oid {
	t.Helper()
	o := gitstore.NewObject(gitstore.TypeTree, gitstore.EncodeTree(es))
	r.write(t, o)
	return o.ID
}

func commitObj(tree gitstore.Oid, msg string, parents ...gitstore.Oid) gitstore.Object {
	id := gitstore.Ident("t", "t@example.org", 1700000000)
	return gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(gitstore.Commit{
		Tree: tree, Parents: parents, Author: id, Committer: id, Message: []byte(msg + "\n"),
	}))
}

// chains writes, for each task, a journal and a ledger of rows commits
// each and returns their heads.
func (r *testRepo) chains(t testing.TB, tasks []string, rows int, tag string) map[string]Entry {
	t.Helper()
	objs := []gitstore.Object{gitstore.NewObject(gitstore.TypeTree, nil)}
	out := map[string]Entry{}
	for _, task := range tasks {
		var heads [2]gitstore.Oid
		for k, kind := range []string{"journal", "ledger"} {
			var prev []gitstore.Oid
			for i := 0; i < rows; i++ {
				c := commitObj(gitstore.EmptyTree, fmt.Sprintf("%s %s row %d %s", kind, task, i, tag), prev...)
				objs = append(objs, c)
				prev = []gitstore.Oid{c.ID}
			}
			heads[k] = prev[0]
		}
		out[task] = Entry{Task: task, Journal: heads[0], Ledger: heads[1]}
	}
	r.write(t, objs...)
	return out
}

// archive writes the archive commit applying u to prev (a commit, or zero)
// through Build and Parents, and returns it with Build's objects.
func (r *testRepo) archive(t testing.TB, prev gitstore.Oid, u Update) (gitstore.Oid, []gitstore.Object) {
	t.Helper()
	var prevTree gitstore.Oid
	if !prev.IsZero() {
		prevTree = r.treeOf(t, prev)
	}
	root, objs, err := Build(r.repo, prevTree, u)
	if err != nil {
		t.Fatal(err)
	}
	c := commitObj(root, "archive", Parents(prev, u.Add)...)
	r.write(t, append(objs, c)...)
	return c.ID, objs
}

func (r *testRepo) treeOf(t testing.TB, commit gitstore.Oid) gitstore.Oid {
	t.Helper()
	data, err := r.repo.ReadType(commit, gitstore.TypeCommit)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		t.Fatal(err)
	}
	return c.Tree
}

// wantPath is the documented path of a task, computed here from the
// definition (docs/archive.md), not by Path.
func wantPath(task string) string {
	sum := sha256.Sum256([]byte(task))
	return "t/" + hex.EncodeToString(sum[:])[:2] + "/" + refs.EscapeTask(task)
}

// lsLines is what `git ls-tree -r` prints for the entries of model.
func lsLines(model map[string]Entry) []string {
	var out []string
	for _, e := range model {
		out = append(out,
			fmt.Sprintf("160000 commit %s\t%s/journal", e.Journal, wantPath(e.Task)),
			fmt.Sprintf("160000 commit %s\t%s/ledger", e.Ledger, wantPath(e.Task)))
	}
	sort.Strings(out)
	return out
}

// gitLines runs git and returns its output lines, sorted.
func gitLines(t testing.TB, dir string, args ...string) []string {
	t.Helper()
	out := strings.TrimSpace(git(t, dir, args...))
	if out == "" {
		return nil
	}
	ls := strings.Split(out, "\n")
	sort.Strings(ls)
	return ls
}

func sameLines(t testing.TB, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got %d lines:\n%s\nwant %d lines:\n%s", what, len(got), head(got), len(want), head(want))
	}
}

func head(ls []string) string {
	if len(ls) > 12 {
		ls = append(ls[:12:12], "...")
	}
	return strings.Join(ls, "\n")
}

func fsckStrict(t testing.TB, dir string) {
	t.Helper()
	out, err := runGit(dir, "fsck", "--strict", "--full", "--no-dangling", "--no-progress")
	if err != nil {
		t.Fatalf("git fsck --strict: %v\n%s", err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" && !strings.HasPrefix(l, "notice: HEAD points to an unborn branch") {
			t.Fatalf("git fsck --strict complained:\n%s", out)
		}
	}
}

func listAll(t testing.TB, repo *gitstore.Repo, commit gitstore.Oid) map[string]Entry {
	t.Helper()
	out := map[string]Entry{}
	if err := List(repo, commit, func(e Entry) error {
		if _, dup := out[e.Task]; dup {
			return fmt.Errorf("List gave %q twice", e.Task)
		}
		out[e.Task] = e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func gitStdin(t testing.TB, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir", dir}, args...)...)
	cmd.Env = gitEnv()
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}
