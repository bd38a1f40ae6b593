package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
)

// The checks of one row on its own, for a reader that checks a segment of a
// chain rather than the whole of it (the remote guard checks only the rows a
// push adds). Task applies the same functions to every row it walks, so the
// two never disagree on what a row must hold.

// RowContent checks what the journal row recorded by a commit with tree
// stores: the tree holds exactly the row's own files, an artifact version's
// blob re-hashes to the row's blob id, content hash and size and parses as
// the payload type the row names, and a work row's output re-hashes to what
// the row says. Each failure carries the row's position.
func RowContent(objs *gitstore.Repo, row record.Row, tree gitstore.Oid) []Failure {
	treeErr := checkRowTree(row, tree)
	at := func(check, reason string) Failure {
		return Failure{TaskID: row.TaskID, JournalIndex: i64(row.Index), Check: check, Reason: reason}
	}
	var fs []Failure
	if row.Kind != record.KindArtifactPosted {
		if treeErr != nil {
			fs = append(fs, at("journal_tree", fmt.Sprintf("%s row at journal index %d: %v", row.Kind, row.Index, treeErr)))
		}
		if reason := outputFault(objs, row); reason != "" {
			fs = append(fs, at("output", reason))
		}
		return fs
	}
	var a record.ArtifactPosted
	if err := row.DecodeData(&a); err != nil {
		return append(fs, at("journal_chain", err.Error()))
	}
	ver := Version{Key: a.Key, Version: a.Version, Type: a.ArtifactType, LinkKind: a.LinkKind, ContentHash: a.ContentHash,
		Blob: a.Blob, Size: a.Size, JournalIndex: row.Index}
	where := fmt.Sprintf("%s v%d at journal index %d", ver.Key, ver.Version, ver.JournalIndex)
	f := func(check, reason string) Failure {
		x := at(check, reason)
		x.Key, x.Version = a.Key, i64(a.Version)
		return x
	}
	if _, check, reason := checkPayload(objs, &ver, where); check != "" {
		return append(fs, f(check, reason))
	}
	if treeErr != nil {
		fs = append(fs, f("journal_tree", fmt.Sprintf("%s: %v", where, treeErr)))
	}
	return fs
}

// checkPayload re-hashes the blob of an artifact version, never trusting the
// object store's name for it, and returns its bytes, or the failing check
// and why.
func checkPayload(objs *gitstore.Repo, ver *Version, where string) (data []byte, check, reason string) {
	blobID, err := gitstore.ParseOid(ver.Blob)
	if err != nil {
		return nil, "blob", fmt.Sprintf("%s: bad blob id: %v", where, err)
	}
	t, data, err := objs.Read(blobID)
	switch {
	case errors.Is(err, gitstore.ErrMissing):
		return nil, "blob", fmt.Sprintf("%s: blob %s is missing", where, blobID)
	case err != nil:
		return nil, "blob", fmt.Sprintf("%s: blob %s unreadable: %v", where, blobID, err)
	case t != gitstore.TypeBlob:
		return nil, "blob", fmt.Sprintf("%s: object %s is a %s, not a blob", where, blobID, t)
	}
	sum := sha256.Sum256(data)
	switch {
	case gitstore.HashObject(gitstore.TypeBlob, data) != blobID:
		return nil, "blob", fmt.Sprintf("%s: stored bytes do not hash to blob %s", where, blobID)
	case record.Hash(record.HashPrefix+hex.EncodeToString(sum[:])) != ver.ContentHash:
		return nil, "content_hash", fmt.Sprintf("%s: stored bytes do not hash to the row's content hash", where)
	case int64(len(data)) != ver.Size:
		return nil, "blob", fmt.Sprintf("%s: stored bytes are %d long, the row says %d", where, len(data), ver.Size)
	}
	p, err := artifact.Parse(data)
	if err != nil {
		return nil, "payload", fmt.Sprintf("%s: payload does not parse: %v", where, err)
	}
	if p.Type != ver.Type || p.LinkKind != ver.LinkKind {
		return nil, "payload", fmt.Sprintf("%s: payload is a %s, the row says %s", where, p.Type, ver.Type)
	}
	return data, "", ""
}

// BindingDiff lists the fields in which spine entry e (of writer
// entryWriter) does not bind version ver of task, posted by actor in a row
// whose commit writer rowWriter signed ("" when unknown): empty when the
// entry seals exactly that version.
func BindingDiff(task string, ver *Version, actor, rowWriter string, e *record.SpineArtifactEntry, entryWriter string) []string {
	var diff []string
	if e.TaskID != task {
		diff = append(diff, "task_id")
	}
	if e.Key != ver.Key {
		diff = append(diff, "key")
	}
	if e.Version != ver.Version {
		diff = append(diff, "version")
	}
	if e.ContentHash != ver.ContentHash {
		diff = append(diff, "content_hash")
	}
	if e.PrevVersionHash != ver.PrevVersionHash {
		diff = append(diff, "prev_version_hash")
	}
	if e.JournalIndex != ver.JournalIndex {
		diff = append(diff, "journal_index")
	}
	if e.Actor != actor {
		diff = append(diff, "actor")
	}
	if rowWriter != "" && entryWriter != rowWriter {
		diff = append(diff, "writer")
	}
	return diff
}

// CheckSealSignature checks the detached signature a journal seal's spine
// commit c carries in its tree over the seal entry's canonical bytes, by the
// key that signed the commit (whose trust ProveCommit decides).
func CheckSealSignature(env *Env, c gitstore.Commit, entry []byte) error {
	return checkSealSignature(env, c.Signature, c.Tree, entry)
}
