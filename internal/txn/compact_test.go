package txn_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bernstein/bernstein/internal/storetest"
)

// A merge of packs waits while git's own maintenance runs on the
// repository: a gc whose gc.pid names a live process of this host, or a
// `git maintenance run` whose lock is recent. A gc.pid of a process that is
// gone, of another host, or an old maintenance lock does not hold it back.
func TestCompactionWaitsForGitMaintenance(t *testing.T) {
	r := storetest.New(t)
	s := r.Writer
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	pid := filepath.Join(r.Core.GitDir, "gc.pid")
	lock := filepath.Join(r.Core.Objects.Dir(), "maintenance.lock")
	write := func(path, content string, age time.Duration) {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-age)
		os.Chtimes(path, then, then)
	}
	if s.GitMaintains() {
		t.Fatal("maintenance seen where none runs")
	}
	write(pid, fmt.Sprintf("%d %s", os.Getpid(), host), 0)
	if !s.GitMaintains() {
		t.Fatal("a live gc (this process stands for it) was not seen")
	}
	write(pid, fmt.Sprintf("%d %s", 1<<30, host), 0)
	if s.GitMaintains() {
		t.Fatal("the gc.pid of a process that is gone held compaction back")
	}
	write(pid, fmt.Sprintf("%d %s", os.Getpid(), host+"-elsewhere"), 0)
	if s.GitMaintains() {
		t.Fatal("the gc.pid of another host held compaction back")
	}
	os.Remove(pid)
	write(lock, "", time.Minute)
	if !s.GitMaintains() {
		t.Fatal("a running git maintenance was not seen")
	}
	write(lock, "", 2*time.Hour)
	if s.GitMaintains() {
		t.Fatal("an old maintenance lock held compaction back")
	}
}
