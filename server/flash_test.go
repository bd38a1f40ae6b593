package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/server"
)

// TestNeverFlashTampered: readers poll the task detail, each key's latest
// version, the task page and the progress strip while three processes post
// (and one checkpoints). Every read is one consistent snapshot of the refs
// it depends on, so no answer ever carries a state other than verified, a
// withheld content or an unverified list, however a post's refs land
// between the reads.
func TestNeverFlashTampered(t *testing.T) {
	if testing.Short() {
		t.Skip("contention")
	}
	r := newTaskRepo(t, "NF-1")
	r.post("k0", "before the posters")
	hs, stop := r.serve()
	defer stop()
	const posters, each, readers = 3, 30, 3

	var done atomic.Bool
	var reads, bad atomic.Int64
	failf := func(format string, args ...any) {
		if bad.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	get := func(path string) (int, []byte) {
		res, err := http.Get(hs.URL + path)
		if err != nil {
			failf("GET %s: %v", path, err)
			return 0, nil
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		reads.Add(1)
		return res.StatusCode, b
	}
	var rw sync.WaitGroup
	for i := range readers {
		rw.Add(1)
		go func(i int) {
			defer rw.Done()
			for n := 0; !done.Load(); n++ {
				st, b := get(server.APIPrefix + "/tasks/NF-1")
				var d server.TaskDetail
				if st != 200 || json.Unmarshal(b, &d) != nil {
					failf("detail: %d %.200s", st, b)
					continue
				}
				if d.Task.Progress.Proof.State != "verified" || !d.Artifacts.Verified || len(d.Artifacts.Failures) > 0 {
					failf("detail while posting: proof %s, verified %v, %s", d.Task.Progress.Proof.State, d.Artifacts.Verified, d.Artifacts.Reason)
				}
				for _, a := range d.Artifacts.Artifacts {
					if a.State != "verified" {
						failf("detail while posting: %s v%d is %s (%s)", a.Key, a.Version, a.State, a.Reason)
					}
				}
				key := fmt.Sprintf("k%d", (i+n)%posters)
				st, b = get(server.APIPrefix + "/tasks/NF-1/artifacts/" + key)
				if st == 404 && key != "k0" {
					continue // not posted yet
				}
				var show bernstein.ArtifactShowDoc
				if st != 200 || json.Unmarshal(b, &show) != nil {
					failf("show %s: %d %.200s", key, st, b)
					continue
				}
				if show.State != "verified" || show.Payload == nil || show.Withheld != "" {
					failf("show %s while posting: v%d %s, withheld %q", key, show.Version, show.State, show.Withheld)
				}
				for _, p := range []string{"/tasks/NF-1", "/tasks/NF-1/fragments/strip", "/tasks/NF-1/fragments/integrity", "/tasks/NF-1/fragments/timeline", "/"} {
					st, b = get(p)
					if st != 200 || bytes.Contains(b, []byte(`data-state="tampered"`)) || bytes.Contains(b, []byte(`data-state="unverifiable"`)) ||
						bytes.Contains(b, []byte("content withheld")) || bytes.Contains(b, []byte(`data-counts="false"`)) ||
						bytes.Contains(b, []byte(`data-integrity="tampered"`)) {
						failf("page %s while posting: %d, tampered or withheld", p, st)
					}
				}
			}
		}(i)
	}
	var pw sync.WaitGroup
	for p := range posters + 1 {
		pw.Add(1)
		go func(p int) {
			defer pw.Done()
			for i := range each {
				args := []string{"--repo", r.dir, "artifact", "post", "NF-1", fmt.Sprintf("k%d", p), "--type", "report",
					"--body", fmt.Sprintf("post %d of %d", i, p), "--agent", "agent-1", "--claim-token", r.token}
				if p == posters {
					args = []string{"--repo", r.dir, "checkpoint", "NF-1"}
				}
				cmd := exec.Command(cliBin, args...)
				cmd.Env = append(os.Environ(), "BERNSTEIN_HOME="+r.home)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("writer %d: %v %s", p, err, out)
					return
				}
			}
		}(p)
	}
	pw.Wait()
	done.Store(true)
	rw.Wait()
	// The end state is whole, and the readers saw it being written.
	var d server.TaskDetail
	if st, b := get(server.APIPrefix + "/tasks/NF-1"); st != 200 || json.Unmarshal(b, &d) != nil || d.Task.Artifacts["k1"] != each {
		t.Fatalf("after the posts: %d %+v", st, d.Task.Artifacts)
	}
	if n := reads.Load(); n < 50 {
		t.Fatalf("only %d reads while %d posts were made", n, posters*each)
	}
	t.Logf("%d reads while %d processes posted %d times each; %d bad", reads.Load(), posters, each, bad.Load())
}
