package tests

import (
	"bytes"
	"compress/zlib"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
)

// tamperFixture posts three versions of "summary" (distinct bodies) and a
// table, and returns the blob id of summary v2.
func tamperFixture(t *testing.T) (*fixture, string) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "TP-1", "agent")
	f.post(s, "TP-1", "summary", "agent", tok, report("first body, alpha"))
	v2 := f.post(s, "TP-1", "summary", "agent", tok, report("SECRET-SECOND-BODY with distinct words"))
	f.post(s, "TP-1", "summary", "agent", tok, report("third body, gamma"))
	s.Close()
	return f, v2.Blob
}

type listDoc struct {
	Task      string `json:"task"`
	Verified  bool   `json:"verified"`
	Artifacts []struct {
		Key          string `json:"key"`
		Version      int64  `json:"version"`
		JournalIndex int64  `json:"journal_index"`
		State        string `json:"state"`
		Reason       string `json:"reason"`
	} `json:"artifacts"`
}

// assertTampered checks every read surface reports summary v2 (journal
// index 1) tampered and never prints its content.
func assertTampered(t *testing.T, f *fixture) {
	t.Helper()
	out, errOut, code := f.cli("", "artifact", "show", "TP-1", "summary", "--version", "2")
	if code != 2 {
		t.Fatalf("show of a tampered version exited %d, want 2\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, "SECRET-SECOND-BODY") {
		t.Fatalf("tampered content was displayed:\n%s", out)
	}
	if !strings.Contains(out, "tampered") || !strings.Contains(errOut, "tampered") {
		t.Fatalf("show does not say tampered:\n%s\n%s", out, errOut)
	}
	out, _, code = f.cli("", "artifact", "show", "TP-1", "summary", "--version", "2", "--output-json")
	if code != 2 || strings.Contains(out, "SECRET-SECOND-BODY") {
		t.Fatalf("show --output-json: exit %d\n%s", code, out)
	}
	var shown map[string]any
	decodeJSON(t, out, &shown)
	if shown["state"] != "tampered" || shown["payload"] != nil {
		t.Fatalf("show --output-json: %v", shown)
	}
	out, _, code = f.cli("", "artifact", "list", "TP-1", "--output-json")
	if code != 0 {
		t.Fatalf("list exited %d, want 0 (versions exist)", code)
	}
	var doc listDoc
	decodeJSON(t, out, &doc)
	if doc.Verified {
		t.Fatalf("list says verified with a tampered version")
	}
	for _, a := range doc.Artifacts {
		tampered := a.Key == "summary" && a.Version == 2
		if tampered != (a.State == "tampered") {
			t.Fatalf("%s v%d is %s (%s)", a.Key, a.Version, a.State, a.Reason)
		}
		if tampered && (!strings.Contains(a.Reason, "summary v2") || !strings.Contains(a.Reason, "journal index 1") || a.JournalIndex != 1) {
			t.Fatalf("reason does not name key, version and journal index: %q", a.Reason)
		}
	}
	// The untouched versions still render.
	if out, _, code := f.cli("", "artifact", "show", "TP-1", "summary"); code != 0 || !strings.Contains(out, "third body") {
		t.Fatalf("show of an intact version: exit %d\n%s", code, out)
	}
}

// TestTamperLooseBlob flips one byte of the payload in a loose object.
func TestTamperLooseBlob(t *testing.T) {
	f, blob := tamperFixture(t)
	// Make every object loose, as git would after unpacking.
	packDir := filepath.Join(f.dir, ".git", "objects", "pack")
	packs, _ := filepath.Glob(filepath.Join(packDir, "*.pack"))
	stash := t.TempDir()
	for _, p := range packs {
		base := strings.TrimSuffix(p, ".pack")
		os.Rename(p, filepath.Join(stash, filepath.Base(p)))
		os.Remove(base + ".idx")
	}
	for _, p := range packs {
		data, _ := os.ReadFile(filepath.Join(stash, filepath.Base(p)))
		cmd := execGitStdin(f.dir, data, "unpack-objects", "-q")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("unpack-objects: %v %s", err, out)
		}
	}
	path := filepath.Join(f.dir, ".git", "objects", blob[:2], blob[2:])
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("loose blob: %v", err)
	}
	zr, _ := zlib.NewReader(bytes.NewReader(raw))
	plain, _ := io.ReadAll(zr)
	i := bytes.Index(plain, []byte("SECRET"))
	plain[i] ^= 0x01 // one byte of the payload
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(plain)
	zw.Close()
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, z.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
	assertTampered(t, f)
}

// TestTamperPackedBlob flips one byte of the payload's entry in a pack.
func TestTamperPackedBlob(t *testing.T) {
	f, blob := tamperFixture(t)
	f.git("repack", "-a", "-d", "-q")
	idx, _ := filepath.Glob(filepath.Join(f.dir, ".git", "objects", "pack", "*.idx"))
	if len(idx) != 1 {
		t.Fatalf("%d packs after repack", len(idx))
	}
	data, _ := os.ReadFile(idx[0])
	listing := execGitStdin(f.dir, data, "show-index")
	out, err := listing.Output()
	if err != nil {
		t.Fatal(err)
	}
	off := int64(-1)
	for _, line := range strings.Split(string(out), "\n") {
		fs := strings.Fields(line)
		if len(fs) >= 2 && fs[1] == blob {
			off, _ = strconv.ParseInt(fs[0], 10, 64)
		}
	}
	if off < 0 {
		t.Fatalf("blob %s not in the pack", blob)
	}
	pack := strings.TrimSuffix(idx[0], ".idx") + ".pack"
	os.Chmod(pack, 0o644)
	b, _ := os.ReadFile(pack)
	b[off+6] ^= 0x40 // inside the entry's compressed data
	if err := os.WriteFile(pack, b, 0o444); err != nil {
		t.Fatal(err)
	}
	assertTampered(t, f)
	// git itself agrees the repository is damaged.
	if _, err := f.gitErr("fsck", "--full"); err == nil {
		t.Fatalf("git fsck accepted the damaged pack")
	}
}

// TestDeprecatedPluralAlias: same stdout and exit status, plus the warning.
func TestDeprecatedPluralAlias(t *testing.T) {
	f, _ := tamperFixture(t)
	for _, args := range [][]string{
		{"list", "TP-1"}, {"list", "TP-1", "--output-json"}, {"list"}, {"list", "--output-json"},
		{"show", "TP-1", "summary"}, {"show", "TP-1", "summary", "--version", "1", "--output-json"},
		{"show", "TP-1", "nope"}, {"list", "NO-SUCH-TASK"},
	} {
		out1, err1, code1 := f.cli("", append([]string{"artifact"}, args...)...)
		out2, err2, code2 := f.cli("", append([]string{"artifacts"}, args...)...)
		if out1 != out2 || code1 != code2 {
			t.Fatalf("%v: singular and plural differ:\n%s (exit %d)\n%s (exit %d)", args, out1, code1, out2, code2)
		}
		const warning = "WARNING: 'bernstein artifacts' is deprecated and will be removed in v4.0.0: use 'bernstein artifact' instead."
		if strings.Contains(err1, "deprecated") {
			t.Fatalf("%v: the singular spelling warned: %s", args, err1)
		}
		if !strings.HasPrefix(err2, warning+"\n") || strings.TrimPrefix(err2, warning+"\n") != err1 {
			t.Fatalf("%v: plural stderr %q, singular %q", args, err2, err1)
		}
	}
}

// TestListAndShowExitCodes pins the exit codes of list and show.
func TestListAndShowExitCodes(t *testing.T) {
	f, _ := tamperFixture(t)
	s := f.open()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: "EMPTY"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"artifact", "list", "TP-1"}, 0},
		{[]string{"artifact", "list", "EMPTY"}, 1},
		{[]string{"artifact", "list", "NOPE"}, 1},
		{[]string{"artifact", "show", "TP-1", "summary"}, 0},
		{[]string{"artifact", "show", "TP-1", "nope"}, 1},
		{[]string{"artifact", "show", "NOPE", "summary"}, 1},
		{[]string{"artifact", "show", "TP-1", "summary", "--version", "9"}, 1},
		{[]string{"artifact", "list"}, 0},
	}
	for _, c := range cases {
		out, errOut, code := f.cli("", c.args...)
		if code != c.code {
			t.Fatalf("%v exited %d, want %d\n%s%s", c.args, code, c.code, out, errOut)
		}
		if code != 0 && strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Fatalf("%v: error is not one line: %q", c.args, errOut)
		}
	}
	// A broken journal chain (a row rewritten without re-chaining) exits 2.
	head := strings.TrimSpace(f.git("rev-parse", "refs/bernstein/journal/TP-1"))
	body := f.git("cat-file", "commit", head)
	forged := strings.Replace(body, `"index":2`, `"index":7`, 1)
	id := strings.TrimSpace(string(mustOutput(t, execGitStdin(f.dir, []byte(forged), "hash-object", "-t", "commit", "-w", "--stdin"))))
	f.git("update-ref", "refs/bernstein/journal/TP-1", id)
	out, _, code := f.cli("", "artifact", "list", "TP-1", "--output-json")
	if code != 2 {
		t.Fatalf("list of a broken chain exited %d, want 2\n%s", code, out)
	}
	var doc map[string]any
	decodeJSON(t, out, &doc)
	if doc["verified"] != false || !strings.Contains(doc["reason"].(string), "broken at index 2") {
		t.Fatalf("broken chain document: %v", doc)
	}
}
