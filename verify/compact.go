package verify

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/bernstein/bernstein/record"
)

// The spine and audit indexes hold one small entry per spine or audit entry
// of the repository, keyed by the 32 bytes of a hash rather than by its
// 71-character string, with the strings many entries share (task ids, keys,
// actors) held once, so that the memory of a whole-repository walk grows by
// little more than those bytes per entry.

// hash32 is a record.Hash held compactly: its 32 bytes when it is in the
// canonical form record.Sum writes, else the string as it was.
type hash32 struct {
	b     [32]byte
	other string // when not canonical ("" included)
	canon bool
}

func toHash32(h record.Hash) hash32 {
	if b, ok := hashBytes(string(h)); ok {
		return hash32{b: b, canon: true}
	}
	return hash32{other: string(h)}
}

// Hash returns the hash as a string.
func (h hash32) Hash() record.Hash {
	if !h.canon {
		return record.Hash(h.other)
	}
	return record.Hash(record.HashPrefix + hex.EncodeToString(h.b[:]))
}

// hashBytes returns the 32 bytes of s when s is "sha256:" and 64 lowercase
// hex digits, the only form record.Sum writes.
func hashBytes(s string) (b [32]byte, ok bool) {
	const n = len(record.HashPrefix)
	if len(s) != n+64 || s[:n] != record.HashPrefix {
		return b, false
	}
	for i := 0; i < 32; i++ {
		hi, ok1 := lowerHex(s[n+2*i])
		lo, ok2 := lowerHex(s[n+2*i+1])
		if !ok1 || !ok2 {
			return b, false
		}
		b[i] = hi<<4 | lo
	}
	return b, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ArtifactSeal is what a spine entry of kind artifact binds, held
// compactly: the task and key (which lists and counts need), the version
// and journal index (which failures name), and a SHA-256 digest of every
// field the entry binds. A row that binds the same fields has the same
// digest; a row whose digest differs has the entry read again, so that
// BindingDiff names the fields that differ from the entry itself.
type ArtifactSeal struct {
	TaskID, Key           string
	Version, JournalIndex int64
	binding               [32]byte
}

// bindingDigest is the SHA-256 of an injective encoding of what an artifact
// spine entry binds (each string length-prefixed, each number 8 bytes).
func bindingDigest(task, key string, version int64, content, prev record.Hash, journalIndex int64, actor string) [32]byte {
	var stack [512]byte
	b := stack[:0]
	for _, s := range []string{task, key, string(content), string(prev), actor} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(version))
	b = binary.BigEndian.AppendUint64(b, uint64(journalIndex))
	return sha256.Sum256(b)
}

func entryDigest(a *record.SpineArtifactEntry) [32]byte {
	return bindingDigest(a.TaskID, a.Key, a.Version, a.ContentHash, a.PrevVersionHash, a.JournalIndex, a.Actor)
}

// interner holds one copy of each string many entries share.
type interner map[string]string

func (in interner) of(s string) string {
	if v, ok := in[s]; ok {
		return v
	}
	in[s] = s
	return s
}
