package tests

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/bernstein/bernstein/internal/witness"
	"github.com/bernstein/bernstein/internal/witnesstest"
	"github.com/bernstein/bernstein/refs"
)

// witnessed is a remote with host-a's log registered at a running
// litewitness and configured on host-a.
type witnessed struct {
	srv    *gitServer
	root   string
	url    string
	bare   string
	a      *host
	w      *witnesstest.Witness
	origin string
	vkey   string
}

func newWitnessed(t *testing.T) *witnessed {
	t.Helper()
	isolateGit(t)
	x := &witnessed{srv: newGitServer(t, "file"), root: t.TempDir()}
	x.url, x.a = newOrigin(t, x.srv, x.root)
	x.bare = x.srv.dir("tasks.git")
	x.w = witnesstest.Start(t)
	line := strings.Fields(x.a.ok("witness", "log"))
	if len(line) != 2 {
		t.Fatalf("witness log printed %q, want ORIGIN KEY", line)
	}
	x.origin, x.vkey = line[0], line[1]
	x.w.AddLog(t, x.origin, x.vkey)
	x.a.ok("witness", "add", "w1", x.w.URL(), x.w.VerifierKey())
	return x
}

// task creates, claims and works task with n posts, then completes it
// (which seals its journal).
func (x *witnessed) task(task string, n int) {
	x.a.work(task, "notes", n)
	x.a.ok("task", "start", task)
	x.a.ok("task", "complete", task)
}

// remoteCheckpoint is the signed checkpoint the remote holds for writer.
func (x *witnessed) remoteCheckpoint(t *testing.T, writer string) []byte {
	t.Helper()
	return []byte(gitRun(t, x.bare, "show", refs.Checkpoints(writer)+":checkpoint"))
}

// reader is another host that trusts host-a's key (handed over out of
// band) and configures the same witness for the repository.
func (x *witnessed) reader(t *testing.T, name string, w *witnesstest.Witness) *host {
	t.Helper()
	h := newHost(t, x.root, name)
	h.signers = writeSigners(t, filepath.Join(x.root, name+".signers"), x.a)
	cfg := map[string]any{"quorum": 1, "witnesses": []map[string]string{{"name": "w1", "url": w.URL(), "key": w.VerifierKey()}}}
	b, _ := json.Marshal(cfg)
	p := filepath.Join(h.home, "witnesses", x.a.repositoryID(t)+".json")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) repositoryID(t *testing.T) string {
	t.Helper()
	var l struct {
		Config string `json:"config"`
	}
	decodeJSON(t, h.ok("witness", "list", "--output-json"), &l)
	return strings.TrimSuffix(filepath.Base(l.Config), ".json")
}

// TestWitnessCosignsPush: a push has litewitness cosign host-a's
// checkpoint; the stored note verifies with x/mod's note verifier (the
// writer's key, as 'witness log' prints it) and with the witness's key;
// the witness holds that size; a second push is cosigned again, which
// litewitness does only with a consistency proof from the first.
func TestWitnessCosignsPush(t *testing.T) {
	x := newWitnessed(t)
	x.task("T-1", 2)
	x.a.ok("push")
	cp := x.remoteCheckpoint(t, "host-a")
	v, err := note.NewVerifier(x.vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(cp, note.VerifierList(v))
	if err != nil {
		t.Fatalf("the stored checkpoint's writer signature: %v\n%s", err, cp)
	}
	w := witness.Witness{Name: "w1", URL: x.w.URL(), Key: x.w.VerifierKey()}
	if _, err := witness.VerifyCosignature(w, cp, sigLines(cp)); err != nil {
		t.Fatalf("the stored cosignature: %v\n%s", err, cp)
	}
	size := strings.Split(n.Text, "\n")[1]
	spine := len(strings.Fields(gitRun(t, x.bare, "rev-list", refs.Spine("host-a"))))
	if size != itoa(spine) {
		t.Fatalf("checkpoint size %s, the remote's spine holds %d entries", size, spine)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, err := witness.Probe(ctx, w, cp)
	if err != nil || pr.WitnessSize != pr.Size {
		t.Fatalf("the witness holds %+v, %v; want the pushed size", pr, err)
	}
	x.task("T-2", 1)
	x.a.ok("push")
	cp2 := x.remoteCheckpoint(t, "host-a")
	if _, err := witness.VerifyCosignature(w, cp2, sigLines(cp2)); err != nil || string(cp2) == string(cp) {
		t.Fatalf("the second push's checkpoint: %v\n%s", err, cp2)
	}
}

// sigLines are a signed note's signature lines.
func sigLines(n []byte) []byte {
	_, sigs, _ := strings.Cut(string(n), "\n\n")
	return []byte(sigs)
}

// signatures counts the signature lines of a signed note.
func signatures(n string) int { return strings.Count(string(sigLines([]byte(n))), "\u2014 ") }

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestWitnessQuorumNotMet: with a second witness that does not answer and a
// quorum of 2, the push fails naming that witness, and the remote's refs do
// not move; with quorum 1 it goes through.
func TestWitnessQuorumNotMet(t *testing.T) {
	x := newWitnessed(t)
	down := witnesstest.StartNamed(t, "witness.bernstein.test/w2")
	x.a.ok("witness", "add", "w2", down.URL(), down.VerifierKey())
	down.Stop()
	x.task("T-1", 1)
	r := x.a.want(1, "push", "--witness-quorum", "2")
	if !strings.Contains(r.err, "w2") || !strings.Contains(r.err, "the quorum is 2") || !strings.Contains(r.err, "the rows and their signed checkpoint were pushed to origin, not yet cosigned") {
		t.Fatalf("push below the quorum said:\n%s", r.err)
	}
	// The rows went with the writer's signed checkpoint; no cosignature
	// followed them, and a fresh reader raises no alarm.
	after := refsOf(t, x.bare, refs.Prefix)
	if after[refs.Spine("host-a")] != x.a.refs()[refs.Spine("host-a")] {
		t.Fatal("a push below the quorum did not send the rows")
	}
	if n := signatures(string(x.remoteCheckpoint(t, "host-a"))); n != 1 {
		t.Fatalf("the checkpoint pushed below the quorum carries %d signatures, want the writer's alone", n)
	}
	c := x.reader(t, "host-c", x.w)
	if r := c.runIn(x.root, "clone", x.url, c.dir); r.code != 0 {
		t.Fatalf("a clone after a push below the quorum (exit %d):\n%s%s", r.code, r.out, r.err)
	}
	x.a.ok("push", "--witness-quorum", "1")
	if _, ok := refsOf(t, x.bare, refs.Prefix)[refs.Checkpoints("host-a")]; !ok {
		t.Fatal("a push at the quorum sent no checkpoint")
	}
}

// rollBack moves every refs/bernstein/* ref of the bare remote back to
// what it held in snap, with plain git (refs created since are deleted).
func rollBack(t *testing.T, bare string, snap map[string]string) {
	t.Helper()
	var in strings.Builder
	for ref := range refsOf(t, bare, refs.Prefix) {
		if id, ok := snap[ref]; ok {
			in.WriteString("update " + ref + " " + id + "\n")
		} else {
			in.WriteString("delete " + ref + "\n")
		}
	}
	mustOutput(t, execGitStdin(bare, []byte(in.String()), "update-ref", "--stdin"))
}

// TestWitnessRollbackOnFreshClone: the remote is moved back with plain git
// (journal, spine, audit mirror and checkpoint ref together) to before
// host-a's last push; a fresh clone, which has no memory of the log, asks
// the witness, learns that it cosigned a larger log, and refuses, naming
// the writer, both sizes and the witness; nothing moves.
func TestWitnessRollbackOnFreshClone(t *testing.T) {
	x := newWitnessed(t)
	x.task("T-1", 1)
	x.a.ok("push")
	snap := refsOf(t, x.bare, refs.Prefix)
	x.task("T-2", 1)
	x.a.ok("push")
	rollBack(t, x.bare, snap)
	c := x.reader(t, "host-c", x.w)
	r := c.runIn(x.root, "clone", x.url, c.dir)
	if r.code == 0 {
		t.Fatalf("a clone of a rolled-back remote succeeded:\n%s%s", r.out, r.err)
	}
	for _, want := range []string{"writer host-a's log was rolled back, or this is a copy the writer has not pushed to since", "holds 2 entries", "witness w1 has cosigned a checkpoint of 4"} {
		if !strings.Contains(r.err, want) {
			t.Fatalf("the clone's refusal lacks %q:\n%s", want, r.err)
		}
	}
	if got := refsOf(t, c.dir, refs.Prefix); len(got) != 0 {
		t.Fatalf("the refused clone moved refs: %v", got)
	}
}

// TestWitnessPushCutOffIsNoRollback: a push sends the rows with the
// writer's signed checkpoint, then has the witnesses cosign it, then sends
// the cosignatures. Cut off before that last step (here: the remote's
// checkpoints ref moved back one commit with plain git, to the signed
// checkpoint without cosignatures, the rows all there), a fresh clone asks
// the witness about the checkpoint it was shown, which the witness holds
// already: no alarm. A push whose witnesses do not answer leaves the same
// state (TestWitnessQuorumNotMet).
func TestWitnessPushCutOffIsNoRollback(t *testing.T) {
	x := newWitnessed(t)
	x.task("T-1", 1)
	x.a.ok("push")
	x.task("T-2", 1)
	x.a.ok("push")
	cp := refs.Checkpoints("host-a")
	signedOnly := strings.TrimSpace(x.a.git("rev-parse", cp+"~1"))
	if n := signatures(gitRun(t, x.bare, "show", signedOnly+":checkpoint")); n != 1 {
		t.Fatalf("the checkpoint sent with the rows carries %d signatures, want the writer's alone", n)
	}
	mustOutput(t, execGitStdin(x.bare, []byte("update "+cp+" "+signedOnly+"\n"), "update-ref", "--stdin"))
	c := x.reader(t, "host-c", x.w)
	r := c.runIn(x.root, "clone", x.url, c.dir)
	if r.code != 0 || strings.Contains(r.out+r.err, "rolled back") || strings.Contains(r.out+r.err, "forked") {
		t.Fatalf("a clone of a remote whose push was cut off before its cosignatures (exit %d):\n%s%s", r.code, r.out, r.err)
	}
}

// TestWitnessRollbackAfterFetch: a host that fetched the log cosigned at
// 4 entries, and then fetches the remote moved back to 2, refuses: its
// memory names the sizes; nothing moves. A host shown the true log again
// fetches fine; its own refs rolled back the same way fail audit verify.
func TestWitnessRollbackAfterFetch(t *testing.T) {
	x := newWitnessed(t)
	x.task("T-1", 1)
	x.a.ok("push")
	snap := refsOf(t, x.bare, refs.Prefix)
	x.task("T-2", 1)
	x.a.ok("push")
	b := x.reader(t, "host-b", x.w)
	if r := b.runIn(x.root, "clone", x.url, b.dir); r.code != 0 {
		t.Fatalf("clone: %d\n%s%s", r.code, r.out, r.err)
	}
	truth := refsOf(t, x.bare, refs.Prefix)
	rollBack(t, x.bare, snap)
	before := b.refs()
	r := b.want(1, "fetch")
	if !strings.Contains(r.err, "writer host-a's log was rolled back: it holds 2 entries, but this host has seen a cosigned checkpoint of 4") {
		t.Fatalf("fetch of a rolled-back remote said:\n%s", r.err)
	}
	sameRefs(t, "host-b's refs after the refused fetch", b.refs(), before)
	rollBack(t, x.bare, truth)
	if out := b.ok("fetch"); !strings.Contains(out, "log of writer host-a: 4 of 4 entries cosigned by w1") {
		t.Fatalf("fetch of the true log said:\n%s", out)
	}
	// The same rollback made to host-b's own refs with plain git: audit
	// verify fails it.
	rollBack(t, b.dir, snap)
	r = b.want(1, "audit", "verify")
	if !strings.Contains(r.out+r.err, "witness_log") || !strings.Contains(r.out+r.err, "writer host-a's log was rolled back") {
		t.Fatalf("audit verify of a rolled-back log said:\n%s%s", r.out, r.err)
	}
}

// TestWitnessUnconfiguredCosignature: a reader whose only witness is
// another (live) one counts host-a's cosignature from w1 for nothing: the
// log reads not cosigned, never tampered, and the task's journal identity
// is unverifiable, saying why; with w1 configured it is verified.
func TestWitnessUnconfiguredCosignature(t *testing.T) {
	x := newWitnessed(t)
	x.task("T-1", 1)
	x.a.ok("push")
	other := witnesstest.StartNamed(t, "witness.bernstein.test/w9")
	c := x.reader(t, "host-c", other)
	if r := c.runIn(x.root, "clone", x.url, c.dir); r.code != 0 {
		t.Fatalf("clone: %d\n%s%s", r.code, r.out, r.err)
	}
	show := c.ok("task", "list", "--output-json")
	if !strings.Contains(show, `"journal_identity": "unverifiable"`) || !strings.Contains(show, "has 0 of the 1 cosignatures needed") {
		t.Fatalf("with another witness configured, task show says:\n%s", show)
	}
	d := x.reader(t, "host-d", x.w)
	if r := d.runIn(x.root, "clone", x.url, d.dir); r.code != 0 {
		t.Fatalf("clone: %d\n%s%s", r.code, r.out, r.err)
	}
	if show := d.ok("task", "list", "--output-json"); !strings.Contains(show, `"journal_identity": "verified"`) {
		t.Fatalf("with w1 configured, task show says:\n%s", show)
	}
}

// TestWitnessCommands: witness add, list, remove, quorum and log, with bad
// input refused in one line and nothing written.
func TestWitnessCommands(t *testing.T) {
	isolateGit(t)
	srv := newGitServer(t, "file")
	_, a := newOrigin(t, srv, t.TempDir())
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	raw := append([]byte{4}, pub...)
	sum := sha256.Sum256(append([]byte("w.example\n"), raw...))
	key := fmt.Sprintf("w.example+%x+%s", sum[:4], base64.StdEncoding.EncodeToString(raw))
	cfg := filepath.Join(a.home, "witnesses", a.repositoryID(t)+".json")
	for _, bad := range [][]string{
		{"w1", "ftp://127.0.0.1:1", key},
		{"w 1", "http://127.0.0.1:1", key},
		{"w1", "http://127.0.0.1:1", key[:len(key)-6] + "AAAAAA"},
		{"w1", "http://127.0.0.1:1", "w.example+00000000+" + base64.StdEncoding.EncodeToString(raw)},
	} {
		r := a.want(1, append([]string{"witness", "add"}, bad...)...)
		if strings.Count(strings.TrimSpace(r.err), "\n") != 0 || !strings.HasPrefix(r.err, "bernstein: ") {
			t.Fatalf("witness add %v: not one line: %q", bad, r.err)
		}
		if _, err := os.Stat(cfg); !os.IsNotExist(err) {
			t.Fatalf("witness add %v wrote %s", bad, cfg)
		}
	}
	a.ok("witness", "add", "w1", "http://127.0.0.1:1", key)
	if out := a.ok("witness", "list"); !strings.Contains(out, "w1\thttp://127.0.0.1:1\t"+key) || !strings.Contains(out, "quorum 1 of 1") {
		t.Fatalf("witness list: %q", out)
	}
	a.want(1, "witness", "add", "w1", "http://127.0.0.1:2", key)
	a.want(1, "witness", "quorum", "2")
	a.want(1, "witness", "remove", "w2")
	a.ok("witness", "remove", "w1")
	if out := a.ok("witness", "list"); !strings.Contains(out, "quorum 0 of 0") {
		t.Fatalf("witness list after remove: %q", out)
	}
	f := strings.Fields(a.ok("witness", "log"))
	v, err := note.NewVerifier(f[1])
	if len(f) != 2 || err != nil || v.Name() != f[0] || !strings.HasPrefix(f[0], "bernstein.log/"+a.repositoryID(t)+"/host-a") {
		t.Fatalf("witness log printed %v (%v)", f, err)
	}
}

// TestWitnessTwoHistories: host-a's state is copied to a second machine
// (same writer, same key) that writes other entries after the first push:
// the witness will not cosign that history, so it reaches a second remote
// with the copy's own signed checkpoint, uncosigned (a push sends the
// rows and the signed checkpoint before it asks the witnesses). One clone
// of each remote: the clone of the forked remote learns from the witness
// that it cosigned another tree of that size;
// the clone of the true remote, which remembers the checkpoint it
// verified, refuses the forked remote's history as a fork. Nothing moves.
func TestWitnessTwoHistories(t *testing.T) {
	x := newWitnessed(t)
	x.task("T-1", 1)
	x.a.ok("push")
	forkBare := x.srv.dir("fork.git")
	mustOutput(t, command("", "cp", "-a", x.bare, forkBare))
	a2 := &host{t: t, name: "host-a", home: filepath.Join(x.root, "a2-home"), dir: filepath.Join(x.root, "a2")}
	mustOutput(t, command("", "cp", "-a", x.a.home, a2.home))
	mustOutput(t, command("", "cp", "-a", x.a.dir, a2.dir))
	x.task("T-2", 1)
	x.a.ok("push")
	a2.work("T-9", "other", 1)
	a2.ok("task", "start", "T-9")
	a2.ok("task", "complete", "T-9")
	a2.git("remote", "set-url", "origin", x.srv.url("fork.git"))
	if r := a2.run("push"); r.code == 0 || !strings.Contains(r.err, "w1") {
		t.Fatalf("the witness cosigned a forked history: %d\n%s", r.code, r.err)
	}
	a2.ok("witness", "remove", "w1")
	a2.ok("push")

	c := x.reader(t, "host-c", x.w)
	r := c.runIn(x.root, "clone", x.srv.url("fork.git"), c.dir)
	if r.code == 0 || !strings.Contains(r.err, "writer host-a's log forked: its first 4 entries are not those of the cosigned checkpoint of 4 entries witness w1 has seen") {
		t.Fatalf("the clone of the forked remote: %d\n%s%s", r.code, r.out, r.err)
	}
	b := x.reader(t, "host-b", x.w)
	if r := b.runIn(x.root, "clone", x.url, b.dir); r.code != 0 {
		t.Fatalf("clone of the true remote: %d\n%s%s", r.code, r.out, r.err)
	}
	b.git("remote", "add", "fork", x.srv.url("fork.git"))
	b.ok("remote", "setup", "fork")
	before := b.refs()
	r = b.want(1, "fetch", "fork")
	if !strings.Contains(r.err, "writer host-a's log forked: its first 4 entries are not those of the cosigned checkpoint of 4 entries this host has seen") {
		t.Fatalf("fetch of the forked remote said:\n%s", r.err)
	}
	sameRefs(t, "host-b's refs after the refused fetch", b.refs(), before)
}

func command(dir string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	return cmd
}

// TestWitnessGuardRemembers: a guard whose operator configures the witness
// remembers the cosigned checkpoints it accepted. The remote is moved back
// on the server with plain git, and a copy of host-a's older state pushes
// another history on top: the guard refuses it as a fork of the log it
// accepted, and nothing moves.
func TestWitnessGuardRemembers(t *testing.T) {
	x := newWitnessed(t)
	op := &host{t: t, home: x.bare + ".operator"}
	cfg := map[string]any{"quorum": 1, "witnesses": []map[string]string{{"name": "w1", "url": x.w.URL(), "key": x.w.VerifierKey()}}}
	b, _ := json.Marshal(cfg)
	p := filepath.Join(op.home, "witnesses", x.a.repositoryID(t)+".json")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	x.task("T-1", 1)
	x.a.ok("push")
	snap := refsOf(t, x.bare, refs.Prefix)
	a2 := &host{t: t, name: "host-a", home: filepath.Join(x.root, "a2-home"), dir: filepath.Join(x.root, "a2")}
	mustOutput(t, command("", "cp", "-a", x.a.home, a2.home))
	mustOutput(t, command("", "cp", "-a", x.a.dir, a2.dir))
	x.task("T-2", 1)
	x.a.ok("push")
	rollBack(t, x.bare, snap)
	a2.work("T-9", "other", 1)
	a2.ok("task", "start", "T-9")
	a2.ok("task", "complete", "T-9")
	a2.ok("witness", "remove", "w1")
	before := refsOf(t, x.bare, refs.Prefix)
	r := a2.run("push")
	if r.code == 0 || !strings.Contains(r.err, "writer host-a's log forked") {
		t.Fatalf("the guard took another history of a log it accepted: %d\n%s", r.code, r.err)
	}
	sameRefs(t, "the remote's refs after the refused push", refsOf(t, x.bare, refs.Prefix), before)
}

// TestWitnessPushOverForgedOwnCheckpoints: the writer's own checkpoints
// ref pointed with plain git at a blob, or at a commit appended to it
// that is not the writer's, blocks no push: push moves it back to the
// writer's last checkpoint (recorded by its last push) and says so, signs
// the next checkpoint on that, and the witness cosigns it. The remote
// gets a checkpoints chain that extends the honest one and never holds
// the forged value, as git there shows.
func TestWitnessPushOverForgedOwnCheckpoints(t *testing.T) {
	for _, forge := range []string{"blob", "commit-tree"} {
		t.Run(forge, func(t *testing.T) {
			x := newWitnessed(t)
			x.task("T-1", 1)
			x.a.ok("push")
			ref := refs.Checkpoints("host-a")
			honest := strings.TrimSpace(x.a.git("rev-parse", ref))
			var forged string
			if forge == "blob" {
				forged = strings.TrimSpace(x.a.git("hash-object", "-w", "--stdin"))
			} else {
				forged = strings.TrimSpace(x.a.git("commit-tree", "-p", honest, "-m", "junk", honest+"^{tree}"))
			}
			x.a.git("update-ref", ref, forged, honest)
			x.task("T-2", 1)
			r := x.a.run("push")
			if r.code != 0 || !strings.Contains(r.err, "warning: "+ref+" (at "+forged+") was tampered with") {
				t.Fatalf("push over the forged checkpoints ref: exit %d\n%s%s", r.code, r.out, r.err)
			}
			there := strings.TrimSpace(gitRun(t, x.bare, "rev-parse", ref))
			if _, err := execGit(x.bare, "merge-base", "--is-ancestor", honest, there); err != nil || there == honest {
				t.Fatalf("the remote's %s is at %s, which does not extend the honest %s", ref, there, honest)
			}
			if strings.Contains(gitRun(t, x.bare, "rev-list", there), forged) {
				t.Fatalf("the remote's %s holds the forged %s", ref, forged)
			}
			cp := x.remoteCheckpoint(t, "host-a")
			w := witness.Witness{Name: "w1", URL: x.w.URL(), Key: x.w.VerifierKey()}
			if _, err := witness.VerifyCosignature(w, cp, sigLines(cp)); err != nil {
				t.Fatalf("the checkpoint pushed over the forgery is not cosigned: %v\n%s", err, cp)
			}
			if r := x.a.run("audit", "verify"); r.code != 0 {
				t.Fatalf("audit verify after the push: exit %d\n%s%s", r.code, r.out, r.err)
			}
		})
	}
}
