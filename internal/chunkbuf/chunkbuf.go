// Package chunkbuf is a buffer of bytes held in fixed-size chunks: a large
// document (a list of 100,000 tasks is over 100 MB) is written into it
// without the copies of a slice that doubles as it grows, and held as
// memory with no pointers in it for the collector to scan.
package chunkbuf

import (
	"bytes"
	"io"
)

// ChunkSize is the size of each chunk.
const ChunkSize = 64 << 10

// Buffer holds what was written to it, in order. The zero value is empty
// and ready to use.
type Buffer struct {
	chunks [][]byte
	n      int64
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(b.chunks) == 0 || len(b.chunks[len(b.chunks)-1]) == ChunkSize {
			b.chunks = append(b.chunks, make([]byte, 0, ChunkSize))
		}
		last := &b.chunks[len(b.chunks)-1]
		k := min(len(p), ChunkSize-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	b.n += int64(n)
	return n, nil
}

// Len is how many bytes were written.
func (b *Buffer) Len() int64 { return b.n }

// WriteTo writes the bytes held to w, in order; b keeps them.
func (b *Buffer) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, c := range b.chunks {
		k, err := w.Write(c)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Reader reads the bytes held, in order; b keeps them.
func (b *Buffer) Reader() io.Reader {
	rs := make([]io.Reader, len(b.chunks))
	for i, c := range b.chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}
