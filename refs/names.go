// Package refs owns the names of bernstein's refs (with the injective escape
// of task ids into ref components), reading refs the way git stores them, and
// atomic multi-ref transactions that respect git's own lock files.
package refs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein/internal/ident"
)

// Prefix is the namespace bernstein writes; nothing outside it is touched.
const Prefix = "refs/bernstein/"

// Ref namespaces.
const (
	JournalPrefix = Prefix + "journal/"
	LedgerPrefix  = Prefix + "ledger/"
	SpinePrefix   = Prefix + "spine/"
	AuditPrefix   = Prefix + "audit/"
	// WritersPrefix holds one ref per writer, publishing its public key:
	// each writer appends to its own, so keys from many hosts merge without
	// a conflict and no push needs force.
	WritersPrefix = Prefix + "writers/"
	// Keys is where writers published their keys before WritersPrefix: one
	// ref for all, still read.
	Keys = Prefix + "keys"
	// Repository is the chain of the repository's identity and storage
	// format (record.RepositoryRecord); format-1 repositories have none.
	Repository = Prefix + "repository"
	// AnchorsPrefix holds one ref per writer whose commits keep the project
	// commits its work rows name reachable, so they travel with the journal.
	AnchorsPrefix = Prefix + "anchors/"
	// ForksPrefix holds, per writer, the heads of a task's journal and ledger
	// as that writer had them when they diverged from the shared task
	// (Fork).
	ForksPrefix = Prefix + "forks/"
	// CheckpointsPrefix holds one ref per writer: the chain of its log's
	// signed checkpoints, each with the witnesses' cosignatures
	// (record.LogCheckpoint; docs/format.md, Checkpoints).
	CheckpointsPrefix = Prefix + "checkpoints/"
	// ArchivePrefix holds one ref per writer: the chain of its archive of
	// ended tasks (record.Archive; docs/archive.md), whose trees hold the
	// archived tasks' journal and ledger heads.
	ArchivePrefix = Prefix + "archive/"
)

// KeyScope is what a snapshot needs to prove rows: the published keys and
// the repository's identity, in which every chain is rooted.
var KeyScope = []string{Keys, WritersPrefix, Repository}

// Writer returns the ref that publishes writer's key in a format-1
// repository: one ref per writer name, which a second key for the name
// would contend for.
func Writer(writer string) string { return WritersPrefix + writer }

// WriterKey returns the ref that publishes one key of writer from storage
// format 2 on: the name and the key's SHA-256 fingerprint in lowercase hex
// (KeyHex), so that two keys published under one name are two refs that
// never contend. '.' never occurs in a writer name, and refs/bernstein/
// writers/<writer> (a format-1 ref) is a file beside it, not a folder.
func WriterKey(writer, keyHex string) string { return WritersPrefix + writer + "." + keyHex }

// KeyHex is the SHA-256 of a public key's wire form in lowercase hex: the
// bytes of its "SHA256:" fingerprint, written so a ref name can hold them.
func KeyHex(wire []byte) string {
	sum := sha256.Sum256(wire)
	return hex.EncodeToString(sum[:])
}

// ParseWriterRef reads a ref under WritersPrefix: the writer, and the key's
// hex fingerprint for a format-2 ref ("" for refs/bernstein/writers/<writer>).
func ParseWriterRef(ref string) (writer, keyHex string, err error) {
	name, ok := strings.CutPrefix(ref, WritersPrefix)
	if !ok {
		return "", "", fmt.Errorf("%s is not a writers ref", ref)
	}
	writer, keyHex, dotted := strings.Cut(name, ".")
	if err := ValidateWriter(writer); err != nil {
		return "", "", err
	}
	if dotted && !isKeyHex(keyHex) {
		return "", "", fmt.Errorf("%s: %q is not a key's SHA-256 in lowercase hex", ref, keyHex)
	}
	return writer, keyHex, nil
}

func isKeyHex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidateTaskID returns an error naming what is wrong with a task id.
func ValidateTaskID(id string) error {
	if id == "" {
		return fmt.Errorf("task id is empty")
	}
	if len(id) > 128 {
		return fmt.Errorf("task id is %d bytes long (at most 128)", len(id))
	}
	if strings.Contains(id, "..") {
		return fmt.Errorf("task id %q contains \"..\"", id)
	}
	if !ident.Match(id, 128, "_.:-", false) {
		return fmt.Errorf("task id %q is invalid: use letters, digits and _ . : - and start with a letter or digit", printable(id))
	}
	return nil
}

// ValidateWriter returns an error naming what is wrong with a writer id.
func ValidateWriter(w string) error {
	if !ident.Match(w, 64, "-", true) {
		return fmt.Errorf("writer id %q is invalid: use 1 to 64 of a-z 0-9 -", printable(w))
	}
	return nil
}

// printable quotes control characters so an error message stays one line.
func printable(s string) string {
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

// EscapeTask maps a valid task id to a ref component, injectively: ':' (which
// git forbids) becomes %3A, and a trailing '.' or a trailing ".lock" has its
// dot written %2E. '%' never occurs in a task id, so the map inverts.
func EscapeTask(id string) string {
	s := strings.ReplaceAll(id, ":", "%3A")
	switch {
	case strings.HasSuffix(s, ".lock"):
		s = s[:len(s)-5] + "%2Elock"
	case strings.HasSuffix(s, "."):
		s = s[:len(s)-1] + "%2E"
	}
	return s
}

// UnescapeTask inverts EscapeTask.
func UnescapeTask(c string) (string, error) {
	s := strings.ReplaceAll(c, "%3A", ":")
	s = strings.ReplaceAll(s, "%2E", ".")
	if strings.Contains(s, "%") || EscapeTask(s) != c {
		return "", fmt.Errorf("ref component %q is not an escaped task id", c)
	}
	if err := ValidateTaskID(s); err != nil {
		return "", err
	}
	return s, nil
}

// Journal is the ref of a task's journal.
func Journal(task string) string { return JournalPrefix + EscapeTask(task) }

// Ledger is the ref of a task's ledger.
func Ledger(task string) string { return LedgerPrefix + EscapeTask(task) }

// Spine is the ref of a writer's lineage spine.
func Spine(writer string) string { return SpinePrefix + writer }

// Audit is the ref of a writer's audit mirror.
func Audit(writer string) string { return AuditPrefix + writer }

// Anchors is the ref of a writer's anchors.
func Anchors(writer string) string { return AnchorsPrefix + writer }

// Archive is the ref of a writer's archive of ended tasks.
func Archive(writer string) string { return ArchivePrefix + writer }

// Checkpoints returns the ref of writer's log checkpoints.
func Checkpoints(writer string) string { return CheckpointsPrefix + writer }

// Fork is the ref of writer's fork of task's chain of kind (journal or
// ledger) that shares its first base rows with the task's chain: the head
// that writer's chain had when it diverged from the shared one. One name
// per divergence, so a task that diverges again forks anew.
func Fork(writer, kind, task string, base int64) string {
	return fmt.Sprintf("%s%s/%s/%s/%d", ForksPrefix, writer, kind, EscapeTask(task), base)
}

// ForkPrefix is where writer's forks of task's chain of kind are.
func ForkPrefix(writer, kind, task string) string {
	return fmt.Sprintf("%s%s/%s/%s/", ForksPrefix, writer, kind, EscapeTask(task))
}

// ParseFork splits a fork ref into its writer, chain kind (journal or
// ledger), task and base.
func ParseFork(ref string) (writer, kind, task string, base int64, err error) {
	rest, ok := strings.CutPrefix(ref, ForksPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 || parts[1] != "journal" && parts[1] != "ledger" {
		return "", "", "", 0, fmt.Errorf("%s is not a fork ref (%s<writer>/<journal|ledger>/<task>/<base>)", ref, ForksPrefix)
	}
	if err := ValidateWriter(parts[0]); err != nil {
		return "", "", "", 0, err
	}
	if task, err = UnescapeTask(parts[2]); err != nil {
		return "", "", "", 0, err
	}
	n, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != parts[3] {
		return "", "", "", 0, fmt.Errorf("%s: the base %q is not a row count", ref, parts[3])
	}
	return parts[0], parts[1], task, n, nil
}
