package forgetest

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/archive"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// ArchiveSpec is one archive commit (docs/archive.md) for Forger.Archive to
// write on the forger's writer's archive ref.
type ArchiveSpec struct {
	// Tasks are archived at their refs' heads, or at Heads[task] (journal,
	// ledger) when given; their row counts are what git counts
	// (rev-list --count --first-parent).
	Tasks []string
	Heads map[string][2]string
	// Remove are the tasks the commit drops from the archive.
	Remove []string
	// Keep leaves the tasks' refs; otherwise each is deleted at the value
	// it had, in one git update-ref transaction with the archive ref's move.
	Keep bool
	// RepoID is the repository the first commit's genesis binds ("": the
	// repository's own, read from refs/bernstein/repository).
	RepoID string
	// Edit, when set, changes the record, the tree's update or the parents
	// before the commit is written: a forgery.
	Edit func(rec *record.Archive, u *archive.Update, parents *[]gitstore.Oid)
	// NoMove writes the commit and leaves every ref as it was.
	NoMove bool
	// Committer, when set, is the writer the commit names in place of the
	// forger's (the ref stays the forger's writer's).
	Committer string
}

// Archive writes one archive commit as bernstein's archive write does: the
// record in its message (seq and prev following the ref's head, or the
// genesis), the tree built by archive.Build from the previous commit's, the
// parents archive.Parents(previous commit, add), committed as the forger's
// writer and signed by its signer (unsigned when nil); then moves the
// archive ref and deletes the tasks' refs. It returns the commit.
func (g *Forger) Archive(spec ArchiveSpec) gitstore.Oid {
	g.T.Helper()
	ref := refs.Archive(g.Writer)
	rec := record.Archive{V: record.Version, Writer: g.Writer, Add: []record.ArchivedTask{}, Remove: append([]string{}, spec.Remove...)}
	prev, prevTree := gitstore.ZeroOid, gitstore.ZeroOid
	if id, err := g.git(nil, "rev-parse", "--verify", "--quiet", ref); err == nil {
		prev = g.oid(strings.TrimSpace(id))
		prevTree = g.oid(g.Git("rev-parse", prev.String()+"^{tree}"))
		last, err := record.ParseArchive(g.message(prev.String()))
		if err != nil {
			g.T.Fatal(err)
		}
		rec.Seq, rec.Prev = last.Seq+1, record.Sum(g.message(prev.String()))
	} else {
		id := spec.RepoID
		if id == "" {
			r, err := record.ParseRepositoryRecord(g.message(refs.Repository))
			if err != nil {
				g.T.Fatal(err)
			}
			id = r.ID
		}
		rec.Prev = record.Genesis(id, record.ChainArchive, g.Writer)
	}
	tasks := append([]string{}, spec.Tasks...)
	sort.Strings(tasks)
	sort.Strings(rec.Remove)
	var u archive.Update
	deletes := ""
	for _, t := range tasks {
		j, l := g.Git("rev-parse", refs.Journal(t)+"^{commit}"), g.Git("rev-parse", refs.Ledger(t)+"^{commit}")
		if h, ok := spec.Heads[t]; ok {
			j, l = h[0], h[1]
		}
		if !spec.Keep {
			deletes += fmt.Sprintf("delete %s %s\ndelete %s %s\n", refs.Journal(t), g.Git("rev-parse", refs.Journal(t)), refs.Ledger(t), g.Git("rev-parse", refs.Ledger(t)))
		}
		rec.Add = append(rec.Add, record.ArchivedTask{TaskID: t, Journal: j, JournalRows: g.count(j), Ledger: l, LedgerRows: g.count(l)})
		u.Add = append(u.Add, archive.Entry{Task: t, Journal: g.oid(j), Ledger: g.oid(l)})
	}
	u.Remove = rec.Remove
	parents := archive.Parents(prev, u.Add)
	if spec.Edit != nil {
		spec.Edit(&rec, &u, &parents)
	}
	repo, err := gitstore.Open(filepath.Join(g.Dir, ".git", "objects"))
	if err != nil {
		g.T.Fatal(err)
	}
	defer repo.Close()
	root, objs, err := archive.Build(repo, prevTree, u)
	if err != nil {
		g.T.Fatal(err)
	}
	for _, o := range objs {
		g.write(o.Type.String(), o.Data)
	}
	who := g.Writer
	if spec.Committer != "" {
		who = spec.Committer
	}
	c := gitstore.Commit{Tree: root, Parents: parents, Author: gitstore.Ident(who, who+"@bernstein", 1700000000),
		Committer: gitstore.Ident(who, who+"@bernstein", 1700000000),
		Message:   record.Message(fmt.Sprintf("archive %d tasks", len(rec.Add)), record.MustCanonical(rec))}
	if g.Signer != nil {
		if c.Signature, err = g.Signer.SignCommit(gitstore.EncodeCommit(c)); err != nil {
			g.T.Fatal(err)
		}
	}
	id := g.write("commit", gitstore.EncodeCommit(c))
	if spec.NoMove {
		return id
	}
	old := prev.String()
	if prev.IsZero() {
		old = ""
	}
	if _, err := g.git([]byte("start\n"+fmt.Sprintf("update %s %s %s\n", ref, id, old)+deletes+"commit\n"), "update-ref", "--stdin"); err != nil {
		g.T.Fatalf("update-ref: %v", err)
	}
	return id
}

// message is the record a chain commit's message carries.
func (g *Forger) message(rev string) []byte {
	g.T.Helper()
	msg := g.Git("log", "-1", "--format=%B", rev)
	_, rec, ok := strings.Cut(msg, "\n\n")
	if !ok {
		g.T.Fatalf("%s carries no record", rev)
	}
	return []byte(strings.TrimSpace(rec))
}

// count is the number of rows of the chain whose head is rev, as git
// counts its commits.
func (g *Forger) count(rev string) int64 {
	g.T.Helper()
	n, err := strconv.ParseInt(g.Git("rev-list", "--count", "--first-parent", rev), 10, 64)
	if err != nil {
		g.T.Fatal(err)
	}
	return n
}
