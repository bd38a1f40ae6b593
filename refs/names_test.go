package refs

import (
	"math/rand"
	"os/exec"
	"strings"
	"testing"
)

func TestNamesValidateTaskID(t *testing.T) {
	good := []string{
		"a", "A", "0", "task-1", "proj:feature:42", "a:b", "a.b", "a_b", "a-", "a.", "a:", "a.lock",
		"1.2.3", "x:y.z-w_v", strings.Repeat("t", 128), "a" + strings.Repeat(":", 127),
	}
	for _, id := range good {
		if err := ValidateTaskID(id); err != nil {
			t.Errorf("ValidateTaskID(%q) = %v", id, err)
		}
	}
	bad := []string{
		"", "a..b", "..", "a..", "a/b", "/a", "a/", "a\x00b", "a\nb", "a\n", "\na", "a b", " a", "a\t",
		strings.Repeat("t", 129), ".a", "-a", ":a", "_a", "a~b", "a^b", "a?b", "a*b", "a[b", "a\\b",
		"a@{b", "@", "é", "a%3Ab", "a%b", "a\x7f", "a,b", "a;b", "a'b", "a\"b",
	}
	for _, id := range bad {
		err := ValidateTaskID(id)
		if err == nil {
			t.Errorf("ValidateTaskID(%q) accepted", id)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "task id") || strings.ContainsAny(msg, "\n\x00") {
			t.Errorf("ValidateTaskID(%q): message %q is not one clear line", id, msg)
		}
	}
	if err := ValidateTaskID("a..b"); err == nil || !strings.Contains(err.Error(), `".."`) {
		t.Errorf(`ValidateTaskID("a..b") = %v, want it to name ".."`, err)
	}
	if err := ValidateTaskID(strings.Repeat("t", 129)); err == nil || !strings.Contains(err.Error(), "129") {
		t.Errorf("129-byte id: %v, want the length named", err)
	}
}

func TestNamesValidateWriter(t *testing.T) {
	for _, w := range []string{"a", "host-1", "0", "-", "a-", strings.Repeat("w", 64), "abc-123-def"} {
		if err := ValidateWriter(w); err != nil {
			t.Errorf("ValidateWriter(%q) = %v", w, err)
		}
	}
	for _, w := range []string{"", "A", "host_1", "host.1", "a:b", "a/b", "a b", "é", "a\n", "a\x00", strings.Repeat("w", 65)} {
		err := ValidateWriter(w)
		if err == nil {
			t.Errorf("ValidateWriter(%q) accepted", w)
			continue
		}
		if strings.ContainsAny(err.Error(), "\n\x00") {
			t.Errorf("ValidateWriter(%q): message %q spans lines", w, err)
		}
	}
}

func TestNamesEscapeTask(t *testing.T) {
	cases := map[string]string{
		"a":           "a",
		"a:b":         "a%3Ab",
		"a-b":         "a-b",
		"a.":          "a%2E",
		"a.lock":      "a%2Elock",
		"a.lock.":     "a.lock%2E",
		"a:lock":      "a%3Alock",
		"a:.lock":     "a%3A%2Elock",
		"a.b.c":       "a.b.c",
		"a:.":         "a%3A%2E",
		"lock":        "lock",
		"x.locked":    "x.locked",
		"x.lock:":     "x.lock%3A",
		"p:feature.1": "p%3Afeature.1",
	}
	for id, want := range cases {
		if err := ValidateTaskID(id); err != nil {
			t.Fatalf("test id %q invalid: %v", id, err)
		}
		got := EscapeTask(id)
		if got != want {
			t.Errorf("EscapeTask(%q) = %q, want %q", id, got, want)
		}
		back, err := UnescapeTask(got)
		if err != nil || back != id {
			t.Errorf("UnescapeTask(%q) = %q, %v; want %q", got, back, err, id)
		}
		if Journal(id) != JournalPrefix+want || Ledger(id) != LedgerPrefix+want {
			t.Errorf("Journal/Ledger(%q) = %q, %q", id, Journal(id), Ledger(id))
		}
	}
	if Spine("w") != "refs/bernstein/spine/w" || Audit("w") != "refs/bernstein/audit/w" || Keys != "refs/bernstein/keys" {
		t.Error("writer ref names moved")
	}
}

func TestNamesEscapeIsInjectiveOnLookalikes(t *testing.T) {
	// a:b, a-b and the literal text of its escape must never share a ref.
	ids := []string{"a:b", "a-b", "a_b", "a.b", "a%3Ab", "a.", "a%2E", "a.lock", "a%2Elock", "a:lock", "a-lock", "a_lock"}
	seen := map[string]string{}
	for _, id := range ids {
		if ValidateTaskID(id) != nil {
			continue // a%3Ab and friends are not ids at all
		}
		c := EscapeTask(id)
		if prev, dup := seen[c]; dup {
			t.Errorf("%q and %q both escape to %q", prev, id, c)
		}
		seen[c] = id
	}
	if ValidateTaskID("a%3Ab") == nil {
		t.Error("a%3Ab is a valid task id: the escape would not be injective")
	}
	if len(seen) < 9 {
		t.Errorf("only %d distinct lookalike ids checked", len(seen))
	}
}

func TestNamesUnescapeRefusesNonCanonical(t *testing.T) {
	for _, c := range []string{
		"", "a%", "a%3a", "a%2e", "a%3A%", "a%41", "a%2Eb", // %2E only at the end
		"a%2E%2E", "a.lock", "a.", ".a", "a..b", "a/b", "%3Aa", "a%253A", "a%3A%3",
		strings.Repeat("t", 129), "a b",
	} {
		if id, err := UnescapeTask(c); err == nil {
			t.Errorf("UnescapeTask(%q) = %q, want an error", c, id)
		}
	}
}

// gitRefComponentOK is git's check_refname_component for one component
// (refs.c), the rules a task's ref component must meet.
func gitRefComponentOK(c string) bool {
	if c == "" || strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".") || strings.HasSuffix(c, ".lock") {
		return false
	}
	if strings.Contains(c, "..") || strings.Contains(c, "@{") {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if b < 0x20 || b == 0x7f || strings.IndexByte(" ~^:?*[\\/", b) >= 0 {
			return false
		}
	}
	return true
}

func gitCheckRefFormat(t *testing.T, ref string) bool {
	t.Helper()
	err := exec.Command("git", "check-ref-format", ref).Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("git check-ref-format: %v", err)
	}
	return err == nil
}

// TestNamesEscapedIDsAreGitRefs asks git itself about many escaped ids, and
// checks that gitRefComponentOK (used by the property tests) agrees with git.
func TestNamesEscapedIDsAreGitRefs(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	ids := []string{
		"a", "a:b", "a.", "a.lock", "a:lock", "a.lock.", "a:.", "x:", "T.1", "1.2.3.",
		"proj:feature:42", "a-", "a_", "A.LOCK", "lock.lock", "a.b.lock", "x" + strings.Repeat(":", 127),
		strings.Repeat("t", 128), strings.Repeat("a.", 64), strings.Repeat("a:", 61) + "a.lock",
	}
	r := rand.New(rand.NewSource(1))
	for len(ids) < 120 {
		ids = append(ids, randomTaskID(r))
	}
	for _, id := range ids {
		if err := ValidateTaskID(id); err != nil {
			t.Fatalf("generated id %q invalid: %v", id, err)
		}
		c := EscapeTask(id)
		if !gitCheckRefFormat(t, Journal(id)) || !gitCheckRefFormat(t, Ledger(id)) {
			t.Errorf("id %q escapes to %q, which git refuses as a ref", id, c)
		}
		if !gitRefComponentOK(c) {
			t.Errorf("gitRefComponentOK(%q) = false but git accepts it", c)
		}
	}
	// The Go port must refuse what git refuses, or the property tests prove nothing.
	for _, c := range []string{"a:b", "a.", "a.lock", ".a", "a..b", "a b", "a\x01", "a~", "a^", "a?", "a*", "a[", "a\\b", "a@{b", "a\x7f"} {
		if gitCheckRefFormat(t, JournalPrefix+c) {
			t.Errorf("git accepts component %q", c)
		}
		if gitRefComponentOK(c) {
			t.Errorf("gitRefComponentOK(%q) = true, git refuses it", c)
		}
	}
	if gitRefComponentOK("a/b") {
		t.Error(`gitRefComponentOK("a/b") = true`)
	}
}

const taskIDRest = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-"

// randomTaskID draws a valid task id biased toward ':' '.' and ".lock".
func randomTaskID(r *rand.Rand) string {
	for {
		n := 1 + r.Intn(128)
		if r.Intn(4) == 0 {
			n = 1 + r.Intn(8)
		}
		var b strings.Builder
		b.WriteByte(taskIDRest[r.Intn(62)])
		for b.Len() < n {
			switch r.Intn(6) {
			case 0:
				b.WriteByte(':')
			case 1:
				b.WriteByte('.')
			case 2:
				b.WriteString(".lock")
			default:
				b.WriteByte(taskIDRest[r.Intn(len(taskIDRest))])
			}
		}
		s := b.String()
		if len(s) > 128 {
			s = s[:128]
		}
		if ValidateTaskID(s) == nil {
			return s
		}
	}
}

func TestNamesEscapePropertyRandom(t *testing.T) {
	r := rand.New(rand.NewSource(42))
	byComponent := map[string]string{}
	for i := 0; i < 50000; i++ {
		id := randomTaskID(r)
		c := EscapeTask(id)
		if prev, ok := byComponent[c]; ok && prev != id {
			t.Fatalf("EscapeTask not injective: %q and %q -> %q", prev, id, c)
		}
		byComponent[c] = id
		back, err := UnescapeTask(c)
		if err != nil || back != id {
			t.Fatalf("UnescapeTask(EscapeTask(%q)) = %q, %v", id, back, err)
		}
		if !gitRefComponentOK(c) {
			t.Fatalf("EscapeTask(%q) = %q is not a git ref component", id, c)
		}
	}
	if len(byComponent) < 30000 {
		t.Fatalf("only %d distinct ids drawn", len(byComponent))
	}
}

func FuzzEscapeTask(f *testing.F) {
	for _, s := range []string{"a", "a:b", "a.", "a.lock", "a:.lock", "x.lock.", "a%3Ab", "a..b", "T-1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateTaskID(id) != nil {
			// Not an id: Unescape must not produce it from anything either.
			if got, err := UnescapeTask(id); err == nil && ValidateTaskID(got) != nil {
				t.Fatalf("UnescapeTask(%q) = %q, an invalid id", id, got)
			}
			return
		}
		c := EscapeTask(id)
		back, err := UnescapeTask(c)
		if err != nil || back != id {
			t.Fatalf("UnescapeTask(EscapeTask(%q) = %q) = %q, %v", id, c, back, err)
		}
		if !gitRefComponentOK(c) {
			t.Fatalf("EscapeTask(%q) = %q is not a valid git ref component", id, c)
		}
		// Any component that unescapes to id is exactly c (one ref per id).
		if alt := strings.ReplaceAll(id, ":", "%3A"); alt != c {
			if got, err := UnescapeTask(alt); err == nil {
				t.Fatalf("UnescapeTask(%q) = %q: a second component for %q", alt, got, id)
			}
		}
	})
}
