package remote

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/internal/witness"
	"github.com/bernstein/bernstein/internal/wlog"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
	"golang.org/x/crypto/ssh"
	"golang.org/x/mod/sumdb/tlog"
)

// WitnessPolicy is how push and fetch use witnesses: the protocol client
// and the quorum asked for (0: the configured one).
type WitnessPolicy struct {
	Client wlog.Client
	Quorum int
	// Timeout bounds each exchange with the witnesses (0: a minute).
	Timeout time.Duration
}

// SetWitnesses gives the syncer its witness policy; without one, push
// asks no witness and fetch checks no log.
func (s *Syncer) SetWitnesses(p *WitnessPolicy) { s.witness = p }

func (s *Syncer) host() wlog.Host { return wlog.Host{Home: s.c.Home, ID: s.c.IdentityID()} }

// hostOf is what this host keeps of the repository whose identity the
// refs hold: a fresh clone has no identity of its own until its fetch
// moves the remote's refs/bernstein/repository, whose id its witness
// configuration is kept under.
func (s *Syncer) hostOf(heads map[string]gitstore.Oid) wlog.Host {
	h := s.host()
	if h.ID != "" || heads[refs.Repository].IsZero() {
		return h
	}
	if cc, err := chain.Read(s.c.Objects, heads[refs.Repository]); err == nil {
		if rec, err := record.ParseRepositoryRecord(cc.Record); err == nil {
			h.ID = rec.ID
		}
	}
	return h
}

func (s *Syncer) logCache() wlog.Cache {
	return wlog.Cache{Dir: filepath.Join(s.c.GitDir, "bernstein", "cache", "tlog")}
}

// witnessConfig is the configuration in force, nil when no witness is
// configured or the syncer has no policy.
func (s *Syncer) witnessConfig() (*wlog.Config, int, error) { return s.witnessConfigOf(s.host()) }

func (s *Syncer) witnessConfigOf(h wlog.Host) (*wlog.Config, int, error) {
	if s.witness == nil || h.ID == "" {
		return nil, 0, nil
	}
	cfg, err := h.Config()
	if err != nil || len(cfg.Witnesses) == 0 {
		return nil, 0, err
	}
	need := cfg.Need(s.witness.Quorum)
	if need > len(cfg.Witnesses) {
		return nil, 0, fmt.Errorf("a witness quorum of %d, but %d witness(es) are configured ('bernstein witness list')", need, len(cfg.Witnesses))
	}
	return cfg, need, nil
}

func (s *Syncer) ctx() (context.Context, context.CancelFunc) {
	d := s.witness.Timeout
	if d == 0 {
		d = time.Minute
	}
	return context.WithTimeout(context.Background(), d)
}

// signCheckpoint signs this writer's checkpoint of its spine as it
// stands and commits it, with no cosignature yet, to its checkpoints ref,
// before a push sends it with the rows. It returns the checkpoints ref's
// head when its checkpoint still wants cosignatures (zero otherwise: no
// witness configured, no writer or spine here, or the quorum cosigned the
// whole spine already).
func (s *Syncer) signCheckpoint() (gitstore.Oid, error) {
	var none gitstore.Oid
	cfg, need, err := s.witnessConfig()
	if cfg == nil || err != nil {
		return none, err
	}
	id, err := s.c.Identity()
	if err != nil {
		return none, nil // no writer here: nothing of its own to push
	}
	head, err := s.c.Refs.ReadOptional(refs.Spine(id.Writer))
	if err != nil || head.IsZero() {
		return none, err
	}
	origin := wlog.Origin(s.c.IdentityID(), id.Writer)
	tree, prev, err := s.ownLog(id, origin, head)
	if err != nil {
		return none, err
	}
	if prev != nil && prev.Size >= tree.Size {
		if len(wlog.Cosigners(prev, cfg, s.witness.Client)) >= need {
			return none, nil
		}
	} else if err := s.commitSigned(id, origin, tree); err != nil {
		return none, err
	}
	return s.c.Refs.ReadOptional(refs.Checkpoints(id.Writer))
}

// commitSigned commits the writer's signed checkpoint of the whole of
// tree, with no cosignature, to its checkpoints ref.
func (s *Syncer) commitSigned(id *keys.Identity, origin string, tree *wlog.Tree) error {
	signer, err := wlog.NewSigner(origin, id)
	if err != nil {
		return fmt.Errorf("writer %s: %w", id.Writer, err)
	}
	root, err := tree.Root(tree.Size)
	if err != nil {
		return err
	}
	raw, err := wlog.Sign(origin, tree.Size, root, signer)
	if err != nil {
		return err
	}
	if _, err := s.w.Submit(func(t *txn.Tx) (any, error) { return nil, t.LogCheckpoint(tree.Size, raw) }); err != nil {
		return err
	}
	_ = s.logCache().Save(s.c.Objects, id.Writer, tree, tree.Size)
	return nil
}

// cosignPushed runs once a push has landed the rows with the checkpoint
// of the checkpoints commit cp: the configured witnesses cosign that
// checkpoint (each with a consistency proof from the checkpoint this host
// last saw cosigned, or from the size it answers with), and the
// checkpoint with their cosignatures is committed and pushed. In this
// order a witness never holds a checkpoint the remote lacks, so a push
// cut off anywhere raises no alarm on any reader (docs/trust.md,
// Witnesses). Below the quorum the push fails: the rows and the signed
// checkpoint are on the remote, uncosigned.
func (s *Syncer) cosignPushed(remote string, res *PushResult, cp gitstore.Oid) (*PushResult, error) {
	cfg, need, err := s.witnessConfig()
	if err != nil {
		return res, err
	}
	id, err := s.c.Identity()
	if err != nil {
		return res, err
	}
	origin := wlog.Origin(s.c.IdentityID(), id.Writer)
	tree, pushed, seen, err := s.pushedLog(id, origin, cp)
	if err != nil {
		return res, err
	}
	signed, err := wlog.WriterSigned(pushed)
	if err != nil {
		return res, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	out, _, err := wlog.Cosign(ctx, s.witness.Client, cfg, need, id.Writer, tree, seen, signed, pushed.Size)
	if err != nil {
		return res, fmt.Errorf("%w; the rows and their signed checkpoint were pushed to %s, not yet cosigned: push again once the witnesses answer", err, remote)
	}
	moved, err := s.w.Submit(func(t *txn.Tx) (any, error) {
		if now, err := s.c.Refs.ReadOptional(refs.Checkpoints(id.Writer)); err != nil || now != cp {
			return false, err // another push signed a newer checkpoint, and has it cosigned
		}
		return true, t.LogCheckpoint(pushed.Size, out)
	})
	if err != nil || moved != true {
		return res, err
	}
	if err := s.host().Remember(id.Writer, out); err != nil {
		return res, err
	}
	more, err := s.pushRefs(remote)
	if more != nil {
		res.Pushed = append(res.Pushed, more.Pushed...)
		res.RemoteMessages = append(res.RemoteMessages, more.RemoteMessages...)
	}
	return res, err
}

// pushedLog reads the checkpoint at the checkpoints commit cp (signed by
// this writer), the spine's tree checked against it, and the newest
// checkpoint this host has seen cosigned (nil for none).
func (s *Syncer) pushedLog(id *keys.Identity, origin string, cp gitstore.Oid) (*wlog.Tree, *wlog.Checkpoint, *wlog.Checkpoint, error) {
	v, err := wlog.Verifier(origin, id.PublicKey())
	if err != nil {
		return nil, nil, nil, err
	}
	_, raw, err := wlog.ReadCheckpointCommit(s.c.Objects, cp)
	if err != nil {
		return nil, nil, nil, err
	}
	pushed, err := wlog.Open(raw, origin, v)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("writer %s's checkpoint (%s): %w", id.Writer, refs.Checkpoints(id.Writer), err)
	}
	head, err := s.c.Refs.ReadOptional(refs.Spine(id.Writer))
	if err != nil {
		return nil, nil, nil, err
	}
	tree, err := s.logCache().Load(s.c.Objects, id.Writer, head)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("writer %s's spine: %w", id.Writer, err)
	}
	if tree, err = wlog.Check(s.c.Objects, tree, pushed); err != nil {
		return nil, nil, nil, fmt.Errorf("writer %s's own spine: %w", id.Writer, err)
	}
	var seen *wlog.Checkpoint
	if raw, err := s.host().Seen(id.Writer); err == nil && raw != nil {
		seen, _ = wlog.Open(raw, origin, v)
	}
	return tree, pushed, seen, nil
}

// ownLog is the tree of this writer's spine, checked against its previous
// checkpoint (nil for none).
func (s *Syncer) ownLog(id *keys.Identity, origin string, head gitstore.Oid) (*wlog.Tree, *wlog.Checkpoint, error) {
	tree, err := s.logCache().Load(s.c.Objects, id.Writer, head)
	if err != nil {
		return nil, nil, fmt.Errorf("writer %s's spine: %w", id.Writer, err)
	}
	cpHead, err := s.c.Refs.ReadOptional(refs.Checkpoints(id.Writer))
	if err != nil || cpHead.IsZero() {
		return tree, nil, err
	}
	_, raw, err := wlog.ReadCheckpointCommit(s.c.Objects, cpHead)
	if err != nil {
		return nil, nil, err
	}
	v, err := wlog.Verifier(origin, id.PublicKey())
	if err != nil {
		return nil, nil, err
	}
	prev, err := wlog.Open(raw, origin, v)
	if err != nil {
		return nil, nil, fmt.Errorf("writer %s's last checkpoint (%s): %w", id.Writer, refs.Checkpoints(id.Writer), err)
	}
	if tree, err = wlog.Check(s.c.Objects, tree, prev); err != nil {
		return nil, nil, fmt.Errorf("writer %s's own spine: %w", id.Writer, err)
	}
	return tree, prev, nil
}

// trustedKeys are the keys this host trusts for writer.
func (s *Syncer) trustedKeys(writer string) ([]ssh.PublicKey, error) {
	trust, err := s.c.Trust()
	if err != nil {
		return nil, err
	}
	ks := trust.Trusted(writer)
	if id, err := s.c.Identity(); err == nil && id.Writer == writer {
		ks = append(ks, id.PublicKey())
	}
	return ks, nil
}

// checkLogs checks, for every other writer whose spine or checkpoints the
// remote holds (as fetched into its tracking refs), that its log matches
// its checkpoint, which its cosignatures and this host's memory (or, with
// none, the witnesses) do not show rolled back or forked. A
// *wlog.TamperedError refuses the whole fetch.
func (s *Syncer) checkLogs(tracking map[string]gitstore.Oid, probe bool) ([]wlog.LogStatus, wlog.Host, error) {
	h := s.hostOf(tracking)
	cfg, need, err := s.witnessConfigOf(h)
	if cfg == nil || err != nil {
		return nil, h, err
	}
	me := ""
	if id, err := s.c.Identity(); err == nil {
		me = id.Writer
	}
	ck := &wlog.Checker{Objs: s.c.Objects, Cache: s.logCache(), Host: h, Config: cfg, Client: s.witness.Client, Need: need, Probe: probe}
	ctx, cancel := s.ctx()
	defer cancel()
	var out []wlog.LogStatus
	for _, w := range logWriters(tracking) {
		if w == me {
			continue // this host's own log: its heads say what it wrote
		}
		pubs, err := s.trustedKeys(w)
		if err != nil {
			return nil, h, err
		}
		st, err := ck.Check(ctx, w, pubs, tracking[refs.Spine(w)], tracking[refs.Checkpoints(w)])
		if err != nil {
			return nil, h, err
		}
		out = append(out, *st)
	}
	return out, h, nil
}

// rememberLogs records the cosigned checkpoints a fetch verified, once
// what it checked is in place.
func (s *Syncer) rememberLogs(h wlog.Host, sts []wlog.LogStatus) error {
	for _, st := range sts {
		if st.Remember != nil {
			if err := h.Remember(st.Writer, st.Remember); err != nil {
				return err
			}
		}
	}
	return nil
}

// logWriters are the writers with a spine or checkpoints ref among refs.
func logWriters(m map[string]gitstore.Oid) []string {
	seen := map[string]bool{}
	var out []string
	for ref := range m {
		for _, p := range []string{refs.SpinePrefix, refs.CheckpointsPrefix} {
			if w, ok := strings.CutPrefix(ref, p); ok && !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	sort.Strings(out)
	return out
}

// LogCoverage checks every writer's log as view holds it (its spine and
// checkpoints refs) against the configured witnesses and this host's
// memory, without asking the witnesses; nil when no witness is configured.
func (s *Syncer) LogCoverage(view refs.Source) (*verify.LogCoverage, error) {
	cfg, need, err := s.witnessConfig()
	if cfg == nil || err != nil {
		return nil, err
	}
	if _, _, err := view.List(refs.CheckpointsPrefix); errors.Is(err, refs.ErrNotInSnapshot) {
		// A view of fewer refs: the logs as they stand now, spines and
		// checkpoints read together.
		if view, err = s.c.Refs.Snapshot(refs.SpinePrefix, refs.CheckpointsPrefix); err != nil {
			return nil, err
		}
	}
	heads := map[string]gitstore.Oid{}
	for _, p := range []string{refs.SpinePrefix, refs.CheckpointsPrefix} {
		vals, names, err := view.List(p)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			heads[n] = vals[n]
		}
	}
	ck := &wlog.Checker{Objs: s.c.Objects, Cache: s.logCache(), Host: s.host(), Config: cfg, Client: s.witness.Client, Need: need}
	cov := &verify.LogCoverage{Cosigned: map[string]int64{}, Why: map[string]string{}, Tampered: map[string]string{}}
	for _, w := range logWriters(heads) {
		pubs, err := s.trustedKeys(w)
		if err != nil {
			return nil, err
		}
		st, err := ck.Check(context.Background(), w, pubs, heads[refs.Spine(w)], heads[refs.Checkpoints(w)])
		var te *wlog.TamperedError
		switch {
		case errors.As(err, &te):
			cov.Tampered[w] = err.Error()
		case err != nil:
			return nil, err
		case st.State == wlog.StateCosigned:
			cov.Cosigned[w] = st.Size
		default:
			cov.Why[w] = logWhy(st)
		}
	}
	return cov, nil
}

func logWhy(st *wlog.LogStatus) string {
	switch st.State {
	case wlog.StateNoCheckpoint:
		return "the writer keeps no checkpoint"
	case wlog.StateUnverifiable:
		return "this host trusts no key of the writer"
	}
	by := ""
	if len(st.Cosigned) > 0 {
		by = " (" + strings.Join(st.Cosigned, ", ") + ")"
	}
	return fmt.Sprintf("its checkpoint of %d entries has %d of the %d cosignatures needed%s", st.Size, len(st.Cosigned), st.Need, by)
}

// GuardLogs checks, for a push a remote's guard is about to accept, the
// logs of the writers whose spine or checkpoints it moves, as they would
// stand (the remote's refs with updates applied, read from objs, the
// push's objects with the repository's). It returns what to remember once
// the push is accepted.
func (s *Syncer) GuardLogs(objs *gitstore.Repo, updates map[string]gitstore.Oid) (func() error, error) {
	cfg, need, err := s.witnessConfig()
	if cfg == nil || err != nil {
		return func() error { return nil }, err
	}
	heads := map[string]gitstore.Oid{}
	for _, p := range []string{refs.SpinePrefix, refs.CheckpointsPrefix} {
		vals, names, err := s.c.Refs.List(p)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			heads[n] = vals[n]
		}
	}
	touched := map[string]gitstore.Oid{}
	for ref, id := range updates {
		heads[ref], touched[ref] = id, id
	}
	ck := &wlog.Checker{Objs: objs, Host: s.host(), Config: cfg, Client: s.witness.Client, Need: need}
	var sts []wlog.LogStatus
	for _, w := range logWriters(touched) {
		pubs, err := s.trustedKeys(w)
		if err != nil {
			return nil, err
		}
		st, err := ck.Check(context.Background(), w, pubs, heads[refs.Spine(w)], heads[refs.Checkpoints(w)])
		if err != nil {
			return nil, err
		}
		sts = append(sts, *st)
	}
	return func() error { return s.rememberLogs(s.host(), sts) }, nil
}

// SetQuorum sets the quorum push and fetch ask for (0: the configured one).
func (s *Syncer) SetQuorum(n int) {
	if s.witness != nil {
		s.witness.Quorum = n
	}
}

// WitnessClient is the C2SP tlog-witness client (internal/witness) as the
// writer's log uses it.
func WitnessClient() wlog.Client {
	of := func(w wlog.WitnessConfig) witness.Witness {
		return witness.Witness{Name: w.Name, URL: w.URL, Key: w.Key}
	}
	return wlog.Client{
		Add: func(ctx context.Context, w wlog.WitnessConfig, oldSize uint64, proof []tlog.Hash, signed []byte) ([]byte, error) {
			return witness.AddCheckpoint(ctx, of(w), oldSize, proof, signed)
		},
		Conflict: func(err error) (uint64, bool) {
			var c *witness.ConflictError
			if errors.As(err, &c) {
				return c.Size, true
			}
			return 0, false
		},
		Forked: func(err error) bool {
			var f *witness.ForkError
			return errors.As(err, &f)
		},
		Verify: func(w wlog.WitnessConfig, body, line []byte) error {
			_, err := witness.VerifyCosignature(of(w), body, line)
			return err
		},
	}
}
