package refs

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// gitRefs is what git itself reads under prefix: name -> value.
func gitRefs(t *testing.T, dir, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(git(t, dir, "for-each-ref", "--format=%(refname) %(objectname)", prefix), "\n") {
		if name, oid, ok := strings.Cut(line, " "); ok {
			out[name] = oid
		}
	}
	return out
}

// packedRepo makes a repository whose refs git packed: many task refs in
// every namespace, names that sort around each other ("T-1" before
// "T-1.x" before "T-10"), an annotated tag (a peeled line in packed-refs)
// between namespaces, and a few refs loose again on top of packed ones.
func packedRepo(t *testing.T) (string, []gitstore.Oid) {
	dir, commits := newRepo(t, 3)
	var in strings.Builder
	for i := 0; i < 700; i++ {
		for _, ns := range []string{JournalPrefix, LedgerPrefix} {
			fmt.Fprintf(&in, "update %s%s %s\n", ns, EscapeTask(fmt.Sprintf("T-%d", i)), commits[i%3])
		}
	}
	for _, name := range []string{"T-1.x", "T-1%3Ab", "a", "z", "T-1-"} {
		fmt.Fprintf(&in, "update %s%s %s\n", JournalPrefix, name, commits[1])
	}
	for _, w := range []string{"host-a", "host-b"} {
		fmt.Fprintf(&in, "update %s%s %s\n", SpinePrefix, w, commits[2])
		fmt.Fprintf(&in, "update %s%s %s\n", AuditPrefix, w, commits[0])
		fmt.Fprintf(&in, "update %s%s %s\n", WritersPrefix, w, commits[1])
	}
	fmt.Fprintf(&in, "update %s %s\n", Keys, commits[0])
	fmt.Fprintf(&in, "update refs/heads/main %s\n", commits[0])
	fmt.Fprintf(&in, "update refs/bernstein-remotes/origin/journal/T-1 %s\n", commits[2])
	cmd := gitCmd(dir, "update-ref", "--stdin")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-ref: %v: %s", err, out)
	}
	git(t, dir, "tag", "-a", "-m", "annotated", "v1", commits[0].String())
	git(t, dir, "update-ref", "refs/bernstein/keysx", commits[2].String())
	git(t, dir, "pack-refs", "--all", "--prune")
	// Loose on top of packed: the loose value wins, as in git.
	git(t, dir, "update-ref", JournalPrefix+"T-5", commits[2].String())
	git(t, dir, "update-ref", SpinePrefix+"host-b", commits[0].String())
	b, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# pack-refs with:") || !strings.Contains(strings.SplitN(string(b), "\n", 2)[0], " sorted") || !strings.Contains(string(b), "\n^") {
		t.Fatalf("git wrote a packed-refs this test does not expect:\n%s", firstLines(string(b), 5))
	}
	if len(b) < 4*packedBlock {
		t.Fatalf("packed-refs is %d bytes: too small to span several blocks", len(b))
	}
	return dir, commits
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	return cmd
}

// checkAgainstGit compares every read of Reader with git's own reading of
// the same refs: each ref, refs that do not exist (between, before and
// after the packed names), every prefix, and snapshots of mixed scopes.
func checkAgainstGit(t *testing.T, dir string) {
	t.Helper()
	r := Reader{Dir: dir}
	all := gitRefs(t, dir, "refs/")
	for name, want := range all {
		got, err := r.Read(name)
		if err != nil || got.String() != want {
			t.Fatalf("Read(%s) = %s, %v; git reads %s", name, got, err, want)
		}
	}
	for _, name := range []string{JournalPrefix + "T-1.", JournalPrefix + "T-00", JournalPrefix + "T-9999", JournalPrefix + "0",
		"refs/bernstein/", "refs/bernstein/journal", Prefix + "zzz", "refs/a", "refs/zzz", LedgerPrefix + "T-1.x", Keys + "y"} {
		if _, err := r.Read(name); err != ErrNotFound {
			t.Fatalf("Read(%s): %v, want ErrNotFound (git has no such ref)", name, err)
		}
	}
	for _, prefix := range []string{Prefix, JournalPrefix, LedgerPrefix, SpinePrefix, AuditPrefix, WritersPrefix,
		"refs/", "refs/tags/", "refs/bernstein-remotes/", "refs/nothing/"} {
		want := gitRefs(t, dir, prefix)
		vals, names, err := r.List(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if len(vals) != len(want) || len(names) != len(want) || !sort.StringsAreSorted(names) {
			t.Fatalf("List(%s): %d refs (%d names), git lists %d", prefix, len(vals), len(names), len(want))
		}
		for name, v := range want {
			if vals[name].String() != v {
				t.Fatalf("List(%s)[%s] = %s, git reads %s", prefix, name, vals[name], v)
			}
		}
		// Names lists the same names, without their values.
		only, err := r.Names(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(only, "\n") != strings.Join(names, "\n") {
			t.Fatalf("Names(%s): %d names, git lists %d", prefix, len(only), len(want))
		}
	}
	scope := []string{JournalPrefix + "T-5", LedgerPrefix + "T-5", JournalPrefix + "T-99999", SpinePrefix, AuditPrefix, Keys, WritersPrefix}
	snap, err := r.Snapshot(scope...)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range all {
		if !snap.covers(name) {
			continue
		}
		if got, _ := snap.ReadOptional(name); got.String() != want {
			t.Fatalf("snapshot: %s = %s, git reads %s", name, got, want)
		}
	}
	for _, p := range []string{SpinePrefix, AuditPrefix, WritersPrefix} {
		_, names, _ := snap.List(p)
		if len(names) != len(gitRefs(t, dir, p)) {
			t.Fatalf("snapshot lists %d refs under %s, git %d", len(names), p, len(gitRefs(t, dir, p)))
		}
	}
	if got, _ := snap.ReadOptional(JournalPrefix + "T-99999"); !got.IsZero() {
		t.Fatalf("snapshot: a ref that does not exist reads %s", got)
	}
}

// TestPackedRefsReadAsGitReadsThem: a git-written (sorted) packed-refs is
// searched, not read whole; whatever it is searched for, the answer is
// git's.
func TestPackedRefsReadAsGitReadsThem(t *testing.T) {
	dir, _ := packedRepo(t)
	checkAgainstGit(t, dir)
}

// TestPackedRefsUnsorted: a packed-refs without the sorted trait (lines in
// any order, no header) is read whole and gives git's answers too.
func TestPackedRefsUnsorted(t *testing.T) {
	dir, _ := packedRepo(t)
	path := filepath.Join(dir, "packed-refs")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Records with their peeled lines, shuffled, without the header.
	var recs []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "^"):
			recs[len(recs)-1] += "\n" + line
		default:
			recs = append(recs, line)
		}
	}
	rand.New(rand.NewSource(1)).Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	if err := os.WriteFile(path, []byte(strings.Join(recs, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkAgainstGit(t, dir)
}

// TestPackedRefsBadLine: a record that is not one is an error naming
// packed-refs, on a lookup that meets it and on a listing.
func TestPackedRefsBadLine(t *testing.T) {
	dir, _ := newRepo(t, 1)
	path := filepath.Join(dir, "packed-refs")
	content := "# pack-refs with: peeled fully-peeled sorted \n" +
		strings.Repeat("0", 39) + "x " + JournalPrefix + "T-1\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := (Reader{Dir: dir}).Read(JournalPrefix + "T-1"); err == nil || !strings.Contains(err.Error(), "packed-refs") {
		t.Fatalf("Read: %v, want an error naming packed-refs", err)
	}
	if _, _, err := (Reader{Dir: dir}).List(Prefix); err == nil || !strings.Contains(err.Error(), "packed-refs") {
		t.Fatalf("List: %v, want an error naming packed-refs", err)
	}
}
