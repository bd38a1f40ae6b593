package ident

import (
	"math/rand"
	"regexp"
	"testing"
)

// The patterns of docs/format.md (Limits) and the writer and agent names, as regular
// expressions: Match must agree with them on every input.
var cases = []struct {
	re    *regexp.Regexp
	max   int
	extra string
	lower bool
}{
	{regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`), 128, "_.:-", false},
	{regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`), 128, "_.-", false},
	{regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`), 64, "_.-", false},
	{regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,127}$`), 128, "_.@:+-", false},
	{regexp.MustCompile(`^[a-z0-9-]{1,64}$`), 64, "-", true},
}

func check(t testing.TB, s string) {
	for i, c := range cases {
		if got, want := Match(s, c.max, c.extra, c.lower), c.re.MatchString(s); got != want {
			t.Fatalf("case %d, %q: Match says %v, the pattern %v", i, s, got, want)
		}
	}
}

func TestMatchAgreesWithPatterns(t *testing.T) {
	alphabet := "aZ09_.:-@+/ \x00\n\xc3\xa9A"
	rng := rand.New(rand.NewSource(1))
	for _, s := range []string{"", "a", "-a", ".a", "a-", "A", "a..b", string(make([]byte, 129))} {
		check(t, s)
	}
	for i := 0; i < 200000; i++ {
		n := rng.Intn(140)
		b := make([]byte, n)
		for j := range b {
			b[j] = alphabet[rng.Intn(len(alphabet))]
		}
		check(t, string(b))
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("T-1:x")
	f.Fuzz(func(t *testing.T, s string) { check(t, s) })
}
