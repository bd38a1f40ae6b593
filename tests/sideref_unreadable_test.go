package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/refs"
)

// A key, checkpoint, anchor or fork ref that plain git points at what
// cannot be read as its kind blocks no reader and no writer, and audit
// verify, full and since a checkpoint, reports it as tampered naming the
// ref (docs/trust.md, Refs that cannot be read).
func TestUnreadableSideRefIsReported(t *testing.T) {
	forgeries := []struct {
		name  string
		forge func(f *fixture, ref string)
	}{
		{"blob", func(f *fixture, ref string) { f.git("update-ref", ref, f.blob("not a chain")) }},
		{"tree", func(f *fixture, ref string) { f.git("update-ref", ref, f.rev(refs.Ledger("A-1")+"^{tree}")) }},
		{"missing", func(f *fixture, ref string) { writeLoose(f, ref, strings.Repeat("7", 40)+"\n") }},
		{"garbage", func(f *fixture, ref string) { garbleLoose(f, ref) }},
		{"commit without a record", func(f *fixture, ref string) {
			o := strings.TrimSpace(f.git("-c", "user.name=mallory", "-c", "user.email=mallory@bernstein", "commit-tree", "-m", "not a record", f.rev(refs.Ledger("A-1")+"^{tree}")))
			f.git("update-ref", ref, o)
		}},
	}
	for _, kind := range []string{"writers", "checkpoints", "anchors", "forks"} {
		for _, fg := range forgeries {
			t.Run(kind+"/"+strings.ReplaceAll(fg.name, " ", "_"), func(t *testing.T) {
				f, tokA := unreadableTaskFixture(t)
				if out, errOut, code := f.cli("", "audit", "verify", "--checkpoint", "cp"); code != 0 {
					t.Fatalf("audit verify before: exit %d\n%s%s", code, out, errOut)
				}
				ref := map[string]string{
					"writers":     f.writerRef("test-writer"),
					"checkpoints": refs.Checkpoints("test-writer"),
					"anchors":     refs.Anchors("test-writer"),
					"forks":       refs.Fork("test-writer", "journal", "B-1", 0),
				}[kind]
				fg.forge(f, ref)
				for _, args := range [][]string{{"task", "list", "--strict"}, {"task", "show", "A-1"}, {"artifact", "list"}, {"artifact", "show", "A-1", "summary"}} {
					if out, errOut, code := f.cli("", args...); code != 0 {
						t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
					}
				}
				auditNames(t, f, ref, true)
				auditNames(t, f, ref, true, "--since", "cp")
				if out, errOut, code := f.cli("", "artifact", "post", "A-1", "more", "--type", "report", "--body", "# more",
					"--agent", "agent", "--claim-token", tokA); code != 0 {
					t.Fatalf("post: exit %d %s%s", code, out, errOut)
				}
			})
		}
	}
}

// writeLoose writes content as ref's loose file.
func writeLoose(f *fixture, ref, content string) {
	f.t.Helper()
	p := filepath.Join(f.dir, ".git", filepath.FromSlash(ref))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}
