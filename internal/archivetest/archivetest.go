// Package archivetest moves tasks into the archive of ended tasks for
// tests: an archive commit built through internal/archive on the writer's
// archive ref, its parents archive.Parents, its record in the message, and
// the tasks' refs deleted, in one git ref transaction. It checks nothing of
// the tasks (a test may archive an open one) and signs nothing: reads do
// not need the archive commit's signature.
package archivetest

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Git runs git in dir (a work tree or a git directory).
func Git(t testing.TB, dir string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// rev reads ref ("" when it does not exist).
func rev(t testing.TB, dir, ref string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "rev-parse", "-q", "--verify", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Commit writes, on writer's archive ref, an archive commit adding the
// entries (at whatever heads they name) and removing the tasks of remove,
// and returns it. It moves no task ref.
func Commit(t testing.TB, dir, writer string, add []archive.Entry, remove []string) gitstore.Oid {
	t.Helper()
	gitDir := Git(t, dir, "", "rev-parse", "--path-format=absolute", "--git-common-dir")
	objs, err := gitstore.Open(filepath.Join(gitDir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	ref := refs.Archive(writer)
	var prev gitstore.Oid
	if p := rev(t, dir, ref); p != "" {
		prev, _ = gitstore.ParseOid(p)
	}
	rec := record.Archive{V: 1, Writer: writer, Add: []record.ArchivedTask{}, Remove: append([]string{}, remove...)}
	for _, e := range add {
		rec.Add = append(rec.Add, record.ArchivedTask{TaskID: e.Task, Journal: e.Journal.String(), Ledger: e.Ledger.String()})
	}
	body := record.MustCanonical(rec)
	var prevTree gitstore.Oid
	if !prev.IsZero() {
		prevTree = oidOf(t, Git(t, dir, "", "rev-parse", prev.String()+"^{tree}"))
	}
	tree, new, err := archive.Build(objs, prevTree, archive.Update{Add: add, Remove: remove})
	if err != nil {
		t.Fatal(err)
	}
	id := gitstore.Ident(writer, writer+"@bernstein", 1700000000)
	c := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(gitstore.Commit{
		Tree: tree, Parents: archive.Parents(prev, add), Author: id, Committer: id,
		Message: record.Message(fmt.Sprintf("archive %d tasks", len(add)), body),
	}))
	if _, err := objs.WritePack(append(new, c)); err != nil {
		t.Fatal(err)
	}
	old := prev.String()
	if prev.IsZero() {
		old = ""
	}
	Git(t, dir, "", "update-ref", ref, c.ID.String(), old)
	return c.ID
}

// Tasks archives tasks into writer's archive at their refs' heads and
// deletes their refs (compared with those heads), in one git ref
// transaction, as an archive command leaves them.
func Tasks(t testing.TB, dir, writer string, tasks ...string) gitstore.Oid {
	t.Helper()
	var add []archive.Entry
	var script strings.Builder
	for _, task := range tasks {
		e := archive.Entry{Task: task}
		for _, x := range []struct {
			ref string
			at  *gitstore.Oid
		}{{refs.Journal(task), &e.Journal}, {refs.Ledger(task), &e.Ledger}} {
			v := rev(t, dir, x.ref)
			if v == "" {
				t.Fatalf("archive %s: %s does not exist", task, x.ref)
			}
			*x.at, _ = gitstore.ParseOid(v)
			fmt.Fprintf(&script, "delete %s %s\n", x.ref, v)
		}
		add = append(add, e)
	}
	ref := refs.Archive(writer)
	c := Commit(t, dir, writer, add, nil)
	// Commit moved the archive ref; the deletions follow in one
	// transaction that also checks the archive ref is where Commit left it.
	fmt.Fprintf(&script, "verify %s %s\n", ref, c)
	Git(t, dir, script.String(), "update-ref", "--stdin")
	return c
}

func oidOf(t testing.TB, s string) gitstore.Oid {
	t.Helper()
	o, err := gitstore.ParseOid(s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
