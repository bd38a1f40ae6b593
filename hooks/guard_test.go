package hooks_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Tampering with plain git: what anyone with push access can do.

const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// commitTree writes a commit with plain git (committer writer, as a
// bernstein chain commit names it), signed with signKey's SSH key when
// signKey is not "".
func commitTree(t *testing.T, h *host, tree, parent, writer, msg, signKey string) string {
	t.Helper()
	args := []string{}
	if signKey != "" {
		args = append(args, "-c", "gpg.format=ssh", "-c", "user.signingkey="+signKey)
	}
	args = append(args, "commit-tree", tree)
	if parent != "" {
		args = append(args, "-p", parent)
	}
	if signKey != "" {
		args = append(args, "-S")
	}
	env := h.env("GIT_COMMITTER_NAME="+writer, "GIT_COMMITTER_EMAIL="+writer+"@bernstein")
	out, code := run(t, h.dir, env, msg, "git", args...)
	if code != 0 {
		t.Fatalf("git commit-tree: %s", out)
	}
	return strings.TrimSpace(out)
}

// hashObject stores data as a blob with plain git.
func hashObject(t *testing.T, h *host, data string) string {
	t.Helper()
	out, code := run(t, h.dir, h.env(), data, "git", "hash-object", "-w", "--stdin")
	if code != 0 {
		t.Fatalf("git hash-object: %s", out)
	}
	return strings.TrimSpace(out)
}

// mktree stores a tree of entries ("<mode> <type> <id>\t<name>" lines).
func mktree(t *testing.T, h *host, entries ...string) string {
	t.Helper()
	out, code := run(t, h.dir, h.env(), strings.Join(entries, "\n")+"\n", "git", "mktree")
	if code != 0 {
		t.Fatalf("git mktree: %s", out)
	}
	return strings.TrimSpace(out)
}

// decode parses a canonical record into a map, keeping numbers exact.
func decode(t *testing.T, rec string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(rec))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("record %q: %v", rec, err)
	}
	return m
}

// canon encodes a record map as canonical JSON: sorted keys, no spaces, no
// HTML escapes (the records here hold ASCII strings and integers only).
func canon(t *testing.T, m map[string]any) string {
	t.Helper()
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(m); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func index(t *testing.T, rec map[string]any, field string) int {
	t.Helper()
	n, err := rec[field].(json.Number).Int64()
	if err != nil {
		t.Fatalf("%s: %v", field, err)
	}
	return int(n)
}

// guarded is a host whose history a guarded remote holds: task T-1 with two
// versions of one report and a checkpoint, pushed through the guard after
// the operator pinned the host's key.
func guarded(t *testing.T) (*host, *remote) {
	t.Helper()
	h := newHost(t, "host-a")
	h.task("T-1")
	h.post("T-1", "summary", "first")
	h.checkpoint("T-1")
	h.post("T-1", "summary", "second")
	r := newRemote(t)
	out := r.mustCLI("hooks", "install", "--remote-guard")
	mustContain(t, out, "installed the remote guard", filepath.Join(r.dir, "hooks", "pre-receive"))
	r.pin("host-a", h.signers())
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("the guard refused a good push:\n%s", out)
	}
	return h, r
}

func TestGuardPassesGoodPushes(t *testing.T) {
	h, r := guarded(t)
	// The script is one line after the shebang, calling this binary by its
	// absolute path with the operator's BERNSTEIN_HOME.
	b, err := os.ReadFile(filepath.Join(r.dir, "hooks", "pre-receive"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "#!/bin/sh" || !strings.Contains(lines[1], "'"+cliBin+"' hooks run pre-receive") || !strings.Contains(lines[1], "BERNSTEIN_HOME='"+r.home+"'") {
		t.Fatalf("hook script:\n%s", b)
	}
	// More work, a second task, and a terminal transition that seals the
	// journal: each push passes and the remote holds what the host holds.
	h.post("T-1", "summary", "third")
	h.post("T-1", "table-key", "other")
	h.checkpoint("T-1")
	h.task("T-2")
	h.post("T-2", "notes", "n")
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("good push refused:\n%s", out)
	}
	if _, err := h.s.Transition("T-2", "task.started", "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Transition("T-2", "task.completed", "", ""); err != nil {
		t.Fatal(err)
	}
	if out, code := h.push(r, allBernstein); code != 0 { // not atomic: the guard sees every update all the same
		t.Fatalf("good push refused:\n%s", out)
	}
	// A task abandoned before any post seals an empty journal: its seal
	// names the journal's genesis as head.
	h.task("T-3")
	if _, err := h.s.Transition("T-3", "task.abandoned", "", ""); err != nil {
		t.Fatal(err)
	}
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("a seal of an empty journal refused:\n%s", out)
	}
	local := h.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/")
	if got := strings.TrimSpace(r.refs()); got != local {
		t.Fatalf("remote refs:\n%s\nlocal refs:\n%s", got, local)
	}
	// Refs outside refs/bernstein/ pass untouched.
	if out, code := h.push(r, "HEAD:refs/heads/main"); code != 0 {
		t.Fatalf("branch push refused:\n%s", out)
	}
	if out, code := r.cli("audit", "verify"); code != 0 {
		t.Fatalf("audit verify on the remote: exit %d\n%s", code, out)
	}
}

// TestGuardRefuses: each tampering made with plain git is refused, the
// refusal names what is wrong, and the remote's refs do not move.
func TestGuardRefuses(t *testing.T) {
	h, r := guarded(t)
	journal := "refs/bernstein/journal/T-1"
	before := r.refs()
	remoteHead := h.git("rev-parse", journal)
	headRec := recordOf(t, h, remoteHead)
	rows := index(t, decode(t, headRec), "index") + 1 // rows the remote holds
	fp := h.fingerprint()

	cases := []struct {
		name   string
		tamper func(c *host) []string // returns the push arguments
		want   []string
	}{
		{"forged row", func(c *host) []string {
			// A checkpoint row chained correctly, committed with plain git:
			// nobody's signature.
			rec := fmt.Sprintf(`{"actor":"mallory","data":{"commit":"%s"},"index":%d,"kind":"checkpoint","prev":"%s","task_id":"T-1","v":1}`,
				c.git("rev-parse", "HEAD"), rows, sha256Hex(headRec))
			id := commitTree(t, c, emptyTree, remoteHead, "host-a", fmt.Sprintf("checkpoint #%d\n\n%s\n", rows, rec), "")
			c.git("update-ref", journal, id, remoteHead)
			return []string{"--atomic", allBernstein}
		}, []string{fmt.Sprintf("refused %s (task T-1, journal index %d, writer host-a): ", journal, rows), "commit is not signed [row_signature]"}},

		{"re-chained row", func(c *host) []string {
			// Two more versions, then the second re-chained onto the
			// remote's head in place of the first (index and prev
			// rewritten), re-committed with plain git.
			c.post("T-1", "summary", "v3")
			c.post("T-1", "summary", "v4")
			last := c.git("rev-parse", journal)
			rec := decode(t, recordOf(t, c, last))
			rec["index"] = json.Number(fmt.Sprint(rows))
			rec["prev"] = sha256Hex(headRec)
			tree := c.git("rev-parse", last+"^{tree}")
			id := commitTree(t, c, tree, remoteHead, "host-a", fmt.Sprintf("artifact_posted #%d\n\n%s\n", rows, canon(t, rec)), "")
			c.git("update-ref", journal, id)
			return []string{"--atomic", allBernstein}
		}, []string{
			fmt.Sprintf("(task T-1, journal index %d, writer host-a): commit is not signed [row_signature]", rows),
			fmt.Sprintf("summary v4 at journal index %d: spine entry host-a/", rows),
			"binds a different journal_index [spine_binding]",
			fmt.Sprintf("seals summary v4 of task T-1 at journal index %d, which the journal does not hold [spine_binding]", rows+1),
		}},

		{"payload swap", func(c *host) []string {
			// A new version whose blob is replaced (row and tree name the
			// new blob, the content hash is the old one's).
			c.post("T-1", "summary", "v3")
			last := c.git("rev-parse", journal)
			rec := decode(t, recordOf(t, c, last))
			payload := `{"body":"swapped","type":"report","v":1}`
			blob := hashObject(t, c, payload)
			rec["blob"] = blob
			data := rec["data"].(map[string]any)
			data["blob"], data["size"] = blob, json.Number(fmt.Sprint(len(payload)))
			v3 := mktree(t, c, "100644 blob "+blob+"\tv3.json")
			summary := mktree(t, c, "040000 tree "+v3+"\tsummary")
			tree := mktree(t, c, "040000 tree "+summary+"\tartifacts")
			delete(rec, "blob")
			id := commitTree(t, c, tree, remoteHead, "host-a", fmt.Sprintf("artifact_posted #%d\n\n%s\n", rows, canon(t, rec)), "")
			c.git("update-ref", journal, id)
			return []string{"--atomic", allBernstein}
		}, []string{fmt.Sprintf("(task T-1, journal index %d, writer host-a): summary v3 at journal index %d: stored bytes do not hash to the row's content hash [content_hash]", rows, rows)}},

		{"unsigned spine commit", func(c *host) []string {
			spine := "refs/bernstein/spine/host-a"
			head := c.git("rev-parse", spine)
			prevRec := recordOf(t, c, head)
			seq := index(t, decode(t, prevRec), "seq") + 1
			rec := fmt.Sprintf(`{"actor":"mallory","content_hash":"%s","journal_index":%d,"key":"summary","kind":"artifact","prev":"%s","prev_version_hash":"","seq":%d,"task_id":"T-1","v":1,"version":9,"writer":"host-a"}`,
				sha256Hex("forged"), rows+5, sha256Hex(prevRec), seq)
			id := commitTree(t, c, emptyTree, head, "host-a", fmt.Sprintf("artifact T-1/summary v9\n\n%s\n", rec), "")
			c.git("update-ref", spine, id, head)
			return []string{"--atomic", allBernstein}
		}, []string{"refused refs/bernstein/spine/host-a (spine seq ", "writer host-a): commit is not signed [spine_signature]"}},

		{"key substitution", func(c *host) []string {
			// Another key published under host-a's name, in a commit
			// signed by that key.
			keyFile := filepath.Join(t.TempDir(), "mallory")
			if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mallory", "-f", keyFile).CombinedOutput(); err != nil {
				t.Fatalf("ssh-keygen: %v %s", err, out)
			}
			pub, err := os.ReadFile(keyFile + ".pub")
			if err != nil {
				t.Fatal(err)
			}
			line := strings.TrimSpace(string(pub))
			fields := strings.Fields(line)
			line = fields[0] + " " + fields[1]
			ref := c.writerRef()
			head := c.git("rev-parse", ref)
			tree := mktree(t, c,
				"100644 blob "+hashObject(t, c, line+"\n")+"\thost-a.pub",
				"100644 blob "+hashObject(t, c, `host-a@bernstein namespaces="git" `+line+"\n")+"\tallowed_signers")
			id := commitTree(t, c, tree, head, "host-a", "publish key of host-a\n", keyFile)
			c.git("update-ref", ref, id, head)
			substituted := keyFingerprint(t, line)
			t.Logf("substituted key %s, pinned %s", substituted, fp)
			return []string{"--atomic", allBernstein}
		}, []string{"refused refs/bernstein/writers/host-a.", "publishes SHA256:", "in a ref named for another key [key_record]"}},

		{"deletion", func(c *host) []string {
			return []string{":" + journal}
		}, []string{"refused " + journal + " (task T-1): the push deletes " + journal, "[deletion]"}},

		{"force push", func(c *host) []string {
			c.git("update-ref", journal, journal+"~1")
			return []string{"--force", journal + ":" + journal}
		}, []string{"refused " + journal + " (task T-1): the push moves " + journal, "(a forced push is refused) [non_fast_forward]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := h.copyRepo()
			args := tc.tamper(c)
			out, code := c.push(r, args...)
			if code == 0 {
				t.Fatalf("push accepted:\n%s", out)
			}
			mustContain(t, out, append([]string{"pre-receive hook declined", "bernstein guard: push refused"}, tc.want...)...)
			if after := r.refs(); after != before {
				t.Fatalf("the remote's refs moved:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	// The key substitution names the substituted key itself.
	t.Run("substituted key named", func(t *testing.T) {
		c := h.copyRepo()
		keyFile := filepath.Join(t.TempDir(), "other")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", keyFile).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v %s", err, out)
		}
		pub, _ := os.ReadFile(keyFile + ".pub")
		f := strings.Fields(string(pub))
		line := f[0] + " " + f[1]
		ref := c.writerRef()
		head := c.git("rev-parse", ref)
		tree := mktree(t, c,
			"100644 blob "+hashObject(t, c, line+"\n")+"\thost-a.pub",
			"100644 blob "+hashObject(t, c, `host-a@bernstein namespaces="git" `+line+"\n")+"\tallowed_signers")
		c.git("update-ref", ref, commitTree(t, c, tree, head, "host-a", "publish key of host-a\n", keyFile), head)
		out, code := c.push(r, ref)
		if code == 0 {
			t.Fatalf("push accepted:\n%s", out)
		}
		mustContain(t, out, "(writer host-a, key "+keyFingerprint(t, line)+"): commit ", "publishes "+keyFingerprint(t, line)+" in a ref named for another key")
	})
}
