package hooks_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// forgeRow appends a correctly chained checkpoint row to the host's T-1
// journal with plain git: nobody signs it.
func forgeRow(t *testing.T, h *host) int {
	t.Helper()
	journal := "refs/bernstein/journal/T-1"
	head := h.git("rev-parse", journal)
	rec := recordOf(t, h, head)
	n := index(t, decode(t, rec), "index") + 1
	row := fmt.Sprintf(`{"actor":"mallory","data":{"commit":"%s"},"index":%d,"kind":"checkpoint","prev":"%s","task_id":"T-1","v":1}`,
		h.git("rev-parse", "HEAD"), n, sha256Hex(rec))
	h.git("update-ref", journal, commitTree(t, h, emptyTree, head, "host-a", fmt.Sprintf("checkpoint #%d\n\n%s\n", n, row), ""), head)
	return n
}

func TestGuardTrustFirstUse(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	r := newRemote(t)
	mustContain(t, r.mustCLI("hooks", "install", "--remote-guard", "--trust-first-use"), "trust on first use")
	fp := h.fingerprint()
	out, code := h.push(r, "--atomic", allBernstein)
	if code != 0 {
		t.Fatalf("first push refused:\n%s", out)
	}
	mustContain(t, out, "bernstein guard: pinned writer host-a's key "+fp+" on first use")
	// The key is pinned in the operator's pin file: the line the host's
	// writers ref publishes.
	var list struct {
		PinFile string `json:"pin_file"`
	}
	if err := json.Unmarshal([]byte(r.mustCLI("keys", "list", "--output-json")), &list); err != nil {
		t.Fatal(err)
	}
	pins, err := os.ReadFile(list.PinFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pins), strings.TrimSpace(h.signers())) {
		t.Fatalf("pin file %s:\n%s\nlacks %s", list.PinFile, pins, h.signers())
	}
	// The same writer keeps pushing.
	h.post("T-1", "summary", "second")
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("second push refused:\n%s", out)
	}
	// Another home claiming the writer id host-a has another key: its
	// rows are refused, naming that key.
	m := newHost(t, "host-a")
	m.task("T-9")
	m.post("T-9", "summary", "impostor")
	mfp := m.fingerprint()
	if mfp == fp {
		t.Fatal("two homes made the same key")
	}
	before := r.refs()
	out, code = m.push(r, "--atomic", "refs/bernstein/journal/T-9:refs/bernstein/journal/T-9", "refs/bernstein/ledger/T-9:refs/bernstein/ledger/T-9")
	if code == 0 {
		t.Fatalf("impostor's push accepted:\n%s", out)
	}
	mustContain(t, out, "refused refs/bernstein/journal/T-9 (task T-9, journal index 0, writer host-a, key "+mfp+"): signed by "+mfp+", which is not the pinned key of writer host-a [row_signature]")
	if after := r.refs(); after != before {
		t.Fatalf("refs moved:\n%s\n%s", before, after)
	}
}

// TestGuardUnpinnedWriter: without pins or first use, a writer's rows are
// refused (once per ref, with the way out); its key alone may be published,
// and once the operator pins it, its rows pass.
func TestGuardUnpinnedWriter(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	h.post("T-1", "summary", "second")
	r := newRemote(t)
	mustContain(t, r.mustCLI("hooks", "install", "--remote-guard"), "no writer key is trusted yet")
	out, code := h.push(r, "--atomic", allBernstein)
	if code == 0 {
		t.Fatalf("push accepted:\n%s", out)
	}
	mustContain(t, out, "refused refs/bernstein/journal/T-1 (task T-1, journal index 0, writer host-a, key "+h.fingerprint()+"): writer host-a has no key pinned on this remote (and 1 more commits of this push after this one): "+
		"the operator pins it inside the remote repository ('bernstein keys pin --repo "+r.dir+" host-a', after checking its fingerprint), or installs the guard with --trust-first-use [row_signature]")
	if n := strings.Count(out, "refused refs/bernstein/journal/T-1"); n != 1 {
		t.Fatalf("%d refusals of the journal, want one:\n%s", n, out)
	}
	if r.refs() != "" {
		t.Fatalf("refs moved: %s", r.refs())
	}
	if out, code := h.push(r, h.writerRef()+":"+h.writerRef()); code != 0 {
		t.Fatalf("publishing the key alone refused:\n%s", out)
	}
	mustContain(t, r.mustCLI("keys", "pin", "host-a"), "pinned host-a "+h.fingerprint())
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push after pinning refused:\n%s", out)
	}
}

func TestPrePush(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	out, code := h.cli("hooks", "install", "--pre-push")
	if code != 0 {
		t.Fatalf("install: %s", out)
	}
	mustContain(t, out, "installed the pre-push check: "+filepath.Join(h.dir, ".git", "hooks", "pre-push"))
	r := guardedFirstUse(t)

	tampered := h.copyRepo()
	n := forgeRow(t, tampered)
	out, code = tampered.push(r, "--atomic", allBernstein)
	if code == 0 {
		t.Fatalf("tampered push left:\n%s", out)
	}
	mustContain(t, out, fmt.Sprintf("bernstein pre-push: refused refs/bernstein/journal/T-1 (task T-1, journal index %d, writer host-a): commit is not signed [row_signature]", n),
		"bernstein pre-push: push stopped")
	notReached(t, out)
	if got := r.refs(); got != "" {
		t.Fatalf("something left: %s", got)
	}

	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("good push stopped:\n%s", out)
	} else {
		mustContain(t, out, "bernstein guard: pinned writer host-a's key "+h.fingerprint()+" on first use")
	}
	// On top of what the remote holds, only the new commits are walked,
	// and a forged one among them still stops the push.
	h.post("T-1", "summary", "second")
	stale := h.copyRepo()
	n = forgeRow(t, h)
	before := r.refs()
	out, code = h.push(r, "--atomic", allBernstein)
	if code == 0 {
		t.Fatalf("tampered push left:\n%s", out)
	}
	mustContain(t, out, fmt.Sprintf("(task T-1, journal index %d, writer host-a): commit is not signed [row_signature]", n))
	notReached(t, out)
	if r.refs() != before {
		t.Fatal("refs moved")
	}
	// A forced push over commits this repository never saw is stopped.
	stale.post("T-1", "summary", "elsewhere")
	if out, code := stale.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push refused: %s", out)
	}
	h.git("update-ref", "-d", "refs/bernstein/journal/T-1")
	h.git("update-ref", "refs/bernstein/journal/T-1", stale.git("rev-parse", "refs/bernstein/journal/T-1~1"))
	out, code = h.push(r, "--force", "refs/bernstein/journal/T-1:refs/bernstein/journal/T-1")
	if code == 0 {
		t.Fatalf("forced push left:\n%s", out)
	}
	mustContain(t, out, "which this repository does not have", "[non_fast_forward]")
	notReached(t, out)
}

// guardedFirstUse is a remote whose guard trusts on first use: the pre-push
// tests' good pushes go through it as every good push of the suite does,
// while what the pre-push check stops never reaches it.
func guardedFirstUse(t *testing.T) *remote {
	t.Helper()
	r := newRemote(t)
	r.mustCLI("hooks", "install", "--remote-guard", "--trust-first-use")
	return r
}

// notReached fails if a push's output shows that the remote's guard ran:
// the pre-push check stopped it before anything was sent.
func notReached(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(out, "bernstein guard") {
		t.Fatalf("the push reached the remote's guard:\n%s", out)
	}
}

// TestPrePushUnpinnedWriter: rows of a writer this repository has not
// pinned are stopped before they leave, with advice for this repository
// (pin the key here), not the remote guard's; once pinned here, they go.
func TestPrePushUnpinnedWriter(t *testing.T) {
	a := newHost(t, "host-a")
	a.task("T-1")
	a.post("T-1", "summary", "first")
	a.post("T-1", "summary", "second")
	b := newHostFrom(t, "host-b", a)
	if out, code := b.cli("hooks", "install", "--pre-push"); code != 0 {
		t.Fatalf("install: %s", out)
	}
	r := guardedFirstUse(t)
	out, code := b.push(r, "--atomic", allBernstein)
	if code == 0 {
		t.Fatalf("push of unpinned rows left:\n%s", out)
	}
	mustContain(t, out, "bernstein pre-push: refused refs/bernstein/journal/T-1 (task T-1, journal index 0, writer host-a, key "+a.fingerprint()+"): "+
		"writer host-a has no key pinned in this repository (and 1 more commits of this push after this one): "+
		"check its fingerprint with its owner ('bernstein keys list'), pin it here ('bernstein keys pin host-a'), then push again [row_signature]")
	for _, remoteWords := range []string{"on this remote", "the operator", "--trust-first-use", "--repo"} {
		if strings.Contains(out, remoteWords) {
			t.Fatalf("the pre-push advice speaks of the remote (%q):\n%s", remoteWords, out)
		}
	}
	notReached(t, out)
	if r.refs() != "" {
		t.Fatalf("refs left: %s", r.refs())
	}
	mustContain(t, b.mustCLIOut("keys", "pin", "host-a"), "pinned host-a "+a.fingerprint())
	if out, code := b.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push after pinning stopped:\n%s", out)
	} else {
		mustContain(t, out, "bernstein guard: pinned writer host-a's key "+a.fingerprint()+" on first use")
	}
}

// commitIn commits a change in dir (work.txt set to msg: a tree of its
// own) with the host's environment plus extra, returning git's output and
// exit status.
func commitIn(t *testing.T, h *host, dir, msg string, extra ...string) (string, int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "work.txt"), []byte(msg+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, dir, h.env(extra...), "", "git", "add", "work.txt"); code != 0 {
		return out, code
	}
	return run(t, dir, h.env(extra...), "", "git", "commit", "-m", msg)
}

type progressDoc struct {
	Checkpoints int64  `json:"checkpoints"`
	EarnedSteps int64  `json:"earned_steps"`
	JournalHead string `json:"journal_head"`
	JournalRows int64  `json:"journal_rows"`
}

func progressOf(t *testing.T, h *host) progressDoc {
	t.Helper()
	out, code := h.cli("task", "progress", "T-1", "--output-json")
	if code != 0 {
		t.Fatalf("task progress: %s", out)
	}
	var p progressDoc
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return p
}

func TestCheckpointHook(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	out, code := h.cli("hooks", "install", "--checkpoint", "T-1")
	if code != 0 {
		t.Fatalf("install: %s", out)
	}
	mustContain(t, out, "installed the checkpoint hook (post-commit)")
	wt := filepath.Join(h.root, "wt")
	h.git("worktree", "add", "-q", wt)
	before := progressOf(t, h)

	// Three commits in a linked worktree: three checkpoint rows naming
	// them, and the progress vector moves.
	var commits []string
	for i := 1; i <= 3; i++ {
		out, code := commitIn(t, h, wt, fmt.Sprintf("work %d", i))
		if code != 0 {
			t.Fatalf("commit: %s", out)
		}
		mustContain(t, out, "bernstein: checkpoint row")
		c, _ := run(t, wt, h.env(), "", "git", "rev-parse", "HEAD")
		commits = append(commits, strings.TrimSpace(c))
	}
	checkRows := func(want []string) {
		t.Helper()
		for i, c := range want {
			rev := fmt.Sprintf("refs/bernstein/journal/T-1~%d", len(want)-1-i)
			rec := decode(t, recordOf(t, h, rev))
			data := rec["data"].(map[string]any)
			if rec["kind"] != "checkpoint" || data["commit"] != c {
				t.Fatalf("row %s is %v, want a checkpoint of %s", rev, rec, c)
			}
		}
	}
	checkRows(commits)
	after := progressOf(t, h)
	if after.Checkpoints != before.Checkpoints+3 || after.JournalRows != before.JournalRows+3 || after.JournalHead == before.JournalHead {
		t.Fatalf("progress before %+v, after %+v", before, after)
	}

	// A broken bernstein first on PATH changes nothing: the hook calls
	// the binary that installed it.
	bin := filepath.Join(t.TempDir(), "bin")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "bernstein"), []byte("#!/bin/sh\necho broken bernstein >&2\nexit 3\n"), 0o755)
	out, code = commitIn(t, h, wt, "work 4", "PATH="+bin+":"+os.Getenv("PATH"))
	if code != 0 || strings.Contains(out, "broken bernstein") {
		t.Fatalf("commit with a broken bernstein on PATH: exit %d\n%s", code, out)
	}
	c, _ := run(t, wt, h.env(), "", "git", "rev-parse", "HEAD")
	commits = append(commits, strings.TrimSpace(c))
	checkRows(commits)

	// A checkpoint that fails leaves the commit standing and says why.
	if _, err := h.s.Transition("T-1", "task.abandoned", "", "given up"); err != nil {
		t.Fatal(err)
	}
	head := h.git("rev-parse", "refs/bernstein/journal/T-1")
	out, code = commitIn(t, h, wt, "work 5")
	if code != 0 {
		t.Fatalf("commit blocked: exit %d\n%s", code, out)
	}
	mustContain(t, out, "bernstein: the commit stands, but its checkpoint of task T-1 was not recorded: task T-1 is abandoned")
	if h.git("rev-parse", "refs/bernstein/journal/T-1") != head {
		t.Fatal("a row was recorded on an abandoned task")
	}
	if msg, _ := run(t, wt, h.env(), "", "git", "log", "-1", "--format=%s"); strings.TrimSpace(msg) != "work 5" {
		t.Fatalf("the commit did not stand: %s", msg)
	}
}

// TestCheckpointHookEarnsOnlyNewTrees: with the checkpoint hook installed,
// commits that change nothing (issue 17, path 2: empty commits, amends of
// them, an amend that keeps the tree, a revert back to a counted tree) are
// recorded and earn nothing, and the hook says why in one line; a commit
// shaped as bernstein's own record is refused and nothing is written; the
// commit stands either way.
func TestCheckpointHookEarnsOnlyNewTrees(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	if out, code := h.cli("hooks", "install", "--checkpoint", "T-1"); code != 0 {
		t.Fatalf("install: %s", out)
	}
	git := func(args ...string) []string { return append([]string{"git"}, args...) }
	steps := []struct {
		name string
		cmd  []string // run in the work tree (after setting work.txt to the step's name when change is set)
		// change writes work.txt first, with this content.
		change string
		env    []string
		says   string // in the hook's line
		rows   int64  // journal rows added
		earn   int64
	}{
		{name: "git commit --allow-empty", cmd: git("commit", "--allow-empty", "-m", "e1"), says: "earns nothing: its tree is its first parent's", rows: 1},
		{name: "again", cmd: git("commit", "--allow-empty", "-m", "e2"), says: "earns nothing", rows: 1},
		{name: "and again", cmd: git("commit", "--allow-empty", "-m", "e3"), says: "earns nothing", rows: 1},
		{name: "git commit --amend --allow-empty --no-edit", cmd: git("commit", "--amend", "--allow-empty", "--no-edit"), says: "earns nothing", rows: 1},
		{name: "and again", cmd: git("commit", "--amend", "--allow-empty", "--no-edit", "--date=2001-01-01"), says: "earns nothing", rows: 1},
		{name: "a change", change: "one", cmd: git("commit", "-am", "one"), says: "recorded\n", rows: 1, earn: 1},
		{name: "an amend that keeps the tree", cmd: git("commit", "--amend", "-m", "one, reworded"), says: "earns nothing: its tree was counted", rows: 1},
		{name: "another change", change: "two", cmd: git("commit", "-am", "two"), says: "recorded\n", rows: 1, earn: 1},
		{name: "a revert back to a counted tree", cmd: git("revert", "--no-edit", "HEAD"), says: "earns nothing: its tree was counted", rows: 1},
		{name: "a commit by a <name@bernstein> identity", change: "three", cmd: git("commit", "-am", "three"),
			env:  []string{"GIT_COMMITTER_EMAIL=mallory@bernstein"},
			says: "not recorded: commit: \"HEAD\" is a commit of bernstein's own record"},
	}
	for _, st := range steps {
		before := progressOf(t, h)
		if st.change != "" {
			if err := os.WriteFile(filepath.Join(h.dir, "work.txt"), []byte(st.change+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			h.git("add", "work.txt")
		}
		out, code := run(t, h.dir, h.env(st.env...), "", st.cmd[0], st.cmd[1:]...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", st.name, code, out)
		}
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "bernstein: ") {
				if line != "" {
					t.Fatalf("%s: the hook said more than one line:\n%s", st.name, out)
				}
				line = l + "\n"
			}
		}
		mustContain(t, line, st.says)
		after := progressOf(t, h)
		if after.JournalRows != before.JournalRows+st.rows || after.EarnedSteps != before.EarnedSteps+st.earn {
			t.Fatalf("%s: rows %d -> %d, earned %d -> %d; want +%d rows, +%d earned", st.name, before.JournalRows, after.JournalRows,
				before.EarnedSteps, after.EarnedSteps, st.rows, st.earn)
		}
		if msg := h.git("log", "-1", "--format=%s"); st.change != "" && msg != st.change {
			t.Fatalf("%s: the commit did not stand: %s", st.name, msg)
		}
	}
}

func TestInstallChainsAndUninstallRestores(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	r := newRemote(t)
	hook := filepath.Join(r.dir, "hooks", "pre-receive")
	own := "#!/bin/sh\necho 'site policy: pushes are closed today' >&2\nexit 1\n"
	if err := os.WriteFile(hook, []byte(own), 0o755); err != nil {
		t.Fatal(err)
	}
	out := r.mustCLI("hooks", "install", "--remote-guard")
	mustContain(t, out, "kept the pre-receive hook that was there as "+hook+".chained", "its refusal refuses the push")
	script, _ := os.ReadFile(hook)
	// Installing twice changes nothing.
	mustContain(t, r.mustCLI("hooks", "install", "--remote-guard"), "is installed already")
	if again, _ := os.ReadFile(hook); string(again) != string(script) {
		t.Fatalf("second install rewrote the hook:\n%s", again)
	}
	if kept, _ := os.ReadFile(hook + ".chained"); string(kept) != own {
		t.Fatalf("kept hook: %q", kept)
	}
	r.pin("host-a", h.signers())
	// The guard passes the push; the chained hook still refuses it, with
	// its own message.
	out, code := h.push(r, "--atomic", allBernstein)
	if code == 0 {
		t.Fatalf("push accepted:\n%s", out)
	}
	mustContain(t, out, "site policy: pushes are closed today", "the chained pre-receive hook refused the push (exit status 1)")
	if r.refs() != "" {
		t.Fatal("refs moved")
	}
	// Uninstall puts the site's hook back as it was.
	mustContain(t, r.mustCLI("hooks", "uninstall", "--remote-guard"), "restored the hook it had kept: "+hook)
	if got, _ := os.ReadFile(hook); string(got) != own {
		t.Fatalf("restored hook: %q", got)
	}
	if _, err := os.Stat(hook + ".chained"); !os.IsNotExist(err) {
		t.Fatalf("%s.chained still there: %v", hook, err)
	}
	// Uninstalling what is not ours is refused and changes nothing.
	out, code = r.cli("hooks", "uninstall", "--remote-guard")
	if code != 1 {
		t.Fatalf("uninstall of a foreign hook: exit %d\n%s", code, out)
	}
	mustContain(t, out, "is not bernstein's; it was left as it is")
	if got, _ := os.ReadFile(hook); string(got) != own {
		t.Fatal("foreign hook touched")
	}
}

func TestInstallRefusals(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	r := newRemote(t)
	hooksDir := filepath.Join(h.dir, ".git", "hooks")
	listHooks := func(dir string) []string {
		es, _ := os.ReadDir(dir)
		var out []string
		for _, e := range es {
			if !strings.HasSuffix(e.Name(), ".sample") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		dir  string
		args []string
		want string
	}{
		{"guard in a working repository", h.dir, []string{"--remote-guard"}, "is not a bare repository: the remote guard belongs in the bare repository that receives pushes"},
		{"pre-push in a bare repository", r.dir, []string{"--pre-push"}, "is a bare repository: a pre-push hook belongs in a working repository"},
		{"checkpoint of an unknown task", h.dir, []string{"--checkpoint", "T-404"}, "unknown task: T-404"},
		{"checkpoint of a bad task id", h.dir, []string{"--checkpoint", "a..b"}, `invalid task_id: "a..b" contains ".."`},
		{"no hook named", h.dir, nil, "name one hook: --remote-guard, --pre-push or --checkpoint"},
		{"two hooks named", h.dir, []string{"--pre-push", "--checkpoint", "T-1"}, "name one hook"},
		{"first use without the guard", h.dir, []string{"--pre-push", "--trust-first-use"}, "--trust-first-use goes with --remote-guard only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(t, tc.dir, h.env(), "", cliBin, append([]string{"hooks", "install"}, tc.args...)...)
			if code != 1 {
				t.Fatalf("exit %d\n%s", code, out)
			}
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(out, tc.want) {
				t.Fatalf("want one line with %q, got:\n%s", tc.want, out)
			}
			if got := listHooks(hooksDir); len(got) != 0 {
				t.Fatalf("hooks written: %v", got)
			}
			if got := listHooks(filepath.Join(r.dir, "hooks")); len(got) != 0 {
				t.Fatalf("hooks written: %v", got)
			}
		})
	}
	out, code := h.cli("hooks", "uninstall", "--pre-push")
	if code != 1 || !strings.Contains(out, "not installed: there is no pre-push hook in "+hooksDir) {
		t.Fatalf("uninstall of nothing: exit %d\n%s", code, out)
	}
}

// TestHooksPath: core.hooksPath is where git runs hooks from, so it is
// where they go.
func TestHooksPath(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.git("config", "core.hooksPath", "team-hooks")
	out, code := h.cli("hooks", "install", "--checkpoint", "T-1")
	if code != 0 {
		t.Fatalf("install: %s", out)
	}
	path := filepath.Join(h.dir, "team-hooks", "post-commit")
	mustContain(t, out, path)
	if _, err := os.Stat(filepath.Join(h.dir, ".git", "hooks", "post-commit")); !os.IsNotExist(err) {
		t.Fatalf("hook written to .git/hooks too: %v", err)
	}
	if out, code := commitIn(t, h, h.dir, "work"); code != 0 {
		t.Fatalf("commit: %s", out)
	}
	if got := h.git("rev-list", "--count", "refs/bernstein/journal/T-1"); got != "1" {
		t.Fatalf("journal rows after one commit: %s", got)
	}
	mustContain(t, h.mustCLIOut("hooks", "uninstall", "--checkpoint"), "removed the checkpoint hook (post-commit): "+path)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("hook still there: %v", err)
	}
}

func (h *host) mustCLIOut(args ...string) string {
	h.t.Helper()
	out, code := h.cli(args...)
	if code != 0 {
		h.t.Fatalf("bernstein %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// TestBernsteinPushRunsPrePush: `bernstein push` runs the pre-push check as
// git push does. A forged row is stopped with the check's message, once,
// before the remote is contacted, and nothing reaches it; good pushes pass
// through the check and the remote's guard. A remote another host moved
// meanwhile ends in the divergence, not in the check's refusal of a head it
// never saw: push gives the hook the remote's heads as last fetched.
func TestBernsteinPushRunsPrePush(t *testing.T) {
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	if out, code := h.cli("hooks", "install", "--pre-push"); code != 0 {
		t.Fatalf("install: %s", out)
	}
	r := guardedFirstUse(t)

	tampered := h.copyRepo()
	n := forgeRow(t, tampered)
	tampered.git("remote", "add", "origin", r.url())
	out, code := tampered.cli("push")
	if code != 1 {
		t.Fatalf("bernstein push of a forged row exited %d:\n%s", code, out)
	}
	check := fmt.Sprintf("bernstein pre-push: refused refs/bernstein/journal/T-1 (task T-1, journal index %d, writer host-a): commit is not signed [row_signature]\n", n)
	mustContain(t, out, check, "bernstein pre-push: push stopped: 1 problem(s); nothing was sent\n",
		"bernstein: the pre-push hook "+filepath.Join(tampered.dir, ".git", "hooks", "pre-push")+" stopped the push to origin (exit status 1); nothing was sent\n")
	if c := strings.Count(out, "commit is not signed"); c != 1 || strings.Contains(out, "remote:") {
		t.Fatalf("the check's message is printed %d times, or the remote was reached:\n%s", c, out)
	}
	if got := r.refs(); got != "" {
		t.Fatalf("something reached the remote: %s", got)
	}

	h.git("remote", "add", "origin", r.url())
	if out, code := h.cli("push"); code != 0 || !strings.Contains(out, "pushed to origin (atomic)") {
		t.Fatalf("good push: exit %d\n%s", code, out)
	}
	local := h.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/")
	if got := strings.TrimSpace(r.refs()); got != local {
		t.Fatalf("remote refs:\n%s\nlocal refs:\n%s", got, local)
	}

	other := h.copyRepo()
	other.post("T-1", "summary", "elsewhere")
	if out, code := other.cli("push"); code != 0 {
		t.Fatalf("push of the other copy: exit %d\n%s", code, out)
	}
	h.post("T-1", "summary", "here")
	out, code = h.cli("push")
	if code != 5 || !strings.Contains(out, "diverged: ") || strings.Contains(out, "pre-push: refused") {
		t.Fatalf("push after the remote moved: exit %d, want 5 with the divergence:\n%s", code, out)
	}
}
