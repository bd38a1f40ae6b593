package bernstein

import (
	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
)

// readChainCommit reads one chain commit and the record in its message.
func (s *Store) readChainCommit(id gitstore.Oid) (chain.Commit, error) {
	return chain.Read(s.objects, id)
}

// walkBack reads the chain from head back to stop (see chain.WalkBack).
func (s *Store) walkBack(head, stop gitstore.Oid) ([]chain.Commit, bool, error) {
	return chain.WalkBack(s.objects, head, stop, nil)
}

// readTree returns the entries of tree id, from the tree cache when it has
// them.
func (s *Store) readTree(id gitstore.Oid) ([]gitstore.TreeEntry, error) { return s.core.ReadTree(id) }

func (s *Store) cacheTree(id gitstore.Oid, es []gitstore.TreeEntry) { s.core.CacheTree(id, es) }
