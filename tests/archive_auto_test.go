package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Automatic archiving by push (docs/archive.md, Automatic archiving). The
// ages of the tasks come from the store's clock (Options.Now, the time
// its commits carry); what was archived is read back with plain git (the
// remote's refs with ls-remote, the archive's entries with rev-parse of
// the documented paths) and against the heads git showed before.

// storeAt opens h's repository with its clock at at.
func storeAt(t *testing.T, h *host, at time.Time) *bernstein.Store {
	t.Helper()
	s, err := bernstein.Open(bernstein.Options{Repo: h.dir, Home: h.home, AllowedSigners: h.signers, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// endAt has h create task, post a report on it and end it (kind), every
// commit dated at; with open, the task is created, claimed and posted
// to, and left open.
func endAt(t *testing.T, h *host, at time.Time, task, kind string) {
	t.Helper()
	s := storeAt(t, h, at)
	defer s.Close()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: "task " + task}); err != nil {
		t.Fatalf("create %s: %v", task, err)
	}
	tok, err := s.Claim(task, "agent-"+h.name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Post(bernstein.PostRequest{Task: task, Key: "notes", Agent: "agent-" + h.name, ClaimToken: tok, Payload: report("# " + task)}); err != nil {
		t.Fatal(err)
	}
	if kind == "" {
		return
	}
	if _, err := s.Transition(task, record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(task, kind, "", "done"); err != nil {
		t.Fatal(err)
	}
}

// autoPush runs bernstein push --output-json with args on h and returns
// its result and stderr.
func autoPush(t *testing.T, h *host, args ...string) (bernstein.PushResult, string) {
	t.Helper()
	r := h.run(append([]string{"push", "--output-json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("%s: push %v exited %d\n%s%s", h.name, args, r.code, r.out, r.err)
	}
	var res bernstein.PushResult
	if err := json.Unmarshal([]byte(r.out), &res); err != nil {
		t.Fatalf("push --output-json: %v\n%s", err, r.out)
	}
	return res, r.err
}

func autoArchived(res bernstein.PushResult) []string {
	if res.AutoArchive == nil {
		return nil
	}
	return res.AutoArchive.Archived
}

// archivedHeads are the journal and ledger heads that h's writer's
// archive holds for task, as git reads its documented paths ("" when it
// holds none).
func archivedHeads(t *testing.T, h *host, task string) (string, string) {
	t.Helper()
	at := refs.Archive(h.name) + ":" + archivePath(task)
	j, errJ := execGit(h.dir, "rev-parse", "--verify", "-q", at+"/journal")
	l, errL := execGit(h.dir, "rev-parse", "--verify", "-q", at+"/ledger")
	if errJ != nil || errL != nil {
		return "", ""
	}
	return strings.TrimSpace(j), strings.TrimSpace(l)
}

// autoArchiveHosts makes a guarded remote with host-a and host-b (a clone),
// both keys pinned everywhere, and on host-a: OLD-1 ended 30 days ago,
// OPEN-1 claimed 30 days ago and left open, NEW-1 ended just now; on
// host-b: B-1 ended 30 days ago, pushed without archiving and fetched by
// host-a.
func autoArchiveHosts(t *testing.T) (srv *gitServer, url, root string, a, b *host) {
	t.Helper()
	isolateGit(t)
	srv = newGitServer(t, "file")
	root = t.TempDir()
	url, a = newOrigin(t, srv, root)
	b, _ = cloneHost(t, url, root, "host-b")
	signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers
	srv.operatorPin(t, "tasks.git", signers, a, b)
	long := time.Now().Add(-30 * 24 * time.Hour)
	endAt(t, a, long, "OLD-1", record.KindTaskCompleted)
	endAt(t, a, long, "OPEN-1", "")
	a.ended("NEW-1")
	endAt(t, b, long, "B-1", record.KindTaskAbandoned)
	b.ok("push", "--no-archive")
	a.ok("fetch")
	return srv, url, root, a, b
}

// TestPushArchivesByDefault: with no configuration, push archives host-a's
// task that ended 30 days ago, and not its open task, its task ended just
// now, nor host-b's task ended 30 days ago; the guarded remote takes the
// archive and the deletion of the task's refs; a fresh clone reads the
// task as before and audit verify holds there; a second push does
// nothing, reading no spine entry and checking no task.
func TestPushArchivesByDefault(t *testing.T) {
	_, url, root, a, _ := autoArchiveHosts(t)
	before := a.refs()
	wantJ, wantL := before[refs.Journal("OLD-1")], before[refs.Ledger("OLD-1")]
	reads := a.reads("OLD-1")

	res, _ := autoPush(t, a)
	if got := autoArchived(res); !slices.Equal(got, []string{"OLD-1"}) || res.AutoArchive.EndedBefore != "7d" {
		t.Fatalf("the push archived %v (policy %+v), want OLD-1 under 7d", got, res.AutoArchive)
	}
	if j, l := archivedHeads(t, a, "OLD-1"); j != wantJ || l != wantL {
		t.Fatalf("host-a's archive holds OLD-1 at %s/%s, want its refs' heads %s/%s", j, l, wantJ, wantL)
	}
	there := lsRemote(t, root, url)
	if gone := taskRefsOf(there, "OLD-1"); len(gone) > 0 || there[refs.Archive("host-a")] != a.refs()[refs.Archive("host-a")] {
		t.Fatalf("the remote holds %v of OLD-1 and archive %q", gone, there[refs.Archive("host-a")])
	}
	for _, task := range []string{"OPEN-1", "NEW-1", "B-1"} {
		if len(taskRefsOf(there, task)) != 2 || len(taskRefsOf(a.refs(), task)) != 2 {
			t.Fatalf("%s was archived: the remote holds %v, host-a %v", task, taskRefsOf(there, task), taskRefsOf(a.refs(), task))
		}
	}
	// Nothing new: the second push reads no spine entry and checks no
	// task (its walk stops at the spine head the first one read to).
	if again, _ := autoPush(t, a); len(autoArchived(again))+len(again.Pushed)+len(again.Deleted) != 0 || again.AutoArchive.SpineRead != 0 || again.AutoArchive.Checked != 0 {
		t.Fatalf("a second push archived %v, pushed %v, deleted %v, read %d spine entries and checked %d tasks", autoArchived(again), again.Pushed, again.Deleted, again.AutoArchive.SpineRead, again.AutoArchive.Checked)
	}
	c, _ := cloneHost(t, url, root, "host-c")
	c.signers = a.signers
	sameReads(t, "a fresh clone", c.reads("OLD-1"), reads)
	verifyPinned(t, c, a.signers)
}

// TestPushArchivePolicy: bernstein.archive.endedBefore off archives
// nothing; --archive-ended-before overrides it for one push; --no-archive
// overrides an age; a value that is not an age stops the push before
// anything is archived or sent, naming the key.
func TestPushArchivePolicy(t *testing.T) {
	_, url, root, a, _ := autoArchiveHosts(t)
	a.git("config", "bernstein.archive.endedBefore", "off")
	res, _ := autoPush(t, a)
	if got := autoArchived(res); len(got) != 0 || len(taskRefsOf(lsRemote(t, root, url), "OLD-1")) != 2 {
		t.Fatalf("with the policy off the push archived %v", got)
	}
	a.git("config", "bernstein.archive.endedBefore", "40d")
	if res, _ := autoPush(t, a); len(autoArchived(res)) != 0 {
		t.Fatalf("with 40d the push archived %v", autoArchived(res))
	}
	a.git("config", "bernstein.archive.endedBefore", "7 days")
	r := a.run("push")
	if r.code != 1 || !strings.Contains(r.err, "bernstein.archive.endedBefore") || !strings.Contains(r.err, `"7 days"`) {
		t.Fatalf("push with a bad policy exited %d\n%s%s", r.code, r.out, r.err)
	}
	a.ended("NEW-2")
	a.git("config", "bernstein.archive.endedBefore", "1d")
	if r := a.run("push", "--no-archive", "--archive-ended-before", "1d"); r.code != 1 {
		t.Fatalf("push with both flags exited %d", r.code)
	}
	res, _ = autoPush(t, a, "--no-archive")
	if len(autoArchived(res)) != 0 || len(taskRefsOf(a.refs(), "OLD-1")) != 2 {
		t.Fatalf("--no-archive archived %v", autoArchived(res))
	}
	if lsRemote(t, root, url)[refs.Ledger("NEW-2")] == "" {
		t.Fatal("the push with --no-archive did not send NEW-2")
	}
	a.git("config", "bernstein.archive.endedBefore", "off")
	res, _ = autoPush(t, a, "--archive-ended-before", "720h")
	if got := autoArchived(res); !slices.Equal(got, []string{"OLD-1"}) || len(taskRefsOf(lsRemote(t, root, url), "OLD-1")) != 0 {
		t.Fatalf("--archive-ended-before 720h archived %v", got)
	}
}

// TestPushArchivesOnlyOwnLastEnd: a task host-a ended 30 days ago that
// host-b reopened and abandoned 20 days ago is host-b's: host-a's push
// does not archive it, though its own seal of the first end is old
// enough; host-b's push archives it.
func TestPushArchivesOnlyOwnLastEnd(t *testing.T) {
	_, url, root, a, b := autoArchiveHosts(t)
	a.ok("push", "--no-archive")
	b.ok("fetch")
	s := storeAt(t, b, time.Now().Add(-20*24*time.Hour))
	for _, k := range []string{record.KindTaskReopened, record.KindTaskAbandoned} {
		if _, err := s.Transition("OLD-1", k, "", "again"); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	s.Close()
	b.ok("push", "--no-archive")
	a.ok("fetch")
	res, _ := autoPush(t, a)
	if got := autoArchived(res); len(got) != 0 {
		t.Fatalf("host-a archived %v, a task host-b ended last", got)
	}
	b.ok("fetch")
	res, _ = autoPush(t, b)
	if got := autoArchived(res); !slices.Equal(got, []string{"B-1", "OLD-1"}) || len(taskRefsOf(lsRemote(t, root, url), "OLD-1", "B-1")) != 0 {
		t.Fatalf("host-b archived %v, want B-1 and OLD-1", got)
	}
}

// TestPushArchivesWhenDue: a task ended just now is not archived by the
// push that first reads its seal, nor by the next, which reads the two
// spine entries written since (a post and the seal of another task ended
// just now) and nothing before; both are archived by a push once their
// ends are older than the policy's age (the store's clock 8 days on),
// which reads no spine entry and checks those two tasks alone.
func TestPushArchivesWhenDue(t *testing.T) {
	_, url, root, a, _ := autoArchiveHosts(t)
	if res, _ := autoPush(t, a); !slices.Equal(autoArchived(res), []string{"OLD-1"}) {
		t.Fatalf("the first push archived %v", autoArchived(res))
	}
	a.ended("NEW-2")
	if res, _ := autoPush(t, a); len(autoArchived(res)) != 0 || res.AutoArchive.SpineRead != 2 {
		t.Fatalf("the second push archived %v and read %d spine entries, want none and NEW-2's post and seal", autoArchived(res), res.AutoArchive.SpineRead)
	}
	s := storeAt(t, a, time.Now().Add(8*24*time.Hour))
	defer s.Close()
	res, err := s.Push("origin")
	if err != nil {
		t.Fatal(err)
	}
	if got := autoArchived(*res); !slices.Equal(got, []string{"NEW-1", "NEW-2"}) || len(taskRefsOf(lsRemote(t, root, url), "NEW-1", "NEW-2")) != 0 {
		t.Fatalf("the push 8 days on archived %v", got)
	}
	if res.AutoArchive.SpineRead != 0 || res.AutoArchive.Checked != 2 {
		t.Fatalf("the push 8 days on read %d spine entries and checked %d tasks, want none and NEW-1, NEW-2 alone", res.AutoArchive.SpineRead, res.AutoArchive.Checked)
	}
	if got := taskRefsOf(a.refs(), "OPEN-1"); len(got) != 2 {
		t.Fatalf("OPEN-1 was archived: %v", got)
	}
}

// TestPushPastForgedArchive: host-a's own archive ref, moved with plain
// git to a blob, is reported as tampered by the automatic archive, which
// builds past it (the writer's own archive is restored, OLD-1 archived) and
// push sends it; another writer's archive ref forged the same way is left
// out, and the rest goes to the guarded remote (the guard would have
// refused the whole atomic push). An archive commit appended to host-a's
// archive without a signature, with the automatic archive off, is left out
// too.
func TestPushPastForgedArchive(t *testing.T) {
	_, url, root, a, _ := autoArchiveHosts(t)
	a.ok("push", "--no-archive")
	blob := strings.TrimSpace(gitRunStdin(t, a.dir, "not an archive", "hash-object", "-w", "--stdin"))
	a.git("update-ref", refs.Archive("host-a"), blob)
	a.git("update-ref", refs.Archive("mallory"), blob)
	a.ended("NEW-2")

	res, stderr := autoPush(t, a)
	if res.AutoArchive == nil || res.AutoArchive.Error != "" || res.AutoArchive.Tampered == nil || res.AutoArchive.Tampered.Ref != refs.Archive("host-a") ||
		!slices.Equal(res.AutoArchive.Archived, []string{"OLD-1"}) ||
		!strings.Contains(stderr, refs.Archive("host-a")+" (at "+blob+") was tampered with") {
		t.Fatalf("the automatic archive over a forged own archive: %+v\n%s", res.AutoArchive, stderr)
	}
	there := lsRemote(t, root, url)
	if there[refs.Ledger("NEW-2")] == "" || there[refs.Ledger("OLD-1")] != "" {
		t.Fatalf("the push did not send NEW-2 or kept OLD-1's refs: %v", there)
	}
	var left []string
	for _, l := range res.LeftOut {
		left = append(left, l.Ref)
	}
	own := a.refs()[refs.Archive("host-a")]
	if own == "" || own == blob || there[refs.Archive("host-a")] != own {
		t.Fatalf("host-a's archive is %q here and %q on the remote", own, there[refs.Archive("host-a")])
	}
	if !slices.Equal(left, []string{refs.Archive("mallory")}) || there[refs.Archive("mallory")] != "" {
		t.Fatalf("left out %v; the remote holds %q of mallory's archive", left, there[refs.Archive("mallory")])
	}
	if !strings.Contains(stderr, "did not push "+refs.Archive("mallory")) {
		t.Fatalf("no warning names the left out ref:\n%s", stderr)
	}

	t.Run("unsigned", func(t *testing.T) {
		a.git("update-ref", "-d", refs.Archive("host-a"))
		a.git("update-ref", "-d", refs.Archive("mallory"))
		a.ended("NEW-3")
		forged := forgeArchive(t, a, "NEW-2") // no signature
		res, stderr := autoPush(t, a, "--no-archive")
		if len(res.LeftOut) != 1 || res.LeftOut[0].Ref != refs.Archive("host-a") || res.LeftOut[0].Commit != forged {
			t.Fatalf("left out %+v, want host-a's forged archive\n%s", res.LeftOut, stderr)
		}
		there := lsRemote(t, root, url)
		if there[refs.Ledger("NEW-3")] == "" || there[refs.Ledger("NEW-2")] == "" || there[refs.Archive("host-a")] != own {
			t.Fatalf("the remote after the push past a forged archive: %v", there)
		}
	})
}

// gitRunStdin runs git in dir with stdin and returns its output.
func gitRunStdin(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	out, err := execGitStdin(dir, []byte(stdin), args...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

// TestPushArchiveToRemoteDenyingDeletes: git's receive.denyDeletes guards
// branches (refs/heads/) only, so a remote that sets it still takes the
// deletion of an archived task's refs with the archive.
func TestPushArchiveToRemoteDenyingDeletes(t *testing.T) {
	srv, url, root, a, _ := autoArchiveHosts(t)
	if _, err := execGit(filepath.Join(srv.root, "tasks.git"), "config", "receive.denyDeletes", "true"); err != nil {
		t.Fatal(err)
	}
	res, _ := autoPush(t, a)
	if got := autoArchived(res); !slices.Equal(got, []string{"OLD-1"}) {
		t.Fatalf("the push archived %v, want OLD-1", got)
	}
	there := lsRemote(t, root, url)
	if gone := taskRefsOf(there, "OLD-1"); len(gone) > 0 || there[refs.Archive("host-a")] != a.refs()[refs.Archive("host-a")] {
		t.Fatalf("a remote denying deletions holds %v of OLD-1 and archive %q", gone, there[refs.Archive("host-a")])
	}
}

// TestPushPastFailedAutoArchive: when the automatic archive fails (here
// its state file's directory is a file, as anyone who can write to the
// repository can make it), the push warns, reports the failure in
// auto_archive.error, archives nothing and sends everything else: the
// remote gets the task created since, as git's ls-remote shows, and
// still holds the refs of the task that was due. Once the obstruction is
// gone the next push archives it.
func TestPushPastFailedAutoArchive(t *testing.T) {
	_, url, root, a, _ := autoArchiveHosts(t)
	a.ok("push", "--no-archive")
	a.ok("task", "create", "LATE-1", "--title", "created after the last push")
	obstruction := filepath.Join(a.dir, ".git", "bernstein", "cache", "archive")
	if err := os.RemoveAll(obstruction); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(obstruction), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obstruction, []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	res, stderr := autoPush(t, a)
	if res.AutoArchive == nil || res.AutoArchive.Error == "" || len(res.AutoArchive.Archived) != 0 {
		t.Fatalf("the automatic archive over an obstructed state directory: %+v", res.AutoArchive)
	}
	if !strings.Contains(stderr, "the automatic archive stopped (0 tasks archived before it did)") || !strings.Contains(stderr, "pushing the rest all the same") {
		t.Fatalf("no warning of the failed archive:\n%s", stderr)
	}
	there, here := lsRemote(t, root, url), a.refs()
	for _, ref := range []string{refs.Ledger("LATE-1"), refs.Journal("OLD-1"), refs.Ledger("OLD-1")} {
		if there[ref] == "" || there[ref] != here[ref] {
			t.Fatalf("%s: the remote holds %q, host-a %q", ref, there[ref], here[ref])
		}
	}
	if there[refs.Archive("host-a")] != "" {
		t.Fatalf("an archive was pushed: %s", there[refs.Archive("host-a")])
	}

	if err := os.Remove(obstruction); err != nil {
		t.Fatal(err)
	}
	again, _ := autoPush(t, a)
	if got := autoArchived(again); !slices.Equal(got, []string{"OLD-1"}) || again.AutoArchive.Error != "" {
		t.Fatalf("once the obstruction is gone the push archived %v (%+v), want OLD-1", got, again.AutoArchive)
	}
	if gone := taskRefsOf(lsRemote(t, root, url), "OLD-1"); len(gone) != 0 {
		t.Fatalf("the remote still holds %v of OLD-1", gone)
	}
}
