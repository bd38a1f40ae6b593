package bernstein

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/fold"
	"github.com/bernstein/bernstein/internal/taskops"
	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// TaskSpec describes a task to create.
type TaskSpec struct {
	ID       string
	Title    string
	Actor    string
	Evidence []ledger.Producer
	Gates    []ledger.Gate
}

// CreateTask starts a task's ledger with task.created.
func (s *Store) CreateTask(spec TaskSpec) (*TaskInfo, error) {
	if err := validateTask(spec.ID); err != nil {
		return nil, err
	}
	if err := checkText("title", spec.Title, 1024); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, p := range spec.Evidence {
		if err := ledger.ValidateName("evidence producer", p.Name); err != nil {
			return nil, &artifact.InputError{Field: fmt.Sprintf("evidence[%d]", i), Msg: err.Error()}
		}
		if seen["e:"+p.Name] {
			return nil, &artifact.InputError{Field: fmt.Sprintf("evidence[%d]", i), Msg: fmt.Sprintf("producer %q is declared twice", p.Name)}
		}
		seen["e:"+p.Name] = true
		if strings.TrimSpace(p.Command) == "" {
			return nil, &artifact.InputError{Field: fmt.Sprintf("evidence[%d]", i), Msg: fmt.Sprintf("producer %q has no command", p.Name)}
		}
		if p.Kind == "" {
			spec.Evidence[i].Kind = "command"
		}
	}
	for i, g := range spec.Gates {
		if err := ledger.ValidateName("gate", g.Name); err != nil {
			return nil, &artifact.InputError{Field: fmt.Sprintf("gates[%d]", i), Msg: err.Error()}
		}
		if seen["g:"+g.Name] {
			return nil, &artifact.InputError{Field: fmt.Sprintf("gates[%d]", i), Msg: fmt.Sprintf("gate %q is declared twice", g.Name)}
		}
		seen["g:"+g.Name] = true
		if strings.TrimSpace(g.Command) == "" {
			return nil, &artifact.InputError{Field: fmt.Sprintf("gates[%d]", i), Msg: fmt.Sprintf("gate %q has no command", g.Name)}
		}
	}
	actor, err := s.actor(spec.Actor)
	if err != nil {
		return nil, err
	}
	ev, gates := spec.Evidence, spec.Gates
	if ev == nil {
		ev = []ledger.Producer{}
	}
	if gates == nil {
		gates = []ledger.Gate{}
	}
	_, err = s.w.Submit(func(t *txn.Tx) (any, error) {
		return nil, taskops.Create(t, spec.ID, actor, ledger.Created{Title: spec.Title, Evidence: ev, Gates: gates})
	})
	if err != nil {
		return nil, err
	}
	return s.Task(spec.ID)
}

func checkText(field, s string, max int) error {
	if len(s) > max {
		return &artifact.InputError{Field: field, Msg: fmt.Sprintf("is %d bytes (at most %d)", len(s), max)}
	}
	for _, r := range s {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return &artifact.InputError{Field: field, Msg: fmt.Sprintf("contains control character %U", r)}
		}
	}
	return nil
}

// actor returns the actor recorded for an orchestrator-side command.
func (s *Store) actor(a string) (string, error) {
	if a == "" {
		id, err := s.Identity()
		if err != nil {
			return "", err
		}
		return id.Writer, nil
	}
	if err := ValidateAgent(a); err != nil {
		return "", &artifact.InputError{Field: "actor", Msg: strings.TrimPrefix(err.Error(), "agent: ")}
	}
	return a, nil
}

// Claim gives agent the task's claim and returns the claim token, which is
// shown once: the ledger keeps only its hash.
func (s *Store) Claim(task, agent string) (token string, err error) {
	if err := validateTask(task); err != nil {
		return "", err
	}
	if err := ValidateAgent(agent); err != nil {
		return "", err
	}
	token, claimed, err := taskops.NewClaim(agent)
	if err != nil {
		return "", err
	}
	_, err = s.w.Submit(func(t *txn.Tx) (any, error) { return nil, taskops.Claim(t, task, agent, claimed) })
	if err != nil {
		return "", err
	}
	return token, nil
}

// Transition applies one of the ledger transitions that carry only a reason:
// release, start, suspend, resume, complete, fail, abandon, reopen. A
// terminal transition also seals the task's journal in the spine.
func (s *Store) Transition(task, kind, actor, reason string) (*TaskInfo, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	switch kind {
	case record.KindTaskReleased, record.KindTaskStarted, record.KindTaskSuspended, record.KindTaskResumed,
		record.KindTaskCompleted, record.KindTaskFailed, record.KindTaskAbandoned, record.KindTaskReopened:
	default:
		return nil, fmt.Errorf("transition %q is not a plain transition", kind)
	}
	if err := checkText("reason", reason, 4096); err != nil {
		return nil, err
	}
	who, err := s.actor(actor)
	if err != nil {
		return nil, err
	}
	_, err = s.w.Submit(func(t *txn.Tx) (any, error) { return nil, taskops.Transition(t, task, kind, who, reason) })
	if err != nil {
		return nil, err
	}
	return s.Task(task)
}

// TaskInfo is a task as its ledger tells it: its counted rows, and the
// proof of the rest.
type TaskInfo struct {
	ID          string            `json:"id"`
	Title       string            `json:"title"`
	Phase       string            `json:"phase"`
	Terminal    bool              `json:"terminal"`
	ClaimAgent  string            `json:"claim_agent"`
	ClaimID     string            `json:"claim_id"`
	LedgerRows  int64             `json:"ledger_rows"`
	LedgerHead  record.Hash       `json:"ledger_head"`
	JournalRows int64             `json:"journal_rows"`
	JournalHead record.Hash       `json:"journal_head"`
	Attempts    int64             `json:"attempts"`
	Evidence    []ledger.Producer `json:"evidence"`
	Gates       []ledger.Gate     `json:"gates"`
	Artifacts   map[string]int64  `json:"artifacts"` // key -> latest version
	Progress    *progress.Wire    `json:"progress"`
}

// Task returns what the ledger and journal of task say now, with its
// progress vector. Only proven rows count; Progress.Proof lists the others.
func (s *Store) Task(task string) (*TaskInfo, error) {
	f, err := s.current(task)
	if err != nil {
		return nil, err
	}
	return taskInfoOf(task, f), nil
}

// TaskIDs lists the tasks that have a ledger, sorted.
func (s *Store) TaskIDs() ([]string, error) { return refs.TaskIDs(s.core.Refs) }

// Tasks returns every task.
func (s *Store) Tasks() ([]*TaskInfo, error) {
	ids, err := s.TaskIDs()
	if err != nil {
		return nil, err
	}
	out := make([]*TaskInfo, 0, len(ids))
	for _, id := range ids {
		t, err := s.Task(id)
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", id, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// LedgerRows returns the rows of task's ledger, oldest first.
func (s *Store) LedgerRows(task string) ([]record.Row, error) {
	return s.rows(refs.Ledger(task))
}

// JournalRows returns the rows of task's journal, oldest first.
func (s *Store) JournalRows(task string) ([]record.Row, error) {
	return s.rows(refs.Journal(task))
}

func (s *Store) rows(ref string) ([]record.Row, error) {
	head, err := s.core.Refs.ReadOptional(ref)
	if err != nil || head.IsZero() {
		return nil, err
	}
	commits, _, err := chain.WalkBack(s.core.Objects, head, gitstore.ZeroOid, nil)
	if err != nil {
		return nil, err
	}
	out := make([]record.Row, 0, len(commits))
	for _, cc := range commits {
		r, err := record.ParseRow(cc.Record)
		if err != nil {
			return nil, fmt.Errorf("%s commit %s: %w", ref, cc.ID, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// current reads task's ledger and journal folds from one consistent view of
// its refs and projects its progress vector from the rows that count.
func (s *Store) current(task string) (*fold.Task, error) {
	if err := validateTask(task); err != nil {
		return nil, err
	}
	view, err := s.core.Refs.Snapshot(taskScope(task)...)
	if err != nil {
		return nil, err
	}
	return s.folds.Task(view, task)
}

// taskScope is the refs a task's folds read.
func taskScope(task string) []string { return fold.Scope(task) }

// Progress projects task's progress vector from its journal and ledger.
func (s *Store) Progress(task string) (*progress.Wire, error) {
	f, err := s.current(task)
	if err != nil {
		return nil, err
	}
	return &f.Wire, nil
}
