package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/servecmd"
	"github.com/bernstein/bernstein/ledger"
)

// exitError carries a command's exit status; its message (if any) is
// printed on stderr as one line.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func exitCode(code int, err error) error { return &exitError{code: code, err: err} }

const version = "0.1.0"

const rootLong = `bernstein keeps the work of agent tasks in an ordinary git repository.

Workers attach typed artifacts (reports, tables, links) to the tasks whose
claim they hold. Every payload is a git blob, every post a row in the task's
hash-chained journal under refs/bernstein/journal/<task>, sealed into the
writer's signed lineage spine and mirrored into an HMAC audit chain. Every
read re-checks what it shows: a tampered version is reported, never rendered.

Exit status: 0 help or version printed; 1 unknown command (the nearest
command is suggested). Each command's --help gives its own exit status.`

func newRootCmd(io *IO) *cobra.Command {
	f := &factory{IO: io}
	root := &cobra.Command{
		Use:           "bernstein",
		Short:         "Keep the work of agent tasks in a git repository",
		Long:          rootLong,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	root.SetIn(io.In)
	root.PersistentFlags().StringVar(&f.repo, "repo", "", "repository directory (default $BERNSTEIN_REPO, else the enclosing repository)")
	root.PersistentFlags().StringVar(&f.allowedSigners, "allowed-signers", "", "pin writer keys from this allowed_signers file (default $BERNSTEIN_ALLOWED_SIGNERS)")
	root.AddCommand(
		newInitCmd(f, nil),
		newTaskCmd(f),
		newArtifactCmd(f, false),
		newCheckpointCmd(f, nil),
		newDiffCmd(f),
		newGateCmd(f),
		newEvidenceCmd(f),
		newAuditCmd(f), newKeysCmd(f),
		newArtifactCmd(f, true),
		newMCPCmd(f, nil), newServeCmd(f, nil),
		newRemoteCmd(f), newWitnessCmd(f), newPushCmd(f, nil), newFetchCmd(f, nil), newCloneCmd(f, nil),
		newHooksCmd(f), newUpgradeCmd(f, nil), newArchiveCmd(f, nil),
	)
	root.SetUsageTemplate(servecmd.UsageTemplate(root.UsageTemplate()))
	root.SetHelpCommand(newHelpCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	documentCompletion(root)
	registerCompletions(f, root)
	guardParents(root)
	root.SetFlagErrorFunc(flagError)
	return root
}

// flagError is the error of a flag cobra cannot parse.
func flagError(c *cobra.Command, err error) error {
	// 'bernstein artifact pots T-1 k --type report': the mistake is the
	// command, not the flag that belongs to the intended one.
	if c.HasSubCommands() {
		if a := c.Flags().Args(); len(a) > 0 {
			return unknownCommand(c, a[0])
		}
	}
	return exitCode(1, fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
}

// run executes the command line and returns the exit status.
func run(args []string, io *IO) int {
	root := newRootCmd(io)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		err = ee.err
	}
	if err != nil {
		fmt.Fprintln(io.Err, "bernstein: "+servecmd.OneLine(userMessage(err)))
	}
	return code
}

// userMessage turns library errors into what a user should read.
func userMessage(err error) string {
	var in *artifact.InputError
	var ill *ledger.IllegalTransitionError
	switch {
	case errors.As(err, &in):
		return "invalid " + in.Field + ": " + in.Msg
	case errors.As(err, &ill):
		return ill.Error()
	}
	if msg, ok := servecmd.OpenMessage(err); ok {
		return msg
	}
	return err.Error()
}

// printJSON writes v as indented JSON: the only thing on stdout.
func printJSON(io *IO, v any) error {
	enc := json.NewEncoder(io.Out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
