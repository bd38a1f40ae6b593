package tests

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
)

// earnEnv is the repository the earning table works in: one task per
// surface (the library, the CLI), both started with a declared gate and a
// declared producer, as issue 17 reproduced its paths.
type earnEnv struct {
	f     *fixture
	s     *bernstein.Store
	marks map[string]string // commits the steps name, by label
}

// commit commits the work tree's changes (all of them) with a plain
// identity and returns the new HEAD.
func (e *earnEnv) commit(args ...string) string {
	e.f.t.Helper()
	e.f.git(append([]string{"-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-q"}, args...)...)
	return strings.TrimSpace(e.f.git("rev-parse", "HEAD"))
}

// write sets file name of the work tree to body and stages it.
func (e *earnEnv) write(name, body string) {
	e.f.t.Helper()
	if err := os.WriteFile(filepath.Join(e.f.dir, name), []byte(body), 0o644); err != nil {
		e.f.t.Fatal(err)
	}
	e.f.git("add", name)
}

// rev resolves a revision with plain git.
func (e *earnEnv) rev(r string) string {
	e.f.t.Helper()
	return strings.TrimSpace(e.f.git("rev-parse", r))
}

// craft writes a commit object with plain git (tree, parent, author and
// message as given; a project committer) and returns its id.
func (e *earnEnv) craft(tree, parent, author, msg string) string {
	e.f.t.Helper()
	body := "tree " + tree + "\n"
	if parent != "" {
		body += "parent " + parent + "\n"
	}
	body += "author " + author + " 1700000000 +0000\ncommitter Dev <dev@example.com> 1700000000 +0000\n\n" + msg
	return strings.TrimSpace(string(mustOutput(e.f.t, execGitStdin(e.f.dir, []byte(body), "hash-object", "-t", "commit", "-w", "--literally", "--stdin"))))
}

// mktree writes a tree of blobs (name -> content) and returns its id.
func (e *earnEnv) mktree(files map[string]string) string {
	e.f.t.Helper()
	var spec strings.Builder
	for name, content := range files {
		blob := strings.TrimSpace(string(mustOutput(e.f.t, execGitStdin(e.f.dir, []byte(content), "hash-object", "-w", "--stdin"))))
		spec.WriteString("100644 blob " + blob + "\t" + name + "\n")
	}
	return strings.TrimSpace(string(mustOutput(e.f.t, execGitStdin(e.f.dir, []byte(spec.String()), "mktree"))))
}

// earnStep is one row of the table: what git does first (once, for both
// surfaces), then a checkpoint of a revision or a diff of two, and what
// must come of it on each surface.
type earnStep struct {
	name  string
	setup func(e *earnEnv)
	// checkpoint returns the revision to checkpoint; diff the base and head
	// to capture (exactly one is set). task is the surface's task.
	checkpoint func(e *earnEnv, task string) string
	diff       func(e *earnEnv, task string) (string, string)
	env        []string // NAME=VALUE set for the step (both surfaces)
	refused    string   // the field refused; "" when the row is recorded
	says       string   // a piece of the refusal, or of the note of a row that earns nothing
	earn       int64    // steps the recorded row earns
}

func (st earnStep) revs(e *earnEnv, task string) []string {
	if st.checkpoint != nil {
		return []string{st.checkpoint(e, task)}
	}
	b, h := st.diff(e, task)
	return []string{b, h}
}

// earnSteps are issue 17's inflation paths (1 to 4) and their variants, in
// the order they run; the earned steps accumulate.
func earnSteps() []earnStep {
	cpAt := func(label string) func(e *earnEnv, task string) string {
		return func(e *earnEnv, task string) string { return e.marks[label] }
	}
	cpRef := func(format string) func(e *earnEnv, task string) string {
		return func(e *earnEnv, task string) string { return strings.ReplaceAll(format, "TASK", task) }
	}
	cpID := func(format string) func(e *earnEnv, task string) string {
		return func(e *earnEnv, task string) string { return e.rev(strings.ReplaceAll(format, "TASK", task)) }
	}
	cpWriterKey := func(e *earnEnv, task string) string { return e.rev(e.f.writerRef("test-writer")) }
	diffOf := func(base, head string) func(e *earnEnv, task string) (string, string) {
		return func(e *earnEnv, task string) (string, string) { return e.marks[base], e.marks[head] }
	}
	mark := func(label string, do func(e *earnEnv) string) func(e *earnEnv) {
		return func(e *earnEnv) { e.marks[label] = do(e) }
	}
	const own = "bernstein's own record"
	return []earnStep{
		{name: "a commit with a new tree", checkpoint: cpRef("HEAD"), earn: 1},
		{name: "the same commit again", checkpoint: cpRef("HEAD"), says: progress.TreeCounted},

		// Path 1: the record itself, however it is named.
		{name: "the ledger by its ref", checkpoint: cpRef("refs/bernstein/ledger/TASK"), refused: "commit", says: own},
		{name: "the journal by its ref", checkpoint: cpRef("refs/bernstein/journal/TASK"), refused: "commit", says: own},
		{name: "the journal abbreviated, an ancestor", checkpoint: cpRef("bernstein/journal/TASK~1"), refused: "commit", says: "read through bernstein/journal/"},
		{name: "the journal's head by id", checkpoint: cpID("refs/bernstein/journal/TASK"), refused: "commit", says: "bernstein writer's identity"},
		{name: "the ledger's head by id", checkpoint: cpID("refs/bernstein/ledger/TASK"), refused: "commit", says: own},
		{name: "a ledger commit by id, deep in the chain", checkpoint: cpID("refs/bernstein/ledger/TASK~2"), refused: "commit", says: own},
		{name: "the spine's head by id", checkpoint: cpID("refs/bernstein/spine/test-writer"), refused: "commit", says: own},
		{name: "the audit mirror's head by id", checkpoint: cpID("refs/bernstein/audit/test-writer"), refused: "commit", says: own},
		{name: "the writer's key commit by id", checkpoint: cpWriterKey, refused: "commit", says: own},
		{name: "the repository's identity by id", checkpoint: cpID("refs/bernstein/repository"), refused: "commit", says: own},
		{name: "the earlier keys ref by its name", setup: func(e *earnEnv) {
			e.f.git("update-ref", "refs/bernstein/keys", e.f.writerRef("test-writer"))
		}, checkpoint: cpRef("refs/bernstein/keys"), refused: "commit", says: own},
		{name: "a fetched copy of a ledger", setup: func(e *earnEnv) {
			e.f.git("update-ref", "refs/bernstein-remotes/origin/ledger/X", "refs/bernstein/ledger/E-lib")
		}, checkpoint: cpRef("refs/bernstein-remotes/origin/ledger/X"), refused: "commit", says: own},
		{name: "a tag of the ledger's head", setup: func(e *earnEnv) {
			e.f.git("tag", "ledger-lib", "refs/bernstein/ledger/E-lib")
			e.f.git("tag", "ledger-cli", "refs/bernstein/ledger/E-cli")
		}, checkpoint: func(e *earnEnv, task string) string { return "ledger-" + strings.TrimPrefix(task, "E-") },
			refused: "commit", says: "bernstein writer's identity"},
		{name: "an annotated tag of the journal's head", setup: func(e *earnEnv) {
			e.f.git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "tag", "-a", "-m", "j", "journal-lib", "refs/bernstein/journal/E-lib")
			e.f.git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "tag", "-a", "-m", "j", "journal-cli", "refs/bernstein/journal/E-cli")
		}, checkpoint: func(e *earnEnv, task string) string { return "journal-" + strings.TrimPrefix(task, "E-") },
			refused: "commit", says: own},

		// Crafted commits that imitate a chain commit's shape.
		{name: "a project commit by a <name@bernstein> committer", setup: mark("bernstein-committer", func(e *earnEnv) string {
			e.write("crafted.txt", "committer\n")
			e.f.git("-c", "user.name=mallory", "-c", "user.email=mallory@bernstein", "commit", "-q", "-m", "looks like a chain commit")
			id := e.rev("HEAD")
			e.f.git("reset", "-q", "--hard", "HEAD~1")
			return id
		}), checkpoint: cpAt("bernstein-committer"), refused: "commit", says: "<mallory@bernstein>"},
		{name: "a project commit by a <name@Bernstein> author", setup: mark("bernstein-author", func(e *earnEnv) string {
			return e.craft(e.rev("HEAD^{tree}"), e.rev("HEAD"), "Mallory <mallory@Bernstein>", "an author from the record\n")
		}), checkpoint: cpAt("bernstein-author"), refused: "commit", says: "its author <mallory@Bernstein>"},
		{name: "a commit whose message carries a record", setup: mark("record-message", func(e *earnEnv) string {
			return e.craft(e.mktree(map[string]string{"x": "record message\n"}), e.rev("HEAD"), "Dev <dev@example.com>",
				"checkpoint #3\n\n{\"actor\": \"a\", \"kind\": \"checkpoint\", \"v\": 1}\n")
		}), checkpoint: cpAt("record-message"), refused: "commit", says: "carries a bernstein record"},
		{name: "a commit whose tree is a journal row's", setup: mark("journal-tree", func(e *earnEnv) string {
			return e.craft(e.rev(e.marks["artifact-row"]+"^{tree}"), e.rev("HEAD"), "Dev <dev@example.com>", "copied\n")
		}), checkpoint: cpAt("journal-tree"), refused: "commit", says: "a journal row's (artifacts/notes/v1.json)"},
		{name: "a commit whose tree is published keys", setup: mark("keys-tree", func(e *earnEnv) string {
			return e.craft(e.rev(e.f.writerRef("test-writer")+"^{tree}"), e.rev("HEAD"), "Dev <dev@example.com>", "copied\n")
		}), checkpoint: cpAt("keys-tree"), refused: "commit", says: "published writer keys'"},
		{name: "a commit whose tree is a spine seal's", setup: mark("seal-tree", func(e *earnEnv) string {
			return e.craft(e.mktree(map[string]string{"seal.sig": "-----BEGIN SSH SIGNATURE-----\n"}), e.rev("HEAD"), "Dev <dev@example.com>", "copied\n")
		}), checkpoint: cpAt("seal-tree"), refused: "commit", says: "a spine seal's"},

		// Path 2: commits that change nothing.
		{name: "git commit --allow-empty", setup: mark("e1", func(e *earnEnv) string { return e.commit("--allow-empty", "-m", "e1") }),
			checkpoint: cpRef("HEAD"), says: progress.TreeUnchanged},
		{name: "git commit --allow-empty, twice more", setup: func(e *earnEnv) { e.commit("--allow-empty", "-m", "e2"); e.commit("--allow-empty", "-m", "e3") },
			checkpoint: cpRef("HEAD"), says: progress.TreeUnchanged},
		{name: "git commit --amend --allow-empty --no-edit", setup: func(e *earnEnv) { e.commit("--amend", "--allow-empty", "--no-edit") },
			checkpoint: cpRef("HEAD"), says: progress.TreeUnchanged},
		{name: "and again", setup: func(e *earnEnv) { e.commit("--amend", "--allow-empty", "--no-edit", "--date=2001-01-01") },
			checkpoint: cpRef("HEAD"), says: progress.TreeUnchanged},
		{name: "a change", setup: mark("c3", func(e *earnEnv) string { e.write("planner.txt", "prefer merge joins\n"); return e.commit("-m", "c3") }),
			checkpoint: cpRef("HEAD"), earn: 1},
		{name: "an amend that keeps the tree", setup: func(e *earnEnv) { e.commit("--amend", "-m", "c3, reworded") },
			checkpoint: cpRef("HEAD"), says: progress.TreeCounted},
		{name: "another change", setup: mark("c4", func(e *earnEnv) string { e.write("planner.txt", "prefer index scans\n"); return e.commit("-m", "c4") }),
			checkpoint: cpRef("HEAD"), earn: 1},
		{name: "a revert back to a counted tree", setup: mark("revert", func(e *earnEnv) string {
			e.f.git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "revert", "--no-edit", "HEAD")
			return e.rev("HEAD")
		}), checkpoint: cpRef("HEAD"), says: progress.TreeCounted},
		{name: "a cherry-pick landing a counted tree", setup: mark("picked", func(e *earnEnv) string {
			e.f.git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "cherry-pick", e.marks["c4"])
			return e.rev("HEAD")
		}), checkpoint: cpRef("HEAD"), says: progress.TreeCounted},
		{name: "a rebase landing the same tree on another parent", setup: mark("rebased", func(e *earnEnv) string {
			return e.craft(e.rev(e.marks["c4"]+"^{tree}"), e.marks["e1"], "Dev <dev@example.com>", "rebased\n")
		}), checkpoint: cpAt("rebased"), says: progress.TreeCounted},
		{name: "an empty root commit", setup: mark("empty-root", func(e *earnEnv) string {
			return e.craft("4b825dc642cb6eb9a060e54bf8d69288fbee4904", "", "Dev <dev@example.com>", "root\n")
		}), checkpoint: cpAt("empty-root"), says: progress.TreeUnchanged},
		{name: "a root commit with files", setup: mark("root", func(e *earnEnv) string {
			return e.craft(e.mktree(map[string]string{"new.txt": "a fresh start\n"}), "", "Dev <dev@example.com>", "root\n")
		}), checkpoint: cpAt("root"), earn: 1},
		{name: "a commit whose first parent is not here", setup: mark("orphaned", func(e *earnEnv) string {
			return e.craft(e.mktree(map[string]string{"shallow.txt": "x\n"}), strings.Repeat("1", 40), "Dev <dev@example.com>", "shallow\n")
		}), checkpoint: cpAt("orphaned"), refused: "commit", says: "is not in this repository"},

		// Paths 3 and 4: one change, however captured.
		{name: "a diff with base == head", diff: diffOf("c3", "c3"), says: progress.SameTrees},
		{name: "a diff of a change", diff: diffOf("c3", "c4"), earn: 1},
		{name: "the same change reversed", diff: diffOf("c4", "c3"), says: progress.ChangeCaptured},
		{name: "the same change between other commits", diff: diffOf("revert", "picked"), says: progress.ChangeCaptured},
		{name: "the same change with diff.context=0 in GIT_CONFIG_*", diff: diffOf("c3", "c4"), says: progress.ChangeCaptured,
			env: []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=diff.context", "GIT_CONFIG_VALUE_0=0"}},
		{name: "the same change with diff.noprefix in the repository's config", setup: func(e *earnEnv) { e.f.git("config", "diff.noprefix", "true") },
			diff: diffOf("c3", "c4"), says: progress.ChangeCaptured},
		{name: "trees that differ only in a mode", setup: mark("x", func(e *earnEnv) string {
			e.f.git("config", "--unset", "diff.noprefix")
			e.f.git("update-index", "--chmod=+x", "planner.txt")
			return e.commit("-m", "executable")
		}), diff: diffOf("picked", "x"), earn: 1},
		{name: "a diff whose base is a journal commit", diff: func(e *earnEnv, task string) (string, string) {
			return "refs/bernstein/journal/" + task + "~1", "HEAD"
		}, refused: "base", says: own},
		{name: "a diff whose head is the journal's head by id", diff: func(e *earnEnv, task string) (string, string) {
			return e.rev("refs/bernstein/journal/" + task + "~1"), e.rev("refs/bernstein/journal/" + task)
		}, refused: "base", says: own},
		{name: "a diff whose head is a ledger commit", diff: func(e *earnEnv, task string) (string, string) {
			return "HEAD", e.rev("refs/bernstein/ledger/" + task)
		}, refused: "head", says: own},
		{name: "a diff to a crafted commit with a <name@bernstein> committer", diff: func(e *earnEnv, task string) (string, string) {
			return "HEAD", e.marks["bernstein-committer"]
		}, refused: "head", says: "<mallory@bernstein>"},
	}
}

// cliReceipt is what checkpoint and diff capture print with --output-json.
type cliReceipt struct {
	Note     string        `json:"note"`
	Progress progress.Wire `json:"progress"`
}

// TestEarnedOnlyForNewWork runs every step of earnSteps through the library
// and the CLI: a refused step names its field, says why in one line and
// writes nothing; a recorded one earns exactly what the table says, and a
// row that earns nothing says why.
func TestEarnedOnlyForNewWork(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	e := &earnEnv{f: f, s: s, marks: map[string]string{}}
	tasks := []string{"E-lib", "E-cli"}
	earned := map[string]int64{}
	for _, task := range tasks {
		tok := f.startedTask(s, task)
		f.post(s, task, "notes", "agent", tok, report("a journal row with a tree"))
		e.marks["artifact-row"] = e.rev("refs/bernstein/journal/" + task)
		if _, err := s.RunGate(task, "build", nil, bernstein.RunOptions{}); err != nil {
			t.Fatal(err)
		}
		earned[task] = 1 // the declared gate passed
	}
	for _, st := range earnSteps() {
		if st.setup != nil {
			st.setup(e)
		}
		var restore []func()
		for _, kv := range st.env {
			k, v, _ := strings.Cut(kv, "=")
			old, had := os.LookupEnv(k)
			os.Setenv(k, v)
			restore = append(restore, func() {
				if had {
					os.Setenv(k, old)
				} else {
					os.Unsetenv(k)
				}
			})
		}
		for _, task := range tasks {
			revs := st.revs(e, task)
			refsBefore, objectsBefore := f.refsSnapshot(), f.objectFiles()
			var got struct {
				refused, msg, note string
				earned             int64
			}
			if task == "E-lib" {
				var res *bernstein.WorkResult
				var err error
				if st.checkpoint != nil {
					res, err = s.Checkpoint(task, revs[0], "")
				} else {
					res, err = s.CaptureDiff(task, revs[0], revs[1], "")
				}
				var in *artifact.InputError
				switch {
				case errors.As(err, &in):
					got.refused, got.msg = in.Field, err.Error()
				case err != nil:
					t.Fatalf("%s (library): %v", st.name, err)
				default:
					got.note, got.earned = res.Note, res.Progress.EarnedSteps
				}
			} else {
				args := []string{"checkpoint", task, "--commit", revs[0], "--output-json"}
				if st.diff != nil {
					args = []string{"diff", "capture", task, "--base", revs[0], "--head", revs[1], "--output-json"}
				}
				out, errOut, code := f.cli("", args...)
				switch code {
				case 0:
					var r cliReceipt
					decodeJSON(t, out, &r)
					got.note, got.earned = r.Note, r.Progress.EarnedSteps
					if r.Note != "" && !strings.Contains(errOut, "note: "+r.Note) {
						t.Errorf("%s (CLI): the note is not on stderr: %q", st.name, errOut)
					}
				case 1:
					got.msg = strings.TrimSpace(errOut)
					if strings.Contains(got.msg, "\n") {
						t.Errorf("%s (CLI): the refusal is more than one line:\n%s", st.name, errOut)
					}
					if strings.HasPrefix(got.msg, "bernstein: invalid ") {
						got.refused, _, _ = strings.Cut(strings.TrimPrefix(got.msg, "bernstein: invalid "), ":")
					}
				default:
					t.Fatalf("%s (CLI): exit %d\n%s%s", st.name, code, out, errOut)
				}
			}
			surface := map[string]string{"E-lib": "library", "E-cli": "CLI"}[task]
			if got.refused != st.refused {
				t.Errorf("%s (%s): refused %q (%s), want %q", st.name, surface, got.refused, got.msg, st.refused)
				continue
			}
			if st.refused != "" {
				if !strings.Contains(got.msg, st.says) {
					t.Errorf("%s (%s): refusal %q does not say %q", st.name, surface, got.msg, st.says)
				}
				if f.refsSnapshot() != refsBefore || !reflect.DeepEqual(f.objectFiles(), objectsBefore) {
					t.Errorf("%s (%s): a refused step wrote something", st.name, surface)
				}
				continue
			}
			if got.earned != earned[task]+st.earn {
				t.Errorf("%s (%s): earned %d, want %d", st.name, surface, got.earned, earned[task]+st.earn)
			}
			earned[task] = got.earned
			if st.earn == 0 && !strings.Contains(got.note, st.says) || st.earn > 0 && got.note != "" {
				t.Errorf("%s (%s): note %q, want one saying %q", st.name, surface, got.note, st.says)
			}
		}
		for _, r := range restore {
			r()
		}
	}
	// Both surfaces folded the same work: the same vector, but for the id.
	pl, _ := s.Progress("E-lib")
	pc, _ := s.Progress("E-cli")
	pc.TaskID = pl.TaskID
	if !reflect.DeepEqual(pl.Vector.Bytes(), pc.Vector.Bytes()) {
		t.Fatalf("the surfaces disagree:\n%s\n%s", pl.Vector.Bytes(), pc.Vector.Bytes())
	}
	// 1 gate, checkpoints of 4 new trees, 2 changes.
	if pl.EarnedSteps != 7 || pl.Checkpoints != 4 || pl.DiffsCaptured != 2 {
		t.Fatalf("after the table: %+v", pl.Vector)
	}
}

// TestCheckpointRowsCarryTheirTrees: a checkpoint row records the commit's
// tree and its first parent's (the empty tree's id for a root commit), a
// diff row both trees, as plain git reads them; the fold needs nothing else.
func TestCheckpointRowsCarryTheirTrees(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	f.startedTask(s, "R-1")
	rev := func(r string) string { return strings.TrimSpace(f.git("rev-parse", r)) }
	for _, c := range []struct{ rev, tree, parent string }{
		{"HEAD", rev("HEAD^{tree}"), rev("HEAD~1^{tree}")},
		{"HEAD~1", rev("HEAD~1^{tree}"), "4b825dc642cb6eb9a060e54bf8d69288fbee4904"}, // git hash-object -t tree /dev/null
	} {
		res, err := s.Checkpoint("R-1", c.rev, "")
		if err != nil {
			t.Fatal(err)
		}
		var row record.Checkpoint
		decodeJSON(t, f.git("show", "-s", "--format=%b", "refs/bernstein/journal/R-1"), &struct {
			Data *record.Checkpoint `json:"data"`
		}{&row})
		if row.Commit != rev(c.rev) || row.Tree != c.tree || row.ParentTree != c.parent || res.Data.(record.Checkpoint) != row {
			t.Fatalf("checkpoint of %s: row %+v, want tree %s parent tree %s", c.rev, row, c.tree, c.parent)
		}
	}
	if _, err := s.CaptureDiff("R-1", "HEAD", "HEAD~1", ""); err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	decodeJSON(t, f.git("show", "-s", "--format=%b", "refs/bernstein/journal/R-1"), &struct {
		Data *map[string]any `json:"data"`
	}{&d})
	if d["base_tree"] != rev("HEAD^{tree}") || d["head_tree"] != rev("HEAD~1^{tree}") {
		t.Fatalf("diff row %v", d)
	}
	b, _ := json.Marshal(d)
	if !strings.Contains(string(b), `"base":"`+rev("HEAD")+`"`) {
		t.Fatalf("diff row %s", b)
	}
}

// TestFoldNeedsNoCommits: a host that fetched the task's chains, spines,
// audit mirrors and keys but none of the project's commits, trees or blobs
// (not the anchors refs that carry them, docs/format.md, Anchors) folds the
// same vector, byte for byte, as the host that did the work: the rows carry
// the trees the fold compares.
func TestFoldNeedsNoCommits(t *testing.T) {
	a := newFixture(t)
	a.withCommits()
	sa := a.open()
	a.startedTask(sa, "X-1")
	e := &earnEnv{f: a, s: sa, marks: map[string]string{}}
	work := func(rev string) {
		t.Helper()
		if _, err := sa.Checkpoint("X-1", rev, ""); err != nil {
			t.Fatal(err)
		}
	}
	work("HEAD~1")
	work("HEAD")
	e.commit("--allow-empty", "-m", "nothing")
	work("HEAD")
	e.write("planner.txt", "prefer merge joins\n")
	c3 := e.commit("-m", "c3")
	work("HEAD")
	a.git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "revert", "--no-edit", "HEAD")
	work("HEAD")
	for _, d := range [][2]string{{"HEAD~2", c3}, {c3, "HEAD~2"}, {"HEAD", "HEAD"}} {
		if _, err := sa.CaptureDiff("X-1", d[0], d[1], ""); err != nil {
			t.Fatal(err)
		}
	}

	root := t.TempDir()
	c := &fixture{t: t, dir: filepath.Join(root, "c"), home: filepath.Join(root, "home-c")}
	c.opts = bernstein.Options{Repo: c.dir, Home: c.home}
	if out, err := execGit(root, "init", "-q", c.dir); err != nil {
		t.Fatalf("init: %v %s", err, out)
	}
	var specs []string
	for _, p := range []string{"journal", "ledger", "spine", "audit", "writers"} {
		specs = append(specs, "refs/bernstein/"+p+"/*:refs/bernstein/"+p+"/*")
	}
	specs = append(specs, "refs/bernstein/repository:refs/bernstein/repository")
	c.git(append([]string{"fetch", "-q", a.dir}, specs...)...)
	if _, err := c.gitErr("cat-file", "-e", c3); err == nil {
		t.Fatalf("host c has the project's commit %s", c3)
	}
	pins := filepath.Join(root, "allowed_signers")
	if err := os.WriteFile(pins, []byte(a.publishedSigners()), 0o644); err != nil {
		t.Fatal(err)
	}
	c.opts.AllowedSigners = pins
	pa, err := sa.Progress("X-1")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.open().Progress("X-1")
	if err != nil {
		t.Fatal(err)
	}
	// Checkpoints of HEAD~1, HEAD and c3 (the empty commit and the revert
	// earn nothing), one change (captured both ways), the gate not run.
	const want = `{"checkpoints":3,"diffs_captured":1,"evidence_declared":1,"evidence_passed":0,"gate_attempts":0,"gates_passed":0,` +
		`"ledger_attempts":1,"ledger_phase":"started","schema_version":3,"task_id":"X-1","terminal":false}`
	if string(pa.Vector.Bytes()) != want || string(pc.Vector.Bytes()) != want || pa.VectorHash != pc.VectorHash || pc.Proof.State != "verified" {
		t.Fatalf("host a %s\nhost c %s (%s)\nwant   %s", pa.Vector.Bytes(), pc.Vector.Bytes(), pc.Proof.State, want)
	}
}
