package record

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// A repository written in storage format 2 or later has an identity: a
// random id minted once, by the first `bernstein init` of a repository that
// has no chain yet (or by `bernstein upgrade` of a format-1 one), kept as
// the first record of the chain refs/bernstein/repository. A clone has the
// same identity; a repository created again at the same path mints another.
// Every chain of such a repository is rooted in it: the prev of its first
// record is the chain's genesis hash (Genesis), which names the identity,
// the chain's kind and its name, so a task, spine or audit mirror copied
// from another repository is rooted elsewhere and grants nothing here.

// Storage format versions (the format a repository is in is the format of
// the newest record of its repository chain; a repository without one is in
// format 1).
const (
	// FormatLegacy: chains rooted in "" and keys published in
	// refs/bernstein/writers/<writer>; no repository identity.
	FormatLegacy = 1
	// FormatIdentity: a repository identity, chains rooted in their genesis
	// hashes, keys published in refs/bernstein/writers/<writer>.<key>.
	FormatIdentity = 2
	// FormatArchive: the archive of ended tasks (refs/bernstein/archive/
	// <writer>, docs/archive.md) may hold a task's chains instead of its
	// refs.
	FormatArchive = 3
	// FormatCurrent is the format this version writes and upgrades to.
	FormatCurrent = FormatArchive
)

// KindRepository is the kind of a repository record.
const KindRepository = "repository"

// RepositoryRecord is one record of the repository chain: seq 0 mints the
// identity, each later one raises the format (an upgrade step). ID is the
// same in every record; Format never decreases.
type RepositoryRecord struct {
	V      int    `json:"v"`
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	Format int    `json:"format"`
	Seq    int64  `json:"seq"`
	Prev   Hash   `json:"prev"`
	Writer string `json:"writer"`
}

// ValidateRepositoryID checks a repository id: 32 lowercase hex digits
// (128 random bits).
func ValidateRepositoryID(id string) error {
	if len(id) != 32 {
		return fmt.Errorf("repository id %q: want 32 lowercase hex digits", id)
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("repository id %q: want 32 lowercase hex digits", id)
		}
	}
	return nil
}

// ParseRepositoryRecord parses canonical repository record bytes.
func ParseRepositoryRecord(b []byte) (RepositoryRecord, error) {
	var r RepositoryRecord
	if err := decodeExact(b, &r); err != nil {
		if errors.Is(err, ErrNotCanonical) {
			return RepositoryRecord{}, err
		}
		return RepositoryRecord{}, fmt.Errorf("repository record: %w", err)
	}
	if r.V != Version {
		return RepositoryRecord{}, fmt.Errorf("repository record: unsupported version %d", r.V)
	}
	if r.Kind != KindRepository {
		return RepositoryRecord{}, fmt.Errorf("repository record: kind %q", r.Kind)
	}
	if err := ValidateRepositoryID(r.ID); err != nil {
		return RepositoryRecord{}, fmt.Errorf("repository record: %w", err)
	}
	if r.Format < FormatIdentity || r.Seq < 0 {
		return RepositoryRecord{}, fmt.Errorf("repository record: format %d, seq %d", r.Format, r.Seq)
	}
	return r, nil
}

// Chain kinds a genesis hash names.
const (
	ChainJournal = "journal"
	ChainLedger  = "ledger"
	ChainSpine   = "spine"
	ChainAudit   = "audit"
	// ChainArchive is the kind of a writer's archive of ended tasks.
	ChainArchive = "archive"
)

// Genesis is the prev of the first record of the chain of kind (journal,
// ledger: name is the task id; spine, audit: the writer) in the repository
// whose id is id: sha256 of "bernstein genesis v1", the id, the kind and the
// name, one per line. A repository without an identity (format 1) roots its
// chains in "".
func Genesis(id, kind, name string) Hash {
	if id == "" {
		return ""
	}
	return Hash("sha256:" + GenesisHex(id, kind, name))
}

// GenesisHex is the genesis digest in lowercase hex: the prev_hmac of an
// audit mirror's first entry.
func GenesisHex(id, kind, name string) string {
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("bernstein genesis v1\n" + id + "\n" + kind + "\n" + name))
	return hex.EncodeToString(sum[:])
}

// GenesisLink is what the first record of a chain of kind links to: the
// genesis hash, or for an audit mirror its hex digest.
func GenesisLink(id, kind, name string) string {
	if kind == ChainAudit {
		return GenesisHex(id, kind, name)
	}
	return string(Genesis(id, kind, name))
}
