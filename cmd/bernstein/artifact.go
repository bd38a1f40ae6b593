package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

const deprecationWarning = "WARNING: 'bernstein artifacts' is deprecated and will be removed in v4.0.0: use 'bernstein artifact' instead."

// newArtifactCmd builds 'artifact' or, deprecated, 'artifacts': the same
// list and show, plus a warning on stderr for the plural.
func newArtifactCmd(f *factory, plural bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifact",
		Short: "Post, list and show the artifacts of a task",
		Long: `Artifacts are typed payloads (report, table, link) that the holder of a task's
claim posts under a key. Each post of a key makes a new version whose record
names the previous version's spine entry: history is a chain, never an
overwrite. Listing and showing re-check every version against its journal row
and its spine entry; a tampered version is reported and its content withheld.`,
	}
	if plural {
		cmd.Use = "artifacts"
		cmd.Short = "Deprecated: use 'bernstein artifact'"
		cmd.Hidden = true
		cmd.PersistentPreRun = func(c *cobra.Command, args []string) {
			fmt.Fprintln(f.IO.Err, deprecationWarning)
		}
		cmd.AddCommand(newArtifactListCmd(f, nil), newArtifactShowCmd(f, nil))
		return cmd
	}
	cmd.AddCommand(newArtifactPostCmd(f, nil), newArtifactListCmd(f, nil), newArtifactShowCmd(f, nil), newArtifactDiffCmd(f, nil), newArtifactTextconvCmd(f, nil), newArtifactAttestCmd(f, nil))
	return cmd
}

type artifactListOptions struct {
	IO     *IO
	Store  openFunc
	Task   string // "": the productions of every task
	JSON   bool
	Strict bool
	Page   bernstein.Page // without a task: one page of the keys
}

const artifactListLong = `With a task: every version of every artifact key of the task, each re-checked
and reported verified, tampered or unverifiable (no pinned key for its
writer), plus the task's journal identity (verified only when a signed
journal seal matches the journal exactly).

The journal identity is shown on the first line on a terminal; piped, stdout
holds only the tab-separated rows, and an identity other than verified is
named on stderr, unless it is unverifiable only because the task is open (not
yet sealed by a terminal transition).

Exit status: 0 versions exist (even if some are tampered); 1 the task has
none or does not exist; 2 rows may be hidden: the journal chain is broken, or
the journal identity is mismatched (the journal differs from its signed seal,
e.g. it was moved back after the task was completed); 2 with --strict, some
version shown is not verified (tampered, or unverifiable: no pinned key for
its writer), or the journal identity of an ended task is unverifiable (an
open task's journal is unsealed, which --strict accepts).

Without a task: the artifact keys the local lineage spines carry, as
bernstein://<task>/<key> with the number of productions of each; --limit N
lists one page of at most N keys (1 to 1000), those after --cursor, and a
page that is not the last names the next page's cursor ("next_cursor" with
--output-json, else on stderr).`

func newArtifactListCmd(f *factory, runF func(*artifactListOptions) error) *cobra.Command {
	o := &artifactListOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "list [<task>]",
		Short: "List every version of a task's artifacts with its verify state",
		Long:  artifactListLong,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				o.Task = args[0]
			}
			if runF != nil {
				return runF(o)
			}
			return artifactListRun(o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print one JSON document")
	cmd.Flags().BoolVar(&o.Strict, "strict", false, "exit 2 when any version shown is not verified (see above)")
	cmd.Flags().IntVar(&o.Page.Limit, "limit", 0, "without a task: list one page of at most this many keys (1 to 1000)")
	cmd.Flags().StringVar(&o.Page.Cursor, "cursor", "", "without a task: list the keys after this cursor (a page's next_cursor)")
	return cmd
}

func artifactListRun(o *artifactListOptions) error {
	if o.Page != (bernstein.Page{}) {
		if o.Task != "" {
			return &artifact.InputError{Field: "limit", Msg: "--limit and --cursor page the list of every task's keys: give no task with them"}
		}
		if err := bernstein.CheckProductionsPage(o.Page); err != nil {
			return err
		}
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		if o.Task == "" {
			return listProductions(s, o.IO, o.JSON, o.Page)
		}
		rep, err := s.Artifacts(o.Task)
		if err != nil {
			return err
		}
		if o.JSON {
			err = printJSON(o.IO, bernstein.NewArtifactListDoc(rep))
		} else {
			err = renderVersions(s, o.IO, rep)
		}
		if err != nil {
			return err
		}
		if err := listExit(rep); err != nil {
			return err
		}
		if o.Strict {
			return strictList(s, rep)
		}
		return nil
	})
}

// renderVersions prints a task's versions as a table, and its journal
// identity: above it on a terminal, on stderr when piped and worth a look.
func renderVersions(s *bernstein.Store, sio *IO, rep *verify.TaskReport) error {
	identity := "journal identity " + rep.JournalIdentity
	if rep.IdentityReason != "" {
		identity += " (" + rep.IdentityReason + ")"
	}
	if sio.IsTTY {
		fmt.Fprintf(sio.Out, "task %s: %s\n", rep.Task, identity)
	} else if rep.JournalIdentity != verify.IdentityMismatched && !identityExpected(s, rep) {
		// Piped, stdout keeps its columns; what is worth a look goes to
		// stderr (a mismatch is the exit error).
		fmt.Fprintf(sio.Err, "note: task %s: %s\n", rep.Task, identity)
	}
	t := newTable(sio, "KEY", "VERSION", "TYPE", "STATE", "INDEX", "CONTENT", "REASON")
	for _, v := range rep.Versions {
		typ := v.Type
		if v.LinkKind != "" {
			typ += "/" + v.LinkKind
		}
		t.row(v.Key, strconv.FormatInt(v.Version, 10), typ, v.State, strconv.FormatInt(v.JournalIndex, 10), v.ContentHash.Short(), v.Reason)
	}
	return t.render()
}

// listExit is the exit of 'artifact list <task>' before --strict: 2 when
// rows may be hidden, 1 when there are none.
func listExit(rep *verify.TaskReport) error {
	switch {
	case rep.ChainBroken:
		msg := rep.ChainReason
		if rep.JournalIdentity == verify.IdentityMismatched {
			msg += "; journal identity mismatched"
			if !strings.Contains(rep.IdentityReason, rep.ChainReason) {
				msg += " (" + rep.IdentityReason + ")"
			}
		}
		return exitCode(2, errors.New(msg))
	case rep.JournalIdentity == verify.IdentityMismatched:
		return exitCode(2, fmt.Errorf("task %s: journal identity mismatched (%s): rows may be hidden", rep.Task, rep.IdentityReason))
	case len(rep.Versions) == 0:
		return exitCode(1, fmt.Errorf("task %s has no artifacts", rep.Task))
	}
	return nil
}

// strictList is the exit of 'artifact list <task> --strict': 2 naming what
// is not verified, nil when everything is.
func strictList(s *bernstein.Store, rep *verify.TaskReport) error {
	var not []string
	for _, v := range rep.Versions {
		if v.State != verify.Verified {
			not = append(not, fmt.Sprintf("%s v%d %s", v.Key, v.Version, v.State))
		}
	}
	if !identityExpected(s, rep) {
		not = append(not, "journal identity "+rep.JournalIdentity+" ("+rep.IdentityReason+")")
	}
	if len(not) == 0 {
		return nil
	}
	if len(not) > 5 {
		not = append(not[:5], fmt.Sprintf("and %d more", len(not)-5))
	}
	return exitCode(2, fmt.Errorf("task %s: not verified (--strict): %s", rep.Task, strings.Join(not, ", ")))
}

// identityExpected tells an unverifiable journal identity that only says
// the task is open (no seal yet, or reopened after its seal) from one that
// deserves a look (a seal by a writer not pinned here, say).
func identityExpected(s *bernstein.Store, rep *verify.TaskReport) bool {
	switch rep.JournalIdentity {
	case verify.IdentityVerified:
		return true
	case verify.IdentityUnverifiable:
		rows, err := s.LedgerRows(rep.Task)
		if err != nil || len(rows) == 0 {
			return false
		}
		return !ledger.Terminal(ledger.PhaseOf(rows[len(rows)-1].Kind))
	}
	return false
}

func listProductions(s *bernstein.Store, io *IO, asJSON bool, page bernstein.Page) error {
	ps, next, err := s.ProductionsPage(page)
	if err != nil {
		return err
	}
	if asJSON {
		doc := bernstein.NewProductionsDoc(ps)
		doc.NextCursor = next
		return printJSON(io, doc)
	}
	t := newTable(io, "ARTIFACT", "PRODUCTIONS")
	for _, p := range ps {
		t.row(p.URI, strconv.Itoa(p.Productions))
	}
	if err := t.render(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(io.Err, "note: more artifact keys follow: --cursor %s\n", next)
	}
	return nil
}

type artifactShowOptions struct {
	IO      *IO
	Store   openFunc
	Task    string
	Key     string
	Version *int64 // nil: the latest (see the help)
	Strict  bool
	JSON    bool
}

const artifactShowLong = `Show one version of an artifact (the latest unless --version N) after
re-checking it: the blob is re-hashed against the journal row, the row against
its spine entry, the spine entry's signature against the writer's key. A
tampered version is reported with the reason and its content is withheld.

Without --version it shows the latest version, except that a version written
by a writer this host does not trust (its key is published but not pinned)
is passed over for the latest verified one, and named. --version N shows
version N whatever its state, saying the state. --strict shows only a
verified version.

Exit status: 0 rendered; 1 unknown task, key or version; 2 content withheld:
the version is tampered (or, with --strict, not verified), or the task's
journal is broken or rolled back behind its spine (so its latest version may
not be the latest), or its journal ref cannot be read as a journal (the task
is tampered, as 'task show' says, whatever key is asked for).

History lists every version of the key oldest first (journal order), in the
text output as in --output-json ("history"), as 'artifact list' does. The
actor is who posted a version (the agent); the writer is the host identity
whose signed spine entry seals it. A tampered version's writer is marked
unproven and labelled with where it was read: "as its spine entry names it"
when the check reached the spine entry the row names, else "as its commit
names it" (the row commit's committer); when neither names one, "writer
unknown: tampered". --output-json says the same in "writer_source"
(spine_entry, commit or "").`

func newArtifactShowCmd(f *factory, runF func(*artifactShowOptions) error) *cobra.Command {
	o := &artifactShowOptions{IO: f.IO, Store: f.Store}
	var version int64
	cmd := &cobra.Command{
		Use:   "show <task> <key>",
		Short: "Show an artifact's latest (or a given) version, with its history",
		Long:  artifactShowLong,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task, o.Key = args[0], args[1]
			if cmd.Flags().Changed("version") {
				o.Version = &version
			}
			if runF != nil {
				return runF(o)
			}
			return artifactShowRun(o)
		},
	}
	cmd.Flags().Int64Var(&version, "version", 0, "show version N instead of the latest")
	cmd.Flags().BoolVar(&o.Strict, "strict", false, "show only a verified version (exit 2 otherwise)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print one JSON document")
	return cmd
}

func artifactShowRun(o *artifactShowOptions) error {
	if err := artifact.ValidateKey(o.Key); err != nil {
		return err
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		rep, err := s.Artifacts(o.Task)
		if err != nil {
			return err
		}
		doc, err := bernstein.NewArtifactShowDoc(rep, bernstein.ShowSelection{Key: o.Key, Strict: o.Strict, Version: o.Version})
		if doc != nil {
			for _, p := range doc.PassedOver {
				fmt.Fprintf(o.IO.Err, "note: %s v%d is newer but unverifiable here (%s); 'bernstein artifact show %s %s --version %d' shows it\n",
					p.Key, p.Version, p.Reason, o.Task, o.Key, p.Version)
			}
		}
		if errors.As(err, new(*refs.BadRefError)) {
			return exitCode(2, err) // tampered, as task show says it: never rendered
		}
		if err != nil {
			return err
		}
		v, payload, withheld := doc.Shown, doc.Payload, doc.Withheld
		if o.JSON {
			if err := printJSON(o.IO, doc); err != nil {
				return err
			}
		} else {
			renderShow(o.IO, o.Task, v, payload, withheld, doc.History)
		}
		if payload == nil {
			what := "withheld"
			if v.State == verify.Tampered {
				what = "tampered"
			}
			return exitCode(2, fmt.Errorf("%s v%d of task %s is %s: %s", v.Key, v.Version, o.Task, what, withheld))
		}
		return nil
	})
}

func renderShow(io *IO, task string, v *verify.Version, p *artifact.Payload, withheld string, history []bernstein.ArtifactVersionDoc) {
	w := io.Out
	typ := v.Type
	if v.LinkKind != "" {
		typ += "/" + v.LinkKind
	}
	state := v.State
	if p == nil && state != verify.Tampered {
		// The version checks, but what it is shown from does not (its
		// journal lost rows, or it is not verified under --strict): the
		// headline must not read as a verdict on what follows.
		state = "withheld (the version itself is " + state + ")"
	}
	fmt.Fprintf(w, "%s v%d (%s) of task %s: %s\n", v.Key, v.Version, typ, task, state)
	if v.Reason != "" {
		fmt.Fprintf(w, "reason:  %s\n", v.Reason)
	}
	fmt.Fprintf(w, "posted:  by %s at journal index %d (%s)\n", dash(v.Actor), v.JournalIndex, writerOf(v.Writer, v.WriterSource, v.State))
	fmt.Fprintf(w, "content: %s\n", v.ContentHash)
	fmt.Fprintf(w, "spine:   %s\n", v.SpineEntryHash)
	if v.PrevVersionHash != "" {
		fmt.Fprintf(w, "prev:    %s\n", v.PrevVersionHash)
	}
	fmt.Fprintf(w, "git:     git show %s:%s\n", v.Commit, bernstein.ArtifactPath(v.Key, v.Version))
	fmt.Fprintln(w)
	switch {
	case p == nil:
		fmt.Fprintf(w, "(content withheld: %s)\n", withheld)
	case p.Type == artifact.TypeReport:
		fmt.Fprint(w, p.Body)
		if len(p.Body) > 0 && p.Body[len(p.Body)-1] != '\n' {
			fmt.Fprintln(w)
		}
	case p.Type == artifact.TypeTable:
		if io.IsTTY {
			t := newTable(io, p.Columns...)
			for _, r := range p.Rows {
				t.row(r...)
			}
			t.render()
		} else {
			cw := csv.NewWriter(w)
			cw.Write(p.Columns)
			cw.WriteAll(p.Rows)
		}
	case p.Type == artifact.TypeLink:
		fmt.Fprintf(w, "%s (%s)\n", p.URL, p.LinkKind)
	}
	if len(history) > 1 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "history (oldest first):")
		for _, h := range history {
			fmt.Fprintf(w, "  v%d  %-12s index %-5d %s  by %s (%s)\n", h.Version, h.State, h.JournalIndex, shortHash(h.ContentHash), dash(h.Actor), writerOf(h.Writer, h.WriterSource, h.State))
		}
	}
}

// writerOf names the writer whose spine entry sealed a version. A tampered
// version's writer is unproven: it is labelled with where it was read (the
// spine entry the row names, or, when the check stopped before that, the
// row's commit), and is unknown when neither names one, which is said
// rather than printed as a dash.
func writerOf(writer, source, state string) string {
	switch {
	case writer != "" && state == verify.Tampered:
		return "writer " + writer + " as its " + sourceWord(source) + " names it, unproven: tampered"
	case writer != "":
		return "writer " + writer
	case state != "":
		return "writer unknown: " + state
	}
	return "writer unknown"
}

// sourceWord is where a version's writer was read, in words.
func sourceWord(source string) string {
	if source == verify.WriterFromSpineEntry {
		return "spine entry"
	}
	return "commit"
}

func shortHash(h string) string {
	if len(h) > 19 {
		return h[:19]
	}
	return h
}
