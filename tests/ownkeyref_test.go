package tests

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOwnKeyRefRepairedByInit: the writer's own key ref forged with plain
// git before it was ever pushed (its loose file garbage, a blob, a missing
// object, a commit that carries no record) does not make `bernstein init`
// fail: init writes the key record again over it, and push then sends it,
// so the key is published after all.
func TestOwnKeyRefRepairedByInit(t *testing.T) {
	forgeries := []struct {
		name  string
		forge func(f *fixture, ref string)
	}{
		{"garbage", func(f *fixture, ref string) { garbleLoose(f, ref) }},
		{"blob", func(f *fixture, ref string) { f.git("update-ref", ref, f.blob("not a key")) }},
		{"missing", func(f *fixture, ref string) { writeLoose(f, ref, strings.Repeat("7", 40)+"\n") }},
		{"commit without a record", func(f *fixture, ref string) {
			o := strings.TrimSpace(f.git("-c", "user.name=mallory", "-c", "user.email=mallory@bernstein", "commit-tree", "-m", "not a record", f.rev(ref+"^{tree}")))
			f.git("update-ref", ref, o)
		}},
	}
	for _, fg := range forgeries {
		t.Run(strings.ReplaceAll(fg.name, " ", "_"), func(t *testing.T) {
			f, _ := unreadableTaskFixture(t)
			ref := f.writerRef("test-writer")
			pub := f.git("show", ref+":test-writer.pub")
			fg.forge(f, ref)
			auditNames(t, f, ref, true)

			out, errOut, code := f.cli("", "init", "--writer", "test-writer", "--output-json")
			if code != 0 {
				t.Fatalf("init over a forged key ref: exit %d\n%s%s", code, out, errOut)
			}
			var res struct {
				Published bool `json:"key_published"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil || !res.Published {
				t.Fatalf("init: %+v %v\n%s", res, err, out)
			}
			if got := f.git("show", ref+":test-writer.pub"); got != pub {
				t.Fatalf("%s publishes %q after init, want %q", ref, got, pub)
			}
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify after init: exit %d\n%s%s", code, out, errOut)
			}
			if out, errOut, code := f.cli("", "keys", "list"); code != 0 || strings.Contains(errOut, ref) {
				t.Fatalf("keys list after init: exit %d\n%s%s", code, out, errOut)
			}
			// Push publishes it.
			bare := filepath.Join(t.TempDir(), "remote.git")
			if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			f.git("remote", "add", "origin", bare)
			if out, errOut, code := f.cli("", "push", "origin"); code != 0 {
				t.Fatalf("push: exit %d %s%s", code, out, errOut)
			}
			got, err := exec.Command("git", "-C", bare, "show", ref+":test-writer.pub").Output()
			if err != nil || string(got) != pub {
				t.Fatalf("the remote's %s publishes %q (%v), want %q", ref, got, err, pub)
			}
		})
	}
}
