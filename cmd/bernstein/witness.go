package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

// 'witness': the witnesses this host asks to cosign its writer's log
// checkpoints and checks the other writers' logs against
// (docs/trust.md, Witnesses).

func newWitnessCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "witness",
		Short: "Configure the witnesses that cosign writers' log checkpoints",
		Long: `Witnesses (C2SP tlog-witness) cosign each writer's log checkpoints, and
only consistent extensions of what they cosigned before: a remote rolled back
or showing two histories is then detected by every reader. The configuration
is this host's own, kept in $BERNSTEIN_HOME/witnesses/<repository id>.json,
never in the repository (whoever can push cannot plant a witness).
'bernstein push' has the configured witnesses cosign this writer's new
checkpoint; 'fetch', 'clone' and 'audit verify' check the other writers' logs
against them (docs/trust.md, Witnesses).`,
	}
	cmd.AddCommand(newWitnessAddCmd(f, nil), newWitnessListCmd(f, nil), newWitnessRemoveCmd(f, nil),
		newWitnessLogCmd(f, nil), newWitnessQuorumCmd(f, nil))
	return cmd
}

type witnessOptions struct {
	IO     *IO
	Store  openFunc
	Args   []string
	JSON   bool
	Quorum int // witness add --quorum (-1: unchanged)
}

func witnessCmd(f *factory, runF, run func(*witnessOptions) error, use, short, long string, args cobra.PositionalArgs) *cobra.Command {
	o := &witnessOptions{IO: f.IO, Store: f.Store, Quorum: -1}
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: args,
		RunE: func(cmd *cobra.Command, a []string) error {
			o.Args = a
			if runF != nil {
				return runF(o)
			}
			return run(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print JSON")
	if use == witnessAddUse {
		cmd.Flags().IntVar(&o.Quorum, "quorum", -1, "also set how many configured witnesses a push needs")
	}
	return cmd
}

const witnessAddUse = "add NAME URL KEY"

func newWitnessAddCmd(f *factory, runF func(*witnessOptions) error) *cobra.Command {
	return witnessCmd(f, runF, witnessAddRun, witnessAddUse, "Configure a witness", `Configure a witness for this repository on this host: NAME (a local name:
letters, digits, '_', '.', '-'), URL (its tlog-witness endpoint, http or
https; bernstein posts to URL/add-checkpoint) and KEY (its verifier key in
signed-note form, name+hash+base64, as the witness prints it). The operator
of the witness registers this writer's log first ('bernstein witness log').
Nothing is written when any of them is not one.

Exit status: 0 configured; 1 bad input (nothing written), or a witness of
that name is configured already.`, cobra.ExactArgs(3))
}

func witnessAddRun(o *witnessOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		w := bernstein.Witness{Name: o.Args[0], URL: o.Args[1], Key: o.Args[2]}
		if err := w.Check(); err != nil {
			return err
		}
		l, err := s.Witnesses()
		if err != nil {
			return err
		}
		if o.Quorum > len(l.Witnesses)+1 || o.Quorum == 0 || o.Quorum < -1 {
			return fmt.Errorf("--quorum %d: between 1 and the %d witness(es) configured with this one", o.Quorum, len(l.Witnesses)+1)
		}
		if l, err = s.AddWitness(w); err != nil {
			return err
		}
		if o.Quorum > 0 {
			if l, err = s.SetWitnessQuorum(o.Quorum); err != nil {
				return err
			}
		}
		return printWitnesses(o, l)
	})
}

func newWitnessListCmd(f *factory, runF func(*witnessOptions) error) *cobra.Command {
	return witnessCmd(f, runF, witnessListRun, "list", "List the configured witnesses and the quorum", `List the witnesses configured for this repository on this host, and the
quorum a push needs (the configured one, else every witness).

Exit status: 0 listed; 1 error.`, cobra.NoArgs)
}

func witnessListRun(o *witnessOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		l, err := s.Witnesses()
		if err != nil {
			return err
		}
		return printWitnesses(o, l)
	})
}

func newWitnessRemoveCmd(f *factory, runF func(*witnessOptions) error) *cobra.Command {
	return witnessCmd(f, runF, witnessRemoveRun, "remove NAME", "Remove a configured witness", `Remove the witness NAME from this host's configuration for this repository
(the quorum is lowered to the witnesses left, if it was above).

Exit status: 0 removed; 1 no such witness (nothing written), or error.`, cobra.ExactArgs(1))
}

func witnessRemoveRun(o *witnessOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		l, err := s.RemoveWitness(o.Args[0])
		if err != nil {
			return err
		}
		return printWitnesses(o, l)
	})
}

func newWitnessQuorumCmd(f *factory, runF func(*witnessOptions) error) *cobra.Command {
	return witnessCmd(f, runF, witnessQuorumRun, "quorum N", "Set how many witnesses must cosign", `Set how many of the configured witnesses must cosign a checkpoint: push
fails below it, and a reader counts a log as cosigned only at it. 0 means
every configured witness. 'push --witness-quorum N' overrides it for one push.

Exit status: 0 set; 1 N is not between 0 and the number of witnesses.`, cobra.ExactArgs(1))
}

func witnessQuorumRun(o *witnessOptions) error {
	n, err := strconv.Atoi(o.Args[0])
	if err != nil {
		return fmt.Errorf("quorum %q is not a number", o.Args[0])
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		l, err := s.SetWitnessQuorum(n)
		if err != nil {
			return err
		}
		return printWitnesses(o, l)
	})
}

func newWitnessLogCmd(f *factory, runF func(*witnessOptions) error) *cobra.Command {
	return witnessCmd(f, runF, witnessLogRun, "log", "Print this writer's log origin and verifier key", `Print, on one line, this writer's log origin and its verifier key: what a
witness operator registers (for litewitness: 'witnessctl add-log -origin
ORIGIN' and 'witnessctl add-key -origin ORIGIN -key KEY'). The origin is
bernstein.log/<repository id>/<writer>; the key is the writer's Ed25519 key
in signed-note form (an ECDSA writer key cannot sign a witnessed log).

Exit status: 0 printed; 1 no writer here, or its key is not Ed25519.`, cobra.NoArgs)
}

func witnessLogRun(o *witnessOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		l, err := s.WitnessLog()
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, l)
		}
		fmt.Fprintf(o.IO.Out, "%s %s\n", l.Origin, l.VerifierKey)
		return nil
	})
}

func printWitnesses(o *witnessOptions, l *bernstein.WitnessList) error {
	if o.JSON {
		return printJSON(o.IO, l)
	}
	for _, w := range l.Witnesses {
		fmt.Fprintf(o.IO.Out, "%s\t%s\t%s\n", w.Name, w.URL, w.Key)
	}
	fmt.Fprintf(o.IO.Out, "quorum %d of %d (%s)\n", l.Quorum, len(l.Witnesses), l.Config)
	return nil
}
