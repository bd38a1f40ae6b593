// Package auditcheckpoint owns audit checkpoints: what one `audit verify`
// found whole (the value of every ref under refs/bernstein/ it walked, and
// the keys it trusted), signed with the verifier's writer key and kept
// outside the repository ($BERNSTEIN_HOME/audits/<id>/<name>), where the
// attacker this design faces cannot write. `audit verify --since <name>`
// then checks only what was added after it, and that nothing it covered was
// taken away.
package auditcheckpoint

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
)

// ErrNoCheckpoint reports an audit checkpoint that does not exist.
var ErrNoCheckpoint = errors.New("no such audit checkpoint")

// ErrBadCheckpoint reports an audit checkpoint that cannot be used: not
// signed by this host's writer, of another repository, or taken under
// trust this host no longer gives.
var ErrBadCheckpoint = errors.New("audit checkpoint cannot be used")

var checkpointName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidateName checks the name of an audit checkpoint.
func ValidateName(name string) error {
	if !checkpointName.MatchString(name) || strings.Contains(name, "..") {
		return &artifact.InputError{Field: "checkpoint", Msg: fmt.Sprintf("%q: want 1 to 64 of A-Z a-z 0-9 _ . - starting with a letter or digit, no '..'", name)}
	}
	return nil
}

// Checkpoint is a signed record of what an audit verify found whole.
type Checkpoint struct {
	V      int                 `json:"v"`
	Name   string              `json:"name"`
	GitDir string              `json:"git_dir"` // the repository's git directory, absolute
	Writer string              `json:"writer"`  // the verifier: the writer that signed it
	Time   int64               `json:"time"`    // when it was taken (Unix seconds; display only)
	Refs   map[string]string   `json:"refs"`    // every ref under refs/bernstein/ walked, by name
	Trust  map[string][]string `json:"trust"`   // the keys trusted, by writer (authorized key lines)
	// Heads is where the heads file of this host's writer stood before
	// the refs were read (internal/heads, Position): the heads written
	// after it are the ones --since checks for rollbacks. Empty in a
	// checkpoint taken before it was kept: --since then checks every head.
	Heads string `json:"heads,omitempty"`
}

const checkpointMagic = "bernstein audit checkpoint v1"

// Dir is where one repository's audit checkpoints are kept.
type Dir struct {
	Path   string // $BERNSTEIN_HOME/audits/<id>
	GitDir string // the repository's git directory, as a checkpoint names it
}

// For is the checkpoint folder, under home, of the repository whose git
// directory is gitDir and whose id (among the files BERNSTEIN_HOME keeps
// per repository) is repoID.
func For(home, repoID, gitDir string) Dir {
	if abs, err := filepath.Abs(gitDir); err == nil {
		gitDir = abs
	}
	if real, err := filepath.EvalSymlinks(gitDir); err == nil {
		gitDir = real
	}
	return Dir{Path: filepath.Join(home, "audits", repoID), GitDir: gitDir}
}

// TrustRecord lists the keys of trust by writer, as a checkpoint keeps them.
func TrustRecord(trust *keys.TrustSet) map[string][]string {
	out := map[string][]string{}
	for _, w := range trust.Writers() {
		var lines []string
		for _, k := range trust.Trusted(w) {
			lines = append(lines, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))))
		}
		sort.Strings(lines)
		out[w] = lines
	}
	return out
}

// Save signs cp with this host's writer key (identity loads it) and writes
// it durably (temporary file, sync, rename, directory sync).
func (d Dir) Save(identity func() (*keys.Identity, error), cp *Checkpoint) error {
	id, idErr := identity()
	if idErr != nil {
		return fmt.Errorf("an audit checkpoint is signed by this host's writer: %w", idErr)
	}
	cp.V, cp.Writer, cp.GitDir = 1, id.Writer, d.GitDir
	body, err := record.Canonical(cp)
	if err != nil {
		return err
	}
	sig, err := id.SignDetached(body)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n%s\n%s\n", checkpointMagic, base64.StdEncoding.EncodeToString(sig), body)
	path := filepath.Join(d.Path, cp.Name)
	if err := keys.MkdirDurable(filepath.Dir(path)); err != nil {
		return err
	}
	if err := keys.WritePrivate(path, b.Bytes()); err != nil {
		return err
	}
	return keys.SyncDir(filepath.Dir(path))
}

// Load reads checkpoint name and checks that this host's writer (identity
// loads it) signed it, for this repository.
func (d Dir) Load(identity func() (*keys.Identity, error), name string) (*Checkpoint, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(d.Path, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (none at %s; 'bernstein audit verify --checkpoint %s' takes one)", ErrNoCheckpoint, name, path, name)
	}
	if err != nil {
		return nil, err
	}
	bad := func(why string) error { return fmt.Errorf("%w: %s (%s): %s", ErrBadCheckpoint, name, path, why) }
	lines := bytes.SplitN(data, []byte("\n"), 3)
	if len(lines) != 3 || string(lines[0]) != checkpointMagic || !bytes.HasSuffix(lines[2], []byte("\n")) {
		return nil, bad("not an audit checkpoint")
	}
	sig, err := base64.StdEncoding.DecodeString(string(lines[1]))
	if err != nil {
		return nil, bad("its signature is not base64")
	}
	body := bytes.TrimSuffix(lines[2], []byte("\n"))
	id, idErr := identity()
	if idErr != nil {
		return nil, fmt.Errorf("an audit checkpoint is checked against this host's writer key: %w", idErr)
	}
	if err := keys.VerifyDetached(id.PublicKey(), body, sig); err != nil {
		return nil, bad("it is not signed by this host's writer " + id.Writer)
	}
	var cp Checkpoint
	if err := json.Unmarshal(body, &cp); err != nil {
		return nil, bad(err.Error())
	}
	if canon, err := record.Canonical(&cp); err != nil || !bytes.Equal(canon, body) {
		return nil, bad("its record is not in canonical form")
	}
	if cp.V != 1 || cp.Name != name || cp.Writer != id.Writer {
		return nil, bad("it names another checkpoint or writer")
	}
	if cp.GitDir != d.GitDir {
		return nil, bad("it was taken of the repository " + cp.GitDir)
	}
	for ref, v := range cp.Refs {
		if _, err := gitstore.ParseOid(v); err != nil || !strings.HasPrefix(ref, "refs/bernstein/") {
			return nil, bad(fmt.Sprintf("ref %s at %q", ref, v))
		}
	}
	return &cp, nil
}

// TrustNarrowed names a key cp trusted that trust no longer does: what the
// checkpoint covered was proven under that key, so it proves nothing now.
func TrustNarrowed(cp *Checkpoint, trust *keys.TrustSet) string {
	now := TrustRecord(trust)
	for w, lines := range cp.Trust {
		for _, l := range lines {
			found := false
			for _, n := range now[w] {
				found = found || n == l
			}
			if !found {
				return fmt.Sprintf("writer %s's key %s", w, l)
			}
		}
	}
	return ""
}
