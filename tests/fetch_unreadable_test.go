package tests

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/refs"
)

// TestFetchReadsPastUnreadableRemoteRef: a remote task ref that plain git
// points at a blob holds no fetch back: the fetch names it (a warning, and
// read_past and held_back in --output-json, exit 2 as for anything held
// back), leaves the local ref where it is, and moves the rest; a narrow
// fetch of a task the remote's new entries name, and a full one of a ref
// this host does not have, alike.
func TestFetchReadsPastUnreadableRemoteRef(t *testing.T) {
	srv, _, _, a, b, _ := pinnedHosts(t)

	tok1 := a.work("T-1", "notes", 1)
	tok2 := a.work("T-2", "notes", 1)
	a.ok("push")
	b.ok("fetch")
	before := b.refs()

	// New rows on both tasks (T-1 ended: sealed) and a new task, pushed;
	// then the remote's
	// journal of T-1 moved to a blob, and a ledger of a task nobody
	// wrote pointed at one.
	a.post("T-1", "notes", "agent-host-a", tok1, 1)
	a.ok("task", "abandon", "T-1", "--reason", "sealed too") // a seal of T-1 in the spine
	a.post("T-2", "notes", "agent-host-a", tok2, 1)
	a.work("T-3", "notes", 1)
	a.ok("push")
	bare := srv.dir("tasks.git")
	blob := strings.TrimSpace(gitStdin(t, bare, "not a chain", "hash-object", "-w", "--stdin"))
	gitRun(t, bare, "update-ref", refs.Journal("T-1"), blob)
	gitRun(t, bare, "update-ref", refs.Ledger("Z-9"), blob)
	remote := refsOf(t, bare, refs.Prefix)

	check := func(args []string, want ...string) {
		t.Helper()
		r := b.run(append(args, "--output-json")...)
		if r.code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s%s", args, r.code, r.out, r.err)
		}
		var doc struct {
			ReadPast []struct{ Ref, At, Reason string } `json:"read_past"`
			HeldBack []struct {
				Ref        string
				Unreadable bool
			} `json:"held_back"`
		}
		if err := json.Unmarshal([]byte(r.out), &doc); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, r.out)
		}
		var named []string
		for _, p := range doc.ReadPast {
			named = append(named, p.Ref)
			if p.At != blob || !strings.Contains(p.Reason, "is a blob, not a commit") {
				t.Errorf("%v: read past %+v", args, p)
			}
			if !strings.Contains(r.err, "warning: "+p.Ref+" (at "+blob+") cannot be read as a") {
				t.Errorf("%v: no warning names %s:\n%s", args, p.Ref, r.err)
			}
		}
		if strings.Join(named, " ") != strings.Join(want, " ") {
			t.Fatalf("%v: read past %v, want %v\n%s", args, named, want, r.out)
		}
		for _, h := range doc.HeldBack {
			if !h.Unreadable {
				t.Errorf("%v: held back %+v, which is readable", args, h)
			}
		}
		got := b.refs()
		if got[refs.Journal("T-1")] != before[refs.Journal("T-1")] || got[refs.Ledger("Z-9")] != "" {
			t.Fatalf("%v: the unreadable refs moved here: %v", args, got)
		}
		for _, ref := range []string{refs.Journal("T-2"), refs.Ledger("T-3"), refs.Journal("T-3"), refs.Spine("host-a"), refs.Audit("host-a")} {
			if got[ref] != remote[ref] {
				t.Fatalf("%v: %s is at %q here, want the remote's %s", args, ref, got[ref], remote[ref])
			}
		}
	}
	// Narrow: the new entries name T-1, T-2 and T-3; Z-9 is not read.
	check([]string{"fetch"}, refs.Journal("T-1"))
	check([]string{"fetch", "--full"}, refs.Journal("T-1"), refs.Ledger("Z-9"))

	// This host's own journal of T-2 moved to a blob with plain git (a
	// loose file of garbage there makes git's own fetch fail: "bad
	// object"): named, left as it is, and the rest moves.
	localBlob := strings.TrimSpace(gitStdin(t, b.dir, "a local blob", "hash-object", "-w", "--stdin"))
	b.git("update-ref", refs.Journal("T-2"), localBlob)
	a.post("T-2", "notes", "agent-host-a", tok2, 1)
	a.ok("push")
	r := b.run("fetch", "--output-json")
	if r.code != 2 || !strings.Contains(r.err, "warning: "+refs.Journal("T-2")+" (at "+localBlob+") cannot be read as a journal") {
		t.Fatalf("fetch over a local journal at a blob: exit %d\n%s%s", r.code, r.out, r.err)
	}
	remote = refsOf(t, bare, refs.Prefix)
	got := b.refs()
	if got[refs.Journal("T-2")] != localBlob || got[refs.Spine("host-a")] != remote[refs.Spine("host-a")] {
		t.Fatalf("after the fetch: %v, want T-2's journal kept and the spine moved", got)
	}
}
