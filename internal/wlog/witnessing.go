package wlog

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
)

// Client is how this package speaks to witnesses (the C2SP tlog-witness
// protocol client): Add submits a signed checkpoint with a consistency
// proof from oldSize and returns the witness's cosignature line(s), once
// they verified against the witness's key;
// Conflict reads, from Add's error, the size the witness has for the log
// when it answered 409; Verify checks one cosignature line of a
// checkpoint's body against the witness's key; Forked reads, from Add's
// error, that the witness cosigned another tree of the same size.
type Client struct {
	Add      func(ctx context.Context, w WitnessConfig, oldSize uint64, proof []tlog.Hash, signed []byte) ([]byte, error)
	Conflict func(err error) (size uint64, ok bool)
	Forked   func(err error) bool
	Verify   func(w WitnessConfig, body, sigLine []byte) error
}

// QuorumError: fewer witnesses cosigned than the quorum needs.
type QuorumError struct {
	Writer   string
	Size     int64
	Need     int
	Cosigned []string
	Failed   map[string]string // by witness: why it gave no cosignature
}

func (e *QuorumError) Error() string {
	var why []string
	for _, n := range sortedKeys(e.Failed) {
		why = append(why, fmt.Sprintf("%s: %s", n, e.Failed[n]))
	}
	return fmt.Sprintf("writer %s's log checkpoint of %d entries has %d cosignature(s) (%s), the quorum is %d: %s",
		e.Writer, e.Size, len(e.Cosigned), orNone(e.Cosigned), e.Need, strings.Join(why, "; "))
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Cosigners names the configured witnesses whose cosignature on cp
// verifies (a line from a key no configured witness has counts nothing).
func Cosigners(cp *Checkpoint, cfg *Config, cl Client) []string {
	var out []string
	for _, w := range cfg.Witnesses {
		for _, l := range cp.SigLines() {
			if cl.Verify(w, cp.Body(), l) == nil {
				out = append(out, w.Name)
				break
			}
		}
	}
	return out
}

// WriterSigned is cp as the writer signed it, without cosignatures: what
// a witness is sent.
func WriterSigned(cp *Checkpoint) ([]byte, error) {
	var lines []string
	for _, s := range cp.Note.Sigs {
		lines = append(lines, "— "+s.Name+" "+s.Base64+"\n")
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("checkpoint of %s carries no writer signature", cp.Origin)
	}
	return []byte(cp.Note.Text + "\n" + strings.Join(lines, "")), nil
}

// Cosign asks every configured witness to cosign signed (the writer's
// checkpoint of tree's first size leaves), each with a consistency proof
// from the size it last cosigned as prev shows it (prev: the writer's
// previous checkpoint, nil for none), or from the size it answers a
// conflict with. It returns signed with the cosignatures that verify
// appended, and a *QuorumError when fewer than need did.
func Cosign(ctx context.Context, cl Client, cfg *Config, need int, writer string, tree *Tree, prev *Checkpoint, signed []byte, size int64) ([]byte, []string, error) {
	var lines [][]byte
	var names []string
	failed := map[string]string{}
	for _, w := range cfg.Witnesses {
		old := int64(0)
		if prev != nil && prev.Size <= size && contains(Cosigners(prev, &Config{Witnesses: []WitnessConfig{w}}, cl), w.Name) {
			old = prev.Size
		}
		// Add returns only cosignatures that verified against w's key.
		line, err := cosignOne(ctx, cl, w, tree, old, signed, size)
		if err != nil {
			failed[w.Name] = err.Error()
			continue
		}
		lines, names = append(lines, line), append(names, w.Name)
	}
	out := WithCosignatures(signed, lines)
	if len(names) < need {
		return out, names, &QuorumError{Writer: writer, Size: size, Need: need, Cosigned: names, Failed: failed}
	}
	return out, names, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// cosignOne asks w once from old and, when it answers that it holds
// another size of the log, once more from that size.
func cosignOne(ctx context.Context, cl Client, w WitnessConfig, tree *Tree, old int64, signed []byte, size int64) ([]byte, error) {
	for try := 0; ; try++ {
		var proof tlog.TreeProof
		if old > 0 && old < size {
			p, err := tree.Consistency(size, old)
			if err != nil {
				return nil, err
			}
			proof = p
		}
		line, err := cl.Add(ctx, w, uint64(old), proof, signed)
		if err == nil {
			return line, nil
		}
		have, ok := cl.Conflict(err)
		switch {
		case !ok || try > 0:
			return nil, err
		case int64(have) > size:
			return nil, fmt.Errorf("it has cosigned %d entries of this log, more than the %d of this checkpoint: this writer's log was rolled back here", have, size)
		}
		old = int64(have)
	}
}

// ReadCheckpointCommit reads the signed checkpoint a checkpoints commit
// holds, and its record.
func ReadCheckpointCommit(objs *gitstore.Repo, id gitstore.Oid) (record.LogCheckpoint, []byte, error) {
	data, err := objs.ReadType(id, gitstore.TypeCommit)
	if err != nil {
		return record.LogCheckpoint{}, nil, err
	}
	full, _, err := gitstore.ParseCommitInPlace(data)
	if err != nil {
		return record.LogCheckpoint{}, nil, err
	}
	rec, err := record.RecordFromMessage(full.Message)
	if err != nil {
		return record.LogCheckpoint{}, nil, fmt.Errorf("checkpoint commit %s: %w", id, err)
	}
	lc, err := record.ParseLogCheckpoint(rec)
	if err != nil {
		return lc, nil, fmt.Errorf("checkpoint commit %s: %w", id, err)
	}
	td, err := objs.ReadType(full.Tree, gitstore.TypeTree)
	if err != nil {
		return lc, nil, err
	}
	es, err := gitstore.ParseTree(td)
	if err != nil {
		return lc, nil, err
	}
	if len(es) != 1 || es[0].Name != record.CheckpointFile {
		return lc, nil, fmt.Errorf("checkpoint commit %s: its tree is not one file %s", id, record.CheckpointFile)
	}
	b, err := objs.ReadType(es[0].ID, gitstore.TypeBlob)
	return lc, b, err
}

// openWith opens raw with the first of the writer's keys pubs that
// signed it, for the log's origin.
func openWith(raw []byte, origin string, pubs []ssh.PublicKey) (*Checkpoint, error) {
	err := fmt.Errorf("no Ed25519 key of the writer is trusted here: %w", ErrKeyKind)
	for _, pub := range pubs {
		v, verr := Verifier(origin, pub)
		if verr != nil {
			continue
		}
		cp, oerr := Open(raw, origin, v)
		if oerr == nil && len(cp.Note.Sigs) > 0 {
			return cp, nil
		}
		if oerr == nil {
			oerr = &note.UnverifiedNoteError{Note: cp.Note}
		}
		err = oerr
	}
	return nil, err
}
