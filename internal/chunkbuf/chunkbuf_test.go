package chunkbuf

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// TestBufferKeepsEveryByteInOrder writes pieces of random sizes, across
// and exactly at chunk boundaries, and compares what the buffer gives
// back with the same pieces appended to one slice.
func TestBufferKeepsEveryByteInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sizes := range [][]int{
		nil,
		{0},
		{1},
		{ChunkSize},
		{ChunkSize - 1, 1, 1},
		{ChunkSize + 1},
		{3 * ChunkSize, 7, ChunkSize - 7},
		{100, 200, 5000, 70000, 1, 0, 131072, 3},
	} {
		var b Buffer
		var want []byte
		for _, n := range sizes {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(r.IntN(256))
			}
			if k, err := b.Write(p); k != n || err != nil {
				t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
			}
			want = append(want, p...)
		}
		if b.Len() != int64(len(want)) {
			t.Fatalf("sizes %v: Len %d, want %d", sizes, b.Len(), len(want))
		}
		var got bytes.Buffer
		if n, err := b.WriteTo(&got); err != nil || n != int64(len(want)) {
			t.Fatalf("sizes %v: WriteTo = %d, %v", sizes, n, err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("sizes %v: WriteTo gave other bytes", sizes)
		}
		all, err := io.ReadAll(b.Reader())
		if err != nil || !bytes.Equal(all, want) {
			t.Fatalf("sizes %v: Reader gave other bytes (%v)", sizes, err)
		}
		for _, c := range b.chunks {
			if len(c) > ChunkSize || cap(c) != ChunkSize {
				t.Fatalf("sizes %v: a chunk of %d bytes, capacity %d", sizes, len(c), cap(c))
			}
		}
	}
}
