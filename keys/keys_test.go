package keys

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/refs"
)

func newTestIdentity(t *testing.T, writer string) *Identity {
	t.Helper()
	id, created, err := Create(filepath.Join(t.TempDir(), "home"), writer)
	if err != nil || !created {
		t.Fatalf("Create: %v (created=%v)", err, created)
	}
	return id
}

func TestCreateWritesPrivateFiles(t *testing.T) {
	home := filepath.Join(t.TempDir(), "state", "bernstein")
	id, created, err := Create(home, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if !created || id.Writer != "host-a" || id.Home != home {
		t.Fatalf("Create = %+v, created=%v", id, created)
	}
	for _, f := range []string{"signing.pem", "hmac.key", "writer"} {
		fi, err := os.Stat(filepath.Join(home, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
			t.Errorf("%s has mode %v, want -rw-------", f, fi.Mode())
		}
	}
	if fi, err := os.Stat(home); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("home mode %v, %v; want 0700", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(home)
	if len(entries) != 3 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("home holds %v, want exactly the three identity files", names)
	}
	if w, _ := os.ReadFile(filepath.Join(home, "writer")); string(w) != "host-a\n" {
		t.Errorf("writer file %q", w)
	}
	if pem, _ := os.ReadFile(filepath.Join(home, "signing.pem")); !bytes.HasPrefix(pem, []byte("-----BEGIN PRIVATE KEY-----\n")) {
		t.Errorf("signing.pem is not a PKCS#8 PEM key: %.40q", pem)
	}
	if !strings.HasPrefix(id.AuthorizedKey(), "ssh-ed25519 AAAA") || strings.ContainsAny(id.AuthorizedKey(), "\n") {
		t.Errorf("AuthorizedKey = %q", id.AuthorizedKey())
	}

	// A second Create loads the same identity.
	again, created, err := Create(home, "")
	if err != nil || created || again.Writer != "host-a" || again.AuthorizedKey() != id.AuthorizedKey() {
		t.Fatalf("second Create = %+v, %v, %v", again, created, err)
	}
	if again.MAC([]byte("x")) != id.MAC([]byte("x")) {
		t.Error("second Create has another HMAC key")
	}
	same, created, err := Create(home, "host-a")
	if err != nil || created || same.AuthorizedKey() != id.AuthorizedKey() {
		t.Fatalf("Create with the same writer = %v, %v", created, err)
	}
	if _, _, err := Create(home, "host-b"); err == nil || !strings.Contains(err.Error(), `"host-a"`) {
		t.Errorf("Create with another writer = %v, want a refusal naming host-a", err)
	}
	loaded, err := Load(home)
	if err != nil || loaded.Writer != "host-a" || loaded.AuthorizedKey() != id.AuthorizedKey() {
		t.Fatalf("Load = %+v, %v", loaded, err)
	}
}

func TestCreateRefusesBadWriter(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	for _, w := range []string{"Host_A", "a b", "../x", strings.Repeat("w", 65)} {
		if _, _, err := Create(home, w); err == nil {
			t.Errorf("Create(%q) accepted", w)
		}
	}
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Create left %s behind (%v)", home, err)
	}
}

func TestCreateDefaultWriter(t *testing.T) {
	id := newTestIdentity(t, "")
	if err := refs.ValidateWriter(id.Writer); err != nil {
		t.Errorf("default writer %q: %v", id.Writer, err)
	}
	a, b := DefaultWriter(), DefaultWriter()
	if refs.ValidateWriter(a) != nil || a == b {
		t.Errorf("DefaultWriter = %q, %q: want valid and distinct", a, b)
	}
}

func TestLoadNeverCreates(t *testing.T) {
	home := filepath.Join(t.TempDir(), "missing", "bernstein")
	id, err := Load(home)
	if !errors.Is(err, ErrNoIdentity) || id != nil {
		t.Fatalf("Load(missing) = %v, %v; want ErrNoIdentity", id, err)
	}
	if _, err := os.Stat(filepath.Dir(home)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load created %s", filepath.Dir(home))
	}
	empty := t.TempDir()
	if _, err := Load(empty); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("Load(empty dir) = %v", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("Load wrote into an empty home: %v", entries)
	}
}

func TestLoadRefusals(t *testing.T) {
	fresh := func() string {
		home := filepath.Join(t.TempDir(), "h")
		if _, _, err := Create(home, "w"); err != nil {
			t.Fatal(err)
		}
		return home
	}
	for _, f := range []string{"signing.pem", "hmac.key"} {
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
			home := fresh()
			if err := os.Chmod(filepath.Join(home, f), mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(home)
			if err == nil || !strings.Contains(err.Error(), "chmod 600") || !strings.Contains(err.Error(), f) {
				t.Errorf("Load with %s mode %o = %v, want a refusal naming the file", f, mode, err)
			}
			if _, _, err := Create(home, "w"); err == nil {
				t.Errorf("Create over %s mode %o accepted the identity", f, mode)
			}
		}
	}
	corrupt := map[string]struct{ file, content string }{
		"bad writer":     {"writer", "Not Valid\n"},
		"not PEM":        {"signing.pem", "hello"},
		"wrong PEM type": {"signing.pem", "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"},
		"bad PKCS8":      {"signing.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"},
		"short hmac":     {"hmac.key", "00ff\n"},
		"non-hex hmac":   {"hmac.key", strings.Repeat("zz", 32) + "\n"},
	}
	for name, c := range corrupt {
		home := fresh()
		if err := os.WriteFile(filepath.Join(home, c.file), []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(home); err == nil || errors.Is(err, ErrNoIdentity) {
			t.Errorf("%s: Load = %v, want a refusal", name, err)
		}
	}
	home := fresh()
	os.Remove(filepath.Join(home, "hmac.key"))
	if _, err := Load(home); err == nil || errors.Is(err, ErrNoIdentity) {
		t.Errorf("missing hmac.key: Load = %v", err)
	}
}

func TestHome(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BERNSTEIN_HOME", dir)
	t.Setenv("XDG_STATE_HOME", "/elsewhere")
	if h, err := Home(); err != nil || h != dir {
		t.Errorf("Home with BERNSTEIN_HOME = %q, %v", h, err)
	}
	t.Chdir(dir)
	t.Setenv("BERNSTEIN_HOME", "rel")
	if h, err := Home(); err != nil || h != filepath.Join(dir, "rel") {
		t.Errorf("relative BERNSTEIN_HOME = %q, %v", h, err)
	}
	t.Setenv("BERNSTEIN_HOME", "")
	if h, err := Home(); err != nil || h != "/elsewhere/bernstein" {
		t.Errorf("Home with XDG_STATE_HOME = %q, %v", h, err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", dir)
	if h, err := Home(); err != nil || h != filepath.Join(dir, ".local", "state", "bernstein") {
		t.Errorf("Home fallback = %q, %v", h, err)
	}
}

func TestMAC(t *testing.T) {
	id := newTestIdentity(t, "w")
	data := []byte(`{"a":1}`)
	mac := id.MAC(data)
	raw, err := os.ReadFile(filepath.Join(id.Home, "hmac.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(key) != 32 {
		t.Fatalf("hmac.key: %v (%d bytes)", err, len(key))
	}
	m := hmac.New(sha256.New, key)
	m.Write(data)
	if want := hex.EncodeToString(m.Sum(nil)); mac != want {
		t.Fatalf("MAC = %s, HMAC-SHA256 under hmac.key = %s", mac, want)
	}
	if !id.CheckMAC(data, mac) {
		t.Error("CheckMAC refuses the right MAC")
	}
	flipped := []byte(mac)
	flipped[0] ^= 1
	for name, c := range map[string]struct {
		data []byte
		mac  string
	}{
		"other data":   {[]byte(`{"a":2}`), mac},
		"flipped mac":  {data, string(flipped)},
		"short mac":    {data, mac[:62]},
		"empty mac":    {data, ""},
		"non-hex mac":  {data, "zz" + mac[2:]},
		"other writer": {data, newTestIdentity(t, "w").MAC(data)},
	} {
		if id.CheckMAC(c.data, c.mac) {
			t.Errorf("%s: CheckMAC accepted", name)
		}
	}
}

func TestDetachedSignatures(t *testing.T) {
	id := newTestIdentity(t, "w")
	other := newTestIdentity(t, "v")
	data := []byte(`{"kind":"journal_seal"}`)
	sig, err := id.SignDetached(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(sig) != 64 {
		t.Errorf("ed25519 signature of %d bytes", len(sig))
	}
	if err := VerifyDetached(id.PublicKey(), data, sig); err != nil {
		t.Fatalf("VerifyDetached = %v", err)
	}
	if err := VerifyDetached(id.PublicKey(), []byte(`{"kind":"journal_seal "}`), sig); err == nil {
		t.Error("signature verifies over other data")
	}
	if err := VerifyDetached(other.PublicKey(), data, sig); err == nil {
		t.Error("signature verifies under another key")
	}
	bad := append([]byte(nil), sig...)
	bad[10] ^= 0x80
	if err := VerifyDetached(id.PublicKey(), data, bad); err == nil {
		t.Error("corrupted signature verifies")
	}
	if err := VerifyDetached(id.PublicKey(), data, sig[:63]); err == nil {
		t.Error("truncated signature verifies")
	}
	// The detached path and the commit path use one key.
	if pub, _, err := CommitSigner(mustSignCommit(t, id, data)); err != nil || !bytes.Equal(pub.Marshal(), id.PublicKey().Marshal()) {
		t.Errorf("CommitSigner = %v", err)
	}
}

func mustSignCommit(t *testing.T, id *Identity, payload []byte) []byte {
	t.Helper()
	sig, err := id.SignCommit(payload)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}
