package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// archiveOn archives tasks in h's repository with Store.Archive (one
// signed archive commit, the tasks' refs deleted in its transaction) and
// returns the archive ref's head.
func archiveOn(t *testing.T, h *host, tasks ...string) string {
	t.Helper()
	s, err := bernstein.Open(bernstein.Options{Repo: h.dir, Home: h.home})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Archive(bernstein.ArchiveRequest{Tasks: tasks})
	if err != nil {
		t.Fatalf("%s: archive %v: %v", h.name, tasks, err)
	}
	if len(res.Archived) != len(tasks) || len(res.Commits) == 0 {
		t.Fatalf("%s: archive %v archived %v", h.name, tasks, res.Archived)
	}
	return res.Commits[len(res.Commits)-1]
}

// forgeArchive archives tasks in h's repository by hand, as the archive
// command would but with no signature (a forgery): one archive commit on
// h's writer's archive ref (its record in the message, its parents
// archive.Parents), and the tasks' refs deleted, compared with the heads
// archived, in the same git ref transaction.
func forgeArchive(t *testing.T, h *host, tasks ...string) string {
	t.Helper()
	objs, err := gitstore.Open(filepath.Join(h.dir, ".git", "objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	ref := refs.Archive(h.name)
	cur := h.refs()
	prev := gitstore.ZeroOid
	rec := record.Archive{V: record.Version, Writer: h.name, Add: []record.ArchivedTask{}, Remove: []string{}}
	rec.Prev = record.Genesis(repoIDOf(t, h.dir), record.ChainArchive, h.name)
	if v := cur[ref]; v != "" {
		prev, _ = gitstore.ParseOid(v)
		cc, err := chain.ReadAnchor(objs, prev) // the record in the message
		if err != nil {
			t.Fatal(err)
		}
		before, err := record.ParseArchive(cc.Record)
		if err != nil {
			t.Fatal(err)
		}
		rec.Seq, rec.Prev = before.Seq+1, record.Sum(cc.Record)
	}
	var add []archive.Entry
	var script strings.Builder
	script.WriteString("start\n")
	for _, task := range tasks {
		e := archive.Entry{Task: task}
		at := record.ArchivedTask{TaskID: task}
		for _, x := range []struct {
			ref  string
			head *gitstore.Oid
			hex  *string
			rows *int64
		}{{refs.Journal(task), &e.Journal, &at.Journal, &at.JournalRows}, {refs.Ledger(task), &e.Ledger, &at.Ledger, &at.LedgerRows}} {
			v := cur[x.ref]
			if v == "" {
				t.Fatalf("archive %s: %s does not exist", task, x.ref)
			}
			*x.head, _ = gitstore.ParseOid(v)
			*x.hex = v
			cc, err := chain.Read(objs, *x.head)
			if err != nil {
				t.Fatal(err)
			}
			row, err := record.ParseRow(cc.Record)
			if err != nil {
				t.Fatal(err)
			}
			*x.rows = row.Index + 1
			fmt.Fprintf(&script, "delete %s %s\n", x.ref, v)
		}
		add = append(add, e)
		rec.Add = append(rec.Add, at)
	}
	tree, made, err := archive.Build(objs, treeOf(t, objs, prev), archive.Update{Add: add})
	if err != nil {
		t.Fatal(err)
	}
	who := gitstore.Ident(h.name, h.name+"@bernstein", 1700000000)
	cm := gitstore.Commit{Tree: tree, Parents: archive.Parents(prev, add), Author: who, Committer: who,
		Message: record.Message(fmt.Sprintf("archive #%d: %d tasks", rec.Seq, len(add)), record.MustCanonical(rec))}
	c := gitstore.NewObject(gitstore.TypeCommit, gitstore.EncodeCommit(cm))
	if _, err := objs.WritePack(append(made, c)); err != nil {
		t.Fatal(err)
	}
	old := cur[ref]
	if old == "" {
		old = strings.Repeat("0", 40)
	}
	fmt.Fprintf(&script, "update %s %s %s\nprepare\ncommit\n", ref, c.ID, old)
	if out, err := execGitStdin(h.dir, []byte(script.String()), "update-ref", "--stdin").CombinedOutput(); err != nil {
		t.Fatalf("archive %v: git update-ref: %v\n%s", tasks, err, out)
	}
	return c.ID.String()
}

// treeOf is commit's tree (zero for none).
func treeOf(t *testing.T, objs *gitstore.Repo, commit gitstore.Oid) gitstore.Oid {
	t.Helper()
	if commit.IsZero() {
		return gitstore.ZeroOid
	}
	data, err := objs.ReadType(commit, gitstore.TypeCommit)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		t.Fatal(err)
	}
	return c.Tree
}

// repoIDOf is the identity of the repository in dir, read with plain git.
func repoIDOf(t *testing.T, dir string) string {
	t.Helper()
	msg := gitRun(t, dir, "log", "-1", "--format=%B", refs.Repository)
	_, rec, _ := strings.Cut(strings.TrimSpace(msg), "\n\n")
	r, err := record.ParseRepositoryRecord([]byte(rec))
	if err != nil {
		t.Fatalf("%s: refs/bernstein/repository: %v", dir, err)
	}
	return r.ID
}

// ended works task on h with one post and completes it.
func (h *host) ended(task string) {
	h.t.Helper()
	h.work(task, "notes", 1)
	h.ok("task", "start", task)
	h.ok("task", "complete", task)
}

// reads is what h's readers show of tasks: each task's document and its
// notes, as the CLI prints them.
func (h *host) reads(tasks ...string) map[string]string {
	h.t.Helper()
	out := map[string]string{}
	for _, task := range tasks {
		out[task+" show"] = h.ok("task", "show", task, "--output-json")
		out[task+" notes"] = h.ok("artifact", "show", task, "notes", "--output-json")
	}
	return out
}

func sameReads(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%s: %s reads otherwise:\n got  %s\n want %s", what, k, got[k], w)
		}
	}
}

// taskRefsOf are the journal and ledger refs of tasks among rs.
func taskRefsOf(rs map[string]string, tasks ...string) []string {
	var out []string
	for _, task := range tasks {
		for _, ref := range []string{refs.Journal(task), refs.Ledger(task)} {
			if _, ok := rs[ref]; ok {
				out = append(out, ref)
			}
		}
	}
	return out
}

// lsRemote lists the refs/bernstein/* refs of a remote as git ls-remote
// reads them.
func lsRemote(t *testing.T, dir, url string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(gitRun(t, dir, "ls-remote", url, "refs/bernstein/*")), "\n") {
		if id, name, ok := strings.Cut(l, "\t"); ok {
			out[name] = id
		}
	}
	return out
}

func pushJSON(t *testing.T, h *host) bernstein.PushResult {
	t.Helper()
	var res bernstein.PushResult
	out := h.ok("push", "--output-json")
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("push --output-json: %v\n%s", err, out)
	}
	return res
}

func fetchJSON(t *testing.T, h *host, args ...string) bernstein.FetchResult {
	t.Helper()
	var res bernstein.FetchResult
	out := h.ok(append([]string{"fetch", "--output-json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("fetch --output-json: %v\n%s", err, out)
	}
	return res
}

// TestArchivePushFetch: host-a archives two ended tasks and pushes. The
// push sends its archive ref and deletes the remote's refs of both tasks
// in one atomic push (git ls-remote shows them gone, the archive there;
// git fsck --strict on the remote is clean); a second push has nothing to
// do. A fresh clone and host-b, which fetches, read both tasks as host-a
// read them before archiving; host-b's fetch deleted its refs of them, and
// its next push sends nothing back. host-a's pre-push check runs on the
// archive and the deletions. Over file:// and git daemon.
func TestArchivePushFetch(t *testing.T) {
	for _, kind := range []string{"file", "daemon"} {
		t.Run(kind, func(t *testing.T) {
			isolateGit(t)
			srv := newGitServer(t, kind)
			root := t.TempDir()
			url, a := newOrigin(t, srv, root)
			a.ended("T-1")
			a.ended("T-2")
			a.work("T-3", "notes", 1)
			a.ended("T-4")
			a.ok("push")
			b, _ := cloneHost(t, url, root, "host-b")
			signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
			a.signers, b.signers = signers, signers
			before := a.reads("T-1", "T-2")
			a.ok("hooks", "install", "--pre-push") // its check runs on the archive and the deletions
			archived := archiveOn(t, a, "T-1", "T-2")
			sameReads(t, "host-a after archiving", a.reads("T-1", "T-2"), before)

			res := pushJSON(t, a)
			if len(res.Deleted) != 4 {
				t.Fatalf("push deleted %d refs, want the 4 of T-1 and T-2: %+v", len(res.Deleted), res.Deleted)
			}
			bare := srv.dir("tasks.git")
			there := lsRemote(t, root, url)
			if gone := taskRefsOf(there, "T-1", "T-2"); len(gone) > 0 {
				t.Fatalf("the remote still has %v after the push", gone)
			}
			if there[refs.Archive("host-a")] != archived || there[refs.Journal("T-3")] == "" {
				t.Fatalf("the remote holds archive %q (want %s) and T-3's journal %q", there[refs.Archive("host-a")], archived, there[refs.Journal("T-3")])
			}
			gitRun(t, bare, "fsck", "--strict", "--no-dangling")
			if again := pushJSON(t, a); len(again.Pushed)+len(again.Deleted) != 0 {
				t.Fatalf("a second push sent %+v and deleted %+v", again.Pushed, again.Deleted)
			}

			fr := fetchJSON(t, b)
			if fr.Path != "narrow" || len(fr.Deleted) != 4 {
				t.Fatalf("host-b's fetch took the %s path and deleted %+v, want narrow and the 4 refs of T-1, T-2", fr.Path, fr.Deleted)
			}
			if left := taskRefsOf(b.refs(), "T-1", "T-2"); len(left) > 0 {
				t.Fatalf("host-b still has %v after fetching the archive", left)
			}
			if b.refs()[refs.Archive("host-a")] != archived {
				t.Fatal("host-b did not take host-a's archive")
			}
			sameReads(t, "host-b after its fetch", b.reads("T-1", "T-2"), before)
			if pb := pushJSON(t, b); len(pb.Deleted) != 0 || len(taskRefsOf(lsRemote(t, root, url), "T-1", "T-2")) > 0 {
				t.Fatalf("host-b's push deleted %+v or put archived tasks back", pb.Deleted)
			}
			c, _ := cloneHost(t, url, root, "host-c")
			c.signers = signers
			sameReads(t, "a fresh clone", c.reads("T-1", "T-2"), before)
			if left := taskRefsOf(c.refs(), "T-1", "T-2"); len(left) > 0 {
				t.Fatalf("the clone has %v", left)
			}

			verifyPinned(t, b, signers)
			verifyPinned(t, c, signers)

			// A second archive commit: the fetch reads what it changed.
			before4 := a.reads("T-4")
			archiveOn(t, a, "T-4")
			if res := pushJSON(t, a); len(res.Deleted) != 2 || res.Deleted[0].Task != "T-4" {
				t.Fatalf("the second archive's push deleted %+v, want T-4's refs", res.Deleted)
			}
			if fr := fetchJSON(t, b); fr.Path != "narrow" || len(fr.Deleted) != 2 || fr.Deleted[0].Task != "T-4" {
				t.Fatalf("host-b's second fetch (%s) deleted %+v, want T-4's refs", fr.Path, fr.Deleted)
			}
			sameReads(t, "host-b after the second archive", b.reads("T-4"), before4)
			verifyPinned(t, b, signers)
		})
	}
}

// twoHosts makes a remote on srv with host-a, which ends tasks and pushes
// them, and host-b, a clone of it; both keys are pinned on both hosts and
// by the remote's operator (so that each may act on the other's tasks).
func twoHosts(t *testing.T, srv *gitServer, tasks ...string) (url, root string, a, b *host) {
	t.Helper()
	isolateGit(t)
	root = t.TempDir()
	url, a = newOrigin(t, srv, root)
	for _, task := range tasks {
		a.ended(task)
	}
	a.ok("push")
	b, _ = cloneHost(t, url, root, "host-b")
	signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers
	srv.operatorPin(t, "tasks.git", signers, a, b)
	return url, root, a, b
}

// TestArchivePushLeaseLost: host-b reopens T-1 and pushes; host-a, which
// has not fetched since, archives T-1 and T-2 and pushes. Its deletion of
// T-1's ledger expected the value host-a last saw, which the remote no
// longer holds: git push refuses it (stale info), push learns the
// remote's heads and pushes again without T-1's deletions. The push lands:
// the archive and T-2's deletions are there, T-1 stays a task of two refs
// at host-b's heads, and host-a then reads T-1 as host-b does. Over file://
// and smart HTTP (git http-backend).
func TestArchivePushLeaseLost(t *testing.T) {
	for _, kind := range []string{"file", "http"} {
		t.Run(kind, func(t *testing.T) { archivePushLeaseLost(t, newGitServer(t, kind)) })
	}
}

func archivePushLeaseLost(t *testing.T, srv *gitServer) {
	url, root, a, b := twoHosts(t, srv, "T-1", "T-2")
	b.ok("task", "reopen", "T-1")
	b.ok("push")
	there := lsRemote(t, root, url)
	reopened, journal := there[refs.Ledger("T-1")], there[refs.Journal("T-1")]
	if reopened == a.refs()[refs.Ledger("T-1")] {
		t.Fatal("host-b's reopen did not reach the remote")
	}
	archived := archiveOn(t, a, "T-1", "T-2")
	res := pushJSON(t, a)
	if res.Replanned < 1 {
		t.Fatalf("push did not plan again after the lease failed: %+v", res)
	}
	if len(res.Deleted) != 2 || res.Deleted[0].Task != "T-2" || res.Deleted[1].Task != "T-2" {
		t.Fatalf("push deleted %+v, want T-2's two refs", res.Deleted)
	}
	there = lsRemote(t, root, url)
	if there[refs.Ledger("T-1")] != reopened || there[refs.Journal("T-1")] != journal {
		t.Fatalf("the remote holds T-1 at %s/%s, want host-b's %s/%s", there[refs.Journal("T-1")], there[refs.Ledger("T-1")], journal, reopened)
	}
	if gone := taskRefsOf(there, "T-2"); len(gone) > 0 || there[refs.Archive("host-a")] != archived {
		t.Fatalf("the remote holds %v of T-2 and archive %q (want %s)", gone, there[refs.Archive("host-a")], archived)
	}
	gitRun(t, srv.dir("tasks.git"), "fsck", "--strict", "--no-dangling")
	a.ok("fetch")
	sameReads(t, "host-a after fetching the reopen", a.reads("T-1"), b.reads("T-1"))
	if again := pushJSON(t, a); len(again.Deleted) != 0 || lsRemote(t, root, url)[refs.Ledger("T-1")] != reopened {
		t.Fatalf("a later push deleted %+v", again.Deleted)
	}
}

// TestArchiveFetchKeepsLocalReopen: host-b reopened T-1 and has not
// pushed; host-a archives T-1 and T-2 and pushes. host-b's fetch deletes
// its refs of T-2, which the archive names at their heads, and keeps
// T-1's, whose ledger extends the archive's entry; T-1 still reads
// reopened there, and host-b's push puts T-1 back on the remote as a task
// of two refs.
func TestArchiveFetchKeepsLocalReopen(t *testing.T) {
	srv := newGitServer(t, "file")
	url, root, a, b := twoHosts(t, srv, "T-1", "T-2")
	b.ok("task", "reopen", "T-1")
	mine := b.refs()
	reopened := b.reads("T-1")
	before := a.reads("T-2")
	archiveOn(t, a, "T-1", "T-2")
	a.ok("push")
	fr := fetchJSON(t, b)
	if len(fr.Deleted) != 2 || fr.Deleted[0].Task != "T-2" || fr.Deleted[1].Task != "T-2" {
		t.Fatalf("host-b's fetch deleted %+v, want T-2's two refs", fr.Deleted)
	}
	now := b.refs()
	for _, ref := range []string{refs.Journal("T-1"), refs.Ledger("T-1")} {
		if now[ref] != mine[ref] {
			t.Fatalf("host-b's %s is %q after the fetch, want its own %s", ref, now[ref], mine[ref])
		}
	}
	sameReads(t, "host-b's reopened T-1", b.reads("T-1"), reopened)
	sameReads(t, "host-b's T-2", b.reads("T-2"), before)
	b.ok("push")
	there := lsRemote(t, root, url)
	if there[refs.Ledger("T-1")] != mine[refs.Ledger("T-1")] || there[refs.Journal("T-1")] != mine[refs.Journal("T-1")] {
		t.Fatalf("host-b's push left T-1 on the remote at %q/%q", there[refs.Journal("T-1")], there[refs.Ledger("T-1")])
	}
	if gone := taskRefsOf(there, "T-2"); len(gone) > 0 {
		t.Fatalf("host-b's push put %v back", gone)
	}
}

// TestArchivePushInterrupted: a push that stopped after the archive landed
// and before the deletions (the archive ref pushed alone, as a push cut
// off between its atomic pushes leaves the remote) loses nothing and
// alarms nobody: a fresh clone reads the archived tasks (ref and entry at
// one head) and verifies, and the next push deletes the refs.
func TestArchivePushInterrupted(t *testing.T) {
	srv := newGitServer(t, "file")
	url, root, a, b := twoHosts(t, srv, "T-1", "T-2")
	before := a.reads("T-1", "T-2")
	archiveOn(t, a, "T-1", "T-2")
	a.git("push", "-q", "origin", refs.Archive("host-a")+":"+refs.Archive("host-a"))
	c, _ := cloneHost(t, url, root, "host-c")
	c.signers = a.signers
	sameReads(t, "a clone of the half-pushed archive", c.reads("T-1", "T-2"), before)
	verifyPinned(t, c, a.signers)
	fr := fetchJSON(t, b)
	if len(fr.HeldBack) != 0 || len(fr.Diverged) != 0 {
		t.Fatalf("host-b's fetch of the half-pushed archive: %+v", fr)
	}
	sameReads(t, "host-b", b.reads("T-1", "T-2"), before)
	res := pushJSON(t, a)
	if len(res.Deleted) != 4 || len(taskRefsOf(lsRemote(t, root, url), "T-1", "T-2")) != 0 {
		t.Fatalf("the next push deleted %+v", res.Deleted)
	}
	verifyPinned(t, b, a.signers)
}

// TestArchiveFetchCleanupCAS: the fetch deletes an archived task's local
// refs compare-and-swap. host-b's ledger of T-1 reads at the archived head
// when the fetch plans, and a plain git process (holding the ref's lock
// meanwhile) moves it to host-b's reopen before the fetch's transaction
// takes it: the transaction fails on the old value, the fetch plans again
// on the new head, which extends the entry, and keeps T-1; T-2 goes.
func TestArchiveFetchCleanupCAS(t *testing.T) {
	srv := newGitServer(t, "file")
	_, _, a, b := twoHosts(t, srv, "T-1", "T-2")
	entry := b.refs()[refs.Ledger("T-1")]
	b.ok("task", "reopen", "T-1")
	reopened := b.refs()[refs.Ledger("T-1")]
	b.git("update-ref", refs.Ledger("T-1"), entry, reopened)
	archiveOn(t, a, "T-1", "T-2")
	a.ok("push")

	h := &faults{}
	s, err := bernstein.Open(bernstein.Options{Repo: b.dir, Home: b.home, FaultHook: h.hook})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	path := filepath.Join(b.dir, ".git", filepath.FromSlash(refs.Ledger("T-1")))
	lockRef := func() {
		if err := os.WriteFile(path+".lock", []byte(reopened+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	moved := false
	h.set(func(step string) error {
		if step == "waiting for "+refs.Ledger("T-1") && !moved {
			moved = true // the plain git process commits its update
			if err := os.Rename(path+".lock", path); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	lockRef()
	res, err := s.Fetch("origin")
	h.set(nil)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if !moved {
		t.Fatal("the fetch never met the plain git process's lock")
	}
	now := b.refs()
	if now[refs.Ledger("T-1")] != reopened || now[refs.Journal("T-1")] == "" {
		t.Fatalf("host-b's T-1 is %q/%q after the fetch, want the reopen %s kept", now[refs.Journal("T-1")], now[refs.Ledger("T-1")], reopened)
	}
	if gone := taskRefsOf(now, "T-2"); len(gone) > 0 || len(res.Deleted) != 2 {
		t.Fatalf("the fetch deleted %+v and left %v", res.Deleted, gone)
	}
}

// TestArchivePushAfterPlainFetch: host-b learned the remote's heads with a
// plain `git fetch --prune` only (its copies of the archived tasks' refs
// are gone, the archive's copy is there, unverified) and still has its
// refs of them. A remote-tracking copy decides nothing, so its push sends
// them back (the remote then holds refs and entries at the same heads,
// which readers accept); its bernstein fetch verifies and takes the
// archive and deletes its refs, and its next push deletes the remote's:
// the tasks end archived everywhere and read as before. A task ref
// brought back here by plain git at an archived head, which no copy of
// the remote names, is then not pushed: the archive this host verified,
// which the remote holds, covers it.
func TestArchivePushAfterPlainFetch(t *testing.T) {
	srv := newGitServer(t, "file")
	url, root, a, b := twoHosts(t, srv, "T-1", "T-2")
	before := a.reads("T-1", "T-2")
	archiveOn(t, a, "T-1", "T-2")
	a.ok("push")
	b.git("fetch", "-q", "--prune", "origin")
	if len(taskRefsOf(b.refs(), "T-1", "T-2")) != 4 {
		t.Fatal("host-b lost its refs of T-1, T-2 to a plain git fetch")
	}
	b.ok("push")
	fr := fetchJSON(t, b)
	if len(fr.Deleted) != 4 || len(taskRefsOf(b.refs(), "T-1", "T-2")) > 0 {
		t.Fatalf("host-b's fetch deleted %+v", fr.Deleted)
	}
	b.ok("push")
	if left := taskRefsOf(lsRemote(t, root, url), "T-1", "T-2"); len(left) > 0 {
		t.Fatalf("the remote still holds %v", left)
	}
	sameReads(t, "host-b", b.reads("T-1", "T-2"), before)

	for _, d := range fr.Deleted {
		if d.Task == "T-1" {
			b.git("update-ref", d.Ref, d.Old)
		}
	}
	res := pushJSON(t, b)
	if left := taskRefsOf(lsRemote(t, root, url), "T-1"); len(left) > 0 {
		t.Fatalf("host-b's push put %v back (pushed %+v)", left, res.Pushed)
	}
}

// TestArchivePushManyDeletions: more deletions than one push's command line
// holds go in the pushes that follow, within one Push (here one task's
// two refs a push): every archived task's refs leave the remote, and the
// remote stays clean for git fsck --strict.
func TestArchivePushManyDeletions(t *testing.T) {
	srv := newGitServer(t, "file")
	url, root, a, _ := twoHosts(t, srv, "T-1", "T-2", "T-3")
	archiveOn(t, a, "T-1", "T-2", "T-3")
	s, err := bernstein.Open(bernstein.Options{Repo: a.dir, Home: a.home, PushArgBudget: 400})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Push("origin")
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if len(res.Deleted) != 6 {
		t.Fatalf("push deleted %+v, want the 6 refs of T-1, T-2, T-3", res.Deleted)
	}
	if left := taskRefsOf(lsRemote(t, root, url), "T-1", "T-2", "T-3"); len(left) > 0 {
		t.Fatalf("the remote still has %v", left)
	}
	gitRun(t, srv.dir("tasks.git"), "fsck", "--strict", "--no-dangling")
}

// TestArchiveFetchInterrupted: a fetch killed right after its transaction's
// commit point (the archive ref in place, the archived tasks' refs not yet
// deleted) loses nothing and alarms nobody: host-b's readers see the tasks
// as before and audit verify holds; the next write finishes the deletions
// from the transaction's intent, and the next fetch has nothing to do.
func TestArchiveFetchInterrupted(t *testing.T) {
	srv := newGitServer(t, "file")
	_, _, a, b := twoHosts(t, srv, "T-1", "T-2")
	before := b.reads("T-1", "T-2")
	archiveOn(t, a, "T-1", "T-2")
	a.ok("push")
	h := &faults{}
	s, err := bernstein.Open(bernstein.Options{Repo: b.dir, Home: b.home, FaultHook: h.hook})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.set(func(step string) error {
		if step == "renamed 0" {
			return refs.ErrFault
		}
		return nil
	})
	_, err = s.Fetch("origin")
	h.set(nil)
	if !errors.Is(err, refs.ErrFault) {
		t.Fatalf("fetch: %v, want the simulated crash", err)
	}
	if raw := refsOf(t, b.dir, refs.Prefix); raw[refs.Archive("host-a")] == "" || len(taskRefsOf(raw, "T-1", "T-2")) != 4 {
		t.Fatalf("the crash was not between the archive's move and the deletions: %v", sorted(raw))
	}
	sameReads(t, "host-b after a fetch killed mid-transaction", b.reads("T-1", "T-2"), before)
	verifyPinned(t, b, b.signers)
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	if left := taskRefsOf(refsOf(t, b.dir, refs.Prefix), "T-1", "T-2"); len(left) > 0 {
		t.Fatalf("the interrupted fetch's deletions were not finished: %v", left)
	}
	if res, err := s.Fetch("origin"); err != nil || res.Moved() {
		t.Fatalf("fetch after the interrupted one: %+v %v", res, err)
	}
	sameReads(t, "host-b after Settle", b.reads("T-1", "T-2"), before)
}

// TestArchiveNeverPushedTask: a task ended and archived before any push
// reaches the remote in its archive alone (no ref of it there, nothing to
// delete), and a clone reads it as its writer did.
func TestArchiveNeverPushedTask(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	a.ended("T-1")
	a.signers = writeSigners(t, filepath.Join(root, "signers"), a)
	before := a.reads("T-1")
	archiveOn(t, a, "T-1")
	if res := pushJSON(t, a); len(res.Deleted) != 0 {
		t.Fatalf("push deleted %+v", res.Deleted)
	}
	there := lsRemote(t, root, url)
	if left := taskRefsOf(there, "T-1"); len(left) > 0 || there[refs.Archive("host-a")] == "" {
		t.Fatalf("the remote holds %v of T-1 and archive %q", left, there[refs.Archive("host-a")])
	}
	gitRun(t, srv.dir("tasks.git"), "fsck", "--strict", "--no-dangling")
	c, _ := cloneHost(t, url, root, "host-c")
	c.signers = a.signers
	sameReads(t, "a clone", c.reads("T-1"), before)
	verifyPinned(t, c, a.signers)
}
