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

func newHooksCmd(g *globals, sio *IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hooks",
		Short: "Git hooks that guard a remote, check pushes and record checkpoints",
		Long: `Install git hooks that keep bernstein's history honest where plain git moves it:

  install --remote-guard     a pre-receive hook in a bare repository (a remote): it
                             refuses a push that deletes or rewinds a refs/bernstein/*
                             ref, carries a commit no pinned key signed, substitutes a
                             writer's key, or adds rows that do not chain, payloads that
                             do not hash to their rows, or spine entries that do not
                             bind the rows they seal. It checks only what the push adds.
  install --pre-push         a pre-push hook in a working repository: the same checks
                             on what is about to leave, against this host's pinned keys,
                             for git push and bernstein push alike.
  install --checkpoint TASK  a post-commit hook: every commit is recorded as a
                             checkpoint row of TASK, so progress is earned as commits
                             are made. It never blocks a commit.

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
	cmd.AddCommand(newHooksInstallCmd(g, sio), newHooksUninstallCmd(g, sio), newHooksRunCmd(g, sio))
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

func hookRepo(g *globals) string {
	if g.repo != "" {
		return g.repo
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

func newHooksInstallCmd(g *globals, sio *IO) *cobra.Command {
	var h hookChoice
	var firstUse bool
	cmd := &cobra.Command{
		Use:   "install --remote-guard [--trust-first-use] | --pre-push | --checkpoint TASK",
		Short: "Install one of bernstein's git hooks",
		Long: `Install a hook into the repository (--repo DIR, else the current directory):

  --remote-guard    in a bare repository: the pre-receive guard. It trusts the keys
                    pinned for that repository in the pin file of this BERNSTEIN_HOME
                    (pin them with 'bernstein keys pin --repo DIR ...' as the operator,
                    after checking their fingerprints); with --trust-first-use it pins
                    the first key each writer publishes and refuses any other later.
  --pre-push        in a working repository: the same checks before a push leaves.
  --checkpoint TASK in a working repository: record each new commit as a checkpoint
                    row of TASK (which must exist).

The script calls this binary by its absolute path with this BERNSTEIN_HOME. A hook
that is already there and is not bernstein's is renamed NAME.chained and run after
ours; installing the same hook again changes nothing.

Exit status: 0 installed (or installed already); 1 error (wrong kind of
repository, unknown task, a hook in the way), nothing written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			h.checkpointSet = cmd.Flags().Changed("checkpoint")
			hook, err := h.hook()
			if err != nil {
				return exitCode(1, err)
			}
			if firstUse && hook != hooks.PreReceive {
				return exitCode(1, errors.New("--trust-first-use goes with --remote-guard only"))
			}
			bin, err := os.Executable()
			if err == nil {
				bin, err = filepath.EvalSymlinks(bin)
			}
			if err != nil {
				return exitCode(1, fmt.Errorf("cannot find this binary's path for the hook: %w", err))
			}
			home, err := keys.Home()
			if err != nil {
				return exitCode(1, err)
			}
			dir := hookRepo(g)
			r, err := hooks.Locate(dir)
			if err != nil {
				return exitCode(1, err)
			}
			if err := r.CheckPlace(hook); err != nil {
				return exitCode(1, err)
			}
			s, err := bernstein.Open(bernstein.Options{Repo: dir, Home: home})
			if err != nil {
				return exitCode(1, errors.New(userMessage(err)))
			}
			defer s.Close()
			if hook == hooks.PostCommit {
				if err := refs.ValidateTaskID(h.checkpoint); err != nil {
					return exitCode(1, &artifact.InputError{Field: "task_id", Msg: strings.TrimPrefix(err.Error(), "task id ")})
				}
				head, err := (refs.Reader{Dir: s.GitDir()}).ReadOptional(refs.Ledger(h.checkpoint))
				if err != nil {
					return exitCode(1, err)
				}
				if head.IsZero() {
					return exitCode(1, fmt.Errorf("%w: %s (create it first: the hook records checkpoints of an existing task)", bernstein.ErrUnknownTask, h.checkpoint))
				}
			}
			res, err := hooks.Install(hooks.InstallOptions{Repo: dir, Hook: hook, Binary: bin, Home: home, Task: h.checkpoint, TrustFirstUse: firstUse})
			if err != nil {
				return exitCode(1, err)
			}
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
			if hook == hooks.PreReceive {
				trust, err := s.Trust()
				if err != nil {
					return exitCode(1, err)
				}
				n := len(trust.Writers())
				fmt.Fprintf(sio.Out, "pin file: %s (%d writer(s) trusted)\n", s.PinFile(), n)
				if firstUse {
					fmt.Fprintln(sio.Out, "trust on first use: the first key each writer publishes is pinned; a different key later is refused")
				} else if n == 0 {
					fmt.Fprintf(sio.Out, "no writer key is trusted yet: pushes of refs/bernstein/* are refused until you pin keys ('bernstein keys pin --repo %s WRITER' after checking its fingerprint, or --from FILE)\n", s.GitDir())
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&h.guard, "remote-guard", false, "install the pre-receive guard (bare repository)")
	cmd.Flags().BoolVar(&h.prePush, "pre-push", false, "install the pre-push check (working repository)")
	cmd.Flags().StringVar(&h.checkpoint, "checkpoint", "", "install the post-commit hook that checkpoints TASK (working repository)")
	cmd.Flags().BoolVar(&firstUse, "trust-first-use", false, "with --remote-guard: pin the first key each writer publishes")
	return cmd
}

func newHooksUninstallCmd(g *globals, sio *IO) *cobra.Command {
	var h hookChoice
	cmd := &cobra.Command{
		Use:   "uninstall --remote-guard | --pre-push | --checkpoint",
		Short: "Remove one of bernstein's git hooks",
		Long: `Remove bernstein's hook from the repository (--repo DIR, else the current
directory) and put back the hook it had kept as NAME.chained, if any. A hook that is
not bernstein's is left alone.

Exit status: 0 removed; 1 error (no bernstein hook of that name there, wrong kind
of repository), nothing changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			hook, err := h.hook()
			if err != nil {
				return exitCode(1, err)
			}
			res, err := hooks.Uninstall(hookRepo(g), hook)
			if err != nil {
				return exitCode(1, err)
			}
			fmt.Fprintf(sio.Out, "removed %s: %s\n", describeHook(hook), res.Path)
			if res.Chained != "" {
				fmt.Fprintf(sio.Out, "restored the hook it had kept: %s\n", res.Chained)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&h.guard, "remote-guard", false, "remove the pre-receive guard")
	cmd.Flags().BoolVar(&h.prePush, "pre-push", false, "remove the pre-push check")
	cmd.Flags().BoolVar(&h.checkpointSet, "checkpoint", false, "remove the post-commit checkpoint hook")
	return cmd
}

func newHooksRunCmd(g *globals, sio *IO) *cobra.Command {
	var o hooks.RunOptions
	cmd := &cobra.Command{
		Use:    "run pre-receive|pre-push|post-commit [-- GIT-ARGS...]",
		Short:  "Run a hook (what the installed scripts call)",
		Hidden: true,
		Long: `Run one of bernstein's hooks with git's arguments and input. The installed
scripts call it; see 'bernstein hooks --help'.

Exit status: 0 accepted (post-commit: always 0); 1 refused, one line per problem on
stderr; 2 the check could not run (the push is refused as well).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			home, err := keys.Home()
			if err != nil {
				return exitCode(hooks.ExitError, err)
			}
			o.Hook, o.Args = args[0], args[1:]
			o.Dir, o.Home = g.repo, home
			o.Stdin, o.Stdout, o.Stderr = sio.In, sio.Out, sio.Err
			o.AllowedSigners = envDefault(g.allowedSigners, "BERNSTEIN_ALLOWED_SIGNERS")
			if code := hooks.Run(o); code != 0 {
				return exitCode(code, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Task, "task", "", "post-commit: the task to checkpoint")
	cmd.Flags().BoolVar(&o.TrustFirstUse, "trust-first-use", false, "pre-receive: pin the first key each writer publishes")
	return cmd
}
