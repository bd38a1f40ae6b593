package tests

// The tamper matrix of `bernstein audit verify` (issue 3). Every case starts
// from a copy of one repository holding three tasks (one id with ':', one
// sealed by task.completed), 2-3 keys each and several versions, tampers
// with it the way an attacker with plain git (and, where said, some of the
// writer's secrets) could, runs `bernstein audit verify --output-json`
// through the CLI and checks the exit status, the failures (task, key,
// version, journal index or writer and seq, and the check), and the state
// of every version: tampered where the attack reached, verified elsewhere.

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

const (
	mxA      = "MX-1" // open, 6 rows: summary v1-3, scores v1-2, preview v1
	mxB      = "mx:2" // open, 4 rows; ':' is escaped in its ref names
	mxC      = "MX-3" // completed: its journal (3 rows) is sealed
	mxWriter = "test-writer"

	anyN  = int64(-2) // a matcher's number that may be anything
	nullN = int64(-1) // a matcher's number that must be null or absent
)

// ---------------------------------------------------------------------------
// The template repository, built once and copied for every case.

type mxVersion struct {
	Task, Key      string
	Version, Index int64
	Blob           string
	Spine          record.Hash
	Seq            int64 // of its spine entry
	Marker         string
}

type mxTemplate struct {
	root     string // holds repo/ and home/
	versions []mxVersion
	sealSeq  int64
	seqs     int64 // spine entries
}

func (tp *mxTemplate) v(task, key string, n int64) mxVersion {
	for _, v := range tp.versions {
		if v.Task == task && v.Key == key && v.Version == n {
			return v
		}
	}
	panic(fmt.Sprintf("no %s %s v%d in the template", task, key, n))
}

func mxBuild(t *testing.T) *mxTemplate {
	f := newFixture(t)
	s := f.open()
	agents := map[string]string{mxA: "agent-a", mxB: "agent-b", mxC: "agent-c"}
	toks := map[string]string{}
	for _, task := range []string{mxA, mxB, mxC} {
		toks[task] = f.claimed(s, task, agents[task])
	}
	tbl := func(rows ...[]string) artifact.Payload {
		return artifact.Payload{Type: artifact.TypeTable, Columns: []string{"name", "score"}, Rows: rows}
	}
	link := func(url, kind string) artifact.Payload {
		return artifact.Payload{Type: artifact.TypeLink, URL: url, LinkKind: kind}
	}
	posts := []struct {
		task, key string
		p         artifact.Payload
	}{
		{mxA, "summary", report("MARK-A1 the first summary of MX-1, about orchards and ladders")},
		{mxB, "summary", report("MARK-B1 colon task opening words: quartz, violin, meadow")},
		{mxA, "scores", tbl([]string{"MARK-A2 alpha", "1"}, []string{"beta", "2"})},
		{mxC, "report", report("MARK-C1 sealed task report, first cut: rivers and stones")},
		{mxA, "summary", report("MARK-A3 SECRET second summary with distinct words: kettle, harbour")},
		{mxB, "notes", report("MARK-B2 notes one: lantern, copper, thistle")},
		{mxA, "preview", link("https://example.com/MARK-A4/preview", artifact.LinkPreview)},
		{mxB, "summary", report("MARK-B3 colon task second summary: glacier, saffron")},
		{mxC, "report", report("MARK-C2 sealed task report, final: tundra and cobalt")},
		{mxA, "summary", report("MARK-A5 third summary, gamma: pepper, anchor, willow")},
		{mxB, "notes", report("MARK-B4 notes two: marble, falcon, nutmeg")},
		{mxA, "scores", tbl([]string{"MARK-A6 gamma", "3"}, []string{"delta", "4"}, []string{"eps", "5"})},
		{mxC, "dash", link("https://grafana.example.com/d/MARK-C3", artifact.LinkDashboard)},
	}
	tp := &mxTemplate{root: filepath.Dir(f.dir)}
	for _, p := range posts {
		r := f.post(s, p.task, p.key, agents[p.task], toks[p.task], p.p)
		b, _ := p.p.Canonical()
		i := bytes.Index(b, []byte("MARK-"))
		tp.versions = append(tp.versions, mxVersion{Task: p.task, Key: p.key, Version: r.Version, Index: r.JournalIndex,
			Blob: r.Blob, Spine: r.SpineEntryHash, Marker: string(b[i : i+7])})
	}
	for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
		if _, err := s.Transition(mxC, k, "", ""); err != nil {
			t.Fatalf("%s %s: %v", k, mxC, err)
		}
	}
	s.Close()
	for _, e := range f.chainRecords(refs.Spine(mxWriter)) {
		seq := int64(e["seq"].(float64))
		tp.seqs++
		if e["kind"] == record.SpineJournalSeal {
			tp.sealSeq = seq
			continue
		}
		for i := range tp.versions {
			v := &tp.versions[i]
			if e["task_id"] == v.Task && e["key"] == v.Key && int64(e["version"].(float64)) == v.Version {
				v.Seq = seq
			}
		}
	}
	return tp
}

// mxRepo is one case's copy of the template.
type mxRepo struct {
	*fixture
	tp *mxTemplate
	// rowSigner, when set, signs every journal and ledger commit the
	// attacker writes, and all of them are written anew: a forger who
	// replaced the published keys re-signs the rows with its own key.
	rowSigner *keys.Identity
}

func (tp *mxTemplate) copy(t *testing.T) *mxRepo {
	t.Helper()
	root := t.TempDir()
	if out, err := exec.Command("cp", "-a", tp.root+"/.", root).CombinedOutput(); err != nil {
		t.Fatalf("copy the template: %v %s", err, out)
	}
	f := &fixture{t: t, dir: filepath.Join(root, "repo"), home: filepath.Join(root, "home")}
	f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
	// Each case checks what the repository itself shows. The heads the
	// writer remembered while it built the template follow the
	// repository's identity into every copy (docs/trust.md, Rollbacks);
	// they are dropped, so that only the case's own writes add the
	// rollbacks their heads tell.
	if err := os.RemoveAll(filepath.Join(f.home, "heads")); err != nil {
		t.Fatal(err)
	}
	return &mxRepo{fixture: f, tp: tp}
}

// clone is what a user gets with plain git on another host: a clone, the
// refs/bernstein/* fetched, and an empty BERNSTEIN_HOME.
func (r *mxRepo) clone() *mxRepo {
	r.t.Helper()
	root := r.t.TempDir()
	dir := filepath.Join(root, "repo")
	if out, err := execGit(root, "clone", "-q", r.dir, dir); err != nil {
		r.t.Fatalf("git clone: %v %s", err, out)
	}
	if out, err := execGit(dir, "fetch", "-q", "origin", "refs/bernstein/*:refs/bernstein/*"); err != nil {
		r.t.Fatalf("git fetch: %v %s", err, out)
	}
	f := &fixture{t: r.t, dir: dir, home: filepath.Join(root, "home")}
	f.opts = bernstein.Options{Repo: f.dir, Home: f.home}
	if err := os.Mkdir(f.home, 0o700); err != nil {
		r.t.Fatal(err)
	}
	return &mxRepo{fixture: f, tp: r.tp}
}

// ---------------------------------------------------------------------------
// Running verify and reading its report.

type mxFailure struct {
	TaskID       string `json:"task_id"`
	Key          string `json:"key"`
	Version      *int64 `json:"version"`
	JournalIndex *int64 `json:"journal_index"`
	Writer       string `json:"writer"`
	Seq          *int64 `json:"seq"`
	Check        string `json:"check"`
	Reason       string `json:"reason"`
}

type mxVersionState struct {
	Key          string `json:"key"`
	Version      int64  `json:"version"`
	JournalIndex int64  `json:"journal_index"`
	State        string `json:"state"`
	Reason       string `json:"reason"`
}

type mxDoc struct {
	Verified    bool   `json:"verified"`
	HMACChecked bool   `json:"hmac_checked"`
	HMACNote    string `json:"hmac_note"`
	Note        string `json:"note"`
	Tasks       []struct {
		TaskID          string           `json:"task_id"`
		JournalIdentity string           `json:"journal_identity"`
		IdentityReason  string           `json:"journal_identity_reason"`
		Artifacts       []mxVersionState `json:"artifacts"`
	} `json:"tasks"`
	Failures []mxFailure    `json:"failures"`
	Counts   map[string]int `json:"counts"`
	raw      string
}

// verify runs `bernstein audit verify --output-json` and checks what holds
// for every report: one JSON document, exit 1 exactly when something
// failed, verified only when nothing failed, every failure with a check and
// a reason.
func (r *mxRepo) verify(args ...string) (*mxDoc, int) {
	r.t.Helper()
	out, errOut, code := r.cli("", append([]string{"audit", "verify", "--output-json"}, args...)...)
	if code == 2 {
		if out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			r.t.Fatalf("exit 2 must print one error line on stderr and nothing on stdout:\n%s\n%s", out, errOut)
		}
		return nil, code
	}
	doc := &mxDoc{raw: out}
	decodeJSON(r.t, out, doc)
	strict := false
	for _, a := range args {
		strict = strict || a == "--strict"
	}
	switch {
	case code != 0 && code != 1:
		r.t.Fatalf("audit verify exited %d\n%s%s", code, out, errOut)
	case !strict && (code == 1) != (len(doc.Failures) > 0):
		r.t.Fatalf("audit verify exited %d with %d failures\n%s", code, len(doc.Failures), out)
	case doc.Verified && (len(doc.Failures) > 0 || code != 0):
		r.t.Fatalf("verified with failures or exit %d\n%s", code, out)
	case doc.Counts["failures"] != len(doc.Failures):
		r.t.Fatalf("counts.failures %d, %d failures listed", doc.Counts["failures"], len(doc.Failures))
	}
	for _, f := range doc.Failures {
		if f.Check == "" || f.Reason == "" {
			r.t.Fatalf("failure without check or reason: %+v", f)
		}
	}
	return doc, code
}

func (d *mxDoc) identity(task string) string {
	for _, t := range d.Tasks {
		if t.TaskID == task {
			return t.JournalIdentity
		}
	}
	return "(task not reported)"
}

func (d *mxDoc) dump() string {
	var b strings.Builder
	for _, f := range d.Failures {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	return b.String()
}

func (f mxFailure) String() string {
	n := func(p *int64) string {
		if p == nil {
			return "null"
		}
		return strconv.FormatInt(*p, 10)
	}
	return fmt.Sprintf("{task %q key %q v%s idx %s writer %q seq %s check %s: %s}",
		f.TaskID, f.Key, n(f.Version), n(f.JournalIndex), f.Writer, n(f.Seq), f.Check, f.Reason)
}

// mxWant matches failures: strings exactly ("*" for any), numbers exactly,
// nullN for null or absent, anyN for anything; reason as a substring.
type mxWant struct {
	task, key string
	ver, idx  int64
	writer    string
	seq       int64
	check     string
	reason    string
}

// wVer is a failure of one version (no writer or seq).
func wVer(task, key string, ver, idx int64, check string) mxWant {
	return mxWant{task, key, ver, idx, "", nullN, check, ""}
}

// wTask is a failure of a task's journal (no key, version, writer or seq).
// wRowSig is the failure of a row an attacker without the key had to make
// anew (re-chained after an edit): its commit is not signed.
func wRowSig(task, key string, ver, idx int64) mxWant {
	return wVer(task, key, ver, idx, "row_signature").saying("not signed")
}

func wTask(task string, idx int64, check string) mxWant {
	return mxWant{task, "", nullN, idx, "", nullN, check, ""}
}

// wSeq is a failure of one spine or audit entry with no task position.
func wSeq(writer string, seq int64, check string) mxWant {
	return mxWant{"", "", nullN, nullN, writer, seq, check, ""}
}

func (w mxWant) at(writer string, seq int64) mxWant { w.writer, w.seq = writer, seq; return w }
func (w mxWant) saying(s string) mxWant             { w.reason = s; return w }

func mxNum(p *int64, w int64) bool {
	switch w {
	case anyN:
		return true
	case nullN:
		return p == nil
	}
	return p != nil && *p == w
}

func (w mxWant) match(f mxFailure) bool {
	str := func(got, want string) bool { return want == "*" || got == want }
	return f.Check == w.check && str(f.TaskID, w.task) && str(f.Key, w.key) && str(f.Writer, w.writer) &&
		mxNum(f.Version, w.ver) && mxNum(f.JournalIndex, w.idx) && mxNum(f.Seq, w.seq) &&
		strings.Contains(f.Reason, w.reason)
}

// expectFailures asserts the failures are exactly the wanted ones: every
// want matches a failure and every failure matches a want.
func expectFailures(t *testing.T, d *mxDoc, wants ...mxWant) {
	t.Helper()
	for _, w := range wants {
		found := false
		for _, f := range d.Failures {
			found = found || w.match(f)
		}
		if !found {
			t.Errorf("no failure matches %+v; failures:\n%s", w, d.dump())
		}
	}
	for _, f := range d.Failures {
		found := false
		for _, w := range wants {
			found = found || w.match(f)
		}
		if !found {
			t.Errorf("unexpected failure %s", f)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// mxExpect is the expected list of versions per task, in journal order.
type mxExpect map[string][]mxVersionState

func (tp *mxTemplate) expect() mxExpect {
	e := mxExpect{}
	for _, v := range tp.versions {
		e[v.Task] = append(e[v.Task], mxVersionState{Key: v.Key, Version: v.Version, JournalIndex: v.Index, State: "verified"})
	}
	return e
}

// set gives the version at journal index idx of task the state.
func (e mxExpect) set(task string, idx int64, state string) mxExpect {
	for i := range e[task] {
		if e[task][i].JournalIndex == idx {
			e[task][i].State = state
			return e
		}
	}
	panic(fmt.Sprintf("no version at %s index %d", task, idx))
}

// all gives every version the state.
func (e mxExpect) all(state string) mxExpect {
	for task := range e {
		for i := range e[task] {
			e[task][i].State = state
		}
	}
	return e
}

// checkVersions asserts the report lists exactly the expected tasks, each
// once, with exactly the expected versions and their states; tampered and
// unverifiable ones carry a reason, verified ones none.
func checkVersions(t *testing.T, d *mxDoc, want mxExpect) {
	t.Helper()
	reported := map[string]int{}
	for i, task := range d.Tasks {
		if _, dup := reported[task.TaskID]; dup {
			t.Fatalf("task %s reported twice", task.TaskID)
		}
		if _, ok := want[task.TaskID]; !ok {
			t.Fatalf("task %s reported with %d versions, not expected (reported %v)", task.TaskID, len(task.Artifacts), d.reportedTasks())
		}
		reported[task.TaskID] = i
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		exp := want[id]
		i, ok := reported[id]
		if !ok {
			t.Fatalf("task %s expected with %d versions, not reported (reported %v)\nfailures:\n%s", id, len(exp), d.reportedTasks(), d.dump())
		}
		task := d.Tasks[i]
		if len(task.Artifacts) != len(exp) {
			t.Fatalf("task %s: %d versions reported, want %d:\n%+v\nfailures:\n%s", task.TaskID, len(task.Artifacts), len(exp), task.Artifacts, d.dump())
		}
		for i, got := range task.Artifacts {
			w := exp[i]
			if got.Key != w.Key || got.Version != w.Version || got.JournalIndex != w.JournalIndex || got.State != w.State {
				t.Fatalf("task %s version %d: got %s v%d at %d %s (%s), want %s v%d at %d %s\nfailures:\n%s", task.TaskID, i,
					got.Key, got.Version, got.JournalIndex, got.State, got.Reason, w.Key, w.Version, w.JournalIndex, w.State, d.dump())
			}
			if (got.State == "verified") != (got.Reason == "") {
				t.Fatalf("task %s %s v%d is %s with reason %q", task.TaskID, got.Key, got.Version, got.State, got.Reason)
			}
		}
	}
}

// reportedTasks lists the task ids of the report in order.
func (d *mxDoc) reportedTasks() []string {
	var out []string
	for _, t := range d.Tasks {
		out = append(out, t.TaskID)
	}
	return out
}

// ---------------------------------------------------------------------------
// Plain-git forgery: objects, trees, journals, spines, audit mirrors, keys.

func mustOid(t *testing.T, s string) gitstore.Oid {
	t.Helper()
	o, err := gitstore.ParseOid(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("oid %q: %v", s, err)
	}
	return o
}

// write stores an object with git hash-object and returns its id.
func (r *mxRepo) write(kind string, data []byte) gitstore.Oid {
	r.t.Helper()
	return mustOid(r.t, string(mustOutput(r.t, execGitStdin(r.dir, data, "hash-object", "-t", kind, "-w", "--stdin"))))
}

func (r *mxRepo) rev(ref string) gitstore.Oid {
	r.t.Helper()
	return mustOid(r.t, r.git("rev-parse", ref))
}

// commit reads and parses a commit; it also returns its signed payload.
func (r *mxRepo) commit(id gitstore.Oid) (gitstore.Commit, []byte) {
	r.t.Helper()
	data := mustOutput(r.t, exec.Command("git", "-C", r.dir, "cat-file", "commit", id.String()))
	c, payload, err := gitstore.ParseCommit(data)
	if err != nil {
		r.t.Fatalf("parse commit %s: %v", id, err)
	}
	return c, payload
}

// writeCommit stores c, signed by signer when one is given (else with
// whatever signature c carries).
func (r *mxRepo) writeCommit(c gitstore.Commit, signer *keys.Identity) gitstore.Oid {
	r.t.Helper()
	if signer != nil {
		c.Signature = nil
		sig, err := signer.SignCommit(gitstore.EncodeCommit(c))
		if err != nil {
			r.t.Fatal(err)
		}
		c.Signature = sig
	}
	return r.write("commit", gitstore.EncodeCommit(c))
}

// editTree returns tree with blobs set at paths and paths removed, built in
// a private index file.
func (r *mxRepo) editTree(tree gitstore.Oid, set map[string]gitstore.Oid, remove ...string) gitstore.Oid {
	r.t.Helper()
	idx := filepath.Join(r.t.TempDir(), "index")
	run := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", r.dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+idx)
		out, err := cmd.CombinedOutput()
		if err != nil {
			r.t.Fatalf("git %v: %v %s", args, err, out)
		}
		return string(out)
	}
	run("read-tree", tree.String())
	for p, b := range set {
		run("update-index", "--add", "--cacheinfo", "100644,"+b.String()+","+p)
	}
	for _, p := range remove {
		run("update-index", "--force-remove", p)
	}
	return mustOid(r.t, run("write-tree"))
}

// mxItem is one chain commit with its record.
type mxItem struct {
	ID      gitstore.Oid
	Commit  gitstore.Commit
	Payload []byte
	Record  []byte
	Summary string
}

// genesis is what the first record of the chain of kind named name links
// to in this repository: computed, as an attacker can compute it, from the
// identity refs/bernstein/repository names.
func (r *mxRepo) genesis(kind, name string) string {
	return record.GenesisLink(r.repositoryID(), kind, name)
}

func (r *mxRepo) items(ref string) []mxItem {
	r.t.Helper()
	var out []mxItem
	for _, s := range strings.Fields(r.git("rev-list", "--first-parent", "--reverse", ref)) {
		id := mustOid(r.t, s)
		c, payload := r.commit(id)
		rec, err := record.RecordFromMessage(c.Message)
		if err != nil {
			r.t.Fatalf("%s %s: %v", ref, id, err)
		}
		summary, _, _ := strings.Cut(string(c.Message), "\n")
		out = append(out, mxItem{ID: id, Commit: c, Payload: payload, Record: rec, Summary: summary})
	}
	return out
}

// mxRow is one journal row with what its commit carries besides the record.
type mxRow struct {
	Row  record.Row
	Tree gitstore.Oid
	it   mxItem
}

func (x *mxRow) art(t *testing.T) record.ArtifactPosted {
	t.Helper()
	var a record.ArtifactPosted
	if err := x.Row.DecodeData(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

func (x *mxRow) setArt(a record.ArtifactPosted) { x.Row.Data = record.MustCanonical(a) }

func (r *mxRepo) journal(task string) []mxRow {
	r.t.Helper()
	var rows []mxRow
	for _, it := range r.items(refs.Journal(task)) {
		row, err := record.ParseRow(it.Record)
		if err != nil {
			r.t.Fatal(err)
		}
		rows = append(rows, mxRow{Row: row, Tree: it.Commit.Tree, it: it})
	}
	return rows
}

// writeJournal re-chains rows as an attacker without keys would: index and
// prev recomputed for every row, new unsigned commits, the ref moved. It
// returns the rows written.
func (r *mxRepo) writeJournal(task string, rows []mxRow) []record.Row {
	r.t.Helper()
	var parent gitstore.Oid
	prev := record.Hash(r.genesis(record.ChainJournal, task))
	var out []record.Row
	for i := range rows {
		row := rows[i].Row
		row.Index, row.Prev = int64(i), prev
		c := rows[i].it.Commit
		orig := c
		c.Tree, c.Parents, c.Signature = rows[i].Tree, nil, nil
		if !parent.IsZero() {
			c.Parents = []gitstore.Oid{parent}
		}
		c.Message = record.Message(rows[i].it.Summary, row.Bytes())
		if r.rowSigner == nil && !rows[i].it.ID.IsZero() && bytes.Equal(c.Message, orig.Message) && c.Tree == orig.Tree &&
			fmt.Sprint(c.Parents) == fmt.Sprint(orig.Parents) {
			// Unchanged: the writer's signed commit stays, as a forger
			// without the key must leave it.
			parent = rows[i].it.ID
		} else {
			parent = r.writeCommit(c, r.rowSigner)
		}
		prev = row.Hash()
		out = append(out, row)
	}
	r.git("update-ref", refs.Journal(task), parent.String())
	return out
}

// resignLedgers writes every ledger anew, each commit signed by signer.
func (r *mxRepo) resignLedgers(signer *keys.Identity) {
	r.t.Helper()
	for _, name := range strings.Fields(r.git("for-each-ref", "--format=%(refname)", refs.LedgerPrefix)) {
		var parent gitstore.Oid
		for _, it := range r.items(name) {
			c := it.Commit
			c.Parents = nil
			if !parent.IsZero() {
				c.Parents = []gitstore.Oid{parent}
			}
			parent = r.writeCommit(c, signer)
		}
		r.git("update-ref", name, parent.String())
	}
}

func (r *mxRepo) rewriteJournal(task string, edit func([]mxRow) []mxRow) []record.Row {
	r.t.Helper()
	return r.writeJournal(task, edit(r.journal(task)))
}

// setRow applies a tree edit to row i: a journal commit's tree holds only
// its own row's files, so a consistent forger edits that tree alone.
func (r *mxRepo) setRow(rows []mxRow, i int, set map[string]gitstore.Oid, remove ...string) {
	rows[i].Tree = r.editTree(rows[i].Tree, set, remove...)
}

func (r *mxRepo) journalTasks() []string {
	var out []string
	for _, name := range strings.Fields(r.git("for-each-ref", "--format=%(refname)", refs.JournalPrefix)) {
		task, err := refs.UnescapeTask(strings.TrimPrefix(name, refs.JournalPrefix))
		if err != nil {
			r.t.Fatal(err)
		}
		out = append(out, task)
	}
	return out
}

// payload stores a forged report payload and returns its bytes and blob.
func (r *mxRepo) payload(body string) ([]byte, gitstore.Oid) {
	b, err := report(body).Canonical()
	if err != nil {
		r.t.Fatal(err)
	}
	return b, r.write("blob", b)
}

// resignSpine rewrites the writer's spine from seq from on as an attacker
// holding signer (not the writer's key) would, consistently: edit may change
// artifact entries; every entry from there is re-chained (prev,
// prev_version_hash) and signed by signer; seals get the new journal head
// and a detached signature by signer; every journal is re-chained to the
// new entry hashes. It returns old -> new entry hashes.
func (r *mxRepo) resignSpine(signer *keys.Identity, from int64, edit func(*record.SpineArtifactEntry)) map[record.Hash]record.Hash {
	r.t.Helper()
	m := map[record.Hash]record.Hash{}
	mapH := func(h record.Hash) record.Hash {
		if n, ok := m[h]; ok {
			return n
		}
		return h
	}
	remap := func(task string) []record.Row {
		return r.rewriteJournal(task, func(rows []mxRow) []mxRow {
			for i := range rows {
				if rows[i].Row.Kind == record.KindArtifactPosted {
					a := rows[i].art(r.t)
					a.SpineEntryHash, a.PrevVersionHash = mapH(a.SpineEntryHash), mapH(a.PrevVersionHash)
					rows[i].setArt(a)
				}
			}
			return rows
		})
	}
	done := map[string]bool{}
	var parent gitstore.Oid
	prev := record.Hash(r.genesis(record.ChainSpine, mxWriter))
	for _, it := range r.items(refs.Spine(mxWriter)) {
		e, err := record.ParseSpineEntry(it.Record)
		if err != nil {
			r.t.Fatal(err)
		}
		if e.Header.Seq < from {
			parent, prev = it.ID, e.Hash
			continue
		}
		c := it.Commit
		var b []byte
		switch {
		case e.Artifact != nil:
			a := *e.Artifact
			a.Prev, a.PrevVersionHash = prev, mapH(a.PrevVersionHash)
			if edit != nil {
				edit(&a)
			}
			b = record.MustCanonical(a)
		case e.Seal != nil:
			s := *e.Seal
			rows := remap(s.TaskID)
			done[s.TaskID] = true
			s.Prev = prev
			if s.Rows > 0 {
				s.Head = rows[s.Rows-1].Hash()
			}
			b = record.MustCanonical(s)
			sig, err := signer.SignDetached(b)
			if err != nil {
				r.t.Fatal(err)
			}
			blob := r.write("blob", []byte(base64.StdEncoding.EncodeToString(sig)+"\n"))
			c.Tree = r.editTree(c.Tree, map[string]gitstore.Oid{record.SealSignatureFile: blob})
		}
		m[e.Hash] = record.Sum(b)
		prev = record.Sum(b)
		c.Parents = nil
		if !parent.IsZero() {
			c.Parents = []gitstore.Oid{parent}
		}
		c.Message = record.Message(it.Summary, b)
		parent = r.writeCommit(c, signer)
	}
	r.git("update-ref", refs.Spine(mxWriter), parent.String())
	for _, task := range r.journalTasks() {
		if !done[task] {
			remap(task)
		}
	}
	return m
}

type mxAudit struct {
	E  record.AuditEntry
	it mxItem
}

type mxAuditOpts struct {
	renumber  bool           // re-chain seq and prev_hmac
	mac       *keys.Identity // recompute every HMAC with this key (nil: keep them)
	signer    *keys.Identity // sign rewritten commits (nil: keep their stale signature)
	resignAll bool           // re-sign every commit, changed or not
}

func (r *mxRepo) auditEntries() []mxAudit {
	var out []mxAudit
	for _, it := range r.items(refs.Audit(mxWriter)) {
		e, err := record.ParseAuditEntry(it.Record)
		if err != nil {
			r.t.Fatal(err)
		}
		out = append(out, mxAudit{E: e, it: it})
	}
	return out
}

// postedAt returns the position (= seq) of the artifact.posted entry of v.
func (r *mxRepo) postedAt(v mxVersion) int {
	for i, a := range r.auditEntries() {
		if a.E.Event == record.EventArtifactPosted && a.E.Resource == string(v.Spine) {
			if a.E.Seq != int64(i) {
				r.t.Fatalf("audit entry %d has seq %d", i, a.E.Seq)
			}
			return i
		}
	}
	r.t.Fatalf("no artifact.posted entry for %s %s v%d", v.Task, v.Key, v.Version)
	return -1
}

// rewriteAudit rewrites the writer's audit mirror: edit changes the list of
// entries; commits whose payload did not change are kept as they are.
func (r *mxRepo) rewriteAudit(o mxAuditOpts, edit func([]mxAudit) []mxAudit) {
	r.t.Helper()
	list := r.auditEntries()
	if edit != nil {
		list = edit(list)
	}
	var parent gitstore.Oid
	prevMAC := r.genesis(record.ChainAudit, mxWriter)
	for i, x := range list {
		e := x.E
		if o.renumber {
			e.Seq, e.PrevHMAC = int64(i), prevMAC
		}
		if o.mac != nil {
			e.HMAC = o.mac.MAC(e.MACBytes())
		}
		c := x.it.Commit
		c.Parents, c.Signature = nil, nil
		if !parent.IsZero() {
			c.Parents = []gitstore.Oid{parent}
		}
		c.Message = record.Message(x.it.Summary, e.Bytes())
		switch {
		case bytes.Equal(gitstore.EncodeCommit(c), x.it.Payload) && !o.resignAll:
			parent = x.it.ID
		case o.signer != nil:
			parent = r.writeCommit(c, o.signer)
		default:
			c.Signature = x.it.Commit.Signature
			parent = r.writeCommit(c, nil)
		}
		prevMAC = e.HMAC
	}
	r.git("update-ref", refs.Audit(mxWriter), parent.String())
}

// resignRepository writes the repository chain anew, each commit signed by
// signer (its records unchanged).
func (r *mxRepo) resignRepository(signer *keys.Identity) {
	r.t.Helper()
	var parent gitstore.Oid
	for _, it := range r.items(refs.Repository) {
		c := it.Commit
		c.Parents = nil
		if !parent.IsZero() {
			c.Parents = []gitstore.Oid{parent}
		}
		parent = r.writeCommit(c, signer)
	}
	r.git("update-ref", refs.Repository, parent.String())
}

// replaceKeys publishes the attacker's key as the writer's, signed by the
// attacker, in the ref named for it, and deletes the writer's own key ref:
// the published keys then name the attacker's key alone.
func (r *mxRepo) replaceKeys(attacker *keys.Identity) {
	r.t.Helper()
	old := r.writerRef(mxWriter)
	head := r.rev(old)
	ref := refs.WriterKey(mxWriter, refs.KeyHex(attacker.PublicKey().Marshal()))
	r.git("update-ref", "-d", old)
	c, _ := r.commit(head)
	rb := record.MustCanonical(bernstein.KeyRecord{V: record.Version, Writer: mxWriter, Principal: keys.Principal(mxWriter), PublicKey: attacker.AuthorizedKey()})
	sig, err := attacker.SignDetached(rb)
	if err != nil {
		r.t.Fatal(err)
	}
	tree := r.editTree(c.Tree, map[string]gitstore.Oid{
		mxWriter + ".pub":            r.write("blob", []byte(attacker.AuthorizedKey()+"\n")),
		mxWriter + ".json":           r.write("blob", append(rb, '\n')),
		mxWriter + ".json.sig":       r.write("blob", []byte(base64.StdEncoding.EncodeToString(sig)+"\n")),
		bernstein.AllowedSignersFile: r.write("blob", []byte(keys.AllowedSignersLine(mxWriter, attacker.AuthorizedKey())+"\n")),
	})
	nc := gitstore.Commit{Tree: tree, Author: c.Author, Committer: c.Committer,
		Message: record.Message("publish key of "+mxWriter, rb)}
	r.git("update-ref", ref, r.writeCommit(nc, attacker).String())
}

// allowedSigners saves the published allowed_signers lines to a file.
func (r *mxRepo) allowedSigners() string {
	r.t.Helper()
	p := filepath.Join(r.t.TempDir(), "allowed_signers")
	if err := os.WriteFile(p, []byte(r.publishedSigners()), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// unpackAll turns every pack into loose objects.
func (r *mxRepo) unpackAll() {
	r.t.Helper()
	packs, _ := filepath.Glob(filepath.Join(r.dir, ".git", "objects", "pack", "*.pack"))
	stash := r.t.TempDir()
	for _, p := range packs {
		data, err := os.ReadFile(p)
		if err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stash, filepath.Base(p)), data, 0o644); err != nil {
			r.t.Fatal(err)
		}
		base := strings.TrimSuffix(p, ".pack")
		others, _ := filepath.Glob(base + ".*")
		for _, o := range others {
			os.Remove(o)
		}
	}
	for _, p := range packs {
		data, _ := os.ReadFile(filepath.Join(stash, filepath.Base(p)))
		if out, err := execGitStdin(r.dir, data, "unpack-objects", "-q").CombinedOutput(); err != nil {
			r.t.Fatalf("unpack-objects: %v %s", err, out)
		}
	}
}

func (r *mxRepo) loosePath(blob string) string {
	return filepath.Join(r.dir, ".git", "objects", blob[:2], blob[2:])
}

func mxAttacker(t *testing.T) *keys.Identity {
	t.Helper()
	id, _, err := keys.Create(t.TempDir(), mxWriter)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (r *mxRepo) identity() *keys.Identity {
	r.t.Helper()
	id, err := keys.Load(r.home)
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// ---------------------------------------------------------------------------
// The matrix.

func TestVerifyMatrix(t *testing.T) {
	tp := mxBuild(t)
	a2, a3 := tp.v(mxA, "summary", 2), tp.v(mxA, "summary", 3)
	preview, scores2 := tp.v(mxA, "preview", 1), tp.v(mxA, "scores", 2)
	notes2 := tp.v(mxB, "notes", 2)
	dash := tp.v(mxC, "dash", 1)
	if a2.Index != 2 || a3.Index != 4 || preview.Index != 3 || scores2.Index != 5 || notes2.Index != 3 || dash.Index != 2 {
		t.Fatalf("template layout changed: %+v", tp.versions)
	}
	run := func(name string, fn func(t *testing.T, r *mxRepo)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, tp.copy(t))
		})
	}

	run("clean", func(t *testing.T, r *mxRepo) {
		d, code := r.verify()
		if code != 0 || !d.Verified || len(d.Failures) != 0 || !d.HMACChecked || d.HMACNote != "" {
			t.Fatalf("clean repository: exit %d\n%s", code, d.raw)
		}
		checkVersions(t, d, tp.expect())
		if got := strings.Join(d.reportedTasks(), ","); got != "MX-1,MX-3,mx:2" {
			t.Fatalf("tasks reported: %s", got)
		}
		for task, want := range map[string]string{mxA: "unverifiable", mxB: "unverifiable", mxC: "verified"} {
			if got := d.identity(task); got != want {
				t.Fatalf("%s journal_identity %s, want %s", task, got, want)
			}
		}
		c := d.Counts
		if c["tasks"] != 3 || c["artifacts"] != 13 || c["verified"] != 13 || c["spine_entries"] != int(tp.seqs) ||
			c["hmacs_not_checked"] != 0 || c["hmacs_checked"] != c["audit_entries"] || c["audit_entries"] == 0 {
			t.Fatalf("counts: %v", c)
		}
		if _, code := r.verify("--strict"); code != 0 {
			t.Fatalf("--strict on a clean repository exited %d", code)
		}
		r.fsck()
	})

	run("clone", func(t *testing.T, r *mxRepo) {
		c := r.clone()
		pin := r.allowedSigners()
		d, code := c.verify("--allowed-signers", pin)
		if code != 0 || !d.Verified || d.HMACChecked || !strings.Contains(d.HMACNote, "not checked") || len(d.Failures) != 0 {
			t.Fatalf("pinned clone: exit %d\n%s", code, d.raw)
		}
		checkVersions(t, d, tp.expect())
		if d.identity(mxC) != "verified" {
			t.Fatalf("pinned clone: %s journal_identity %s", mxC, d.identity(mxC))
		}
		d, code = c.verify()
		if code != 0 || d.Verified || len(d.Failures) != 0 || d.HMACChecked || d.Note == "" {
			t.Fatalf("unpinned clone: exit %d\n%s", code, d.raw)
		}
		checkVersions(t, d, tp.expect().all("unverifiable"))
		if d.identity(mxC) != "unverifiable" {
			t.Fatalf("unpinned clone: %s journal_identity %s", mxC, d.identity(mxC))
		}
		if _, code := c.verify("--strict"); code != 1 {
			t.Fatalf("unpinned clone with --strict exited %d, want 1", code)
		}
		if _, code := c.verify("--strict", "--allowed-signers", pin); code != 0 {
			t.Fatalf("pinned clone with --strict exited %d, want 0", code)
		}
		// Verification is read-only: no key appears in the empty home.
		if ents, err := os.ReadDir(c.home); err != nil || len(ents) != 0 {
			t.Fatalf("verify touched BERNSTEIN_HOME %s: %v %v", c.home, err, ents)
		}
	})

	run("task-filter", func(t *testing.T, r *mxRepo) {
		// MX-1's journal rolled back: only MX-1's report shows it.
		r.git("update-ref", refs.Journal(mxA), refs.Journal(mxA)+"~1")
		d, code := r.verify("--task", mxB)
		if code != 0 || !d.Verified || strings.Join(d.reportedTasks(), ",") != mxB {
			t.Fatalf("--task %s: exit %d\n%s", mxB, code, d.raw)
		}
		checkVersions(t, d, mxExpect{mxB: tp.expect()[mxB]})
		d, code = r.verify("--task", mxA)
		if code != 1 || strings.Join(d.reportedTasks(), ",") != mxA {
			t.Fatalf("--task %s: exit %d\n%s", mxA, code, d.raw)
		}
		expectFailures(t, d, wVer(mxA, "scores", 2, 5, "spine_binding").at(mxWriter, scores2.Seq))
		if _, code := r.verify("--task", "NO-SUCH-TASK"); code != 2 {
			t.Fatalf("--task of an unknown task exited %d, want 2", code)
		}
	})

	run("not-a-repository", func(t *testing.T, r *mxRepo) {
		for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
			nr := &mxRepo{fixture: &fixture{t: t, dir: dir, home: r.home}}
			if _, code := nr.verify(); code != 2 {
				t.Fatalf("verify of %s exited %d, want 2", dir, code)
			}
		}
		// Nor does a failed verify create a key in an empty home.
		home := filepath.Join(t.TempDir(), "home")
		nr := &mxRepo{fixture: &fixture{t: t, dir: t.TempDir(), home: home}}
		nr.verify()
		if _, err := os.Stat(home); !os.IsNotExist(err) {
			t.Fatalf("verify created %s", home)
		}
	})

	// 1. One byte of a payload blob flipped, loose and packed.
	run("1-blob-byte-loose", func(t *testing.T, r *mxRepo) {
		r.unpackAll()
		path := r.loosePath(a2.Blob)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		i := bytes.Index(plain, []byte("SECRET"))
		plain[i+2] ^= 0x01
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write(plain)
		zw.Close()
		os.Chmod(path, 0o644)
		if err := os.WriteFile(path, z.Bytes(), 0o444); err != nil {
			t.Fatal(err)
		}
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxA, "summary", 2, 2, "blob").saying("summary v2 at journal index 2"))
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered"))
	})

	run("1-blob-byte-packed", func(t *testing.T, r *mxRepo) {
		// No deltas, so the flipped entry is the blob's own data.
		r.git("repack", "-a", "-d", "-q", "--window=0")
		idx, _ := filepath.Glob(filepath.Join(r.dir, ".git", "objects", "pack", "*.idx"))
		if len(idx) != 1 {
			t.Fatalf("%d packs after repack", len(idx))
		}
		data, _ := os.ReadFile(idx[0])
		out := mustOutput(t, execGitStdin(r.dir, data, "show-index"))
		off := int64(-1)
		for _, line := range strings.Split(string(out), "\n") {
			if fs := strings.Fields(line); len(fs) >= 2 && fs[1] == a2.Blob {
				off, _ = strconv.ParseInt(fs[0], 10, 64)
			}
		}
		if off < 0 {
			t.Fatalf("blob %s not in the pack", a2.Blob)
		}
		pack := strings.TrimSuffix(idx[0], ".idx") + ".pack"
		os.Chmod(pack, 0o644)
		b, _ := os.ReadFile(pack)
		b[off+8] ^= 0x40 // inside the entry's compressed data
		if err := os.WriteFile(pack, b, 0o444); err != nil {
			t.Fatal(err)
		}
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxA, "summary", 2, 2, "blob").saying("summary v2 at journal index 2"))
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered"))
	})

	// 2. One field of a row rewritten and the journal re-chained by an
	// attacker without keys; trees adjusted consistently.
	run("2-rewrite-key", func(t *testing.T, r *mxRepo) {
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			a := rows[3].art(t)
			a.Key = "previex"
			rows[3].setArt(a)
			r.setRow(rows, 3, map[string]gitstore.Oid{"artifacts/previex/v1.json": mustOid(t, a.Blob)}, "artifacts/preview/v1.json")
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		// The rows after the edited one had to be re-chained, unsigned.
		expectFailures(t, d, wVer(mxA, "previex", 1, 3, "spine_binding").saying("key"),
			wRowSig(mxA, "summary", 3, 4), wRowSig(mxA, "scores", 2, 5))
		e := tp.expect().set(mxA, 4, "tampered").set(mxA, 5, "tampered")
		e[mxA][3] = mxVersionState{Key: "previex", Version: 1, JournalIndex: 3, State: "tampered"}
		checkVersions(t, d, e)
	})

	run("2-rewrite-version", func(t *testing.T, r *mxRepo) {
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			a := rows[4].art(t)
			a.Version = 4
			rows[4].setArt(a)
			r.setRow(rows, 4, map[string]gitstore.Oid{"artifacts/summary/v4.json": mustOid(t, a.Blob)}, "artifacts/summary/v3.json")
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d,
			wVer(mxA, "summary", 4, 4, "version_chain"),
			wVer(mxA, "summary", 4, 4, "spine_binding").saying("version"),
			wRowSig(mxA, "scores", 2, 5))
		e := tp.expect().set(mxA, 5, "tampered")
		e[mxA][4] = mxVersionState{Key: "summary", Version: 4, JournalIndex: 4, State: "tampered"}
		checkVersions(t, d, e)
	})

	run("2-rewrite-content-hash", func(t *testing.T, r *mxRepo) {
		// The payload replaced: blob, size, content hash and tree agree.
		body, blob := r.payload("forged summary, every field consistent")
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			a := rows[2].art(t)
			a.ContentHash, a.Blob, a.Size = record.Sum(body), blob.String(), int64(len(body))
			rows[2].setArt(a)
			r.setRow(rows, 2, map[string]gitstore.Oid{"artifacts/summary/v2.json": blob})
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxA, "summary", 2, 2, "spine_binding").saying("content_hash"),
			wRowSig(mxA, "preview", 1, 3), wRowSig(mxA, "summary", 3, 4), wRowSig(mxA, "scores", 2, 5))
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered").set(mxA, 3, "tampered").set(mxA, 4, "tampered").set(mxA, 5, "tampered"))
	})

	run("2-rewrite-content-hash-only", func(t *testing.T, r *mxRepo) {
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			a := rows[2].art(t)
			a.ContentHash = record.Sum([]byte("something else"))
			rows[2].setArt(a)
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxA, "summary", 2, 2, "content_hash"),
			wRowSig(mxA, "preview", 1, 3), wRowSig(mxA, "summary", 3, 4), wRowSig(mxA, "scores", 2, 5))
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered").set(mxA, 3, "tampered").set(mxA, 4, "tampered").set(mxA, 5, "tampered"))
	})

	run("2-rewrite-task-id", func(t *testing.T, r *mxRepo) {
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			rows[3].Row.TaskID = mxB
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wTask(mxA, 3, "journal_chain").saying(`row belongs to task "mx:2"`),
			wRowSig(mxA, "preview", 1, 3), wRowSig(mxA, "summary", 3, 4), wRowSig(mxA, "scores", 2, 5))
		// The chain cannot vouch for anything from the broken row on.
		checkVersions(t, d, tp.expect().set(mxA, 3, "tampered").set(mxA, 4, "tampered").set(mxA, 5, "tampered"))
	})

	run("2-rewrite-task-id-moved", func(t *testing.T, r *mxRepo) {
		// MX-1's last row moved into mx:2's journal, re-chained on both sides.
		var moved mxRow
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			moved = rows[5]
			return rows[:5]
		})
		r.rewriteJournal(mxB, func(rows []mxRow) []mxRow {
			moved.Row.TaskID = mxB // its tree, holding only its own file, moves along
			return append(rows, moved)
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d,
			wVer(mxA, "scores", 2, 5, "spine_binding").at(mxWriter, scores2.Seq).saying("does not hold"),
			wVer(mxB, "scores", 2, 4, "version_chain"),
			wVer(mxB, "scores", 2, 4, "spine_binding").saying("task_id"))
		e := tp.expect()
		e[mxA] = e[mxA][:5]
		e[mxB] = append(e[mxB], mxVersionState{Key: "scores", Version: 2, JournalIndex: 4, State: "tampered"})
		checkVersions(t, d, e)
	})

	// 3. A middle row deleted, the journal re-chained, the trees too.
	run("3-delete-middle-row", func(t *testing.T, r *mxRepo) {
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			rows = append(rows[:2:2], rows[3:]...)
			r.setRow(rows, 2, nil, "artifacts/summary/v2.json")
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d,
			wVer(mxA, "summary", 2, 2, "spine_binding").at(mxWriter, a2.Seq).saying("does not hold"),
			wVer(mxA, "preview", 1, 2, "spine_binding").saying("journal_index"),
			wVer(mxA, "summary", 3, 3, "version_chain"),
			wVer(mxA, "summary", 3, 3, "spine_binding").saying("journal_index"),
			wVer(mxA, "scores", 2, 4, "spine_binding").saying("journal_index"))
		e := tp.expect()
		e[mxA] = []mxVersionState{
			{Key: "summary", Version: 1, JournalIndex: 0, State: "verified"},
			{Key: "scores", Version: 1, JournalIndex: 1, State: "verified"},
			{Key: "preview", Version: 1, JournalIndex: 2, State: "tampered"},
			{Key: "summary", Version: 3, JournalIndex: 3, State: "tampered"},
			{Key: "scores", Version: 2, JournalIndex: 4, State: "tampered"},
		}
		checkVersions(t, d, e)
	})

	// 4. A journal ref reset to an earlier commit.
	run("4-reset-open-journal", func(t *testing.T, r *mxRepo) {
		r.git("update-ref", refs.Journal(mxA), refs.Journal(mxA)+"~2")
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d,
			wVer(mxA, "summary", 3, 4, "spine_binding").at(mxWriter, a3.Seq).saying("does not hold"),
			wVer(mxA, "scores", 2, 5, "spine_binding").at(mxWriter, scores2.Seq).saying("does not hold"))
		e := tp.expect()
		e[mxA] = e[mxA][:4]
		checkVersions(t, d, e)
		if d.identity(mxA) != "unverifiable" {
			t.Fatalf("open task identity %s", d.identity(mxA))
		}
	})

	run("4-reset-sealed-journal", func(t *testing.T, r *mxRepo) {
		r.git("update-ref", refs.Journal(mxC), refs.Journal(mxC)+"~1")
		d, code := r.verify()
		if code != 1 || d.identity(mxC) != "mismatched" {
			t.Fatalf("exit %d, identity %s", code, d.identity(mxC))
		}
		expectFailures(t, d,
			wVer(mxC, "dash", 1, 2, "spine_binding").at(mxWriter, dash.Seq),
			wTask(mxC, nullN, "journal_seal"))
		e := tp.expect()
		e[mxC] = e[mxC][:2]
		checkVersions(t, d, e)
	})

	// 5. A forged row appended.
	run("5-append-made-up-spine-hash", func(t *testing.T, r *mxRepo) {
		body, blob := r.payload("a forged version no spine seals")
		r.rewriteJournal(mxB, func(rows []mxRow) []mxRow {
			last := rows[len(rows)-1]
			row, err := record.NewRow(record.KindArtifactPosted, mxB, 0, "", "agent-b", record.ArtifactPosted{
				Key: "forged", ArtifactType: artifact.TypeReport, Version: 1, ContentHash: record.Sum(body),
				Blob: blob.String(), Size: int64(len(body)), SpineEntryHash: record.Sum([]byte("made up")),
			})
			if err != nil {
				t.Fatal(err)
			}
			last.it.Summary = "artifact_posted forged v1"
			last.Row = row
			last.Tree = r.editTree(gitstore.EmptyTree, map[string]gitstore.Oid{"artifacts/forged/v1.json": blob})
			return append(rows, last)
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxB, "forged", 1, 4, "spine_binding").saying("no spine entry"))
		e := tp.expect()
		e[mxB] = append(e[mxB], mxVersionState{Key: "forged", Version: 1, JournalIndex: 4, State: "tampered"})
		checkVersions(t, d, e)
	})

	run("5-append-duplicate-row", func(t *testing.T, r *mxRepo) {
		r.rewriteJournal(mxB, func(rows []mxRow) []mxRow { return append(rows, rows[3]) })
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d,
			wVer(mxB, "notes", 2, 4, "version_chain"),
			wVer(mxB, "notes", 2, 4, "spine_binding").saying("journal_index"))
		e := tp.expect()
		e[mxB] = append(e[mxB], mxVersionState{Key: "notes", Version: 2, JournalIndex: 4, State: "tampered"})
		checkVersions(t, d, e)
	})

	run("5-append-to-sealed-journal", func(t *testing.T, r *mxRepo) {
		r.rewriteJournal(mxC, func(rows []mxRow) []mxRow { return append(rows, rows[2]) })
		d, code := r.verify()
		if code != 1 || d.identity(mxC) != "mismatched" {
			t.Fatalf("exit %d identity %s", code, d.identity(mxC))
		}
		expectFailures(t, d,
			wVer(mxC, "dash", 1, 3, "version_chain"),
			wVer(mxC, "dash", 1, 3, "spine_binding"),
			wTask(mxC, nullN, "journal_seal").saying("after its seal"))
		e := tp.expect()
		e[mxC] = append(e[mxC], mxVersionState{Key: "dash", Version: 1, JournalIndex: 3, State: "tampered"})
		checkVersions(t, d, e)
	})

	// 6. Two tasks' journals swapped.
	run("6-swap-journals", func(t *testing.T, r *mxRepo) {
		ja, jb := r.rev(refs.Journal(mxA)), r.rev(refs.Journal(mxB))
		r.git("update-ref", refs.Journal(mxA), jb.String())
		r.git("update-ref", refs.Journal(mxB), ja.String())
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		wants := []mxWant{
			wTask(mxA, 0, "journal_chain").saying(`row belongs to task "mx:2"`),
			wTask(mxB, 0, "journal_chain").saying(`row belongs to task "MX-1"`),
		}
		e := tp.expect()
		for _, v := range tp.versions {
			if v.Task == mxC {
				continue
			}
			other := map[string]string{mxA: mxB, mxB: mxA}[v.Task]
			// Its own task misses it; the other task holds it bound elsewhere.
			wants = append(wants, wVer(v.Task, v.Key, v.Version, v.Index, "spine_binding").at(mxWriter, v.Seq),
				wVer(other, v.Key, v.Version, v.Index, "spine_binding").saying("task_id"))
		}
		expectFailures(t, d, wants...)
		e[mxA], e[mxB] = e[mxB], e[mxA]
		checkVersions(t, d, e.set(mxA, 0, "tampered").set(mxA, 1, "tampered").set(mxA, 2, "tampered").set(mxA, 3, "tampered").
			set(mxB, 0, "tampered").set(mxB, 1, "tampered").set(mxB, 2, "tampered").set(mxB, 3, "tampered").
			set(mxB, 4, "tampered").set(mxB, 5, "tampered"))
	})

	// 7. A spine entry rewritten (summary v2 replaced) and re-signed with an
	// attacker's key, later entries re-chained and re-signed, journals and
	// seal made consistent: only the signatures can tell.
	run("7-spine-resigned", func(t *testing.T, r *mxRepo) {
		body, blob := r.payload("forged summary under a forged spine")
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			a := rows[2].art(t)
			a.ContentHash, a.Blob, a.Size = record.Sum(body), blob.String(), int64(len(body))
			rows[2].setArt(a)
			r.setRow(rows, 2, map[string]gitstore.Oid{"artifacts/summary/v2.json": blob})
			return rows
		})
		m := r.resignSpine(mxAttacker(t), a2.Seq, func(e *record.SpineArtifactEntry) {
			if e.TaskID == mxA && e.Key == "summary" && e.Version == 2 {
				e.ContentHash = record.Sum(body)
			}
		})
		if m[a2.Spine] == a2.Spine || m[a3.Spine] == a3.Spine {
			t.Fatalf("the forged spine did not change entry hashes")
		}
		d, code := r.verify()
		if code != 1 || d.identity(mxC) != "mismatched" {
			t.Fatalf("exit %d identity %s", code, d.identity(mxC))
		}
		wants := []mxWant{
			wSeq(mxWriter, tp.sealSeq, "spine_signature").saying("not the pinned key"),
			wTask(mxC, nullN, "journal_seal"),
		}
		e := tp.expect()
		for _, v := range tp.versions {
			if v.Seq >= a2.Seq {
				// The re-signed entry, the version it binds, and the audit
				// mirror's post, which names the entry the attacker replaced.
				wants = append(wants,
					mxWant{v.Task, v.Key, v.Version, v.Index, mxWriter, v.Seq, "spine_signature", "not the pinned key"},
					wVer(v.Task, v.Key, v.Version, v.Index, "spine_signature"),
					mxWant{v.Task, v.Key, v.Version, v.Index, mxWriter, int64(r.postedAt(v)), "audit_mirror", "no spine entry"})
				e.set(v.Task, v.Index, "tampered")
			}
		}
		expectFailures(t, d, wants...)
		checkVersions(t, d, e)
	})

	// 8. The audit entry of summary v2's post dropped.
	run("8-drop-audit-entry-consistent", func(t *testing.T, r *mxRepo) {
		// Whoever holds both of the writer's secrets re-chains the rest:
		// the chain holds, but a post has no audit entry.
		k := r.postedAt(a2)
		id := r.identity()
		r.rewriteAudit(mxAuditOpts{renumber: true, mac: id, signer: id}, func(l []mxAudit) []mxAudit {
			return append(l[:k:k], l[k+1:]...)
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxA, "summary", 2, 2, "audit_mirror").saying("no artifact.posted"))
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered"))
	})

	run("8-drop-audit-entry-stale-hmacs", func(t *testing.T, r *mxRepo) {
		// Re-chained and re-signed, but without the HMAC key.
		k := r.postedAt(a2)
		n := len(r.auditEntries())
		r.rewriteAudit(mxAuditOpts{renumber: true, signer: r.identity()}, func(l []mxAudit) []mxAudit {
			return append(l[:k:k], l[k+1:]...)
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		wants := []mxWant{wVer(mxA, "summary", 2, 2, "audit_mirror")}
		for s := k; s < n-1; s++ {
			wants = append(wants, wSeq(mxWriter, int64(s), "audit_hmac"))
		}
		expectFailures(t, d, wants...)
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered"))
	})

	run("8-drop-audit-entry-no-rechain", func(t *testing.T, r *mxRepo) {
		// The later commits re-parented as they are: a gap in seq, stale
		// signatures.
		k := r.postedAt(a2)
		n := len(r.auditEntries())
		r.rewriteAudit(mxAuditOpts{}, func(l []mxAudit) []mxAudit { return append(l[:k:k], l[k+1:]...) })
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		wants := []mxWant{
			wVer(mxA, "summary", 2, 2, "audit_mirror"),
			wSeq(mxWriter, int64(k+1), "audit_chain").saying("an entry is missing"),
		}
		for s := k + 1; s < n; s++ {
			wants = append(wants, wSeq(mxWriter, int64(s), "audit_signature"))
		}
		expectFailures(t, d, wants...)
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered"))
	})

	// 9. One HMAC corrupted, nothing re-signed.
	run("9-corrupt-hmac", func(t *testing.T, r *mxRepo) {
		k := r.postedAt(a2)
		n := len(r.auditEntries())
		r.rewriteAudit(mxAuditOpts{}, func(l []mxAudit) []mxAudit {
			h := []byte(l[k].E.HMAC)
			if h[0] == '0' {
				h[0] = '1'
			} else {
				h[0] = '0'
			}
			l[k].E.HMAC = string(h)
			return l
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		wants := []mxWant{
			wSeq(mxWriter, int64(k), "audit_hmac"),
			wSeq(mxWriter, int64(k+1), "audit_chain").saying("prev_hmac"),
		}
		for s := k; s < n; s++ {
			wants = append(wants, wSeq(mxWriter, int64(s), "audit_signature"))
		}
		expectFailures(t, d, wants...)
		// The versions' own evidence (blob, spine, signature) still holds.
		checkVersions(t, d, tp.expect())
	})

	// 10. The writer's published key replaced by an attacker's, spine and audit
	// re-signed with it (entries unchanged).
	run("10-keys-replaced", func(t *testing.T, r *mxRepo) {
		pin := r.allowedSigners()
		attacker := mxAttacker(t)
		r.rowSigner = attacker
		r.resignLedgers(attacker)
		r.resignSpine(attacker, 0, nil)
		r.rewriteAudit(mxAuditOpts{signer: attacker, resignAll: true}, nil)
		r.resignRepository(attacker)
		r.replaceKeys(attacker)
		n := len(r.auditEntries())
		// Plain git now "verifies" the forgery against the published keys.
		if out, err := r.gitErr("-c", "gpg.ssh.allowedSignersFile="+r.allowedSigners(), "verify-commit", refs.Spine(mxWriter)); err != nil {
			t.Fatalf("forged spine does not verify against the forged keys: %v %s", err, out)
		}
		wants := []mxWant{wTask(mxC, nullN, "journal_seal"), wSeq(mxWriter, tp.sealSeq, "spine_signature"),
			{"", "", nullN, nullN, "", nullN, "repository_identity", "not the pinned key"}}
		for _, v := range tp.versions {
			wants = append(wants,
				mxWant{v.Task, v.Key, v.Version, v.Index, mxWriter, v.Seq, "spine_signature", "not the pinned key"},
				wVer(v.Task, v.Key, v.Version, v.Index, "spine_signature"))
		}
		for s := 0; s < n; s++ {
			wants = append(wants, wSeq(mxWriter, int64(s), "audit_signature").saying("not the pinned key"))
		}
		// Every ledger row, re-signed: MX-1 and mx:2 were created and
		// claimed, MX-3 also started and completed.
		for task, rows := range map[string]int{mxA: 2, mxB: 2, mxC: 4} {
			for i := 0; i < rows; i++ {
				wants = append(wants, wTask(task, nullN, "row_signature").saying(fmt.Sprintf("ledger of %s at index %d", task, i)))
			}
		}
		// On the writer's own host its own key is trusted.
		d, code := r.verify()
		if code != 1 || !d.HMACChecked {
			t.Fatalf("own host: exit %d\n%s", code, d.raw)
		}
		// Signatures are checked in parallel; the report is the same on
		// every run all the same.
		if again, _ := r.verify(); again.raw != d.raw {
			t.Fatalf("two runs gave different reports:\n%s\n%s", d.raw, again.raw)
		}
		expectFailures(t, d, wants...)
		checkVersions(t, d, tp.expect().all("tampered"))
		// On a clone that pins the original key.
		c := r.clone()
		d, code = c.verify("--allowed-signers", pin)
		if code != 1 || d.HMACChecked {
			t.Fatalf("pinned clone: exit %d\n%s", code, d.raw)
		}
		expectFailures(t, d, wants...)
		checkVersions(t, d, tp.expect().all("tampered"))
		// On a clone that pins nothing: never verified.
		d, code = c.verify()
		if code != 0 || d.Verified || len(d.Failures) != 0 {
			t.Fatalf("unpinned clone: exit %d\n%s", code, d.raw)
		}
		checkVersions(t, d, tp.expect().all("unverifiable"))
		if d.identity(mxC) == "verified" {
			t.Fatalf("unpinned clone: sealed journal verified by the attacker's key")
		}
		if _, code := c.verify("--strict"); code != 1 {
			t.Fatalf("unpinned clone with --strict exited %d", code)
		}
	})

	// 11. A payload blob deleted from the object store.
	run("11-delete-blob", func(t *testing.T, r *mxRepo) {
		r.unpackAll()
		if err := os.Remove(r.loosePath(a2.Blob)); err != nil {
			t.Fatal(err)
		}
		if out, err := r.gitErr("cat-file", "-e", a2.Blob); err == nil {
			t.Fatalf("blob still present: %s", out)
		}
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxA, "summary", 2, 2, "blob").saying("missing"))
		checkVersions(t, d, tp.expect().set(mxA, 2, "tampered"))
	})

	// Beyond the list: what plain git shows at the journal head, and
	// partial rollbacks that only the audit mirror or the ledger remember.
	run("12-row-tree-extra-file", func(t *testing.T, r *mxRepo) {
		// The head commit's tree (not its row) gains an earlier version's
		// path: `git show J:artifacts/summary/v1.json` prints the forgery.
		_, blob := r.payload("forged v1, shown by git show at the journal head")
		r.rewriteJournal(mxA, func(rows []mxRow) []mxRow {
			rows[5].Tree = r.editTree(rows[5].Tree, map[string]gitstore.Oid{"artifacts/summary/v1.json": blob})
			return rows
		})
		if !strings.Contains(r.git("show", refs.Journal(mxA)+":artifacts/summary/v1.json"), "forged v1") {
			t.Fatalf("the head tree was not changed")
		}
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wVer(mxA, "scores", 2, 5, "journal_tree").saying("not exactly its own artifacts/scores/v2.json"))
		checkVersions(t, d, tp.expect().set(mxA, 5, "tampered"))
	})

	run("12-work-row-tree-extra-file", func(t *testing.T, r *mxRepo) {
		// A gate row's commit, re-made with a tree that also holds a file
		// the row does not store: the row and its chain are untouched.
		s := r.open()
		res, err := s.RunGate(mxB, "lint", []string{"sh", "-c", "echo lint ok"}, bernstein.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if d, code := r.verify(); code != 0 {
			t.Fatalf("after a gate run: exit %d\n%s", code, d.dump())
		}
		_, blob := r.payload("riding along")
		r.rewriteJournal(mxB, func(rows []mxRow) []mxRow {
			last := &rows[len(rows)-1]
			last.Tree = r.editTree(last.Tree, map[string]gitstore.Oid{"artifacts/summary/v9.json": blob})
			return rows
		})
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d, wTask(mxB, res.JournalIndex, "journal_tree").saying("not exactly its own outputs/"),
			wTask(mxB, res.JournalIndex, "row_signature").saying("not signed"))
		checkVersions(t, d, tp.expect())
	})

	run("13-rollback-seal", func(t *testing.T, r *mxRepo) {
		// The spine's last entry (MX-3's seal) dropped: the ledger still
		// says completed, so the journal is not "still open".
		r.git("update-ref", refs.Spine(mxWriter), refs.Spine(mxWriter)+"~1")
		d, code := r.verify()
		if code != 1 || d.identity(mxC) != "mismatched" {
			t.Fatalf("exit %d identity %s", code, d.identity(mxC))
		}
		expectFailures(t, d, wTask(mxC, nullN, "journal_seal").saying("task.completed at index 3, but no spine entry seals"))
		checkVersions(t, d, tp.expect())
	})

	run("13-rollback-ledger", func(t *testing.T, r *mxRepo) {
		// task.completed dropped from MX-3's ledger: the audit mirror and
		// the seal both name it.
		completed := -1
		for i, a := range r.auditEntries() {
			if a.E.Event == record.KindTaskCompleted && a.E.TaskID == mxC {
				completed = i
			}
		}
		r.git("update-ref", refs.Ledger(mxC), refs.Ledger(mxC)+"~1")
		d, code := r.verify()
		if code != 1 || d.identity(mxC) != "mismatched" {
			t.Fatalf("exit %d identity %s", code, d.identity(mxC))
		}
		expectFailures(t, d,
			mxWant{mxC, "", nullN, nullN, mxWriter, int64(completed), "audit_mirror", "the ledger of MX-3 does not hold"},
			wTask(mxC, nullN, "journal_seal").saying("which the ledger does not hold"))
		checkVersions(t, d, tp.expect())
	})

	run("13-rollback-post", func(t *testing.T, r *mxRepo) {
		// MX-3's last post and its seal dropped from the spine, its row from
		// the journal: everything the spine and journal say agrees.
		k := r.postedAt(dash)
		r.git("update-ref", refs.Spine(mxWriter), refs.Spine(mxWriter)+"~2")
		r.git("update-ref", refs.Journal(mxC), refs.Journal(mxC)+"~1")
		d, code := r.verify()
		if code != 1 || d.identity(mxC) != "mismatched" {
			t.Fatalf("exit %d identity %s", code, d.identity(mxC))
		}
		expectFailures(t, d,
			mxWant{mxC, "dash", 1, 2, mxWriter, int64(k), "audit_mirror", "no spine entry"},
			wTask(mxC, nullN, "journal_seal"))
		e := tp.expect()
		e[mxC] = e[mxC][:2]
		checkVersions(t, d, e)
	})

	run("13-ledger-deleted", func(t *testing.T, r *mxRepo) {
		r.git("update-ref", "-d", refs.Ledger(mxB))
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		expectFailures(t, d,
			mxWant{mxB, "", nullN, nullN, mxWriter, anyN, "audit_mirror", "task.created"},
			mxWant{mxB, "", nullN, nullN, mxWriter, anyN, "audit_mirror", "task.claimed"})
		checkVersions(t, d, tp.expect())
	})

	run("13-rollback-work-row", func(t *testing.T, r *mxRepo) {
		// A checkpoint row dropped from the end of an open journal: no
		// spine entry covers it, the audit mirror does.
		id := strings.TrimSpace(r.git("-c", "user.name=t", "-c", "user.email=t@example.com",
			"commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-m", "work"))
		s := r.open()
		if _, err := s.Checkpoint(mxB, id, ""); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if d, code := r.verify(); code != 0 {
			t.Fatalf("after a checkpoint: exit %d\n%s", code, d.dump())
		}
		n := len(r.auditEntries())
		r.git("update-ref", refs.Journal(mxB), refs.Journal(mxB)+"~1")
		d, code := r.verify()
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		// The audit mirror tells on any host; the head this host's writer
		// wrote, here.
		expectFailures(t, d, mxWant{mxB, "", nullN, nullN, mxWriter, int64(n - 1), "audit_mirror", "the journal of mx:2 does not hold"},
			wTask(mxB, 4, "rollback").saying("rolled back"))
		checkVersions(t, d, tp.expect())
	})
}
