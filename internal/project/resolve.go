package project

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/internal/git"
)

// ResolveCommit turns a revision (given as field) into the id of a real
// commit of the repository.
func ResolveCommit(c *core.Repo, field, rev string) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\x00\n") {
		return "", &artifact.InputError{Field: field, Msg: fmt.Sprintf("%q is not a revision", rev)}
	}
	if id, ok := resolvePlainCommit(c, rev); ok {
		return id, nil
	}
	// The worktree's own git directory: its HEAD is the one the user means.
	out, err := git.Cmd{Policy: git.Isolated, GitDir: c.OwnDir, Args: []string{"rev-parse", "--verify", "--quiet", "--end-of-options", rev + "^{commit}"}}.Output()
	if err != nil {
		return "", &artifact.InputError{Field: field, Msg: fmt.Sprintf("%q does not name a commit of this repository", rev)}
	}
	return strings.TrimSpace(string(out)), nil
}

// resolvePlainCommit resolves the two commonest revisions, HEAD and a full
// commit id, without starting git; ok is false for anything else (git then
// applies its own rules).
func resolvePlainCommit(c *core.Repo, rev string) (string, bool) {
	var id gitstore.Oid
	switch {
	case rev == "HEAD":
		b, err := os.ReadFile(filepath.Join(c.OwnDir, "HEAD"))
		if err != nil {
			return "", false
		}
		head := strings.TrimSpace(string(b))
		if ref, sym := strings.CutPrefix(head, "ref: "); sym {
			if !strings.HasPrefix(ref, "refs/heads/") {
				return "", false
			}
			if id, err = c.Refs.Read(ref); err != nil {
				return "", false
			}
		} else if id, err = gitstore.ParseOid(head); err != nil {
			return "", false
		}
	case len(rev) == 40:
		var err error
		if id, err = gitstore.ParseOid(rev); err != nil || strings.ToLower(rev) != rev {
			return "", false
		}
	default:
		return "", false
	}
	if t, _, err := c.Objects.Read(id); err != nil || t != gitstore.TypeCommit {
		return "", false
	}
	return id.String(), true
}
