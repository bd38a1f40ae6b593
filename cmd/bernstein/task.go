package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

func newTaskCmd(g *globals, io *IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Create, claim and move tasks through their ledger",
		Long: `Each task has a ledger under refs/bernstein/ledger/<task>: a chain of
transitions (created, claimed, released, started, suspended, resumed,
completed, failed, abandoned, reopened). Illegal transitions are refused.
Every transition is mirrored into the writer's audit chain; a terminal one
(complete, fail, abandon) also seals the task's journal in the spine.`,
	}
	cmd.AddCommand(newTaskCreateCmd(g, io), newTaskClaimCmd(g, io), newTaskListCmd(g, io), newTaskShowCmd(g, io), newTaskProgressCmd(g, io), newTaskAttestCmd(g, io))
	for _, kind := range []string{
		record.KindTaskReleased, record.KindTaskStarted, record.KindTaskSuspended, record.KindTaskResumed,
		record.KindTaskCompleted, record.KindTaskFailed, record.KindTaskAbandoned, record.KindTaskReopened,
	} {
		cmd.AddCommand(newTaskTransitionCmd(g, io, kind))
	}
	return cmd
}

func parseNamed(field string, vals []string) ([][2]string, error) {
	var out [][2]string
	for _, v := range vals {
		name, command, ok := strings.Cut(v, "=")
		if !ok || name == "" || strings.TrimSpace(command) == "" {
			return nil, &artifact.InputError{Field: field, Msg: fmt.Sprintf("%q: want NAME=COMMAND", v)}
		}
		out = append(out, [2]string{name, command})
	}
	return out, nil
}

func newTaskCreateCmd(g *globals, io *IO) *cobra.Command {
	var title, actor string
	var evidence, optional, gates []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create <task>",
		Short: "Create a task",
		Long: `Create a task: the first row of its ledger, task.created.

--evidence NAME=CMD declares a required evidence producer and --optional-evidence
NAME=CMD an optional one ('bernstein evidence run' executes them); --gate
NAME=CMD declares a gate ('bernstein gate run'). Task ids are 1 to 128 of
letters, digits and _ . : - starting with a letter or digit, without "..".

Exit status: 0 created; 1 bad input, the task exists already, or error
(nothing written).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := bernstein.TaskSpec{ID: args[0], Title: title, Actor: actor}
			ev, err := parseNamed("evidence", evidence)
			if err != nil {
				return err
			}
			for _, e := range ev {
				spec.Evidence = append(spec.Evidence, ledger.Producer{Name: e[0], Kind: "command", Command: e[1], Required: true})
			}
			opt, err := parseNamed("optional-evidence", optional)
			if err != nil {
				return err
			}
			for _, e := range opt {
				spec.Evidence = append(spec.Evidence, ledger.Producer{Name: e[0], Kind: "command", Command: e[1], Required: false})
			}
			gs, err := parseNamed("gate", gates)
			if err != nil {
				return err
			}
			for _, e := range gs {
				spec.Gates = append(spec.Gates, ledger.Gate{Name: e[0], Command: e[1]})
			}
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			info, err := s.CreateTask(spec)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(io, info)
			}
			fmt.Fprintf(io.Out, "created task %s\n", info.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&title, "title", "", "task title")
	cmd.Flags().StringVar(&actor, "actor", "", "who creates it (default: the writer id)")
	cmd.Flags().StringArrayVar(&evidence, "evidence", nil, "declare a required evidence producer NAME=COMMAND (repeatable)")
	cmd.Flags().StringArrayVar(&optional, "optional-evidence", nil, "declare an optional evidence producer NAME=COMMAND (repeatable)")
	cmd.Flags().StringArrayVar(&gates, "gate", nil, "declare a gate NAME=COMMAND (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the task as JSON")
	return cmd
}

func newTaskClaimCmd(g *globals, io *IO) *cobra.Command {
	var agent string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "claim <task> --agent A",
		Short: "Claim a task for an agent and print its claim token",
		Long: `Give an agent the task's claim. The claim token is printed once, alone on
stdout, so that TOKEN=$(bernstein task claim T --agent A) works; the ledger
keeps only its sha256. Posting artifacts to the task takes --agent and
--claim-token (or BERNSTEIN_AGENT and BERNSTEIN_CLAIM_TOKEN).

With --output-json it prints instead one document: {"task", "agent",
"claim_id", "token", "ledger_index"} (the token is still shown only this once).

Exit status: 0 claimed; 1 the task cannot be claimed now (unknown, already
claimed, ended: see 'bernstein task show'), bad input or error (nothing
written).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			agent = envDefault(agent, "BERNSTEIN_AGENT")
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			token, err := s.Claim(args[0], agent)
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintln(io.Out, token)
				return nil
			}
			doc, err := claimDocument(s, args[0], agent, token)
			if err != nil {
				// The claim is taken: print its token whatever happens.
				fmt.Fprintf(io.Err, "warning: claim_id unknown: %v\n", err)
				doc = &claimJSON{Task: args[0], Agent: agent, Token: token, LedgerIndex: -1}
			}
			return printJSON(io, doc)
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "the agent that takes the claim (default $BERNSTEIN_AGENT)")
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the claim as JSON (task, agent, claim_id, token, ledger_index)")
	return cmd
}

// claimJSON is the document 'task claim --output-json' prints.
type claimJSON struct {
	Task        string `json:"task"`
	Agent       string `json:"agent"`
	ClaimID     string `json:"claim_id"`
	Token       string `json:"token"`
	LedgerIndex int64  `json:"ledger_index"`
}

// claimDocument finds the ledger row of the claim token was issued for.
func claimDocument(s *bernstein.Store, task, agent, token string) (*claimJSON, error) {
	rows, err := s.LedgerRows(task)
	if err != nil {
		return nil, err
	}
	want := bernstein.TokenHash(token)
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].Kind != record.KindTaskClaimed {
			continue
		}
		var c ledger.Claimed
		if err := rows[i].DecodeData(&c); err != nil || c.TokenSHA256 != want {
			continue
		}
		return &claimJSON{Task: task, Agent: c.Agent, ClaimID: c.ClaimID, Token: token, LedgerIndex: rows[i].Index}, nil
	}
	return nil, fmt.Errorf("task %s was claimed, but its ledger holds no row for the token", task)
}

func newTaskTransitionCmd(g *globals, io *IO, kind string) *cobra.Command {
	verb := ledger.Verb(kind)
	var actor, reason string
	var asJSON bool
	short := map[string]string{
		"release":  "Release the task's claim",
		"start":    "Start work on a claimed task",
		"suspend":  "Suspend work on a task",
		"resume":   "Resume a suspended task",
		"complete": "Complete a task (seals its journal)",
		"fail":     "Fail a task (seals its journal)",
		"abandon":  "Abandon a task (seals its journal)",
		"reopen":   "Reopen a completed, failed or abandoned task",
	}[verb]
	long := map[string]string{
		"release":  "End the live claim of a task: its token stops working at once, and the task\ncan be claimed again.",
		"start":    "Record that work on a claimed task has started (counts an attempt).",
		"suspend":  "Suspend work on a started or resumed task; the claim stays live.",
		"resume":   "Resume work on a suspended task.",
		"complete": "Complete a task: the claim ends and a spine entry seals the task's journal.",
		"fail":     "Fail a task: the claim ends and a spine entry seals the task's journal.",
		"abandon":  "Abandon a task: any claim ends and a spine entry seals the task's journal.",
		"reopen":   "Reopen a completed, failed or abandoned task, so that it can be claimed and\nworked on again.",
	}[verb]
	cmd := &cobra.Command{
		Use:   verb + " <task>",
		Short: short,
		Long: long + `

Transitions the ledger does not allow from the task's phase are refused,
naming the allowed ones (see docs/cli.md, "Legal transitions").

Exit status: 0 recorded; 1 illegal transition, unknown task or error
(nothing written).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			info, err := s.Transition(args[0], kind, actor, reason)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(io, info)
			}
			fmt.Fprintf(io.Out, "task %s is %s\n", info.ID, info.Phase)
			return nil
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "who makes the transition (default: the writer id)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the ledger row")
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the task as JSON")
	return cmd
}

func newTaskListCmd(g *globals, io *IO) *cobra.Command {
	var asJSON, strict bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, integrity first",
		Long: `List every task of the repository, integrity first: its integrity (tampered,
unverifiable or verified: the worst of what follows), how many of its
artifact versions are verified, tampered and unverifiable (each re-checked),
the proof of its progress, its journal identity ("open" while the task is
open: nothing seals its journal yet), then its phase, the agent holding its
claim, its number of artifact keys and its title. Piped, the columns are
separated by tabs, without a header. A task whose integrity is not verified
is named on stderr, with why.

--output-json prints the same as GET /api/v1/tasks: each task as 'task show
--output-json' prints it, with "integrity": {"state", "reason", "versions":
{"verified", "tampered", "unverifiable"}, "progress_proof",
"journal_identity", "journal_identity_reason", "journal_open"}.

Exit status: 0 listed (also when there are no tasks, and when some are
tampered); 1 error; 2 with --strict, some task's integrity is not verified
(a version tampered or unverifiable, progress not proven, a journal identity
mismatched, or unverifiable once the task ended).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			tasks, err := s.TaskList()
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(io, bernstein.NewTaskListDoc(tasks)); err != nil {
					return err
				}
			} else {
				t := newTable(io, "TASK", "INTEGRITY", "VERIFIED", "TAMPERED", "UNVERIFIABLE", "PROGRESS", "JOURNAL", "PHASE", "CLAIM", "KEYS", "TITLE")
				for _, e := range tasks {
					in := e.Integrity
					journal := in.JournalIdentity
					if in.JournalOpen {
						journal = "open"
					}
					t.row(e.ID, in.State, fmt.Sprint(in.Versions.Verified), fmt.Sprint(in.Versions.Tampered), fmt.Sprint(in.Versions.Unverifiable),
						dash(in.ProgressProof), journal, e.Phase, dash(e.ClaimAgent), fmt.Sprint(len(e.Artifacts)), e.Title)
				}
				if err := t.render(); err != nil {
					return err
				}
			}
			var bad []string
			for _, e := range tasks {
				if !e.Integrity.Verified() {
					bad = append(bad, e.ID)
					if !asJSON {
						fmt.Fprintf(io.Err, "note: task %s is %s: %s\n", e.ID, e.Integrity.State, e.Integrity.Reason)
					}
				}
			}
			if strict && len(bad) > 0 {
				n := len(bad)
				if n > 10 {
					bad = append(bad[:10], fmt.Sprintf("and %d more", n-10))
				}
				return exitCode(2, fmt.Errorf("%d of %d %s not verified (--strict): %s", n, len(tasks), map[bool]string{true: "task is", false: "tasks are"}[len(tasks) == 1], strings.Join(bad, ", ")))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the tasks as JSON")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 2 when any task's integrity is not verified")
	return cmd
}

func newTaskShowCmd(g *globals, io *IO) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show <task>",
		Short: "Show a task's ledger state and artifacts",
		Long: `Show a task: its phase, live claim, declared evidence and gates, and its
artifact keys. Exit status: 0 shown, 1 unknown task or error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open()
			if err != nil {
				return err
			}
			defer s.Close()
			info, err := s.Task(args[0])
			if errors.Is(err, bernstein.ErrUnknownTask) {
				return exitCode(1, err)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(io, info)
			}
			w := io.Out
			fmt.Fprintf(w, "task:     %s\n", info.ID)
			if info.Title != "" {
				fmt.Fprintf(w, "title:    %s\n", info.Title)
			}
			fmt.Fprintf(w, "phase:    %s\n", info.Phase)
			fmt.Fprintf(w, "claim:    %s\n", dash(info.ClaimAgent))
			fmt.Fprintf(w, "ledger:   %d rows\n", info.LedgerRows)
			fmt.Fprintf(w, "journal:  %d rows\n", info.JournalRows)
			for _, p := range info.Evidence {
				req := "optional"
				if p.Required {
					req = "required"
				}
				fmt.Fprintf(w, "evidence: %s (%s): %s\n", p.Name, req, p.Command)
			}
			for _, gt := range info.Gates {
				fmt.Fprintf(w, "gate:     %s: %s\n", gt.Name, gt.Command)
			}
			for _, k := range sortedKeys(info.Artifacts) {
				fmt.Fprintf(w, "artifact: %s (latest v%d)\n", k, info.Artifacts[k])
			}
			if p := info.Progress; p != nil {
				fmt.Fprintf(w, "progress: %s\n", p.Vector.String())
				fmt.Fprintf(w, "vector:   %s (%s)\n", p.VectorHash, count(p.EarnedSteps, "earned step"))
				printProof(w, "proof:    ", p.Proof)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "output-json", false, "print the task as JSON")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
