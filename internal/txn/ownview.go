package txn

import (
	"maps"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// ownSpineEnv is env, but for the writer's own spine ref whose loose file
// holds no object id: that ref reads at the head the writer recorded (as
// its writes take it, readHead), so that what the writer checks of its own
// spine (the seals an archive needs) reads the spine it wrote. It is env
// itself for any other spine.
func (t *Tx) ownSpineEnv(env *verify.Env) *verify.Env {
	ref := refs.Spine(t.id.Writer)
	at, err := env.Refs.ReadOptional(ref)
	if err != nil {
		return env
	}
	head, ok := t.w.OwnHead(ref, at)
	if !ok {
		return env
	}
	return &verify.Env{Objects: env.Objects, Refs: overRef{Source: env.Refs, ref: ref, head: head}, Trust: env.Trust,
		Published: env.Published, Binding: env.Binding, SpineCache: env.SpineCache}
}

// overRef is a refs.Source whose ref reads as head.
type overRef struct {
	refs.Source
	ref  string
	head gitstore.Oid
}

func (o overRef) ReadOptional(ref string) (gitstore.Oid, error) {
	if ref == o.ref {
		return o.head, nil
	}
	return o.Source.ReadOptional(ref)
}

func (o overRef) List(prefix string) (map[string]gitstore.Oid, []string, error) {
	vals, names, err := o.Source.List(prefix)
	if err == nil && strings.HasPrefix(o.ref, prefix) {
		if _, ok := vals[o.ref]; ok {
			vals = maps.Clone(vals)
			vals[o.ref] = o.head
		}
	}
	return vals, names, err
}
