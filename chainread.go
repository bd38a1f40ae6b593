package bernstein

import (
	"fmt"

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

// readTree returns the entries of tree id, from the store's tree cache when
// it has them.
func (s *Store) readTree(id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if id == gitstore.EmptyTree {
		return nil, nil
	}
	s.treeMu.Lock()
	if es, ok := s.trees[id]; ok {
		s.treeMu.Unlock()
		return es, nil
	}
	s.treeMu.Unlock()
	data, err := s.objects.ReadType(id, gitstore.TypeTree)
	if err != nil {
		return nil, err
	}
	es, err := gitstore.ParseTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	s.cacheTree(id, es)
	return es, nil
}

const treeCacheLimit = 4096

func (s *Store) cacheTree(id gitstore.Oid, es []gitstore.TreeEntry) {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if len(s.trees) >= treeCacheLimit {
		s.trees = map[gitstore.Oid][]gitstore.TreeEntry{}
	}
	s.trees[id] = es
}
