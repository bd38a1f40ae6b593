package hooks_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/hooks"
)

func TestSplitAlternates(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"/srv/a.git/./objects", []string{"/srv/a.git/./objects"}},
		{"/a/objects:/b/objects", []string{"/a/objects", "/b/objects"}},
		// git C-quotes a path holding the separator, a quote or a byte
		// beyond ASCII.
		{`"/x:y/objects":/b`, []string{"/x:y/objects", "/b"}},
		{`"/t\"q"`, []string{`/t"q`}},
		{`"/caf\303\251"`, []string{"/café"}},
		{"", nil},
	} {
		got, err := hooks.SplitAlternates(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitAlternates(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := hooks.SplitAlternates(`"/open`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

// TestRunBadInput: input git would never send is refused with one line
// naming it, exit 2, and refuses the push.
func TestRunBadInput(t *testing.T) {
	r := newRemote(t)
	env := baseEnv(r.root, "BERNSTEIN_HOME="+r.home)
	for _, tc := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"pre-receive"}, "garbage\n", `bernstein guard: input line 1: want "<old> <new> <ref>", got "garbage"; push refused`},
		{[]string{"pre-receive"}, "0000 1111 refs/bernstein/journal/T-1\n", "bernstein guard: input line 1: "},
		{[]string{"pre-push", "origin", "file:///x"}, "refs/heads/main abc\n", "bernstein pre-push: input line 1: want"},
		{[]string{"pre-commit"}, "", `bernstein hooks run: unknown hook "pre-commit"`},
	} {
		out, code := run(t, r.dir, env, tc.stdin, cliBin, append([]string{"hooks", "run"}, tc.args...)...)
		if code != 2 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("hooks run %v with %q: exit %d\n%s\nwant exit 2 and one line with %q", tc.args, tc.stdin, code, out, tc.want)
		}
	}
}
