package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

type initOptions struct {
	IO      *IO
	Options func() bernstein.Options

	Writer   string // the writer id of a new identity
	Remote   string // also set up this remote's refspecs
	SSHAgent bool   // sign with a key ssh-agent holds
	AgentKey string // that key (fingerprint or public key file); "": the agent's one key
	JSON     bool
}

const initLong = `Set up bernstein in a git repository (bare or not).

Creates the writer identity (an ed25519 signing key and an HMAC key, mode 0600)
under BERNSTEIN_HOME (default $XDG_STATE_HOME/bernstein), outside the
repository, and publishes the public key in a ref of its own,
refs/bernstein/writers/<writer>.<key> (the key's SHA-256 in hex), together with
a git allowed_signers line (other hosts pin it with 'bernstein keys pin'). A
repository that holds no chain yet gets its identity, minted once
(refs/bernstein/repository, docs/format.md); one that holds chains and no
identity is in storage format 1 and is left so ('bernstein upgrade'). Pointed
at an empty or missing folder, it runs 'git init' there first. Unless core.fsync
is already configured, it sets it to "pack,derived-metadata,reference" in the
repository's config, so that git's own ref maintenance (pack-refs, gc) syncs
what it moves. Running it again changes nothing, but for what plain git forged
of this writer's own: it moves refs/bernstein/repository back to the identity
this host's writer recorded for the repository, and writes the key record again
over this writer's key ref that does not publish its key (docs/trust.md).

With --ssh-agent the signing key never touches the disk: it is a key that
ssh-agent holds (a hardware token, or a PKCS#11 key loaded with 'ssh-add -s'),
ssh-ed25519 or ecdsa-sha2-nistp256. KEY names it by fingerprint (SHA256:...)
or public key file; without KEY the agent must hold exactly one such key.
BERNSTEIN_HOME then keeps its public half (agent.pub) and the HMAC key, and
every signature is asked of the agent at SSH_AUTH_SOCK. A missing or locked
agent is one error, and nothing is written (docs/trust.md, Keys in ssh-agent).

With --remote REMOTE it also sets up that remote's fetch and push refspecs
for refs/bernstein/*, as 'bernstein remote setup REMOTE' does; a remote the
repository does not have is refused before anything is set up. A repository
without an identity first fetches the remote's refs/bernstein/* (so that a
clone takes the remote's identity rather than mint a rival one), and an
identity init mints is pushed to the remote at once.

It also sets up git's diff of artifact versions in the repository's own files
(never in the user's configuration): the line
"artifacts/*/v*.json diff=bernstein" in .git/info/attributes and
diff.bernstein.textconv in .git/config, so that 'git diff' of two versions and
'git log -p' of a journal show a report's markdown lines and a table's rows,
not one line of JSON (docs/format.md, "Diffing with git").

Exit status: 0 set up (or already set up); 1 error (also: no such remote).`

func newInitCmd(f *factory, runF func(*initOptions) error) *cobra.Command {
	o := &initOptions{IO: f.IO, Options: f.Options}
	cmd := &cobra.Command{
		Use:   "init [--ssh-agent [KEY]]",
		Short: "Set up the writer identity and publish its key in the repository",
		Long:  initLong,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.SSHAgent = cmd.Flags().Changed("ssh-agent")
			if len(args) > 0 {
				if !o.SSHAgent || o.AgentKey != agentAny {
					return fmt.Errorf("unexpected argument %q: init takes one only after --ssh-agent (the agent's key)", args[0])
				}
				o.AgentKey = args[0]
			}
			if o.AgentKey == agentAny {
				o.AgentKey = ""
			}
			if runF != nil {
				return runF(o)
			}
			return initRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Writer, "writer", "", "writer id for a new identity, [a-z0-9-]{1,64} (default: host name plus a random suffix)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON")
	cmd.Flags().StringVar(&o.AgentKey, "ssh-agent", "", "sign with a key held by ssh-agent: KEY is its fingerprint or public key file (default: the agent's one writer-capable key)")
	cmd.Flags().Lookup("ssh-agent").NoOptDefVal = agentAny
	cmd.Flags().StringVar(&o.Remote, "remote", "", "also set up this remote's refspecs for refs/bernstein/* (see 'bernstein remote setup')")
	return cmd
}

// initRun sets up the identity, the remote's refspecs when asked, and the
// diff driver, then says what it did.
func initRun(o *initOptions) error {
	if o.Remote != "" {
		// Refuse a mistyped remote before anything is created. A folder
		// that is no repository yet has no remote at all.
		if err := bernstein.CheckRemote(o.Options(), o.Remote); errors.Is(err, bernstein.ErrNotRepository) {
			return fmt.Errorf("--remote %s: not a git repository yet, so it has no remote %s: 'git clone' it, or 'git init' and 'git remote add %s URL' first", o.Remote, o.Remote, o.Remote)
		} else if err != nil {
			return err
		}
	}
	var res *bernstein.InitResult
	var err error
	opts := o.Options()
	opts.Remote = o.Remote // take the remote's repository identity, or push a new one there
	if o.SSHAgent {
		res, err = bernstein.InitAgent(opts, o.Writer, o.AgentKey)
	} else {
		res, err = bernstein.Init(opts, o.Writer)
	}
	if err != nil {
		return err
	}
	var setup *bernstein.RemoteSetupResult
	if o.Remote != "" {
		if setup, err = bernstein.RemoteSetup(o.Options(), o.Remote); err != nil {
			return err
		}
	}
	driver, err := bernstein.SetupDiffDriver(res.GitDir)
	if err != nil {
		return fmt.Errorf("setting up git's diff of artifact versions: %w", err)
	}
	if o.JSON {
		return printJSON(o.IO, struct {
			*bernstein.InitResult
			DiffDriver *bernstein.DiffDriverResult  `json:"diff_driver"`
			Remote     *bernstein.RemoteSetupResult `json:"remote,omitempty"`
		}{res, driver, setup})
	}
	printDiffDriver(o.IO, driver)
	printInit(o.IO, res)
	if setup != nil {
		printSetup(o.IO, setup)
	}
	return nil
}

// printInit says what init set up.
func printInit(sio *IO, res *bernstein.InitResult) {
	if res.RepoCreated {
		fmt.Fprintf(sio.Out, "Created git repository %s\n", res.GitDir)
	}
	id := "existing identity"
	if res.IdentityCreated {
		id = "new identity"
	}
	fmt.Fprintf(sio.Out, "writer:     %s (%s in %s)\n", res.Writer, id, res.Home)
	fmt.Fprintf(sio.Out, "public key: %s\n", res.PublicKey)
	if res.SSHAgent {
		fmt.Fprintf(sio.Out, "signing:    through ssh-agent (SSH_AUTH_SOCK); no private key on disk\n")
	}
	if res.FsyncConfigured {
		fmt.Fprintf(sio.Out, "git config: core.fsync=pack,derived-metadata,reference\n")
	}
	ref := refs.Writer(res.Writer)
	if res.StorageFormat != 1 {
		ref = refs.WriterKey(res.Writer, res.KeyHex)
	}
	if res.KeyPublished {
		fmt.Fprintf(sio.Out, "published:  %s\n", ref)
	} else {
		fmt.Fprintf(sio.Out, "published:  already in %s, nothing changed\n", ref)
	}
	switch {
	case res.RepositoryMinted:
		fmt.Fprintf(sio.Out, "repository: %s (new identity, storage format %d)\n", res.RepositoryID, res.StorageFormat)
	case res.RepositoryRestored:
		fmt.Fprintf(sio.Out, "repository: %s (storage format %d; refs/bernstein/repository moved back to it)\n", res.RepositoryID, res.StorageFormat)
	case res.RepositoryID != "":
		fmt.Fprintf(sio.Out, "repository: %s (storage format %d)\n", res.RepositoryID, res.StorageFormat)
	}
	if res.IdentityPushed != "" {
		fmt.Fprintf(sio.Out, "pushed:     the repository's identity and this writer's key to %s\n", res.IdentityPushed)
	}
	for _, fp := range res.OtherKeys {
		fmt.Fprintf(sio.Err, "note: writer name %s is also published with key %s, not this writer's: readers trust only the key they pin for the name (docs/trust.md)\n", res.Writer, fp)
	}
	if res.Note != "" {
		fmt.Fprintf(sio.Err, "note: %s\n", res.Note)
	}
}

// printDiffDriver says what setting up git's diff of artifact versions
// changed (nothing when it was set up already).
func printDiffDriver(io *IO, d *bernstein.DiffDriverResult) {
	if d.TextconvKept != "" {
		fmt.Fprintf(io.Err, "note: diff.%s.textconv is set already (%s): kept\n", bernstein.DiffDriver, d.TextconvKept)
	}
	if d.Changed() {
		fmt.Fprintf(io.Out, "git diff:   artifact versions as text (diff.%s.textconv, %s)\n", bernstein.DiffDriver, d.Attributes)
	}
}

// agentAny is --ssh-agent given without a key: the agent's only key.
const agentAny = "*"
