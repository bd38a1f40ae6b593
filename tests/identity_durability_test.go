package tests

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/internal/systrace"
	"github.com/bernstein/bernstein/refs"
)

// TestIdentityIsDurableBeforeItsKeyIsPublished traces `init` creating a new
// writer identity in a BERNSTEIN_HOME whose folders do not exist yet. A
// published key whose private half a power loss took back would leave a
// writer id that can never sign again, so: every private file is synced
// before it is renamed into place, every folder created is synced into its
// parent, and the home folder is synced after the last rename, all before the
// writer's key ref moves.
func TestIdentityIsDurableBeforeItsKeyIsPublished(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(root, "repo")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	home := filepath.Join(root, "state", "home")
	evs, out := systrace.Child(t, "BERNSTEIN_TEST_INIT=w-durable", "BERNSTEIN_REPO="+repo, "BERNSTEIN_HOME="+home)
	publish := -1 // the key's ref, named by the writer and the key
	for i, e := range evs {
		if e.Call == "rename" && strings.HasPrefix(e.Path, filepath.Join(repo, ".git", filepath.FromSlash(refs.WritersPrefix))+"/w-durable.") && publish < 0 {
			publish = i
		}
	}
	if publish < 0 {
		t.Fatalf("the key ref was never renamed into place:\n%s", out)
	}
	var renames []int
	for i, e := range evs {
		if e.Call == "rename" && filepath.Dir(e.Path) == home {
			renames = append(renames, i)
		}
	}
	if len(renames) != 3 {
		t.Fatalf("%d files renamed into %s, want 3 (signing key, HMAC key, writer)", len(renames), home)
	}
	for _, i := range renames {
		synced := -1
		for j := 0; j < i; j++ {
			if evs[j].Call == "fsync" && evs[j].Path == evs[i].From {
				synced = j
			}
		}
		if synced < 0 {
			t.Errorf("%s renamed to %s without being synced first", evs[i].From, evs[i].Path)
		}
	}
	last := renames[len(renames)-1]
	if at := systrace.Find(evs, "fsync", home, last); at < 0 || at > publish {
		t.Errorf("the home folder is not synced after its last rename and before the key is published (fsync at %d, last rename %d, publish %d)", at, last, publish)
	}
	for _, dir := range []string{filepath.Join(root, "state"), root} {
		if at := systrace.Find(evs, "fsync", dir, 0); at < 0 || at > publish {
			t.Errorf("%s (a new folder's parent) is not synced before the key is published (fsync at %d, publish %d)", dir, at, publish)
		}
	}
}
