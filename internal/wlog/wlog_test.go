package wlog_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/storetest"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/internal/wlog"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// logRepo is a repository whose writer's spine holds n journal seals.
func logRepo(t *testing.T, n int) *storetest.Repo {
	t.Helper()
	r := storetest.New(t)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("T-%d", i)
		if err := r.CreateTask(id, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Claim(id, "agent"); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
			if err := r.Transition(id, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// spineRoot is the RFC 6962 tree hash of the spine, computed from what
// plain git shows: each entry's record (the last line of its commit
// message), its sha256, hashed as a leaf (0x00 prefix), and the tree by
// the RFC's recursive definition.
func spineRoot(t *testing.T, dir, ref string, n int) [32]byte {
	t.Helper()
	var leaves [][32]byte
	for _, msg := range strings.Split(git(t, dir, "log", "--reverse", "--format=%B%x00", ref), "\x00") {
		msg = strings.TrimSpace(msg)
		if msg == "" {
			continue
		}
		lines := strings.Split(msg, "\n")
		h := sha256.Sum256([]byte(lines[len(lines)-1]))
		leaves = append(leaves, sha256.Sum256(append([]byte{0}, h[:]...)))
	}
	if len(leaves) < n {
		t.Fatalf("git shows %d spine entries, want at least %d", len(leaves), n)
	}
	return mth(leaves[:n])
}

func mth(l [][32]byte) [32]byte {
	if len(l) == 1 {
		return l[0]
	}
	k := 1
	for k*2 < len(l) {
		k *= 2
	}
	a, b := mth(l[:k]), mth(l[k:])
	return sha256.Sum256(append(append([]byte{1}, a[:]...), b[:]...))
}

func identity(t *testing.T, r *storetest.Repo) *keys.Identity {
	id, err := r.Core.Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTreeIsTheSpine: the tree's root at every size is the RFC 6962 hash
// of the spine's entries as git shows them; a cached tree extends to the
// same roots, hashing only the new entries.
func TestTreeIsTheSpine(t *testing.T) {
	r := logRepo(t, 3)
	head, _ := r.Core.Refs.ReadOptional(refs.Spine("test-writer"))
	tree, err := wlog.Build(r.Core.Objects, head)
	if err != nil {
		t.Fatal(err)
	}
	if tree.Size != 3 {
		t.Fatalf("size %d, want 3 (one seal per task)", tree.Size)
	}
	for n := int64(1); n <= tree.Size; n++ {
		got, _ := tree.Root(n)
		if want := spineRoot(t, r.Dir, refs.Spine("test-writer"), int(n)); got != tlog.Hash(want) {
			t.Fatalf("root at %d: %s, want %x", n, got, want)
		}
	}
	cache := wlog.Cache{Dir: t.TempDir()}
	if err := cache.Save(r.Core.Objects, "test-writer", tree, 2); err != nil {
		t.Fatal(err)
	}
	more := logRepoMore(t, r, 2)
	t2, err := cache.Load(r.Core.Objects, "test-writer", more)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := t2.Root(t2.Size)
	if want := spineRoot(t, r.Dir, refs.Spine("test-writer"), 5); t2.Size != 5 || got != tlog.Hash(want) || t2.Hashed != 3 {
		t.Fatalf("from the cache: size %d hashed %d root %s, want 5, 3, %x", t2.Size, t2.Hashed, got, want)
	}
}

func logRepoMore(t *testing.T, r *storetest.Repo, n int) gitstore.Oid {
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("U-%d", i)
		if err := r.CreateTask(id, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Claim(id, "agent"); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
			if err := r.Transition(id, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	head, _ := r.Core.Refs.ReadOptional(refs.Spine("test-writer"))
	return head
}

// TestCheckpointIsASignedNote: the checkpoint verifies with x/mod's own
// note verifier built from 'witness log”s verifier key, and says the
// origin, size and root.
func TestCheckpointIsASignedNote(t *testing.T) {
	r := logRepo(t, 2)
	id := identity(t, r)
	origin := wlog.Origin(r.Core.IdentityID(), id.Writer)
	s, err := wlog.NewSigner(origin, id)
	if err != nil {
		t.Fatal(err)
	}
	root := tlog.Hash(spineRoot(t, r.Dir, refs.Spine("test-writer"), 2))
	signed, err := wlog.Sign(origin, 2, root, s)
	if err != nil {
		t.Fatal(err)
	}
	vk, _ := wlog.VerifierKey(origin, id.PublicKey())
	v, err := note.NewVerifier(vk)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		t.Fatalf("x/mod's note.Open: %v", err)
	}
	want := fmt.Sprintf("%s\n2\n%s\n", origin, root)
	if n.Text != want {
		t.Fatalf("checkpoint text %q, want %q", n.Text, want)
	}
}

// commitCheckpoint writes signed as the writer's checkpoint of size.
func commitCheckpoint(t *testing.T, r *storetest.Repo, size int64, signed []byte) gitstore.Oid {
	t.Helper()
	if _, err := r.Writer.Submit(func(tx *txn.Tx) (any, error) { return nil, tx.LogCheckpoint(size, signed) }); err != nil {
		t.Fatal(err)
	}
	h, _ := r.Core.Refs.ReadOptional(refs.Checkpoints("test-writer"))
	return h
}

func checker(r *storetest.Repo, home string) *wlog.Checker {
	return &wlog.Checker{Objs: r.Core.Objects, Host: wlog.Host{Home: home, ID: r.Core.IdentityID()}, Config: &wlog.Config{}, Need: 1}
}

func signWith(t *testing.T, origin string, size int64, root tlog.Hash) []byte {
	t.Helper()
	sk, _, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(sk)
	if err != nil {
		t.Fatal(err)
	}
	b, err := wlog.Sign(origin, size, root, s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForgedCheckpoints: a checkpoint another key signed, one whose root
// is not the spine's, and one whose commit names another size than its
// signed note are refused as forged; the writer's own of its spine is not.
func TestForgedCheckpoints(t *testing.T) {
	r := logRepo(t, 3)
	id := identity(t, r)
	origin := wlog.Origin(r.Core.IdentityID(), id.Writer)
	spine, _ := r.Core.Refs.ReadOptional(refs.Spine("test-writer"))
	root := tlog.Hash(spineRoot(t, r.Dir, refs.Spine("test-writer"), 3))
	s, _ := wlog.NewSigner(origin, id)
	good, _ := wlog.Sign(origin, 3, root, s)
	pubs := []ssh.PublicKey{id.PublicKey()}
	wrongRoot := root
	wrongRoot[0] ^= 1
	bad, _ := wlog.Sign(origin, 3, wrongRoot, s)
	for _, c := range []struct {
		name   string
		signed []byte
		size   int64 // what the checkpoint commit's record says
		want   string
	}{
		{"the writer's", good, 3, ""},
		{"another key's", signWith(t, origin, 3, root), 3, "not signed by the writer's key"},
		{"another root", bad, 3, "does not match the checkpoint's root"},
		{"a commit that says another size", good, 2, "its commit says writer test-writer and 2 entries"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r2 := storetest.Open(t, r.Dir, r.Home)
			cp := commitCheckpoint(t, r2, c.size, c.signed)
			st, err := checker(r2, t.TempDir()).Check(context.Background(), "test-writer", pubs, spine, cp)
			if c.want == "" {
				if err != nil || st.Size != 3 || st.State != wlog.StateNotCosigned {
					t.Fatalf("the writer's own checkpoint: %+v, %v", st, err)
				}
				return
			}
			var te *wlog.TamperedError
			if !errors.As(err, &te) || te.Kind != "forged" || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %+v, %v; want forged: %s", st, err, c.want)
			}
		})
	}
}

// TestRollbackAndForkAgainstMemory: a log smaller than the cosigned
// checkpoint this host remembers is rolled back; one whose prefix hashes
// otherwise forked; a log that extends it is fine.
func TestRollbackAndForkAgainstMemory(t *testing.T) {
	r := logRepo(t, 3)
	id := identity(t, r)
	origin := wlog.Origin(r.Core.IdentityID(), id.Writer)
	s, _ := wlog.NewSigner(origin, id)
	pubs := []ssh.PublicKey{id.PublicKey()}
	spine, _ := r.Core.Refs.ReadOptional(refs.Spine("test-writer"))
	back := gitstore.Oid{}
	back, _ = gitstore.ParseOid(git(t, r.Dir, "rev-parse", refs.Spine("test-writer")+"~1"))
	root3 := tlog.Hash(spineRoot(t, r.Dir, refs.Spine("test-writer"), 3))
	seen3, _ := wlog.Sign(origin, 3, root3, s)
	other := root3
	other[5] ^= 1
	seenOther, _ := wlog.Sign(origin, 2, other, s)
	for _, c := range []struct {
		name  string
		seen  []byte
		spine gitstore.Oid
		want  string
	}{
		{"extends", seen3, spine, ""},
		{"rolled back", seen3, back, "rolled back"},
		{"forked", seenOther, spine, "forked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			ck := checker(r, home)
			if err := ck.Host.Remember("test-writer", c.seen); err != nil {
				t.Fatal(err)
			}
			st, err := ck.Check(context.Background(), "test-writer", pubs, c.spine, gitstore.Oid{})
			if c.want == "" {
				if err != nil || st.State != wlog.StateNoCheckpoint {
					t.Fatalf("%+v, %v", st, err)
				}
				return
			}
			if !errors.Is(err, wlog.ErrTampered) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "test-writer") {
				t.Fatalf("got %+v, %v; want %s", st, err, c.want)
			}
		})
	}
}

// TestPoisonedCacheIsNotTrusted: a cache whose hashes are not the spine's
// is rebuilt when a checkpoint's root does not match it, and the writer's
// true checkpoint still checks; the spine is not called tampered.
func TestPoisonedCacheIsNotTrusted(t *testing.T) {
	r := logRepo(t, 3)
	id := identity(t, r)
	origin := wlog.Origin(r.Core.IdentityID(), id.Writer)
	s, _ := wlog.NewSigner(origin, id)
	spine, _ := r.Core.Refs.ReadOptional(refs.Spine("test-writer"))
	dir := t.TempDir()
	tree, _ := wlog.Build(r.Core.Objects, spine)
	cache := wlog.Cache{Dir: dir}
	if err := cache.Save(r.Core.Objects, "test-writer", tree, 3); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "test-writer"))
	b[len(b)-1] ^= 0xff // the last stored hash: the root at 3
	os.WriteFile(filepath.Join(dir, "test-writer"), b, 0o600)
	root := tlog.Hash(spineRoot(t, r.Dir, refs.Spine("test-writer"), 3))
	signed, _ := wlog.Sign(origin, 3, root, s)
	cp := commitCheckpoint(t, r, 3, signed)
	ck := checker(r, t.TempDir())
	ck.Cache = cache
	if _, err := ck.Check(context.Background(), "test-writer", []ssh.PublicKey{id.PublicKey()}, spine, cp); err != nil {
		t.Fatalf("a poisoned cache made a true checkpoint fail: %v", err)
	}
}

// TestWitnessConfigRefusesBadInput: a bad name, URL or key is refused and
// nothing is written.
func TestWitnessConfigRefusesBadInput(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	goodKey := cosigKey("w.example", pub)
	noteKey, _ := note.NewEd25519VerifierKey("w.example", pub)
	h := wlog.Host{Home: t.TempDir(), ID: "0123"}
	for _, w := range []wlog.WitnessConfig{
		{Name: "-x", URL: "http://127.0.0.1:1", Key: goodKey},
		{Name: "x", URL: "ftp://h", Key: goodKey},
		{Name: "x", URL: "http://u:p@h", Key: goodKey},
		{Name: "x", URL: "http://h", Key: "w.example+00000000+AAAA"},
		{Name: "x", URL: "http://h", Key: goodKey[:len(goodKey)-4] + "AAAA"},
		{Name: "x", URL: "http://h", Key: noteKey}, // a log's key, not a witness's
	} {
		if err := w.Check(); err == nil {
			t.Errorf("%+v: accepted", w)
		}
	}
	if err := (wlog.WitnessConfig{Name: "x", URL: "http://h", Key: goodKey}).Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.ConfigPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a config was written: %v", err)
	}
}

// TestTreeRefusesABrokenSpine: a spine commit appended with plain git that
// repeats the last entry (its seq is not the next) builds no tree.
func TestTreeRefusesABrokenSpine(t *testing.T) {
	r := logRepo(t, 2)
	ref := refs.Spine("test-writer")
	msg := git(t, r.Dir, "log", "-1", "--format=%B", ref)
	cmd := exec.Command("git", "-C", r.Dir, "commit-tree", "-p", ref, "-m", msg, "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := gitstore.ParseOid(strings.TrimSpace(string(out)))
	if _, err := wlog.Build(r.Core.Objects, id); err == nil || !strings.Contains(err.Error(), "seq 1 where seq 2 belongs") {
		t.Fatalf("a repeated entry: %v", err)
	}
}

// cosigKey is a cosignature/v1 verifier key as c2sp.org/signed-note
// spells it: name, the first 4 bytes of sha256(name, newline, 0x04, key)
// in hex, base64 of 0x04 and the key.
func cosigKey(name string, pub ed25519.PublicKey) string {
	raw := append([]byte{4}, pub...)
	h := sha256.Sum256(append([]byte(name+"\n"), raw...))
	return fmt.Sprintf("%s+%x+%s", name, h[:4], base64.StdEncoding.EncodeToString(raw))
}
