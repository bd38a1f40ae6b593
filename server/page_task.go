package server

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/verify"
)

// The task page's integrity panel and its artifact keys: what the task's
// versions, progress and journal prove, first, with the journal identity in
// words; then the keys, pinned ones first (?pin=a,b), the others in the
// order they were first posted, narrowed by a filter (?key=) and paged
// (?kpage=N, keysPageSize keys a page). All on the server; the script
// refreshes the panel when an event arrives and filters as one types.

// keysPageSize is how many keys a page of the panel shows.
const keysPageSize = 100

// integrityView is the task page's integrity panel.
type integrityView struct {
	Task string
	bernstein.TaskIntegrity
	Total int // versions
	// Identity says what the journal identity means, in words.
	Identity string
}

func newIntegrityView(info *bernstein.TaskInfo, rep *verify.TaskReport) integrityView {
	ti := bernstein.NewTaskIntegrity(info, rep)
	iv := integrityView{Task: info.ID, TaskIntegrity: ti, Total: len(rep.Versions)}
	switch {
	case ti.JournalIdentity == verify.IdentityVerified:
		iv.Identity = "The journal matches its signed seal exactly: the task ended with these rows, and none was added, removed or changed since."
	case ti.JournalOpen:
		iv.Identity = "The task is open, so nothing seals its journal yet: when it completes, fails or is abandoned, a signed seal binds every row. Until then each row stands on its own signature."
	case ti.JournalIdentity == verify.IdentityUnverifiable:
		iv.Identity = "The journal's seal cannot be checked here: " + ti.JournalIdentityReason + "."
	default:
		iv.Identity = "The journal differs from its signed seal: rows were cut back, or added after the task ended, so rows may be hidden: " + ti.JournalIdentityReason + "."
	}
	return iv
}

// keyPanel is the artifacts panel's keys: the groups this page shows and
// the index of every key the filter keeps.
type keyPanel struct {
	Task   string
	Path   string
	Groups []group
	Index  []keyChip
	// All counts every key, Matching those the filter keeps.
	All, Matching int
	Filter        string
	Pins          string // the pinned keys as ?pin= says them
	Page, Pages   int
	Prev, Next    string
	// Last is set on the last page: a new key lands there, the script
	// inserts it only then.
	Last bool
}

// keyChip is one key in the panel's index.
type keyChip struct {
	Key      string
	Anchor   string // "#artifact-KEY" on this page, else the page that shows it
	Latest   int64
	State    string // the latest version's
	Tampered int
	Pinned   bool
}

// DiffPath is the path of the page that compares two versions of a key.
func DiffPath(task, key string) string {
	return TaskPath(task) + "/diff/" + pathSegment(key)
}

// newKeyPanel orders, filters and pages groups (in first-posted order).
func newKeyPanel(task string, groups []group, q url.Values) keyPanel {
	kp := keyPanel{Task: task, Path: TaskPath(task), All: len(groups), Filter: strings.TrimSpace(q.Get("key")), Page: 1}
	var pins []string
	pinned := map[string]bool{}
	for _, p := range strings.Split(q.Get("pin"), ",") {
		if p = strings.TrimSpace(p); p != "" && !pinned[p] {
			pinned[p] = true
			pins = append(pins, p)
		}
	}
	kp.Pins = strings.Join(pins, ",")
	byKey := map[string]group{}
	for _, g := range groups {
		byKey[g.Key] = g
	}
	var ordered []group
	for _, p := range pins {
		if g, ok := byKey[p]; ok {
			ordered = append(ordered, g)
		}
	}
	for _, g := range groups {
		if !pinned[g.Key] {
			ordered = append(ordered, g)
		}
	}
	needle := strings.ToLower(kp.Filter)
	link := func(pins []string, page int) string {
		v := url.Values{}
		if len(pins) > 0 {
			v.Set("pin", strings.Join(pins, ","))
		}
		if kp.Filter != "" {
			v.Set("key", kp.Filter)
		}
		if page > 1 {
			v.Set("kpage", strconv.Itoa(page))
		}
		if len(v) == 0 {
			return kp.Path
		}
		return kp.Path + "?" + v.Encode()
	}
	var kept []group
	for _, g := range ordered {
		if needle != "" && !strings.Contains(strings.ToLower(g.Key), needle) {
			continue
		}
		g.Pinned = pinned[g.Key]
		var next []string
		for _, p := range pins {
			if p != g.Key {
				next = append(next, p)
			}
		}
		if !g.Pinned {
			next = append(next, g.Key)
		}
		g.PinLink = link(next, 1)
		kept = append(kept, g)
	}
	kp.Matching = len(kept)
	kp.Pages = max(1, (len(kept)+keysPageSize-1)/keysPageSize)
	if n, err := strconv.Atoi(q.Get("kpage")); err == nil && n > 1 {
		kp.Page = min(n, kp.Pages)
	}
	lo := (kp.Page - 1) * keysPageSize
	hi := min(lo+keysPageSize, len(kept))
	kp.Groups = kept[lo:hi]
	kp.Last = kp.Page == kp.Pages
	if kp.Page > 1 {
		kp.Prev = link(pins, kp.Page-1)
	}
	if kp.Page < kp.Pages {
		kp.Next = link(pins, kp.Page+1)
	}
	for i, g := range kept {
		c := keyChip{Key: g.Key, Latest: g.Latest.Version, State: g.Latest.State, Tampered: g.Tampered, Pinned: g.Pinned,
			Anchor: "#artifact-" + g.Key}
		if i < lo || i >= hi {
			c.Anchor = link(pins, i/keysPageSize+1) + "#artifact-" + g.Key
		}
		kp.Index = append(kp.Index, c)
	}
	return kp
}

// fragmentIntegrity is GET /tasks/{id}/fragments/integrity: the integrity
// panel alone, which the task page swaps in when an event arrives.
func (s *Server) fragmentIntegrity(w http.ResponseWriter, r *http.Request) {
	f, ok := s.fragmentReads(w, r)
	if !ok {
		return
	}
	s.write(w, http.StatusOK, "task", "integrity", newIntegrityView(f.info, f.rep))
}

// fragmentRead is what a fragment of the task page is drawn from: one view
// of the task, its detail and its verification.
type fragmentRead struct {
	id   string
	v    *bernstein.ReadView
	info *bernstein.TaskInfo
	rep  *verify.TaskReport
}

// fragmentReads reads the task a fragment request names; false when it has
// answered the request (a bad id, a store problem).
func (s *Server) fragmentReads(w http.ResponseWriter, r *http.Request) (fragmentRead, bool) {
	id, ok := s.taskParam(w, r, true)
	if !ok {
		return fragmentRead{}, false
	}
	f := fragmentRead{id: id}
	var err error
	if f.v, err = s.store.ReadView(id); err != nil {
		s.storeProblem(w, true, id, err)
		return f, false
	}
	if f.info, err = s.api().taskInfo(f.v, id); err != nil {
		s.storeProblem(w, true, id, err)
		return f, false
	}
	if f.rep, err = s.api().report(f.v, id); err != nil {
		s.storeProblem(w, true, id, err)
		return f, false
	}
	return f, true
}
