package bernstein

import (
	"container/heap"
	"fmt"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/refs"
	"github.com/bernstein/bernstein/verify"
)

// Listings are paged by a cursor and a limit (docs/cli.md, "Pages"): a
// page holds at most limit entries, those that sort after the cursor, and
// names the cursor of the next page. The cursor is the last entry of the
// page before (a task id, an artifact URI), so a page stays well defined
// however the repository moves between two pages: an entry added behind
// the cursor is not shown again, one added ahead of it is shown once.

// MaxPageLimit is the largest page a listing serves.
const MaxPageLimit = 1000

// Page asks for one page of a listing: Limit 0 asks for every entry after
// Cursor ("" from the first).
type Page struct {
	Cursor string
	Limit  int
}

// checkLimit refuses a limit that is not 0 (all) or 1..MaxPageLimit.
func (p Page) checkLimit() error {
	if p.Limit < 0 || p.Limit > MaxPageLimit {
		return &artifact.InputError{Field: "limit", Msg: fmt.Sprintf("%d is not a number of entries from 1 to %d", p.Limit, MaxPageLimit)}
	}
	return nil
}

// CheckTaskPage checks a page of tasks: its cursor, when set, is a task id.
func CheckTaskPage(p Page) error {
	if err := p.checkLimit(); err != nil {
		return err
	}
	if p.Cursor != "" {
		if err := validateTask(p.Cursor); err != nil {
			return &artifact.InputError{Field: "cursor", Msg: "not a cursor of a task list: " + err.(*artifact.InputError).Msg}
		}
	}
	return nil
}

// PageOf returns the ids (sorted) of one page and the cursor of the next
// ("" when the page is the last).
func PageOf(ids []string, p Page) (page []string, next string) {
	i := 0
	if p.Cursor != "" {
		i = sort.SearchStrings(ids, p.Cursor)
		if i < len(ids) && ids[i] == p.Cursor {
			i++
		}
	}
	page = ids[i:]
	if p.Limit > 0 && len(page) > p.Limit {
		page = page[:p.Limit]
		next = page[len(page)-1]
	}
	return page, next
}

// TaskListPage is TaskList for one page. Unpaged, it reads every task from
// one snapshot of the refs. A page chooses its tasks from the names of the
// ledger refs (no ref file read), then reads those tasks, the spines and
// the keys in one snapshot and verifies only them, so a page costs its
// tasks plus one listing of names and the spines once. A task whose
// ledger is gone by the time the page's snapshot is taken is left out.
func (s *Store) TaskListPage(p Page) ([]TaskListEntry, string, error) {
	out, next, _, err := s.TaskListPageReadPast(p)
	return out, next, err
}

// TaskListPageReadPast is TaskListPage, with the archive refs the page's
// reads could not read as archives and read past (the tasks only they
// hold are not listed): see ReadView.BadArchives.
func (s *Store) TaskListPageReadPast(p Page) ([]TaskListEntry, string, []refs.BadRef, error) {
	out, next, v, err := s.taskListPage(p)
	if err != nil {
		return nil, "", nil, err
	}
	return out, next, v.BadArchives(), nil
}

func (s *Store) taskListPage(p Page) ([]TaskListEntry, string, *ReadView, error) {
	var out []TaskListEntry
	next, v, err := s.eachTaskListEntry(p, func(e TaskListEntry) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, "", nil, err
	}
	return out, next, v, nil
}

// EachTaskListEntry is TaskListPageReadPast one task at a time: fn is
// called with each task of page p in order, as soon as it is read and
// verified, and the list holds nothing of the tasks it has passed to fn (a
// list of 100,000 tasks that writes each as it comes keeps no answers). An
// error from fn stops the list and is returned.
func (s *Store) EachTaskListEntry(p Page, fn func(TaskListEntry) error) (next string, readPast []refs.BadRef, err error) {
	next, v, err := s.eachTaskListEntry(p, fn)
	if err != nil {
		return "", nil, err
	}
	return next, v.BadArchives(), nil
}

func (s *Store) eachTaskListEntry(p Page, fn func(TaskListEntry) error) (string, *ReadView, error) {
	if err := CheckTaskPage(p); err != nil {
		return "", nil, err
	}
	v, ids, next, err := s.PageView(p)
	if err != nil {
		return "", nil, err
	}
	lv := v.ListVerifier()
	for _, id := range ids {
		e, ok, err := lv.Entry(id, p.Limit > 0)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			continue
		}
		if err := fn(e); err != nil {
			return "", nil, err
		}
	}
	return next, v, nil
}

// PageView takes the view a page of tasks is read from, the page's task
// ids and the next page's cursor: unpaged (limit 0), one snapshot of every
// task; paged, the ids chosen from the names of the ledger refs, then one
// snapshot of those tasks' chains, the spines and the keys.
func (s *Store) PageView(p Page) (*ReadView, []string, string, error) {
	if err := CheckTaskPage(p); err != nil {
		return nil, nil, "", err
	}
	if p.Limit == 0 {
		v, err := s.ReadView("")
		if err != nil {
			return nil, nil, "", err
		}
		ids, err := v.TaskIDs()
		if err != nil {
			return nil, nil, "", err
		}
		ids, next := PageOf(ids, p)
		return v, ids, next, nil
	}
	ids, next, bad, err := s.pageIDs(p)
	if err != nil {
		return nil, nil, "", err
	}
	v, err := s.readViewOf(ids)
	if err != nil {
		return nil, nil, "", err
	}
	v.namesBad = bad
	return v, ids, next, nil
}

// pageIDs chooses the ids of page p (Limit > 0) from the names of the
// ledger refs, as PageOf chooses them from every id sorted: it keeps the
// Limit+1 smallest ids after the cursor as it meets them (a max-heap), so
// a page costs the walk of the names and not a sort of every id. It
// returns the archive refs it read past as well.
func (s *Store) pageIDs(p Page) ([]string, string, []refs.BadRef, error) {
	var h idHeap
	in := map[string]bool{}
	bad, err := s.core.Refs.EachName(refs.LedgerPrefix, func(n string) {
		id, err := refs.UnescapeTask(strings.TrimPrefix(n, refs.LedgerPrefix))
		if err != nil || id <= p.Cursor && p.Cursor != "" || in[id] {
			return
		}
		if len(h) > p.Limit {
			if id >= h[0] {
				return
			}
			delete(in, heap.Pop(&h).(string))
		}
		heap.Push(&h, id)
		in[id] = true
	})
	if err != nil {
		return nil, "", nil, err
	}
	ids := []string(h)
	sort.Strings(ids)
	next := ""
	if len(ids) > p.Limit {
		ids = ids[:p.Limit]
		next = ids[len(ids)-1]
	}
	return ids, next, bad, nil
}

// idHeap is a max-heap of ids.
type idHeap []string

func (h idHeap) Len() int           { return len(h) }
func (h idHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h idHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *idHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// productionCursor splits a production's URI cursor into its task and key.
func productionCursor(c string) (task, key string, err error) {
	rest, ok := strings.CutPrefix(c, "bernstein://")
	if ok {
		task, key, ok = strings.Cut(rest, "/")
	}
	if !ok || key == "" || validateTask(task) != nil {
		return "", "", &artifact.InputError{Field: "cursor", Msg: fmt.Sprintf("%q is not a cursor of an artifact list (bernstein://<task>/<key>)", c)}
	}
	return task, key, nil
}

// CheckProductionsPage checks a page of the artifact keys: its cursor,
// when set, is an artifact URI.
func CheckProductionsPage(p Page) error {
	if err := p.checkLimit(); err != nil {
		return err
	}
	if p.Cursor != "" {
		if _, _, err := productionCursor(p.Cursor); err != nil {
			return err
		}
	}
	return nil
}

// ProductionsPageOf returns one page of ps (sorted by task, then key, as
// Productions returns them) and the cursor of the next.
func ProductionsPageOf(ps []verify.Production, p Page) ([]verify.Production, string, error) {
	if err := CheckProductionsPage(p); err != nil {
		return nil, "", err
	}
	i := 0
	if p.Cursor != "" {
		task, key, _ := productionCursor(p.Cursor)
		i = sort.Search(len(ps), func(i int) bool {
			return ps[i].Task > task || ps[i].Task == task && ps[i].Key > key
		})
	}
	page, next := ps[i:], ""
	if p.Limit > 0 && len(page) > p.Limit {
		page = page[:p.Limit]
		next = page[len(page)-1].URI
	}
	return page, next, nil
}

// ProductionsPage is Productions for one page.
func (s *Store) ProductionsPage(p Page) ([]verify.Production, string, error) {
	if err := CheckProductionsPage(p); err != nil {
		return nil, "", err
	}
	ps, err := s.Productions()
	if err != nil {
		return nil, "", err
	}
	return ProductionsPageOf(ps, p)
}
