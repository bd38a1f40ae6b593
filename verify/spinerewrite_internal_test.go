package verify

import (
	"crypto/sha256"
	"io"
	"testing"
)

// turnCache is a SpineCache whose Rewrite grants the lock and reports kept
// as the header kept now; it records the releases.
type turnCache struct {
	kept     []byte
	released int
}

func (c *turnCache) Load(string) ([]byte, io.ReaderAt) { return nil, nil }
func (c *turnCache) Save(string, []byte, []byte)       {}
func (c *turnCache) LoadTail(string) []byte            { return nil }
func (c *turnCache) SaveTail(string, []byte)           {}
func (c *turnCache) WalkTurn(string) func()            { return func() {} }
func (c *turnCache) Rewrite(string) (func(), []byte, bool) {
	return func() { c.released++ }, c.kept, true
}

// TestRewriteOnlyOverTheIndexRead: a reader rewrites the kept index only
// when it is still the one it read (or there is still none): another
// reader's newer index is not written over with an older head.
func TestRewriteOnlyOverTheIndexRead(t *testing.T) {
	read := []byte("the header this reader loaded")
	c := &turnCache{kept: read}
	release, ok := rewrite(c, "w", sha256.Sum256(read))
	if !ok {
		t.Fatal("refused to rewrite the index it read")
	}
	release()
	c.kept = []byte("a newer header another reader wrote")
	if _, ok := rewrite(c, "w", sha256.Sum256(read)); ok {
		t.Fatal("rewrote an index another reader replaced after this one read it")
	}
	if c.released != 2 {
		t.Fatalf("%d releases; want 2 (the refused rewrite releases the lock)", c.released)
	}
	if _, ok := rewrite(c, "w", [32]byte{}); ok {
		t.Fatal("a reader that read no index rewrote one another reader kept since")
	}
	c.kept = nil
	if _, ok := rewrite(c, "w", [32]byte{}); !ok {
		t.Fatal("refused to keep an index where none is kept")
	}
}
