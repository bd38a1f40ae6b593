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
}

// Status lists every writer whose key is published (each of published
// gives Writer, Key, Source and Problem) or trusted, with the trust level
// of its key; own is this host's writer ("" when there is none).
func Status(published []WriterTrust, trust *keys.TrustSet, own string) []WriterTrust {
	byWriter := map[string]*WriterTrust{}
	for _, p := range published {
		wk := &WriterTrust{Writer: p.Writer, Key: p.Key, Source: p.Source, Problem: p.Problem}
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(p.Key)); err == nil {
			wk.Fingerprint = ssh.FingerprintSHA256(k)
		}
		byWriter[p.Writer] = wk
	}
	for _, w := range trust.Writers() {
		if _, ok := byWriter[w]; !ok {
			byWriter[w] = &WriterTrust{Writer: w}
		}
	}
	out := make([]WriterTrust, 0, len(byWriter))
	for w, wk := range byWriter {
		for _, k := range trust.Trusted(w) {
			wk.Pinned = append(wk.Pinned, ssh.FingerprintSHA256(k))
		}
		sort.Strings(wk.Pinned)
		switch {
		case wk.Problem != "":
			wk.Trust = TrustUnreadable
		case w == own && (wk.Key == "" || contains(wk.Pinned, wk.Fingerprint)):
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
		out = append(out, *wk)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Writer < out[j].Writer })
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
	// published ones (a key handed over out of band).
	From string
	// Replace lets a pin replace a writer's different pinned key.
	Replace bool
	// Fingerprint, with one writer, is the SHA256 fingerprint its key must
	// have: the key an operator checked, not whatever is published when
	// the pin runs.
	Fingerprint string
}

// Pin pins writers' keys in the pin file and returns what it pinned; the
// keys are those of o.From, else those published (writer -> authorized key
// line). A writer whose pinned key differs from the one to pin is refused
// with ErrKeyChanged unless Replace: a changed key is loud, the way ssh
// treats a changed host key.
func (f File) Pin(o Options, published func() (map[string]string, error)) ([]WriterTrust, error) {
	if !o.All && len(o.Writers) == 0 {
		return nil, errors.New("name the writers to pin, or pass --all")
	}
	for _, w := range o.Writers {
		if err := refs.ValidateWriter(w); err != nil {
			return nil, err
		}
	}
	if o.Fingerprint != "" && (o.All || len(o.Writers) != 1) {
		return nil, errors.New("--fingerprint names the key of one writer: give exactly one")
	}
	candidates := map[string]string{} // writer -> authorized key line
	if o.From != "" {
		as, err := keys.ReadAllowedSigners(o.From)
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if len(a.Namespaces) > 0 && !contains(a.Namespaces, keys.Namespace) {
				continue // not a key for git signatures
			}
			line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(a.Key)))
			for _, p := range a.Principals {
				w := strings.TrimSuffix(p, "@bernstein")
				if refs.ValidateWriter(w) == nil {
					candidates[w] = line
				}
			}
		}
	} else {
		pub, err := published()
		if err != nil {
			return nil, err
		}
		for w, line := range pub {
			candidates[w] = line
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
		line, ok := candidates[w]
		if !ok {
			return nil, fmt.Errorf("writer %s: no key found (%s)", w, sourceName(o.From))
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("writer %s: %v", w, err)
		}
		fp := ssh.FingerprintSHA256(k)
		if o.Fingerprint != "" && o.Fingerprint != fp {
			return nil, fmt.Errorf("writer %s: the key to pin is %s, not %s: nothing pinned", w, fp, o.Fingerprint)
		}
		old := pinnedFor(w)
		same := false
		for _, a := range old {
			same = same || ssh.FingerprintSHA256(a.Key) == fp
		}
		if same {
			done = append(done, WriterTrust{Writer: w, Key: line, Fingerprint: fp, Trust: TrustPinned, Pinned: []string{fp}})
			continue
		}
		if len(old) > 0 && !o.Replace {
			changed = append(changed, fmt.Sprintf("writer %s: the key to pin is %s, but %s is pinned", w, fp, ssh.FingerprintSHA256(old[0].Key)))
			continue
		}
		// Replace: drop the writer's old pins.
		next = append(withoutWriter(next, w), keys.AllowedSigner{Principals: []string{keys.Principal(w)}, Namespaces: []string{keys.Namespace}, Key: k})
		done = append(done, WriterTrust{Writer: w, Key: line, Fingerprint: fp, Trust: TrustPinned, Pinned: []string{fp}})
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
			b.WriteString(keys.AllowedSignersLine(strings.TrimSuffix(p, "@bernstein"), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(a.Key)))))
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
