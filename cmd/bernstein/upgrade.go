package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

type upgradeOptions struct {
	IO    *IO
	Store openFunc
	JSON  bool
}

const upgradeLong = `Move the repository to the current storage format (docs/format.md,
Upgrading), one step at a time; each step is one transaction, so a crash
leaves the repository in the format before the step or after it, and running
upgrade again goes on from there. A repository in the current format is left
as it is.

From storage format 1 (chains and no repository identity) to 2: mints the
repository's identity (refs/bernstein/repository) and binds every chain the
repository holds to it, by listing each chain's first commit in the identity's
tree. A format-1 chain copied in afterwards is not listed, and is foreign. What
this host remembers of the repository (pins, the heads its writer wrote) is
kept. Push afterwards, so that the remote and its clones have the identity.

From storage format 2 to 3: raises the format and writes nothing else; format
3 allows the archive of ended tasks (bernstein archive, docs/archive.md).

Exit status: 0 upgraded (or nothing to do); 1 error.`

func newUpgradeCmd(f *factory, runF func(*upgradeOptions) error) *cobra.Command {
	o := &upgradeOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Move the repository to the current storage format",
		Long:  upgradeLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return upgradeRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON")
	return cmd
}

func upgradeRun(o *upgradeOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		res, err := s.Upgrade()
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, res)
		}
		if len(res.Steps) == 0 {
			fmt.Fprintf(o.IO.Out, "storage format %d already: nothing to do (repository %s)\n", res.To, res.RepositoryID)
			return nil
		}
		for _, st := range res.Steps {
			fmt.Fprintf(o.IO.Out, "done: %s\n", st)
		}
		bound := ""
		if res.From == 1 {
			bound = fmt.Sprintf(", %d format-1 chains bound", res.Bound)
		}
		fmt.Fprintf(o.IO.Out, "storage format %d -> %d, repository %s%s\n", res.From, res.To, res.RepositoryID, bound)
		return nil
	})
}

type auditAcceptOptions struct {
	IO    *IO
	Store openFunc
	Ref   string
}

const auditAcceptLong = `Accept a journal, ledger, spine, audit mirror or archive as it stands: this
host's writer forgets the head it remembers for REF, so a chain moved back on
purpose (a repair, a history deliberately cut) is no longer a rollback here
(docs/trust.md, Rollbacks). The rollback error names the command to run.

Exit status: 0 accepted; 1 not such a ref, or an error.`

func newAuditAcceptCmd(f *factory, runF func(*auditAcceptOptions) error) *cobra.Command {
	o := &auditAcceptOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "accept REF",
		Short: "Accept a chain moved back on purpose",
		Long:  auditAcceptLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Ref = args[0]
			if runF != nil {
				return runF(o)
			}
			return withStore(o.Store, func(s *bernstein.Store) error {
				if err := s.AcceptRef(o.Ref); err != nil {
					return err
				}
				fmt.Fprintf(o.IO.Out, "accepted %s as it stands: this host forgot the head it remembered for it\n", o.Ref)
				return nil
			})
		},
	}
	return cmd
}
