package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// The task commands: create, claim, the transitions of the ledger, list,
// show (progress is in work.go, attest in attest.go).

func newTaskCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Create, claim and move tasks through their ledger",
		Long: `Each task has a ledger under refs/bernstein/ledger/<task>: a chain of
transitions (created, claimed, released, started, suspended, resumed,
completed, failed, abandoned, reopened). Illegal transitions are refused.
Every transition is mirrored into the writer's audit chain; a terminal one
(complete, fail, abandon) also seals the task's journal in the spine.`,
	}
	cmd.AddCommand(newTaskCreateCmd(f, nil), newTaskClaimCmd(f, nil), newTaskListCmd(f, nil), newTaskShowCmd(f, nil), newTaskProgressCmd(f, nil), newTaskAttestCmd(f, nil), newTaskAdoptCmd(f, nil))
	for _, kind := range []string{
		record.KindTaskReleased, record.KindTaskStarted, record.KindTaskSuspended, record.KindTaskResumed,
		record.KindTaskCompleted, record.KindTaskFailed, record.KindTaskAbandoned, record.KindTaskReopened,
	} {
		cmd.AddCommand(newTaskTransitionCmd(f, kind, nil))
	}
	return cmd
}

type taskCreateOptions struct {
	IO    *IO
	Store openFunc

	Spec     bernstein.TaskSpec // ID, Title and Actor; the rest from the lists below
	Evidence []string           // required producers, NAME=COMMAND
	Optional []string           // optional producers, NAME=COMMAND
	Gates    []string           // NAME=COMMAND
	JSON     bool
}

const taskCreateLong = `Create a task: the first row of its ledger, task.created.

--evidence NAME=CMD declares a required evidence producer and
--optional-evidence NAME=CMD an optional one ('bernstein evidence run' executes
them); --gate NAME=CMD declares a gate ('bernstein gate run'). Task ids are
1 to 128 of letters, digits and _ . : - starting with a letter or digit,
without "..".

Exit status: 0 created; 1 bad input, the task exists already, or error
(nothing written).`

func newTaskCreateCmd(f *factory, runF func(*taskCreateOptions) error) *cobra.Command {
	o := &taskCreateOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "create <task>",
		Short: "Create a task",
		Long:  taskCreateLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Spec.ID = args[0]
			if runF != nil {
				return runF(o)
			}
			return taskCreateRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Spec.Title, "title", "", "task title")
	cmd.Flags().StringVar(&o.Spec.Actor, "actor", "", "who creates it (default: the writer id)")
	cmd.Flags().StringArrayVar(&o.Evidence, "evidence", nil, "declare a required evidence producer NAME=COMMAND (repeatable)")
	cmd.Flags().StringArrayVar(&o.Optional, "optional-evidence", nil, "declare an optional evidence producer NAME=COMMAND (repeatable)")
	cmd.Flags().StringArrayVar(&o.Gates, "gate", nil, "declare a gate NAME=COMMAND (repeatable)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the task as JSON")
	return cmd
}

func taskCreateRun(o *taskCreateOptions) error {
	spec, err := o.spec()
	if err != nil {
		return err
	}
	return withStore(o.Store, func(s *bernstein.Store) error {
		info, err := s.CreateTask(spec)
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, info)
		}
		fmt.Fprintf(o.IO.Out, "created task %s\n", info.ID)
		return nil
	})
}

// spec is the task to create, its producers and gates parsed.
func (o *taskCreateOptions) spec() (bernstein.TaskSpec, error) {
	spec := o.Spec
	spec.Evidence, spec.Gates = nil, nil
	for _, list := range []struct {
		field    string
		vals     []string
		required bool
	}{{"evidence", o.Evidence, true}, {"optional-evidence", o.Optional, false}} {
		named, err := parseNamed(list.field, list.vals)
		if err != nil {
			return spec, err
		}
		for _, e := range named {
			spec.Evidence = append(spec.Evidence, ledger.Producer{Name: e[0], Kind: "command", Command: e[1], Required: list.required})
		}
	}
	gates, err := parseNamed("gate", o.Gates)
	if err != nil {
		return spec, err
	}
	for _, e := range gates {
		spec.Gates = append(spec.Gates, ledger.Gate{Name: e[0], Command: e[1]})
	}
	return spec, nil
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

type taskClaimOptions struct {
	IO    *IO
	Store openFunc

	Task  string
	Agent string // default $BERNSTEIN_AGENT
	JSON  bool
}

const taskClaimLong = `Give an agent the task's claim. The claim token is printed once, alone on
stdout, so that TOKEN=$(bernstein task claim T --agent A) works; the ledger
keeps only its sha256. Posting artifacts to the task takes --agent and
--claim-token (or BERNSTEIN_AGENT and BERNSTEIN_CLAIM_TOKEN).

With --output-json it prints instead one document: {"task", "agent",
"claim_id", "token", "ledger_index"} (the token is still shown only this once).

Exit status: 0 claimed; 1 the task cannot be claimed now (unknown, already
claimed, ended: see 'bernstein task show'), bad input or error (nothing
written).`

func newTaskClaimCmd(f *factory, runF func(*taskClaimOptions) error) *cobra.Command {
	o := &taskClaimOptions{IO: f.IO, Store: f.Store}
	cmd := &cobra.Command{
		Use:   "claim <task> --agent A",
		Short: "Claim a task for an agent and print its claim token",
		Long:  taskClaimLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			o.Agent = envDefault(o.Agent, "BERNSTEIN_AGENT")
			if runF != nil {
				return runF(o)
			}
			return taskClaimRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Agent, "agent", "", "the agent that takes the claim (default $BERNSTEIN_AGENT)")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the claim as JSON (task, agent, claim_id, token, ledger_index)")
	return cmd
}

func taskClaimRun(o *taskClaimOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		token, err := s.Claim(o.Task, o.Agent)
		if err != nil {
			return err
		}
		if !o.JSON {
			fmt.Fprintln(o.IO.Out, token)
			return nil
		}
		doc, err := claimDocument(s, o.Task, o.Agent, token)
		if err != nil {
			// The claim is taken: print its token whatever happens.
			fmt.Fprintf(o.IO.Err, "warning: claim_id unknown: %v\n", err)
			doc = &claimJSON{Task: o.Task, Agent: o.Agent, Token: token, LedgerIndex: -1}
		}
		return printJSON(o.IO, doc)
	})
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

type taskTransitionOptions struct {
	IO    *IO
	Store openFunc

	Kind   string // the ledger row's kind (record.KindTask...)
	Task   string
	Actor  string
	Reason string
	JSON   bool
}

// transitionHelp is each transition's short and long help.
var transitionHelp = map[string][2]string{
	"release":  {"Release the task's claim", "End the live claim of a task: its token stops working at once, and the task\ncan be claimed again."},
	"start":    {"Start work on a claimed task", "Record that work on a claimed task has started (counts an attempt)."},
	"suspend":  {"Suspend work on a task", "Suspend work on a started or resumed task; the claim stays live."},
	"resume":   {"Resume a suspended task", "Resume work on a suspended task."},
	"complete": {"Complete a task (seals its journal)", "Complete a task: the claim ends and a spine entry seals the task's journal."},
	"fail":     {"Fail a task (seals its journal)", "Fail a task: the claim ends and a spine entry seals the task's journal."},
	"abandon":  {"Abandon a task (seals its journal)", "Abandon a task: any claim ends and a spine entry seals the task's journal."},
	"reopen":   {"Reopen a completed, failed or abandoned task", "Reopen a completed, failed or abandoned task, so that it can be claimed and\nworked on again."},
}

const transitionLong = `

Transitions the ledger does not allow from the task's phase are refused,
naming the allowed ones (see docs/cli.md, "Legal transitions").

Exit status: 0 recorded; 1 illegal transition, unknown task or error
(nothing written).`

func newTaskTransitionCmd(f *factory, kind string, runF func(*taskTransitionOptions) error) *cobra.Command {
	o := &taskTransitionOptions{IO: f.IO, Store: f.Store, Kind: kind}
	verb := ledger.Verb(kind)
	cmd := &cobra.Command{
		Use:   verb + " <task>",
		Short: transitionHelp[verb][0],
		Long:  transitionHelp[verb][1] + transitionLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Task = args[0]
			if runF != nil {
				return runF(o)
			}
			return taskTransitionRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Actor, "actor", "", "who makes the transition (default: the writer id)")
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why, recorded in the ledger row")
	cmd.Flags().BoolVar(&o.JSON, "output-json", false, "print the task as JSON")
	return cmd
}

func taskTransitionRun(o *taskTransitionOptions) error {
	return withStore(o.Store, func(s *bernstein.Store) error {
		info, err := s.Transition(o.Task, o.Kind, o.Actor, o.Reason)
		if err != nil {
			return err
		}
		if o.JSON {
			return printJSON(o.IO, info)
		}
		fmt.Fprintf(o.IO.Out, "task %s is %s\n", info.ID, info.Phase)
		return nil
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
