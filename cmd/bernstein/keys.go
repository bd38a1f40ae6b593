package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
)

func newKeysCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "List writer keys and pin the ones this host trusts",
		Long: `Writers publish their public keys in the repository, one ref per writer
(refs/bernstein/writers/<writer>). A published key is not trusted: anyone who
can push to the repository can publish one. A reader trusts its own writer's
key, the keys of --allowed-signers, and the keys pinned for this repository
with 'bernstein keys pin', which are kept in a pin file under
BERNSTEIN_HOME (git's allowed_signers format; 'keys list' prints its path).`,
	}
	cmd.AddCommand(newKeysListCmd(f, nil), newKeysPinCmd(f, nil), newKeysUnpinCmd(f, nil))
	return cmd
}

type keysListOptions struct {
	IO    *IO
	Store openFunc
	JSON  bool
}

const keysListLong = `List every writer whose key is published in the repository or pinned here:
the writer, the SHA256 fingerprint of its published key, the ref that
publishes it, and its trust:

  own                    this host's writer
  pinned                 the published key is the pinned one
  unpinned               published, not pinned: its signatures prove nothing
  CHANGED                pinned, but the published key is another one
  pinned, not published  pinned here, no ref publishes a key for it
  UNREADABLE             the writer's key ref holds no key that can be read

A CHANGED key (also this host's own writer's, when its ref publishes
another key) and an UNREADABLE key ref are printed as warnings on stderr as
well: someone published a new key under a writer's name. Until it is pinned
(after checking with the writer's owner), that writer's new signatures do
not verify.

Exit status: 0 listed; 1 error.`

func newKeysListCmd(f *factory, runF func(*keysListOptions) error) *cobra.Command {
	o := &keysListOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Each writer's key: fingerprint, where it came from, whether pinned",
		Long:  keysListLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return keysListRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print one JSON document")
	return cmd
}

func keysListRun(o *keysListOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		wks, err := s.WriterKeys()
		if err != nil {
			return err
		}
		warnChanged(o.IO, wks)
		if o.JSON {
			return printJSON(o.IO, struct {
				PinFile string                  `json:"pin_file"`
				Writers []bernstein.WriterTrust `json:"writers"`
			}{s.PinFile(), nonNil(wks)})
		}
		t := newTable(o.IO, "writer", "fingerprint", "source", "trust")
		for _, wk := range wks {
			fp := wk.Fingerprint
			if fp == "" && len(wk.Pinned) > 0 {
				fp = wk.Pinned[0]
			}
			t.row(wk.Writer, fp, dash(wk.Source), wk.Trust)
		}
		if err := t.render(); err != nil {
			return err
		}
		if o.IO.IsTTY {
			fmt.Fprintf(o.IO.Out, "pin file: %s\n", s.PinFile())
		}
		return nil
	})
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// warnChanged prints one loud line per writer whose published key is not
// the pinned one.
func warnChanged(sio *IO, wks []bernstein.WriterTrust) {
	for _, wk := range wks {
		if wk.Trust == bernstein.TrustUnreadable {
			fmt.Fprintf(sio.Err, "WARNING: %s, the key ref of writer %s, cannot be read (%s): it publishes no key. Someone may have rewritten it with plain git.\n",
				wk.Source, wk.Writer, wk.Problem)
		}
		if wk.Trust == bernstein.TrustChanged {
			fmt.Fprintf(sio.Err, "WARNING: the published key of writer %s CHANGED: %s publishes %s, but %s is pinned. Someone may be impersonating %s; its new signatures do not verify. If the change is expected (check with the writer's owner), run 'bernstein keys pin --replace --key %s %s'.\n",
				wk.Writer, wk.Source, wk.Fingerprint, strings.Join(wk.Pinned, ", "), wk.Writer, wk.Fingerprint, wk.Writer)
		}
	}
}

type keysPinOptions struct {
	IO    *IO
	Store openFunc
	bernstein.PinOptions
	JSON bool
}

const keysPinLong = `Pin writers' keys: from now on, their signatures verify on this host. The
keys are the ones the repository publishes (refs/bernstein/writers/<writer>),
or with --from the ones in an allowed_signers file handed over out of band,
which is what to do when the repository itself is not trusted. Check the
fingerprints that 'bernstein keys list' prints with the writers' owners first.

The pins go into this repository's pin file under BERNSTEIN_HOME, in git's
allowed_signers format; --allowed-signers is still read as well. Pinning a key
already pinned changes nothing. A writer whose pinned key differs from the
key to pin is refused, as ssh refuses a changed host key, unless --replace.
A name under which several keys are published (refs/bernstein/writers/
<writer>.<key>) is refused, listing their fingerprints, unless --key names one;
a writer pinned already keeps its pinned key.

Exit status: 0 pinned; 1 error (unknown writer, changed key, bad file).`

func newKeysPinCmd(f *factory, runF func(*keysPinOptions) error) *cobra.Command {
	o := &keysPinOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "pin WRITER... | --all",
		Short: "Trust writers' keys in this repository",
		Long:  keysPinLong,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.All && len(args) > 0 {
				return fmt.Errorf("give writers or --all, not both")
			}
			if !o.All && len(args) == 0 {
				return fmt.Errorf("name the writers to pin, or pass --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Writers = args
			if runF != nil {
				return runF(o)
			}
			return keysPinRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.All, "all", false, "pin every writer whose key is found")
	cmd.Flags().StringVar(&o.From, "from", "", "take the keys from this allowed_signers file, not from the repository")
	cmd.Flags().BoolVar(&o.Replace, "replace", false, "replace a writer's different pinned key")
	cmd.Flags().StringVar(&o.Key, "key", "", "of several keys published under a writer's name, pin the one with this SHA256 fingerprint")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the result as JSON")
	return cmd
}

func keysPinRun(o *keysPinOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		done, err := s.PinKeys(o.PinOptions)
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, struct {
				PinFile string                  `json:"pin_file"`
				Pinned  []bernstein.WriterTrust `json:"pinned"`
			}{s.PinFile(), nonNil(done)})
		}
		for _, wk := range done {
			fmt.Fprintf(o.IO.Out, "pinned %s %s\n", wk.Writer, wk.Fingerprint)
		}
		fmt.Fprintf(o.IO.Out, "pin file: %s\n", s.PinFile())
		return nil
	})
}

type keysUnpinOptions struct {
	IO      *IO
	Store   openFunc
	Writers []string
}

func newKeysUnpinCmd(f *factory, runF func(*keysUnpinOptions) error) *cobra.Command {
	o := &keysUnpinOptions{IO: f.IO, Store: f.Store}
	return &cobra.Command{
		Use:   "unpin WRITER...",
		Short: "Stop trusting writers' pinned keys",
		Long: `Remove writers from this repository's pin file. Their signatures no longer
prove anything on this host (those already written stay as they are; readers
report them as unverifiable). Keys given with --allowed-signers are not
touched.

Exit status: 0 unpinned; 1 error (a writer that is not pinned).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Writers = args
			if runF != nil {
				return runF(o)
			}
			return keysUnpinRun(o)
		},
	}
}

func keysUnpinRun(o *keysUnpinOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		if err := s.UnpinKeys(o.Writers); err != nil {
			return err
		}
		for _, w := range o.Writers {
			fmt.Fprintf(o.IO.Out, "unpinned %s\n", w)
		}
		return nil
	})
}
