package heads

import (
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// A head file is trusted only when it reads back exactly as written: one
// cut short by a crash, or with any byte changed, is no head at all (so it
// can only weaken what this host tells, never raise an alarm).
func TestHeadFileReadsOnlyWhole(t *testing.T) {
	commit, _ := gitstore.ParseOid("2b947f70562014e170d92bbe668e1631c5d721c3")
	m := Mark{Pos: 5, Commit: commit, Link: "sha256:0b1c8a95b2a7c9f2e4d0b3f6a1c5e7d9b8a6f4e2c0d1b3a5f7e9c8d6b4a2f0e1"}
	b := encodeHead(m)
	// Written by hand: the magic, the position in 20 digits, the commit,
	// the link, a CRC-32 in 8 hex digits, a newline.
	const want = "bernstein head v1 00000000000000000005 2b947f70562014e170d92bbe668e1631c5d721c3 sha256:0b1c8a95b2a7c9f2e4d0b3f6a1c5e7d9b8a6f4e2c0d1b3a5f7e9c8d6b4a2f0e1 "
	if string(b[:len(want)]) != want || len(b) != len(want)+9 || b[len(b)-1] != '\n' {
		t.Fatalf("encoded head %q", b)
	}
	if got, ok := decodeHead(b); !ok || got != m {
		t.Fatalf("decode: %+v %v", got, ok)
	}
	for n := 0; n < len(b); n++ {
		if _, ok := decodeHead(b[:n]); ok {
			t.Fatalf("a head cut to %d bytes reads as a head", n)
		}
	}
	for i := range b[:len(b)-1] {
		c := append([]byte(nil), b...)
		c[i] ^= 0x01
		if got, ok := decodeHead(c); ok {
			t.Fatalf("a head with byte %d changed reads as %+v", i, got)
		}
	}
}
