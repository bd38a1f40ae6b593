package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/verify"
)

// The timeline (docs/http.md, "The timeline"): the run as a picture, drawn
// on the server as inline SVG (no script needed; the page swaps in a new
// one when an event arrives). Journal positions run along the axis; the
// earned steps rise as a line; each checkpoint, diff, gate and evidence row
// is a mark saying what it earned, or that it earned nothing and why, as
// progress.Steps (the fold, row by row) says; each artifact version sits
// at its position on a lane below, linked to its card. Rows that do not
// count, and rows whose commits are not proven, are marked.

// timelineMaxRows bounds the rows drawn: a longer journal shows its latest
// rows (the journal API pages through all of them).
const timelineMaxRows = 1000

// Geometry, in px: the plot's top and bottom (the earned axis), the
// versions' lane, the height. x runs in percent, from timelineLeft.
const (
	tlTop, tlBottom, tlLane, tlHeight = 16, 118, 146, 178
	tlLeft, tlSpan                    = 4.0, 95.0
	tlPxPerRow, tlFitRows             = 18, 20
)

type timeline struct {
	Task         string
	Rows, Shown  int64 // journal rows; rows drawn
	From         int64 // the first row drawn
	Width        string
	Height       int
	LineBox      string // the viewBox of the line's own svg
	Line         string // its points
	Max, Earned  int64  // the axis' top; earned steps at the end
	YMax, YZero  int
	Marks        []tlMark
	Versions     []tlVersion
	Ticks        []tlTick
	Left, Span   string
	FaultAt      int64 // the first journal row that does not count, -1 for none
	FaultReason  string
	Err          string // why it cannot be drawn ("" when it is)
	Inconsistent bool   // the steps do not end where the strip does
}

// tlMark is one journal row of work, or one that does not count.
type tlMark struct {
	Index  int64
	Kind   string
	Label  string // what the row is
	What   string // what it earned, or why nothing
	Earned int64
	After  int64
	Moved  string
	X      string // percent
	Y      int
	Class  string // earned, nothing, taken, uncounted
	Proof  string // the proof of its commit
	Counts bool
	Actor  string
	Work   bool
	// Artifact rows appear in the list only (their mark is on the lane).
	Version *tlVersion
}

// tlVersion is one artifact version on the lane.
type tlVersion struct {
	Index   int64
	Key     string
	Version int64
	State   string
	X       string
	Anchor  string
}

type tlTick struct {
	X     string
	Label string
}

func pct(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) + "%" }

// buildTimeline draws task's journal rows (as the journal API gives them)
// with its progress (info) and its versions' states (rep), all read from
// one view.
func buildTimeline(info *bernstein.TaskInfo, rows []bernstein.FeedRow, rep *verify.TaskReport) timeline {
	tl := timeline{Task: info.ID, Rows: int64(len(rows)), Height: tlHeight, FaultAt: -1, Left: pct(tlLeft), Span: pct(tlSpan)}
	if info.Progress != nil {
		for _, f := range info.Progress.Proof.RowsAtFault {
			if f.Chain == "journal" && (tl.FaultAt < 0 || f.Index < tl.FaultAt) && f.Index < tl.Rows {
				tl.FaultAt, tl.FaultReason = f.Index, f.Reason
			}
		}
	}
	counted := len(rows)
	if tl.FaultAt >= 0 {
		counted = int(tl.FaultAt)
	}
	plain := make([]record.Row, counted)
	for i := range plain {
		plain[i] = rows[i].Row
	}
	st := &ledger.State{Phase: info.Phase, Gates: info.Gates, Evidence: info.Evidence, Started: info.Attempts}
	steps, err := progress.Steps(info.ID, plain, st)
	if err != nil {
		tl.Err = err.Error()
		return tl
	}
	if n := len(steps); info.Progress != nil && (n > 0 && steps[n-1].After != info.Progress.EarnedSteps || n == 0 && info.Progress.EarnedSteps != 0) {
		tl.Inconsistent = true
	}
	states := map[int64]*verify.Version{}
	for i := range rep.Versions {
		states[rep.Versions[i].JournalIndex] = &rep.Versions[i]
	}
	tl.From = max(0, tl.Rows-timelineMaxRows)
	tl.Shown = tl.Rows - tl.From
	if tl.Shown > tlFitRows {
		tl.Width = strconv.FormatInt(tl.Shown*tlPxPerRow, 10)
	} else {
		tl.Width = "100%"
	}
	for _, s := range steps {
		tl.Max = max(tl.Max, s.After)
	}
	if len(steps) > 0 {
		tl.Earned = steps[len(steps)-1].After
	}
	tl.Max = max(tl.Max, 1)
	y := func(e int64) int { return tlBottom - int(float64(e)/float64(tl.Max)*float64(tlBottom-tlTop)+0.5) }
	tl.YMax, tl.YZero = y(tl.Max), y(0)
	x := func(i int64) string { return pct(tlLeft + (float64(i-tl.From)+0.5)/float64(max(tl.Shown, 1))*tlSpan) }
	// The line: a step at each row's centre, in the line's own box.
	prev := int64(0)
	if tl.From > 0 && int(tl.From) <= len(steps) {
		prev = steps[tl.From-1].After
	}
	var pts []string
	pts = append(pts, fmt.Sprintf("0,%d", y(prev)))
	for i := tl.From; i < tl.Rows && int(i) < len(steps); i++ {
		c := float64(i-tl.From) + 0.5
		a := steps[i].After
		if a != prev {
			pts = append(pts, fmt.Sprintf("%.1f,%d", c, y(prev)), fmt.Sprintf("%.1f,%d", c, y(a)))
			prev = a
		}
	}
	end := tl.Shown
	if tl.FaultAt >= 0 {
		end = max(0, tl.FaultAt-tl.From) // the line stops where rows stop counting
	}
	pts = append(pts, fmt.Sprintf("%d,%d", end, y(prev)))
	tl.Line = strings.Join(pts, " ")
	tl.LineBox = fmt.Sprintf("0 0 %d %d", max(tl.Shown, 1), tlHeight)
	for i := tl.From; i < tl.Rows; i++ {
		r := rows[i]
		m := tlMark{Index: i, Kind: r.Row.Kind, Label: rowLabel(r.Row), Proof: r.Proof, Actor: r.Row.Actor, X: x(i), Counts: int(i) < len(steps)}
		if m.Counts {
			s := steps[i]
			m.Earned, m.After, m.Moved, m.Work = s.Earned, s.After, strings.Join(s.Moved, ", "), s.Work()
			m.Y = y(s.After)
			switch {
			case s.Earned > 0:
				m.Class = "earned"
				m.What = fmt.Sprintf("earned %s (%s)", plural(s.Earned, "step"), m.Moved)
			case s.Earned < 0:
				m.Class = "taken"
				m.What = fmt.Sprintf("took back %s: %s", plural(-s.Earned, "step"), s.Why)
			case s.Work():
				m.Class = "nothing"
				m.What = "earned nothing: " + s.Why
			default:
				m.What = "moves no progress"
			}
		} else {
			m.Class, m.Y = "uncounted", tlBottom
			m.Work = progress.Step{Kind: r.Row.Kind}.Work()
			m.What = "does not count: " + tl.FaultReason
		}
		if r.Row.Kind == record.KindArtifactPosted {
			if v := states[i]; v != nil {
				tv := tlVersion{Index: i, Key: v.Key, Version: v.Version, State: v.State, X: m.X, Anchor: fmt.Sprintf("#v-%s-%d", v.Key, v.Version)}
				tl.Versions = append(tl.Versions, tv)
				m.Version = &tv
				if v.State != verify.Verified {
					m.What += "; the version is " + v.State + ": " + v.Reason
				}
			}
		}
		tl.Marks = append(tl.Marks, m)
	}
	step := niceStep(tl.Shown)
	for i := tl.From; i < tl.Rows; i++ {
		if i%step == 0 || i == tl.Rows-1 && (i%step) > step/2 {
			tl.Ticks = append(tl.Ticks, tlTick{X: x(i), Label: "#" + strconv.FormatInt(i, 10)})
		}
	}
	return tl
}

// niceStep is the distance between axis labels: 1, 2 or 5 times a power
// of ten, so that about eight labels fit.
func niceStep(n int64) int64 {
	for s := int64(1); ; s *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if n/(s*m) <= 8 {
				return s * m
			}
		}
	}
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// rowLabel says what a journal row is, in a few words.
func rowLabel(r record.Row) string {
	short := func(s string) string {
		if len(s) > 7 {
			return s[:7]
		}
		return s
	}
	switch r.Kind {
	case record.KindCheckpoint:
		var c record.Checkpoint
		r.DecodeData(&c)
		return "checkpoint " + short(c.Commit)
	case record.KindDiffCaptured:
		var d record.DiffCaptured
		r.DecodeData(&d)
		return fmt.Sprintf("diff %s..%s (%s, +%d -%d)", short(d.Base), short(d.Head), plural(d.Files, "file"), d.Added, d.Removed)
	case record.KindGateAttempt:
		var g record.GateAttempt
		r.DecodeData(&g)
		return fmt.Sprintf("gate %s %s (exit %d)", g.Gate, map[bool]string{true: "passed", false: "failed"}[g.Passed && g.ExitCode == 0], g.ExitCode)
	case record.KindEvidenceResult:
		var e record.EvidenceResult
		r.DecodeData(&e)
		return fmt.Sprintf("evidence %s %s (exit %d)", e.Producer, map[bool]string{true: "passed", false: "failed"}[e.Passed && e.ExitCode == 0], e.ExitCode)
	case record.KindArtifactPosted:
		var a record.ArtifactPosted
		r.DecodeData(&a)
		return fmt.Sprintf("%s v%d (%s)", a.Key, a.Version, a.ArtifactType)
	}
	return r.Kind
}

// readTimeline draws task's timeline from one view, memoized: it depends
// on what the task's answers do (TaskKey).
func (s *Server) readTimeline(v *bernstein.ReadView, id string, info *bernstein.TaskInfo, rep *verify.TaskReport) (timeline, error) {
	a := s.api()
	key, err := v.TaskKey(id)
	if err != nil {
		return timeline{}, err
	}
	val, err := a.memo.get("timeline\x00"+id, key, func() (any, int64, error) {
		rows, err := a.journalRows(v, id)
		if err != nil {
			return nil, 0, err
		}
		tl := buildTimeline(info, rows, rep)
		return tl, int64(1024 + 400*len(tl.Marks)), nil
	})
	if err != nil {
		return timeline{}, err
	}
	return val.(timeline), nil
}

// fragmentTimeline is GET /tasks/{id}/fragments/timeline: the timeline
// alone, which the task page swaps in when an event arrives.
func (s *Server) fragmentTimeline(w http.ResponseWriter, r *http.Request) {
	f, ok := s.fragmentReads(w, r)
	if !ok {
		return
	}
	tl, err := s.readTimeline(f.v, f.id, f.info, f.rep)
	if err != nil {
		s.storeProblem(w, true, f.id, err)
		return
	}
	s.write(w, http.StatusOK, "task", "timeline", tl)
}
