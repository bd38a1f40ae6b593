package bernstein

import (
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/internal/writers"
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
}

// KeyRecord is the published record of a writer's public key.
type KeyRecord = writers.KeyRecord

// Files of a writer's key ref (and of the legacy refs/bernstein/keys).
const (
	AllowedSignersFile = writers.AllowedSignersFile
)

// Init prepares a repository for writing: it creates the repository when o
// names an empty or missing folder, the writer identity in BERNSTEIN_HOME
// when there is none, and publishes the writer's public key in its ref
// refs/bernstein/writers/<writer>. Running it again changes nothing.
func Init(o Options, writer string) (*InitResult, error) {
	res := &InitResult{}
	dir := repoDir(o)
	created, err := git.EnsureRepo(dir)
	if err != nil {
		return nil, err
	}
	res.RepoCreated = created
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res.GitDir = s.core.GitDir
	if err := s.core.CheckHomeOutside(); err != nil {
		return nil, err
	}
	if res.FsyncConfigured, err = git.ConfigureFsync(s.core.GitDir); err != nil {
		return nil, err
	}
	id, made, err := keys.Create(s.core.Home, writer)
	if err != nil {
		return nil, err
	}
	s.core.SetIdentity(id)
	res.Writer, res.Home, res.PublicKey, res.IdentityCreated = id.Writer, s.core.Home, id.AuthorizedKey(), made
	out, err := s.w.Submit(func(t *txn.Tx) (any, error) { return t.PublishKey() })
	if err != nil {
		return nil, err
	}
	res.KeyPublished = out.(bool)
	return res, nil
}
