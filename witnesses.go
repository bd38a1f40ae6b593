package bernstein

import (
	"errors"
	"fmt"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/wlog"
	"github.com/bernstein/bernstein/keys"
)

// Witness is one configured witness (docs/trust.md, Witnesses).
type Witness = wlog.WitnessConfig

// WitnessList is this host's witness configuration for the repository.
type WitnessList struct {
	Config    string    `json:"config"` // the file it is kept in
	Quorum    int       `json:"quorum"` // in force: the configured quorum, else every witness
	Witnesses []Witness `json:"witnesses"`
}

// LogLine is what a witness operator registers for this writer's log: its
// origin and its signed-note verifier key.
type LogLine struct {
	Writer      string `json:"writer"`
	Origin      string `json:"origin"`
	VerifierKey string `json:"verifier_key"`
}

// ErrNoWitness: no witness of that name is configured.
var ErrNoWitness = errors.New("no such witness")

func (s *Store) witnessHost() (wlog.Host, error) {
	id := s.core.IdentityID()
	if id == "" {
		return wlog.Host{}, errors.New("a writer's log is bound to the repository's identity, which a storage-format-1 repository lacks: run 'bernstein upgrade'")
	}
	return wlog.Host{Home: s.core.Home, ID: id}, nil
}

// Witnesses lists the witnesses this host has configured for the
// repository.
func (s *Store) Witnesses() (*WitnessList, error) {
	h, err := s.witnessHost()
	if err != nil {
		return nil, err
	}
	c, err := h.Config()
	if err != nil {
		return nil, err
	}
	return &WitnessList{Config: h.ConfigPath(), Quorum: c.Need(0), Witnesses: append([]Witness{}, c.Witnesses...)}, nil
}

// AddWitness configures a witness (its name must be new); quorum, when
// not 0, sets how many witnesses a push needs by default.
func (s *Store) AddWitness(w Witness) (*WitnessList, error) {
	if err := w.Check(); err != nil {
		return nil, err
	}
	return s.editWitnesses(func(c *wlog.Config) error {
		for _, o := range c.Witnesses {
			if o.Name == w.Name {
				return fmt.Errorf("witness %s is configured already (%s): remove it first", w.Name, o.URL)
			}
		}
		c.Witnesses = append(c.Witnesses, w)
		return nil
	})
}

// RemoveWitness removes the witness named name.
func (s *Store) RemoveWitness(name string) (*WitnessList, error) {
	return s.editWitnesses(func(c *wlog.Config) error {
		for i, o := range c.Witnesses {
			if o.Name == name {
				c.Witnesses = append(c.Witnesses[:i], c.Witnesses[i+1:]...)
				if c.Quorum > len(c.Witnesses) {
					c.Quorum = len(c.Witnesses)
				}
				return nil
			}
		}
		return fmt.Errorf("%w: %q ('bernstein witness list' names them)", ErrNoWitness, name)
	})
}

// SetWitnessQuorum sets how many configured witnesses a push needs by
// default (0: every one).
func (s *Store) SetWitnessQuorum(n int) (*WitnessList, error) {
	return s.editWitnesses(func(c *wlog.Config) error {
		if n < 0 || n > len(c.Witnesses) {
			return fmt.Errorf("a quorum of %d, but %d witness(es) are configured", n, len(c.Witnesses))
		}
		c.Quorum = n
		return nil
	})
}

func (s *Store) editWitnesses(edit func(*wlog.Config) error) (*WitnessList, error) {
	h, err := s.witnessHost()
	if err != nil {
		return nil, err
	}
	if err := h.UpdateConfig(edit); err != nil {
		return nil, err
	}
	return s.Witnesses()
}

// WitnessLog is this writer's log origin and verifier key.
func (s *Store) WitnessLog() (*LogLine, error) {
	h, err := s.witnessHost()
	if err != nil {
		return nil, err
	}
	id, err := s.core.Identity()
	if errors.Is(err, keys.ErrNoIdentity) {
		return nil, errors.New("this host has no writer: run 'bernstein init' first")
	}
	if err != nil {
		return nil, err
	}
	origin := wlog.Origin(h.ID, id.Writer)
	vk, err := wlog.VerifierKey(origin, id.PublicKey())
	if err != nil {
		return nil, fmt.Errorf("writer %s: %w", id.Writer, err)
	}
	return &LogLine{Writer: id.Writer, Origin: origin, VerifierKey: vk}, nil
}

// GuardLogs checks, for the remote guard, the logs of the writers whose
// spine or checkpoints a push moves (updates: ref to new head), as they
// would stand, against this host's witnesses and memory; remember records
// the cosigned checkpoints checked, once the push is accepted.
func (s *Store) GuardLogs(objs *gitstore.Repo, updates map[string]gitstore.Oid) (remember func() error, err error) {
	return s.sync.GuardLogs(objs, updates)
}

// SetPushQuorum sets how many witnesses the next pushes need (0: the
// configured quorum).
func (s *Store) SetPushQuorum(n int) { s.sync.SetQuorum(n) }
