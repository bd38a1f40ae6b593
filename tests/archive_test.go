package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The archive of ended tasks, written (docs/archive.md): every expectation
// here is read back with git's own eyes (cat-file, rev-parse of the
// documented paths, verify-commit against the published allowed signers,
// show-ref, fsck --strict, gc --prune=now), the shard and the genesis
// computed here from their definitions.

// endedTask creates task, posts one report on it and completes it (which
// seals its journal in the spine).
func (f *fixture) endedTask(s *bernstein.Store, task string) {
	f.t.Helper()
	tok := f.claimed(s, task, "agent")
	f.post(s, task, "summary", "agent", tok, report("findings of "+task))
	if _, err := s.Transition(task, record.KindTaskStarted, "", ""); err != nil {
		f.t.Fatal(err)
	}
	if _, err := s.Transition(task, record.KindTaskCompleted, "", "done"); err != nil {
		f.t.Fatal(err)
	}
}

// archivePath is t/<hh>/<task> from its definition: hh the first byte of
// the SHA-256 of the task id, in lowercase hex.
func archivePath(task string) string {
	sum := sha256.Sum256([]byte(task))
	return "t/" + hex.EncodeToString(sum[:1]) + "/" + refs.EscapeTask(task)
}

// archiveCommit is one archive commit as git shows it: its parents and the
// record in its message (and the record's bytes).
type archiveCommit struct {
	parents []string
	rec     record.Archive
	raw     []byte
}

func (f *fixture) archiveCommitAt(rev string) archiveCommit {
	f.t.Helper()
	body := f.git("cat-file", "-p", rev)
	head, msg, _ := strings.Cut(body, "\n\n")
	var c archiveCommit
	for _, line := range strings.Split(head, "\n") {
		if p, ok := strings.CutPrefix(line, "parent "); ok {
			c.parents = append(c.parents, p)
		}
	}
	_, rec, ok := strings.Cut(strings.TrimRight(msg, "\n"), "\n\n")
	if !ok {
		f.t.Fatalf("archive commit %s: no record in its message: %q", rev, msg)
	}
	c.raw = []byte(rec)
	r, err := record.ParseArchive(c.raw)
	if err != nil {
		f.t.Fatalf("archive commit %s: %v", rev, err)
	}
	c.rec = r
	return c
}

// verifyCommit checks rev's signature with git against the writers'
// published allowed_signers lines.
func (f *fixture) verifyCommit(rev string) {
	f.t.Helper()
	signers := filepath.Join(f.t.TempDir(), "signers")
	if err := os.WriteFile(signers, []byte(f.publishedSigners()), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if out, err := f.gitErr("-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", rev); err != nil {
		f.t.Fatalf("git verify-commit %s: %v\n%s", rev, err, out)
	}
}

func rev(f *fixture, ref string) string {
	out, err := f.gitErr("rev-parse", "--verify", "--quiet", ref)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// TestArchiveWritesWhatGitReads: two archive commits (two tasks named,
// then every archivable task) as git reads them: the record in the
// message chains from the genesis of the writer's archive in this
// repository and then from the previous record's hash; the parents are the
// previous commit and the archived heads; the tree holds only t/, the heads
// at the documented paths; the commit verifies; the tasks' refs are gone,
// the open task's and the empty journal's kept; fsck --strict is clean and
// gc --prune=now keeps every archived chain.
func TestArchiveWritesWhatGitReads(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	for _, task := range []string{"A-1", "A-2", "A:3"} {
		f.endedTask(s, task)
	}
	f.claimed(s, "O-1", "agent") // open
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "E-1", Title: "ended with no journal row"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition("E-1", record.KindTaskAbandoned, "", "never started"); err != nil {
		t.Fatal(err)
	}
	old := map[string][2]string{}
	for _, task := range []string{"A-1", "A-2", "A:3"} {
		old[task] = [2]string{rev(f, refs.Journal(task)), rev(f, refs.Ledger(task))}
	}
	var chains []string
	for _, h := range old {
		chains = append(chains, strings.Fields(f.git("rev-list", h[0], h[1]))...)
	}

	res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"A-2", "A-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Commits) != 1 || strings.Join(res.Archived, " ") != "A-1 A-2" || res.Ref != "refs/bernstein/archive/test-writer" {
		t.Fatalf("archive A-2 A-1: %+v", res)
	}
	ref := res.Ref
	first := f.archiveCommitAt(ref)
	if rev(f, ref) != res.Commits[0] {
		t.Fatalf("%s is not at the commit reported", ref)
	}
	sum := sha256.Sum256([]byte("bernstein genesis v1\n" + f.repositoryID() + "\narchive\ntest-writer"))
	if first.rec.Seq != 0 || string(first.rec.Prev) != "sha256:"+hex.EncodeToString(sum[:]) || first.rec.Writer != "test-writer" {
		t.Fatalf("the first archive record is not rooted in the writer's archive genesis: %+v", first.rec)
	}
	if got, want := strings.Join(first.parents, " "), strings.Join([]string{old["A-1"][0], old["A-1"][1], old["A-2"][0], old["A-2"][1]}, " "); got != want {
		t.Fatalf("parents %s, want the heads in record order %s", got, want)
	}
	if len(first.rec.Add) != 2 || first.rec.Add[0].TaskID != "A-1" || first.rec.Add[0].Journal != old["A-1"][0] || first.rec.Add[0].Ledger != old["A-1"][1] ||
		strings.TrimSpace(f.git("rev-list", "--count", old["A-1"][0])) != strconv.FormatInt(first.rec.Add[0].JournalRows, 10) ||
		strings.TrimSpace(f.git("rev-list", "--count", old["A-1"][1])) != strconv.FormatInt(first.rec.Add[0].LedgerRows, 10) || len(first.rec.Remove) != 0 {
		t.Fatalf("record: %+v", first.rec)
	}
	f.verifyCommit(ref)
	firstID := res.Commits[0]

	res, err = s.Archive(bernstein.ArchiveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Archived, " ") != "A:3" || len(res.Commits) != 1 || len(res.Skipped) != 1 || res.Skipped[0].Task != "E-1" ||
		!strings.Contains(res.Skipped[0].Reason, "journal has no rows") {
		t.Fatalf("archive of every archivable task: %+v", res)
	}
	second := f.archiveCommitAt(ref)
	prev := sha256.Sum256(first.raw)
	if second.rec.Seq != 1 || string(second.rec.Prev) != "sha256:"+hex.EncodeToString(prev[:]) {
		t.Fatalf("the second record does not chain from the first: %+v", second.rec)
	}
	if got, want := strings.Join(second.parents, " "), strings.Join([]string{firstID, old["A:3"][0], old["A:3"][1]}, " "); got != want {
		t.Fatalf("second commit's parents %s, want the first commit and A:3's heads %s", got, want)
	}
	f.verifyCommit(ref)

	if root := f.git("ls-tree", "--name-only", ref); strings.TrimSpace(root) != "t" {
		t.Fatalf("the archive root holds %q, want only t", root)
	}
	for task, h := range old {
		for i, kind := range []string{"journal", "ledger"} {
			if got := rev(f, ref+":"+archivePath(task)+"/"+kind); got != h[i] {
				t.Fatalf("%s:%s/%s is %q, want the old ref's %s", ref, archivePath(task), kind, got, h[i])
			}
		}
	}
	shown := f.git("show-ref")
	for task := range old {
		if strings.Contains(shown, "/"+refs.EscapeTask(task)+"\n") || rev(f, refs.Journal(task)) != "" || rev(f, refs.Ledger(task)) != "" {
			t.Fatalf("git still shows a ref of the archived %s:\n%s", task, shown)
		}
	}
	for _, r := range []string{refs.Ledger("O-1"), refs.Ledger("E-1")} {
		if rev(f, r) == "" {
			t.Fatalf("%s was deleted though its task was not archived", r)
		}
	}
	f.fsck()
	f.git("gc", "--prune=now", "--quiet")
	out, err := execGitStdin(f.dir, []byte(strings.Join(chains, "\n")+"\n"), "cat-file", "--batch-check").Output()
	if err != nil || strings.Contains(string(out), "missing") || strings.Count(string(out), "\n") != len(chains) {
		t.Fatalf("git gc --prune=now lost an archived chain's commit: %v\n%s", err, out)
	}
	f.fsck()
}

// TestArchiveRefusals: a task not ended, a task whose journal is not
// sealed in the spine (its seal entry cut from the spine with plain git),
// an unknown task, a task archived already, a task named twice: each is
// one error naming the task and why, with nothing written, also when the
// other tasks named are archivable; the CLI says the same and exits 1.
func TestArchiveRefusals(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	f.endedTask(s, "D-1")
	f.endedTask(s, "D-2")
	f.endedTask(s, "U-1")
	f.claimed(s, "O-1", "agent")
	if _, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"D-2"}}); err != nil {
		t.Fatal(err)
	}
	// F-1's journal head and G-1's ledger head copied without their
	// signatures, with plain git.
	f.endedTask(s, "F-1")
	f.endedTask(s, "G-1")
	f.unsignHead(refs.Journal("F-1"))
	f.unsignHead(refs.Ledger("G-1"))
	// B-1's seal (the spine's head entry) copied without its signature.
	badSeal := newFixture(t)
	bs := badSeal.open()
	badSeal.endedTask(bs, "B-1")
	badSeal.unsignHead(refs.Spine("test-writer"))
	// U-1's seal is the spine's head entry: the spine moved back one
	// commit leaves a ledger that says complete and no seal.
	unsealed := newFixture(t)
	us := unsealed.open()
	unsealed.endedTask(us, "U-1")
	unsealed.git("update-ref", refs.Spine("test-writer"), refs.Spine("test-writer")+"~1")
	cases := []struct {
		f     *fixture
		s     *bernstein.Store
		tasks []string
		want  string
	}{
		{f, s, []string{"D-1", "O-1"}, "task O-1 cannot be archived: it has not ended (it is claimed)"},
		{f, s, []string{"D-1", "N-1"}, "unknown task: N-1"},
		{f, s, []string{"D-1", "D-2"}, "task D-2 cannot be archived: it is archived already (refs/bernstein/archive/test-writer)"},
		{f, s, []string{"D-1", "D-1"}, "task D-1 is named twice"},
		{f, s, []string{"D-1", "F-1"}, "the journal of F-1 holds a row no trusted writer signed"},
		{f, s, []string{"D-1", "G-1"}, "the ledger of G-1 holds a row no trusted writer signed"},
		{badSeal, bs, []string{"B-1"}, "task B-1 cannot be archived: its journal identity is mismatched: seal test-writer/"},
		{unsealed, us, []string{"U-1"}, "task U-1 cannot be archived: no spine entry seals its journal"},
	}
	for _, c := range cases {
		before := c.f.refsSnapshot()
		_, err := c.s.Archive(bernstein.ArchiveRequest{Tasks: c.tasks})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("archive %v: %v, want an error naming %q", c.tasks, err, c.want)
		}
		if after := c.f.refsSnapshot(); after != before {
			t.Fatalf("archive %v wrote though it was refused:\n%s\nwant\n%s", c.tasks, after, before)
		}
		out, errOut, code := c.f.cli("", append([]string{"archive"}, c.tasks...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || out != "" {
			t.Fatalf("bernstein archive %v: exit %d\n%s%s", c.tasks, code, out, errOut)
		}
		if after := c.f.refsSnapshot(); after != before {
			t.Fatalf("bernstein archive %v wrote though it was refused", c.tasks)
		}
	}
	if _, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"D-1"}, EndedBefore: 1 << 40}); !errors.Is(err, bernstein.ErrNotArchivable) || !strings.Contains(err.Error(), "task D-1 cannot be archived: it ended at") {
		t.Fatalf("archive --ended-before of a task ended since: %v", err)
	}
	out, errOut, code := f.cli("", "archive", "--ended-before", "0s", "--output-json")
	var res bernstein.ArchiveResult
	decodeJSON(t, out, &res)
	if code != 0 || strings.Join(res.Archived, " ") != "D-1 U-1" || len(res.Commits) != 1 || len(res.Skipped) != 2 || res.Skipped[0].Task != "F-1" || res.Skipped[1].Task != "G-1" {
		t.Fatalf("bernstein archive --output-json: exit %d %+v\n%s", code, res, errOut)
	}
}

// TestArchiveAfterUpgradeFromFormat2: testdata/format2.tar.gz is a
// repository written in storage format 2 by bernstein before the archive
// (the commit before it, built from git history): 'bernstein init --writer
// f2-w', task F-1 created, claimed by agent, a summary posted, started and
// completed; F-2 created. bernstein archive refuses it (format 2) with
// nothing written; bernstein upgrade raises it to 3 and writes nothing but
// one repository record, signed; then F-1, written by the version before,
// is archived and the repository verifies.
func TestArchiveAfterUpgradeFromFormat2(t *testing.T) {
	f := fixtureFrom(t, "format2.tar.gz")
	before := f.refsSnapshot()
	_, errOut, code := f.cli("", "archive", "F-1")
	if code != 1 || !strings.Contains(errOut, "the archive of ended tasks needs storage format 3 (the repository is in format 2): run 'bernstein upgrade'") {
		t.Fatalf("archive in format 2: exit %d %s", code, errOut)
	}
	if _, err := f.open().Archive(bernstein.ArchiveRequest{}); !errors.Is(err, bernstein.ErrArchiveFormat) {
		t.Fatalf("Store.Archive in format 2: %v", err)
	}
	if f.refsSnapshot() != before {
		t.Fatal("a refused archive wrote")
	}
	// init reports the format the repository is in, and what upgrades it.
	out, errOut, code := f.cli("", "init", "--writer", "f2-w")
	if code != 0 || !strings.Contains(out, "(storage format 2)") || !strings.Contains(out+errOut, "'bernstein upgrade' moves it to format 3") {
		t.Fatalf("init of a format-2 repository: exit %d\n%s%s", code, out, errOut)
	}
	if f.refsSnapshot() != before {
		t.Fatal("init of a format-2 repository wrote")
	}
	out, errOut, code = f.cli("", "upgrade")
	if code != 0 || !strings.Contains(out, "storage format 2 -> 3") || strings.Contains(out, "chains bound") {
		t.Fatalf("upgrade: exit %d\n%s%s", code, out, errOut)
	}
	changed := diffLines(before, f.refsSnapshot())
	if len(changed) != 1 || !strings.HasPrefix(changed[0], refs.Repository+" ") {
		t.Fatalf("upgrade 2 -> 3 moved %v, want refs/bernstein/repository alone", changed)
	}
	recs := f.chainRecords(refs.Repository)
	if len(recs) != 2 || recs[1]["format"] != float64(3) || recs[1]["seq"] != float64(1) {
		t.Fatalf("repository records after the upgrade: %v", recs)
	}
	f.verifyCommit(refs.Repository)
	if out, _, code := f.cli("", "upgrade"); code != 0 || !strings.Contains(out, "storage format 3 already") {
		t.Fatalf("upgrade again: %s", out)
	}
	j := rev(f, refs.Journal("F-1"))
	out, errOut, code = f.cli("", "archive")
	if code != 0 || !strings.Contains(out, "archived 1 tasks in 1 commits to refs/bernstein/archive/f2-w: F-1") {
		t.Fatalf("archive after the upgrade: exit %d\n%s%s", code, out, errOut)
	}
	if got := rev(f, "refs/bernstein/archive/f2-w:"+archivePath("F-1")+"/journal"); got != j || rev(f, refs.Journal("F-1")) != "" {
		t.Fatalf("F-1 not archived at its journal head %s: %q", j, got)
	}
	f.verifyCommit("refs/bernstein/archive/f2-w")
	f.fsck()
}

// fixtureFrom unpacks testdata/name (repo/ and home/) into a fresh folder.
func fixtureFrom(t *testing.T, name string) *fixture {
	t.Helper()
	root := t.TempDir()
	abs, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xzf", abs, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	f := &fixture{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home")}
	f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
	return f
}

// diffLines lists the lines of after that before lacks.
func diffLines(before, after string) []string {
	had := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		had[l] = true
	}
	var out []string
	for _, l := range strings.Split(after, "\n") {
		if !had[l] {
			out = append(out, l)
		}
	}
	return out
}

// archiverMain archives tasks and kills itself (SIGKILL) when the write
// reaches the step BERNSTEIN_TEST_CRASH names, as a power cut would stop
// it.
func archiverMain(tasks []string) int {
	step := os.Getenv("BERNSTEIN_TEST_CRASH")
	hook := func(s string) error {
		if s == step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	}
	s, err := bernstein.Open(bernstein.Options{Repo: os.Getenv("BERNSTEIN_REPO"), Home: os.Getenv("BERNSTEIN_HOME"), FaultHook: hook})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	if _, err := s.Archive(bernstein.ArchiveRequest{Tasks: tasks}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("archived")
	return 0
}

// TestArchiveKilledAtEveryStep kills an archive of two tasks (their refs
// packed, as after git gc) at each step of its write: the pack and its
// intent, the locks, the check, the archive ref's move (the commit point),
// packed-refs rewritten, each deletion, the syncs. After the kill git reads
// each task's heads from its refs or from the archive (nothing is lost), a
// reader's snapshot sees the write whole or not at all, and the next write
// finishes or discards it: then the refs or the archive, never both or
// neither, nothing left behind, fsck --strict clean.
func TestArchiveKilledAtEveryStep(t *testing.T) {
	steps := []string{"intent written", "locked", "checked", "packed", "renamed 0", "packed-refs rewritten",
		"renamed 1", "renamed 2", "renamed 3", "renamed 4", "dirs synced"}
	for i, step := range steps {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.open()
			tasks := []string{"K-1", "K-2"}
			old := map[string]string{}
			for _, task := range tasks {
				f.endedTask(s, task)
				for _, r := range []string{refs.Journal(task), refs.Ledger(task)} {
					old[r] = rev(f, r)
				}
			}
			s.Close()
			f.git("pack-refs", "--all", "--prune")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "BERNSTEIN_TEST_ARCHIVE="+strings.Join(tasks, ","), "BERNSTEIN_TEST_CRASH="+step,
				"BERNSTEIN_REPO="+f.dir, "BERNSTEIN_HOME="+f.home)
			out, _ := cmd.Output()
			if st, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !st.Signaled() || st.Signal() != syscall.SIGKILL {
				t.Fatalf("the archiver was not killed at %q (exit %d): %s", step, cmd.ProcessState.ExitCode(), out)
			}
			committed := i >= 4 // from the archive ref's move on
			ref := refs.Archive("test-writer")
			// Nothing lost: each head is in its ref or in the archive.
			for r, head := range old {
				kind, task := "journal", strings.TrimPrefix(r, refs.JournalPrefix)
				if strings.HasPrefix(r, refs.LedgerPrefix) {
					kind, task = "ledger", strings.TrimPrefix(r, refs.LedgerPrefix)
				}
				if rev(f, r) != head && rev(f, ref+":"+archivePath(task)+"/"+kind) != head {
					t.Fatalf("after the kill git reads %s's head %s neither from its ref nor from the archive", r, head)
				}
			}
			snap, err := refs.Reader{Dir: filepath.Join(f.dir, ".git")}.Snapshot(refs.Prefix)
			if err != nil {
				t.Fatal(err)
			}
			wantWhole := func(read func(string) string, who string) {
				t.Helper()
				for r, head := range old {
					if got := read(r); committed && got != "" || !committed && got != head {
						t.Fatalf("%s reads %s as %q (committed %v)", who, r, got, committed)
					}
				}
				if got := read(ref); (got != "") != committed {
					t.Fatalf("%s reads %s as %q (committed %v)", who, ref, got, committed)
				}
			}
			wantWhole(func(r string) string {
				o, _ := snap.ReadOptional(r)
				if o.IsZero() {
					return ""
				}
				return o.String()
			}, "a snapshot")
			// The next write finishes or discards it.
			s = f.open()
			if _, err := s.CreateTask(bernstein.TaskSpec{ID: "Z-1", Title: "after"}); err != nil {
				t.Fatal(err)
			}
			wantWhole(func(r string) string { return rev(f, r) }, "git")
			if committed {
				for r, head := range old {
					kind, task := "journal", strings.TrimPrefix(r, refs.JournalPrefix)
					if strings.HasPrefix(r, refs.LedgerPrefix) {
						kind, task = "ledger", strings.TrimPrefix(r, refs.LedgerPrefix)
					}
					if got := rev(f, ref+":"+archivePath(task)+"/"+kind); got != head {
						t.Fatalf("the archive holds %s at %q, want %s", r, got, head)
					}
				}
			} else if res, err := s.Archive(bernstein.ArchiveRequest{Tasks: tasks}); err != nil || len(res.Archived) != 2 {
				t.Fatalf("archive after an uncommitted kill: %+v %v", res, err)
			}
			s.Close()
			if left := leftovers(f); len(left) > 0 {
				t.Fatalf("left behind: %v", left)
			}
			if _, err := os.Stat(filepath.Join(f.dir, ".git", "packed-refs.lock")); err == nil {
				t.Fatal("packed-refs.lock left behind")
			}
			if p := pendingKeeps(t, f); len(p) != 0 {
				t.Fatalf("intents left: %v", p)
			}
			f.fsck()
		})
	}
}

// TestArchiveCompareAndSwap: refs moved by someone else with plain git
// while an archive is under way (after its pack and intent, before its ref
// transaction) fail its compare-and-swap: the archive ref created meanwhile
// (the write is redone on it, and refused: it holds no archive record) and
// a task's ledger moved meanwhile (redone, and refused: this host's writer
// wrote that ledger further). Nothing the others wrote is overwritten,
// nothing is deleted, nothing archived.
func TestArchiveCompareAndSwap(t *testing.T) {
	for _, c := range []struct {
		name string
		ref  func(f *fixture) (string, string) // the ref someone moves, and where
		want string
	}{
		{"archive ref created", func(f *fixture) (string, string) {
			return refs.Archive("test-writer"), rev(f, refs.Ledger("C-1"))
		}, ""},
		{"ledger moved", func(f *fixture) (string, string) {
			return refs.Ledger("C-1"), rev(f, refs.Ledger("C-1")+"~1")
		}, "ledger"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			h := &faults{}
			s := f.openFaults(h)
			f.endedTask(s, "C-1")
			ref, to := c.ref(f)
			moved := false
			h.set(func(step string) error {
				if step == "intent written" && !moved {
					moved = true
					f.git("update-ref", ref, to)
				}
				return nil
			})
			before := ""
			res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"C-1"}})
			h.set(nil)
			if c.want == "" {
				// The archive ref created meanwhile is no archive of the
				// writer's: the transaction, redone, builds the archive's
				// first commit over it, and says so.
				if !moved || err != nil || res.Tampered == nil || res.Tampered.At != to || res.Tampered.Base != "" {
					t.Fatalf("archive with %s created meanwhile (moved %v): %v %+v", ref, moved, err, res)
				}
				if c := f.archiveCommitAt(ref); c.rec.Seq != 0 || len(c.rec.Add) != 1 || c.rec.Add[0].TaskID != "C-1" {
					t.Fatalf("the archive after it: %+v", c.rec)
				}
				return
			}
			if !moved || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("archive with %s moved meanwhile (moved %v): %v", ref, moved, err)
			}
			if got := rev(f, ref); got != to {
				t.Fatalf("%s is at %q, not where someone else moved it (%s)", ref, got, to)
			}
			for _, r := range []string{refs.Journal("C-1"), refs.Ledger("C-1")} {
				if rev(f, r) == before {
					t.Fatalf("%s was deleted", r)
				}
			}
			if c.name == "ledger moved" && rev(f, refs.Archive("test-writer")) != "" {
				t.Fatal("the archive was written though the ledger moved")
			}
		})
	}
}

// TestArchiveRemembered: the heads memory keeps the writer's archive head
// (an archive/<writer> line naming the commit, its seq and its record's
// hash, as git reads them); an archive ref moved back with plain git
// behind it is reported as tampered and the archive builds on the head
// remembered (TestArchiveBuildsPastForgedOwnHead has the other forgeries).
func TestArchiveRemembered(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	f.endedTask(s, "R-1")
	f.endedTask(s, "R-2")
	f.endedTask(s, "R-3")
	for _, task := range []string{"R-1", "R-2"} {
		if _, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{task}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close() // the heads are written once the batch is acknowledged
	s = f.open()
	ref := refs.Archive("test-writer")
	head := f.archiveCommitAt(ref)
	sum := sha256.Sum256(head.raw)
	b, err := os.ReadFile(f.headsFile())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("archive/test-writer %020d %s sha256:%s ", 1, rev(f, ref), hex.EncodeToString(sum[:]))
	if !strings.Contains(string(b), "\n"+want) {
		t.Fatalf("the heads memory has no line %q:\n%s", want, b)
	}
	remembered := rev(f, ref)
	f.git("update-ref", ref, ref+"~1")
	res, err := s.Archive(bernstein.ArchiveRequest{Tasks: []string{"R-3"}})
	if err != nil || res.Tampered == nil || res.Tampered.Base != remembered || !strings.Contains(res.Tampered.Reason, "non_fast_forward") {
		t.Fatalf("archive on a rolled-back archive ref: %v %+v", err, res)
	}
	if parent := rev(f, ref+"^1"); parent != remembered {
		t.Fatalf("the archive commit's first parent is %s, want the head remembered %s", parent, remembered)
	}
}

// unsignHead moves ref to a copy of its head commit without the signature,
// with plain git.
func (f *fixture) unsignHead(ref string) {
	f.t.Helper()
	var unsigned []string
	hdr, msg, _ := strings.Cut(f.git("cat-file", "commit", ref), "\n\n")
	for _, line := range strings.Split(hdr, "\n") {
		if !strings.HasPrefix(line, "gpgsig ") && !strings.HasPrefix(line, " ") {
			unsigned = append(unsigned, line)
		}
	}
	forged := mustOutput(f.t, execGitStdin(f.dir, []byte(strings.Join(unsigned, "\n")+"\n\n"+msg), "hash-object", "-t", "commit", "-w", "--stdin"))
	f.git("update-ref", ref, strings.TrimSpace(string(forged)))
}

// TestArchiveCommitsOf256: 257 archivable tasks take two archive commits,
// the first adding 256 (512 parents, as git counts them), the second one.
func TestArchiveCommitsOf256(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	var tasks []string
	for i := 0; i < 257; i++ {
		task := fmt.Sprintf("M-%03d", i)
		tasks = append(tasks, task)
		f.endedTask(s, task)
	}
	res, err := s.Archive(bernstein.ArchiveRequest{Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Commits) != 2 || len(res.Archived) != 257 {
		t.Fatalf("archive of 257 tasks: %d commits, %d archived", len(res.Commits), len(res.Archived))
	}
	ref := refs.Archive("test-writer")
	// The first commit: two heads of each of 256 tasks; the second: the
	// first commit and the last task's two heads.
	for i, want := range []int{512, 3} {
		if got := strings.Count(f.git("cat-file", "-p", res.Commits[i]), "\nparent "); got != want {
			t.Fatalf("archive commit %d has %d parents, want %d", i, got, want)
		}
	}
	if got := rev(f, ref+"^1"); got != res.Commits[0] || rev(f, ref) != res.Commits[1] {
		t.Fatalf("the second archive commit's first parent is %s, want the first %s", got, res.Commits[0])
	}
	if got := len(strings.Fields(f.git("ls-tree", "-r", "--name-only", ref))); got != 2*257 {
		t.Fatalf("the archive holds %d gitlinks, want %d", got, 2*257)
	}
	if out := f.git("for-each-ref", refs.JournalPrefix, refs.LedgerPrefix); strings.TrimSpace(out) != "" {
		t.Fatalf("task refs left:\n%s", out)
	}
}
