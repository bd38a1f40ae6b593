package taskops

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/record"
)

// Rerecord records again, on top of the chain `task adopt` took as the
// truth, a journal row this host's writer wrote to task on its own chain,
// which the adoption dropped: an artifact version as the next version of its
// key (with the payload it had), a work row as work again (its output, its
// commits) where the work still holds: the commits it names are in this
// repository and the task has not ended. It reports whether the row was
// recorded, and why not when it was not. The payloads are read from the
// repository (objs), where the dropped row's commit keeps them.
func Rerecord(t *txn.Tx, objs *gitstore.Repo, task string, row record.Row) (bool, string, error) {
	switch row.Kind {
	case record.KindArtifactPosted:
		var d record.ArtifactPosted
		if err := row.DecodeData(&d); err != nil {
			return false, "", fmt.Errorf("row %d: %w", row.Index, err)
		}
		payload, why := blob(objs, d.Blob)
		if why != "" {
			return false, why, nil
		}
		if _, err := appendPost(t, Post{Task: task, Key: d.Key, Agent: row.Actor, Type: d.ArtifactType, LinkKind: d.LinkKind, Payload: payload}); err != nil {
			return false, "", err
		}
		return true, "", nil
	case record.KindCheckpoint:
		var d record.Checkpoint
		if err := row.DecodeData(&d); err != nil {
			return false, "", fmt.Errorf("row %d: %w", row.Index, err)
		}
		if why := commitsHere(objs, d.Commit); why != "" {
			return false, why, nil
		}
		return rerecorded(Checkpoint(t, task, row.Actor, d))
	case record.KindDiffCaptured:
		var d record.DiffCaptured
		if err := row.DecodeData(&d); err != nil {
			return false, "", fmt.Errorf("row %d: %w", row.Index, err)
		}
		if why := commitsHere(objs, d.Base, d.Head); why != "" {
			return false, why, nil
		}
		w, ok, why, err := again(t, objs, task, row, &d.Patch, &d)
		if !ok || err != nil {
			return false, why, err
		}
		return true, "", anchor(t, task, w.RowHash, d.Base, d.Head)
	case record.KindGateAttempt:
		var d record.GateAttempt
		if err := row.DecodeData(&d); err != nil {
			return false, "", fmt.Errorf("row %d: %w", row.Index, err)
		}
		_, ok, why, err := again(t, objs, task, row, &d.Output, &d)
		return ok, why, err
	case record.KindEvidenceResult:
		var d record.EvidenceResult
		if err := row.DecodeData(&d); err != nil {
			return false, "", fmt.Errorf("row %d: %w", row.Index, err)
		}
		_, ok, why, err := again(t, objs, task, row, &d.Output, &d)
		return ok, why, err
	}
	return false, fmt.Sprintf("a %s row is not recorded again", row.Kind), nil
}

// again records a work row whose output (out, inside data) is stored in the
// journal tree, at the path the new row's index gives it.
func again(t *txn.Tx, objs *gitstore.Repo, task string, r record.Row, out *record.Output, data any) (*Work, bool, string, error) {
	stored, why := blob(objs, out.Blob)
	if why != "" {
		return nil, false, why, nil
	}
	name, ext := outputName(out.Path)
	index, _, err := t.NextJournalRow(task)
	if err != nil {
		return nil, false, "", err
	}
	path := fmt.Sprintf("outputs/%06d-%s.%s", index, name, ext)
	out.Path = path // out is inside data
	w, err := row(t, task, r.Kind, r.Actor, data, map[string][]byte{path: stored})
	var ended *EndedError
	if errors.As(err, &ended) {
		return nil, false, err.Error(), nil
	}
	return w, err == nil, "", err
}

// rerecorded turns a work operation's outcome into Rerecord's: a task that
// ended is work that no longer holds, not an error.
func rerecorded(w *Work, err error) (bool, string, error) {
	var ended *EndedError
	if errors.As(err, &ended) {
		return false, err.Error(), nil
	}
	return err == nil && w != nil, "", err
}

// outputName is the name and extension of a stored output's path
// (outputs/<index>-<name>.<ext>).
func outputName(path string) (string, string) {
	base := path[strings.LastIndexByte(path, '/')+1:]
	if _, rest, ok := strings.Cut(base, "-"); ok {
		base = rest
	}
	name, ext, ok := strings.Cut(base, ".")
	if !ok {
		return base, "txt"
	}
	return name, ext
}

// blob reads a payload or output a dropped row names.
func blob(objs *gitstore.Repo, id string) ([]byte, string) {
	oid, err := gitstore.ParseOid(id)
	if err != nil {
		return nil, fmt.Sprintf("its blob %q is not an object id", id)
	}
	b, err := objs.ReadType(oid, gitstore.TypeBlob)
	if err != nil {
		return nil, fmt.Sprintf("its blob %s cannot be read here: %v", id, err)
	}
	return b, ""
}

// commitsHere says which of the commits a work row names this repository
// lacks ("" when it has them all).
func commitsHere(objs *gitstore.Repo, ids ...string) string {
	for _, s := range ids {
		id, err := gitstore.ParseOid(s)
		if err != nil || !objs.Has(id) {
			return fmt.Sprintf("the commit %s it names is not in this repository", s)
		}
	}
	return ""
}
