package keys

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

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
	cs, err := ParseCommitSignature(armored)
	if err != nil {
		return nil, nil, err
	}
	return cs.Key, cs.sig, nil
}

// VerifyCommit checks an armored SSH commit signature over payload by pub.
func VerifyCommit(payload, armored []byte, pub ssh.PublicKey) error {
	cs, err := ParseCommitSignature(armored)
	if err != nil {
		return err
	}
	return VerifyCommitSignature(payload, cs, pub)
}

// CommitSignature is an armored SSH commit signature parsed once, for both
// the key it claims and its verification.
type CommitSignature struct {
	// Key is the public key the signature claims; KeyID is its wire form,
	// which identifies it.
	Key   ssh.PublicKey
	KeyID string
	sig   *sshsig.Signature
	ed    []byte // the 32 key bytes when Key is an ssh-ed25519 key
}

// ParseCommitSignature unarmours and parses an SSH commit signature. It
// accepts and rejects exactly what sshsig.Unarmor does, with the same
// errors as CommitSigner; the signatures git and bernstein write take a
// direct path (see parseArmored), anything else the library's.
func ParseCommitSignature(armored []byte) (*CommitSignature, error) {
	if cs := parseArmored(armored); cs != nil {
		return cs, nil
	}
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	k := internKey(sig.PublicKey.Marshal(), sig.PublicKey)
	sig.PublicKey = k.key
	return &CommitSignature{Key: k.key, KeyID: k.id, sig: sig, ed: k.ed}, nil
}

// VerifyCommitSignature checks a parsed commit signature over payload by
// pub, as VerifyCommit checks the armored one.
func VerifyCommitSignature(payload []byte, cs *CommitSignature, pub ssh.PublicKey) error {
	return verifyParsed(payload, cs.sig, pub)
}

// Ed25519 returns what a verification of cs over payload by its own key
// (cs.Key) comes down to when that key is an ssh-ed25519 key: the
// crypto/ed25519 verification of sig over msg by key. VerifyCommitSignature
// (payload, cs, cs.Key) succeeds exactly when ed25519.Verify(key, msg, sig)
// holds. ok is false when the signature takes another path (another key
// type or signature format, another namespace); then only
// VerifyCommitSignature decides. msg is appended to buf.
func (cs *CommitSignature) Ed25519(payload, buf []byte) (key, msg, sig []byte, ok bool) {
	s := cs.sig
	if cs.ed == nil || s.Namespace != Namespace || s.Signature.Format != ssh.KeyAlgoED25519 {
		return nil, nil, nil, false
	}
	// sshsig.Verify: the hash of the message, then the public key's
	// Verify over the signed data (ed25519.Verify for an ssh-ed25519 key
	// whose signature has that format).
	var sum []byte
	var d512 [64]byte
	var d256 [32]byte
	switch s.HashAlgorithm {
	case sshsig.HashSHA512:
		d512 = sha512.Sum512(payload)
		sum = d512[:]
	case sshsig.HashSHA256:
		d256 = sha256.Sum256(payload)
		sum = d256[:]
	default:
		return nil, nil, nil, false
	}
	// signedData: "SSHSIG", then the namespace, the reserved string, the
	// hash algorithm and the hash, each a uint32-length-prefixed string.
	msg = append(buf, "SSHSIG"...)
	for _, f := range [][]byte{[]byte(Namespace), nil, []byte(s.HashAlgorithm), sum} {
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(f)))
		msg = append(msg, f...)
	}
	return cs.ed, msg, s.Signature.Blob, true
}

// parseArmored parses the armour sshsig.Armor writes (pem.EncodeToMemory of
// one "SSH SIGNATURE" block, nothing before or after it) around the wire
// form of an ssh-ed25519 signature, without reflection. Within that form it
// decodes exactly as pem.Decode, ssh.Unmarshal, ssh.ParsePublicKey and
// sshsig's checks do (the tests compare both on mutated inputs); it returns
// nil for anything else, which then takes the general path.
func parseArmored(b []byte) *CommitSignature {
	const begin, end = "-----BEGIN SSH SIGNATURE-----\n", "\n-----END SSH SIGNATURE-----"
	if !bytes.HasPrefix(b, []byte(begin)) {
		return nil
	}
	body := b[len(begin):]
	i := bytes.Index(body, []byte("\n-----END "))
	if i <= 0 || !bytes.HasPrefix(body[i:], []byte(end)) {
		return nil
	}
	if after := body[i+len(end):]; len(after) > 1 || len(after) == 1 && after[0] != '\n' {
		return nil
	}
	body = body[:i]
	for _, c := range body {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '\n') {
			return nil
		}
	}
	var stack [512]byte
	raw := stack[:0]
	if n := base64.StdEncoding.DecodedLen(len(body)); n > len(stack) {
		raw = make([]byte, n)
	} else {
		raw = stack[:n]
	}
	n, err := base64.StdEncoding.Decode(raw, body)
	if err != nil {
		return nil
	}
	w := raw[:n]
	// The blob: magic, version 1, public key, namespace, reserved, hash
	// algorithm, signature, and nothing after.
	if len(w) < 6 || string(w[:6]) != "SSHSIG" {
		return nil
	}
	w = w[6:]
	if len(w) < 4 || binary.BigEndian.Uint32(w) != 1 {
		return nil
	}
	w = w[4:]
	pub, w, ok1 := wireString(w)
	ns, w, ok2 := wireString(w)
	_, w, ok3 := wireString(w) // reserved
	hash, w, ok4 := wireString(w)
	sigBytes, w, ok5 := wireString(w)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil
	}
	if len(w) != 0 || (string(hash) != string(sshsig.HashSHA256) && string(hash) != string(sshsig.HashSHA512)) {
		return nil
	}
	// The signature: format, blob, and whatever follows (ssh:"rest").
	format, rest, ok := wireString(sigBytes)
	if !ok {
		return nil
	}
	blob, rest, ok := wireString(rest)
	if !ok {
		return nil
	}
	// The public key: an ssh-ed25519 key of 32 bytes, nothing after.
	algo, kr, ok := wireString(pub)
	if !ok || string(algo) != ssh.KeyAlgoED25519 {
		return nil
	}
	keyBytes, kr, ok := wireString(kr)
	if !ok || len(keyBytes) != 32 || len(kr) != 0 {
		return nil
	}
	k := internKey(pub, nil)
	if k == nil {
		return nil
	}
	sig := &sshsig.Signature{
		Version:       1,
		PublicKey:     k.key,
		Namespace:     string(ns),
		HashAlgorithm: sshsig.HashAlgorithm(hash),
		Signature:     &ssh.Signature{Format: string(format), Blob: bytes.Clone(blob), Rest: bytes.Clone(rest)},
	}
	return &CommitSignature{Key: k.key, KeyID: k.id, sig: sig, ed: k.ed}
}

// wireString reads a uint32-length-prefixed string, as ssh's parseString.
func wireString(in []byte) (s, rest []byte, ok bool) {
	if len(in) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(in)
	in = in[4:]
	if uint32(len(in)) < n {
		return nil, nil, false
	}
	return in[:n], in[n:], true
}

// knownKey is a parsed public key, shared by every signature that claims it.
type knownKey struct {
	key ssh.PublicKey
	id  string // wire form
	ed  []byte // ed25519 key bytes, for ssh-ed25519 keys
}

var (
	keysMu sync.Mutex
	known  = map[string]*knownKey{}
)

// internKey returns the shared parse of the public key with wire form wire;
// parsed, when not nil, is that parse. It returns nil when wire does not
// parse.
func internKey(wire []byte, parsed ssh.PublicKey) *knownKey {
	keysMu.Lock()
	k := known[string(wire)]
	keysMu.Unlock()
	if k != nil {
		return k
	}
	own := bytes.Clone(wire) // a parsed key keeps its bytes; wire is the caller's
	if parsed == nil {
		var err error
		if parsed, err = ssh.ParsePublicKey(own); err != nil {
			return nil
		}
	}
	k = &knownKey{key: parsed, id: string(own)}
	if parsed.Type() == ssh.KeyAlgoED25519 {
		if ck, ok := parsed.(ssh.CryptoPublicKey); ok {
			if ek, ok := ck.CryptoPublicKey().(ed25519.PublicKey); ok && len(ek) == ed25519.PublicKeySize {
				k.ed = ek
			}
		}
	}
	keysMu.Lock()
	defer keysMu.Unlock()
	if prev := known[k.id]; prev != nil {
		return prev
	}
	if len(known) < 1024 {
		known[k.id] = k
	}
	return k
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
	// ValidAfter and ValidBefore are the line's valid-after and
	// valid-before options as written ("" when absent): a key is valid for
	// signatures made (as git tells ssh-keygen: at the commit's committer
	// date) at or after the one and at or before the other. After and
	// Before are the same as Unix seconds (0 when absent).
	ValidAfter, ValidBefore string
	After, Before           int64
	Key                     ssh.PublicKey
	// FirstUse marks a key the remote guard pinned on first use (the
	// comment line FirstUseComment before it): a writer trusted only so may
	// act on the tasks it created and on no other (docs/trust.md).
	FirstUse bool
}

// FirstUseComment is the comment line a pin file writes before a key the
// remote guard pinned on first use. allowed_signers has no option for it
// (ssh-keygen refuses options it does not know), and git reads a comment
// as nothing.
const FirstUseComment = "# bernstein: trusted on first use"

// ParseAllowedSigners parses git's allowed_signers format (as ssh-keygen's
// ALLOWED SIGNERS section describes it). Certificate authorities are not
// supported and are refused, as are options ssh-keygen does not know.
func ParseAllowedSigners(data []byte) ([]AllowedSigner, error) {
	var out []AllowedSigner
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	firstUse := false
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == FirstUseComment {
			firstUse = true
			continue
		}
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
		as := AllowedSigner{Principals: strings.Split(strings.Trim(principals, `"`), ","), Key: key, FirstUse: firstUse}
		firstUse = false
		for _, o := range splitOptions(opts) {
			name, val, _ := strings.Cut(o, "=")
			val = strings.Trim(val, `"`)
			switch strings.ToLower(name) {
			case "namespaces":
				as.Namespaces = strings.Split(val, ",")
			case "valid-after":
				if as.After, err = ParseSignerTime(val); err != nil {
					return nil, fmt.Errorf("allowed signers line %d: valid-after: %v", n, err)
				}
				as.ValidAfter = val
			case "valid-before":
				if as.Before, err = ParseSignerTime(val); err != nil {
					return nil, fmt.Errorf("allowed signers line %d: valid-before: %v", n, err)
				}
				as.ValidBefore = val
			case "cert-authority":
				return nil, fmt.Errorf("allowed signers line %d: cert-authority is not supported", n)
			default:
				return nil, fmt.Errorf("allowed signers line %d: unknown option %q (ssh-keygen knows namespaces, valid-after, valid-before and cert-authority)", n, name)
			}
		}
		out = append(out, as)
	}
	return out, sc.Err()
}

// ParseSignerTime reads a valid-after or valid-before time as ssh-keygen
// does: YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS, in UTC with a trailing
// "Z" and in the local time zone without one.
func ParseSignerTime(s string) (int64, error) {
	loc := time.Local
	if t, ok := strings.CutSuffix(s, "Z"); ok {
		s, loc = t, time.UTC
	}
	layout := map[int]string{8: "20060102", 12: "200601021504", 14: "20060102150405"}[len(s)]
	if layout == "" {
		return 0, fmt.Errorf("%q: want YYYYMMDD[HHMM[SS]][Z]", s)
	}
	t, err := time.ParseInLocation(layout, s, loc)
	if err != nil {
		return 0, fmt.Errorf("%q: %v", s, err)
	}
	return t.Unix(), nil
}

// ValidAt reports whether the line's key is valid for a signature made at
// when (Unix seconds), as ssh-keygen decides it for git: valid-after at or
// before when, valid-before at or after it.
func (a AllowedSigner) ValidAt(when int64) bool {
	return (a.ValidAfter == "" || when >= a.After) && (a.ValidBefore == "" || when <= a.Before)
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

// Line formats the entry for writer as an allowed_signers line that keeps
// its restrictions: the git namespace, valid-after and valid-before.
func (a AllowedSigner) Line(writer string) string {
	opts := `namespaces="git"`
	if a.ValidAfter != "" {
		opts += `,valid-after="` + a.ValidAfter + `"`
	}
	if a.ValidBefore != "" {
		opts += `,valid-before="` + a.ValidBefore + `"`
	}
	line := Principal(writer) + " " + opts + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(a.Key)))
	if a.FirstUse {
		line = FirstUseComment + "\n" + line
	}
	return line
}

// TrustSet holds the keys a reader trusts, by writer, with the
// restrictions each was trusted under.
type TrustSet struct {
	byWriter map[string][]AllowedSigner
}

// NewTrustSet builds a trust set from pinned allowed signers (a principal
// "W@bernstein" or "W" binds a key to writer W; a key whose namespaces
// leave out "git" signs no commit) and an optional local identity, whose
// own key is always trusted.
func NewTrustSet(pinned []AllowedSigner, local *Identity) *TrustSet {
	t := &TrustSet{byWriter: map[string][]AllowedSigner{}}
	for _, a := range pinned {
		if len(a.Namespaces) > 0 && !contains(a.Namespaces, Namespace) {
			continue
		}
		for _, p := range a.Principals {
			w := strings.TrimSuffix(p, "@bernstein")
			t.byWriter[w] = append(t.byWriter[w], a)
		}
	}
	if local != nil {
		t.byWriter[local.Writer] = append(t.byWriter[local.Writer], AllowedSigner{Principals: []string{Principal(local.Writer)}, Key: local.PublicKey()})
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

// Trusted returns the keys trusted for writer (whatever their
// restrictions).
func (t *TrustSet) Trusted(writer string) []ssh.PublicKey {
	if t == nil {
		return nil
	}
	var out []ssh.PublicKey
	for _, a := range t.byWriter[writer] {
		out = append(out, a.Key)
	}
	return out
}

// Entries returns the entries that trust a key for writer, with their
// restrictions.
func (t *TrustSet) Entries(writer string) []AllowedSigner {
	if t == nil {
		return nil
	}
	return t.byWriter[writer]
}

// IsTrusted reports whether key is trusted for writer at some time.
func (t *TrustSet) IsTrusted(writer string, key ssh.PublicKey) bool {
	kb := key.Marshal()
	for _, k := range t.Trusted(writer) {
		if bytes.Equal(k.Marshal(), kb) {
			return true
		}
	}
	return false
}

// TrustedAt says whether key is trusted for writer for a signature made at
// when (Unix seconds): "" when an entry that trusts it is valid then, else
// why not (the key expired, or is not valid yet). A key some entry trusts
// with no restriction is valid at any time.
func (t *TrustSet) TrustedAt(writer string, key ssh.PublicKey, when int64) string {
	kb := key.Marshal()
	var why []string
	for _, a := range t.Entries(writer) {
		if !bytes.Equal(a.Key.Marshal(), kb) {
			continue
		}
		if a.ValidAt(when) {
			return ""
		}
		at := time.Unix(when, 0).UTC().Format(time.RFC3339)
		if a.ValidBefore != "" && when > a.Before {
			why = append(why, fmt.Sprintf("key %s of writer %s expired: signed at %s, valid before %s", ssh.FingerprintSHA256(key), writer, at, a.ValidBefore))
		} else {
			why = append(why, fmt.Sprintf("key %s of writer %s was not valid yet: signed at %s, valid after %s", ssh.FingerprintSHA256(key), writer, at, a.ValidAfter))
		}
	}
	if len(why) == 0 {
		return fmt.Sprintf("key %s is not trusted for writer %s", ssh.FingerprintSHA256(key), writer)
	}
	return strings.Join(why, "; ")
}

// Restricted reports whether any entry for writer restricts when its key
// is valid, so that a signature's date matters.
func (t *TrustSet) Restricted(writer string) bool {
	for _, a := range t.Entries(writer) {
		if a.ValidAfter != "" || a.ValidBefore != "" {
			return true
		}
	}
	return false
}

// FirstUseOnly reports whether writer is trusted only on first use: every
// key trusted for it was pinned so by a remote guard.
func (t *TrustSet) FirstUseOnly(writer string) bool {
	es := t.Entries(writer)
	for _, a := range es {
		if !a.FirstUse {
			return false
		}
	}
	return len(es) > 0
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

// Fingerprint identifies the trusted keys (writers, key fingerprints and
// their restrictions, sorted), so that something derived under one trust
// set is not taken for something derived under another.
func (t *TrustSet) Fingerprint() string {
	if t == nil {
		return ""
	}
	var lines []string
	for w, es := range t.byWriter {
		for _, a := range es {
			lines = append(lines, fmt.Sprintf("%s %s %s %s %v", w, ssh.FingerprintSHA256(a.Key), a.ValidAfter, a.ValidBefore, a.FirstUse))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
