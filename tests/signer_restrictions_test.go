package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// TestAllowedSignersRestrictions: valid-after, valid-before and namespaces
// in an allowed_signers line mean what they mean to git, which checks them
// at the commit's committer date: `git verify-commit` is the oracle. A
// reader trusting the writer only through such a line verifies the rows
// exactly when git does, and `keys pin --from` keeps the restriction.
func TestAllowedSignersRestrictions(t *testing.T) {
	f := newFixture(t)
	f.withCommits()
	s := f.open()
	tok := f.claimed(s, "R-1", "agent")
	f.post(s, "R-1", "summary", "agent", tok, report("restricted"))
	s.Close()
	line := strings.TrimSpace(f.publishedSigners())
	principal, rest, _ := strings.Cut(line, " ")
	_, key, _ := strings.Cut(rest, " ") // drop namespaces="git"
	for _, c := range []struct {
		name, opts string
	}{
		{"expired", `namespaces="git",valid-before="20000101"`},
		{"not yet valid", `namespaces="git",valid-after="29990101"`},
		{"valid", `namespaces="git",valid-after="20000101",valid-before="29990101"`},
		{"another namespace", `namespaces="file"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			signers := filepath.Join(t.TempDir(), "allowed_signers")
			if err := os.WriteFile(signers, []byte(principal+" "+c.opts+" "+key+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("git", "-C", f.dir, "-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", refs.Journal("R-1")).CombinedOutput()
			gitSays := err == nil
			if c.name == "valid" && !gitSays {
				t.Fatalf("git verify-commit refuses the valid line: %s", out)
			}
			// A reader with no writer of its own, trusting only the file.
			reader := openWith(t, bernstein.Options{Repo: f.dir, Home: filepath.Join(t.TempDir(), "reader"), AllowedSigners: signers})
			info, err := reader.Task("R-1")
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Progress.Proof.State == "verified"; got != gitSays {
				t.Fatalf("git verify-commit says %v (%s), bernstein's proof %+v", gitSays, strings.TrimSpace(string(out)), info.Progress.Proof)
			}
			// keys pin --from keeps the line's restrictions.
			home := filepath.Join(t.TempDir(), "pinner")
			if c.name == "another namespace" {
				// A key not allowed for git's namespace is no key for a writer.
				if _, errOut, code := f.cliWith(home, "", "keys", "pin", "--from", signers, "test-writer"); code == 0 || !strings.Contains(errOut, "no key found") {
					t.Fatalf("keys pin --from a line for another namespace: exit %d %s", code, errOut)
				}
				return
			}
			if _, errOut, code := f.cliWith(home, "", "keys", "pin", "--from", signers, "test-writer"); code != 0 {
				t.Fatalf("keys pin --from: %s", errOut)
			}
			pinner := openWith(t, bernstein.Options{Repo: f.dir, Home: home})
			pins, err := os.ReadFile(pinner.PinFile())
			if err != nil {
				t.Fatal(err)
			}
			for _, opt := range strings.Split(c.opts, ",") {
				if !strings.Contains(string(pins), opt) {
					t.Fatalf("the pin file lost %s:\n%s", opt, pins)
				}
			}
			if info, err := pinner.Task("R-1"); err != nil || (info.Progress.Proof.State == "verified") != gitSays {
				t.Fatalf("with the key pinned from the line, git says %v, bernstein %+v %v", gitSays, info.Progress.Proof, err)
			}
		})
	}
}
