package server

import (
	"fmt"
	"html/template"
	"sort"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/verify"
)

// page is what the base template lays out.
type page struct {
	Title string
	Body  body
	Main  any
}

// body holds the data attributes of <body>: what the script needs, and
// stable hooks for tests.
type body struct {
	Page        string // tasks, task, version, problem
	Task        string
	TaskPath    string
	Events      string // the event stream URL, on the task page only
	LastEventID string // the bus's last event id when the page was read
}

type problemPage struct {
	Status  int
	Message string
}

// taskPage is the task detail screen.
type taskPage struct {
	Info      *bernstein.TaskInfo
	Path      string
	Integrity integrityView
	Strip     strip
	Timeline  timeline
	Keys      keyPanel
	Verified  bool
	Versions  int
}

// strip is the progress strip.
type strip struct {
	Task          string
	Phase         string
	Claim         string
	DeclaredGates int
	P             progress.Wire
	ShortHash     string
	Faults        []record.RowFault
}

func newStrip(info *bernstein.TaskInfo) strip {
	st := strip{Task: info.ID, Phase: info.Phase, Claim: info.ClaimAgent, DeclaredGates: declaredGates(info.Gates)}
	if info.Progress != nil {
		st.P = *info.Progress
		st.ShortHash = short(st.P.VectorHash, 12)
		st.Faults = st.P.Proof.RowsAtFault
	}
	return st
}

// declaredGates counts the distinct gate names declared at creation.
func declaredGates(gs []ledger.Gate) int {
	seen := map[string]bool{}
	for _, g := range gs {
		seen[g.Name] = true
	}
	return len(seen)
}

// group is one artifact key: its latest version, the earlier ones that are
// tampered (never collapsed out of sight), then the other earlier ones.
type group struct {
	Task    string
	Key     string
	Type    string
	Latest  versionView
	Flagged []versionView // earlier versions that are tampered, newest first
	History []versionView // the other earlier versions, newest first
	// First is the journal index of the key's first version: the panel's
	// order.
	First int64
	// Numbers are the key's version numbers, newest first, for the
	// comparison's choices; From and To are its defaults.
	Numbers  []int64
	From, To int64
	DiffPath string
	// Pinned is set when the page pins the key; PinLink pins or unpins it.
	Pinned  bool
	PinLink string
	// Tampered counts the key's tampered versions.
	Tampered int
}

// versionView is one version as a page shows it.
type versionView struct {
	Task         string
	Key          string
	Version      int64
	Type         string
	LinkKind     string
	State        string // verified, tampered, unverifiable
	Reason       string // why it is not verified
	Actor        string // who posted it
	Writer       string // whose key signed it
	WriterSource string // where Writer was read (verify.WriterFrom*)
	JournalIndex int64
	At           *bernstein.RunPosition // the checkpoint before its row
	SpineEntry   string
	ContentHash  string
	Path         string // its own page
	// Withheld says why the content is not shown ("" when it is); Content
	// is false when it is not rendered here (an earlier version in the
	// task page's history: its own page shows it).
	Withheld string
	Content  bool
	Body     content
}

// content is a rendered payload: exactly one of its parts is set.
type content struct {
	Report template.HTML // sanitized
	Table  *artifact.Payload
	Link   *linkView
}

type linkView struct {
	URL  string
	Kind string
	Safe bool // http or https with a host: only then an anchor
}

// buildGroups groups rep's versions by key, keys in the order they were
// first posted, each key's versions newest first. Only each key's latest
// version carries its rendered content: the page stays small however long
// the history, and every version has its own page.
func buildGroups(task string, rep *verify.TaskReport) []group {
	at := runPositions(rep.RowList)
	byKey := map[string][]*verify.Version{}
	var keys []string
	for i := range rep.Versions {
		v := &rep.Versions[i]
		if _, ok := byKey[v.Key]; !ok {
			keys = append(keys, v.Key) // journal order: first posted first
		}
		byKey[v.Key] = append(byKey[v.Key], v)
	}
	out := make([]group, 0, len(keys))
	for _, k := range keys {
		vs := byKey[k]
		first := vs[0].JournalIndex
		sort.SliceStable(vs, func(i, j int) bool { return vs[i].Version > vs[j].Version })
		g := group{Task: task, Key: k, Type: vs[0].Type, First: first, DiffPath: DiffPath(task, k)}
		// The version shown with its content is the one `artifact show`
		// shows: the latest, unless a writer not pinned here wrote it (then
		// the latest verified one; the newer ones say why they are not).
		shown, newer := rep.Shown(k)
		passedOver := map[int64]bool{}
		for _, n := range newer {
			passedOver[n.Version] = true
		}
		for i, v := range vs {
			vv := newVersion(task, rep, v, at[v.JournalIndex], shown != nil && v.Version == shown.Version)
			if passedOver[v.Version] && vv.Withheld == "" {
				vv.Withheld = fmt.Sprintf("not shown here: written by writer %s, whose key is not pinned on this host (its own page shows it, marked unverifiable)", v.Writer)
			}
			g.Numbers = append(g.Numbers, v.Version)
			if v.State == verify.Tampered {
				g.Tampered++
			}
			switch {
			case i == 0:
				g.Latest = vv
			case v.State == verify.Tampered:
				g.Flagged = append(g.Flagged, vv)
			default:
				g.History = append(g.History, vv)
			}
		}
		g.To = vs[0].Version
		if len(vs) > 1 {
			g.From = vs[1].Version
		}
		out = append(out, g)
	}
	return out
}

// newVersion builds the view of ver; render says whether to render its
// content (it is withheld all the same when it does not verify).
func newVersion(task string, rep *verify.TaskReport, ver *verify.Version, at *bernstein.RunPosition, render bool) versionView {
	v := versionView{
		Task: task, Key: ver.Key, Version: ver.Version, Type: ver.Type, LinkKind: ver.LinkKind,
		State: ver.State, Reason: ver.Reason, Actor: ver.Actor, Writer: ver.Writer, WriterSource: ver.WriterSource, JournalIndex: ver.JournalIndex,
		At: at, SpineEntry: string(ver.SpineEntryHash), ContentHash: string(ver.ContentHash),
		Path: VersionPath(task, ver.Key, ver.Version),
	}
	payload, why := rep.Content(ver)
	if payload == nil {
		v.Withheld = why
		if v.Withheld == "" {
			v.Withheld = "content unavailable"
		}
		return v
	}
	if !render {
		return v
	}
	c, err := renderPayload(payload)
	if err != nil {
		v.Withheld = "the payload does not parse: " + err.Error()
		return v
	}
	v.Content, v.Body = true, c
	return v
}

// runPositions maps each journal index to the checkpoint recorded before
// its row (nil before the first), as the event stream's run_position does
// (Store.TaskFeed). It reads the rows of the report itself, so that a page
// binds each version to a run position of the same consistent view.
func runPositions(rows []record.Row) map[int64]*bernstein.RunPosition {
	out := make(map[int64]*bernstein.RunPosition, len(rows))
	var at *bernstein.RunPosition
	for _, r := range rows {
		out[r.Index] = at
		if r.Kind == record.KindCheckpoint {
			var cp record.Checkpoint
			if r.DecodeData(&cp) == nil {
				at = &bernstein.RunPosition{JournalIndex: r.Index, Commit: cp.Commit}
			}
		}
	}
	return out
}

// versionPage is one version's own page.
type versionPage struct {
	Task     string
	TaskPath string
	Version  versionView
}

// short is the first n characters of s (after a "sha256:" prefix).
func short(s string, n int) string {
	if len(s) > 7 && s[:7] == "sha256:" {
		s = s[7:]
	}
	if len(s) > n {
		return s[:n]
	}
	return s
}
