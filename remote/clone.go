package remote

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bernstein/bernstein/internal/git"
)

// CloneRepo runs `git clone URL DIR` (DIR as git would name it when empty)
// with origin as the remote's name, and returns the new work tree's
// absolute path. It refuses a DIR that exists and is not empty.
func CloneRepo(url, dir string) (string, error) {
	if url == "" {
		return "", errors.New("clone: the URL is empty")
	}
	if dir == "" {
		dir = humanishName(url)
		if dir == "" {
			return "", fmt.Errorf("clone: cannot name a folder after %q: give one", url)
		}
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return "", fmt.Errorf("clone: %s exists and is not empty", dir)
	}
	// The clone takes the remote's refs/bernstein/* into their
	// remote-tracking copies with everything else (the refspec RemoteSetup
	// configures), so git writes them as it writes a clone's refs: into
	// packed-refs, in one file, not one loose ref each.
	args := []string{"clone", "--quiet", "--origin", "origin", "--config", "remote.origin.fetch=" + FetchRefspec("origin"), "--", url, dir}
	if _, errb, err := (git.Cmd{Policy: git.User, Args: args}).Run(); err != nil {
		return "", fmt.Errorf("git clone %s: %s", url, git.Message(errb))
	}
	return filepath.Abs(dir)
}

// humanishName is the folder git clone would make for url.
func humanishName(url string) string {
	u := strings.TrimRight(url, "/")
	u = strings.TrimSuffix(u, "/.git")
	u = strings.TrimRight(u, "/")
	if i := strings.LastIndexAny(u, "/:"); i >= 0 {
		u = u[i+1:]
	}
	u = strings.TrimSuffix(u, ".git")
	if u == "" || u == "." || u == ".." {
		return ""
	}
	return u
}
