package ledger

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/record"
)

var allKinds = []string{
	record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskReleased, record.KindTaskStarted,
	record.KindTaskSuspended, record.KindTaskResumed, record.KindTaskCompleted, record.KindTaskFailed,
	record.KindTaskAbandoned, record.KindTaskReopened,
}

// wantLegal is the transition table written out independently of the code:
// phase -> verbs allowed from it.
var wantLegal = map[string][]string{
	"":             {"create"},
	PhaseCreated:   {"claim", "abandon"},
	PhaseReleased:  {"claim", "abandon"},
	PhaseReopened:  {"claim", "abandon"},
	PhaseClaimed:   {"release", "start", "fail", "abandon"},
	PhaseStarted:   {"suspend", "complete", "fail", "release", "abandon"},
	PhaseResumed:   {"suspend", "complete", "fail", "release", "abandon"},
	PhaseSuspended: {"resume", "fail", "release", "abandon"},
	PhaseCompleted: {"reopen"},
	PhaseFailed:    {"reopen"},
	PhaseAbandoned: {"reopen"},
}

func TestTransitionTable(t *testing.T) {
	phases := append([]string{""}, Phases...)
	if len(wantLegal) != len(phases) {
		t.Fatalf("table covers %d phases, there are %d", len(wantLegal), len(phases))
	}
	legalCount, illegalCount := 0, 0
	for _, from := range phases {
		allowed := map[string]bool{}
		for _, v := range wantLegal[from] {
			allowed[v] = true
		}
		for _, kind := range allKinds {
			err := Check("T-1", from, kind)
			if allowed[Verb(kind)] {
				legalCount++
				if err != nil {
					t.Errorf("%s from %q refused: %v", kind, from, err)
				}
				continue
			}
			illegalCount++
			var ite *IllegalTransitionError
			if !errors.As(err, &ite) {
				t.Errorf("%s from %q: %v, want an IllegalTransitionError", kind, from, err)
				continue
			}
			if ite.Task != "T-1" || ite.From != from || ite.Kind != kind {
				t.Errorf("error fields %+v", ite)
			}
			msg := err.Error()
			if from == "" {
				if msg != "task T-1 does not exist" {
					t.Errorf("%s on a missing task: %q", kind, msg)
				}
				continue
			}
			if !strings.HasPrefix(msg, "cannot "+Verb(kind)+" task T-1: it is "+from+" (allowed: ") {
				t.Errorf("%s from %s: message %q does not name the verb and phase", kind, from, msg)
			}
			for _, v := range wantLegal[from] {
				if !strings.Contains(msg, v) {
					t.Errorf("%s from %s: message %q omits allowed verb %s", kind, from, msg, v)
				}
			}
		}
		var gotVerbs []string
		for _, k := range Allowed(from) {
			gotVerbs = append(gotVerbs, Verb(k))
		}
		want := append([]string(nil), wantLegal[from]...)
		sort.Strings(gotVerbs)
		sort.Strings(want)
		if !reflect.DeepEqual(gotVerbs, want) {
			t.Errorf("Allowed(%q) = %v, want %v", from, gotVerbs, want)
		}
	}
	if legalCount != 28 || illegalCount != 11*10-28 {
		t.Errorf("%d legal, %d illegal transitions checked", legalCount, illegalCount)
	}
	if err := Check("T", "bogus", record.KindTaskClaimed); err == nil {
		t.Error("transition from an unknown phase accepted")
	}
	if err := Check("T", PhaseCreated, "task.bogus"); err == nil || !strings.Contains(err.Error(), "task.bogus") {
		t.Errorf("unknown kind: %v", err)
	}
}

func TestPhaseHelpers(t *testing.T) {
	verbs := map[string]string{
		record.KindTaskCreated: "create", record.KindTaskClaimed: "claim", record.KindTaskReleased: "release",
		record.KindTaskStarted: "start", record.KindTaskSuspended: "suspend", record.KindTaskResumed: "resume",
		record.KindTaskCompleted: "complete", record.KindTaskFailed: "fail", record.KindTaskAbandoned: "abandon",
		record.KindTaskReopened: "reopen", "other": "other",
	}
	for k, v := range verbs {
		if got := Verb(k); got != v {
			t.Errorf("Verb(%s) = %s, want %s", k, got, v)
		}
	}
	for i, p := range Phases {
		if PhaseOrdinal(p) != i || KindOf(p) != "task."+p || PhaseOf(KindOf(p)) != p {
			t.Errorf("phase %s: ordinal %d kind %s", p, PhaseOrdinal(p), KindOf(p))
		}
		if KindOf(p) != allKinds[i] {
			t.Errorf("KindOf(%s) = %s, want %s", p, KindOf(p), allKinds[i])
		}
	}
	if PhaseOrdinal("bogus") != -1 || PhaseOrdinal("") != -1 {
		t.Error("PhaseOrdinal of an unknown phase is not -1")
	}
	terminal := map[string]bool{PhaseCompleted: true, PhaseFailed: true, PhaseAbandoned: true}
	working := map[string]bool{PhaseClaimed: true, PhaseStarted: true, PhaseSuspended: true, PhaseResumed: true}
	for _, p := range append([]string{""}, Phases...) {
		if Terminal(p) != terminal[p] {
			t.Errorf("Terminal(%q) = %v", p, Terminal(p))
		}
		if Working(p) != working[p] {
			t.Errorf("Working(%q) = %v", p, Working(p))
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, n := range []string{"a", "unit-tests", "go.vet", "x_1", strings.Repeat("n", 64)} {
		if err := ValidateName("gate", n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range []string{"", "-a", ".a", "_a", "a b", "a/b", "a:b", strings.Repeat("n", 65), "a\n"} {
		err := ValidateName("evidence producer", n)
		if err == nil || !strings.HasPrefix(err.Error(), "evidence producer name") {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
}

// chain builds ledger rows linked by index and prev hash.
type chain struct {
	t    *testing.T
	task string
	rows []record.Row
}

func (c *chain) add(kind, actor string, data any) record.Row {
	c.t.Helper()
	prev := record.Hash("")
	if n := len(c.rows); n > 0 {
		prev = c.rows[n-1].Hash()
	}
	r, err := record.NewRow(kind, c.task, int64(len(c.rows)), prev, actor, data)
	if err != nil {
		c.t.Fatal(err)
	}
	c.rows = append(c.rows, r)
	return r
}

var testCreated = Created{
	Title:    "Ship the parser",
	Evidence: []Producer{{Name: "unit", Kind: "test", Command: "go test ./...", Required: true}, {Name: "cover", Kind: "metric", Command: "go test -cover", Required: false}},
	Gates:    []Gate{{Name: "vet", Command: "go vet ./..."}},
}

func TestApplyFold(t *testing.T) {
	c := &chain{t: t, task: "proj:42"}
	var s State
	claimed := func(agent, id string) Claimed {
		return Claimed{Agent: agent, ClaimID: id, TokenSHA256: record.Sum([]byte("token-" + id))}
	}
	steps := []struct {
		kind    string
		actor   string
		data    any
		claim   string // claim id expected afterwards, "" for none
		started int64
	}{
		{record.KindTaskCreated, "alice", testCreated, "", 0},
		{record.KindTaskClaimed, "bot-1", claimed("bot-1", "c1"), "c1", 0},
		{record.KindTaskStarted, "bot-1", Transition{}, "c1", 1},
		{record.KindTaskSuspended, "bot-1", Transition{Reason: "waiting for review"}, "c1", 1},
		{record.KindTaskResumed, "bot-1", Transition{}, "c1", 1},
		{record.KindTaskReleased, "bot-1", Transition{Reason: "handing over"}, "", 1},
		{record.KindTaskClaimed, "bot-2", claimed("bot-2", "c2"), "c2", 1},
		{record.KindTaskStarted, "bot-2", Transition{}, "c2", 2},
		{record.KindTaskCompleted, "bot-2", Transition{Reason: "done"}, "", 2},
		{record.KindTaskReopened, "alice", Transition{Reason: "regression"}, "", 2},
		{record.KindTaskClaimed, "bot-3", claimed("bot-3", "c3"), "c3", 2},
		{record.KindTaskFailed, "bot-3", Transition{Reason: "cannot reproduce"}, "", 2},
		{record.KindTaskReopened, "alice", Transition{}, "", 2},
		{record.KindTaskClaimed, "bot-4", claimed("bot-4", "c4"), "c4", 2},
		{record.KindTaskAbandoned, "alice", Transition{Reason: "obsolete"}, "", 2},
	}
	for i, st := range steps {
		r := c.add(st.kind, st.actor, st.data)
		if err := s.Apply(r); err != nil {
			t.Fatalf("step %d (%s): %v", i, st.kind, err)
		}
		if s.Phase != PhaseOf(st.kind) || s.Rows != int64(i+1) || s.Head != r.Hash() || s.Actor != st.actor || s.Started != st.started {
			t.Fatalf("step %d (%s): state %+v", i, st.kind, s)
		}
		if st.claim == "" {
			if s.Claim != nil {
				t.Fatalf("step %d (%s): claim %+v still live", i, st.kind, s.Claim)
			}
		} else {
			want := claimed(st.actor, st.claim)
			if s.Claim == nil || s.Claim.ClaimID != st.claim || s.Claim.Agent != want.Agent || s.Claim.TokenSHA256 != want.TokenSHA256 {
				t.Fatalf("step %d (%s): claim %+v, want %s", i, st.kind, s.Claim, st.claim)
			}
		}
		if s.TaskID != "proj:42" || s.Title != testCreated.Title {
			t.Fatalf("step %d: task %q title %q", i, s.TaskID, s.Title)
		}
	}
	if s.Claim != nil || !Terminal(s.Phase) {
		t.Errorf("final state %+v", s)
	}
	if !reflect.DeepEqual(s.Evidence, testCreated.Evidence) || !reflect.DeepEqual(s.Gates, testCreated.Gates) {
		t.Errorf("declared evidence/gates %+v %+v", s.Evidence, s.Gates)
	}
	if p, ok := s.Producer("cover"); !ok || p.Command != "go test -cover" || p.Required {
		t.Errorf("Producer(cover) = %+v, %v", p, ok)
	}
	if _, ok := s.Producer("missing"); ok {
		t.Error("Producer(missing) found")
	}
	if g, ok := s.Gate("vet"); !ok || g.Command != "go vet ./..." {
		t.Errorf("Gate(vet) = %+v, %v", g, ok)
	}
	if _, ok := s.Gate("unit"); ok {
		t.Error("a producer was found as a gate")
	}
}

func TestApplyClaimIndex(t *testing.T) {
	c := &chain{t: t, task: "T"}
	var s State
	for _, k := range []string{record.KindTaskCreated, record.KindTaskClaimed, record.KindTaskStarted} {
		var data any = Transition{}
		switch k {
		case record.KindTaskCreated:
			data = Created{Title: "t"}
		case record.KindTaskClaimed:
			data = Claimed{Agent: "a", ClaimID: "id", TokenSHA256: record.Sum([]byte("x"))}
		}
		if err := s.Apply(c.add(k, "a", data)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Claim == nil || s.Claim.Index != 1 {
		t.Fatalf("claim %+v, want index 1", s.Claim)
	}
}

// refusedUnchanged applies r and checks it is refused and s is unchanged.
func refusedUnchanged(t *testing.T, name string, s *State, r record.Row, wantInErr string) {
	t.Helper()
	before := *s
	var claimBefore Claim
	if s.Claim != nil {
		claimBefore = *s.Claim
	}
	err := s.Apply(r)
	if err == nil {
		t.Errorf("%s: accepted", name)
		return
	}
	if !strings.Contains(err.Error(), wantInErr) {
		t.Errorf("%s: error %q, want it to mention %q", name, err, wantInErr)
	}
	if !reflect.DeepEqual(*s, before) || (s.Claim != nil && *s.Claim != claimBefore) {
		t.Errorf("%s: refused row changed the state: %+v -> %+v", name, before, *s)
	}
}

func TestApplyRefusals(t *testing.T) {
	c := &chain{t: t, task: "T"}
	var s State
	for _, r := range []record.Row{
		c.add(record.KindTaskCreated, "a", Created{Title: "t"}),
		c.add(record.KindTaskClaimed, "a", Claimed{Agent: "a", ClaimID: "c", TokenSHA256: record.Sum(nil)}),
	} {
		if err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	head := s.Head
	mk := func(kind, task string, index int64, prev record.Hash, data any) record.Row {
		r, err := record.NewRow(kind, task, index, prev, "a", data)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	refusedUnchanged(t, "wrong index", &s, mk(record.KindTaskStarted, "T", 3, head, Transition{}), "out of chain")
	refusedUnchanged(t, "repeated index", &s, mk(record.KindTaskStarted, "T", 1, head, Transition{}), "out of chain")
	refusedUnchanged(t, "wrong prev", &s, mk(record.KindTaskStarted, "T", 2, record.Sum([]byte("x")), Transition{}), "out of chain")
	refusedUnchanged(t, "empty prev", &s, mk(record.KindTaskStarted, "T", 2, "", Transition{}), "out of chain")
	refusedUnchanged(t, "illegal transition", &s, mk(record.KindTaskCompleted, "T", 2, head, Transition{}), "cannot complete task T: it is claimed")
	refusedUnchanged(t, "second create", &s, mk(record.KindTaskCreated, "T", 2, head, Created{}), "cannot create task T")
	refusedUnchanged(t, "another task", &s, mk(record.KindTaskStarted, "U", 2, head, Transition{}), `belongs to task "U"`)
	refusedUnchanged(t, "another task's claim", &s, mk(record.KindTaskReleased, "U", 2, head, Transition{}), `belongs to task "U"`)
	refusedUnchanged(t, "unknown data field", &s, mk(record.KindTaskReleased, "T", 2, head, map[string]string{"why": "x"}), "unknown field")

	// From released, a re-claim by another task's row must not install a claim.
	if err := s.Apply(mk(record.KindTaskReleased, "T", 2, head, Transition{})); err != nil {
		t.Fatal(err)
	}
	refusedUnchanged(t, "claim for another task", &s,
		mk(record.KindTaskClaimed, "U", 3, s.Head, Claimed{Agent: "x", ClaimID: "y", TokenSHA256: record.Sum(nil)}), `belongs to task "U"`)
	refusedUnchanged(t, "claim with a token field", &s,
		mk(record.KindTaskClaimed, "T", 3, s.Head, map[string]string{"agent": "x", "claim_id": "y", "token": "secret"}), "unknown field")

	// A fresh state accepts only task.created, and bad created data is refused.
	var fresh State
	refusedUnchanged(t, "claim before create", &fresh, mk(record.KindTaskClaimed, "T", 0, "", Claimed{}), "task T does not exist")
	refusedUnchanged(t, "created with unknown field", &fresh, mk(record.KindTaskCreated, "T", 0, "", map[string]any{"title": "t", "owner": "x"}), "unknown field")
	refusedUnchanged(t, "created not first", &fresh, mk(record.KindTaskCreated, "T", 1, "", Created{}), "out of chain")
}
