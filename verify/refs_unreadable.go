package verify

import (
	"errors"
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// CheckFork names the failure of a fork ref that cannot be read as one.
const CheckFork = "fork_chain"

// looseNoOid is the reason given for a ref whose loose file holds no
// object id (its value a gitstore.LooseStandIn).
const looseNoOid = "its loose file holds no object id"

// unreadableRefs names every ref under refs/bernstein/ (but a task's
// journal and ledger, which their tasks' checks name) that cannot be read
// as its kind (docs/trust.md, Refs that cannot be read): a key, checkpoint,
// anchor or fork ref naming an object that is missing, not a commit or a
// commit that carries no record, which every reader reads past, and any
// ref whose loose file holds no object id, which the checks of spines,
// audit mirrors, archives and the identity find broken without naming the
// file. An error of the object store itself is returned.
func unreadableRefs(env *Env) ([]Failure, error) {
	vals, names, err := env.Refs.List(refs.Prefix)
	if err != nil {
		return nil, err
	}
	var out []Failure
	for _, ref := range names {
		if _, task := refs.TaskOf(ref); task {
			continue
		}
		at := vals[ref]
		check, writer, read := refCheck(ref)
		if check == "" {
			continue
		}
		bad := func(reason string) {
			out = append(out, Failure{Writer: writer, Check: check, Reason: refs.BadRef{Ref: ref, At: at, Reason: reason}.String()})
		}
		if at.IsLooseStandIn() {
			bad(looseNoOid)
			continue
		}
		if read == nil {
			continue // its own walk reads it, and names what it finds
		}
		if _, err := read(env.Objects, at); err != nil {
			if !unreadableObject(err) {
				return nil, err
			}
			bad(err.Error())
		}
	}
	return out, nil
}

// refCheck is the check that names ref when it cannot be read, the writer
// it is of, and how its head is read (nil: by its own walk, for spines,
// audit mirrors, archives and the identity).
func refCheck(ref string) (check, writer string, read func(*gitstore.Repo, gitstore.Oid) (chain.Commit, error)) {
	switch {
	case strings.HasPrefix(ref, refs.SpinePrefix):
		return "spine_chain", strings.TrimPrefix(ref, refs.SpinePrefix), nil
	case strings.HasPrefix(ref, refs.AuditPrefix):
		return "audit_chain", strings.TrimPrefix(ref, refs.AuditPrefix), nil
	case strings.HasPrefix(ref, refs.ArchivePrefix):
		return CheckArchiveChain, strings.TrimPrefix(ref, refs.ArchivePrefix), nil
	case ref == refs.Repository:
		return CheckRepositoryIdentity, "", nil
	case strings.HasPrefix(ref, refs.WritersPrefix):
		w, _, _ := refs.ParseWriterRef(ref)
		return "key_record", w, chain.Read
	case ref == refs.Keys:
		return "key_record", "", chain.Read
	case strings.HasPrefix(ref, refs.CheckpointsPrefix):
		return "checkpoints_chain", strings.TrimPrefix(ref, refs.CheckpointsPrefix), chain.Read
	case strings.HasPrefix(ref, refs.AnchorsPrefix):
		return "anchors_chain", strings.TrimPrefix(ref, refs.AnchorsPrefix), readAnchor
	case strings.HasPrefix(ref, refs.ForksPrefix):
		w, _, _, _, _ := refs.ParseFork(ref)
		return CheckFork, w, chain.Read
	}
	return "", "", nil
}

// unreadableObject reports an error that says the object read is at
// fault (missing, corrupt, not a chain commit), not the disk.
func unreadableObject(err error) bool {
	return errors.Is(err, chain.ErrUnreadable) || errors.Is(err, gitstore.ErrMissing) || errors.Is(err, gitstore.ErrCorrupt) ||
		errors.Is(err, chain.ErrNotLinear)
}

// readAnchor is chain.ReadAnchor with a commit that carries no record
// marked as chain.ErrUnreadable (the object's fault, as chain.Read marks it).
func readAnchor(objs *gitstore.Repo, id gitstore.Oid) (chain.Commit, error) {
	if _, err := objs.ReadType(id, gitstore.TypeCommit); err != nil {
		return chain.Commit{ID: id}, err
	}
	cc, err := chain.ReadAnchor(objs, id)
	if err != nil {
		return cc, chain.Unreadable(err)
	}
	return cc, nil
}
