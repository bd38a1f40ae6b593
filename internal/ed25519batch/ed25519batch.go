// Package ed25519batch verifies many Ed25519 signatures at once, several
// times faster than crypto/ed25519.Verify one by one, with exactly its
// verdicts: a signature is accepted here if and only if crypto/ed25519.Verify
// accepts it.
//
// # What is checked
//
// crypto/ed25519.Verify(A, M, sig) with sig = R || S accepts when
//
//   - sig is 64 bytes, the top three bits of S are clear and S < L (the
//     group order): S is canonical;
//   - A decodes to a point (edwards25519.Point.SetBytes, which also takes
//     non-canonical encodings of valid points);
//   - k = SHA-512(R || A || M) mod L, with R and A as given (not
//     re-encoded);
//   - the encoding of [S]B − [k]A is byte for byte R.
//
// That last check is the cofactorless equation: it fails for an R that is
// not canonically encoded, and for an R (or an A) with a small-order
// component, unless that component cancels exactly.
//
// This package evaluates the same equation for every signature, with the
// same decoding of A, the same hash input and the same byte comparison of
// the canonical encoding of [S]B − [k]A against R. It only computes the
// point differently: [S]B and [k]A are fixed-base multiplications read from
// precomputed tables (one for B, one per public key that signs often), with
// signed radix-256 digits, so a signature costs 64 point additions and no
// doublings instead of a double-and-add over 253 bits; the 64 projective
// results of a batch share one field inversion (Montgomery's trick) for
// their encodings. Both are exact arithmetic in the same group: the point
// whose encoding is compared is the same point crypto/ed25519 computes, so
// the verdict is the same for every input, small-order and mixed-order
// points, non-canonical encodings and malleated S included. The addition
// formulas (extended twisted Edwards coordinates, a = −1, d not a square)
// are complete, so no input takes an exceptional path.
//
// # Why not a randomized batch equation
//
// The classic batch check, [8](Σ zᵢSᵢB − Σ zᵢRᵢ − Σ zᵢkᵢAᵢ) = 0 for random
// zᵢ, is cofactored: it accepts a signature whose R is an honest [r]B plus
// a point of small order T (a signer can make one), which the cofactorless
// single check rejects. Without the factor 8 the torsion parts still cancel
// among two or more such signatures with probability 1/2 over the zᵢ (T of
// order 2 in two signatures cancels whenever z₁ + z₂ is even), so no single
// random combination can imply the single verdict; that needs a subgroup
// check of every Rᵢ ([L]Rᵢ = 0), which costs as much as the verification it
// would save. Fixed-base tables are faster than that batch equation and need
// no probabilistic argument at all.
//
// # Fallback
//
// Every signature the fast path rejects is verified again with
// crypto/ed25519.Verify, and that verdict stands, so a rejection is always
// the standard library's; acceptance rests on the exactness above, which the
// tests check against crypto/ed25519 as the oracle (random signatures, every
// position of a bad signature in a batch, wrong keys, malleated S,
// small-order and mixed-order points, non-canonical encodings, fuzzing).
//
// A key's table takes about 4,096 point additions to build and 480 KiB to
// keep, so keys are verified one by one until they have been seen in
// tableAfter signatures, and at most maxTables keys keep a table.
package ed25519batch

import (
	"crypto/ed25519"
	"crypto/sha512"
	"errors"
	"sync"
	"sync/atomic"

	"filippo.io/edwards25519"
	"filippo.io/edwards25519/field"
)

// BatchSize is the number of signatures whose encodings share one field
// inversion; callers that split work may use it as a unit.
const BatchSize = 64

const (
	// Signed radix-2^w digits: 32 positions of 8 bits hold any scalar below
	// 2^253 (S and k are reduced mod L < 2^253) plus the final carry.
	window    = 8
	positions = 32
	perPos    = 1 << (window - 1) // multiples 1..128 of 256^j·P
	// tableAfter is how many signatures a key is seen in before a table is
	// built for it; maxTables bounds how many keys keep one.
	tableAfter = 64
	maxTables  = 32
)

// niels is a point in affine Niels form: y+x, y−x and 2d·x·y.
type niels struct{ ypx, ymx, xy2d field.Element }

// table holds m·256^j·P for j < 32 and 1 ≤ m ≤ 128.
type table [positions * perPos]niels

// point is a point in extended coordinates: x = X/Z, y = Y/Z, T = XY/Z.
type point struct{ X, Y, Z, T field.Element }

var d2 field.Element // 2d, d = −121665/121666

func init() {
	var one, num, den field.Element
	one.One()
	num.Mult32(&one, 121665)
	den.Mult32(&one, 121666)
	den.Invert(&den)
	d2.Multiply(&num, &den)
	d2.Negate(&d2)
	d2.Add(&d2, &d2)
}

var (
	baseOnce  sync.Once
	baseTable *table
)

func base() *table {
	baseOnce.Do(func() { baseTable = newTable(edwards25519.NewGeneratorPoint()) })
	return baseTable
}

// newTable precomputes the multiples of p.
func newTable(p *edwards25519.Point) *table {
	pts := make([]edwards25519.Point, positions*perPos)
	b := new(edwards25519.Point).Set(p)
	for j := 0; j < positions; j++ {
		row := pts[j*perPos : (j+1)*perPos]
		row[0].Set(b)
		for m := 1; m < perPos; m++ {
			row[m].Add(&row[m-1], b)
		}
		b.Add(&row[perPos-1], &row[perPos-1]) // 256·b = 2·(128·b)
	}
	xs := make([]field.Element, len(pts))
	ys := make([]field.Element, len(pts))
	zs := make([]field.Element, len(pts))
	for i := range pts {
		X, Y, Z, _ := pts[i].ExtendedCoordinates()
		xs[i], ys[i], zs[i] = *X, *Y, *Z
	}
	invertAll(zs) // Z is never zero for a point in extended coordinates
	t := new(table)
	for i := range t {
		var x, y field.Element
		x.Multiply(&xs[i], &zs[i])
		y.Multiply(&ys[i], &zs[i])
		t[i].ypx.Add(&y, &x)
		t[i].ymx.Subtract(&y, &x)
		t[i].xy2d.Multiply(&x, &y)
		t[i].xy2d.Multiply(&t[i].xy2d, &d2)
	}
	return t
}

// invertAll replaces each element of zs by its inverse with one field
// inversion (Montgomery's trick). No element may be zero.
func invertAll(zs []field.Element) {
	if len(zs) == 0 {
		return
	}
	prefix := make([]field.Element, len(zs))
	prefix[0] = zs[0]
	for i := 1; i < len(zs); i++ {
		prefix[i].Multiply(&prefix[i-1], &zs[i])
	}
	var inv field.Element
	inv.Invert(&prefix[len(zs)-1])
	for i := len(zs) - 1; i > 0; i-- {
		var zi field.Element
		zi.Multiply(&inv, &prefix[i-1])
		inv.Multiply(&inv, &zs[i])
		zs[i] = zi
	}
	zs[0] = inv
}

func (p *point) identity() {
	p.X.Zero()
	p.Y.One()
	p.Z.One()
	p.T.Zero()
}

// add sets p = p + q, or p − q when neg (complete mixed addition,
// add-2008-hwcd-3 with an affine Niels point, 7 multiplications).
func (p *point) add(q *niels, neg bool) {
	var ypx, ymx, pp, mm, tt2d, z2, x, y, z, t field.Element
	ypx.Add(&p.Y, &p.X)
	ymx.Subtract(&p.Y, &p.X)
	if neg { // −q swaps y+x and y−x and negates 2dxy
		pp.Multiply(&ypx, &q.ymx)
		mm.Multiply(&ymx, &q.ypx)
	} else {
		pp.Multiply(&ypx, &q.ypx)
		mm.Multiply(&ymx, &q.ymx)
	}
	tt2d.Multiply(&p.T, &q.xy2d)
	z2.Add(&p.Z, &p.Z)
	x.Subtract(&pp, &mm)
	y.Add(&pp, &mm)
	if neg {
		z.Subtract(&z2, &tt2d)
		t.Add(&z2, &tt2d)
	} else {
		z.Add(&z2, &tt2d)
		t.Subtract(&z2, &tt2d)
	}
	p.X.Multiply(&x, &t)
	p.Y.Multiply(&y, &z)
	p.Z.Multiply(&z, &t)
	p.T.Multiply(&x, &y)
}

// addMul sets p = p + [s]P (p − [s]P when neg) for the point P of t, with s
// the 32-byte little-endian encoding of a scalar below 2^253.
func (p *point) addMul(t *table, s *[32]byte, neg bool) {
	carry := 0
	for j := 0; j < positions; j++ {
		d := int(s[j]) + carry
		carry = 0
		if d >= perPos {
			d -= 2 * perPos
			carry = 1
		}
		switch {
		case d > 0:
			p.add(&t[j*perPos+d-1], neg)
		case d < 0:
			p.add(&t[j*perPos-d-1], !neg)
		}
	}
}

// PublicKey is an Ed25519 public key prepared for verification.
type PublicKey struct {
	raw   [32]byte
	valid bool // it decodes to a point

	tab   atomic.Pointer[table] // set once built
	mu    sync.Mutex
	seen  int
	built bool
}

// ErrKeySize reports a public key that is not 32 bytes long
// (crypto/ed25519.Verify panics on one).
var ErrKeySize = errors.New("ed25519batch: public key is not 32 bytes")

// Keys caches prepared public keys; it is safe for concurrent use.
type Keys struct {
	mu     sync.Mutex
	keys   map[[32]byte]*PublicKey
	tables int
	after  int          // signatures of a key before it gets a table
	max    int          // keys with a table at most
	single atomic.Int64 // signatures verified by crypto/ed25519 alone
}

// NewKeys returns an empty key cache.
func NewKeys() *Keys {
	return &Keys{keys: map[[32]byte]*PublicKey{}, after: tableAfter, max: maxTables}
}

var shared = NewKeys()

// Shared is the process's key cache.
func Shared() *Keys { return shared }

// maxKeys bounds the cache; past it keys are prepared afresh each time.
const maxKeys = 4096

// Key returns the prepared form of pub.
func (ks *Keys) Key(pub []byte) (*PublicKey, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, ErrKeySize
	}
	raw := [32]byte(pub)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if k := ks.keys[raw]; k != nil {
		return k, nil
	}
	k := &PublicKey{raw: raw}
	_, err := new(edwards25519.Point).SetBytes(pub)
	k.valid = err == nil
	if len(ks.keys) < maxKeys {
		ks.keys[raw] = k
	}
	return k, nil
}

// table returns k's table, building it once k has been seen often enough
// and the cache has room, or nil to verify k's signatures one by one.
func (ks *Keys) table(k *PublicKey) *table {
	if t := k.tab.Load(); t != nil {
		return t
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.built || !k.valid {
		return k.tab.Load()
	}
	if k.seen++; k.seen < ks.after {
		return nil
	}
	ks.mu.Lock()
	room := ks.tables < ks.max
	if room {
		ks.tables++
	}
	ks.mu.Unlock()
	k.built = true
	if room {
		p, _ := new(edwards25519.Point).SetBytes(k.raw[:])
		k.tab.Store(newTable(p))
	}
	return k.tab.Load()
}

// Item is one signature to verify: Signature over Message by Key.
type Item struct {
	Key       *PublicKey
	Message   []byte
	Signature []byte
}

// Verify sets ok[i] to crypto/ed25519.Verify(items[i].Key, items[i].Message,
// items[i].Signature) for every item. It uses one goroutine; callers verify
// several slices at once to use several cores.
func (ks *Keys) Verify(items []Item, ok []bool) {
	for len(items) > 0 {
		n := min(len(items), BatchSize)
		ks.verifyBatch(items[:n], ok[:n])
		items, ok = items[n:], ok[n:]
	}
}

func (ks *Keys) verifyBatch(items []Item, ok []bool) {
	var acc [BatchSize]point
	var zs [BatchSize]field.Element
	var fast [BatchSize]bool
	// The base point's table is built when the first item takes the fast
	// path: a process that checks a few signatures (a CLI post proves its
	// chain heads) verifies them one by one and never pays for it.
	var bt *table
	for i := range items {
		it := &items[i]
		ok[i] = false
		sig := it.Signature
		if !it.Key.valid || len(sig) != ed25519.SignatureSize || sig[63]&224 != 0 {
			continue
		}
		tab := ks.table(it.Key)
		if tab == nil {
			continue // verified one by one below
		}
		if bt == nil {
			bt = base()
		}
		var S edwards25519.Scalar
		if _, err := S.SetCanonicalBytes(sig[32:]); err != nil {
			continue
		}
		digest := hram(sig[:32], it.Key.raw[:], it.Message)
		var k edwards25519.Scalar
		if _, err := k.SetUniformBytes(digest[:]); err != nil {
			continue
		}
		// S is canonical, so its encoding is the signature's bytes.
		sb := [32]byte(sig[32:])
		var kb [32]byte
		copy(kb[:], k.Bytes())
		p := &acc[i]
		p.identity()
		p.addMul(bt, &sb, false)
		p.addMul(tab, &kb, true)
		var zero field.Element
		if p.Z.Equal(&zero) == 1 {
			continue // cannot happen (complete formulas); left to the standard library
		}
		zs[i] = p.Z
		fast[i] = true
	}
	for i := range items {
		if !fast[i] {
			zs[i].One()
		}
	}
	invertAll(zs[:len(items)])
	for i := range items {
		it := &items[i]
		if fast[i] {
			var x, y field.Element
			x.Multiply(&acc[i].X, &zs[i])
			y.Multiply(&acc[i].Y, &zs[i])
			var enc [32]byte
			copy(enc[:], y.Bytes())
			enc[31] |= byte(x.IsNegative() << 7)
			if enc == [32]byte(it.Signature[:32]) {
				ok[i] = true
				continue
			}
		}
		// Rejected by the fast path, or not taken by it: the standard
		// library's verdict stands.
		ks.single.Add(1)
		ok[i] = ed25519.Verify(ed25519.PublicKey(it.Key.raw[:]), it.Message, it.Signature)
	}
}

// hram is SHA-512(R || A || M), the hash crypto/ed25519 reduces to k.
func hram(r, a, m []byte) [64]byte {
	var buf [256]byte
	if 64+len(m) <= len(buf) {
		b := append(append(append(buf[:0], r...), a...), m...)
		return sha512.Sum512(b)
	}
	h := sha512.New()
	h.Write(r)
	h.Write(a)
	h.Write(m)
	var out [64]byte
	h.Sum(out[:0])
	return out
}
