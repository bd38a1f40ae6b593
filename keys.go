package bernstein

import (
	"github.com/bernstein/bernstein/internal/writers"
	"github.com/bernstein/bernstein/keys/pins"
	"github.com/bernstein/bernstein/refs"
)

// Writer keys and trust (docs/trust.md): the pin file (keys/pins) and the
// keys each writer publishes.

// Trust levels of a writer's key, as `keys list` shows them.
const (
	TrustOwn        = pins.TrustOwn
	TrustPinned     = pins.TrustPinned
	TrustUnpinned   = pins.TrustUnpinned
	TrustChanged    = pins.TrustChanged
	TrustNotFound   = pins.TrustNotFound
	TrustUnreadable = pins.TrustUnreadable
)

// WriterTrust is one writer's key as this host sees it.
type WriterTrust = pins.WriterTrust

// PinOptions say what `keys pin` pins.
type PinOptions = pins.Options

// ErrKeyChanged reports a pin that would replace a different pinned key.
var ErrKeyChanged = pins.ErrKeyChanged

// ErrNotPinned reports an unpin of a writer the pin file does not name.
var ErrNotPinned = pins.ErrNotPinned

// pinFile is this repository's pin file.
func (s *Store) pinFile() pins.File { return s.core.PinFile() }

// PinFile is the path of this repository's pin file.
func (s *Store) PinFile() string { return s.pinFile().Path }

// WriterKeys lists every writer whose key is published or pinned here.
func (s *Store) WriterKeys() ([]WriterTrust, error) {
	view, err := s.refs.Snapshot(refs.KeyScope...)
	if err != nil {
		return nil, err
	}
	published, err := writers.List(s.core, view)
	if err != nil {
		return nil, err
	}
	trust, err := s.Trust()
	if err != nil {
		return nil, err
	}
	var own string
	if id, err := s.Identity(); err == nil {
		own = id.Writer
	}
	list := make([]WriterTrust, len(published))
	for i, p := range published {
		list[i] = WriterTrust{Writer: p.Writer, Key: p.Key, Source: p.Source, Problem: p.Problem}
	}
	return pins.Status(list, trust, own), nil
}

// PinKeys pins writers' keys in this repository's pin file and returns
// what it pinned. A writer whose pinned key differs from the one to pin is
// refused with ErrKeyChanged unless Replace: a changed key is loud, the way
// ssh treats a changed host key.
func (s *Store) PinKeys(o PinOptions) ([]WriterTrust, error) {
	return s.pinFile().Pin(o, s.PublishedKeys)
}

// UnpinKeys removes writers from this repository's pin file.
func (s *Store) UnpinKeys(writers []string) error {
	return s.pinFile().Unpin(writers)
}
