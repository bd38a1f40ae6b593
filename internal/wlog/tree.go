package wlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
)

// Tree is the Merkle tree of a spine's first Size entries: tlog's stored
// hashes, and the spine commit of its last leaf. It is derived data: a
// tree read from the cache is used only once its root at the size a
// signed checkpoint names equals that checkpoint's root (Tree.Check).
type Tree struct {
	Size   int64
	Head   gitstore.Oid // the spine commit of leaf Size-1
	hashes []tlog.Hash
	// Hashed counts the leaves hashed to build this tree (the rest came
	// from the cache).
	Hashed int64
	cached int64 // leaves that came from the cache
}

func (t *Tree) reader() tlog.HashReader {
	return tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			if x < 0 || x >= int64(len(t.hashes)) {
				return nil, fmt.Errorf("tlog hash %d of a tree of %d leaves", x, t.Size)
			}
			out[i] = t.hashes[x]
		}
		return out, nil
	})
}

// Root is the tree hash of the first n leaves (n <= Size).
func (t *Tree) Root(n int64) (tlog.Hash, error) {
	if n < 0 || n > t.Size {
		return tlog.Hash{}, fmt.Errorf("a root at size %d of a log of %d entries", n, t.Size)
	}
	return tlog.TreeHash(n, t.reader())
}

// Consistency is the proof that the tree at size m is a prefix of the one
// at size n (m <= n <= Size).
func (t *Tree) Consistency(n, m int64) (tlog.TreeProof, error) {
	return tlog.ProveTree(n, m, t.reader())
}

// Leaf is the leaf hash at index i.
func (t *Tree) Leaf(i int64) (tlog.Hash, error) {
	h, err := t.reader().ReadHashes([]int64{tlog.StoredHashIndex(0, i)})
	if err != nil {
		return tlog.Hash{}, err
	}
	return h[0], nil
}

func (t *Tree) appendLeaf(h tlog.Hash) error {
	hs, err := tlog.StoredHashesForRecordHash(t.Size, h, t.reader())
	if err != nil {
		return err
	}
	t.hashes = append(t.hashes, hs...)
	t.Size++
	return nil
}

// extend appends the spine's entries after t.Head up to head.
func (t *Tree) extend(objs *gitstore.Repo, head gitstore.Oid) error {
	cs, met, err := chain.WalkBack(objs, head, t.Head, nil)
	if err != nil {
		return err
	}
	if !met {
		return errNotMet
	}
	for _, c := range cs {
		e, err := record.ParseSpineEntry(c.Record)
		if err != nil {
			return fmt.Errorf("spine commit %s: %w", c.ID, err)
		}
		if e.Header.Seq != t.Size {
			return fmt.Errorf("spine commit %s says seq %d where seq %d belongs", c.ID, e.Header.Seq, t.Size)
		}
		h, err := LeafHash(e.Hash)
		if err != nil {
			return err
		}
		if err := t.appendLeaf(h); err != nil {
			return err
		}
		t.Head = c.ID
		t.Hashed++
	}
	return nil
}

var errNotMet = errors.New("the cached tree's head is not in the spine")

// Build hashes the whole spine ending at head.
func Build(objs *gitstore.Repo, head gitstore.Oid) (*Tree, error) {
	t := &Tree{}
	if head.IsZero() {
		return t, nil
	}
	return t, t.extend(objs, head)
}

// Cache keeps the tree of one writer's spine under dir (the repository's
// bernstein/cache/tlog), cut at the size of the last checkpoint that
// checked against it, so that a tree from the cache is always checked as a
// whole against a signed root before anything is added to it.
type Cache struct {
	Dir string
}

func (c Cache) path(writer string) string { return filepath.Join(c.Dir, writer) }

const cacheMagic = "bernstein tlog v1"

// Load reads the cached tree of writer and extends it to head; any
// problem (no cache, a damaged one, a head not in the spine) builds the
// tree from the spine instead.
func (c Cache) Load(objs *gitstore.Repo, writer string, head gitstore.Oid) (*Tree, error) {
	if t := c.read(writer); t != nil {
		if err := t.extend(objs, head); err == nil {
			return t, nil
		}
	}
	return Build(objs, head)
}

func (c Cache) read(writer string) *Tree {
	if c.Dir == "" {
		return nil
	}
	b, err := os.ReadFile(c.path(writer))
	if err != nil {
		return nil
	}
	line, rest, ok := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if !ok || len(f) != 5 || f[0]+" "+f[1]+" "+f[2] != cacheMagic {
		return nil
	}
	n, err := strconv.ParseInt(f[3], 10, 64)
	head, herr := gitstore.ParseOid(f[4])
	if err != nil || herr != nil || n <= 0 || int64(len(rest)) != tlog.StoredHashCount(n)*tlog.HashSize {
		return nil
	}
	t := &Tree{Size: n, Head: head, cached: n, hashes: make([]tlog.Hash, tlog.StoredHashCount(n))}
	for i := range t.hashes {
		copy(t.hashes[i][:], rest[i*tlog.HashSize:])
	}
	return t
}

// Save keeps the first n leaves of t (n a size whose root checked against
// a signed checkpoint), through a temporary file and a rename. It is a
// cache: a failure to write it is no error of the caller's.
func (c Cache) Save(objs *gitstore.Repo, writer string, t *Tree, n int64) error {
	if c.Dir == "" || n <= 0 || n > t.Size {
		return nil
	}
	head := t.Head
	if n < t.Size {
		// The spine commit of leaf n-1: walk back from the tree's head.
		id := t.Head
		for i := t.Size - 1; i >= n; i-- {
			cc, err := chain.Read(objs, id)
			if err != nil || len(cc.Commit.Parents) == 0 {
				return fmt.Errorf("spine commit of leaf %d: %v", i, err)
			}
			id = cc.Commit.Parents[0]
		}
		head = id
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d %s\n", cacheMagic, n, head)
	for _, h := range t.hashes[:tlog.StoredHashCount(n)] {
		b.Write(h[:])
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	tmp := c.path(writer) + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path(writer))
}

// Check checks that the tree's root at cp's size is cp's root. A tree
// that came (in part) from the cache and fails is built again from the
// spine and checked again; only then is the spine at fault. It returns
// the tree that checked.
func Check(objs *gitstore.Repo, t *Tree, cp *Checkpoint) (*Tree, error) {
	err := t.match(cp)
	if err != nil && t.cached > 0 {
		fresh, berr := Build(objs, t.Head)
		if berr != nil {
			return nil, berr
		}
		t, err = fresh, fresh.match(cp)
	}
	return t, err
}

// ErrRootMismatch: a spine whose entries do not hash to a signed
// checkpoint's root.
var ErrRootMismatch = errors.New("the spine does not match the checkpoint's root")

func (t *Tree) match(cp *Checkpoint) error {
	if cp.Size > t.Size {
		return fmt.Errorf("%w: the checkpoint names %d entries, the spine holds %d", ErrRootMismatch, cp.Size, t.Size)
	}
	r, err := t.Root(cp.Size)
	if err != nil {
		return err
	}
	if r != cp.Root {
		return fmt.Errorf("%w: its first %d entries hash to %s, the checkpoint says %s", ErrRootMismatch, cp.Size, r, cp.Root)
	}
	return nil
}
