package chain

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// gitIn runs git in a bare repository at dir with stdin, failing the test
// on an error.
func gitIn(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// TestRecordShape: commits written by plain git, shaped as each of
// bernstein's chain commits (and crafted imitations of them), are told from
// a project's commits by the commit alone; a project's commits that only
// resemble one (an empty tree, JSON in a message, an outputs folder with
// two files, an address at bernstein.io) are not.
func TestRecordShape(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	blob := func(content string) string { return gitIn(t, dir, content, "hash-object", "-w", "--stdin") }
	// mktree builds a tree from "mode type id\tname" lines.
	mktree := func(lines ...string) string { return gitIn(t, dir, strings.Join(lines, "\n")+"\n", "mktree") }
	file := func(name, content string) string { return "100644 blob " + blob(content) + "\t" + name }
	sub := func(name, tree string) string { return "040000 tree " + tree + "\t" + name }
	const empty = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	dev := "Dev <dev@example.com> 1700000000 +0000"
	commit := func(tree, author, committer, msg string) string {
		return gitIn(t, dir, "tree "+tree+"\nauthor "+author+"\ncommitter "+committer+"\n\n"+msg,
			"hash-object", "-t", "commit", "-w", "--literally", "--stdin")
	}
	row := `{"actor":"a","data":{},"index":0,"kind":"checkpoint","prev":"","task_id":"T-1","v":1}`
	cases := []struct {
		name, tree, author, committer, msg string
		want                               string // a piece of the reason; "" for none
	}{
		{"a journal commit as bernstein writes it", empty, "agent <agent@bernstein> 1 +0000", "w <w@bernstein> 1 +0000",
			"checkpoint #0\n\n" + row + "\n", "committer <w@bernstein>"},
		{"a committer <name@bernstein> alone", mktree(file("a.txt", "a")), dev, "Mallory <mallory@bernstein> 1 +0000", "work\n", "committer <mallory@bernstein>"},
		{"an author <name@BERNSTEIN> alone", mktree(file("a.txt", "a")), "M <m@BERNSTEIN> 1 +0000", dev, "work\n", "author <m@BERNSTEIN>"},
		{"a record in the message, canonical", mktree(file("a.txt", "a")), dev, dev, "checkpoint #0\n\n" + row + "\n", "carries a bernstein record"},
		{"a record in the message, spaced", mktree(file("a.txt", "a")), dev, dev, "x\n\n{ \"v\": 1, \"kind\": \"task.created\" }\n", "carries a bernstein record"},
		{"a journal row's output tree", mktree(sub("outputs", mktree(file("000003-diff.patch", "p")))), dev, dev, "work\n", "a journal row's (outputs/000003-diff.patch)"},
		{"a journal row's gate log tree", mktree(sub("outputs", mktree(file("000004-gate-build.log", "ok")))), dev, dev, "work\n", "a journal row's"},
		{"a journal row's artifact tree", mktree(sub("artifacts", mktree(sub("summary", mktree(file("v2.json", "{}")))))), dev, dev, "work\n",
			"a journal row's (artifacts/summary/v2.json)"},
		{"a spine seal's tree", mktree(file("seal.sig", "sig")), dev, dev, "work\n", "a spine seal's"},
		{"published keys' tree", mktree(file("w.pub", "k"), file("w.json", "{}"), file("w.json.sig", "s"), file("allowed_signers", "w k")), dev, dev, "work\n",
			"published writer keys'"},
		{"an earlier keys ref's tree (two writers)", mktree(file("a.pub", "k"), file("b.pub", "k"), file("allowed_signers", "a k")), dev, dev, "work\n",
			"published writer keys'"},

		{"a project commit", mktree(file("main.go", "package main")), dev, dev, "fix the planner\n\nCloses #12\n", ""},
		{"an empty commit", empty, dev, dev, "wip\n", ""},
		{"a message with JSON but no v", mktree(file("a", "a")), dev, dev, "x\n\n{\"kind\":\"checkpoint\"}\n", ""},
		{"a message with a two-line JSON body", mktree(file("a", "a")), dev, dev, "x\n\n{\"v\":1,\n\"kind\":\"x\"}\n", ""},
		{"a message that is JSON with no blank line", mktree(file("a", "a")), dev, dev, "{\"v\":1}\n", ""},
		{"an address at bernstein.io", mktree(file("a", "a")), "B <b@bernstein.io> 1 +0000", "B <bernstein@example.com> 1 +0000", "x\n", ""},
		{"an outputs folder with two files", mktree(sub("outputs", mktree(file("000001-a.log", "a"), file("000002-b.log", "b")))), dev, dev, "x\n", ""},
		{"an outputs folder with another name", mktree(sub("outputs", mktree(file("report.log", "a")))), dev, dev, "x\n", ""},
		{"outputs beside other files", mktree(sub("outputs", mktree(file("000001-a.log", "a"))), file("README", "r")), dev, dev, "x\n", ""},
		{"seal.sig beside other files", mktree(file("seal.sig", "s"), file("README", "r")), dev, dev, "x\n", ""},
		{"allowed_signers alone", mktree(file("allowed_signers", "a k")), dev, dev, "x\n", ""},
		{"key files and a folder", mktree(file("w.pub", "k"), file("allowed_signers", "w k"), sub("src", mktree(file("a", "a")))), dev, dev, "x\n", ""},
	}
	objs, err := gitstore.Open(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	for _, c := range cases {
		id := commit(c.tree, c.author, c.committer, c.msg)
		oid, _ := gitstore.ParseOid(id)
		data, err := objs.ReadType(oid, gitstore.TypeCommit)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := gitstore.ParseCommitLinks(data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RecordShape(objs, cm)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: shape %q, want %q", c.name, got, c.want)
		}
	}
}
