package witness_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"fmt"
	"net"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/bernstein/bernstein/internal/witness"
)

func TestParseWitnessNamesWhatIsWrong(t *testing.T) {
	good := otherKey(t, "witness.example/w1")
	_, ed25519Key, err := note.GenerateKey(rand.Reader, "witness.example/w1") // a log key, type 1
	if err != nil {
		t.Fatal(err)
	}
	name, hash, key := splitKey(good)
	wrongHash := name + "+00000000+" + key
	if hash == "00000000" {
		wrongHash = name + "+00000001+" + key
	}
	for _, tc := range []struct{ name, url, key, want string }{
		{"w1", "http://127.0.0.1:7380", good, ""},
		{"w1", "https://witness.example/prefix/", good, ""},
		{"", "http://127.0.0.1:7380", good, "witness name"},
		{"w 1", "http://127.0.0.1:7380", good, "witness name"},
		{"w1", "ftp://127.0.0.1", good, "bad URL"},
		{"w1", "http://", good, "no host"},
		{"w1", "127.0.0.1:7380", good, "bad URL"},
		{"w1", "http://127.0.0.1:7380/?q=1", good, "no query"},
		{"w1", "http://127.0.0.1:7380", "nonsense", "want name+hash+base64"},
		{"w1", "http://127.0.0.1:7380", name + "+" + hash + "+!!!", "not base64"},
		{"w1", "http://127.0.0.1:7380", ed25519Key, "unsupported algorithm 1"},
		{"w1", "http://127.0.0.1:7380", wrongHash, "does not match"},
	} {
		_, err := witness.ParseWitness(tc.name, tc.url, tc.key)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ParseWitness(%q, %q, %q): %v", tc.name, tc.url, tc.key, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ParseWitness(%q, %q, %q): %v, want an error saying %q", tc.name, tc.url, tc.key, err, tc.want)
		}
	}
}

func splitKey(k string) (string, string, string) {
	p := strings.SplitN(k, "+", 3)
	return p[0], p[1], p[2]
}

// Signature lines that carry text of their own do not make a cosignature of
// the checkpoint, even when they verify over checkpoint + that text.
func TestCosignatureLinesCannotSmuggleText(t *testing.T) {
	// formats' cosignature/v1 signer signs any note of three lines or more,
	// blank lines included, as a witness that misbehaved might.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const name = "witness.example/w1"
	s, err := fnote.NewSignerForCosignatureV1("PRIVATE+KEY+" + name + "+00000000+" +
		base64.StdEncoding.EncodeToString(append([]byte{4}, priv.Seed()...)))
	if err != nil {
		t.Fatal(err)
	}
	vkey := fmt.Sprintf("%s+%08x+%s", name, s.KeyHash(), base64.StdEncoding.EncodeToString(append([]byte{4}, pub...)))
	w, err := witness.ParseWitness("w1", "http://127.0.0.1:1", vkey)
	if err != nil {
		t.Fatal(err)
	}
	text := "example.test/log\n3\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"
	signed, err := note.Sign(&note.Note{Text: text + "\nextra\n"}, s)
	if err != nil {
		t.Fatal(err)
	}
	smuggled := signed[len(text)+1:] // "extra\n\n— witness.example/w1 ...\n"
	if _, err := witness.VerifyCosignature(w, []byte(text), smuggled); !errors.Is(err, witness.ErrBadCosignature) {
		t.Fatalf("signature lines carrying text: %v, want ErrBadCosignature", err)
	}
	// The same key's honest cosignature of the checkpoint verifies.
	honest, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := witness.VerifyCosignature(w, []byte(text), honest[len(text)+1:]); err != nil {
		t.Fatalf("honest cosignature: %v", err)
	}
}

// A witness that cannot be reached is named, with its URL, and a cancelled
// context ends the exchange.
func TestUnreachableWitnessIsNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	w, err := witness.ParseWitness("w9", "http://"+addr, otherKey(t, "witness.example/w9"))
	if err != nil {
		t.Fatal(err)
	}
	log := newMemLog(t, origin)
	log.appendLeaves(t, "a", 1)
	_, err = witness.AddCheckpoint(t.Context(), w, 0, nil, log.checkpoint(t))
	if err == nil || !strings.Contains(err.Error(), "witness w9 (http://"+addr+")") {
		t.Fatalf("unreachable witness: %v, want an error naming w9 and its URL", err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := witness.AddCheckpoint(cancelled, w, 0, nil, log.checkpoint(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v, want context.Canceled", err)
	}
}
