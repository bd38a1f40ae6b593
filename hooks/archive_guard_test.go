package hooks_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/internal/forgetest"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// The guard and the archive of ended tasks (docs/archive.md, Remotes): an
// archive ref moves only forward, by commits its writer's pinned key signed
// that pass the archive checks; a task's refs are deleted only when an
// archive names their chains, after the push, at the deleted heads or
// further. Everything here goes through a real git push to a bare remote
// whose pre-receive hook is the guard.

// ended creates task, posts twice and completes it.
func (h *host) ended(task string) {
	h.t.Helper()
	h.task(task)
	h.post(task, "summary", "first")
	h.post(task, "summary", "second")
	for _, k := range []string{record.KindTaskStarted, record.KindTaskCompleted} {
		if _, err := h.s.Transition(task, k, "", ""); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *host) forger(signer *keys.Identity) *forgetest.Forger {
	return &forgetest.Forger{T: h.t, Dir: h.dir, Signer: signer, Writer: h.writer}
}

// pruned pushes every refs/bernstein/* ref, deleting on the remote those
// the host no longer has, in one atomic push.
var pruned = []string{"--atomic", "--prune", allBernstein}

// archived is a guarded remote holding ended tasks E-1 to E-3 and open task
// T-1, and E-1 archived (its refs deleted) through the guard.
func archived(t *testing.T) (*host, *remote, *keys.Identity) {
	t.Helper()
	h, r := guarded(t)
	for _, task := range []string{"E-1", "E-2", "E-3"} {
		h.ended(task)
	}
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push of the ended tasks refused:\n%s", out)
	}
	id, err := keys.Load(h.home)
	if err != nil {
		t.Fatal(err)
	}
	h.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-1"}})
	if out, code := h.push(r, pruned...); code != 0 {
		t.Fatalf("the guard refused an honest archive:\n%s", out)
	}
	return h, r, id
}

func sameAsRemote(t *testing.T, h *host, r *remote) {
	t.Helper()
	local := h.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/bernstein/")
	if got := strings.TrimSpace(r.refs()); got != local {
		t.Fatalf("remote refs:\n%s\nlocal refs:\n%s", got, local)
	}
}

// TestGuardAcceptsArchives: honest archive commits pass, with the tasks'
// refs deleted in the same push or left (an entry at the ref's head), and a
// task reopened, ended again and archived at its new heads (the deleted
// ref's chain extended by the entry).
func TestGuardAcceptsArchives(t *testing.T) {
	h, r, id := archived(t)
	sameAsRemote(t, h, r)
	if strings.Contains(r.refs(), refs.Journal("E-1")+" ") || !strings.Contains(r.refs(), refs.Archive("host-a")+" ") {
		t.Fatalf("the remote holds E-1's journal ref, or no archive:\n%s", r.refs())
	}
	h.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-2"}, Keep: true})
	h.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-3"}})
	if out, code := h.push(r, pruned...); code != 0 {
		t.Fatalf("two archive commits refused:\n%s", out)
	}
	sameAsRemote(t, h, r)
	// E-2 reopened: its ref moves on; ended again, archived at the new heads
	// and its ref deleted, the remote's ref being the old head.
	if _, err := h.s.Transition("E-2", record.KindTaskReopened, "", ""); err != nil {
		t.Fatal(err)
	}
	tok, err := h.s.Claim("E-2", "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	h.tokens["E-2"] = tok
	if _, err := h.s.Transition("E-2", record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	h.post("E-2", "summary", "third")
	if _, err := h.s.Transition("E-2", record.KindTaskCompleted, "", ""); err != nil {
		t.Fatal(err)
	}
	h.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-2"}})
	if out, code := h.push(r, pruned...); code != 0 {
		t.Fatalf("the re-archive of a reopened task refused:\n%s", out)
	}
	sameAsRemote(t, h, r)
	if out, code := r.cli("audit", "verify", "--output-json"); code > 1 || strings.Contains(out, `"check": "archive_`) {
		t.Fatalf("audit verify on the remote: exit %d\n%s", code, out)
	}
}

// TestGuardRefusesArchives: each forged archive push is refused, naming
// the check, and the remote's refs do not move.
func TestGuardRefusesArchives(t *testing.T) {
	h, r, id := archived(t)
	before := r.refs()
	other, _, err := keys.Create(t.TempDir(), "mallory")
	if err != nil {
		t.Fatal(err)
	}
	older := func(c *host, task string) [2]string {
		return [2]string{c.git("rev-parse", refs.Journal(task)+"~1"), c.git("rev-parse", refs.Ledger(task))}
	}
	edit := func(fn func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid)) forgetest.ArchiveSpec {
		return forgetest.ArchiveSpec{Tasks: []string{"E-2"}, Edit: fn}
	}
	cases := []struct {
		name   string
		tamper func(c *host) []string
		want   []string
	}{
		{"signed by another key", func(c *host) []string {
			c.forger(other).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-2"}})
			return pruned
		}, []string{"[archive_signature]"}},
		{"unsigned", func(c *host) []string {
			c.forger(nil).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-2"}})
			return pruned
		}, []string{"[archive_signature]"}},
		{"record lists other heads than the tree", func(c *host) []string {
			h := older(c, "E-2")
			c.forger(id).Archive(edit(func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Add[0].Journal, rec.Add[0].JournalRows = h[0], rec.Add[0].JournalRows-1
			}))
			return pruned
		}, []string{"[archive_tree]", "the record adds it at"}},
		{"tree adds a task the record does not list", func(c *host) []string {
			j, l := c.git("rev-parse", refs.Journal("E-3")), c.git("rev-parse", refs.Ledger("E-3"))
			c.forger(id).Archive(edit(func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				u.Add = append(u.Add, archive.Entry{Task: "E-3", Journal: oidOf(t, j), Ledger: oidOf(t, l)})
			}))
			return pruned
		}, []string{"[archive_tree]", "which the record does not add"}},
		{"gitlink not a parent", func(c *host) []string {
			c.forger(id).Archive(edit(func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				*parents = (*parents)[:len(*parents)-1]
			}))
			return pruned
		}, []string{"[archive_parents]", "is not a parent"}},
		{"row count not the chain's", func(c *host) []string {
			c.forger(id).Archive(edit(func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Add[0].JournalRows++
			}))
			return pruned
		}, []string{"[archive_rows]"}},
		{"task not ended", func(c *host) []string {
			c.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"T-1"}})
			return pruned
		}, []string{"[archive_sealed]"}},
		{"seq skipped", func(c *host) []string {
			c.forger(id).Archive(edit(func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) { rec.Seq++ }))
			return pruned
		}, []string{"[archive_chain]"}},
		{"seq repeated", func(c *host) []string {
			c.forger(id).Archive(edit(func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) { rec.Seq-- }))
			return pruned
		}, []string{"[non_fast_forward]"}},
		{"prev not the previous record", func(c *host) []string {
			c.forger(id).Archive(edit(func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Prev = record.Genesis("another-repository", record.ChainArchive, "host-a")
			}))
			return pruned
		}, []string{"[archive_chain]", "previous archive record's hash"}},
		{"task refs deleted with no archive", func(c *host) []string {
			c.git("update-ref", "-d", refs.Journal("E-2"))
			c.git("update-ref", "-d", refs.Ledger("E-2"))
			return pruned
		}, []string{"[deletion]", "no archive"}},
		{"archive names an older head", func(c *host) []string {
			c.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-2"}, Heads: map[string][2]string{"E-2": older(c, "E-2")}})
			return pruned
		}, []string{"[non_fast_forward]", "a rollback"}},
		{"archive rewound", func(c *host) []string {
			c.git("update-ref", "-d", refs.Archive("host-a"))
			c.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-2"}, Keep: true})
			return []string{"+" + refs.Archive("host-a") + ":" + refs.Archive("host-a")}
		}, []string{"[non_fast_forward]"}},
		{"archive ref deleted", func(c *host) []string {
			return []string{":" + refs.Archive("host-a")}
		}, []string{"[deletion]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := h.copyRepo()
			out, code := c.push(r, tc.tamper(c)...)
			if code == 0 {
				t.Fatalf("push accepted:\n%s", out)
			}
			mustContain(t, out, append([]string{"pre-receive hook declined"}, tc.want...)...)
			if after := r.refs(); after != before {
				t.Fatalf("the remote's refs moved:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestGuardRefusesForeignArchive: a first archive commit bound to another
// repository (its prev the genesis of another id), or copied whole from
// another repository of the same writer key, is refused.
func TestGuardRefusesForeignArchive(t *testing.T) {
	h, r := guarded(t)
	h.ended("E-1")
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push refused:\n%s", out)
	}
	id, err := keys.Load(h.home)
	if err != nil {
		t.Fatal(err)
	}
	before := r.refs()
	t.Run("genesis of another repository", func(t *testing.T) {
		c := h.copyRepo()
		c.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-1"}, RepoID: "another-repository"})
		out, code := c.push(r, pruned...)
		if code == 0 {
			t.Fatalf("push accepted:\n%s", out)
		}
		mustContain(t, out, "[archive_chain]", "another repository")
	})
	t.Run("copied from another repository", func(t *testing.T) {
		c := h.copyRepo()
		dir := filepath.Join(t.TempDir(), "twin")
		if _, err := bernstein.Init(bernstein.Options{Repo: dir, Home: c.home}, "host-a"); err != nil {
			t.Fatal(err)
		}
		twin := &host{t: t, root: c.root, dir: dir, home: c.home, writer: "host-a", tokens: map[string]string{}}
		twin.reopen()
		twin.ended("E-1")
		twin.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-1"}})
		c.git("fetch", "-q", dir, refs.Archive("host-a")+":"+refs.Archive("host-a"))
		out, code := c.push(r, refs.Archive("host-a"))
		if code == 0 {
			t.Fatalf("push accepted:\n%s", out)
		}
		mustContain(t, out, "[archive_chain]", "another repository")
	})
	if after := r.refs(); after != before {
		t.Fatalf("the remote's refs moved:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func oidOf(t *testing.T, s string) gitstore.Oid {
	t.Helper()
	id, err := gitstore.ParseOid(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestGuardPastUnreadableArchive: a remote holding an archive ref that
// cannot be read as an archive (planted there with plain git, past the
// guard) blocks no one: the guard accepts an honest post and an honest
// archive with its deletions, whose checks look the tasks up in every
// archive ref, and leaves the planted ref where it was.
func TestGuardPastUnreadableArchive(t *testing.T) {
	h, r, id := archived(t)
	h.ended("E-4")
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("push of E-4 refused:\n%s", out)
	}
	blob, code := run(t, r.dir, baseEnv(r.root), "not an archive", "git", "hash-object", "-w", "--stdin")
	if code != 0 {
		t.Fatal(blob)
	}
	planted := refs.Archive("mallory")
	if out, code := run(t, r.dir, baseEnv(r.root), "", "git", "update-ref", planted, strings.TrimSpace(blob)); code != 0 {
		t.Fatal(out)
	}
	h.post("T-1", "summary", "after the plant")
	if out, code := h.push(r, "--atomic", allBernstein); code != 0 {
		t.Fatalf("the guard refused an honest post past an unreadable archive:\n%s", out)
	}
	h.forger(id).Archive(forgetest.ArchiveSpec{Tasks: []string{"E-4"}})
	out, code := h.push(r, "--atomic", refs.Archive("host-a"), ":"+refs.Journal("E-4"), ":"+refs.Ledger("E-4"))
	if code != 0 {
		t.Fatalf("the guard refused an honest archive past an unreadable archive:\n%s", out)
	}
	if got, _ := run(t, r.dir, baseEnv(r.root), "", "git", "rev-parse", planted); strings.TrimSpace(got) != strings.TrimSpace(blob) {
		t.Fatalf("the planted ref moved: %s", got)
	}
}
