package bernstein

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// diffBenchRepo is a work tree with two commits: 200 files of 50 lines,
// one line changed in each of 20 of them.
func diffBenchRepo(b *testing.B) (dir string, base, head gitstore.Oid) {
	b.Helper()
	dir = b.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=b", "-c", "user.email=b@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q")
	write := func(change bool) {
		for i := 0; i < 200; i++ {
			var s strings.Builder
			for l := 0; l < 50; l++ {
				if change && i%10 == 0 && l == 25 {
					s.WriteString("changed\n")
					continue
				}
				s.WriteString("line " + strconv.Itoa(l) + " of file " + strconv.Itoa(i) + "\n")
			}
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)+".txt"), []byte(s.String()), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		run("add", "-A")
		run("commit", "-q", "-m", "c")
	}
	write(false)
	write(true)
	base, _ = gitstore.ParseOid(run("rev-parse", "HEAD~1^{tree}"))
	head, _ = gitstore.ParseOid(run("rev-parse", "HEAD^{tree}"))
	return dir, base, head
}

// BenchmarkFixedDiff is a diff capture's git work: one git diff-tree in a
// throw-away git directory.
func BenchmarkFixedDiff(b *testing.B) {
	dir, base, head := diffBenchRepo(b)
	objects := filepath.Join(dir, ".git", "objects")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, st, err := fixedDiff(objects, base, head); err != nil || st.files != 20 {
			b.Fatalf("%v %+v", err, st)
		}
	}
}

// BenchmarkConfiguredDiff is the baseline: what a diff capture ran before
// its options were fixed, two git diff runs in the repository itself with
// the caller's configuration.
func BenchmarkConfiguredDiff(b *testing.B) {
	dir, base, head := diffBenchRepo(b)
	gitDir := filepath.Join(dir, ".git")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, args := range [][]string{{"diff", "--binary", "--full-index", "--no-color", "--no-ext-diff"}, {"diff", "--numstat", "--no-color", "--no-ext-diff"}} {
			cmd := exec.Command("git", append(args, base.String(), head.String())...)
			cmd.Env = append(os.Environ(), "GIT_DIR="+gitDir)
			if _, err := cmd.Output(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
