package verify

import (
	"testing"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
)

// TestProvenMemoKeepsTheLastByID: an Env answers a commit's proof again
// only for the same commit id, and keeps the last provenKept of them: the
// oldest is proven again once provenKept others followed it.
func TestProvenMemoKeepsTheLastByID(t *testing.T) {
	env := &Env{}
	id := func(i int) gitstore.Oid {
		return gitstore.HashObject(gitstore.TypeBlob, []byte{byte(i), byte(i >> 8)})
	}
	m := env.proven()
	m.put(id(0), chain.Proof{Writer: "w0", State: Verified})
	if _, ok := m.get(id(1)); ok {
		t.Fatal("a proof answered for another commit")
	}
	if p, ok := m.get(id(0)); !ok || p.Writer != "w0" || p.State != Verified {
		t.Fatalf("got %+v %v", p, ok)
	}
	m.put(id(0), chain.Proof{Writer: "w0", State: Tampered}) // kept once
	for i := 1; i < provenKept; i++ {
		m.put(id(i), chain.Proof{Writer: "w", State: Tampered})
	}
	if p, ok := m.get(id(0)); !ok || p.State != Verified {
		t.Fatalf("the first of %d: %+v %v", provenKept, p, ok)
	}
	m.put(id(provenKept), chain.Proof{State: Tampered})
	if _, ok := m.get(id(0)); ok {
		t.Fatalf("the oldest is kept past %d", provenKept)
	}
	if len(m.by) != provenKept {
		t.Fatalf("%d kept", len(m.by))
	}
	if (&Env{}).proven() == m {
		t.Fatal("two Envs share their proofs")
	}
}
