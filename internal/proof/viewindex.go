package proof

import (
	"sync"

	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// IndexedView is a read view's snapshot that builds the spine index once
// for every read made from it: a list of tasks folds each task (and a sealed
// task's fold compares its journal with its seals, which reads the spines),
// so without it a list would walk every spine once per sealed task. The
// index is derived by this process from the snapshot's own refs and lives
// as long as the view: nothing is kept across views.
type IndexedView struct {
	refs.Source
	once sync.Once
	ix   *verify.SpineIndex
	err  error

	envMu sync.Mutex
	env   *Env // the proof environment of the view (Prover.Env)
}

// proofEnv returns the view's proof environment, made by make once.
func (v *IndexedView) proofEnv(make func() (*Env, error)) (*Env, error) {
	v.envMu.Lock()
	defer v.envMu.Unlock()
	if v.env != nil {
		return v.env, nil
	}
	e, err := make()
	if err != nil {
		return nil, err
	}
	v.env = e
	return e, nil
}

// spineIndex builds (once) the index of the view's spines under env, whose
// refs are this view.
func (v *IndexedView) spineIndex(env *verify.Env) (*verify.SpineIndex, error) {
	v.once.Do(func() { v.ix, v.err = verify.BuildSpineIndex(env) })
	return v.ix, v.err
}

// spineIndexer is a view that keeps its spine index.
type spineIndexer interface {
	spineIndex(env *verify.Env) (*verify.SpineIndex, error)
}

// Verifier is verify.NewVerifier, sharing the spine index of env's view
// when the view keeps one (an IndexedView).
func Verifier(env *verify.Env) (*verify.Verifier, error) {
	if c, ok := env.Refs.(spineIndexer); ok {
		ix, err := c.spineIndex(env)
		if err != nil {
			return nil, err
		}
		return verify.NewVerifierWith(env, ix), nil
	}
	return verify.NewVerifier(env)
}
