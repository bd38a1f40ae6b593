package bernstein

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bernstein/bernstein/keys"
)

// InitResult says what Init did.
type InitResult struct {
	GitDir          string `json:"git_dir"`
	Writer          string `json:"writer"`
	Home            string `json:"home"`
	PublicKey       string `json:"public_key"`
	RepoCreated     bool   `json:"repo_created"`
	IdentityCreated bool   `json:"identity_created"`
	KeyPublished    bool   `json:"key_published"`
	// FsyncConfigured is set when init added `core.fsync` to the
	// repository's config (it never overrides a value that is there).
	FsyncConfigured bool `json:"fsync_configured"`
	// SSHAgent is set when the writer's signing key lives in ssh-agent
	// (InitAgent).
	SSHAgent bool `json:"ssh_agent,omitempty"`
}

// KeyRecord is the published record of a writer's public key.
type KeyRecord struct {
	V         int    `json:"v"`
	Writer    string `json:"writer"`
	Principal string `json:"principal"`
	PublicKey string `json:"public_key"`
}

// Files of a writer's key ref (and of the legacy refs/bernstein/keys).
const (
	AllowedSignersFile = "allowed_signers"
)

// Init prepares a repository for writing: it creates the repository when o
// names an empty or missing folder, the writer identity in BERNSTEIN_HOME
// when there is none, and publishes the writer's public key in its ref
// refs/bernstein/writers/<writer>. Running it again changes nothing.
func Init(o Options, writer string) (*InitResult, error) {
	return initWith(o, func(home string) (*keys.Identity, bool, error) { return keys.Create(home, writer) })
}

func initWith(o Options, identity func(home string) (*keys.Identity, bool, error)) (*InitResult, error) {
	res := &InitResult{}
	dir := repoDir(o)
	created, err := ensureRepo(dir)
	if err != nil {
		return nil, err
	}
	res.RepoCreated = created
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res.GitDir = s.gitDir
	if err := s.checkHomeOutside(); err != nil {
		return nil, err
	}
	if res.FsyncConfigured, err = s.configureFsync(); err != nil {
		return nil, err
	}
	id, made, err := identity(s.home)
	if err != nil {
		return nil, err
	}
	s.identOnce.Do(func() { s.ident = id })
	res.Writer, res.Home, res.PublicKey, res.IdentityCreated = id.Writer, s.home, id.AuthorizedKey(), made
	res.SSHAgent = id.InAgent()
	out, err := s.submit(func(t *tx) (any, error) { return t.publishKey() })
	if err != nil {
		return nil, err
	}
	res.KeyPublished = out.(bool)
	return res, nil
}

// ensureRepo runs `git init` in dir when it is missing or empty; the new
// repository uses the sha1 object format.
func ensureRepo(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return false, err
	case len(ents) > 0:
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	cmd := exec.Command("git", "init", "-q", dir)
	// A new repository is a sha1 one whatever the user's default
	// (init.defaultObjectFormat, GIT_DEFAULT_HASH): bernstein writes SHA-1
	// objects only. The variable takes precedence over the config, and a git
	// too old to know it makes sha1 repositories anyway.
	cmd.Env = append(os.Environ(), "GIT_DEFAULT_HASH=sha1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("git init %s: %s", dir, strings.TrimSpace(string(out)))
	}
	return true, nil
}

// fsyncComponents is what git syncs in a bernstein repository: its default
// (packs and their metadata) plus references. Without "reference", a `git
// pack-refs` or `git gc` that moves bernstein's refs into packed-refs does
// not sync that file, and a power cut could then lose a ref that a post had
// already made durable.
const fsyncComponents = "pack,derived-metadata,reference"

// configureFsync sets core.fsync in the repository's own config unless it
// is set already (anywhere git reads it). It reports whether it set it.
func (s *Store) configureFsync() (bool, error) {
	if err := exec.Command("git", "--git-dir", s.gitDir, "config", "core.fsync").Run(); err == nil {
		return false, nil
	}
	out, err := exec.Command("git", "--git-dir", s.gitDir, "config", "--local", "core.fsync", fsyncComponents).CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("git config core.fsync: %s", strings.TrimSpace(string(out)))
	}
	return true, nil
}

// checkHomeOutside refuses a BERNSTEIN_HOME inside the repository, where its
// private keys could be committed or pushed.
func (s *Store) checkHomeOutside() error {
	home, err := filepath.Abs(s.home)
	if err != nil {
		return err
	}
	if r, err := filepath.EvalSymlinks(home); err == nil {
		home = r
	}
	roots := []string{s.gitDir}
	if !s.bare {
		if top, err := exec.Command("git", "-C", s.dir, "rev-parse", "--show-toplevel").Output(); err == nil {
			roots = append(roots, strings.TrimSpace(string(top)))
		}
	}
	for _, root := range roots {
		if root == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(root); err == nil {
			root = r
		}
		if rel, err := filepath.Rel(root, home); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return fmt.Errorf("BERNSTEIN_HOME %s is inside the repository %s: keep private keys outside it", home, root)
		}
	}
	return nil
}
