// Package proof makes what proving rows needs: the keys this reader trusts,
// the keys writers publish (which tell "unverifiable" from "tampered"),
// and the objects, with a version naming the published keys and the trust
// they were read under.
package proof

import (
	"fmt"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/writers"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Env is what proving rows needs: the trusted keys, the published ones,
// the objects.
type Env struct {
	*verify.Env
	// Version names what a row's proof depends on besides the row: the
	// published keys (their refs' heads), the repository's identity (the
	// head of refs/bernstein/repository) and the trust set (pins, the
	// --allowed-signers file, the local writer). Folds remembered under one
	// version are not reused under another, so a pin or unpin takes effect
	// at once, also in a long-running server.
	Version gitstore.Oid

	derivedMu sync.Mutex
	derived   map[any]any // Derived
}

// Derived returns what make derives for the reads proven under the
// environment, made once and kept with it. An environment made from a
// view lives as long as the view (Prover.Env), so what is derived here is
// made once per view: see fold.Folder's view of the heads and of the fold
// cache's files.
func (e *Env) Derived(key any, make func() any) any {
	e.derivedMu.Lock()
	defer e.derivedMu.Unlock()
	if v, ok := e.derived[key]; ok {
		return v
	}
	if e.derived == nil {
		e.derived = map[any]any{}
	}
	v := make()
	e.derived[key] = v
	return v
}

// Prover makes proof environments; the published keys are parsed once per
// keys commit.
type Prover struct {
	c   *core.Repo
	mu  sync.Mutex
	pub map[gitstore.Oid]map[string][]ssh.PublicKey // published keys by keys commit
	// bindings are the repository identities read, by proof version.
	bindings map[gitstore.Oid]*verify.Binding
}

// NewProver makes the prover of repository c.
func NewProver(c *core.Repo) *Prover { return &Prover{c: c} }

// Env reads the published keys as view has them, and the trust set now.
// A view (a refs.Snapshot, an IndexedView) keeps the environment made
// from it: every read of the view proves under the keys and the trust set
// read when its first proof was made, and a list of n tasks makes one
// environment, not one for each read of each task (each a read of the
// trust set, the published keys and the repository's identity, and a new
// cache of key verdicts).
func (p *Prover) Env(view refs.Source) (*Env, error) {
	switch v := view.(type) {
	case *IndexedView:
		return v.proofEnv(func() (*Env, error) {
			snap, ok := v.Source.(*refs.Snapshot)
			if !ok {
				return p.env(view)
			}
			// The snapshot's own environment, its reads through the view
			// (which keeps the spine index).
			base, err := p.Env(snap)
			if err != nil {
				return nil, err
			}
			b := base.Env
			env := &verify.Env{Objects: b.Objects, Refs: view, Trust: b.Trust, Published: b.Published, Binding: b.Binding, SpineCache: b.SpineCache}
			return &Env{Env: env, Version: base.Version}, nil
		})
	case *refs.Snapshot:
		e, err := v.Derived(envKey{p}, func() (any, error) { return p.env(view) })
		if err != nil {
			return nil, err
		}
		return e.(*Env), nil
	}
	return p.env(view)
}

// envKey is the key of a prover's environment kept by a snapshot.
type envKey struct{ p *Prover }

// env makes the environment of view.
func (p *Prover) env(view refs.Source) (*Env, error) {
	trust, err := p.c.Trust()
	if err != nil {
		return nil, err
	}
	head, err := writers.Version(view)
	if err != nil {
		return nil, fmt.Errorf("published keys: %w", err)
	}
	p.mu.Lock()
	pub, ok := p.pub[head]
	p.mu.Unlock()
	if !ok {
		published, err := writers.Keys(p.c, view)
		if err != nil {
			return nil, fmt.Errorf("published keys: %w", err)
		}
		pub = map[string][]ssh.PublicKey{}
		for w, lines := range published {
			for _, line := range lines {
				k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
				if err != nil {
					continue // a malformed published key is as good as none
				}
				pub[w] = append(pub[w], k)
			}
		}
		p.mu.Lock()
		p.pub = map[gitstore.Oid]map[string][]ssh.PublicKey{head: pub}
		p.mu.Unlock()
	}
	repo, err := view.ReadOptional(refs.Repository)
	if err != nil {
		return nil, fmt.Errorf("repository identity: %w", err)
	}
	// The identity this host's writer recorded for the repository binds
	// the chains when the ref does not name it (docs/trust.md).
	rid, rhead, recorded := p.c.RecordedIdentity()
	version := gitstore.HashObject(gitstore.TypeBlob, []byte(head.String()+"\n"+repo.String()+"\n"+rid+" "+rhead.String()+"\n"+trust.Fingerprint()))
	env := &verify.Env{Objects: p.c.Objects, Refs: view, Trust: trust, Published: pub, SpineCache: spineCache{p.c}}
	env.Binding = p.binding(env, version, func() *verify.Binding {
		b := verify.LoadBinding(env, repo)
		if recorded {
			b = verify.Recorded(env, b, repo, rid, rhead)
		}
		return b
	})
	return &Env{Env: env, Version: version}, nil
}

// binding reads the repository's identity under env, once per proof
// version (the identity's commits are proven under the keys it names).
func (p *Prover) binding(env *verify.Env, version gitstore.Oid, load func() *verify.Binding) *verify.Binding {
	p.mu.Lock()
	b, ok := p.bindings[version]
	p.mu.Unlock()
	if ok {
		return b
	}
	b = load()
	p.mu.Lock()
	if len(p.bindings) >= 16 {
		p.bindings = nil
	}
	if p.bindings == nil {
		p.bindings = map[gitstore.Oid]*verify.Binding{}
	}
	p.bindings[version] = b
	p.mu.Unlock()
	return b
}

// Check returns the walk check that proves each commit under env.
func Check(env *verify.Env) func(*chain.Commit) {
	return func(cc *chain.Commit) { cc.Proof = verify.ProveCommitID(env, cc.ID, cc.Commit, cc.Payload) }
}
