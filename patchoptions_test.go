package bernstein_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/record"
)

// patchKnob is one way a host's configuration or environment could change
// what git prints for a diff (issue 17, path 4).
type patchKnob struct {
	name   string
	config []string          // KEY=VALUE set in the repository's own config
	env    []string          // NAME=VALUE; {dir} is a folder of the knob's own, {repo} the work tree
	files  map[string]string // written before the capture, paths as in env; a .sh file is executable
	// naive says plain `git diff BASE HEAD` in that environment prints
	// other bytes than git's defaults: the knob is live, so the test of it
	// could fail.
	naive bool
}

// script is an external diff, a textconv or a diff driver's command that
// replaces what it is given.
const script = "#!/bin/sh\necho 'rewritten by a configured program'\n"

func patchKnobs() []patchKnob {
	all := []patchKnob{
		{name: "diff.context=0 in the repository's config", config: []string{"diff.context=0"}, naive: true},
		{name: "diff.interHunkContext=10", config: []string{"diff.interHunkContext=10"}, naive: true},
		{name: "diff.noprefix", config: []string{"diff.noprefix=true"}, naive: true},
		{name: "diff.mnemonicPrefix", config: []string{"diff.mnemonicPrefix=true"}, naive: true},
		{name: "diff.srcPrefix and diff.dstPrefix", config: []string{"diff.srcPrefix=SRC/", "diff.dstPrefix=DST/"}},
		{name: "diff.renames=copies", config: []string{"diff.renames=copies"}, naive: true},
		{name: "diff.algorithm=patience", config: []string{"diff.algorithm=patience"}, naive: true},
		{name: "diff.indentHeuristic=false", config: []string{"diff.indentHeuristic=false"}, naive: true},
		{name: "diff.suppressBlankEmpty", config: []string{"diff.suppressBlankEmpty=true"}, naive: true},
		{name: "diff.orderFile", config: []string{"diff.orderFile={dir}/order"}, files: map[string]string{"{dir}/order": "z.txt\n"}, naive: true},
		{name: "diff.relative", config: []string{"diff.relative=true"}},
		{name: "diff.submodule=log", config: []string{"diff.submodule=log"}},
		{name: "diff.ignoreSubmodules=all", config: []string{"diff.ignoreSubmodules=all"}},
		{name: "diff.external", config: []string{"diff.external={dir}/ext.sh"}, files: map[string]string{"{dir}/ext.sh": script}, naive: true},
		{name: "diff.wordRegex and diff.colorMoved", config: []string{"diff.wordRegex=.", "diff.colorMoved=zebra"}},
		{name: "color.ui=always", config: []string{"color.ui=always"}, naive: true},
		{name: "color.diff=always", config: []string{"color.diff=always", "color.diff.new=blue"}, naive: true},
		{name: "core.quotePath=false", config: []string{"core.quotePath=false"}, naive: true},
		{name: "core.bigFileThreshold=1", config: []string{"core.bigFileThreshold=1"}, naive: true},
		{name: "core.abbrev=7", config: []string{"core.abbrev=7"}, naive: true},
		{name: "a diff driver with textconv in .gitattributes", config: []string{"diff.conv.textconv={dir}/conv.sh"},
			files: map[string]string{"{repo}/.gitattributes": "*.txt diff=conv\n", "{dir}/conv.sh": script}, naive: true},
		{name: "a diff driver with a command in info/attributes", config: []string{"diff.cmd.command={dir}/ext.sh"},
			files: map[string]string{"{git}/info/attributes": "* diff=cmd\n", "{dir}/ext.sh": script}, naive: true},
		{name: "a driver's xfuncname (hunk headers)", config: []string{"diff.fn.xfuncname=^(line 1.*)$"},
			files: map[string]string{"{repo}/.gitattributes": "a.txt diff=fn\n"}, naive: true},
		{name: "-diff (binary) in .gitattributes", files: map[string]string{"{repo}/.gitattributes": "*.txt -diff\n"}, naive: true},
		{name: "core.attributesFile", config: []string{"core.attributesFile={dir}/attributes"},
			files: map[string]string{"{dir}/attributes": "*.txt -diff\n"}, naive: true},
		{name: "GIT_EXTERNAL_DIFF", env: []string{"GIT_EXTERNAL_DIFF={dir}/ext.sh"}, files: map[string]string{"{dir}/ext.sh": script}, naive: true},
		{name: "GIT_DIFF_OPTS=--unified=0", env: []string{"GIT_DIFF_OPTS=--unified=0"}, naive: true},
		{name: "GIT_CONFIG_COUNT, KEY, VALUE", env: []string{"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=diff.context", "GIT_CONFIG_VALUE_0=0",
			"GIT_CONFIG_KEY_1=diff.noprefix", "GIT_CONFIG_VALUE_1=true"}, naive: true},
		{name: "GIT_CONFIG_PARAMETERS", env: []string{"GIT_CONFIG_PARAMETERS='diff.context'='1' 'core.quotepath'='false'"}, naive: true},
		{name: "GIT_CONFIG_GLOBAL", env: []string{"GIT_CONFIG_GLOBAL={dir}/global"},
			files: map[string]string{"{dir}/global": "[diff]\n\tnoprefix = true\n\tcontext = 1\n[core]\n\tattributesFile = {dir}/attributes\n",
				"{dir}/attributes": "b.txt -diff\n"}, naive: true},
		{name: "GIT_CONFIG_SYSTEM with GIT_CONFIG_NOSYSTEM=0", env: []string{"GIT_CONFIG_SYSTEM={dir}/system", "GIT_CONFIG_NOSYSTEM=0"},
			files: map[string]string{"{dir}/system": "[diff]\n\tmnemonicPrefix = true\n[core]\n\tquotePath = false\n\tattributesFile = {dir}/attributes\n",
				"{dir}/attributes": "b.txt -diff\n"}, naive: true},
		{name: "HOME's .gitconfig and .config/git/attributes", env: []string{"HOME={dir}", "XDG_CONFIG_HOME="},
			files: map[string]string{"{dir}/.gitconfig": "[diff]\n\talgorithm = patience\n\tcontext = 2\n[core]\n\tattributesFile = {dir}/attributes\n",
				"{dir}/attributes":             "b.txt -diff\n",
				"{dir}/.config/git/attributes": "a.txt -diff\n"}, naive: true},
		{name: "XDG_CONFIG_HOME's git/config and git/attributes", env: []string{"XDG_CONFIG_HOME={dir}"},
			files: map[string]string{"{dir}/git/config": "[diff]\n\tinterHunkContext = 9\n", "{dir}/git/attributes": "b.txt -diff\n"}, naive: true},
		{name: "GIT_DIR and GIT_WORK_TREE naming the repository", env: []string{"GIT_DIR={repo}/.git", "GIT_WORK_TREE={repo}"}},
		{name: "a replace ref for the head commit", files: map[string]string{"replace": ""}, naive: true},
		{name: "LC_ALL and LANG", env: []string{"LC_ALL=de_DE.UTF-8", "LANG=de_DE.UTF-8", "LANGUAGE=de"}},
	}
	var every patchKnob
	every.name = "all of them at once"
	every.files = map[string]string{}
	for _, k := range all {
		if _, replace := k.files["replace"]; replace || strings.HasPrefix(k.name, "GIT_DIR") || strings.HasPrefix(k.name, "-diff") ||
			strings.HasPrefix(k.name, "a driver's") || strings.HasPrefix(k.name, "a diff driver with textconv") {
			continue // knobs that would override one another's files
		}
		every.config = append(every.config, k.config...)
		every.env = append(every.env, k.env...)
		for p, c := range k.files {
			every.files[p] = c
		}
	}
	every.naive = true
	return append(all, every)
}

// patchRepo commits two trees whose diff every knob has something to act
// on: hunks 8 lines apart, a hunk whose header a driver would set, an empty
// context line, a block the diff algorithms and the indent heuristic align
// differently, a file renamed, a file deleted, a binary file, a file whose
// mode changes, a name outside ASCII, files in a folder, in an order the
// order file reverses.
func patchRepo(f *fixture) (base, head string) {
	f.t.Helper()
	write := func(name, body string, mode os.FileMode) {
		p := filepath.Join(f.dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			f.t.Fatal(err)
		}
	}
	var a strings.Builder
	for i := 1; i <= 30; i++ {
		a.WriteString("line " + strconv.Itoa(i) + "\n")
		if i == 10 {
			a.WriteString("\n")
		}
	}
	blocks := "void func1() {\n    x += 1\n}\n\nvoid func2() {\n    x += 2\n}\n"
	write("a.txt", a.String(), 0o644)
	write("b.txt", blocks, 0o644)
	write("old name.txt", strings.Repeat("kept as it is\n", 8), 0o644)
	write("gone.txt", "deleted\n", 0o644)
	write("bin.dat", "\x00\x01\x02binary\n", 0o644)
	write("run.sh", "#!/bin/sh\necho run\n", 0o644)
	write("ünï.txt", "one\n", 0o644)
	write("sub/dir/z.txt", "in a folder\n", 0o644)
	f.git("add", "-A")
	f.git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-q", "-m", "base")
	base = strings.TrimSpace(f.git("rev-parse", "HEAD"))
	write("a.txt", strings.Replace(strings.Replace(a.String(), "line 5\n", "line five\n", 1), "line 13\n", "line thirteen\n", 1), 0o644)
	write("b.txt", "void func1() {\n    x += 1\n}\n\nvoid functhreehalves() {\n    x += 1.5\n}\n\nvoid func2() {\n    x += 2\n}\n", 0o644)
	f.git("mv", "old name.txt", "new name.txt")
	f.git("rm", "-q", "gone.txt")
	write("bin.dat", "\x00\x01\x03binary, changed\n", 0o644)
	if err := os.Chmod(filepath.Join(f.dir, "run.sh"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	write("ünï.txt", "two\n", 0o644)
	write("sub/dir/z.txt", "in a folder, changed\n", 0o644)
	f.git("add", "-A")
	f.git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-q", "-m", "head")
	head = strings.TrimSpace(f.git("rev-parse", "HEAD"))
	return base, head
}

// pristine runs git with nothing configured: a bare copy of the repository
// (no attributes, no diff settings, an unborn HEAD), an empty HOME and no
// system configuration. It is the test's own reference, independent of the
// code under test.
func pristine(t *testing.T, repo string) func(args ...string) []byte {
	t.Helper()
	root := t.TempDir()
	bare := filepath.Join(root, "pristine.git")
	clone := exec.Command("git", "clone", "-q", "--bare", "--no-local", repo, bare)
	clone.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1"}
	if out, err := clone.CombinedOutput(); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(bare, "HEAD"), []byte("ref: refs/heads/unborn\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir", bare}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "XDG_CONFIG_HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_ATTR_NOSYSTEM=1"}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pristine git %v: %v %s", args, err, exitStderr(err))
		}
		return out
	}
}

// TestPatchBytesIgnoreConfiguration: the patch a diff capture stores, and
// its counts, are git's defaults for the two trees (computed here by plain
// git in a pristine environment), whatever configuration, attributes or
// environment the capturing process has; through the library and the CLI.
// Each knob is first shown to change what plain `git diff` prints, so the
// test of it could fail.
func TestPatchBytesIgnoreConfiguration(t *testing.T) {
	f := newFixture(t)
	base, head := patchRepo(f)
	ref := pristine(t, f.dir)
	want := ref("diff-tree", "-p", "--full-index", base, head)
	numstat := string(ref("diff-tree", "-r", "--numstat", base, head))
	var files, added, removed int64
	for _, l := range strings.Split(strings.TrimSpace(numstat), "\n") {
		fs := strings.SplitN(l, "\t", 3)
		a, _ := strconv.ParseInt(fs[0], 10, 64)
		r, _ := strconv.ParseInt(fs[1], 10, 64)
		files, added, removed = files+1, added+a, removed+r
	}
	// The reference itself is what docs/format.md promises: default prefixes,
	// three lines of context, quoted names, binary files by their blob ids.
	for _, s := range []string{"diff --git a/a.txt b/a.txt\n", "@@ -2,7 +2,7 @@", "\"a/\\303\\274n\\303\\257.txt\"",
		"Binary files a/bin.dat and b/bin.dat differ\n", "old mode 100644\nnew mode 100755\n", "deleted file mode 100644\n",
		"diff --git a/new name.txt b/new name.txt\nnew file mode"} {
		if !bytes.Contains(want, []byte(s)) {
			t.Fatalf("the reference patch lacks %q:\n%s", s, want)
		}
	}
	plainDiff := func(env []string) []byte {
		cmd := exec.Command("git", "-C", f.dir, "diff", base, head)
		cmd.Env = env
		out, _ := cmd.Output()
		return out
	}
	s := f.open()
	f.startedTask(s, "P-lib")
	f.startedTask(s, "P-cli")
	gitDir := filepath.Join(f.dir, ".git")
	for _, k := range patchKnobs() {
		t.Run(k.name, func(t *testing.T) {
			dir := t.TempDir()
			expand := func(v string) string {
				return strings.NewReplacer("{dir}", dir, "{repo}", f.dir, "{git}", gitDir).Replace(v)
			}
			var undo []func()
			defer func() {
				for i := len(undo) - 1; i >= 0; i-- {
					undo[i]()
				}
			}()
			for p, c := range k.files {
				if p == "replace" {
					// A replace ref that swaps head's tree for base's.
					fake := strings.TrimSpace(string(mustOutput(t, execGitStdin(f.dir,
						[]byte(strings.Replace(f.git("cat-file", "commit", head), "tree "+strings.TrimSpace(f.git("rev-parse", head+"^{tree}")),
							"tree "+strings.TrimSpace(f.git("rev-parse", base+"^{tree}")), 1)),
						"hash-object", "-t", "commit", "-w", "--stdin"))))
					f.git("replace", head, fake)
					undo = append(undo, func() { f.git("replace", "-d", head) })
					continue
				}
				p = expand(p)
				os.MkdirAll(filepath.Dir(p), 0o755)
				mode := os.FileMode(0o644)
				if strings.HasSuffix(p, ".sh") {
					mode = 0o755
				}
				if err := os.WriteFile(p, []byte(expand(c)), mode); err != nil {
					t.Fatal(err)
				}
				undo = append(undo, func() { os.Remove(p) })
			}
			for _, kv := range k.config {
				key, v, _ := strings.Cut(kv, "=")
				f.git("config", key, expand(v))
				undo = append(undo, func() { f.git("config", "--unset-all", key) })
			}
			env := os.Environ()
			for _, kv := range k.env {
				name, v, _ := strings.Cut(kv, "=")
				old, had := os.LookupEnv(name)
				os.Setenv(name, expand(v))
				env = append(env, name+"="+expand(v))
				undo = append(undo, func() {
					if had {
						os.Setenv(name, old)
					} else {
						os.Unsetenv(name)
					}
				})
			}
			if naive := plainDiff(env); k.naive && bytes.Equal(naive, want) {
				t.Fatalf("plain git diff is not changed by the knob: the test of it could not fail")
			}
			res, err := s.CaptureDiff("P-lib", base, head, "")
			if err != nil {
				t.Fatalf("library: %v", err)
			}
			check := func(surface string, d record.DiffCaptured) {
				t.Helper()
				got := mustOutput(t, execGitStdin(f.dir, nil, "cat-file", "blob", d.Patch.Blob))
				if !bytes.Equal(got, want) {
					t.Errorf("%s: stored patch differs from git's defaults\n got:\n%s\nwant:\n%s", surface, got, want)
				}
				if d.Patch.Hash != record.Sum(want) || d.Files != files || d.Added != added || d.Removed != removed {
					t.Errorf("%s: patch %+v, files %d +%d -%d; want %s, %d +%d -%d", surface, d.Patch, d.Files, d.Added, d.Removed,
						record.Sum(want), files, added, removed)
				}
			}
			check("library", res.Data.(record.DiffCaptured))
			out, errOut, code := f.cli("", "diff", "capture", "P-cli", "--base", base, "--head", head, "--output-json")
			if code != 0 {
				t.Fatalf("CLI: exit %d %s", code, errOut)
			}
			var r struct {
				Data record.DiffCaptured `json:"data"`
			}
			decodeJSON(t, out, &r)
			check("CLI", r.Data)
		})
	}
	// Captured once per knob, the change earned once per task.
	for _, task := range []string{"P-lib", "P-cli"} {
		if p, _ := s.Progress(task); p.DiffsCaptured != 1 {
			t.Errorf("%s: %d diffs captured, want 1", task, p.DiffsCaptured)
		}
	}
}
