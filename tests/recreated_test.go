package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bernstein/bernstein"
)

// TestRecreatedRepositoryIsNew: a repository deleted and created again at
// the same path, with the same BERNSTEIN_HOME, is a new repository (init
// mints another identity): no rollback alarm on init, on task create or
// in audit verify. A copy of a repository is the same repository: its pins
// and the heads its writer wrote go with it.
func TestRecreatedRepositoryIsNew(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	for _, task := range []string{"T-1", "T-2"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: task}); err != nil {
			t.Fatal(err)
		}
	}
	first := f.repositoryID()
	// A second writer's key pinned here.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := bernstein.Init(bernstein.Options{Repo: f.dir, Home: other}, "other-writer"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PinKeys(bernstein.PinOptions{Writers: []string{"other-writer"}}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// A copy keeps the identity, the pins and the heads.
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", f.dir, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	copied := openWith(t, bernstein.Options{Repo: cp, Home: f.home})
	if wk := trustOf(t, copied, "other-writer"); wk.Trust != bernstein.TrustPinned {
		t.Fatalf("the copy lost the pin: %+v", wk)
	}

	// Deleted and created again, at the same path, with the same home.
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "init", "-q", f.dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	if _, err := bernstein.Init(f.opts, "test-writer"); err != nil {
		t.Fatalf("init of the re-created repository: %v", err)
	}
	if id := f.repositoryID(); id == "" || id == first {
		t.Fatalf("the re-created repository's identity %q (the old one was %q)", id, first)
	}
	s = f.open()
	for _, task := range []string{"T-1", "T-2"} {
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: task, Title: task}); err != nil {
			t.Fatalf("task create %s in the re-created repository: %v", task, err)
		}
	}
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify of the re-created repository: exit %d\n%s%s", code, out, errOut)
	}
	wks, err := s.WriterKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, wk := range wks {
		if wk.Writer == "other-writer" {
			t.Fatalf("the re-created repository inherited the old one's pin: %+v", wk)
		}
	}
}
