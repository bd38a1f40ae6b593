package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/hooks"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
)

func newHooksCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hooks",
		Short: "Git hooks that guard a remote, check pushes and record checkpoints",
		Long: `Install git hooks that keep bernstein's history honest where plain git moves it:

  install --remote-guard     a pre-receive hook in a bare repository (a remote):
                             it refuses a push that deletes or rewinds a
                             refs/bernstein/* ref, carries a commit no pinned
                             key signed, substitutes a writer's key, or adds
                             rows that do not chain, payloads that do not hash
                             to their rows, or spine entries that do not bind
                             the rows they seal. It checks only what the push
                             adds.
  install --pre-push         a pre-push hook in a working repository: the same
                             checks on what is about to leave, against this
                             host's pinned keys, for git push and bernstein push
                             alike.
  install --checkpoint TASK  a post-commit hook: every commit is recorded as a
                             checkpoint row of TASK, so progress is earned as
                             commits are made. It never blocks a commit.

Each hook is a one-line script that runs 'bernstein hooks run NAME' with the
absolute path of the binary that installed it and its BERNSTEIN_HOME, so it
works without bernstein on PATH. A hook that was there already is kept as
NAME.chained and run after ours, with the same arguments and input; its refusal
refuses the push. core.hooksPath is honoured. 'hooks uninstall' removes our hook
and restores the kept one.

'bernstein hooks run pre-receive|pre-push|post-commit' is what the scripts call;
it reads git's hook input and is not meant to be run by hand. Its exit status:
0 accepted (post-commit: always 0, a failed checkpoint is one line on stderr);
1 refused, one line per problem naming the ref, task, writer, key and index;
2 the check could not run (the push is refused as well).

docs/remotes.md (Hooks) has the details.`,
	}
	cmd.AddCommand(newHooksInstallCmd(f, nil), newHooksUninstallCmd(f, nil), newHooksRunCmd(f, nil))
	return cmd
}

// hookChoice is the one hook an install or uninstall names.
type hookChoice struct {
	guard, prePush bool
	checkpoint     string
	checkpointSet  bool
}

func (h *hookChoice) hook() (string, error) {
	n := 0
	name := ""
	for _, c := range []struct {
		on   bool
		name string
	}{{h.guard, hooks.PreReceive}, {h.prePush, hooks.PrePush}, {h.checkpointSet, hooks.PostCommit}} {
		if c.on {
			n++
			name = c.name
		}
	}
	if n != 1 {
		return "", errors.New("name one hook: --remote-guard, --pre-push or --checkpoint")
	}
	return name, nil
}

// hookRepo is the repository a hook command works in: --repo, else
// $BERNSTEIN_REPO, else the current directory.
func hookRepo(f *factory) string {
	if f.repo != "" {
		return f.repo
	}
	if r := os.Getenv("BERNSTEIN_REPO"); r != "" {
		return r
	}
	return "."
}

func describeHook(hook string) string {
	switch hook {
	case hooks.PreReceive:
		return "the remote guard (pre-receive)"
	case hooks.PrePush:
		return "the pre-push check"
	}
	return "the checkpoint hook (post-commit)"
}

type hooksInstallOptions struct {
	IO *IO
	hookChoice
	Repo          string // the repository to install into
	TrustFirstUse bool   // with --remote-guard
}

const hooksInstallLong = `Install a hook into the repository (--repo DIR, else the current directory):

  --remote-guard    in a bare repository: the pre-receive guard. It trusts the
                    keys pinned for that repository in the pin file of this
                    BERNSTEIN_HOME (pinned by the operator, after checking their
                    fingerprints, with 'bernstein keys pin --repo DIR ...');
                    with --trust-first-use it pins the first key each writer
                    publishes and refuses any other later.
  --pre-push        in a working repository: those checks before a push leaves.
  --checkpoint TASK in a working repository: record each new commit as a
                    checkpoint row of TASK (which must exist).

The script calls this binary by its absolute path with this BERNSTEIN_HOME. A
hook that is already there and is not bernstein's is renamed NAME.chained and
run after ours; installing the same hook again changes nothing.

Exit status: 0 installed (or installed already); 1 error (wrong kind of
repository, unknown task, a hook in the way), nothing written.`

func newHooksInstallCmd(f *factory, runF func(*hooksInstallOptions) error) *cobra.Command {
	o := &hooksInstallOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "install --remote-guard|--pre-push|--checkpoint TASK",
		Short: "Install one of bernstein's git hooks",
		Long:  hooksInstallLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.checkpointSet = cmd.Flags().Changed("checkpoint")
			o.Repo = hookRepo(f)
			if runF != nil {
				return runF(o)
			}
			return hooksInstallRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.guard, "remote-guard", false, "install the pre-receive guard (bare repository)")
	cmd.Flags().BoolVar(&o.prePush, "pre-push", false, "install the pre-push check (working repository)")
	cmd.Flags().StringVar(&o.checkpoint, "checkpoint", "", "install the post-commit hook that checkpoints TASK (working repository)")
	cmd.Flags().BoolVar(&o.TrustFirstUse, "trust-first-use", false, "with --remote-guard: pin the first key each writer publishes")
	return cmd
}

// hooksInstallRun checks the hook fits the repository, installs it and
// says what it did. Every error exits 1 (the default), with nothing
// written.
func hooksInstallRun(o *hooksInstallOptions) error {
	hook, bin, home, err := o.check()
	if err != nil {
		return err
	}
	// The repository as the hook will see it: this BERNSTEIN_HOME, and
	// only the keys pinned there (not --allowed-signers).
	open := func() (*bernstein.Store, error) { return bernstein.Open(bernstein.Options{Repo: o.Repo, Home: home}) }
	return withStore(open, func(s *bernstein.Store) error {
		if hook == hooks.PostCommit {
			if err := checkpointTaskExists(s, o.checkpoint); err != nil {
				return err
			}
		}
		res, err := hooks.Install(hooks.InstallOptions{Repo: o.Repo, Hook: hook, Binary: bin, Home: home, Task: o.checkpoint, TrustFirstUse: o.TrustFirstUse})
		if err != nil {
			return err
		}
		printInstalled(o.IO, hook, res)
		if hook == hooks.PreReceive {
			return printGuardTrust(o.IO, s, o.TrustFirstUse)
		}
		return nil
	})
}

// check finds the hook to install, this binary's path and BERNSTEIN_HOME,
// and checks the hook fits the repository.
func (o *hooksInstallOptions) check() (hook, bin, home string, err error) {
	if hook, err = o.hook(); err != nil {
		return "", "", "", err
	}
	if o.TrustFirstUse && hook != hooks.PreReceive {
		return "", "", "", errors.New("--trust-first-use goes with --remote-guard only")
	}
	bin, err = os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		return "", "", "", fmt.Errorf("cannot find this binary's path for the hook: %w", err)
	}
	if home, err = keys.Home(); err != nil {
		return "", "", "", err
	}
	r, err := hooks.Locate(o.Repo)
	if err != nil {
		return "", "", "", err
	}
	if err := r.CheckPlace(hook); err != nil {
		return "", "", "", err
	}
	return hook, bin, home, nil
}

// checkpointTaskExists refuses a checkpoint hook for a task that does not
// exist.
func checkpointTaskExists(s *bernstein.Store, task string) error {
	if err := refs.ValidateTaskID(task); err != nil {
		return &artifact.InputError{Field: "task_id", Msg: strings.TrimPrefix(err.Error(), "task id ")}
	}
	snap, err := s.Snapshot(refs.Ledger(task)) // an archived task's ledger too
	if err != nil {
		return err
	}
	head, err := snap.ReadOptional(refs.Ledger(task))
	if err != nil {
		return err
	}
	if head.IsZero() {
		return fmt.Errorf("%w: %s (create it first: the hook records checkpoints of an existing task)", bernstein.ErrUnknownTask, task)
	}
	return nil
}

// printInstalled says what an install did.
func printInstalled(sio *IO, hook string, res *hooks.Installed) {
	switch {
	case res.Unchanged:
		fmt.Fprintf(sio.Out, "%s is installed already: %s (nothing changed)\n", describeHook(hook), res.Path)
	case res.Updated:
		fmt.Fprintf(sio.Out, "updated %s: %s\n", describeHook(hook), res.Path)
	default:
		fmt.Fprintf(sio.Out, "installed %s: %s\n", describeHook(hook), res.Path)
	}
	if res.Chained != "" {
		fmt.Fprintf(sio.Out, "kept the %s hook that was there as %s: it runs after ours, with the same arguments and input%s\n",
			hook, res.Chained, map[bool]string{true: ", and its refusal refuses the push", false: ""}[hook != hooks.PostCommit])
	}
}

// printGuardTrust says which keys the remote guard trusts.
func printGuardTrust(sio *IO, s *bernstein.Store, firstUse bool) error {
	trust, err := s.Trust()
	if err != nil {
		return err
	}
	n := len(trust.Writers())
	fmt.Fprintf(sio.Out, "pin file: %s (%d writer(s) trusted)\n", s.PinFile(), n)
	if firstUse {
		fmt.Fprintln(sio.Out, "trust on first use: the first key each writer publishes is pinned; a different key later is refused")
	} else if n == 0 {
		fmt.Fprintf(sio.Out, "no writer key is trusted yet: pushes of refs/bernstein/* are refused until you pin keys ('bernstein keys pin --repo %s WRITER' after checking its fingerprint, or --from FILE)\n", s.GitDir())
	}
	return nil
}

type hooksUninstallOptions struct {
	IO *IO
	hookChoice
	Repo string
}

func newHooksUninstallCmd(f *factory, runF func(*hooksUninstallOptions) error) *cobra.Command {
	o := &hooksUninstallOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "uninstall --remote-guard|--pre-push|--checkpoint",
		Short: "Remove one of bernstein's git hooks",
		Long: `Remove bernstein's hook from the repository (--repo DIR, else the current
directory) and put back the hook it had kept as NAME.chained, if any. A hook
that is not bernstein's is left alone.

Exit status: 0 removed; 1 error (no bernstein hook of that name there, wrong
kind of repository), nothing changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Repo = hookRepo(f)
			if runF != nil {
				return runF(o)
			}
			return hooksUninstallRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.guard, "remote-guard", false, "remove the pre-receive guard")
	cmd.Flags().BoolVar(&o.prePush, "pre-push", false, "remove the pre-push check")
	cmd.Flags().BoolVar(&o.checkpointSet, "checkpoint", false, "remove the post-commit checkpoint hook")
	return cmd
}

func hooksUninstallRun(o *hooksUninstallOptions) error {
	hook, err := o.hook()
	if err != nil {
		return exitCode(1, err)
	}
	res, err := hooks.Uninstall(o.Repo, hook)
	if err != nil {
		return exitCode(1, err)
	}
	fmt.Fprintf(o.IO.Out, "removed %s: %s\n", describeHook(hook), res.Path)
	if res.Chained != "" {
		fmt.Fprintf(o.IO.Out, "restored the hook it had kept: %s\n", res.Chained)
	}
	return nil
}

type hooksRunOptions struct {
	IO *IO
	hooks.RunOptions
	allowedSigners string // --allowed-signers
}

func newHooksRunCmd(f *factory, runF func(*hooksRunOptions) error) *cobra.Command {
	o := &hooksRunOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:    "run pre-receive|pre-push|post-commit [-- GIT-ARGS...]",
		Short:  "Run a hook (what the installed scripts call)",
		Hidden: true,
		Long: `Run one of bernstein's hooks with git's arguments and input. The installed
scripts call it; see 'bernstein hooks --help'.

Exit status: 0 accepted (post-commit: always 0); 1 refused, one line per
problem on stderr; 2 the check could not run (the push is refused as well).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Hook, o.Args = args[0], args[1:]
			o.Dir, o.allowedSigners = f.repo, f.allowedSigners
			if runF != nil {
				return runF(o)
			}
			return hooksRunRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Task, "task", "", "post-commit: the task to checkpoint")
	cmd.Flags().BoolVar(&o.TrustFirstUse, "trust-first-use", false, "pre-receive: pin the first key each writer publishes")
	return cmd
}

// hooksRunRun runs a hook as git calls it; its exit status is the hook's.
func hooksRunRun(o *hooksRunOptions) error {
	home, err := keys.Home()
	if err != nil {
		return exitCode(hooks.ExitError, err)
	}
	o.Home = home
	o.Stdin, o.Stdout, o.Stderr = o.IO.In, o.IO.Out, o.IO.Err
	o.AllowedSigners = envDefault(o.allowedSigners, "BERNSTEIN_ALLOWED_SIGNERS")
	if code := hooks.Run(o.RunOptions); code != 0 {
		return exitCode(code, nil)
	}
	return nil
}
