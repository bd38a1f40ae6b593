package keys

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// sshsig.Unarmor is the oracle for parseArmored: whatever the direct path
// accepts, the library accepts and reads the same way; whatever the library
// rejects, the direct path rejects.

func sameSignature(a, b *sshsig.Signature) error {
	switch {
	case a.Version != b.Version:
		return fmt.Errorf("version %d, %d", a.Version, b.Version)
	case !bytes.Equal(a.PublicKey.Marshal(), b.PublicKey.Marshal()):
		return fmt.Errorf("public key differs")
	case a.Namespace != b.Namespace:
		return fmt.Errorf("namespace %q, %q", a.Namespace, b.Namespace)
	case a.HashAlgorithm != b.HashAlgorithm:
		return fmt.Errorf("hash %q, %q", a.HashAlgorithm, b.HashAlgorithm)
	case a.Signature.Format != b.Signature.Format:
		return fmt.Errorf("format %q, %q", a.Signature.Format, b.Signature.Format)
	case !bytes.Equal(a.Signature.Blob, b.Signature.Blob):
		return fmt.Errorf("blob differs")
	case !bytes.Equal(a.Signature.Rest, b.Signature.Rest):
		return fmt.Errorf("rest differs")
	}
	return nil
}

// compareParsers checks parseArmored against sshsig.Unarmor on b and
// reports whether the direct path took it.
func compareParsers(t *testing.T, b []byte) bool {
	t.Helper()
	want, werr := sshsig.Unarmor(b)
	got := parseArmored(b)
	if got == nil {
		return false
	}
	if werr != nil {
		t.Fatalf("direct path accepts what sshsig rejects (%v): %q", werr, b)
	}
	if err := sameSignature(got.sig, want); err != nil {
		t.Fatalf("direct path reads %q differently: %v", b, err)
	}
	if !bytes.Equal(got.Key.Marshal(), want.PublicKey.Marshal()) || got.KeyID != string(want.PublicKey.Marshal()) {
		t.Fatalf("claimed key differs for %q", b)
	}
	return true
}

func armoredSample(t testing.TB, id *Identity, msg string) []byte {
	t.Helper()
	sig, err := id.SignCommit([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// wire builds an SSH signature blob from its fields.
func wire(fields ...[]byte) []byte {
	var b []byte
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func armor(blob []byte) []byte {
	var b strings.Builder
	b.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	enc := base64.StdEncoding.EncodeToString(blob)
	for len(enc) > 64 {
		b.WriteString(enc[:64] + "\n")
		enc = enc[64:]
	}
	b.WriteString(enc + "\n-----END SSH SIGNATURE-----\n")
	return []byte(b.String())
}

func TestParseArmoredMatchesSSHSig(t *testing.T) {
	id := newTestIdentity(t, "w1")
	good := armoredSample(t, id, "payload")
	if !compareParsers(t, good) {
		t.Fatal("the signature bernstein writes does not take the direct path")
	}
	// Each case is checked against the library; the direct path must take
	// some and leave others.
	pub := id.PublicKey().Marshal()
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	sshEd, _ := ssh.NewPublicKey(edPub)
	sigw := wire([]byte("ssh-ed25519"), make([]byte, 64))
	blob := func(magic string, version uint32, fields ...[]byte) []byte {
		b := append([]byte(magic), binary.BigEndian.AppendUint32(nil, version)...)
		return append(b, wire(fields...)...)
	}
	cases := map[string][]byte{
		"good":                   good,
		"no trailing newline":    bytes.TrimSuffix(good, []byte("\n")),
		"two trailing newlines":  append(bytes.Clone(good), '\n'),
		"junk after":             append(bytes.Clone(good), "x"...),
		"junk before":            append([]byte("x\n"), good...),
		"CRLF":                   bytes.ReplaceAll(good, []byte("\n"), []byte("\r\n")),
		"space in body":          bytes.Replace(good, []byte("\n"), []byte("\n "), 2),
		"header":                 bytes.Replace(good, []byte("-----\n"), []byte("-----\nA: b\n\n"), 1),
		"other type":             bytes.ReplaceAll(good, []byte("SSH SIGNATURE"), []byte("SSH SIGNATUR")),
		"empty body":             []byte("-----BEGIN SSH SIGNATURE-----\n-----END SSH SIGNATURE-----\n"),
		"blank line in body":     bytes.Replace(good, []byte("-----\n"), []byte("-----\n\n"), 1),
		"bad base64":             bytes.Replace(good, []byte("-----\nU1NI"), []byte("-----\nU1N!"), 1),
		"short base64":           bytes.Replace(good, []byte("-----\nU1NI"), []byte("-----\nU1N"), 1),
		"canonical sha256":       armor(blob("SSHSIG", 1, pub, []byte("git"), nil, []byte("sha256"), sigw)),
		"other namespace":        armor(blob("SSHSIG", 1, pub, []byte("file"), nil, []byte("sha512"), sigw)),
		"reserved set":           armor(blob("SSHSIG", 1, pub, []byte("git"), []byte("r"), []byte("sha512"), sigw)),
		"version 2":              armor(blob("SSHSIG", 2, pub, []byte("git"), nil, []byte("sha512"), sigw)),
		"bad magic":              armor(blob("SSHSIH", 1, pub, []byte("git"), nil, []byte("sha512"), sigw)),
		"md5":                    armor(blob("SSHSIG", 1, pub, []byte("git"), nil, []byte("md5"), sigw)),
		"trailing byte":          armor(append(blob("SSHSIG", 1, pub, []byte("git"), nil, []byte("sha512"), sigw), 0)),
		"sig rest":               armor(blob("SSHSIG", 1, pub, []byte("git"), nil, []byte("sha512"), append(bytes.Clone(sigw), 1, 2, 3))),
		"empty sig":              armor(blob("SSHSIG", 1, pub, []byte("git"), nil, []byte("sha512"), nil)),
		"short sig blob":         armor(blob("SSHSIG", 1, pub, []byte("git"), nil, []byte("sha512"), wire([]byte("ssh-ed25519"), make([]byte, 63)))),
		"rsa format":             armor(blob("SSHSIG", 1, pub, []byte("git"), nil, []byte("sha512"), wire([]byte("rsa-sha2-512"), make([]byte, 64)))),
		"31-byte key":            armor(blob("SSHSIG", 1, wire([]byte("ssh-ed25519"), make([]byte, 31)), []byte("git"), nil, []byte("sha512"), sigw)),
		"key with trailing junk": armor(blob("SSHSIG", 1, append(bytes.Clone(pub), 0), []byte("git"), nil, []byte("sha512"), sigw)),
		"other ed25519 key":      armor(blob("SSHSIG", 1, sshEd.Marshal(), []byte("git"), nil, []byte("sha512"), sigw)),
		"ecdsa key":              armor(blob("SSHSIG", 1, ecdsaKey(t), []byte("git"), nil, []byte("sha512"), sigw)),
		"truncated":              armor(blob("SSHSIG", 1, pub, []byte("git"))),
	}
	taken, left := 0, 0
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if compareParsers(t, b) {
				taken++
			} else {
				left++
				// Whatever the direct path leaves, ParseCommitSignature
				// answers as the library does.
				_, werr := sshsig.Unarmor(b)
				_, gerr := ParseCommitSignature(b)
				if (werr == nil) != (gerr == nil) || gerr != nil && gerr.Error() != fmt.Errorf("%w: %v", ErrBadSignature, werr).Error() {
					t.Fatalf("ParseCommitSignature: %v; sshsig: %v", gerr, werr)
				}
			}
		})
	}
	if taken < 5 || left < 10 {
		t.Fatalf("direct path took %d cases and left %d", taken, left)
	}
}

func ecdsaKey(t *testing.T) []byte {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pub.Marshal()
}

// TestEd25519Path: the ed25519 verification a parsed signature comes down
// to agrees with VerifyCommitSignature, for good and spoiled signatures.
func TestEd25519Path(t *testing.T) {
	id := newTestIdentity(t, "w2")
	for i := 0; i < 40; i++ {
		payload := []byte(fmt.Sprintf("tree x\n\nmessage %d\n", i))
		armored := armoredSample(t, id, string(payload))
		if i%4 == 1 {
			payload = append(payload, '.')
		}
		cs, err := ParseCommitSignature(armored)
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 2 {
			cs.sig.Signature.Blob = bytes.Clone(cs.sig.Signature.Blob)
			cs.sig.Signature.Blob[i%64] ^= 4
		}
		key, msg, sig, ok := cs.Ed25519(payload, nil)
		if !ok {
			t.Fatal("an ssh-ed25519 signature does not take the ed25519 path")
		}
		want := VerifyCommitSignature(payload, cs, cs.Key) == nil
		if got := ed25519.Verify(key, msg, sig); got != want {
			t.Fatalf("case %d: ed25519 path %v, VerifyCommitSignature %v", i, got, want)
		}
		if want != (i%4 == 0 || i%4 == 3) {
			t.Fatalf("case %d: verdict %v", i, want)
		}
	}
}

// TestEd25519PathNamespace: a signature blob that names another namespace,
// or another signature format, while its ed25519 signature covers git's
// signed data is refused by sshsig.Verify, and must not pass the ed25519
// path.
func TestEd25519PathNamespace(t *testing.T) {
	id := newTestIdentity(t, "w4")
	payload := []byte("tree x\n\nmessage\n")
	cs, err := ParseCommitSignature(armoredSample(t, id, string(payload)))
	if err != nil {
		t.Fatal(err)
	}
	if VerifyCommitSignature(payload, cs, cs.Key) != nil {
		t.Fatal("the good signature does not verify")
	}
	for name, spoil := range map[string]func(*sshsig.Signature){
		"namespace": func(s *sshsig.Signature) { s.Namespace = "file" },
		"format": func(s *sshsig.Signature) {
			s.Signature = &ssh.Signature{Format: "rsa-sha2-512", Blob: s.Signature.Blob}
		},
	} {
		c := *cs
		sig := *cs.sig
		c.sig = &sig
		spoil(c.sig)
		if err := VerifyCommitSignature(payload, &c, c.Key); err == nil {
			t.Fatalf("%s: sshsig.Verify accepts it", name)
		}
		if key, msg, sig, ok := c.Ed25519(payload, nil); ok && ed25519.Verify(key, msg, sig) {
			t.Fatalf("%s: the ed25519 path accepts a signature sshsig.Verify refuses", name)
		}
	}
}

// FuzzParseArmored mutates a real signature's armour and its decoded blob.
func FuzzParseArmored(f *testing.F) {
	id, _, err := Create(f.TempDir(), "w3")
	if err != nil {
		f.Fatal(err)
	}
	good, err := id.SignCommit([]byte("x"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint16(0), uint8(0), false)
	f.Add(uint16(40), uint8('A'), true)
	f.Add(uint16(300), uint8(1), true)
	f.Fuzz(func(t *testing.T, pos uint16, v uint8, inBlob bool) {
		b := bytes.Clone(good)
		if inBlob {
			p, _ := sshsig.Unarmor(good)
			raw := p.Marshal()
			raw[int(pos)%len(raw)] ^= v
			b = armor(raw)
		} else {
			b[int(pos)%len(b)] = v
		}
		compareParsers(t, b)
	})
}
