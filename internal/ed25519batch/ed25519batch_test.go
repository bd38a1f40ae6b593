package ed25519batch

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"

	"filippo.io/edwards25519"
)

// crypto/ed25519.Verify is the oracle throughout: every verdict of Verify
// must be its verdict.

// signer holds a key pair and its secret scalar, so that tests can build
// signatures crypto/ed25519.Sign never makes (mixed-order R, torsion A).
type signer struct {
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	a    *edwards25519.Scalar
}

func newSigner(t testing.TB, seed byte) signer {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed + byte(i)
	}
	priv := ed25519.NewKeyFromSeed(s)
	h := sha512.Sum512(s)
	a, err := edwards25519.NewScalar().SetBytesWithClamping(h[:32])
	if err != nil {
		t.Fatal(err)
	}
	return signer{pub: priv.Public().(ed25519.PublicKey), priv: priv, a: a}
}

// signWith signs msg under the public key encoding pub (whose point must be
// [a]B plus any torsion) with nonce point R = [r]B + extra, so that
// S = r + k·a with k = H(R || pub || msg).
func (s signer) signWith(pub []byte, msg []byte, r *edwards25519.Scalar, extra *edwards25519.Point) []byte {
	R := new(edwards25519.Point).ScalarBaseMult(r)
	if extra != nil {
		R.Add(R, extra)
	}
	rb := R.Bytes()
	h := sha512.New()
	h.Write(rb)
	h.Write(pub)
	h.Write(msg)
	k, _ := edwards25519.NewScalar().SetUniformBytes(h.Sum(nil))
	S := edwards25519.NewScalar().MultiplyAdd(k, s.a, r)
	return append(rb, S.Bytes()...)
}

func scalar(t testing.TB, rng *rand.Rand) *edwards25519.Scalar {
	var b [64]byte
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	s, err := edwards25519.NewScalar().SetUniformBytes(b[:])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// torsion returns the eight points of order dividing 8, with a point of
// order 8 first.
func torsion(t testing.TB) []*edwards25519.Point {
	// [L]P for a point P with a component of order 8: [L−1]P + P.
	lMinus1, err := edwards25519.NewScalar().SetCanonicalBytes(mustHex(t, "ecd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010"))
	if err != nil {
		t.Fatal(err)
	}
	for y := byte(2); ; y++ {
		enc := make([]byte, 32)
		enc[0] = y
		P, err := new(edwards25519.Point).SetBytes(enc)
		if err != nil {
			continue
		}
		T := new(edwards25519.Point).ScalarMult(lMinus1, P)
		T.Add(T, P)
		// Order 8: [4]T is not the identity.
		T4 := new(edwards25519.Point).Add(T, T)
		T4.Add(T4, T4)
		if T4.Equal(edwards25519.NewIdentityPoint()) == 1 {
			continue
		}
		out := []*edwards25519.Point{edwards25519.NewIdentityPoint()}
		for i := 1; i < 8; i++ {
			out = append(out, new(edwards25519.Point).Add(out[i-1], T))
		}
		return append(out[1:], out[0])
	}
}

func mustHex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// check verifies cases with a fresh cache that builds tables at once, so the
// fast path takes every valid key, and compares each verdict with the
// standard library's. It returns the verdicts.
func check(t *testing.T, cases []Item, pubs [][]byte) []bool {
	t.Helper()
	return checkWith(t, fastKeys(), cases, pubs)
}

func checkWith(t *testing.T, ks *Keys, cases []Item, pubs [][]byte) []bool {
	t.Helper()
	for i := range cases {
		k, err := ks.Key(pubs[i])
		if err != nil {
			t.Fatal(err)
		}
		cases[i].Key = k
	}
	ok := make([]bool, len(cases))
	ks.Verify(cases, ok)
	for i, c := range cases {
		if want := ed25519.Verify(pubs[i], c.Message, c.Signature); ok[i] != want {
			t.Fatalf("case %d: Verify says %v, crypto/ed25519 says %v (key %x, sig %x)", i, ok[i], want, pubs[i], c.Signature)
		}
	}
	return ok
}

// fastKeys is a cache whose keys get a table at their first signature.
func fastKeys() *Keys {
	ks := NewKeys()
	ks.after = 1
	return ks
}

func TestRandomValidBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 63, 64, 65, 200} {
		var cases []Item
		var pubs [][]byte
		signers := []signer{newSigner(t, 1), newSigner(t, 2), newSigner(t, 3)}
		for i := 0; i < n; i++ {
			s := signers[rng.IntN(len(signers))]
			msg := make([]byte, rng.IntN(300))
			for j := range msg {
				msg[j] = byte(rng.Uint32())
			}
			cases = append(cases, Item{Message: msg, Signature: ed25519.Sign(s.priv, msg)})
			pubs = append(pubs, s.pub)
		}
		ks := fastKeys()
		for i, v := range checkWith(t, ks, cases, pubs) {
			if !v {
				t.Fatalf("n=%d: valid signature %d rejected", n, i)
			}
		}
		// Every one was accepted by the tables, none left to the
		// standard library.
		if n := ks.single.Load(); n != 0 {
			t.Fatalf("%d valid signatures needed crypto/ed25519", n)
		}
	}
}

// TestOneBadAtEveryPosition: a batch of 64 valid signatures with one made
// bad, at each position in turn, in each of several ways; only that one is
// rejected.
func TestOneBadAtEveryPosition(t *testing.T) {
	s, other := newSigner(t, 7), newSigner(t, 8)
	msgs := make([][]byte, BatchSize)
	sigs := make([][]byte, BatchSize)
	for i := range msgs {
		msgs[i] = []byte(fmt.Sprintf("message %d", i))
		sigs[i] = ed25519.Sign(s.priv, msgs[i])
	}
	// L, little-endian: S + L is S malleated (same value mod L).
	lBytes := mustHex(t, "edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
	spoil := map[string]func(pub, msg, sig []byte) ([]byte, []byte, []byte){
		"flipped R bit": func(pub, msg, sig []byte) ([]byte, []byte, []byte) {
			sig = bytes.Clone(sig)
			sig[5] ^= 0x10
			return pub, msg, sig
		},
		"flipped S bit": func(pub, msg, sig []byte) ([]byte, []byte, []byte) {
			sig = bytes.Clone(sig)
			sig[40] ^= 0x01
			return pub, msg, sig
		},
		"other message": func(pub, msg, sig []byte) ([]byte, []byte, []byte) {
			return pub, append(bytes.Clone(msg), '!'), sig
		},
		"wrong key": func(pub, msg, sig []byte) ([]byte, []byte, []byte) {
			return other.pub, msg, sig
		},
		"malleated S (S+L)": func(pub, msg, sig []byte) ([]byte, []byte, []byte) {
			return pub, msg, append(bytes.Clone(sig[:32]), addLE(sig[32:], lBytes)...)
		},
		"top bits of S": func(pub, msg, sig []byte) ([]byte, []byte, []byte) {
			sig = bytes.Clone(sig)
			sig[63] |= 0xe0
			return pub, msg, sig
		},
		"short signature": func(pub, msg, sig []byte) ([]byte, []byte, []byte) {
			return pub, msg, sig[:63]
		},
	}
	for name, f := range spoil {
		for bad := 0; bad < BatchSize; bad++ {
			cases := make([]Item, BatchSize)
			pubs := make([][]byte, BatchSize)
			for i := range cases {
				pub, msg, sig := []byte(s.pub), msgs[i], sigs[i]
				if i == bad {
					pub, msg, sig = f(pub, msg, sig)
				}
				cases[i] = Item{Message: msg, Signature: sig}
				pubs[i] = pub
			}
			ok := check(t, cases, pubs)
			for i, v := range ok {
				if v != (i != bad) {
					t.Fatalf("%s at %d: verdict %d is %v", name, bad, i, v)
				}
			}
		}
	}
}

// addLE returns a + b for 32-byte little-endian numbers (mod 2^256).
func addLE(a, b []byte) []byte {
	out := make([]byte, 32)
	c := 0
	for i := 0; i < 32; i++ {
		v := int(a[i]) + int(b[i]) + c
		out[i], c = byte(v), v>>8
	}
	return out
}

// TestSmallAndMixedOrder: R or A with a component of small order. The
// cofactorless equation rejects a mixed-order R, and accepts torsion in A
// only when [k]T vanishes; small-order A (no secret at all) verifies any
// R = [S]B. Every verdict must be the standard library's, and the cases
// must include both verdicts.
func TestSmallAndMixedOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := newSigner(t, 11)
	A := new(edwards25519.Point).ScalarBaseMult(s.a)
	T := torsion(t)
	var cases []Item
	var pubs [][]byte
	add := func(pub, msg, sig []byte) {
		cases = append(cases, Item{Message: msg, Signature: sig})
		pubs = append(pubs, pub)
	}
	for round := 0; round < 8; round++ {
		for i, tp := range T {
			msg := []byte(fmt.Sprintf("torsion %d/%d", round, i))
			// R = [r]B + T: valid cofactored, invalid cofactorless (unless T = 0).
			add(s.pub, msg, s.signWith(s.pub, msg, scalar(t, rng), tp))
			// A' = A + T, signed honestly: valid iff [k]T = 0.
			At := new(edwards25519.Point).Add(A, tp).Bytes()
			add(At, msg, s.signWith(At, msg, scalar(t, rng), nil))
			// Both.
			add(At, msg, s.signWith(At, msg, scalar(t, rng), T[(i+3)%8]))
			// A of small order: R = [S]B for any S, any message.
			small := tp.Bytes()
			S := scalar(t, rng)
			R := new(edwards25519.Point).ScalarBaseMult(S)
			add(small, msg, append(R.Bytes(), S.Bytes()...))
			// R itself of small order, with A small order too.
			add(small, msg, append(T[(i+1)%8].Bytes(), S.Bytes()...))
		}
	}
	ok := check(t, cases, pubs)
	accepted := 0
	for _, v := range ok {
		if v {
			accepted++
		}
	}
	if accepted == 0 || accepted == len(ok) {
		t.Fatalf("%d of %d accepted: the cases do not exercise both verdicts", accepted, len(ok))
	}
}

// TestNonCanonicalEncodings: an R encoded with y ≥ p or with the sign bit of
// x = 0 is always rejected (the comparison is with the canonical encoding);
// a non-canonical A is decoded and hashed as given, and accepted.
func TestNonCanonicalEncodings(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	// Points whose y is below 19 have a second encoding y + p; p is
	// ed ff .. ff 7f little-endian, so y + p only changes the low byte.
	var noncanon [][]byte
	for y := 0; y < 19; y++ {
		for _, sign := range []byte{0, 0x80} {
			enc := make([]byte, 32)
			enc[0] = 0xed + byte(y)
			for i := 1; i < 31; i++ {
				enc[i] = 0xff
			}
			enc[31] = 0x7f | sign
			if _, err := new(edwards25519.Point).SetBytes(enc); err == nil {
				noncanon = append(noncanon, enc)
			}
		}
	}
	// x = 0 with the sign bit set: the identity and (0, −1).
	negZero := make([]byte, 32)
	negZero[0], negZero[31] = 1, 0x80
	noncanon = append(noncanon, negZero)
	if len(noncanon) < 3 {
		t.Fatalf("only %d non-canonical encodings found", len(noncanon))
	}
	s := newSigner(t, 21)
	var cases []Item
	var pubs [][]byte
	for i, enc := range noncanon {
		msg := []byte(fmt.Sprintf("non-canonical %d", i))
		// As A: R = [S]B satisfies the equation when A is the identity
		// (y = 1: accepted whatever the message) and sometimes when it has
		// small order; other points with y < 19 have no known secret.
		S := scalar(t, rng)
		R := new(edwards25519.Point).ScalarBaseMult(S)
		cases = append(cases, Item{Message: msg, Signature: append(R.Bytes(), S.Bytes()...)})
		pubs = append(pubs, enc)
		// As R: a valid signature whose R is replaced by a non-canonical
		// encoding of the same point is never accepted.
		sig := s.signWith(s.pub, msg, scalar(t, rng), nil)
		cases = append(cases, Item{Message: msg, Signature: append(bytes.Clone(enc), sig[32:]...)})
		pubs = append(pubs, s.pub)
	}
	ok := check(t, cases, pubs)
	accepted := 0
	for _, v := range ok {
		if v {
			accepted++
		}
	}
	if accepted == 0 {
		t.Fatal("no non-canonical A was accepted: the cases do not reach the accepting side")
	}
}

// TestKeysNotOnCurve: a key that does not decode verifies nothing.
func TestKeysNotOnCurve(t *testing.T) {
	s := newSigner(t, 31)
	msg := []byte("m")
	sig := ed25519.Sign(s.priv, msg)
	var cases []Item
	var pubs [][]byte
	for y := 2; len(pubs) < 4; y++ {
		enc := make([]byte, 32)
		enc[0], enc[1] = byte(y), byte(y>>8)
		if _, err := new(edwards25519.Point).SetBytes(enc); err != nil {
			cases = append(cases, Item{Message: msg, Signature: sig})
			pubs = append(pubs, enc)
		}
	}
	for _, v := range check(t, cases, pubs) {
		if v {
			t.Fatal("a key off the curve verified a signature")
		}
	}
	if _, err := NewKeys().Key(make([]byte, 31)); err != ErrKeySize {
		t.Fatalf("31-byte key: %v", err)
	}
}

// TestTablesMatchScalarMult: the tables' multiples are the library's.
func TestTablesMatchScalarMult(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	P := new(edwards25519.Point).ScalarBaseMult(scalar(t, rng))
	tab := newTable(P)
	for i := 0; i < 50; i++ {
		s := scalar(t, rng)
		var p point
		p.identity()
		sb := [32]byte(s.Bytes())
		p.addMul(tab, &sb, false)
		got, err := new(edwards25519.Point).SetExtendedCoordinates(&p.X, &p.Y, &p.Z, &p.T)
		if err != nil {
			t.Fatal(err)
		}
		if want := new(edwards25519.Point).ScalarMult(s, P); got.Equal(want) != 1 {
			t.Fatalf("[s]P differs for s = %x", s.Bytes())
		}
		p.addMul(tab, &sb, true) // and back to the identity
		back, _ := new(edwards25519.Point).SetExtendedCoordinates(&p.X, &p.Y, &p.Z, &p.T)
		if back.Equal(edwards25519.NewIdentityPoint()) != 1 {
			t.Fatal("[s]P − [s]P is not the identity")
		}
	}
}

// TestSlowKeys: keys seen fewer times than the table threshold, and keys
// past the table cap, are verified one by one with the same verdicts.
func TestSlowKeys(t *testing.T) {
	ks := NewKeys()
	ks.after, ks.max = 3, 1
	var items []Item
	var pubs, msgs [][]byte
	for k := 0; k < 3; k++ {
		s := newSigner(t, byte(40+k))
		key, _ := ks.Key(s.pub)
		for i := 0; i < 10; i++ {
			msg := []byte(fmt.Sprintf("%d/%d", k, i))
			sig := ed25519.Sign(s.priv, msg)
			if i%3 == 0 {
				sig[0] ^= 1
			}
			items = append(items, Item{Key: key, Message: msg, Signature: sig})
			pubs, msgs = append(pubs, s.pub), append(msgs, msg)
		}
	}
	ok := make([]bool, len(items))
	ks.Verify(items, ok)
	for i := range items {
		if want := ed25519.Verify(pubs[i], msgs[i], items[i].Signature); ok[i] != want {
			t.Fatalf("item %d: %v, want %v", i, ok[i], want)
		}
	}
	if ks.tables != 1 {
		t.Fatalf("%d tables built, want the cap of 1", ks.tables)
	}
}

// FuzzVerify mutates valid signatures, messages and keys and compares every
// verdict with crypto/ed25519.
func FuzzVerify(f *testing.F) {
	f.Add([]byte("hello"), uint8(0), uint8(0), uint8(0), false)
	f.Add([]byte(""), uint8(63), uint8(0xe0), uint8(1), true)
	f.Add([]byte("x"), uint8(32), uint8(0xed), uint8(2), false)
	s := newSigner(f, 51)
	T := torsion(f)
	f.Fuzz(func(t *testing.T, msg []byte, pos, xor, variant uint8, keyTorsion bool) {
		pub := []byte(s.pub)
		var sig []byte
		rng := rand.New(rand.NewPCG(uint64(len(msg)), uint64(pos)<<8|uint64(xor)))
		switch variant % 4 {
		case 0:
			sig = ed25519.Sign(s.priv, msg)
		case 1: // mixed-order R
			sig = s.signWith(pub, msg, scalar(t, rng), T[int(xor)%8])
		case 2: // key with a torsion component
			A := new(edwards25519.Point).ScalarBaseMult(s.a)
			pub = A.Add(A, T[int(pos)%8]).Bytes()
			sig = s.signWith(pub, msg, scalar(t, rng), nil)
		case 3: // small-order key, R = [S]B
			pub = T[int(pos)%8].Bytes()
			S := scalar(t, rng)
			sig = append(new(edwards25519.Point).ScalarBaseMult(S).Bytes(), S.Bytes()...)
		}
		if keyTorsion {
			pub = bytes.Clone(pub)
			pub[int(xor)%32] ^= pos
		} else {
			sig[int(pos)%64] ^= xor
		}
		ks := fastKeys()
		key, err := ks.Key(pub)
		if err != nil {
			t.Fatal(err)
		}
		items := []Item{{Key: key, Message: msg, Signature: sig}}
		ok := []bool{false}
		ks.Verify(items, ok)
		if want := ed25519.Verify(pub, msg, sig); ok[0] != want {
			t.Fatalf("Verify %v, crypto/ed25519 %v: key %x msg %x sig %x", ok[0], want, pub, msg, sig)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	s := newSigner(b, 61)
	ks := fastKeys()
	key, _ := ks.Key(s.pub)
	items := make([]Item, BatchSize)
	for i := range items {
		msg := []byte(fmt.Sprintf("SSHSIG message %d of about a hundred bytes, as an SSH signature's signed data is ......", i))
		items[i] = Item{Key: key, Message: msg, Signature: ed25519.Sign(s.priv, msg)}
	}
	ok := make([]bool, len(items))
	ks.Verify(items, ok)
	b.Run("batch", func(b *testing.B) {
		for i := 0; i < b.N; i += BatchSize {
			ks.Verify(items, ok)
		}
	})
	b.Run("crypto/ed25519", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			it := items[i%len(items)]
			ed25519.Verify(s.pub, it.Message, it.Signature)
		}
	})
}
