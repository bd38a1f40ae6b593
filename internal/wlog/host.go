package wlog

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein/internal/atomicfile"
	"github.com/bernstein/bernstein/internal/witness"
	"github.com/bernstein/bernstein/keys"
)

// WitnessConfig is one witness this host asks for cosignatures and checks
// them against: a local name, the URL of its tlog-witness endpoint, and
// its verifier key (signed-note form, "name+hash+base64").
type WitnessConfig struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	Key  string `json:"key"`
}

// Config is this host's witness policy for one repository. It lives in
// BERNSTEIN_HOME, never in the repository: whoever can push to a remote
// cannot plant a witness.
type Config struct {
	Witnesses []WitnessConfig `json:"witnesses"`
	// Quorum is how many configured witnesses must cosign a checkpoint
	// (0: every configured witness).
	Quorum int `json:"quorum"`
}

// Need is the quorum in force: quorum when given (>0), else the
// configured one, else every witness.
func (c *Config) Need(quorum int) int {
	switch {
	case quorum > 0:
		return quorum
	case c.Quorum > 0:
		return c.Quorum
	}
	return len(c.Witnesses)
}

// Host is what this host keeps about the logs of one repository: its
// witness configuration and the newest cosigned checkpoint of each writer
// it has verified.
type Host struct {
	Home string
	ID   string // the repository's identity
}

// ConfigPath is $BERNSTEIN_HOME/witnesses/<id>.json.
func (h Host) ConfigPath() string { return filepath.Join(h.Home, "witnesses", h.ID+".json") }

func (h Host) seenPath(writer string) string {
	return filepath.Join(h.Home, "witnessed", h.ID, writer+".checkpoint")
}

// Config reads the witness configuration (none configured: empty).
func (h Host) Config() (*Config, error) {
	c := &Config{}
	b, err := os.ReadFile(h.ConfigPath())
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%s: %w", h.ConfigPath(), err)
	}
	for _, w := range c.Witnesses {
		if err := w.Check(); err != nil {
			return nil, fmt.Errorf("%s: %w", h.ConfigPath(), err)
		}
	}
	return c, nil
}

// saveConfig writes the configuration whole (temporary file, sync, rename).
func (h Host) saveConfig(c *Config) error {
	if c.Quorum < 0 {
		return fmt.Errorf("a quorum of %d witnesses", c.Quorum)
	}
	sort.Slice(c.Witnesses, func(i, j int) bool { return c.Witnesses[i].Name < c.Witnesses[j].Name })
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := keys.MkdirDurable(filepath.Dir(h.ConfigPath())); err != nil {
		return err
	}
	return atomicfile.Write(h.ConfigPath(), append(b, '\n'), 0o600)
}

var witnessName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Check refuses a witness whose name, URL or key is not one.
func (w WitnessConfig) Check() error {
	if !witnessName.MatchString(w.Name) {
		return fmt.Errorf("witness name %q: letters, digits, '_', '.' and '-', at most 64, starting with a letter or digit", w.Name)
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("witness %s: URL %q is not an http or https URL with a host (and no user name)", w.Name, w.URL)
	}
	if _, err := ParseWitnessKey(w.Key); err != nil {
		return fmt.Errorf("witness %s: %w", w.Name, err)
	}
	return witness.Witness{Name: w.Name, URL: w.URL, Key: w.Key}.Validate()
}

// WitnessKey is a witness's verifier key, read.
type WitnessKey struct {
	Name string
	Hash uint32
	Alg  byte
	Key  []byte
}

// ParseWitnessKey reads a verifier key in signed-note form,
// "name+hash+base64(alg||key)", of a witness: a cosignature/v1 key
// (algorithm 4, c2sp.org/tlog-cosignature) of 32 bytes whose hash is that
// of its name and key.
func ParseWitnessKey(vkey string) (*WitnessKey, error) {
	name, rest, ok1 := strings.Cut(vkey, "+")
	hx, b64, ok2 := strings.Cut(rest, "+")
	bad := func(why string) error {
		return fmt.Errorf("key %q is not a witness verifier key (name+hash+base64, as the witness prints it): %s", vkey, why)
	}
	if !ok1 || !ok2 || name == "" || strings.ContainsAny(name, " \t\n+") {
		return nil, bad("it has not three parts joined by '+'")
	}
	h, err := strconv.ParseUint(hx, 16, 32)
	if err != nil || len(hx) != 8 {
		return nil, bad("its hash is not 8 hex digits")
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 33 || raw[0] != 4 {
		return nil, bad("its key is not a cosignature/v1 key (type 4, c2sp.org/tlog-cosignature) of 32 bytes in base64")
	}
	sum := sha256.Sum256(append([]byte(name+"\n"), raw...))
	if binary.BigEndian.Uint32(sum[:4]) != uint32(h) {
		return nil, bad("its hash is not the hash of its name and key")
	}
	return &WitnessKey{Name: name, Hash: uint32(h), Alg: raw[0], Key: raw[1:]}, nil
}

// Seen is the newest cosigned checkpoint of writer's log this host has
// verified (nil when none).
func (h Host) Seen(writer string) ([]byte, error) {
	b, err := os.ReadFile(h.seenPath(writer))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// Remember records cp as the newest cosigned checkpoint of writer's log
// this host has verified. Call it only once cp and its cosignatures
// checked. Two reads that verified different sizes at once keep the
// larger: the memory never moves back.
func (h Host) Remember(writer string, cp []byte) error {
	path := h.seenPath(writer)
	if err := keys.MkdirDurable(filepath.Dir(path)); err != nil {
		return err
	}
	return atomicfile.Locked(path, func() error {
		old, err := h.Seen(writer)
		if err != nil {
			return err
		}
		if old != nil && noteSize(old) > noteSize(cp) {
			return nil
		}
		return atomicfile.Write(path, cp, 0o600)
	})
}

// noteSize is the size a checkpoint note's body names (its second line),
// -1 when it names none; the note was checked before it was remembered.
func noteSize(raw []byte) int64 {
	lines := strings.SplitN(string(raw), "\n", 3)
	if len(lines) < 3 {
		return -1
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// UpdateConfig applies edit to the witness configuration and writes it,
// under a lock, so that two edits at once (witness add in two terminals)
// both land.
func (h Host) UpdateConfig(edit func(*Config) error) error {
	if err := keys.MkdirDurable(filepath.Dir(h.ConfigPath())); err != nil {
		return err
	}
	return atomicfile.Locked(h.ConfigPath(), func() error {
		c, err := h.Config()
		if err != nil {
			return err
		}
		if err := edit(c); err != nil {
			return err
		}
		return h.saveConfig(c)
	})
}
