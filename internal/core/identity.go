package core

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/atomicfile"
	"github.com/bernstein/bernstein/record"
)

// The identity this host's writer saw (docs/trust.md, A row belongs to one
// repository): refs/bernstein/repository is a ref like any other, which
// plain git can garble, point at a blob, delete or move to another
// repository's identity record; every chain would then read as foreign and
// no write could go on. So BERNSTEIN_HOME keeps, per repository path
// (PathID, for the identity is what is in doubt), the id and the head of
// the repository chain its writer last read whole. While this repository's
// objects hold that head as a record of that id, the repository is the one
// recorded: reads bind to it and report the ref as tampered, and `bernstein
// init` moves the ref back. A repository created again at the same path
// does not hold the record, and is a new repository.

const recordedMagic = "bernstein repository identity v1\n"

// recordedPath is where BERNSTEIN_HOME keeps the identity recorded for
// this repository's path.
func (r *Repo) recordedPath() string {
	return filepath.Join(r.Home, "repositories", r.PathID()+".identity")
}

// recordedState is what RecordedIdentity read, under the file's stamp.
type recordedState struct {
	stamp fileStamp
	id    string
	head  gitstore.Oid
	ok    bool
}

// RecordedIdentity returns the identity this host's writer recorded for
// the repository at this path (its id and the repository chain's head),
// when this repository's objects hold that head as a record of that id.
func (r *Repo) RecordedIdentity() (id string, head gitstore.Oid, ok bool) {
	path := r.recordedPath()
	stamp := pathStamp(path)
	r.identMu.Lock()
	defer r.identMu.Unlock()
	if r.recorded.stamp == stamp && stamp.exists {
		return r.recorded.id, r.recorded.head, r.recorded.ok
	}
	st := recordedState{stamp: stamp}
	if b, err := os.ReadFile(path); err == nil {
		if rest, found := bytes.CutPrefix(b, []byte(recordedMagic)); found {
			f := strings.Split(string(rest), "\n")
			if len(f) == 3 && f[2] == "" {
				if h, err := gitstore.ParseOid(f[1]); err == nil && recordID(r.Objects, h) == f[0] && f[0] != "" {
					st.id, st.head, st.ok = f[0], h, true
				}
			}
		}
	}
	r.recorded = st
	return st.id, st.head, st.ok
}

// RecordIdentity keeps id, whose repository chain's head is head, as the
// identity of the repository at this path, unless it is kept already. The
// writer calls it with an identity it read whole and untampered.
func (r *Repo) RecordIdentity(id string, head gitstore.Oid) error {
	if id == "" || head.IsZero() {
		return nil
	}
	if have, h, ok := r.RecordedIdentity(); ok && have == id && h == head {
		return nil
	}
	path := r.recordedPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, []byte(recordedMagic+id+"\n"+head.String()+"\n"), 0o600)
}

// recordID is the id the repository record at id names, "" when it does
// not read as one.
func recordID(objs *gitstore.Repo, id gitstore.Oid) string {
	if id.IsZero() {
		return ""
	}
	cc, err := chain.Read(objs, id)
	if err != nil {
		return ""
	}
	rec, err := record.ParseRepositoryRecord(cc.Record)
	if err != nil {
		return ""
	}
	return rec.ID
}

// pathStamp is the state of the file at path (the zero fileStamp: missing).
func pathStamp(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	f := fileStamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.ino = uint64(sys.Ino)
	}
	return f
}

// IdentityOver is the head refs/bernstein/repository, at value, is taken
// to be where it goes on (push sends it): the head of the identity this
// host's writer recorded (RecordedIdentity), when value does not hold it
// (garbled, a blob, another repository's record); ok is false when there
// is none recorded or value is that head or a record after it.
func (r *Repo) IdentityOver(value gitstore.Oid) (gitstore.Oid, bool) {
	_, head, ok := r.RecordedIdentity()
	if !ok {
		return gitstore.ZeroOid, false
	}
	at := value
	for n := 0; n < 1024 && !at.IsZero(); n++ {
		if at == head {
			return gitstore.ZeroOid, false
		}
		cc, err := chain.Read(r.Objects, at)
		if err != nil || len(cc.Commit.Parents) == 0 {
			break
		}
		at = cc.Commit.Parents[0]
	}
	return head, true
}
