// Package pins owns trust pinning: the pin file that names the writer keys
// a reader trusts for one repository, what `keys pin` and `keys unpin`
// change in it, and the trust level of each writer's key as `keys list`
// shows it.
//
// A reader trusts its own writer's key, the keys of an --allowed-signers
// file, and the keys pinned for this repository in its pin file,
// $BERNSTEIN_HOME/pins/<id>.allowed_signers (git's allowed_signers format,
// one line per writer; <id> is derived from the repository's git directory
// path). A published key is never trusted on its own.
package pins

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
)

// File is one repository's pin file.
type File struct {
	Path   string
	GitDir string // the repository it pins keys for, named in its header
}

// For is the pin file, under home, of the repository whose git directory
// is gitDir and whose id (among the files BERNSTEIN_HOME keeps per
// repository) is repoID.
func For(home, repoID, gitDir string) File {
	return File{Path: filepath.Join(home, "pins", repoID+".allowed_signers"), GitDir: gitDir}
}

// Stamp identifies a version of the pin file (its content hash; the file
// is small), so that trust read from it is read again when it changes.
type Stamp [sha256.Size]byte

// Stamp is the file's stamp now.
func (f File) Stamp() Stamp {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return Stamp{}
	}
	return sha256.Sum256(append(b, 1)) // never the zero stamp of no file
}

// Read reads the pin file (none yet is no pin).
func (f File) Read() ([]keys.AllowedSigner, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	as, err := keys.ParseAllowedSigners(b)
	if err != nil {
		return nil, fmt.Errorf("pin file %s: %w", f.Path, err)
	}
	return as, nil
}

// Trust levels of a writer's key, as `keys list` shows them.
const (
	TrustOwn      = "own"      // this host's writer
	TrustPinned   = "pinned"   // the published key is the pinned one
	TrustUnpinned = "unpinned" // published, nothing pins it
	TrustChanged  = "CHANGED"  // pinned, and the published key is another one
	TrustNotFound = "pinned, not published"
	// TrustUnreadable: the writer's key ref holds no key that can be read
	// (its commit or tree does not parse), so it publishes none.
	TrustUnreadable = "UNREADABLE"
)

// WriterTrust is one writer's key as this host sees it.
type WriterTrust struct {
	Writer      string   `json:"writer"`
	Key         string   `json:"key"`         // the published key, "" when none is
	Fingerprint string   `json:"fingerprint"` // of the published key
	Source      string   `json:"source"`      // the ref that publishes it
	Trust       string   `json:"trust"`
	Pinned      []string `json:"pinned"`            // fingerprints pinned for the writer (pin file and --allowed-signers)
	Problem     string   `json:"problem,omitempty"` // why the key ref cannot be read (trust UNREADABLE)
	// FirstUse: the key was pinned by a remote guard on first use, so the
	// writer may act only on the tasks it created (docs/trust.md).
	FirstUse bool `json:"first_use,omitempty"`
	// ValidAfter and ValidBefore are the pinned key's restrictions, as the
	// pin file (or --allowed-signers) writes them.
	ValidAfter  string `json:"valid_after,omitempty"`
	ValidBefore string `json:"valid_before,omitempty"`
}

// Status lists every key published under a writer's name (each of
// published gives Writer, Key, Source and Problem: a name may have several
// keys, one ref each) and every trusted writer none is published for, with
// the trust level of each key; own is this host's writer ("" when there is
// none).
func Status(published []WriterTrust, trust *keys.TrustSet, own string) []WriterTrust {
	seen := map[string]bool{}
	var out []WriterTrust
	pinnedOf := func(w string) (fps []string, firstUse bool, after, before string) {
		es := trust.Entries(w)
		for _, a := range es {
			fps = append(fps, ssh.FingerprintSHA256(a.Key))
		}
		sort.Strings(fps)
		return fps, trust.FirstUseOnly(w), "", ""
	}
	for _, p := range published {
		wk := WriterTrust{Writer: p.Writer, Key: p.Key, Source: p.Source, Problem: p.Problem}
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(p.Key)); err == nil {
			wk.Fingerprint = ssh.FingerprintSHA256(k)
			for _, a := range trust.Entries(p.Writer) {
				if bytes.Equal(a.Key.Marshal(), k.Marshal()) {
					wk.ValidAfter, wk.ValidBefore, wk.FirstUse = a.ValidAfter, a.ValidBefore, a.FirstUse
				}
			}
		}
		seen[p.Writer] = true
		wk.Pinned, _, _, _ = pinnedOf(p.Writer)
		out = append(out, wk)
	}
	for _, w := range trust.Writers() {
		if !seen[w] {
			wk := WriterTrust{Writer: w}
			wk.Pinned, wk.FirstUse, _, _ = pinnedOf(w)
			out = append(out, wk)
		}
	}
	for i := range out {
		wk := &out[i]
		switch {
		case wk.Problem != "":
			wk.Trust = TrustUnreadable
		case wk.Writer == own && (wk.Key == "" || contains(wk.Pinned, wk.Fingerprint)):
			wk.Trust = TrustOwn
		case len(wk.Pinned) == 0:
			wk.Trust = TrustUnpinned
		case wk.Key == "":
			wk.Trust = TrustNotFound
		case contains(wk.Pinned, wk.Fingerprint):
			wk.Trust = TrustPinned
		default:
			wk.Trust = TrustChanged
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Writer != out[j].Writer {
			return out[i].Writer < out[j].Writer
		}
		return out[i].Source < out[j].Source
	})
	return out
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// ErrKeyChanged reports a pin that would replace a different pinned key.
var ErrKeyChanged = errors.New("writer key changed")

// Options say what `keys pin` pins.
type Options struct {
	Writers []string // the writers to pin (empty with All)
	All     bool     // every writer found
	// From reads the keys from an allowed_signers file instead of the
	// published ones (a key handed over out of band). Its restrictions
	// (valid-after, valid-before) are kept in the pin file.
	From string
	// Key picks, by its SHA256 fingerprint, which of the keys published
	// (or in From) under a writer's name to pin, when there are several.
	Key string `json:"key,omitempty"`
	// Replace lets a pin replace a writer's different pinned key.
	Replace bool
}

// ErrAmbiguous reports a writer name under which several keys are
// published: which one to pin is the user's choice (Options.Key), after
// checking with the writer's owner.
var ErrAmbiguous = errors.New("several keys are published under the writer's name")

// Pin pins writers' keys in the pin file and returns what it pinned; the
// keys are those of o.From, else those published (writer -> authorized key
// lines). A writer whose pinned key differs from the one to pin is refused
// with ErrKeyChanged unless Replace: a changed key is loud, the way ssh
// treats a changed host key. A writer name with several keys is refused
// with ErrAmbiguous unless o.Key names one.
func (f File) Pin(o Options, published func() (map[string][]string, error)) ([]WriterTrust, error) {
	if !o.All && len(o.Writers) == 0 {
		return nil, errors.New("name the writers to pin, or pass --all")
	}
	for _, w := range o.Writers {
		if err := refs.ValidateWriter(w); err != nil {
			return nil, err
		}
	}
	candidates := map[string][]keys.AllowedSigner{} // writer -> the keys it could be pinned with
	add := func(w string, a keys.AllowedSigner) {
		for _, c := range candidates[w] {
			if bytes.Equal(c.Key.Marshal(), a.Key.Marshal()) {
				return
			}
		}
		candidates[w] = append(candidates[w], a)
	}
	if o.From != "" {
		as, err := keys.ReadAllowedSigners(o.From)
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if len(a.Namespaces) > 0 && !contains(a.Namespaces, keys.Namespace) {
				continue // not a key for git signatures
			}
			for _, p := range a.Principals {
				w := strings.TrimSuffix(p, "@bernstein")
				if refs.ValidateWriter(w) == nil {
					e := a
					e.Principals, e.Namespaces = []string{keys.Principal(w)}, []string{keys.Namespace}
					add(w, e)
				}
			}
		}
	} else {
		pub, err := published()
		if err != nil {
			return nil, err
		}
		for w, lines := range pub {
			for _, line := range lines {
				k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
				if err != nil {
					continue
				}
				add(w, keys.AllowedSigner{Principals: []string{keys.Principal(w)}, Namespaces: []string{keys.Namespace}, Key: k})
			}
		}
	}
	names := o.Writers
	if o.All {
		names = names[:0:0]
		for w := range candidates {
			names = append(names, w)
		}
		sort.Strings(names)
		if len(names) == 0 {
			return nil, errors.New("no key to pin: no writer publishes one")
		}
	}
	current, err := f.Read()
	if err != nil {
		return nil, err
	}
	// Which key each writer is pinned with.
	chosen := map[string]keys.AllowedSigner{}
	var ambiguous []string
	for _, w := range names {
		cs := candidates[w]
		if o.Key == "" && !o.Replace && len(cs) > 1 {
			// A writer pinned already keeps its key when it is still
			// published: another key under its name is someone's claim.
			for _, c := range cs {
				for _, p := range current {
					if pinsWriter(p, w) && bytes.Equal(p.Key.Marshal(), c.Key.Marshal()) {
						cs = []keys.AllowedSigner{c}
					}
				}
			}
		}
		if o.Key != "" {
			var picked []keys.AllowedSigner
			for _, c := range cs {
				if ssh.FingerprintSHA256(c.Key) == o.Key {
					picked = append(picked, c)
				}
			}
			cs = picked
			if len(cs) == 0 {
				return nil, fmt.Errorf("writer %s: no key %s found (%s)", w, o.Key, sourceName(o.From))
			}
		}
		switch len(cs) {
		case 0:
			return nil, fmt.Errorf("writer %s: no key found (%s)", w, sourceName(o.From))
		case 1:
			chosen[w] = cs[0]
		default:
			var fps []string
			for _, c := range cs {
				fps = append(fps, ssh.FingerprintSHA256(c.Key))
			}
			sort.Strings(fps)
			ambiguous = append(ambiguous, fmt.Sprintf("writer %s: %s", w, strings.Join(fps, ", ")))
		}
	}
	if len(ambiguous) > 0 {
		return nil, fmt.Errorf("%w: %s. Only one of them is the writer's: check the fingerprint with its owner, then pin that one with --key FINGERPRINT", ErrAmbiguous, strings.Join(ambiguous, "; "))
	}
	unlock, err := f.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	pins, err := f.Read()
	if err != nil {
		return nil, err
	}
	pinnedFor := func(w string) []keys.AllowedSigner {
		var out []keys.AllowedSigner
		for _, a := range pins {
			if pinsWriter(a, w) {
				out = append(out, a)
			}
		}
		return out
	}
	var done []WriterTrust
	var changed []string
	next := append([]keys.AllowedSigner(nil), pins...)
	for _, w := range names {
		a := chosen[w]
		fp := ssh.FingerprintSHA256(a.Key)
		line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(a.Key)))
		old := pinnedFor(w)
		done = append(done, WriterTrust{Writer: w, Key: line, Fingerprint: fp, Trust: TrustPinned, Pinned: []string{fp}})
		if len(old) > 0 {
			sameKey, sameTerms := true, true
			for _, p := range old {
				sameKey = sameKey && bytes.Equal(p.Key.Marshal(), a.Key.Marshal())
				// A key pinned by hand stays so when a guard meets it again
				// on first use; the other way round it is pinned anew.
				sameTerms = sameTerms && p.ValidAfter == a.ValidAfter && p.ValidBefore == a.ValidBefore && (!p.FirstUse || a.FirstUse)
			}
			if sameKey && sameTerms {
				continue
			}
			if !sameKey && !o.Replace {
				changed = append(changed, fmt.Sprintf("writer %s: the key to pin is %s, but %s is pinned", w, fp, ssh.FingerprintSHA256(old[0].Key)))
				continue
			}
		}
		// The writer's pins are replaced: another key (Replace), other
		// restrictions, or a key trusted on first use that is now pinned
		// by hand.
		next = append(withoutWriter(next, w), a)
	}
	if len(changed) > 0 {
		return nil, fmt.Errorf("%w: %s. If the writer's key was changed on purpose (check with its owner), pin it with --replace", ErrKeyChanged, strings.Join(changed, "; "))
	}
	if err := f.write(next); err != nil {
		return nil, err
	}
	return done, nil
}

// pinsWriter reports whether an allowed_signers entry names writer w.
func pinsWriter(a keys.AllowedSigner, w string) bool {
	for _, p := range a.Principals {
		if strings.TrimSuffix(p, "@bernstein") == w {
			return true
		}
	}
	return false
}

// withoutWriter drops the entries that name writer w.
func withoutWriter(as []keys.AllowedSigner, w string) []keys.AllowedSigner {
	var out []keys.AllowedSigner
	for _, a := range as {
		if !pinsWriter(a, w) {
			out = append(out, a)
		}
	}
	return out
}

// ErrNotPinned reports an unpin of a writer the pin file does not name.
var ErrNotPinned = errors.New("writer is not pinned")

// Unpin removes writers from the pin file.
func (f File) Unpin(writers []string) error {
	unlock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock()
	pins, err := f.Read()
	if err != nil {
		return err
	}
	for _, w := range writers {
		n := len(pins)
		pins = withoutWriter(pins, w)
		if len(pins) == n {
			return fmt.Errorf("%w: %s (pin file %s)", ErrNotPinned, w, f.Path)
		}
	}
	return f.write(pins)
}

func sourceName(from string) string {
	if from != "" {
		return "in " + from
	}
	return "published in " + refs.WritersPrefix + "* or " + refs.Keys
}

// lock serializes changes to the pin file across processes, so that two
// pins made at once are both kept.
func (f File) lock() (func(), error) {
	path := f.Path + ".lock"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	l, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX); err != nil {
		l.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(l.Fd()), syscall.LOCK_UN)
		l.Close()
	}, nil
}

// write writes the pin file whole (temporary file, sync, rename).
func (f File) write(as []keys.AllowedSigner) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Writer keys pinned for the bernstein repository %s\n", f.GitDir)
	fmt.Fprintf(&b, "# (git's allowed_signers format; written by 'bernstein keys pin')\n")
	for _, a := range as {
		for _, p := range a.Principals {
			b.WriteString(a.Line(strings.TrimSuffix(p, "@bernstein")))
			b.WriteByte('\n')
		}
	}
	if err := keys.MkdirDurable(filepath.Dir(f.Path)); err != nil {
		return err
	}
	if err := keys.WritePrivate(f.Path, b.Bytes()); err != nil {
		return err
	}
	return keys.SyncDir(filepath.Dir(f.Path))
}
