package server

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/verify"
)

// The task list (GET /): integrity first. Every task says how its artifact
// versions verified, whether its progress is proven and what its journal
// identity is; a task with anything tampered reads tampered, in red, at the
// top. A phase filter and a search (?phase=, ?q=) narrow it, and it is paged
// (?page=N, indexPageSize rows a page), all on the server: it works without
// JavaScript.

// indexPageSize is how many tasks a page of the list shows.
const indexPageSize = 200

// taskRow is one line of the task list.
type taskRow struct {
	ID, Path, Title, Phase, Claim string
	Earned                        int64
	Proof                         string // the progress proof
	Integrity                     bernstein.TaskIntegrity
	Journal                       string // the journal identity as the list says it ("open" while unsealed)
}

func newTaskRow(t bernstein.TaskListEntry) taskRow {
	r := taskRow{ID: t.ID, Path: TaskPath(t.ID), Title: t.Title, Phase: t.Phase, Claim: t.ClaimAgent, Integrity: t.Integrity,
		Journal: t.Integrity.JournalIdentity}
	if t.Progress != nil {
		r.Earned, r.Proof = t.Progress.EarnedSteps, t.Progress.Proof.State
	}
	if t.Integrity.JournalOpen {
		r.Journal = "open"
	}
	return r
}

// taskIndex is the task list page.
type taskIndex struct {
	Rows []taskRow
	// Total, Tampered, Unverifiable count every task, whatever the filter.
	Total, Tampered, Unverifiable int
	// Matching counts the tasks the filter keeps.
	Matching     int
	Phase, Query string
	Phases       []string // the phases to filter by
	Page, Pages  int
	Prev, Next   string // links to the pages around, "" at an end
	First        int    // the number of the first row shown (1-based)
	// ReadPast are the archive refs the list read past, each with its
	// warning (as 'bernstein task list' prints it): the tasks only they
	// hold are not listed.
	ReadPast []readPastNote
}

// readPastNote is an archive ref the list read past, and what the list
// says of it.
type readPastNote struct {
	Ref, Warning string
}

// phases are the ledger phases in lifecycle order, for the filter.
var phases = []string{ledger.PhaseCreated, ledger.PhaseClaimed, ledger.PhaseStarted, ledger.PhaseSuspended, ledger.PhaseResumed,
	ledger.PhaseReleased, ledger.PhaseReopened, ledger.PhaseCompleted, ledger.PhaseFailed, ledger.PhaseAbandoned}

// newTaskIndex orders, filters and pages tasks (sorted by id) for the list:
// tampered tasks first, then the others, each in id order.
func newTaskIndex(tasks []bernstein.TaskListEntry, q url.Values) taskIndex {
	ix := taskIndex{Total: len(tasks), Phase: q.Get("phase"), Query: strings.TrimSpace(q.Get("q")), Phases: phases, Page: 1}
	if !validPhase(ix.Phase) {
		ix.Phase = ""
	}
	needle := strings.ToLower(ix.Query)
	var rows []taskRow
	for _, t := range tasks {
		switch t.Integrity.State {
		case verify.Tampered:
			ix.Tampered++
		case verify.Unverifiable:
			ix.Unverifiable++
		}
		if ix.Phase != "" && t.Phase != ix.Phase {
			continue
		}
		if needle != "" && !strings.Contains(strings.ToLower(t.ID), needle) && !strings.Contains(strings.ToLower(t.Title), needle) {
			continue
		}
		rows = append(rows, newTaskRow(t))
	}
	sort.SliceStable(rows, func(i, j int) bool {
		return rows[i].Integrity.State == verify.Tampered && rows[j].Integrity.State != verify.Tampered
	})
	ix.Matching = len(rows)
	ix.Pages = max(1, (len(rows)+indexPageSize-1)/indexPageSize)
	if n, err := strconv.Atoi(q.Get("page")); err == nil && n > 1 {
		ix.Page = min(n, ix.Pages)
	}
	lo := (ix.Page - 1) * indexPageSize
	ix.Rows = rows[lo:min(lo+indexPageSize, len(rows))]
	ix.First = lo + 1
	link := func(page int) string {
		v := url.Values{}
		if ix.Phase != "" {
			v.Set("phase", ix.Phase)
		}
		if ix.Query != "" {
			v.Set("q", ix.Query)
		}
		if page > 1 {
			v.Set("page", strconv.Itoa(page))
		}
		if len(v) == 0 {
			return PagesTasks
		}
		return PagesTasks + "?" + v.Encode()
	}
	if ix.Page > 1 {
		ix.Prev = link(ix.Page - 1)
	}
	if ix.Page < ix.Pages {
		ix.Next = link(ix.Page + 1)
	}
	return ix
}

func validPhase(p string) bool {
	for _, x := range phases {
		if x == p {
			return true
		}
	}
	return false
}

// pageTasks is GET /: every task, integrity first.
func (s *Server) pageTasks(w http.ResponseWriter, r *http.Request) {
	asOf := s.api().memo.now()
	v, err := s.store.ReadView("")
	if err == nil {
		var tasks []bernstein.TaskListEntry
		if tasks, err = s.api().taskList(v, asOf); err == nil {
			ix := newTaskIndex(tasks, r.URL.Query())
			for _, b := range v.BadArchives() {
				ix.ReadPast = append(ix.ReadPast, readPastNote{Ref: b.Ref, Warning: bernstein.ArchiveReadPastWarning(b)})
			}
			s.write(w, http.StatusOK, "tasks", "base", page{Title: "Tasks", Body: body{Page: "tasks"}, Main: ix})
			return
		}
	}
	s.opts.Logger.Error("page", "err", err)
	s.problem(w, http.StatusInternalServerError, false, "Reading the tasks failed: "+err.Error())
}
