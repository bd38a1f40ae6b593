package gitstore

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestGitlinkSortsAndParsesAsGit: a tree holding gitlinks (mode 160000) is
// encoded byte for byte as `git mktree` writes it, and parsed back with its
// modes. The names are chosen so that order depends on the kind: a gitlink
// "a" sorts before "a.c" (as a file would), a tree "b" after "b.c" (as
// "b/"); a gitlink sorted as a tree would put "a" after "a.c".
func TestGitlinkSortsAndParsesAsGit(t *testing.T) {
	dir := newBare(t)
	file := HashObject(TypeBlob, []byte("x\n"))
	link1 := mustOid(t, "1111111111111111111111111111111111111111")
	link2 := mustOid(t, "2222222222222222222222222222222222222222")
	sub := EmptyTree
	entries := []TreeEntry{
		{Mode: ModeGitlink, Name: "a", ID: link1},
		{Mode: ModeFile, Name: "a.c", ID: file},
		{Mode: ModeFile, Name: "a0", ID: file},
		{Mode: ModeTree, Name: "b", ID: sub},
		{Mode: ModeFile, Name: "b.c", ID: file},
		{Mode: ModeGitlink, Name: "c-", ID: link2},
		{Mode: ModeGitlink, Name: "c", ID: link2},
	}
	var in strings.Builder
	for _, e := range entries {
		typ := map[string]string{ModeGitlink: "commit", ModeFile: "blob", ModeTree: "tree"}[e.Mode]
		fmt.Fprintf(&in, "%s %s %s\t%s\n", e.Mode, typ, e.ID, e.Name)
	}
	// The blob and the empty tree must exist for mktree; gitlinks need not.
	gitIn(t, dir, []byte("x\n"), "hash-object", "-w", "--stdin")
	git(t, dir, "hash-object", "-w", "-t", "tree", "/dev/null")
	id := strings.TrimSpace(gitIn(t, dir, []byte(in.String()), "mktree"))
	want := []byte(git(t, dir, "cat-file", "tree", id))
	got := EncodeTree(entries)
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeTree differs from git mktree's tree:\n got %q\nwant %q", got, want)
	}
	if HashObject(TypeTree, got).String() != id {
		t.Fatalf("tree id %s, git's %s", HashObject(TypeTree, got), id)
	}
	parsed, err := ParseTree(want)
	if err != nil {
		t.Fatal(err)
	}
	ls := strings.Split(strings.TrimSpace(git(t, dir, "ls-tree", id)), "\n")
	if len(parsed) != len(ls) {
		t.Fatalf("ParseTree gave %d entries, git ls-tree %d", len(parsed), len(ls))
	}
	for i, e := range parsed {
		mode := e.Mode
		if len(mode) == 5 {
			mode = "0" + mode // ls-tree pads 40000 to six digits
		}
		if line := fmt.Sprintf("%s %s %s\t%s", mode, map[bool]string{true: "tree", false: map[bool]string{true: "commit", false: "blob"}[e.Mode == ModeGitlink]}[e.IsTree()], e.ID, e.Name); line != ls[i] {
			t.Errorf("entry %d: ParseTree gives %q, git ls-tree %q", i, line, ls[i])
		}
	}
}
