// Package agenttest runs a real ssh-agent for tests and benchmarks, with
// keys on a SoftHSM token (generated with OpenSC's pkcs11-tool and loaded
// with `ssh-add -s`, as a hardware token's would be) or from key files.
// scripts/deps.sh installs softhsm2 and opensc.
package agenttest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SoftHSM is the PKCS#11 library of Debian's softhsm2.
const SoftHSM = "/usr/lib/softhsm/libsofthsm2.so"

// PIN is the user PIN of the tokens this package makes.
const PIN = "246810"

// Agent is one ssh-agent process with its own socket.
type Agent struct {
	Dir  string // its folder: socket, token store, askpass
	Sock string // SSH_AUTH_SOCK
	cmd  *exec.Cmd
	done chan error
}

// Missing names the tools a token-backed agent needs that the machine
// lacks, "" when none.
func Missing() string {
	var need []string
	for _, c := range []string{"ssh-agent", "ssh-add", "softhsm2-util", "pkcs11-tool"} {
		if _, err := exec.LookPath(c); err != nil {
			need = append(need, c)
		}
	}
	if _, err := os.Stat(SoftHSM); err != nil {
		need = append(need, SoftHSM)
	}
	return strings.Join(need, ", ")
}

// Start runs ssh-agent in the foreground on a socket in dir (created),
// and returns once the agent says it listens.
func Start(dir string) (*Agent, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tokens"), 0o700); err != nil {
		return nil, err
	}
	a := &Agent{Dir: dir, Sock: filepath.Join(dir, "agent.sock"), done: make(chan error, 1)}
	conf := fmt.Sprintf("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n", filepath.Join(dir, "tokens"))
	if err := os.WriteFile(a.conf(), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(a.askpass(), []byte("#!/bin/sh\necho "+PIN+"\n"), 0o700); err != nil {
		return nil, err
	}
	// -D: in the foreground, so the test owns the process; the provider
	// helper it starts for `ssh-add -s` inherits SOFTHSM2_CONF.
	a.cmd = exec.Command("ssh-agent", "-D", "-a", a.Sock)
	a.cmd.Env = a.Env()
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	a.cmd.Stderr = os.Stderr
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ssh-agent: %w", err)
	}
	// The agent prints SSH_AUTH_SOCK=...; once it is listening.
	sc := bufio.NewScanner(out)
	ready := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "SSH_AUTH_SOCK=") {
			ready = true
			break
		}
	}
	if !ready {
		a.cmd.Process.Kill()
		a.cmd.Wait()
		return nil, errors.New("ssh-agent ended before it listened")
	}
	go func() {
		for sc.Scan() {
		}
		a.done <- a.cmd.Wait()
	}()
	return a, nil
}

func (a *Agent) conf() string    { return filepath.Join(a.Dir, "softhsm2.conf") }
func (a *Agent) askpass() string { return filepath.Join(a.Dir, "askpass") }

// Env is the environment for programs that use this agent (and its token
// store): the process's own, with SSH_AUTH_SOCK and SOFTHSM2_CONF set.
func (a *Agent) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SSH_AUTH_SOCK=") && !strings.HasPrefix(kv, "SOFTHSM2_CONF=") &&
			!strings.HasPrefix(kv, "SSH_ASKPASS") && !strings.HasPrefix(kv, "DISPLAY=") {
			env = append(env, kv)
		}
	}
	return append(env, "SSH_AUTH_SOCK="+a.Sock, "SOFTHSM2_CONF="+a.conf(),
		"SSH_ASKPASS="+a.askpass(), "SSH_ASKPASS_REQUIRE=force", "DISPLAY=:0")
}

func (a *Agent) run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = a.Env()
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// AddTokenKey makes a SoftHSM token labelled label holding a new ECDSA
// P-256 key pair (OpenSSH loads only those from PKCS#11 here), loads the
// token into the agent with `ssh-add -s`, and returns the key's
// authorized-key line.
func (a *Agent) AddTokenKey(label string) (string, error) {
	if _, err := a.run("softhsm2-util", "--init-token", "--free", "--label", label, "--pin", PIN, "--so-pin", PIN+PIN); err != nil {
		return "", err
	}
	if _, err := a.run("pkcs11-tool", "--module", SoftHSM, "--token-label", label, "--login", "--pin", PIN,
		"--keypairgen", "--key-type", "EC:prime256v1", "--id", "01", "--label", label); err != nil {
		return "", err
	}
	before, _ := a.run("ssh-add", "-L")
	if _, err := a.run("ssh-add", "-s", SoftHSM); err != nil {
		return "", err
	}
	after, err := a.run("ssh-add", "-L")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(after, "\n") {
		if strings.HasPrefix(l, "ecdsa-sha2-nistp256 ") && !strings.Contains(before, l) {
			f := strings.Fields(l)
			return f[0] + " " + f[1], nil
		}
	}
	return "", fmt.Errorf("ssh-add -s %s added no ECDSA key: %s", SoftHSM, after)
}

// AddKeyFile generates an unencrypted key of type typ (ed25519, ecdsa) in
// the agent's folder, adds it to the agent and returns its public line.
func (a *Agent) AddKeyFile(name, typ string) (string, error) {
	path := filepath.Join(a.Dir, name)
	args := []string{"-q", "-t", typ, "-N", "", "-C", name, "-f", path}
	if typ == "ecdsa" {
		args = append(args, "-b", "256")
	}
	if _, err := a.run("ssh-keygen", args...); err != nil {
		return "", err
	}
	if _, err := a.run("ssh-add", path); err != nil {
		return "", err
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(pub))
	return f[0] + " " + f[1], nil
}

// Lock locks the agent with a password (`ssh-add -x`): it then lists no
// key and signs nothing until Unlock.
func (a *Agent) Lock() error {
	_, err := a.run("ssh-add", "-x")
	return err
}

// Unlock undoes Lock.
func (a *Agent) Unlock() error {
	_, err := a.run("ssh-add", "-X")
	return err
}

// Stop ends the agent and waits for it.
func (a *Agent) Stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	a.cmd.Process.Kill()
	<-a.done
	a.cmd = nil
}
