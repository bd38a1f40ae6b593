package txn

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// The repository's identity and storage format live in the chain
// refs/bernstein/repository (record.RepositoryRecord; verify.Binding reads
// it). Every chain of a format-2 repository is rooted in the identity.

// Format is the storage format of the repository as this transaction reads
// it.
func (t *Tx) Format() (int, string, error) {
	b := t.env.Binding
	if b == nil {
		return record.FormatLegacy, "", nil
	}
	if b.Problem != "" {
		return 0, "", fmt.Errorf("the repository's identity cannot be read: %s", b.Problem)
	}
	return b.Format, b.ID, nil
}

// HasChains reports whether the repository holds any chain (a journal,
// ledger, spine or audit mirror).
func (t *Tx) HasChains() (bool, error) {
	for _, p := range []string{refs.JournalPrefix, refs.LedgerPrefix, refs.SpinePrefix, refs.AuditPrefix} {
		_, names, err := t.w.c.Refs.List(p)
		if err != nil {
			return false, err
		}
		if len(names) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// NewRepositoryID draws a repository id: 128 random bits in hex.
func NewRepositoryID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// MintRepository gives a repository that has neither an identity nor any
// chain its identity, in the current storage format: the first record of
// refs/bernstein/repository, with id. It returns whether it minted one; a
// repository with an identity keeps it, and one that holds chains without
// one is in format 1 (`bernstein upgrade` moves it on).
func (t *Tx) MintRepository(id string) (bool, error) {
	format, have, err := t.Format()
	if err != nil || have != "" || format != record.FormatLegacy {
		return false, err
	}
	if busy, err := t.HasChains(); err != nil || busy {
		return false, err
	}
	return true, t.appendRepository(id, record.FormatCurrent, gitstore.EmptyTree)
}

// RestoreRepository moves refs/bernstein/repository back to the identity
// this host's writer recorded, when the ref does not name it (verify.
// Binding.Ref), with a compare-and-swap over the value read. It returns
// whether it does.
func (t *Tx) RestoreRepository() (bool, error) {
	b := t.env.Binding
	if b == nil || b.Ref == "" {
		return false, nil
	}
	c, err := t.chain(refs.Repository, func(*Chain) error { return nil })
	if err != nil {
		return false, err
	}
	if c.head == c.old {
		return false, nil
	}
	c.dirty = true
	return true, nil
}

// restoreIdentity moves refs/bernstein/repository back to the identity
// this host's writer recorded, with the rest of a transaction that writes
// anything, when the ref does not name it (verify.Binding.Ref: garbled, a
// blob, deleted, another repository's identity) and the repository still
// holds it; a repository created again at the same path does not, and
// has no such binding. It returns the warning that names the ref, "" when
// it moves nothing; a ref it cannot move stays for `bernstein init`, and
// the write goes on.
func (t *Tx) restoreIdentity() string {
	b := t.env.Binding
	if b == nil || b.Ref == "" || t.chains[refs.Repository] != nil {
		return ""
	}
	writes := false
	for _, c := range t.chains {
		writes = writes || c.dirty && c.head != c.old
	}
	if !writes {
		return ""
	}
	ok, err := t.RestoreRepository()
	if err != nil || !ok {
		delete(t.chains, refs.Repository)
		return ""
	}
	at := "none"
	if !b.RefAt.IsZero() {
		at = b.RefAt.String()
	}
	return fmt.Sprintf("%s (at %s) was tampered with: %s; it is moved back to the identity this host's writer recorded for the repository, %s", refs.Repository, at, strings.TrimSuffix(b.Ref, verify.RepositoryRefRepair), b.Head)
}

// LegacyChain is one chain of a format-1 repository: its kind, task or
// writer, and first commit.
type LegacyChain struct {
	Kind, Name string
	First      gitstore.Oid
}

// LegacyChains lists the chains of the repository rooted in "" (format 1):
// those an upgrade to format 2 binds to the identity it mints.
func (t *Tx) LegacyChains() ([]LegacyChain, error) {
	var out []LegacyChain
	for _, p := range []string{refs.JournalPrefix, refs.LedgerPrefix, refs.SpinePrefix, refs.AuditPrefix} {
		vals, names, err := t.w.c.Refs.List(p)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			kind, name, ok := rootOf(n)
			if !ok {
				continue // a ref bernstein does not write: nothing to bind
			}
			first, prev, err := chainRoot(t.w.c.Objects, vals[n], kind)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			if prev == "" {
				out = append(out, LegacyChain{Kind: kind, Name: name, First: first})
			}
		}
	}
	return out, nil
}

// chainRoot walks a chain to its first commit and returns it with its
// record's link to what came before ("" in format 1).
func chainRoot(objs *gitstore.Repo, head gitstore.Oid, kind string) (gitstore.Oid, string, error) {
	id := head
	for seen := 0; ; seen++ {
		data, err := objs.ReadType(id, gitstore.TypeCommit)
		if err != nil {
			return gitstore.ZeroOid, "", err
		}
		c, err := gitstore.ParseCommitLinks(data)
		if err != nil {
			return gitstore.ZeroOid, "", err
		}
		if len(c.Parents) > 0 {
			id = c.Parents[0]
			continue
		}
		cc, err := chain.Read(objs, id)
		if err != nil {
			return gitstore.ZeroOid, "", err
		}
		switch kind {
		case record.ChainSpine:
			e, err := record.ParseSpineEntry(cc.Record)
			return id, string(e.Header.Prev), err
		case record.ChainAudit:
			a, err := record.ParseAuditEntry(cc.Record)
			return id, a.PrevHMAC, err
		}
		r, err := record.ParseRow(cc.Record)
		return id, string(r.Prev), err
	}
}

// UpgradeFromLegacy mints the identity id of a format-1 repository and
// binds every chain it holds (rooted in "") to it: the repository chain's
// first commit lists each (verify.LegacyRoot) in its tree. Chains made
// later in format 1, or copied here, are not listed and are foreign.
func (t *Tx) UpgradeFromLegacy(id string, chains []LegacyChain) error {
	format, have, err := t.Format()
	if err != nil {
		return err
	}
	if have != "" || format != record.FormatLegacy {
		return fmt.Errorf("the repository is in storage format %d already", format)
	}
	tree, err := t.legacyTree(chains)
	if err != nil {
		return err
	}
	return t.appendRepository(id, record.FormatIdentity, tree)
}

// legacyTree builds the tree that lists chains: legacy/<kind>/<xx>/<name>,
// each a blob holding the chain's first commit id.
func (t *Tx) legacyTree(chains []LegacyChain) (gitstore.Oid, error) {
	blobs := make(map[string]gitstore.Oid, len(chains))
	for _, c := range chains {
		blobs[verify.LegacyRoot(c.Kind, c.Name)] = t.addBlob([]byte(c.First.String() + "\n"))
	}
	if len(blobs) == 0 {
		return gitstore.EmptyTree, nil
	}
	tree, trees, err := gitstore.TreeOf(blobs)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	t.objects = append(t.objects, trees...)
	return tree, nil
}

// RaiseFormat appends a record that raises the repository's format to
// format: the step a later storage change adds to `bernstein upgrade`,
// after doing what the format needs. The tree (the bound format-1 chains)
// is kept.
func (t *Tx) RaiseFormat(format int) error {
	cur, id, err := t.Format()
	if err != nil {
		return err
	}
	if id == "" || format <= cur {
		return fmt.Errorf("cannot raise storage format %d to %d", cur, format)
	}
	head := t.env.Binding.Head
	cc, err := chain.Read(t.w.c.Objects, head)
	if err != nil {
		return err
	}
	return t.appendRepository(id, format, cc.Commit.Tree)
}

// appendRepository appends a record of the repository chain, signed, with
// tree, and makes the rest of the transaction root its new chains in the
// identity.
func (t *Tx) appendRepository(id string, format int, tree gitstore.Oid) error {
	c, err := t.chain(refs.Repository, func(c *Chain) error {
		cc, err := chain.Read(t.w.c.Objects, c.head)
		if err != nil {
			return fmt.Errorf("%s: %w", refs.Repository, err)
		}
		r, err := record.ParseRepositoryRecord(cc.Record)
		if err != nil {
			return fmt.Errorf("%s: %w", refs.Repository, err)
		}
		c.next, c.last = r.Seq+1, string(record.Sum(cc.Record))
		return nil
	})
	if err != nil {
		return err
	}
	rec := record.RepositoryRecord{V: record.Version, Kind: record.KindRepository, ID: id, Format: format, Seq: c.next, Prev: record.Hash(c.last), Writer: t.id.Writer}
	b, err := record.Canonical(rec)
	if err != nil {
		return err
	}
	if err := t.addCommit(c, tree, t.id.Writer, record.Message(fmt.Sprintf("repository %s format %d", id, format), b), true); err != nil {
		return err
	}
	c.next, c.last = c.next+1, string(record.Sum(b))
	t.env.Binding = verify.NewBinding(id, format)
	return nil
}
