package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/refs"
)

// garbleHostRef writes text over ref's loose file in h's repository, as
// plain git can, and checks that git reads no value there.
func garbleHostRef(h *host, ref string) {
	h.t.Helper()
	p := filepath.Join(h.dir, ".git", filepath.FromSlash(ref))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("garbage\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if got, err := exec.Command("git", "-C", h.dir, "rev-parse", "--verify", "--quiet", ref).Output(); err == nil {
		h.t.Fatalf("the garbled ref reads %q in git, want no value", got)
	}
}

// looseHolds reads ref's loose file in h's repository ("" when there is none).
func looseHolds(h *host, ref string) string {
	b, err := os.ReadFile(filepath.Join(h.dir, ".git", filepath.FromSlash(ref)))
	if err != nil {
		return ""
	}
	return string(b)
}

// TestFetchPastGarbledLocalRefs: text written over a loose ref file of this
// repository with plain git (a task's journal, the spine of another writer,
// a ref bernstein does not know, remote-tracking refs) makes git's own
// fetch fail ("bad object", in the check that what it received connects to
// the refs it has). bernstein fetch fetches past it: the garbled refs of
// this host stay as they are and are named (read_past, held back, exit 2),
// the rest moves to the remote's heads; the garbled remote-tracking refs
// are rewritten from the remote, or removed when the remote has no such
// ref. A push from the host goes on too.
func TestFetchPastGarbledLocalRefs(t *testing.T) {
	for _, kind := range []string{"file", "daemon"} {
		t.Run(kind, func(t *testing.T) { fetchPastGarbled(t, kind) })
	}
}

func fetchPastGarbled(t *testing.T, kind string) {
	isolateGit(t)
	srv := newGitServer(t, kind)
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	b, _ := cloneHost(t, url, root, "host-b")
	signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers

	tok1 := a.work("T-1", "notes", 1)
	tok2 := a.work("T-2", "notes", 1)
	a.work("Z-9", "notes", 1)
	a.ok("push")
	b.ok("fetch")
	// The remote forgets Z-9 (plain git): b keeps its remote-tracking copy.
	bare := srv.dir("tasks.git")
	gitRun(t, bare, "update-ref", "-d", refs.Ledger("Z-9"))
	a.post("T-1", "notes", "agent-host-a", tok1, 1)
	a.post("T-2", "notes", "agent-host-a", tok2, 1)
	a.ok("push")
	remote := refsOf(t, bare, refs.Prefix)

	junk := refs.Prefix + "zz/junk"
	trackT1 := "refs/bernstein-remotes/origin/journal/T-1"
	trackZ9 := "refs/bernstein-remotes/origin/ledger/Z-9"
	for _, ref := range []string{refs.Journal("T-2"), junk, trackT1, trackZ9} {
		garbleHostRef(b, ref)
	}
	// And a ref naming an object this repository does not have.
	missing, missingID := refs.Prefix+"zz/missing", strings.Repeat("12", 20)+"\n"
	if err := os.WriteFile(filepath.Join(b.dir, ".git", filepath.FromSlash(missing)), []byte(missingID), 0o644); err != nil {
		t.Fatal(err)
	}

	// Plain git's fetch of the same refs fails on this repository (run on
	// a copy of it, which it would otherwise change).
	cp := filepath.Join(root, "copy")
	if out, err := exec.Command("cp", "-a", b.dir, cp).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	if out, err := gitTry(cp, "fetch", "--no-write-fetch-head", "--refmap=", url, "+refs/bernstein/*:refs/bernstein-remotes/origin/*"); err == nil || !strings.Contains(err.Error(), "bad object") {
		t.Fatalf("plain git fetch over a garbled local ref: %v\n%s", err, out)
	}

	for _, args := range [][]string{{"fetch"}, {"fetch", "--full"}} {
		r := b.run(append(args, "--output-json")...)
		if r.code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s%s", args, r.code, r.out, r.err)
		}
		var doc struct {
			ReadPast []struct{ Ref, Reason string } `json:"read_past"`
			HeldBack []struct {
				Ref        string
				Unreadable bool
			} `json:"held_back"`
		}
		if err := json.Unmarshal([]byte(r.out), &doc); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, r.out)
		}
		if len(doc.ReadPast) != 1 || doc.ReadPast[0].Ref != refs.Journal("T-2") || !strings.Contains(doc.ReadPast[0].Reason, "loose file holds no object id") {
			t.Fatalf("%v: read past %+v, want the garbled journal of T-2\n%s", args, doc.ReadPast, r.err)
		}
		if len(doc.HeldBack) != 1 || doc.HeldBack[0].Ref != refs.Journal("T-2") || !doc.HeldBack[0].Unreadable {
			t.Fatalf("%v: held back %+v", args, doc.HeldBack)
		}
		if !strings.Contains(r.err, "warning: "+refs.Journal("T-2")+" (at ") || !strings.Contains(r.err, "not fetched") {
			t.Fatalf("%v: no warning names the garbled journal:\n%s", args, r.err)
		}
		for _, ref := range []string{refs.Journal("T-2"), junk} {
			if got := looseHolds(b, ref); got != "garbage\n" {
				t.Fatalf("%v: %s holds %q after the fetch, want the text written over it", args, ref, got)
			}
		}
		if got := looseHolds(b, missing); got != missingID {
			t.Fatalf("%v: %s holds %q after the fetch", args, missing, got)
		}
		got := b.refs()
		for _, ref := range []string{refs.Journal("T-1"), refs.Ledger("T-2"), refs.Spine("host-a"), refs.Audit("host-a")} {
			if got[ref] != remote[ref] {
				t.Fatalf("%v: %s is at %q here, want the remote's %s", args, ref, got[ref], remote[ref])
			}
		}
		// The remote-tracking refs are hints: T-1's is rewritten from the
		// remote; Z-9's, which the remote no longer has, is removed by the
		// full path (the narrow one does not read it).
		tracking := refsOf(t, b.dir, "refs/bernstein-remotes/origin/")
		full := len(args) > 1
		if tracking[trackT1] != remote[refs.Journal("T-1")] || full != (looseHolds(b, trackZ9) == "") {
			t.Fatalf("%v: remote-tracking refs %v (Z-9's file %q), want T-1's rewritten and Z-9's removed by the full path", args, tracking, looseHolds(b, trackZ9))
		}
		if full && !strings.Contains(r.err, "removed the remote-tracking ref "+trackZ9) {
			t.Fatalf("%v: no warning names the removed %s:\n%s", args, trackZ9, r.err)
		}
		for _, ref := range []string{trackT1, trackZ9} {
			garbleHostRef(b, ref)
		}
	}

	// The spine of another writer garbled here: the narrow path cannot
	// read what is new on it and takes the full path, which reads past it.
	garbleHostRef(b, refs.Spine("host-a"))
	a.post("T-1", "notes", "agent-host-a", tok1, 1)
	a.ok("push")
	r := b.run("fetch", "--output-json")
	if r.code != 2 || !strings.Contains(r.err, "warning: "+refs.Spine("host-a")+" (at ") || !strings.Contains(r.out, `"path": "full"`) {
		t.Fatalf("fetch over a garbled spine of another writer: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if got := looseHolds(b, refs.Spine("host-a")); got != "garbage\n" {
		t.Fatalf("the garbled spine holds %q after the fetch", got)
	}

	// b writes and pushes with its garbled refs in place.
	b.work("B-1", "notes", 1)
	b.ok("push")
	remote = refsOf(t, bare, refs.Prefix)
	if mine := b.refs(); remote[refs.Journal("B-1")] == "" || remote[refs.Journal("B-1")] != mine[refs.Journal("B-1")] || remote[refs.Spine("host-b")] != mine[refs.Spine("host-b")] {
		t.Fatalf("the push did not bring B-1: remote %v", remote)
	}
}

// TestPushPastGarbledLocalRef: a push the remote rejects because a ref
// moved there fetches the remote's heads and plans again; a ref of this
// repository garbled with plain git does not stop that fetch ("bad
// object"), so the push ends as it would without it: here the remote's
// journal was moved with plain git to a commit carrying no record, and the
// remote's guard refuses what builds on it.
func TestPushPastGarbledLocalRef(t *testing.T) {
	srv, _, _, _, b, _ := pinnedHosts(t)
	tok := b.work("B-1", "notes", 1)
	b.ok("push")
	bare := srv.dir("tasks.git")
	head := strings.TrimSpace(gitRun(t, bare, "rev-parse", refs.Journal("B-1")))
	junk := strings.TrimSpace(gitRun(t, bare, "commit-tree", "-p", head, "-m", "junk", head+"^{tree}"))
	gitRun(t, bare, "update-ref", refs.Journal("B-1"), junk)
	garbleHostRef(b, refs.Prefix+"zz/junk")
	b.post("B-1", "notes", "agent-host-b", tok, 1)
	r := b.run("push")
	if r.code != 1 || strings.Contains(r.err, "bad object") || !strings.Contains(r.err, "origin refused") || !strings.Contains(r.err, "[fork_base]") {
		t.Fatalf("push: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if !strings.Contains(r.err, "warning: "+refs.Prefix+"zz/junk (at ") {
		t.Fatalf("push names no garbled ref:\n%s", r.err)
	}
	if got := looseHolds(b, refs.Prefix+"zz/junk"); got != "garbage\n" {
		t.Fatalf("the garbled ref holds %q after the push", got)
	}
}

// TestFetchKeepsCommitsUnderGarbledOwnSpine: the git fetch made again
// passing over garbled refs starts no maintenance (git gc --auto), which
// would pass over them too: under git's defaults gc stops at such a ref,
// which keeps the commits of this writer's own spine that only its
// recorded head reaches (written after the last push, the ref then
// garbled) until its next write puts the ref back on them. Were gc run
// passing over it, they would be pruned (gc.pruneExpire=now here) and that
// write would fail.
func TestFetchKeepsCommitsUnderGarbledOwnSpine(t *testing.T) {
	_, _, _, a, b, _ := pinnedHosts(t)
	tok := b.work("B-1", "notes", 1)
	b.ok("push")
	b.post("B-1", "notes", "agent-host-b", tok, 1) // not pushed
	honest := strings.TrimSpace(b.git("rev-parse", refs.Spine("host-b")))
	garbleHostRef(b, refs.Spine("host-b"))
	// Maintenance on every fetch, run in the foreground, pruning at once.
	for _, kv := range [][2]string{{"gc.auto", "1"}, {"gc.autoPackLimit", "1"}, {"gc.autoDetach", "false"}, {"gc.pruneExpire", "now"}} {
		b.git("config", kv[0], kv[1])
	}
	a.work("T-1", "notes", 1)
	a.ok("push")
	r := b.run("fetch")
	if r.code != 2 || !strings.Contains(r.err, "warning: "+refs.Spine("host-b")+" (at ") {
		t.Fatalf("fetch over a garbled own spine: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if _, err := gitTry(b.dir, "cat-file", "-e", honest+"^{commit}"); err != nil {
		t.Fatalf("the commit of the own spine under the garbled ref is gone after the fetch: %v", err)
	}
	b.post("B-1", "notes", "agent-host-b", tok, 1)
	if now := strings.TrimSpace(b.git("rev-parse", refs.Spine("host-b"))); now == honest || gitTryOK(b.dir, "merge-base", "--is-ancestor", honest, now) != nil {
		t.Fatalf("the own spine is at %s after the post, which does not extend %s", now, honest)
	}
	// With no garbled ref left, the maintenance a fetch starts runs: it
	// packs the repository's objects into one pack, and the fetch's move
	// of the refs writes one more (without it, a pack a write: 14 here).
	a.work("T-2", "notes", 1)
	a.ok("push")
	b.ok("fetch")
	out := b.git("count-objects", "-v")
	var packs int
	for _, l := range strings.Split(out, "\n") {
		if n, ok := strings.CutPrefix(l, "packs: "); ok {
			packs, _ = strconv.Atoi(n)
		}
	}
	if packs < 1 || packs > 2 {
		t.Fatalf("after a fetch with maintenance due, %d packs:\n%s", packs, out)
	}
}

func gitTryOK(dir string, args ...string) error {
	_, err := gitTry(dir, args...)
	return err
}

// TestPushReadsPastUnreadableRefs: a ref other than a task's that plain
// git moved so that git push would fail on it (a blob, an object this
// repository does not have, a commit whose parent it does not have, new
// to the remote or not) or that the remote's guard would refuse by its
// name (bernstein writes no such ref) holds no push back: it is not
// pushed, push names it (read_past), and the rest goes.
func TestPushReadsPastUnreadableRefs(t *testing.T) {
	srv, _, _, a, b, _ := pinnedHosts(t)
	a.work("T-1", "notes", 1)
	a.ok("push")
	b.ok("fetch")
	bare := srv.dir("tasks.git")
	before := refsOf(t, bare, refs.Prefix)

	missingID := strings.Repeat("12", 20)
	blob := strings.TrimSpace(gitStdin(t, b.dir, "a local blob", "hash-object", "-w", "--stdin"))
	emptyTree := strings.TrimSpace(gitStdin(t, b.dir, "", "hash-object", "-t", "tree", "-w", "--stdin"))
	orphan := strings.TrimSpace(gitStdin(t, b.dir, "tree "+emptyTree+"\nparent "+missingID+"\nauthor a <a@b> 0 +0000\ncommitter a <a@b> 0 +0000\n\nparent missing\n",
		"hash-object", "-t", "commit", "-w", "--stdin"))
	orphan2 := strings.TrimSpace(gitStdin(t, b.dir, "tree "+emptyTree+"\nparent "+missingID+"\nauthor a <a@b> 0 +0000\ncommitter a <a@b> 0 +0000\n\nparent missing too\n",
		"hash-object", "-t", "commit", "-w", "--stdin"))
	want := map[string]string{
		refs.Spine("host-a"):      blob,      // the remote has it
		refs.Audit("host-a"):      missingID, // the remote has it
		a.writerRef():             orphan2,   // the remote has it
		refs.Anchors("host-a"):    orphan,    // new to the remote
		refs.Prefix + "zz/commit": strings.TrimSpace(b.git("rev-parse", refs.Journal("T-1"))),
	}
	for ref, at := range want {
		p := filepath.Join(b.dir, ".git", filepath.FromSlash(ref))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(at+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gitTry(b.dir, "push", "--porcelain", "origin", orphan+":"+refs.Anchors("host-a")); err == nil {
		t.Fatal("plain git pushed a commit whose parent it does not have")
	}

	b.work("B-1", "notes", 1)
	r := b.run("push", "--output-json")
	if r.code != 0 {
		t.Fatalf("push: exit %d\n%s%s", r.code, r.out, r.err)
	}
	var doc struct {
		ReadPast []struct{ Ref, At, Reason string } `json:"read_past"`
	}
	if err := json.Unmarshal([]byte(r.out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, r.out)
	}
	got := map[string]string{}
	for _, p := range doc.ReadPast {
		got[p.Ref] = p.At
		if !strings.Contains(r.err, "warning: "+p.Ref+" (at "+p.At+") cannot be read as a") {
			t.Errorf("no warning names %s:\n%s", p.Ref, r.err)
		}
	}
	sameRefs(t, "refs read past", got, want)
	remote := refsOf(t, bare, refs.Prefix)
	mine := b.refs()
	for _, ref := range []string{refs.Journal("B-1"), refs.Ledger("B-1"), refs.Spine("host-b"), refs.Audit("host-b")} {
		if remote[ref] == "" || remote[ref] != mine[ref] {
			t.Fatalf("%s is at %q on the remote, want this host's %s", ref, remote[ref], mine[ref])
		}
	}
	for ref := range want {
		if remote[ref] != before[ref] {
			t.Fatalf("%s moved on the remote: %q, was %q", ref, remote[ref], before[ref])
		}
	}
}

// pinnedHosts makes a remote served over file:// with host-a (its origin)
// and host-b (a clone), each pinning both writers' keys (signers, the
// allowed_signers file).
func pinnedHosts(t *testing.T) (srv *gitServer, url, root string, a, b *host, signers string) {
	t.Helper()
	isolateGit(t)
	srv = newGitServer(t, "file")
	root = t.TempDir()
	url, a = newOrigin(t, srv, root)
	b, _ = cloneHost(t, url, root, "host-b")
	signers = writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers
	return srv, url, root, a, b, signers
}
