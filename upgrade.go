package bernstein

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// UpgradeResult says what Upgrade did.
type UpgradeResult struct {
	From         int    `json:"from_format"`
	To           int    `json:"to_format"`
	RepositoryID string `json:"repository_id"`
	// Bound counts the format-1 chains (journals, ledgers, spines, audit
	// mirrors rooted in no repository) the upgrade bound to the identity.
	Bound int `json:"bound_chains"`
	// Steps names the steps done, oldest first ("" when the repository was
	// in the current format already).
	Steps []string `json:"steps"`
}

// An upgrade step moves a repository from format to format+1, in one
// transaction whose commit point is the move of refs/bernstein/repository
// (so a crash leaves the repository in the format before the step or
// after it). A later storage change appends its step here, ending with
// Tx.RaiseFormat.
type upgradeStep struct {
	to   int
	name string
	run  func(s *Store, t *txn.Tx, res *UpgradeResult) error
}

var upgradeSteps = []upgradeStep{
	{to: record.FormatIdentity, name: "mint the repository's identity and bind its format-1 chains", run: upgradeToIdentity},
	{to: record.FormatArchive, name: "allow the archive of ended tasks", run: upgradeToArchive},
}

// Upgrade moves the repository to the current storage format, one step at
// a time (docs/format.md, Upgrading). A repository in the current format
// is left as it is.
func (s *Store) Upgrade() (*UpgradeResult, error) {
	res := &UpgradeResult{Steps: []string{}}
	for _, st := range upgradeSteps {
		out, err := s.w.Submit(func(t *txn.Tx) (any, error) {
			format, _, err := t.Format()
			if err != nil {
				return nil, err
			}
			if res.From == 0 {
				res.From = format
			}
			if format >= st.to {
				res.To = format
				return false, nil
			}
			if format != st.to-1 {
				return nil, fmt.Errorf("storage format %d: this version upgrades from format %d", format, st.to-1)
			}
			res.To = st.to
			return true, st.run(s, t, res)
		})
		if err != nil {
			return nil, fmt.Errorf("upgrade to storage format %d (%s): %w", st.to, st.name, err)
		}
		if out.(bool) {
			res.Steps = append(res.Steps, st.name)
		}
	}
	res.RepositoryID = s.core.IdentityID()
	if res.From == 0 {
		res.From = res.To
	}
	return res, nil
}

// upgradeToIdentity mints the identity of a format-1 repository and binds
// every chain it holds. What this host remembers of the repository (pins,
// heads), kept under its path until now, is copied under the new id first:
// a crash before the commit point leaves an unused copy, never a lost pin.
func upgradeToIdentity(s *Store, t *txn.Tx, res *UpgradeResult) error {
	chains, err := t.LegacyChains()
	if err != nil {
		return err
	}
	id, err := txn.NewRepositoryID()
	if err != nil {
		return err
	}
	old := s.core.PathID()
	for _, p := range [][2]string{
		{filepath.Join(s.core.Home, "pins", old+".allowed_signers"), filepath.Join(s.core.Home, "pins", id+".allowed_signers")},
		{filepath.Join(s.core.Home, "heads", old), filepath.Join(s.core.Home, "heads", id)},
	} {
		if err := copyAside(p[0], p[1]); err != nil {
			return fmt.Errorf("keeping what this host remembers of the repository: %w", err)
		}
	}
	if err := t.UpgradeFromLegacy(id, chains); err != nil {
		return err
	}
	res.Bound = len(chains)
	return nil
}

// upgradeToArchive raises a format-2 repository to format 3, which allows
// the archive of ended tasks (refs/bernstein/archive/<writer>,
// docs/archive.md): nothing else changes, since a format-2 repository
// holds no archive. `bernstein archive` refuses a repository below it.
func upgradeToArchive(_ *Store, t *txn.Tx, _ *UpgradeResult) error {
	return t.RaiseFormat(record.FormatArchive)
}

// copyAside copies the file or directory tree src to dst (which must not
// exist) through a temporary name renamed in place; a missing src copies
// nothing.
func copyAside(src, dst string) error {
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	tmp := dst + ".upgrade-tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if !fi.IsDir() {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := writeSynced(tmp, b, fi.Mode().Perm()); err != nil {
			return err
		}
	} else if err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(tmp, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return writeSynced(to, b, 0o600)
	}); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func writeSynced(path string, b []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// AcceptRef makes this host's writer forget the head it remembers for ref
// (a journal, ledger, spine, audit mirror or archive moved back on purpose): the
// chain as it stands is no longer a rollback here (docs/trust.md,
// Rollbacks).
func (s *Store) AcceptRef(ref string) error {
	if !strings.HasPrefix(ref, refs.JournalPrefix) && !strings.HasPrefix(ref, refs.LedgerPrefix) &&
		!strings.HasPrefix(ref, refs.SpinePrefix) && !strings.HasPrefix(ref, refs.AuditPrefix) && !strings.HasPrefix(ref, refs.ArchivePrefix) {
		return fmt.Errorf("invalid ref: %q is no journal, ledger, spine, audit mirror or archive (refs/bernstein/{journal,ledger,spine,audit,archive}/...)", ref)
	}
	return s.heads.Forget(ref)
}
