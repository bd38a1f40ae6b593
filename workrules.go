package bernstein

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/progress"
)

// Work earns only for the project's own history (docs/cli.md, Progress
// vector): a checkpoint or a diff of one of bernstein's own record commits
// is refused before anything is written, and the rows record the trees the
// fold compares, so that what earns is decided from the rows alone.

// recordNamespaces are the ref namespaces whose commits are bernstein's
// record: the chains, and the copies fetches and pushes keep of them.
var recordNamespaces = []string{"refs/bernstein/", "refs/bernstein-remotes/", "refs/bernstein-push/"}

// namesRecordRef returns the ref under a record namespace that revision rev
// starts from ("" when none): refs/bernstein/..., or bernstein/... as git
// abbreviates it (refs/<name> is the first place git looks after $GIT_DIR).
func namesRecordRef(rev string) string {
	name := rev
	if i := strings.IndexAny(name, "~^:"); i >= 0 {
		name = name[:i]
	}
	if i := strings.Index(name, "@{"); i >= 0 {
		name = name[:i]
	}
	full := strings.ToLower(name)
	if !strings.HasPrefix(full, "refs/") {
		full = "refs/" + full
	}
	for _, ns := range recordNamespaces {
		if strings.HasPrefix(full, ns) {
			return name
		}
	}
	return ""
}

// projectCommit is a commit of the project's history with the trees a work
// row records.
type projectCommit struct {
	id     gitstore.Oid
	commit gitstore.Commit
}

// readProjectCommit reads commit id (resolved from rev, given as field) and
// refuses it when it is one of bernstein's own record commits: named
// through a ref under refs/bernstein/, or shaped as a chain commit
// (chain.RecordShape), wherever refs point today.
func (s *Store) readProjectCommit(field, rev, id string) (*projectCommit, error) {
	refuse := func(why string) error {
		return &artifact.InputError{Field: field, Msg: fmt.Sprintf("%q is a commit of bernstein's own record (%s), not of the project's history: work is recorded for the project's commits only", rev, why)}
	}
	if ref := namesRecordRef(rev); ref != "" {
		return nil, refuse("it is read through " + ref)
	}
	oid, err := gitstore.ParseOid(id)
	if err != nil {
		return nil, &artifact.InputError{Field: field, Msg: fmt.Sprintf("%q does not name a commit of this repository", rev)}
	}
	data, err := s.objects.ReadType(oid, gitstore.TypeCommit)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", field, id, err)
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", field, id, err)
	}
	why, err := chain.RecordShape(s.objects, c)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", field, id, err)
	}
	if why != "" {
		return nil, refuse("commit " + id[:12] + ": " + why)
	}
	return &projectCommit{id: oid, commit: c}, nil
}

// parentTree returns the tree of the commit's first parent, or the empty
// tree for a root commit: what the commit changed is the difference.
func (s *Store) parentTree(field, rev string, pc *projectCommit) (gitstore.Oid, error) {
	if len(pc.commit.Parents) == 0 {
		return gitstore.EmptyTree, nil
	}
	p := pc.commit.Parents[0]
	data, err := s.objects.ReadType(p, gitstore.TypeCommit)
	if err != nil {
		return gitstore.Oid{}, &artifact.InputError{Field: field, Msg: fmt.Sprintf("the first parent %s of %q is not in this repository (a shallow clone?), so what the commit changed cannot be told: fetch it (git fetch --deepen=1) first", p, rev)}
	}
	c, err := gitstore.ParseCommitLinks(data)
	if err != nil {
		return gitstore.Oid{}, fmt.Errorf("the first parent %s of %s: %w", p, pc.id, err)
	}
	return c.Tree, nil
}

// earnNote says why a work row about to be appended to task earns nothing
// ("" when it earns), from the journal fold the row extends: the same rule
// the fold applies (progress.Journal).
func (t *tx) earnNote(task string, why func(j *progress.Journal) string) (string, error) {
	c, err := t.journalChain(task)
	if err != nil {
		return "", err
	}
	if w := why(&c.journal.Progress); w != "" {
		return "recorded, earns nothing: " + w, nil
	}
	return "", nil
}
