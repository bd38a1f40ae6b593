package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bernstein/bernstein/refs"
)

// Pushes at the same moment. Two pushes that read the remote's heads before
// either moved them both pass the remote's checks; git then moves the refs
// of one and fails the other's ref transaction ("atomic transaction
// failed", with "cannot lock ref ... is at X but expected Y" among the
// remote's messages). The loser has lost a race, not been refused: push
// fetches the remote's heads and plans again, which names the task two
// hosts wrote to (exit 5), or finds nothing left to do.

// pushAtOnce runs `bernstein push` on each host at the same moment and
// returns their results, in order.
func pushAtOnce(t *testing.T, hs ...*host) []hostResult {
	t.Helper()
	out := make([]hostResult, len(hs))
	errs := make([]error, len(hs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, h := range hs {
		cmd := exec.Command(cliBin, "--repo", h.dir, "push")
		cmd.Dir = filepath.Dir(h.dir)
		cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+h.home, "BERNSTEIN_FORCE_TTY=0", "BERNSTEIN_ALLOWED_SIGNERS="+h.signers)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := cmd.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				out[i].code, err = ee.ExitCode(), nil
			}
			out[i].out, out[i].err, errs[i] = stdout.String(), stderr.String(), err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: run bernstein push: %v", hs[i].name, err)
		}
	}
	return out
}

// holdPushes makes the remote's receive-pack wait, after its guard accepted
// a push and before git moves the refs, until n pushes have got that far
// (a chained pre-receive hook; 10 s at most): n pushes that all read the
// remote's heads before any of them moved a ref. It returns the folder in
// which each push that got there left a file, and removes the hook when the
// test ends.
func holdPushes(t *testing.T, bare string, n int) string {
	t.Helper()
	arrived := t.TempDir()
	hook := filepath.Join(bare, "hooks", "pre-receive.chained")
	script := fmt.Sprintf(`#!/bin/sh
cat >/dev/null
: > '%[1]s/'$$
i=0
while [ "$(ls '%[1]s' | wc -l)" -lt %[2]d ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done
exit 0
`, arrived, n)
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hook) })
	return arrived
}

func arrivals(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestRemoteSameTaskRace: two hosts write to one task (one agent's claim
// used on both), then push at the same moment, round after round, over
// file://, git daemon and smart HTTP. In the held rounds both pushes pass
// the guard before either lands, so the race is certain; in the others
// they race as they will. Every round: exactly one push wins and the remote
// holds the winner's refs; the loser exits 5 with the divergence naming the
// task and both heads, whether it lost the race or came second; neither
// host's refs moved, and each lists every version it wrote.
func TestRemoteSameTaskRace(t *testing.T) {
	type round struct {
		kind string
		held bool
	}
	var rounds []round
	for _, held := range []bool{true, false} {
		for _, kind := range gitServerKinds {
			rounds = append(rounds, round{kind, held})
		}
	}
	for i, rd := range rounds {
		name := fmt.Sprintf("%d-%s-free", i, rd.kind)
		if rd.held {
			name = fmt.Sprintf("%d-%s-held", i, rd.kind)
		}
		t.Run(name, func(t *testing.T) {
			isolateGit(t)
			srv := newGitServer(t, rd.kind)
			root := t.TempDir()
			url, a := newOrigin(t, srv, root)
			tok := a.work("T-1", "notes", 1)
			a.ok("push")
			b, _ := cloneHost(t, url, root, "host-b")
			signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
			a.signers, b.signers = signers, signers
			srv.operatorPin(t, "tasks.git", signers, a, b)
			a.post("T-1", "notes", "agent-host-a", tok, 1)
			b.post("T-1", "notes", "agent-host-a", tok, 2)
			before := map[*host]map[string]string{a: a.refs(), b: b.refs()}
			bare := srv.dir("tasks.git")
			var arrived string
			if rd.held {
				arrived = holdPushes(t, bare, 2)
			}

			rs := pushAtOnce(t, a, b)

			if rd.held {
				// The two, then the loser's push of what did not diverge
				// (its own chains and its fork of T-1).
				if n := arrivals(t, arrived); n != 3 {
					t.Fatalf("%d pushes got past the guard, want the 2 racing and the loser's third:\na: %s%s\nb: %s%s", n, rs[0].out, rs[0].err, rs[1].out, rs[1].err)
				}
			}
			var winner, loser *host
			var lost hostResult
			switch {
			case rs[0].code == 0 && rs[1].code == 5:
				winner, loser, lost = a, b, rs[1]
			case rs[1].code == 0 && rs[0].code == 5:
				winner, loser, lost = b, a, rs[0]
			default:
				t.Fatalf("want one push to exit 0 and the other 5; host-a exited %d:\n%s%s\nhost-b exited %d:\n%s%s",
					rs[0].code, rs[0].out, rs[0].err, rs[1].code, rs[1].out, rs[1].err)
			}
			t.Logf("%s won; %s: %s", winner.name, loser.name, strings.TrimSpace(lost.err))
			remote := refsOf(t, bare, refs.Prefix)
			journal := refs.Journal("T-1")
			checkDivergence(t, loser.name+"'s push", lost, "task T-1 (journal)", before[loser][journal], remote[journal])
			if strings.Contains(lost.err, "refused") {
				t.Fatalf("the lost race is reported as a refusal:\n%s", lost.err)
			}
			// The remote holds the winner's refs, and of the loser's only its
			// own chains and its fork of T-1 (a diverged task blocks only
			// itself).
			won := winner.refs()
			loserOwn := func(ref string) bool {
				return ref == refs.Spine(loser.name) || ref == refs.Audit(loser.name) || ref == refs.Anchors(loser.name) ||
					strings.HasPrefix(ref, refs.WritersPrefix+loser.name) || strings.HasPrefix(ref, refs.ForksPrefix+loser.name+"/")
			}
			for ref, id := range remote {
				switch {
				case won[ref] == id:
				case loserOwn(ref):
				default:
					t.Fatalf("the remote's %s is %s, the winner's %q", ref, id, won[ref])
				}
			}
			for ref, id := range won {
				if remote[ref] != id && !loserOwn(ref) {
					t.Fatalf("the remote lacks the winner's %s", ref)
				}
			}
			for _, h := range []*host{a, b} {
				sameRefs(t, h.name+"'s refs after the pushes", h.refs(), before[h])
			}
			// Nothing lost: each host lists every version it wrote, verified.
			for h, want := range map[*host]int{a: 2, b: 3} {
				out := h.ok("artifact", "list", "T-1")
				if n := strings.Count(out, "\tverified\t"); n != want {
					t.Fatalf("%s lists %d verified versions of T-1, want %d:\n%s", h.name, n, want, out)
				}
			}
			// The loser resolves it; then both hosts hold every version,
			// and verify, never TAMPERED.
			loser.ok("task", "adopt", "T-1")
			loser.ok("push")
			winner.ok("fetch")
			for _, h := range []*host{a, b} {
				out := h.ok("artifact", "list", "T-1")
				if n := strings.Count(out, "\tverified\t"); n != 4 {
					t.Fatalf("%s lists %d verified versions of T-1 after the adoption, want 4:\n%s", h.name, n, out)
				}
				r := h.run("audit", "verify", "--strict")
				if r.code != 0 || !strings.Contains(r.out, "re-recorded after a divergence with origin") {
					t.Fatalf("%s after the adoption: audit verify exited %d\n%s%s", h.name, r.code, r.out, r.err)
				}
			}
		})
	}
}

// TestPushRaceSameHost: two pushes of the same refs from one host at the
// same moment (two agents' `bernstein push` after their posts). Both pass
// the guard before either lands; the one whose ref transaction fails finds,
// on planning again, that the remote holds what it meant to push: both
// exit 0 and the remote holds the host's refs.
func TestPushRaceSameHost(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	_, a := newOrigin(t, srv, root)
	a.work("T-1", "notes", 2)
	bare := srv.dir("tasks.git")
	arrived := holdPushes(t, bare, 2)
	rs := pushAtOnce(t, a, a)
	if n := arrivals(t, arrived); n != 2 {
		t.Fatalf("%d pushes got past the guard together, want 2:\n%s%s\n%s%s", n, rs[0].out, rs[0].err, rs[1].out, rs[1].err)
	}
	replanned := 0
	for _, r := range rs {
		if r.code != 0 {
			t.Fatalf("push exited %d:\n%s%s", r.code, r.out, r.err)
		}
		if strings.Contains(r.out, "origin had moved refs meanwhile (another push): push fetched its heads and planned again") {
			replanned++
			if !strings.Contains(r.out, "nothing to push to origin") {
				t.Fatalf("the push that lost the race:\n%s", r.out)
			}
		}
	}
	if replanned != 1 {
		t.Fatalf("%d pushes say they planned again, want 1:\n%s\n%s", replanned, rs[0].out, rs[1].out)
	}
	sameRefs(t, "the remote's and the host's refs", refsOf(t, bare, refs.Prefix), a.refs())
	if out := a.ok("push"); !strings.Contains(out, "nothing to push") {
		t.Fatalf("push after the race: %s", out)
	}
}

// TestPushRejectedMessage: a push rejected on a ref the remote moved, where
// fetching the remote's heads does not resolve it: here the remote's push
// URL is another repository (a mirror host-b pushed its row of T-1 to),
// while fetches read the first. Push fetches, finds nothing new, and stops:
// exit 5, the task named with git's reason, and the next step; nothing
// moved on either repository.
func TestPushRejectedMessage(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	tok := a.work("T-1", "notes", 1)
	a.ok("push")
	mirror := srv.newRemote(t, "mirror.git")
	b, _ := cloneHost(t, url, root, "host-b")
	signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers
	srv.operatorPin(t, "tasks.git", signers, a, b)
	srv.operatorPin(t, "mirror.git", signers, a, b)
	b.git("remote", "add", "mirror", mirror)
	b.ok("remote", "setup", "mirror")
	b.post("T-1", "notes", "agent-host-a", tok, 1)
	b.ok("push", "mirror")

	a.post("T-1", "notes", "agent-host-a", tok, 1)
	a.git("config", "remote.origin.pushurl", mirror)
	before := map[string]map[string]string{"tasks.git": refsOf(t, srv.dir("tasks.git"), refs.Prefix), "mirror.git": refsOf(t, srv.dir("mirror.git"), refs.Prefix), "host-a": a.refs()}
	r := a.want(5, "push")
	mustHave(t, "push", r.err,
		"rejected: task T-1 (journal) (fetch first): origin holds commits this host lacks\n",
		"nothing was pushed. Next: 'bernstein fetch origin' (it fast-forwards, or names the task that diverged), then push again\n",
		"\nbernstein: push to origin rejected: task T-1 (journal) moved on the remote meanwhile\n")
	if strings.Count(r.err, "rejected: ") != 2 {
		t.Fatalf("the push names other refs as rejected:\n%s", r.err)
	}
	// The fetch showed nothing new: push stopped rather than retry.
	var res struct {
		Replanned *int `json:"replanned"`
	}
	decodeJSON(t, a.want(5, "push", "--output-json").out, &res)
	if res.Replanned == nil || *res.Replanned != 0 {
		t.Fatalf("push planned again %v times on heads that had not moved", res.Replanned)
	}
	for name, refsBefore := range before {
		got := a.refs()
		if name != "host-a" {
			got = refsOf(t, srv.dir(name), refs.Prefix)
		}
		sameRefs(t, name+"'s refs after the rejected push", got, refsBefore)
	}
}

// TestPushRemoteTransactionFails: the remote's ref transaction fails though
// no other push moved anything (here a stale lock file on the remote): that
// is no race to retry but the remote's failure, exit 1, naming the ref git
// could not lock and saying nothing was pushed; the remote's words once.
func TestPushRemoteTransactionFails(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	_, a := newOrigin(t, srv, root)
	tok := a.work("T-1", "notes", 1)
	a.ok("push")
	a.post("T-1", "notes", "agent-host-a", tok, 1)
	bare := srv.dir("tasks.git")
	lock := filepath.Join(bare, "refs", "bernstein", "journal", "T-1.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := refsOf(t, bare, refs.Prefix)
	r := a.want(1, "push")
	mustHave(t, "push", r.err, "remote: error: cannot lock ref 'refs/bernstein/journal/T-1'",
		"\nbernstein: origin failed to update task T-1 (journal) (atomic transaction failed) and 2 more refs, though no other push had moved it: its reasons are above; nothing was pushed\n")
	if n := strings.Count(r.err, "cannot lock ref"); n != 1 {
		t.Fatalf("the remote's message is printed %d times:\n%s", n, r.err)
	}
	sameRefs(t, "the remote's refs", refsOf(t, bare, refs.Prefix), before)
	os.Remove(lock)
	a.ok("push")
	sameRefs(t, "the remote's and the host's refs", refsOf(t, bare, refs.Prefix), a.refs())
}

func mustHave(t *testing.T, what, s string, fragments ...string) {
	t.Helper()
	for _, f := range fragments {
		if !strings.Contains(s, f) {
			t.Fatalf("%s: output lacks %q:\n%s", what, f, s)
		}
	}
}

// TestPushNonAtomicDivergence: to a remote without atomic pushes, refs go
// one by one: those that land stay landed when another is rejected because
// the remote moved it. Push then fetches, plans again, and reports the
// divergence; the result counts the refs the first attempt pushed as
// pushed, not as up to date, and says that they were. (host-b's row is a
// checkpoint: a post's spine entry would seal a row the remote's journal
// does not hold, and the guard would refuse it; that case is below.)
func TestPushNonAtomicDivergence(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	root := t.TempDir()
	url, a := newOrigin(t, srv, root)
	gitRun(t, srv.dir("tasks.git"), "config", "receive.advertiseAtomic", "false")
	tok := a.work("T-1", "notes", 1)
	a.ok("push")
	b, _ := cloneHost(t, url, root, "host-b")
	signers := writeSigners(t, filepath.Join(root, "signers"), a, b)
	a.signers, b.signers = signers, signers
	srv.operatorPin(t, "tasks.git", signers, a, b)
	a.post("T-1", "notes", "agent-host-a", tok, 1)
	a.ok("push")
	b.ok("checkpoint", "T-1", "--commit", strings.TrimSpace(b.git("rev-parse", "origin/main")))
	before := b.refs()
	remote := refsOf(t, srv.dir("tasks.git"), refs.Prefix)
	upToDate := 0
	for ref, id := range before {
		if remote[ref] == id {
			upToDate++
		}
	}
	r := b.want(5, "push", "--output-json")
	var res struct {
		Pushed []struct {
			Ref string `json:"ref"`
		} `json:"pushed"`
		UpToDate int `json:"up_to_date"`
		Diverged []struct {
			Ref string `json:"ref"`
		} `json:"diverged"`
		Replanned int `json:"replanned"`
	}
	decodeJSON(t, r.out, &res)
	var pushed []string
	for _, p := range res.Pushed {
		pushed = append(pushed, p.Ref)
	}
	// Its anchors, audit mirror and key ref went one by one before the
	// journal was rejected; planning again, its fork of T-1 went too.
	want := []string{refs.Anchors("host-b"), refs.Audit("host-b"), refs.WritersPrefix + "host-b", "refs/bernstein/forks/host-b/journal/T-1/1"}
	ok := len(pushed) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(pushed[i], want[i])
	}
	if !ok || res.UpToDate != upToDate || res.Replanned != 1 || len(res.Diverged) != 1 || res.Diverged[0].Ref != refs.Journal("T-1") {
		t.Fatalf("push result: %+v; want pushed %v, %d up to date, one replan, T-1 diverged", res, want, upToDate)
	}
	mustHave(t, "push", r.err, "only task T-1 is held back: the 4 other refs that did not diverge were pushed", "'bernstein fetch origin' reports the same")
	sameRefs(t, "host-b's refs", b.refs(), before)

	// A post instead: the guard refuses host-b's spine, which seals a row
	// of T-1 the remote does not hold, beside the journal git push held
	// back. Planning again on the remote's heads names the divergence, the
	// cause, rather than the refusal.
	c, _ := cloneHost(t, url, root, "host-c")
	c.signers = writeSigners(t, filepath.Join(root, "signers-c"), a, b, c)
	srv.operatorPin(t, "tasks.git", c.signers, c)
	a.post("T-1", "notes", "agent-host-a", tok, 1)
	a.ok("push")
	c.post("T-1", "notes", "agent-host-a", tok, 1)
	before = c.refs()
	r = c.want(5, "push")
	mustHave(t, "host-c's push", r.err, "diverged: task T-1 (journal)", "only task T-1 is held back", "'bernstein fetch origin' reports the same")
	sameRefs(t, "host-c's refs", c.refs(), before)
}
