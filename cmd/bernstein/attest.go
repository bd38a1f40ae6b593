package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/atomicfile"
)

type attestOptions struct {
	bundle  bool
	output  string
	version int64
}

const attestExit = `Exit status: 0 attested; 1 unknown task, key or version, or an error (a key in
ssh-agent that the agent cannot use); 2 refused: what would be attested is not
verified here (tampered, unverifiable, or its journal broken, rolled back or,
for a task, not sealed), named in one line, and nothing is signed.`

func (o *attestOptions) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.bundle, "bundle", false, "write a Sigstore bundle (v0.3, public-key hint, no transparency log) instead of the bare DSSE envelope")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "write to FILE (atomically) instead of stdout")
}

// emit prints or writes the attestation.
func (o *attestOptions) emit(io *IO, a *bernstein.Attestation, err error) error {
	if errors.Is(err, bernstein.ErrNotAttestable) {
		return exitCode(2, err)
	}
	if errors.Is(err, bernstein.ErrUnknownTask) || errors.Is(err, bernstein.ErrUnknownArtifact) {
		return exitCode(1, err)
	}
	if err != nil {
		return err
	}
	doc := a.Envelope
	if o.bundle {
		doc = a.Bundle
	}
	doc = append(append([]byte{}, doc...), '\n')
	if o.output == "" || o.output == "-" {
		_, err := io.Out.Write(doc)
		return err
	}
	if err := atomicfile.Write(o.output, doc, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.output, err)
	}
	fmt.Fprintf(io.Err, "attested %s: %s signed by %s\n", a.Subjects[0].Name, o.output, a.KeyID)
	return nil
}

func newArtifactAttestCmd(g *globals, io *IO) *cobra.Command {
	o := &attestOptions{}
	cmd := &cobra.Command{
		Use:   "attest <task> <key> [--version N] [--bundle] [-o FILE]",
		Short: "Sign an in-toto attestation of a verified artifact version",
		Long: `Print an in-toto Statement (v1) about one artifact version (the latest unless
--version N) in a DSSE envelope signed by this host's writer key, through
sigstore's DSSE signer; --bundle prints it as a Sigstore bundle (v0.3) with a
public-key hint (the key's SSH fingerprint) and no transparency log entry.

The subject is the version's payload: the sha256 of its canonical bytes and
its git blob id ('git cat-file blob <id>' prints those bytes). The predicate
(` + "`" + `docs/attest.md` + "`" + `, artifact-version v1) carries the journal row, the spine entry hash,
the version's position in the run and the progress vector at that position.
The version is re-verified first; only a verified one is attested. Nothing is
written to the repository.

` + attestExit,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			v := int64(0)
			if cmd.Flags().Changed("version") {
				if o.version < 1 {
					return fmt.Errorf("invalid version: %d (versions start at 1)", o.version)
				}
				v = o.version
			}
			a, err := s.AttestArtifact(args[0], args[1], v)
			return o.emit(io, a, err)
		},
	}
	o.flags(cmd)
	cmd.Flags().Int64Var(&o.version, "version", 0, "attest version N instead of the latest")
	return cmd
}

func newTaskAttestCmd(g *globals, io *IO) *cobra.Command {
	o := &attestOptions{}
	cmd := &cobra.Command{
		Use:   "attest <task> [--bundle] [-o FILE]",
		Short: "Sign an in-toto attestation of a sealed task journal",
		Long: `Print an in-toto Statement (v1) about a task's sealed journal, in a DSSE
envelope signed by this host's writer key (--bundle: a Sigstore bundle v0.3,
public-key hint, no transparency log).

The subject is the journal seal: its spine entry hash (sha256) and the commit
that carries it. The predicate (` + "`" + `docs/attest.md` + "`" + `, task-journal v1) carries the
progress vector and every artifact version with its digests. Only a journal
whose identity is verified (the task ended, and the journal is exactly what
its seal says) with every row and version verified is attested. Nothing is
written to the repository.

` + attestExit,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			a, err := s.AttestTask(args[0])
			return o.emit(io, a, err)
		},
	}
	o.flags(cmd)
	return cmd
}
