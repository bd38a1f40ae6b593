package tests

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

// audit verify checks each writer's archive of ended tasks
// (docs/archive.md, Verifying): every archive commit signed by its
// writer's pinned key, its record chained and bound to this repository, its
// tree the previous one plus what the record adds minus what it removes, its
// parents keeping the archived chains, its counts the chains' lengths.
// --since checks the archive commits added since the checkpoint and the
// chains they take, and a task ref deleted since then only when an archive
// holds its chain.

// archivableTask creates task, claims it, starts it, posts two reports and and completes it: its journal (two rows) sealed, its ledger ended.
func (f *fixture) archivableTask(s *bernstein.Store, task string) {
	f.t.Helper()
	tok := f.claimed(s, task, "agent")
	if _, err := s.Transition(task, record.KindTaskStarted, "", ""); err != nil {
		f.t.Fatal(err)
	}
	f.post(s, task, "report", "agent", tok, report("first: "+task))
	f.post(s, task, "report", "agent", tok, report("done: "+task))
	if _, err := s.Transition(task, record.KindTaskCompleted, "", ""); err != nil {
		f.t.Fatal(err)
	}
}

// archiveFixture has ended tasks, open task O-1, audit
// checkpoint c1 of it all, and a forger signing as the fixture's writer.
func archiveFixture(t *testing.T) (*fixture, *forgetest.Forger) {
	t.Helper()
	f := newFixture(t)
	s := f.open()
	for _, task := range []string{"A-1", "A-2", "A-3"} {
		f.archivableTask(s, task)
	}
	tok := f.claimed(s, "O-1", "agent")
	f.post(s, "O-1", "report", "agent", tok, report("open"))
	s.Close()
	if d, errOut, code := f.audit(t, "--checkpoint", "c1"); code != 0 || d.Checkpoint != "c1" {
		t.Fatalf("audit verify --checkpoint: exit %d %+v %s", code, d, errOut)
	}
	id, err := keys.Load(f.home)
	if err != nil {
		t.Fatal(err)
	}
	return f, &forgetest.Forger{T: t, Dir: f.dir, Signer: id, Writer: "test-writer"}
}

func failureChecks(d sinceDoc) []string {
	var out []string
	for _, fl := range d.Failures {
		out = append(out, fl.Check)
	}
	return out
}

func hasFailure(d sinceDoc, check string) bool {
	for _, fl := range d.Failures {
		if fl.Check == check {
			return true
		}
	}
	return false
}

// TestArchiveVerifyHonest: two archive commits of 'bernstein archive', the
// tasks' refs deleted with them, verify whole and since the checkpoint, with no failure; a
// checkpoint between them makes the next --since start from its archive
// head.
func TestArchiveVerifyHonest(t *testing.T) {
	f, _ := archiveFixture(t)
	if out, errOut, code := f.cli("", "archive", "A-1", "A-2"); code != 0 {
		t.Fatalf("bernstein archive: exit %d\n%s%s", code, out, errOut)
	}
	for _, ref := range []string{refs.Journal("A-1"), refs.Ledger("A-2")} {
		if _, err := f.gitErr("rev-parse", "--verify", "--quiet", ref); err == nil {
			t.Fatalf("%s is still there after archiving", ref)
		}
	}
	d, errOut, code := f.audit(t, "--since", "c1")
	if code != 0 || !d.Verified || len(d.Failures) != 0 {
		t.Fatalf("--since after an honest archive: exit %d %v %+v %s", code, failureChecks(d), d.Failures, errOut)
	}
	if d, errOut, code := f.audit(t, "--checkpoint", "c2"); code != 0 || !d.Verified || d.Checkpoint != "c2" {
		t.Fatalf("audit verify after an honest archive: exit %d %+v %s", code, d.Failures, errOut)
	}
	if out, errOut, code := f.cli("", "archive", "A-3"); code != 0 {
		t.Fatalf("bernstein archive: exit %d\n%s%s", code, out, errOut)
	}
	for _, since := range []string{"c1", "c2"} {
		d, errOut, code := f.audit(t, "--since", since)
		if code != 0 || !d.Verified || len(d.Failures) != 0 {
			t.Fatalf("--since %s after the second archive commit: exit %d %+v %s", since, code, d.Failures, errOut)
		}
	}
	if d, errOut, code := f.audit(t); code != 0 || !d.Verified {
		t.Fatalf("audit verify after two archive commits: exit %d %+v %s", code, d.Failures, errOut)
	}
}

// TestArchiveVerifyForgeries: each forged archive (or task ref deletion)
// is reported, by the whole walk and since the checkpoint, under the check
// that catches it.
func TestArchiveVerifyForgeries(t *testing.T) {
	other, _, err := keys.Create(t.TempDir(), "mallory")
	if err != nil {
		t.Fatal(err)
	}
	older := func(f *fixture, task string) [2]string {
		return [2]string{strings.TrimSpace(f.git("rev-parse", refs.Journal(task)+"~1")), strings.TrimSpace(f.git("rev-parse", refs.Ledger(task)))}
	}
	cases := []struct {
		name  string
		forge func(f *fixture, g *forgetest.Forger)
		check string
		full  bool // the whole walk reports it under check too
	}{
		{"signed by another key", func(f *fixture, g *forgetest.Forger) {
			g.Signer = other
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}})
		}, "archive_signature", true},
		{"unsigned", func(f *fixture, g *forgetest.Forger) {
			g.Signer = nil
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}})
		}, "archive_signature", true},
		{"record names another writer", func(f *fixture, g *forgetest.Forger) {
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Writer = "mallory"
			}})
		}, "archive_chain", true},
		{"commit names another writer", func(f *fixture, g *forgetest.Forger) {
			// mallory's key, published for mallory, pinned nowhere: the
			// commit is mallory's, on test-writer's archive.
			m := forgetest.UnpinnedWriter(t, f.dir, "")
			g.Signer = m.Signer
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, Committer: "mallory"})
		}, "archive_signature", true},
		{"record lists other heads than the tree", func(f *fixture, g *forgetest.Forger) {
			h := older(f, "A-1")
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Add[0].Journal, rec.Add[0].JournalRows = h[0], rec.Add[0].JournalRows-1
			}})
		}, "archive_tree", true},
		{"tree adds a task the record does not list", func(f *fixture, g *forgetest.Forger) {
			j, l := strings.TrimSpace(f.git("rev-parse", refs.Journal("A-3"))), strings.TrimSpace(f.git("rev-parse", refs.Ledger("A-3")))
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				u.Add = append(u.Add, archive.Entry{Task: "A-3", Journal: mustOid(t, j), Ledger: mustOid(t, l)})
			}})
		}, "archive_tree", true},
		{"gitlink not a parent", func(f *fixture, g *forgetest.Forger) {
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				*parents = (*parents)[:len(*parents)-1]
			}})
		}, "archive_parents", true},
		{"row count not the chain's", func(f *fixture, g *forgetest.Forger) {
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Add[0].LedgerRows++
			}})
		}, "archive_rows", true},
		{"ledger not ended", func(f *fixture, g *forgetest.Forger) {
			h := [2]string{strings.TrimSpace(f.git("rev-parse", refs.Journal("O-1"))), strings.TrimSpace(f.git("rev-parse", refs.Ledger("O-1")))}
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"O-1"}, Heads: map[string][2]string{"O-1": h}})
		}, "archive_sealed", true},
		{"seq skipped", func(f *fixture, g *forgetest.Forger) {
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}})
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-2"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Seq = 5
			}})
			// seq 0, 5, 2: three commits as the head's seq says, each prev
			// right, the middle one out of its place.
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-3"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Seq = 2
			}})
		}, "archive_chain", true},
		{"seq repeated", func(f *fixture, g *forgetest.Forger) {
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}})
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-2"}, Edit: func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid) {
				rec.Seq--
			}})
		}, "archive_chain", true},
		{"prev of another repository", func(f *fixture, g *forgetest.Forger) {
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, RepoID: "another-repository"})
		}, "archive_chain", true},
		{"archive copied from another repository of the same key", func(f *fixture, g *forgetest.Forger) {
			dir := filepath.Join(t.TempDir(), "twin")
			if _, err := bernstein.Init(bernstein.Options{Repo: dir, Home: f.home}, "test-writer"); err != nil {
				t.Fatal(err)
			}
			twin := &fixture{t: t, dir: dir, home: f.home, opts: bernstein.Options{Repo: dir, Home: f.home}}
			s := twin.open()
			twin.archivableTask(s, "X-1")
			s.Close()
			(&forgetest.Forger{T: t, Dir: dir, Signer: g.Signer, Writer: "test-writer"}).Archive(forgetest.ArchiveSpec{Tasks: []string{"X-1"}})
			f.git("fetch", "-q", dir, "+"+refs.Archive("test-writer")+":"+refs.Archive("test-writer"))
		}, "archive_chain", true},
		{"task refs deleted with no archive", func(f *fixture, g *forgetest.Forger) {
			f.git("update-ref", "-d", refs.Journal("A-1"))
			f.git("update-ref", "-d", refs.Ledger("A-1"))
		}, "deletion", false},
		{"archive names an older head (rollback)", func(f *fixture, g *forgetest.Forger) {
			g.Archive(forgetest.ArchiveSpec{Tasks: []string{"A-1"}, Heads: map[string][2]string{"A-1": older(f, "A-1")}})
		}, "non_fast_forward", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, g := archiveFixture(t)
			tc.forge(f, g)
			d, errOut, code := f.audit(t, "--since", "c1")
			if code != 1 || d.Verified || !hasFailure(d, tc.check) {
				t.Fatalf("--since: exit %d, want 1 and a %s failure; got %v\n%+v\n%s", code, tc.check, failureChecks(d), d.Failures, errOut)
			}
			if tc.check == "archive_signature" && !hasFailure(d, "deletion") {
				// The forged commit's entries are not used: the refs it
				// replaces are missing.
				t.Fatalf("--since: the refs an archive commit with a bad signature covers are not reported deleted: %v", failureChecks(d))
			}
			if !tc.full {
				return
			}
			d, errOut, code = f.audit(t)
			if code != 1 || d.Verified || !hasFailure(d, tc.check) {
				t.Fatalf("audit verify: exit %d, want 1 and a %s failure; got %v\n%+v\n%s", code, tc.check, failureChecks(d), d.Failures, errOut)
			}
		})
	}
}
