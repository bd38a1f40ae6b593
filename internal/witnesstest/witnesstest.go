// Package witnesstest runs litewitness (filippo.io/torchwood, a tlog-witness
// we did not write) on 127.0.0.1 for tests: its key in a real ssh-agent, its
// logs registered with witnessctl.
package witnesstest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// startTimeout bounds each start-up step; generous for a loaded machine.
const startTimeout = 2 * time.Minute

// Name is the name litewitness signs with unless StartNamed says otherwise.
const Name = "witness.bernstein.test/w1"

// Witness is one running litewitness.
type Witness struct {
	url, vkey, db string
	bin           string
	agent, server *proc
	stopOnce      sync.Once
}

// URL is the witness's submission prefix, http://127.0.0.1:PORT.
func (w *Witness) URL() string { return w.url }

// VerifierKey is the witness's cosignature verifier key, as litewitness
// printed it on start-up.
func (w *Witness) VerifierKey() string { return w.vkey }

// Start runs a litewitness named Name; t.Cleanup stops it.
func Start(t testing.TB) *Witness { return StartNamed(t, Name) }

// StartNamed runs a litewitness signing as name; t.Cleanup stops it.
func StartNamed(t testing.TB, name string) *Witness {
	t.Helper()
	bin := buildTools(t)
	dir := t.TempDir()
	w := &Witness{bin: bin, db: filepath.Join(dir, "litewitness.db")}
	t.Cleanup(w.Stop)
	sock, fingerprint := w.startAgent(t, dir)
	var lastErr error
	for range 5 { // a port taken between reserving and binding: try another
		if lastErr = w.startServer(t, name, sock, fingerprint); lastErr == nil {
			return w
		}
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("witnesstest: starting litewitness: %v", lastErr)
	return nil
}

// AddLog registers a log with the witness: its origin, and the verifier key
// (signed-note vkey) its checkpoints are signed with.
func (w *Witness) AddLog(t testing.TB, origin, vkey string) {
	t.Helper()
	w.ctl(t, "add-log", "-db", w.db, "-origin", origin)
	w.AddKey(t, origin, vkey)
}

// AddKey adds one more verifier key for a registered log.
func (w *Witness) AddKey(t testing.TB, origin, vkey string) {
	t.Helper()
	w.ctl(t, "add-key", "-db", w.db, "-origin", origin, "-key", vkey)
}

func (w *Witness) ctl(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(w.bin, "witnessctl"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("witnesstest: witnessctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Stop ends litewitness and its ssh-agent; it is safe to call twice.
func (w *Witness) Stop() {
	w.stopOnce.Do(func() {
		w.server.stop()
		w.agent.stop()
	})
}

// startAgent runs a dedicated ssh-agent in the foreground and loads a fresh
// Ed25519 key into it with ssh-add. It returns the socket and the key's
// SHA256 fingerprint.
func (w *Witness) startAgent(t testing.TB, dir string) (string, string) {
	t.Helper()
	// A unix socket path is limited to about 100 bytes; t.TempDir may be longer.
	sockDir, err := os.MkdirTemp("", "wt")
	if err != nil {
		t.Fatalf("witnesstest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "agent")
	ready := make(chan string, 1)
	w.agent, err = startProc(exec.Command("ssh-agent", "-D", "-a", sock), func(line string) {
		if strings.HasPrefix(line, "SSH_AUTH_SOCK=") {
			select {
			case ready <- line:
			default:
			}
		}
	})
	if err != nil {
		t.Fatalf("witnesstest: ssh-agent: %v", err)
	}
	if _, err := await(w.agent, ready, startTimeout); err != nil {
		t.Fatalf("witnesstest: ssh-agent did not announce its socket: %v", err)
	}
	keyFile, fingerprint := writeKey(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	add := exec.CommandContext(ctx, "ssh-add", keyFile)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("witnesstest: ssh-add: %v\n%s", err, out)
	}
	return sock, fingerprint
}

func writeKey(t testing.TB, dir string) (string, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("witnesstest: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "litewitness")
	if err != nil {
		t.Fatalf("witnesstest: %v", err)
	}
	path := filepath.Join(dir, "witness_key")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatalf("witnesstest: %v", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatalf("witnesstest: %v", err)
	}
	return path, ssh.FingerprintSHA256(sshPub)
}

// startServer runs litewitness on a reserved loopback port. It is ready when
// it has logged its verifier key and the port accepts a connection; an exit
// before that is an error carrying its output.
func (w *Witness) startServer(t testing.TB, name, sock, fingerprint string) error {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	vkey := make(chan string, 1)
	cmd := exec.Command(filepath.Join(w.bin, "litewitness"), "-db", w.db, "-name", name,
		"-ssh-agent", sock, "-key", fingerprint, "-listen", addr)
	p, err := startProc(cmd, func(line string) {
		if v, ok := logField(line, "verifier key", "vkey"); ok {
			select {
			case vkey <- v:
			default:
			}
		}
	})
	if err != nil {
		return err
	}
	if w.vkey, err = await(p, vkey, startTimeout); err != nil {
		p.stop()
		return fmt.Errorf("no verifier key logged: %w", err)
	}
	if err := p.awaitListening(addr, startTimeout); err != nil {
		p.stop()
		return err
	}
	w.server, w.url = p, "http://"+addr
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("reserving a port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// logField finds key=value in a log/slog text line whose msg is msg.
func logField(line, msg, key string) (string, bool) {
	if !strings.Contains(line, `msg="`+msg+`"`) {
		return "", false
	}
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}

// build holds, once built, the directory of litewitness and witnessctl.
var build struct {
	once sync.Once
	dir  string
	err  error
}

// buildTools builds litewitness and witnessctl (go.mod's tool directives)
// once per test process, into a directory of the system's temporary
// directory named by the toolchain and the module's requirements, so that
// later test processes reuse them.
func buildTools(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = buildCached()
	})
	if build.err != nil {
		t.Fatalf("witnesstest: %v", build.err)
	}
	return build.dir
}

func buildCached() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	h := sha256.New()
	h.Write([]byte(runtime.Version() + "\n"))
	for _, f := range []string{gomod, filepath.Join(filepath.Dir(gomod), "go.sum")} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	parent := filepath.Join(os.TempDir(), "bernstein-witnesstest")
	dir := filepath.Join(parent, hex.EncodeToString(h.Sum(nil))[:16])
	if built(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp+string(os.PathSeparator),
		"filippo.io/torchwood/cmd/litewitness", "filippo.io/torchwood/cmd/witnessctl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building litewitness and witnessctl: %v\n%s", err, out)
	}
	// Another test process may have put the same binaries in place first.
	if err := os.Rename(tmp, dir); err != nil && !built(dir) {
		return "", err
	}
	return dir, nil
}

func built(dir string) bool {
	for _, name := range []string{"litewitness", "witnessctl"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}
