package witness_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// memLog is a Merkle tree log kept in memory with sumdb/tlog, whose
// checkpoints are signed with a note key.
type memLog struct {
	origin string
	signer note.Signer
	vkey   string
	hashes []tlog.Hash
	n      int64
}

func newMemLog(t *testing.T, origin string) *memLog {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return &memLog{origin: origin, signer: signer, vkey: vkey}
}

// copyLog is l with the same key and the same leaves so far.
func (l *memLog) copyLog() *memLog {
	c := *l
	c.hashes = append([]tlog.Hash(nil), l.hashes...)
	return &c
}

func (l *memLog) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = l.hashes[x]
	}
	return out, nil
}

func (l *memLog) appendLeaves(t *testing.T, prefix string, count int) {
	t.Helper()
	for range count {
		hs, err := tlog.StoredHashes(l.n, fmt.Appendf(nil, "%s %d", prefix, l.n), l)
		if err != nil {
			t.Fatal(err)
		}
		l.hashes = append(l.hashes, hs...)
		l.n++
	}
}

// checkpoint is the log's signed checkpoint at its current size.
func (l *memLog) checkpoint(t *testing.T) []byte {
	t.Helper()
	return l.checkpointBy(t, l.signer)
}

func (l *memLog) checkpointBy(t *testing.T, s note.Signer) []byte {
	t.Helper()
	h, err := tlog.TreeHash(l.n, l)
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("%s\n%d\n%s\n", l.origin, l.n, base64.StdEncoding.EncodeToString(h[:]))
	signed, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// proof is the consistency proof from size old to the current size.
func (l *memLog) proof(t *testing.T, old int64) []tlog.Hash {
	t.Helper()
	p, err := tlog.ProveTree(l.n, old, l)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
