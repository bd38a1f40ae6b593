package wlog

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/gitstore"
)

// A log's state for one reader.
const (
	StateCosigned     = "cosigned"      // a checkpoint whose cosignatures meet the quorum
	StateNotCosigned  = "not_cosigned"  // a checkpoint the quorum has not cosigned (yet)
	StateNoCheckpoint = "no_checkpoint" // the writer keeps no checkpoint (no witness configured)
	StateUnverifiable = "unverifiable"  // this host trusts no key of the writer
)

// LogStatus is what a reader found of one writer's log.
type LogStatus struct {
	Writer   string   `json:"writer"`
	State    string   `json:"state"`
	Size     int64    `json:"size"`  // the checkpoint's size (0: none)
	Spine    int64    `json:"spine"` // the spine's entries
	Cosigned []string `json:"cosigned,omitempty"`
	Need     int      `json:"quorum"`
	// Remember is the checkpoint to record as the newest this host has
	// verified, once what was checked is in place (nil: nothing new).
	Remember []byte `json:"-"`
	// Unreachable names the witnesses a fresh reader could not probe.
	Unreachable map[string]string `json:"unreachable,omitempty"`
}

// TamperedError: a writer's log was rolled back, forked, or its
// checkpoint is forged. Nothing checked under it is to be taken.
type TamperedError struct {
	Writer  string
	Kind    string // "rolled back", "forked", "forged"
	Size    int64  // what the checked refs hold
	Seen    int64  // what this host, or a witness, has seen (rolled back, forked)
	Witness string // the witness that saw it ("" for this host's memory)
	Why     string
}

func (e *TamperedError) Error() string {
	who := "this host"
	if e.Witness != "" {
		who = "witness " + e.Witness
	}
	switch e.Kind {
	case "rolled back":
		if e.Witness != "" {
			// A witness knows the writer's log, not this copy's history: a
			// copy the writer has not pushed to since reads the same.
			return fmt.Sprintf("writer %s's log was rolled back, or this is a copy the writer has not pushed to since: it holds %d entries, but %s has cosigned a checkpoint of %d (fetch from the remote the writer pushes to): %s", e.Writer, e.Size, who, e.Seen, e.Why)
		}
		return fmt.Sprintf("writer %s's log was rolled back: it holds %d entries, but %s has seen a cosigned checkpoint of %d: %s", e.Writer, e.Size, who, e.Seen, e.Why)
	case "forked":
		return fmt.Sprintf("writer %s's log forked: its first %d entries are not those of the cosigned checkpoint of %d entries %s has seen (the log holds %d): %s", e.Writer, e.Seen, e.Seen, who, e.Size, e.Why)
	}
	return fmt.Sprintf("writer %s's log checkpoint is forged (%d entries): %s", e.Writer, e.Size, e.Why)
}

// ErrTampered matches every *TamperedError.
var ErrTampered = errors.New("tampered log")

func (e *TamperedError) Is(t error) bool { return t == ErrTampered }

// Checker checks writers' logs for one reader.
type Checker struct {
	Objs   *gitstore.Repo
	Cache  Cache
	Host   Host
	Config *Config
	Client Client
	Need   int  // the quorum (Config.Need of the asked quorum)
	Probe  bool // with no memory of a log, ask the witnesses for a larger one
}

// Check checks writer's log as spineHead and cpHead (the checkpoints ref;
// zero for none) hold it, pub being the keys this reader trusts for the
// writer (none: unverifiable).
func (c *Checker) Check(ctx context.Context, writer string, pub []ssh.PublicKey, spineHead, cpHead gitstore.Oid) (*LogStatus, error) {
	st := &LogStatus{Writer: writer, Need: c.Need}
	if len(pub) == 0 {
		st.State = StateUnverifiable
		return st, nil
	}
	origin := Origin(c.Host.ID, writer)
	seen, err := c.seen(writer, origin, pub)
	if err != nil {
		return nil, err
	}
	tree, err := c.Cache.Load(c.Objs, writer, spineHead)
	if err != nil {
		return nil, fmt.Errorf("writer %s's spine: %w", writer, err)
	}
	st.Spine = tree.Size
	var cp *Checkpoint
	if !cpHead.IsZero() {
		if cp, tree, err = c.checkpoint(writer, origin, pub, tree, cpHead); err != nil {
			return nil, err
		}
		st.Size = cp.Size
	}
	if seen != nil {
		if err := c.against(writer, seen, cp, tree); err != nil {
			return nil, err
		}
	}
	if cp == nil {
		st.State = StateNoCheckpoint
		return st, nil
	}
	st.Cosigned = Cosigners(cp, c.Config, c.Client)
	if seen == nil && c.Probe {
		if err := c.probe(ctx, writer, cp, st); err != nil {
			return nil, err
		}
	}
	st.State = StateNotCosigned
	if len(st.Cosigned) >= c.Need && c.Need > 0 {
		st.State = StateCosigned
		if seen == nil || cp.Size > seen.Size || (cp.Size == seen.Size && string(cp.Raw) != string(seen.Raw)) {
			st.Remember = cp.Raw
		}
		_ = c.Cache.Save(c.Objs, writer, tree, cp.Size)
	}
	return st, nil
}

func (c *Checker) seen(writer, origin string, pub []ssh.PublicKey) (*Checkpoint, error) {
	raw, err := c.Host.Seen(writer)
	if err != nil || raw == nil {
		return nil, err
	}
	cp, err := openWith(raw, origin, pub)
	if err != nil {
		return nil, fmt.Errorf("%s: the checkpoint this host remembers does not check: %w", c.Host.seenPath(writer), err)
	}
	return cp, nil
}

// checkpoint reads and checks the checkpoint at cpHead: the writer's
// signature, and the spine's root at its size.
func (c *Checker) checkpoint(writer, origin string, pub []ssh.PublicKey, tree *Tree, cpHead gitstore.Oid) (*Checkpoint, *Tree, error) {
	rec, raw, err := ReadCheckpointCommit(c.Objs, cpHead)
	if err != nil {
		return nil, nil, &TamperedError{Writer: writer, Kind: "forged", Why: err.Error()}
	}
	cp, err := openWith(raw, origin, pub)
	if err != nil {
		return nil, nil, &TamperedError{Writer: writer, Kind: "forged", Size: rec.Size, Why: "it is not signed by the writer's key: " + err.Error()}
	}
	if cp.Size != rec.Size || rec.Writer != writer {
		return nil, nil, &TamperedError{Writer: writer, Kind: "forged", Size: cp.Size, Why: fmt.Sprintf("its commit says writer %s and %d entries", rec.Writer, rec.Size)}
	}
	checked, err := Check(c.Objs, tree, cp)
	if errors.Is(err, ErrRootMismatch) {
		return nil, nil, &TamperedError{Writer: writer, Kind: "forged", Size: cp.Size, Why: err.Error()}
	}
	if err != nil {
		return nil, nil, err
	}
	return cp, checked, nil
}

// against checks the log against the newest cosigned checkpoint this host
// has seen: no smaller, and its first seen.Size entries those seen.
func (c *Checker) against(writer string, seen, cp *Checkpoint, tree *Tree) error {
	if tree.Size >= seen.Size {
		r, err := tree.Root(seen.Size)
		if err != nil {
			return err
		}
		if r != seen.Root {
			return &TamperedError{Writer: writer, Kind: "forked", Size: tree.Size, Seen: seen.Size, Why: fmt.Sprintf("they hash to %s, the cosigned checkpoint says %s", r, seen.Root)}
		}
	}
	have := tree.Size
	if cp != nil && cp.Size < have {
		have = cp.Size
	}
	if tree.Size < seen.Size || (cp != nil && cp.Size < seen.Size) {
		return &TamperedError{Writer: writer, Kind: "rolled back", Size: have, Seen: seen.Size,
			Why: fmt.Sprintf("the spine holds %d entries and the newest checkpoint %d", tree.Size, sizeOf(cp))}
	}
	return nil
}

func sizeOf(cp *Checkpoint) int64 {
	if cp == nil {
		return 0
	}
	return cp.Size
}

// probe asks each witness for cp's size as its old size: a witness that
// holds a larger checkpoint of the log answers with its size, and the log
// read here was rolled back. A witness that cannot be reached is named,
// not an alarm.
func (c *Checker) probe(ctx context.Context, writer string, cp *Checkpoint, st *LogStatus) error {
	signed, err := WriterSigned(cp)
	if err != nil {
		return err
	}
	for _, w := range c.Config.Witnesses {
		_, err := c.Client.Add(ctx, w, uint64(cp.Size), nil, signed)
		if err == nil {
			continue
		}
		if c.Client.Forked != nil && c.Client.Forked(err) {
			return &TamperedError{Writer: writer, Kind: "forked", Size: cp.Size, Seen: cp.Size, Witness: w.Name, Why: err.Error()}
		}
		if have, ok := c.Client.Conflict(err); ok {
			if int64(have) > cp.Size {
				return &TamperedError{Writer: writer, Kind: "rolled back", Size: cp.Size, Seen: int64(have), Witness: w.Name,
					Why: fmt.Sprintf("the checkpoint read here has %d entries", cp.Size)}
			}
			continue
		}
		if st.Unreachable == nil {
			st.Unreachable = map[string]string{}
		}
		st.Unreachable[w.Name] = err.Error()
	}
	return nil
}
