package remote

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bernstein/bernstein/gitstore"
)

// TestBrokenLocalRef: git fetch's failure on a ref of the repository it
// fetches into that names no object (as git 2.39 printed it, for a loose
// file of garbage and for a missing object) is fetched again passing over
// such refs; any other failure is not.
func TestBrokenLocalRef(t *testing.T) {
	for msg, want := range map[string]bool{
		"bad object refs/bernstein/zz/junk; file:///tmp/x/tasks.git did not send all necessary objects":                                                          true,
		"error: refs/bernstein/x/y does not point to a valid object!; bad object refs/bernstein/x/y; ../remote.git did not send all necessary objects":           true,
		"git upload-pack: not our ref 0000000000000000000000000000000000000000; remote error: upload-pack: not our ref 0000000000000000000000000000000000000000": false,
		"'origin' does not appear to be a git repository; Could not read from remote repository.":                                                                false,
		"bad object 1234567890123456789012345678901234567890":                                                                                                    false,
	} {
		if got := brokenLocalRef(msg); got != want {
			t.Errorf("brokenLocalRef(%q) = %v, want %v", msg, got, want)
		}
	}
}

// TestBrokenTracking: the remote-tracking refs git fetch could not write
// because their loose file is not an object id, as git 2.39 printed them;
// a lock held, a ref moved, or a ref outside the remote-tracking refs is
// none of them.
func TestBrokenTracking(t *testing.T) {
	for msg, want := range map[string]string{
		"cannot lock ref 'refs/bernstein-remotes/origin/journal/T-1': unable to resolve reference 'refs/bernstein-remotes/origin/journal/T-1': reference broken; ! [new ref]         refs/bernstein/journal/T-1 -> refs/bernstein-remotes/origin/journal/T-1  (unable to update local ref)": "refs/bernstein-remotes/origin/journal/T-1",
		"cannot lock ref 'refs/bernstein-remotes/origin/a': unable to resolve reference 'refs/bernstein-remotes/origin/a': reference broken; cannot lock ref 'refs/bernstein-remotes/origin/b': unable to resolve reference 'refs/bernstein-remotes/origin/b': reference broken":            "refs/bernstein-remotes/origin/a refs/bernstein-remotes/origin/b",
		"cannot lock ref 'refs/bernstein-remotes/origin/spine/host-a': Unable to create '/r/.git/refs/bernstein-remotes/origin/spine/host-a.lock': File exists.":                                                                                                                            "",
		"cannot lock ref 'refs/bernstein-remotes/origin/audit/host-a': is at 7480a9d9156971615759a2c7a43a85b3ed6f867a but expected b2e48fc431d349fc24d709fae9c980a0b5429f1a":                                                                                                                "",
		"cannot lock ref 'refs/bernstein/x': unable to resolve reference 'refs/bernstein/x': reference broken":                                                                                                                                                                              "",
	} {
		got := ""
		for i, r := range brokenTracking(msg) {
			if i > 0 {
				got += " "
			}
			got += r
		}
		if got != want {
			t.Errorf("brokenTracking(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestDropGarbledTracking: a garbled remote-tracking ref is removed only
// while its file holds the bytes read, and not while git holds its lock;
// no other ref is touched.
func TestDropGarbledTracking(t *testing.T) {
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	s, opts := newTestStore(t)
	gitDir := filepath.Join(opts.Repo, ".git")
	const ref = "refs/bernstein-remotes/origin/journal/T-1"
	path := filepath.Join(gitDir, filepath.FromSlash(ref))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(ref, text string) {
		p := filepath.Join(gitDir, filepath.FromSlash(ref))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(ref string) bool {
		_, err := os.Stat(filepath.Join(gitDir, filepath.FromSlash(ref)))
		return err == nil
	}
	read := gitstore.LooseStandIn([]byte("garbage\n"))

	write(ref, "other garbage\n") // rewritten since it was read
	if s.dropGarbledTracking(ref, read) || !exists(ref) {
		t.Fatal("removed a file that no longer holds the bytes read")
	}
	write(ref, "garbage\n")
	write(ref+".lock", "") // git writes it now
	if s.dropGarbledTracking(ref, read) || !exists(ref) {
		t.Fatal("removed a file under git's lock")
	}
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	write("refs/bernstein/journal/T-1", "garbage\n")
	if s.dropGarbledTracking("refs/bernstein/journal/T-1", read) || !exists("refs/bernstein/journal/T-1") {
		t.Fatal("removed a ref outside the remote-tracking refs")
	}
	if !s.dropGarbledTracking(ref, read) || exists(ref) || exists(ref+".lock") {
		t.Fatal("the garbled remote-tracking ref was not removed, or its lock was left")
	}
}
