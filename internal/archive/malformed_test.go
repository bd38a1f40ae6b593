package archive

import (
	"errors"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// TestMalformedArchivesAreRefused: anyone can write an archive tree, so
// every reader (Lookup of a task the fault is on the way to, List, Diff,
// and Build on top of it, for a fault in a tree Build reads) refuses each way off the layout with one error
// naming it. Each case starts from the one valid tree of task T-1 and
// changes one thing; the valid tree itself reads.
func TestMalformedArchivesAreRefused(t *testing.T) {
	r := newRepo(t)
	const task = "T-1"
	sh := Shard(task)
	j := commitObj(gitstore.EmptyTree, "journal").ID
	l := commitObj(gitstore.EmptyTree, "ledger").ID
	link := func(name string, id gitstore.Oid) gitstore.TreeEntry {
		return gitstore.TreeEntry{Mode: gitstore.ModeGitlink, Name: name, ID: id}
	}
	dirE := func(name string, id gitstore.Oid) gitstore.TreeEntry {
		return gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: name, ID: id}
	}
	blob := gitstore.NewObject(gitstore.TypeBlob, []byte("x\n"))
	r.write(t, blob)
	fileE := func(name string) gitstore.TreeEntry {
		return gitstore.TreeEntry{Mode: gitstore.ModeFile, Name: name, ID: blob.ID}
	}
	raw := func(data string) gitstore.Oid {
		o := gitstore.NewObject(gitstore.TypeTree, []byte(data))
		r.write(t, o)
		return o.ID
	}
	rawEntry := func(mode, name string, id gitstore.Oid) string { return mode + " " + name + "\x00" + string(id[:]) }
	goodTask := r.tree(t, link("journal", j), link("ledger", l))
	// in puts a task tree under the shard of task, and that under t/.
	in := func(name string, taskTree gitstore.Oid) gitstore.Oid {
		return r.tree(t, dirE(sh, r.tree(t, dirE(name, taskTree))))
	}
	wrongShard := "00"
	if sh == wrongShard {
		wrongShard = "01"
	}
	cases := []struct {
		name string
		dir  gitstore.Oid // t/; zero: root is set instead
		root gitstore.Oid
		want string
	}{
		{name: "valid", dir: in(task, goodTask)},
		{name: "shard name not hex", dir: r.tree(t, dirE("g0", r.tree(t, dirE(task, goodTask)))), want: "t/g0 (mode 40000) is not a shard"},
		{name: "shard name one digit", dir: r.tree(t, dirE("0", r.tree(t, dirE(task, goodTask)))), want: "t/0 (mode 40000) is not a shard"},
		{name: "shard name upper case", dir: r.tree(t, dirE(strings.ToUpper("ab"), r.tree(t, dirE(task, goodTask)))), want: "t/AB (mode 40000) is not a shard"},
		{name: "shard a blob", dir: r.tree(t, fileE(sh)), want: "(mode 100644) is not a shard"},
		{name: "shards empty", dir: r.tree(t), want: "t/ is empty"},
		{name: "shard empty", dir: r.tree(t, dirE(sh, r.tree(t))), want: "shard " + sh + " is empty"},
		{name: "task under the wrong shard", dir: r.tree(t, dirE(sh, r.tree(t, dirE("T-2", goodTask)))), want: `task "T-2" is under shard ` + sh},
		{name: "unescapable name: raw colon", dir: in("a:b", goodTask), want: "is not an escaped task id"},
		{name: "unescapable name: percent", dir: in("a%41", goodTask), want: "is not an escaped task id"},
		{name: "unescapable name: invalid id", dir: in("a..b", goodTask), want: "is not an escaped task id"},
		{name: "task a gitlink", dir: r.tree(t, dirE(sh, r.tree(t, link(task, j)))), want: "has mode 160000, not a tree"},
		{name: "task tree with a third entry", dir: in(task, r.tree(t, link("journal", j), link("ledger", l), fileE("x"))), want: "want exactly the gitlinks journal and ledger"},
		{name: "task tree without ledger", dir: in(task, r.tree(t, link("journal", j))), want: "want exactly the gitlinks journal and ledger"},
		{name: "journal a blob", dir: in(task, r.tree(t, fileE("journal"), link("ledger", l))), want: "journal (mode 100644"},
		{name: "ledger a tree", dir: in(task, r.tree(t, link("journal", j), dirE("ledger", goodTask))), want: "ledger (mode 40000"},
		{name: "gitlink to the zero id", dir: in(task, r.tree(t, link("journal", gitstore.ZeroOid), link("ledger", l))), want: "want exactly the gitlinks"},
		{name: "task tree out of order", dir: in(task, raw(rawEntry("160000", "ledger", l)+rawEntry("160000", "journal", j))), want: "out of git's order or repeated"},
		{name: "task repeated in its shard", dir: r.tree(t, dirE(sh, raw(rawEntry("40000", task, goodTask)+rawEntry("40000", task, goodTask)))), want: "out of git's order or repeated"},
		{name: "root with another entry", root: r.tree(t, dirE(TasksDir, in(task, goodTask)), fileE("u")), want: `the root holds "u" (mode 100644)`},
		{name: "root with a record blob", root: r.tree(t, fileE("record"), dirE(TasksDir, in(task, goodTask))), want: `the root holds "record" (mode 100644)`},
		{name: "root with another tree", root: r.tree(t, dirE("s", in(task, goodTask)), dirE(TasksDir, in(task, goodTask))), want: `the root holds "s" (mode 40000)`},
		{name: "t a blob", root: r.tree(t, fileE(TasksDir)), want: `the root holds "t" (mode 100644)`},
		{name: "t a gitlink", root: r.tree(t, link(TasksDir, j)), want: `the root holds "t" (mode 160000)`},
		{name: "t repeated", root: raw(rawEntry("40000", TasksDir, in(task, goodTask)) + rawEntry("40000", TasksDir, in(task, goodTask))), want: "out of git's order or repeated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var commit gitstore.Oid
			if c.root.IsZero() {
				commit = r.archiveOfRoot(t, c.dir)
			} else {
				o := commitObj(c.root, "archive")
				r.write(t, o)
				commit = o.ID
			}
			tree := r.treeOf(t, commit)
			_, _, lerr := Lookup(r.repo, commit, task)
			errs := map[string]error{
				"Lookup": lerr,
				"List":   List(r.repo, commit, func(Entry) error { return nil }),
			}
			_, errs["Diff"] = Diff(r.repo, gitstore.ZeroOid, commit)
			_, _, errs["Build"] = Build(r.repo, tree, Update{Add: []Entry{{Task: task, Journal: j, Ledger: l}}})
			if strings.HasPrefix(c.name, "task tree") || c.name == "journal a blob" || c.name == "ledger a tree" || c.name == "gitlink to the zero id" {
				// Build reads no task tree: it replaces T-1's, and carries
				// the others over unread.
				delete(errs, "Build")
			}
			for reader, err := range errs {
				if c.want == "" {
					if err != nil {
						t.Fatalf("%s refused the valid archive: %v", reader, err)
					}
					continue
				}
				var me *MalformedError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("%s: got error %v, want a MalformedError naming %q", reader, err, c.want)
				}
			}
		})
	}
}

// TestBuildRefusesBadUpdates: an update that would not make a valid archive
// is refused with an error naming it, before anything is built.
func TestBuildRefusesBadUpdates(t *testing.T) {
	r := newRepo(t)
	heads := r.chains(t, []string{"T-1", "T-2"}, 1, "")
	c, _ := r.archive(t, gitstore.ZeroOid, Update{Add: []Entry{heads["T-1"]}})
	tree := r.treeOf(t, c)
	many := make([]Entry, MaxAdd+1)
	for i := range many {
		many[i] = Entry{Task: "M-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Journal: heads["T-2"].Journal, Ledger: heads["T-2"].Ledger}
	}
	cases := []struct {
		name string
		u    Update
		want string
	}{
		{"invalid task id", Update{Add: []Entry{{Task: "a..b", Journal: heads["T-2"].Journal, Ledger: heads["T-2"].Ledger}}}, `task id "a..b" contains ".."`},
		{"task named twice", Update{Add: []Entry{heads["T-2"]}, Remove: []string{"T-2"}}, `names task "T-2" twice`},
		{"zero head", Update{Add: []Entry{{Task: "T-2", Journal: heads["T-2"].Journal}}}, `task "T-2" has a zero head`},
		{"remove a task not archived", Update{Remove: []string{"T-2"}}, `removes task "T-2", which the archive does not hold`},
		{"too many", Update{Add: many}, "adds 257 tasks; one archive commit adds at most 256"},
	}
	for _, c := range cases {
		if _, _, err := Build(r.repo, tree, c.u); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Build gave %v, want an error naming %q", c.name, err, c.want)
		}
	}
	// Removing the last task leaves the empty tree as the root, which reads
	// empty.
	root, objs, err := Build(r.repo, tree, Update{Remove: []string{"T-1"}})
	if err != nil {
		t.Fatal(err)
	}
	o := commitObj(root, "archive", c)
	r.write(t, append(objs, o)...)
	empty := strings.TrimSpace(git(t, r.dir, "hash-object", "-t", "tree", "/dev/null"))
	if got := strings.TrimSpace(git(t, r.dir, "rev-parse", o.ID.String()+"^{tree}")); got != empty {
		t.Fatalf("the emptied archive's root is %s, want git's empty tree %s", got, empty)
	}
	if n := len(listAll(t, r.repo, o.ID)); n != 0 {
		t.Fatalf("List of the emptied archive gave %d entries", n)
	}
}
