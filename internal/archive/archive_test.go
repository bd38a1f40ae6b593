package archive

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// special task ids: an escaped ':', a trailing '.', a trailing ".lock", and
// names whose order differs between a file and a tree ("a" and "a.b").
var special = []string{"x:y", "end.", "foo.lock", "a", "a.b", "a-b", "T:1:2"}

func taskNames(n int) []string {
	out := append([]string{}, special...)
	for i := 0; len(out) < n; i++ {
		out = append(out, fmt.Sprintf("T-%d", i))
	}
	return out
}

// history is three archive commits over real chains: c1 adds 256 tasks,
// c2 adds the rest, c3 removes some, re-archives some with extended heads
// and adds new ones. models[i] is what commits[i] must hold.
type history struct {
	r       *testRepo
	commits []gitstore.Oid
	objs    [][]gitstore.Object
	models  []map[string]Entry
}

func makeHistory(t *testing.T) *history {
	r := newRepo(t)
	tasks := taskNames(300)
	heads := r.chains(t, tasks, 2, "")
	h := &history{r: r}
	model := map[string]Entry{}
	step := func(u Update) {
		var prev gitstore.Oid
		if len(h.commits) > 0 {
			prev = h.commits[len(h.commits)-1]
		}
		c, objs := r.archive(t, prev, u)
		for _, task := range u.Remove {
			delete(model, task)
		}
		for _, e := range u.Add {
			model[e.Task] = e
		}
		h.commits, h.objs, h.models = append(h.commits, c), append(h.objs, objs), append(h.models, maps.Clone(model))
	}
	add := func(ts []string, hs map[string]Entry) []Entry {
		var out []Entry
		for _, task := range ts {
			out = append(out, hs[task])
		}
		return out
	}
	step(Update{Add: add(tasks[:256], heads)})
	step(Update{Add: add(tasks[256:], heads)})
	fresh := r.chains(t, []string{"N-1", "N-2"}, 2, "")
	again := r.chains(t, []string{"a", "T-100", "T-200"}, 3, "reopened")
	step(Update{
		Add:    append(add([]string{"N-1", "N-2"}, fresh), add([]string{"a", "T-100", "T-200"}, again)...),
		Remove: []string{"x:y", "end.", "T-5", "T-250", "T-290"},
	})
	git(t, r.dir, "update-ref", "refs/bernstein/archive/w", h.commits[2].String())
	return h
}

// TestArchiveReadsAsGitReadsIt: the archive commits that Build and Parents
// make are accepted by git fsck --strict; git ls-tree -r shows every entry
// as a 160000 commit at t/<hh>/<task>/journal and ledger, as the model says;
// List and Lookup agree with it, and git rev-parse reads the heads by path.
func TestArchiveReadsAsGitReadsIt(t *testing.T) {
	h := makeHistory(t)
	r := h.r
	fsckStrict(t, r.dir)
	for i, c := range h.commits {
		want := lsLines(h.models[i])
		sameLines(t, fmt.Sprintf("commit %d: git ls-tree -r t", i), gitLines(t, r.dir, "ls-tree", "-r", c.String(), "--", "t"), want)
		sameLines(t, fmt.Sprintf("commit %d: List", i), lsLines(listAll(t, r.repo, c)), want)
		for task, e := range h.models[i] {
			got, ok, err := Lookup(r.repo, c, task)
			if err != nil || !ok || got != e {
				t.Fatalf("commit %d: Lookup(%q) = %+v, %v, %v; want %+v", i, task, got, ok, err, e)
			}
		}
		for _, task := range []string{"N-1", "x:y", "never"} {
			if _, in := h.models[i][task]; in {
				continue
			}
			if got, ok, err := Lookup(r.repo, c, task); err != nil || ok {
				t.Fatalf("commit %d: Lookup(%q) of a task not archived = %+v, %v, %v", i, task, got, ok, err)
			}
		}
		root := gitLines(t, r.dir, "ls-tree", "--name-only", c.String())
		sameLines(t, "the root", root, []string{"t"})
	}
	last := h.commits[2]
	for _, task := range special {
		e, in := h.models[2][task]
		if !in {
			continue
		}
		for kind, id := range map[string]gitstore.Oid{"journal": e.Journal, "ledger": e.Ledger} {
			got := strings.TrimSpace(git(t, r.dir, "rev-parse", "refs/bernstein/archive/w:"+wantPath(task)+"/"+kind))
			if got != id.String() {
				t.Fatalf("git rev-parse archive:%s/%s = %s, want %s", wantPath(task), kind, got, id)
			}
		}
	}
	if got, want := Path("x:y"), wantPath("x:y"); got != want {
		t.Fatalf("Path(x:y) = %q, want %q", got, want)
	}
	// The parents rule, as git reads the commit: the previous archive commit
	// first, then each head added.
	ps := strings.Fields(git(t, r.dir, "rev-list", "--parents", "-n", "1", last.String()))[1:]
	if ps[0] != h.commits[1].String() || len(ps) != 1+2*5 {
		t.Fatalf("the last archive commit's parents are %v; want %s first and 10 heads", ps, h.commits[1])
	}
}

// TestBuildRewritesOnlyWhatItTouches: the trees Build returns for an update
// are exactly the trees that git diff-tree -r -t reports as new between the
// two commits, plus the root: the touched shards, the added tasks' trees,
// t/ and the root, never an untouched shard.
func TestBuildRewritesOnlyWhatItTouches(t *testing.T) {
	h := makeHistory(t)
	for i := 1; i < len(h.commits); i++ {
		var got []string
		for _, o := range h.objs[i] {
			if o.Type == gitstore.TypeTree {
				got = append(got, o.ID.String())
			}
		}
		sort.Strings(got)
		want := []string{h.r.treeOf(t, h.commits[i]).String()}
		for _, l := range gitLines(t, h.r.dir, "diff-tree", "-r", "-t", h.commits[i-1].String(), h.commits[i].String(), "--", "t") {
			f := strings.Fields(l)
			if f[1] == "040000" {
				want = append(want, f[3])
			}
		}
		sort.Strings(want)
		sameLines(t, fmt.Sprintf("commit %d: the new trees", i), got, want)
		if shards := len(gitLines(t, h.r.dir, "ls-tree", h.commits[i].String()+":t")); len(got) >= shards {
			t.Fatalf("commit %d wrote %d trees, as many as the %d shards", i, len(got), shards)
		}
	}
}

// diffLines renders Diff's answer as git diff-tree -r prints it.
func diffLines(cs []Change) []string {
	var out []string
	for _, c := range cs {
		for _, kind := range []string{"journal", "ledger"} {
			var o, n gitstore.Oid
			om, nm := "000000", "000000"
			if c.Old != nil {
				o, om = map[string]gitstore.Oid{"journal": c.Old.Journal, "ledger": c.Old.Ledger}[kind], "160000"
			}
			if c.New != nil {
				n, nm = map[string]gitstore.Oid{"journal": c.New.Journal, "ledger": c.New.Ledger}[kind], "160000"
			}
			st := map[bool]string{true: "A", false: map[bool]string{true: "D", false: "M"}[c.New == nil]}[c.Old == nil]
			if o != n {
				out = append(out, fmt.Sprintf(":%s %s %s %s %s\t%s/%s", om, nm, o, n, st, wantPath(c.Task), kind))
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestDiffIsGitsDiffTree: Diff between any two archive commits (or from
// none) is what git diff-tree -r reports under t/.
func TestDiffIsGitsDiffTree(t *testing.T) {
	h := makeHistory(t)
	all := append([]gitstore.Oid{gitstore.ZeroOid}, h.commits...)
	for i, a := range all {
		for j, b := range all {
			if j == 0 {
				continue
			}
			cs, err := Diff(h.r.repo, a, b)
			if err != nil {
				t.Fatal(err)
			}
			from := gitstore.EmptyTree.String()
			if !a.IsZero() {
				from = a.String()
			}
			want := gitLines(t, h.r.dir, "diff-tree", "-r", from, b.String(), "--", "t")
			sameLines(t, fmt.Sprintf("Diff(%d, %d)", i, j), diffLines(cs), want)
			if i == j && len(cs) != 0 {
				t.Fatalf("Diff of a commit with itself: %v", cs)
			}
		}
	}
}

// TestDiffSkipsUnchangedShards: Diff reads no shard whose tree id is the
// same on both sides, and Lookup no shard but its task's. Both commits share a shard that no reader accepts (a
// task under the wrong shard); Diff still answers for the shard that
// changed, while List, which reads every shard, refuses it.
func TestDiffSkipsUnchangedShards(t *testing.T) {
	r := newRepo(t)
	link := commitObj(gitstore.EmptyTree, "head").ID
	bad := "T-1"
	wrong := "00"
	if Shard(bad) == wrong {
		wrong = "01"
	}
	task := r.tree(t, gitstore.TreeEntry{Mode: gitstore.ModeGitlink, Name: "journal", ID: link}, gitstore.TreeEntry{Mode: gitstore.ModeGitlink, Name: "ledger", ID: link})
	badShard := r.tree(t, gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: bad, ID: task})
	mk := func(other string) gitstore.Oid {
		es := []gitstore.TreeEntry{{Mode: gitstore.ModeTree, Name: wrong, ID: badShard}}
		sh := Shard(other)
		if sh == wrong || sh == Shard(bad) {
			t.Fatalf("pick another task than %q", other)
		}
		es = append(es, gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: sh, ID: r.tree(t, gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: other, ID: task})})
		return r.archiveOfRoot(t, r.tree(t, es...))
	}
	other := "T-2"
	for Shard(other) == wrong || Shard(other) == Shard(bad) {
		other += "x"
	}
	old := mk(other)
	// The new commit: the same bad shard, and other's shard with another task.
	next := other + "y"
	for Shard(next) != Shard(other) {
		next += "y"
	}
	es := []gitstore.TreeEntry{{Mode: gitstore.ModeTree, Name: wrong, ID: badShard},
		{Mode: gitstore.ModeTree, Name: Shard(other), ID: r.tree(t,
			gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: other, ID: task},
			gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: next, ID: task})}}
	nw := r.archiveOfRoot(t, r.tree(t, es...))
	cs, err := Diff(r.repo, old, nw)
	if err != nil {
		t.Fatalf("Diff read the unchanged shard: %v", err)
	}
	if len(cs) != 1 || cs[0].Task != next || cs[0].Old != nil || cs[0].New == nil {
		t.Fatalf("Diff = %+v, want %q added", cs, next)
	}
	// Lookup reads only its task's shard: the bad one is not on its way.
	if e, ok, err := Lookup(r.repo, nw, next); err != nil || !ok || e.Journal != link {
		t.Fatalf("Lookup(%q) = %+v, %v, %v", next, e, ok, err)
	}
	if err := List(r.repo, nw, func(Entry) error { return nil }); err == nil {
		t.Fatal("List accepted a task under the wrong shard")
	}
}

// archiveOfRoot writes the root holding t/ dir, and a commit of it.
func (r *testRepo) archiveOfRoot(t testing.TB, dir gitstore.Oid) gitstore.Oid {
	t.Helper()
	root := r.tree(t, gitstore.TreeEntry{Mode: gitstore.ModeTree, Name: TasksDir, ID: dir})
	c := commitObj(root, "archive")
	r.write(t, c)
	return c.ID
}

// TestGCKeepsArchivedChains: with the archive ref the only ref, git gc
// --prune=now keeps every commit of every archived chain (the commits'
// parents hold them; git follows no gitlink), while it does prune a commit
// nothing reaches, so the test would see a chain go.
func TestGCKeepsArchivedChains(t *testing.T) {
	r := newRepo(t)
	tasks := taskNames(40)
	heads := r.chains(t, tasks, 2, "")
	var add []Entry
	for _, task := range tasks {
		add = append(add, heads[task])
	}
	c1, _ := r.archive(t, gitstore.ZeroOid, Update{Add: add[:25]})
	c2, _ := r.archive(t, c1, Update{Add: add[25:]})
	stray := commitObj(gitstore.EmptyTree, "nothing reaches me")
	r.write(t, stray)
	git(t, r.dir, "update-ref", "refs/bernstein/archive/w", c2.String())
	git(t, r.dir, "gc", "--prune=now", "--quiet")
	var ids []string
	for _, e := range heads {
		for _, id := range []gitstore.Oid{e.Journal, e.Ledger} {
			ids = append(ids, id.String(), id.String()+"~1")
		}
	}
	ids = append(ids, stray.ID.String())
	cmd := strings.Join(ids, "\n") + "\n"
	out := gitStdin(t, r.dir, cmd, "cat-file", "--batch-check")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, l := range lines[:len(lines)-1] {
		if strings.HasSuffix(l, " missing") {
			t.Fatalf("git gc --prune=now dropped an archived chain's commit %s", ids[i])
		}
	}
	if !strings.HasSuffix(lines[len(lines)-1], " missing") {
		t.Fatalf("git gc --prune=now kept a commit nothing reaches (%s): the test proves nothing", lines[len(lines)-1])
	}
	fsckStrict(t, r.dir)
}
