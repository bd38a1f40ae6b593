// Package witness is a client for transparency-log witnesses that speak the
// C2SP tlog-witness protocol (https://c2sp.org/tlog-witness): it submits a
// signed checkpoint with a consistency proof, verifies the witness's
// timestamped cosignature (https://c2sp.org/tlog-cosignature), and probes a
// witness for the newest size it has cosigned for a log.
package witness

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

// algCosignatureV1 is the signed-note key type of an Ed25519 cosignature/v1
// key (c2sp.org/tlog-cosignature), the only kind of witness key accepted.
const algCosignatureV1 = 4

// Witness names one witness: Name is how this host calls it (it appears in
// errors), URL is its submission prefix (add-checkpoint is POSTed to
// URL + "/add-checkpoint") and Key is its verifier key in signed-note vkey
// form, name+hash+base64, as litewitness prints it.
type Witness struct {
	Name string
	URL  string
	Key  string
}

// ParseWitness returns the witness with these fields after checking them.
func ParseWitness(name, rawURL, key string) (Witness, error) {
	w := Witness{Name: name, URL: rawURL, Key: key}
	return w, w.Validate()
}

// Validate checks the name, the URL and the key, and names what is wrong.
func (w Witness) Validate() error {
	if w.Name == "" || strings.ContainsFunc(w.Name, isSpaceOrControl) {
		return fmt.Errorf("witness name %q: must be non-empty, without spaces or control characters", w.Name)
	}
	if err := checkURL(w.URL); err != nil {
		return fmt.Errorf("witness %s: %w", w.Name, err)
	}
	if _, err := w.verifier(); err != nil {
		return err
	}
	return nil
}

// KeyName is the name inside the witness's key: the name its cosignature
// lines carry.
func (w Witness) KeyName() string {
	name, _, _ := strings.Cut(w.Key, "+")
	return name
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("bad URL %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("bad URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("bad URL %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("bad URL %q: a witness URL has no query, fragment or user", raw)
	}
	return nil
}

// verifier parses w.Key: a cosignature/v1 Ed25519 vkey whose key hash matches
// its name and key.
func (w Witness) verifier() (note.Verifier, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("witness %s: bad key %q: %s", w.Name, w.Key, fmt.Sprintf(format, a...))
	}
	parts := strings.SplitN(w.Key, "+", 3)
	if len(parts) != 3 {
		return nil, bad("want name+hash+base64")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) == 0 {
		return nil, bad("the key is not base64")
	}
	if raw[0] != algCosignatureV1 {
		return nil, bad("unsupported algorithm %d: a witness key is an Ed25519 cosignature/v1 key (type %d)", raw[0], algCosignatureV1)
	}
	v, err := fnote.NewVerifierForCosignatureV1(w.Key)
	if err != nil {
		return nil, bad("%v", err)
	}
	hash, err := strconv.ParseUint(parts[1], 16, 32)
	if err != nil || len(parts[1]) != 8 {
		return nil, bad("the key hash %q is not 8 hex digits", parts[1])
	}
	if uint32(hash) != v.KeyHash() {
		return nil, bad("the key hash %s does not match the name and key (want %08x)", parts[1], v.KeyHash())
	}
	return v, nil
}

// checkpointText splits a signed checkpoint note into its text (ending in a
// newline) and parses that text as a tlog-checkpoint.
func checkpointText(signed []byte) ([]byte, log.Checkpoint, error) {
	var c log.Checkpoint
	text := signed
	if i := bytes.LastIndex(signed, []byte("\n\n")); i >= 0 {
		text = signed[:i+1]
	}
	if len(text) == 0 || text[len(text)-1] != '\n' {
		return nil, c, errors.New("checkpoint does not end in a newline")
	}
	if _, err := c.Unmarshal(text); err != nil {
		return nil, c, fmt.Errorf("bad checkpoint: %w", err)
	}
	if len(c.Hash) != 32 {
		return nil, c, fmt.Errorf("bad checkpoint: the root hash has %d bytes, want 32", len(c.Hash))
	}
	return text, c, nil
}
