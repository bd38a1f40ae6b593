package gitstore

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The tests drive the real git binary; nothing in git is mocked.

// gitEnv is the environment every git command runs in: no user or system
// configuration, fixed identities and dates, and none of the caller's GIT_*
// variables (a GIT_DIR inherited from a hook would point git elsewhere).
func gitEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Ada Author",
		"GIT_AUTHOR_EMAIL=ada@example.com",
		"GIT_AUTHOR_DATE=1700000000 +0000",
		"GIT_COMMITTER_NAME=Cy Committer",
		"GIT_COMMITTER_EMAIL=cy@example.com",
		"GIT_COMMITTER_DATE=1700000000 +0000",
		"GIT_TERMINAL_PROMPT=0",
	)
	return append(env, extra...)
}

// runGit runs git in dir with stdin and returns stdout and the error, with
// stderr folded into the error.
func runGit(dir string, stdin []byte, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = gitEnv(env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// git runs git in dir and fails the test if it fails.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := runGit(dir, nil, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// gitIn is git with stdin.
func gitIn(t testing.TB, dir string, stdin []byte, args ...string) string {
	t.Helper()
	out, err := runGit(dir, stdin, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// newBare creates a bare repository and returns its git directory.
func newBare(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bare.git")
	git(t, filepath.Dir(dir), "init", "-q", "--bare", dir)
	git(t, dir, "config", "gc.auto", "0")
	return dir
}

// newWork creates a repository with a work tree and returns the work tree;
// its git directory is work/.git.
func newWork(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	git(t, filepath.Dir(dir), "init", "-q", "-b", "main", dir)
	git(t, dir, "config", "gc.auto", "0")
	return dir
}

// openRepo opens the object directory of gitDir and closes it at cleanup.
func openRepo(t testing.TB, gitDir string) *Repo {
	t.Helper()
	r, err := Open(filepath.Join(gitDir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// gitObject is an object as git itself reports it.
type gitObject struct {
	typ  ObjectType
	data []byte
}

// allObjectIDs lists every object git sees in gitDir (alternates included).
func allObjectIDs(t testing.TB, gitDir string) []Oid {
	t.Helper()
	out := git(t, gitDir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
	var ids []Oid
	for _, l := range strings.Fields(out) {
		ids = append(ids, mustOid(t, l))
	}
	return ids
}

// catBatch returns what `git cat-file --batch` prints for ids.
func catBatch(t testing.TB, gitDir string, ids []Oid) map[Oid]gitObject {
	t.Helper()
	var in bytes.Buffer
	for _, id := range ids {
		fmt.Fprintln(&in, id)
	}
	out := gitIn(t, gitDir, in.Bytes(), "cat-file", "--batch")
	br := bufio.NewReader(bytes.NewReader([]byte(out)))
	res := make(map[Oid]gitObject, len(ids))
	for range ids {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("cat-file --batch: %v", err)
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("cat-file --batch: unexpected line %q", line)
		}
		typ, err := parseType(f[1])
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, n+1)
		if _, err := io.ReadFull(br, data); err != nil {
			t.Fatal(err)
		}
		if data[n] != '\n' {
			t.Fatalf("cat-file --batch: object %s not followed by a newline", f[0])
		}
		res[mustOid(t, f[0])] = gitObject{typ, data[:n]}
	}
	return res
}

func mustOid(t testing.TB, s string) Oid {
	t.Helper()
	o, err := ParseOid(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// checkReadsLikeGit reads every id with r (Read, ReadVerified, ReadType,
// Has) and compares type and bytes with git's answer.
func checkReadsLikeGit(t testing.TB, r *Repo, want map[Oid]gitObject) {
	t.Helper()
	ids := make([]Oid, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
	for _, id := range ids {
		g := want[id]
		typ, data, err := r.Read(id)
		if err != nil {
			t.Fatalf("Read %s: %v", id, err)
		}
		if typ != g.typ || !bytes.Equal(data, g.data) {
			t.Fatalf("Read %s: got %s of %d bytes, git says %s of %d bytes", id, typ, len(data), g.typ, len(g.data))
		}
		typ, data, err = r.ReadVerified(id)
		if err != nil || typ != g.typ || !bytes.Equal(data, g.data) {
			t.Fatalf("ReadVerified %s: %v (type %s, %d bytes)", id, err, typ, len(data))
		}
		if data, err := r.ReadType(id, g.typ); err != nil || !bytes.Equal(data, g.data) {
			t.Fatalf("ReadType %s %s: %v", id, g.typ, err)
		}
		if !r.Has(id) {
			t.Fatalf("Has %s: false for a stored object", id)
		}
	}
}

// packFiles lists the names in the pack directory of gitDir.
func packFiles(t testing.TB, gitDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(gitDir, "objects", "pack"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// packBases returns the base paths of the packs (with an .idx) in gitDir.
func packBases(t testing.TB, gitDir string) []string {
	t.Helper()
	var bases []string
	for _, n := range packFiles(t, gitDir) {
		if strings.HasSuffix(n, ".idx") {
			bases = append(bases, filepath.Join(gitDir, "objects", "pack", strings.TrimSuffix(n, ".idx")))
		}
	}
	return bases
}

// noTempFiles fails if a temporary file of a writer is left in the pack
// directory.
func noTempFiles(t testing.TB, gitDir string) {
	t.Helper()
	for _, n := range packFiles(t, gitDir) {
		if strings.HasPrefix(n, "tmp_") || strings.Contains(n, ".tmp") {
			t.Errorf("temporary file left in the pack directory: %s", n)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(gitDir, "objects", tempDirName))
	for _, e := range ents {
		t.Errorf("temporary file left: %s", e.Name())
	}
}

// idxCount reads the object count of a v2 index from its fan-out table.
func idxCount(t testing.TB, base string) int {
	t.Helper()
	b, err := os.ReadFile(base + ".idx")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8+256*4 {
		t.Fatalf("%s.idx: too short", base)
	}
	return int(binary.BigEndian.Uint32(b[8+255*4:]))
}

// verifyPack runs `git verify-pack -v` on base and returns the ids it lists
// and how many of them are stored as deltas.
func verifyPack(t testing.TB, gitDir, base string) (ids []Oid, deltas int, maxDepth int) {
	t.Helper()
	out := git(t, gitDir, "verify-pack", "-v", base+".idx")
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || len(f[0]) != 40 {
			continue
		}
		ids = append(ids, mustOid(t, f[0]))
		if len(f) == 7 {
			deltas++
			if d, _ := strconv.Atoi(f[5]); d > maxDepth {
				maxDepth = d
			}
		}
	}
	if !strings.Contains(out, base+".pack: ok") {
		t.Fatalf("verify-pack %s: no ok line:\n%s", base, out)
	}
	return ids, deltas, maxDepth
}

// fsckStrict runs `git fsck --strict` and fails on any complaint.
func fsckStrict(t testing.TB, gitDir string) {
	t.Helper()
	cmd := exec.Command("git", "-C", gitDir, "fsck", "--strict", "--full", "--no-dangling", "--no-progress")
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git fsck --strict: %v\n%s", err, out)
	}
	// A bare repository's HEAD names a branch nobody creates here.
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.HasPrefix(l, "notice: HEAD points to an unborn branch") {
			t.Fatalf("git fsck --strict complained:\n%s", out)
		}
	}
}

// randomBytes returns n incompressible bytes.
func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// textBytes returns n bytes of compressible text from a seeded generator.
func textBytes(seed int64, n int) []byte {
	rng := mrand.New(mrand.NewSource(seed))
	words := []string{"alpha", "beta", "gamma", "delta", "pack", "tree", "commit", "blob", "\n"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[rng.Intn(len(words))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

// packEntry is an object encoded as a pack entry: its id and the entry's
// bytes (header and zlib stream), as a pack written now holds them.
type packEntry struct {
	id  Oid
	raw []byte
}

func encodeEntry(o Object) packEntry {
	var b bytes.Buffer
	writeObjectEntry(&b, o)
	return packEntry{id: o.ID, raw: b.Bytes()}
}

// blob makes a blob object.
func blob(s string) Object { return NewObject(TypeBlob, []byte(s)) }

// commitOver makes a commit object of tree with parents.
func commitOver(tree Oid, msg string, parents ...Oid) Object {
	c := Commit{
		Tree:      tree,
		Parents:   parents,
		Author:    Ident("Ada Author", "ada@example.com", 1700000000),
		Committer: Ident("Cy Committer", "cy@example.com", 1700000001),
		Message:   []byte(msg),
	}
	return NewObject(TypeCommit, EncodeCommit(c))
}

// reachable wraps objects in a tree and a commit so that a ref can hold
// them all, and returns the extra objects and the commit id.
func reachable(objs []Object) ([]Object, Oid) {
	var es []TreeEntry
	seen := map[Oid]bool{}
	for i, o := range objs {
		if o.Type != TypeBlob || seen[o.ID] {
			continue
		}
		seen[o.ID] = true
		es = append(es, TreeEntry{Mode: ModeFile, Name: fmt.Sprintf("f%05d", i), ID: o.ID})
	}
	tree := NewObject(TypeTree, EncodeTree(es))
	c := commitOver(tree.ID, "hold every blob\n")
	return []Object{tree, c}, c.ID
}
