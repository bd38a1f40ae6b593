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
	// SSHAgent is set when the writer's signing key lives in ssh-agent
	// (InitAgent).
	SSHAgent bool `json:"ssh_agent,omitempty"`
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
	return initWith(o, func(home string) (*keys.Identity, bool, error) { return keys.Create(home, writer) })
}

// InitAgent is Init for a writer whose signing key lives in ssh-agent (a
// hardware token, or a PKCS#11 key loaded with `ssh-add -s`): key names it
// among the agent's keys (keys.SelectAgentKey; "" for the agent's only
// writer-capable key). BERNSTEIN_HOME keeps the public key and the HMAC key.
// The agent is asked before anything is written, so a missing or locked
// agent is one error and nothing changes, the repository included.
func InitAgent(o Options, writer, key string) (*InitResult, error) {
	pub, err := keys.SelectAgentKey(key)
	if err != nil {
		return nil, err
	}
	return initWith(o, func(home string) (*keys.Identity, bool, error) { return keys.CreateAgent(home, writer, pub) })
}

func initWith(o Options, identity func(home string) (*keys.Identity, bool, error)) (*InitResult, error) {
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
	id, made, err := identity(s.core.Home)
	if err != nil {
		return nil, err
	}
	s.core.SetIdentity(id)
	res.Writer, res.Home, res.PublicKey, res.IdentityCreated = id.Writer, s.core.Home, id.AuthorizedKey(), made
	res.SSHAgent = id.InAgent()
	out, err := s.w.Submit(func(t *txn.Tx) (any, error) { return t.PublishKey() })
	if err != nil {
		return nil, err
	}
	res.KeyPublished = out.(bool)
	return res, nil
}
