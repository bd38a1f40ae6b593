package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/internal/atomicfile"
)

// attestOptions are the flags both attest commands take.
type attestOptions struct {
	Bundle bool   // a Sigstore bundle, not the bare DSSE envelope
	Output string // a file to write; "" or "-" is stdout
}

const attestExit = `Exit status: 0 attested; 1 unknown task, key or version, or an error (a key in
ssh-agent that the agent cannot use); 2 refused: what would be attested is not
verified here (tampered, unverifiable, or its journal broken, rolled back or,
for a task, not sealed), named in one line, and nothing is signed.`

func (o *attestOptions) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.Bundle, "bundle", false, "write a Sigstore bundle (v0.3, public-key hint, no transparency log) instead of the bare DSSE envelope")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "write to FILE (atomically) instead of stdout")
}

// emit prints or writes the attestation.
func (o *attestOptions) emit(io *IO, a *bernstein.Attestation, err error) error {
	if errors.Is(err, bernstein.ErrNotAttestable) {
		return exitCode(2, err)
	}
	if err != nil {
		return err
	}
	doc := a.Envelope
	if o.Bundle {
		doc = a.Bundle
	}
	doc = append(append([]byte{}, doc...), '\n')
	if o.Output == "" || o.Output == "-" {
		_, err := io.Out.Write(doc)
		return err
	}
	if err := atomicfile.Write(o.Output, doc, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.Output, err)
	}
	fmt.Fprintf(io.Err, "attested %s: %s signed by %s\n", a.Subjects[0].Name, o.Output, a.KeyID)
	return nil
}

type artifactAttestOptions struct {
	IO    *IO
	Store openFunc
	attestOptions
	Task    string
	Key     string
	Version *int64 // nil: the latest
}

const artifactAttestLong = `Print an in-toto Statement (v1) about one artifact version (the latest unless
--version N) in a DSSE envelope signed by this host's writer key, through
sigstore's DSSE signer; --bundle prints it as a Sigstore bundle (v0.3) with a
public-key hint (the key's SSH fingerprint) and no transparency log entry.

The subject is the version's payload: the sha256 of its canonical bytes and
its git blob id ('git cat-file blob <id>' prints those bytes). The predicate
(` + "`" + `docs/attest.md` + "`" + `, artifact-version v1) carries the journal row, the spine
entry hash, the version's position in the run and the progress vector at that
position. The version is re-verified first; only a verified one is attested.
Nothing is written to the repository.

` + attestExit

func newArtifactAttestCmd(f *factory, runF func(*artifactAttestOptions) error) *cobra.Command {
	o := &artifactAttestOptions{IO: f.IO, Store: f.Store}
	var version int64
	cmd := &cobra.Command{
		Use:   "attest <task> <key> [--version N] [--bundle] [-o FILE]",
		Short: "Sign an in-toto attestation of a verified artifact version",
		Long:  artifactAttestLong,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task, o.Key = args[0], args[1]
			if cmd.Flags().Changed("version") {
				o.Version = &version
			}
			if runF != nil {
				return runF(o)
			}
			return artifactAttestRun(o)
		},
	}
	o.flags(cmd)
	cmd.Flags().Int64Var(&version, "version", 0, "attest version N instead of the latest")
	// The synopsis names every flag but the global ones; " [flags]" would
	// take it past 80 columns.
	cmd.DisableFlagsInUseLine = true
	return cmd
}

func artifactAttestRun(o *artifactAttestOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		v := int64(0)
		if o.Version != nil {
			if *o.Version < 1 {
				return fmt.Errorf("invalid version: %d (versions start at 1)", *o.Version)
			}
			v = *o.Version
		}
		a, err := s.AttestArtifact(o.Task, o.Key, v)
		return o.emit(o.IO, a, err)
	})
}

type taskAttestOptions struct {
	IO    *IO
	Store openFunc
	attestOptions
	Task string
}

const taskAttestLong = `Print an in-toto Statement (v1) about a task's sealed journal, in a DSSE
envelope signed by this host's writer key (--bundle: a Sigstore bundle v0.3,
public-key hint, no transparency log).

The subject is the journal seal: its spine entry hash (sha256) and the commit
that carries it. The predicate (` + "`" + `docs/attest.md` + "`" + `, task-journal v1) carries the
progress vector and every artifact version with its digests. Only a journal
whose identity is verified (the task ended, and the journal is exactly what
its seal says) with every row and version verified is attested. Nothing is
written to the repository.

` + attestExit

func newTaskAttestCmd(f *factory, runF func(*taskAttestOptions) error) *cobra.Command {
	o := &taskAttestOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "attest <task> [--bundle] [-o FILE]",
		Short: "Sign an in-toto attestation of a sealed task journal",
		Long:  taskAttestLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			if runF != nil {
				return runF(o)
			}
			return taskAttestRun(o)
		},
	}
	o.flags(cmd)
	return cmd
}

func taskAttestRun(o *taskAttestOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		a, err := s.AttestTask(o.Task)
		return o.emit(o.IO, a, err)
	})
}
