package bernstein

import (
	"sort"

	"golang.org/x/crypto/ssh"

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

// ErrAmbiguous reports a writer name under which several keys are
// published, none of them named (PinOptions.Key) or pinned already.
var ErrAmbiguous = pins.ErrAmbiguous

// ErrNotPinned reports an unpin of a writer the pin file does not name.
var ErrNotPinned = pins.ErrNotPinned

// PinFile is the path of this repository's pin file.
func (s *Store) PinFile() string { return s.core.PinFile().Path }

// WriterKeys lists every writer whose key is published or pinned here.
func (s *Store) WriterKeys() ([]WriterTrust, error) {
	view, err := s.core.Refs.Snapshot(refs.KeyScope...)
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
	return s.core.PinFile().Pin(o, s.PublishedKeys)
}

// UnpinKeys removes writers from this repository's pin file.
func (s *Store) UnpinKeys(writers []string) error {
	return s.core.PinFile().Unpin(writers)
}

// WriterKey is a writer's key as a repository publishes it: not trusted by
// itself (see docs/trust.md); pin it to trust it.
type WriterKey struct {
	Writer      string `json:"writer"`
	KeyType     string `json:"key_type"`
	Fingerprint string `json:"fingerprint"` // SHA256:...
	Key         string `json:"key"`         // authorized_keys line
}

// PublishedWriterKeys lists the published keys with their fingerprints,
// sorted by writer (a writer name under which several keys are published
// is listed once per key). A key that does not parse is listed with an empty
// fingerprint.
func (s *Store) PublishedWriterKeys() ([]WriterKey, error) {
	pub, err := s.PublishedKeys()
	if err != nil {
		return nil, err
	}
	out := make([]WriterKey, 0, len(pub))
	for w, lines := range pub {
		for _, line := range lines {
			k := WriterKey{Writer: w, Key: line}
			if pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
				k.KeyType, k.Fingerprint = pk.Type(), ssh.FingerprintSHA256(pk)
			}
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Writer != out[j].Writer {
			return out[i].Writer < out[j].Writer
		}
		return out[i].Fingerprint < out[j].Fingerprint
	})
	return out, nil
}
