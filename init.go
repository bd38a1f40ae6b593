package bernstein

import (
	"fmt"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/internal/writers"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
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
	// RepositoryID is the repository's identity (docs/format.md), "" in a
	// repository of storage format 1; RepositoryMinted is set when this
	// init minted it.
	RepositoryID     string `json:"repository_id"`
	KeyHex           string `json:"-"` // the key's SHA-256 in hex: its writers ref's suffix
	RepositoryMinted bool   `json:"repository_minted"`
	// RepositoryRestored is set when init moved refs/bernstein/repository
	// back to the identity this host's writer recorded for the repository
	// (the ref had been garbled, deleted or moved: docs/trust.md).
	RepositoryRestored bool `json:"repository_restored,omitempty"`
	StorageFormat      int  `json:"storage_format"`
	// OtherKeys are the fingerprints of keys published under this writer's
	// name that are not its key (someone else's claim to the name: only the
	// key a reader pins writes for it).
	OtherKeys []string `json:"other_keys,omitempty"`
	// IdentityPushed names the remote init pushed a new identity to
	// (Options.Remote).
	IdentityPushed string `json:"identity_pushed,omitempty"`
	Note           string `json:"note,omitempty"`
}

// KeyRecord is the published record of a writer's public key.
type KeyRecord = writers.KeyRecord

// Files of a writer's key ref (and of the legacy refs/bernstein/keys).
const (
	AllowedSignersFile = writers.AllowedSignersFile
)

// Init prepares a repository for writing: it creates the repository when o
// names an empty or missing folder, the writer identity in BERNSTEIN_HOME
// when there is none, mints the repository's identity when it has neither
// an identity nor any chain (docs/format.md), and publishes the writer's
// public key in its ref refs/bernstein/writers/<writer>.<key>
// (refs/bernstein/writers/<writer> in a repository of storage format 1).
// Running it again changes nothing, but for a forged identity ref or
// writer's own key ref, which it writes again (docs/trust.md).
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
	if o.Remote != "" && s.core.IdentityID() == "" {
		// A clone made before its remote had an identity, or with plain
		// git: take the remote's rather than mint a rival one.
		if _, err := s.Fetch(o.Remote); err != nil {
			return nil, fmt.Errorf("init --remote %s: fetching the remote's refs/bernstein/* first (so as not to mint a repository identity the remote's would contend with): %w", o.Remote, err)
		}
	}
	type done struct {
		minted, published, restored bool
		format                      int
	}
	out, err := s.w.Submit(func(t *txn.Tx) (any, error) {
		// A repository with no chain yet gets its identity, in the same
		// transaction as the key and the audit entry that records it (both
		// rooted in it).
		restored, err := t.RestoreRepository()
		if err != nil {
			return nil, err
		}
		rid, err := txn.NewRepositoryID()
		if err != nil {
			return nil, err
		}
		minted, err := t.MintRepository(rid)
		if err != nil {
			return nil, err
		}
		published, err := t.PublishKey()
		if err != nil {
			return nil, err
		}
		format, _, err := t.Format()
		return done{minted, published, restored, format}, err
	})
	if err != nil {
		return nil, err
	}
	res.RepositoryMinted, res.KeyPublished, res.RepositoryRestored = out.(done).minted, out.(done).published, out.(done).restored
	if res.RepositoryMinted && o.Remote != "" {
		// The next clone of the remote takes the identity from it.
		if _, err := s.Push(o.Remote); err != nil {
			res.Note = fmt.Sprintf("the repository's new identity is not on %s yet (%v): push before another host runs bernstein init in a clone of it", o.Remote, err)
		} else {
			res.IdentityPushed = o.Remote
		}
	}
	res.RepositoryID, res.StorageFormat = s.core.IdentityID(), out.(done).format
	res.KeyHex = refs.KeyHex(id.PublicKey().Marshal())
	switch {
	case res.StorageFormat == record.FormatLegacy:
		res.Note = fmt.Sprintf("this repository is in storage format 1 (it holds chains and no repository identity): 'bernstein upgrade' moves it to format %d (docs/format.md, Upgrading)", record.FormatCurrent)
	case res.StorageFormat < record.FormatCurrent:
		res.Note = fmt.Sprintf("this repository is in storage format %d: 'bernstein upgrade' moves it to format %d (docs/format.md, Upgrading)", res.StorageFormat, record.FormatCurrent)
	}
	keys, err := s.PublishedKeys()
	if err != nil {
		return nil, err
	}
	for _, line := range keys[id.Writer] {
		if line != id.AuthorizedKey() {
			if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
				res.OtherKeys = append(res.OtherKeys, ssh.FingerprintSHA256(k))
			}
		}
	}
	return res, nil
}
