package keys

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Namespace is the SSH signature namespace git uses for commits.
const Namespace = "git"

func signSSH(s ssh.Signer, payload []byte) ([]byte, error) {
	sig, err := sshsig.Sign(bytes.NewReader(payload), s, sshsig.HashSHA512, Namespace)
	if err != nil {
		return nil, fmt.Errorf("ssh signature: %w", err)
	}
	return sshsig.Armor(sig), nil
}

// ErrBadSignature reports a signature that does not verify.
var ErrBadSignature = errors.New("signature does not verify")

// CommitSigner returns the public key an armored commit signature claims.
func CommitSigner(armored []byte) (ssh.PublicKey, *sshsig.Signature, error) {
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return sig.PublicKey, sig, nil
}

// VerifyCommit checks an armored SSH commit signature over payload by pub.
func VerifyCommit(payload, armored []byte, pub ssh.PublicKey) error {
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return verifyParsed(payload, sig, pub)
}

func verifyParsed(payload []byte, sig *sshsig.Signature, pub ssh.PublicKey) error {
	if err := sshsig.Verify(bytes.NewReader(payload), sig, pub, sig.HashAlgorithm, Namespace); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return nil
}

// AllowedSigner is one line of an allowed_signers file.
type AllowedSigner struct {
	Principals []string
	Namespaces []string // empty: any
	Key        ssh.PublicKey
}

// ParseAllowedSigners parses git's allowed_signers format (as ssh-keygen's
// ALLOWED SIGNERS section describes it). Certificate authorities are not
// supported and are refused.
func ParseAllowedSigners(data []byte) ([]AllowedSigner, error) {
	var out []AllowedSigner
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		principals, rest := splitField(line)
		if principals == "" {
			return nil, fmt.Errorf("allowed signers line %d: no principals", n)
		}
		var opts string
		rest = strings.TrimSpace(rest)
		if !looksLikeKeyType(rest) {
			opts, rest = splitField(rest)
		}
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(rest)))
		if err != nil {
			return nil, fmt.Errorf("allowed signers line %d: %v", n, err)
		}
		as := AllowedSigner{Principals: strings.Split(strings.Trim(principals, `"`), ","), Key: key}
		for _, o := range splitOptions(opts) {
			name, val, _ := strings.Cut(o, "=")
			switch strings.ToLower(name) {
			case "namespaces":
				as.Namespaces = strings.Split(strings.Trim(val, `"`), ",")
			case "cert-authority":
				return nil, fmt.Errorf("allowed signers line %d: cert-authority is not supported", n)
			}
		}
		out = append(out, as)
	}
	return out, sc.Err()
}

// ReadAllowedSigners parses the allowed_signers file at path.
func ReadAllowedSigners(path string) ([]AllowedSigner, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("allowed signers: %w", err)
	}
	as, err := ParseAllowedSigners(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return as, nil
}

func looksLikeKeyType(s string) bool {
	return strings.HasPrefix(s, "ssh-") || strings.HasPrefix(s, "ecdsa-") || strings.HasPrefix(s, "sk-")
}

// splitField splits off the first white-space separated field, honouring
// double quotes.
func splitField(s string) (string, string) {
	inQ := false
	for i, c := range s {
		switch {
		case c == '"':
			inQ = !inQ
		case (c == ' ' || c == '\t') && !inQ:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

func splitOptions(s string) []string {
	var out []string
	inQ := false
	start := 0
	for i, c := range s {
		switch {
		case c == '"':
			inQ = !inQ
		case c == ',' && !inQ:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// AllowedSignersLine formats one allowed_signers line for a writer's key.
func AllowedSignersLine(writer, authorizedKey string) string {
	return Principal(writer) + ` namespaces="git" ` + authorizedKey
}

// TrustSet holds the keys a reader trusts, by writer.
type TrustSet struct {
	byWriter map[string][]ssh.PublicKey
}

// NewTrustSet builds a trust set from pinned allowed signers (a principal
// "W@bernstein" or "W" binds a key to writer W) and an optional local
// identity, whose own key is always trusted.
func NewTrustSet(pinned []AllowedSigner, local *Identity) *TrustSet {
	t := &TrustSet{byWriter: map[string][]ssh.PublicKey{}}
	for _, a := range pinned {
		if len(a.Namespaces) > 0 && !contains(a.Namespaces, Namespace) {
			continue
		}
		for _, p := range a.Principals {
			w := strings.TrimSuffix(p, "@bernstein")
			t.byWriter[w] = append(t.byWriter[w], a.Key)
		}
	}
	if local != nil {
		t.byWriter[local.Writer] = append(t.byWriter[local.Writer], local.PublicKey())
	}
	return t
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Trusted returns the keys trusted for writer.
func (t *TrustSet) Trusted(writer string) []ssh.PublicKey {
	if t == nil {
		return nil
	}
	return t.byWriter[writer]
}

// IsTrusted reports whether key is trusted for writer.
func (t *TrustSet) IsTrusted(writer string, key ssh.PublicKey) bool {
	kb := key.Marshal()
	for _, k := range t.Trusted(writer) {
		if bytes.Equal(k.Marshal(), kb) {
			return true
		}
	}
	return false
}

// Writers lists the writers the set trusts a key for, sorted.
func (t *TrustSet) Writers() []string {
	if t == nil {
		return nil
	}
	out := make([]string, 0, len(t.byWriter))
	for w := range t.byWriter {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// Anchored reports whether the set trusts any key at all.
func (t *TrustSet) Anchored() bool { return t != nil && len(t.byWriter) > 0 }

// Fingerprint identifies the trusted keys (writers and key fingerprints,
// sorted), so that something derived under one trust set is not taken for
// something derived under another.
func (t *TrustSet) Fingerprint() string {
	if t == nil {
		return ""
	}
	var lines []string
	for w, ks := range t.byWriter {
		for _, k := range ks {
			lines = append(lines, w+" "+ssh.FingerprintSHA256(k))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
