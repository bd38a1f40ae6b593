package bernstein_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// batchPosterMain is posterMain's batch mode (BERNSTEIN_TEST_BATCH=n): it
// posts BERNSTEIN_TEST_POSTS batches of n posts (or forever when 0) with
// PostBatch, post j of a batch to task j and key j (modulo the lists), and
// prints "ok <version> <task> <key> <spine entry hash> <journal index>"
// (printAck) for each post of a batch once PostBatch acknowledged it. With BERNSTEIN_TEST_INTRUDER set,
// every batch also holds a post by an agent without the claim, which must be
// refused.
func batchPosterMain(s *bernstein.Store) int {
	var n, batches int
	fmt.Sscan(os.Getenv("BERNSTEIN_TEST_BATCH"), &n)
	fmt.Sscan(os.Getenv("BERNSTEIN_TEST_POSTS"), &batches)
	tasks := strings.Split(os.Getenv("BERNSTEIN_TEST_TASK"), ",")
	tokens := strings.Split(os.Getenv("BERNSTEIN_CLAIM_TOKEN"), ",")
	keys := strings.Split(os.Getenv("BERNSTEIN_TEST_KEY"), ",")
	intruder := os.Getenv("BERNSTEIN_TEST_INTRUDER") != ""
	for b := 0; batches == 0 || b < batches; b++ {
		var reqs []bernstein.PostRequest
		for j := 0; j < n; j++ {
			reqs = append(reqs, bernstein.PostRequest{
				Task: tasks[j%len(tasks)], Key: keys[j%len(keys)], Agent: os.Getenv("BERNSTEIN_AGENT"), ClaimToken: tokens[j%len(tokens)],
				Payload: artifact.Payload{Type: artifact.TypeReport, Body: fmt.Sprintf("post %d of batch %d of pid %d", j, b, os.Getpid())},
			})
		}
		if intruder {
			reqs = append(reqs, bernstein.PostRequest{Task: tasks[0], Key: keys[0], Agent: "intruder", ClaimToken: "bct_intruder",
				Payload: artifact.Payload{Type: artifact.TypeReport, Body: "no"}})
		}
		outs, err := s.PostBatch(reqs)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var acked []*bernstein.PostResult
		for i, o := range outs {
			var refused *bernstein.RefusedError
			switch {
			case o.Err == nil:
				acked = append(acked, o.Result)
			case intruder && i == len(outs)-1 && errors.As(o.Err, &refused):
			default:
				printAck(acked...)
				fmt.Fprintf(os.Stderr, "post %d of a batch: %v\n", i, o.Err)
				return 1
			}
		}
		printAck(acked...)
	}
	return 0
}

// countingTransactions counts the ref transactions of the store whose
// hook h is that reach their end ("dirs synced") from now on.
func countingTransactions(h *faults) *atomic.Int32 {
	var n atomic.Int32
	h.set(func(step string) error {
		if step == "dirs synced" {
			n.Add(1)
		}
		return nil
	})
	return &n
}

// TestPostBatch: a batch posts in order, as single posts would (versions
// follow each other, a refusal is recorded in the audit mirror in its place
// and disturbs nothing else), in one ref transaction.
func TestPostBatch(t *testing.T) {
	f := newFixture(t)
	h := &faults{}
	s := f.openFaults(h)
	alice := f.claimed(s, "B-1", "alice")
	bob := f.claimed(s, "B-2", "bob")
	first := f.post(s, "B-1", "k", "alice", alice, report("version one"))
	auditBefore := len(f.chainRecords(refs.Audit("test-writer")))

	reqs := []bernstein.PostRequest{
		{Task: "B-1", Key: "k", Agent: "alice", ClaimToken: alice, Payload: report("version two")},
		{Task: "B-1", Key: "k", Agent: "alice", ClaimToken: alice, Payload: report("version three")},
		{Task: "B-1", Key: "j", Agent: "alice", ClaimToken: alice, Payload: artifact.Payload{Type: artifact.TypeLink, URL: "https://example.test/j", LinkKind: "preview"}},
		{Task: "B-2", Key: "k", Agent: "alice", ClaimToken: alice, Payload: report("not alice's task")},
		{Task: "B-2", Key: "k", Agent: "bob", ClaimToken: bob, Payload: report("bob's")},
		{Task: "B-404", Key: "k", Agent: "bob", ClaimToken: bob, Payload: report("no such task")},
	}
	txns := countingTransactions(h)
	outs, err := s.PostBatch(reqs)
	if err != nil {
		t.Fatal(err)
	}
	if n := txns.Load(); n != 1 {
		t.Fatalf("a batch took %d ref transactions, want 1", n)
	}
	type want struct {
		version, index int64
		prev           record.Hash
		reason         string
	}
	wants := []want{
		{version: 2, index: 1, prev: first.SpineEntryHash},
		{version: 3, index: 2},
		{version: 1, index: 3},
		{reason: record.ReasonClaimScopeViolation},
		{version: 1, index: 0},
		{reason: record.ReasonUnclaimedTask},
	}
	if len(outs) != len(wants) {
		t.Fatalf("%d outcomes for %d posts", len(outs), len(wants))
	}
	for i, w := range wants {
		o := outs[i]
		if w.reason != "" {
			var refused *bernstein.RefusedError
			if !errors.As(o.Err, &refused) || refused.Reason != w.reason || o.Result != nil {
				t.Fatalf("post %d: want refusal %s, got %+v %v", i, w.reason, o.Result, o.Err)
			}
			continue
		}
		if o.Err != nil || o.Result.Version != w.version || o.Result.JournalIndex != w.index || o.Result.Task != reqs[i].Task || o.Result.Key != reqs[i].Key {
			t.Fatalf("post %d: got %+v %v, want v%d at index %d", i, o.Result, o.Err, w.version, w.index)
		}
		if w.prev != "" && o.Result.PrevVersionHash != w.prev {
			t.Fatalf("post %d: previous version %s, want %s", i, o.Result.PrevVersionHash, w.prev)
		}
	}
	if outs[1].Result.PrevVersionHash != outs[0].Result.SpineEntryHash {
		t.Fatal("the second post of a key in a batch does not chain to the first")
	}
	checkVersionChain(t, s, "B-1", "k", 3)
	checkVersionChain(t, s, "B-1", "j", 1)
	checkVersionChain(t, s, "B-2", "k", 1)

	// The audit mirror holds every post and refusal of the batch, in order.
	audit := f.chainRecords(refs.Audit("test-writer"))[auditBefore:]
	events := []string{record.EventArtifactPosted, record.EventArtifactPosted, record.EventArtifactPosted, record.EventArtifactRefused, record.EventArtifactPosted, record.EventArtifactRefused}
	if len(audit) != len(events) {
		t.Fatalf("the batch added %d audit entries, want %d", len(audit), len(events))
	}
	for i, e := range events {
		if audit[i]["event"] != e || audit[i]["task_id"] != reqs[i].Task || audit[i]["actor"] != reqs[i].Agent {
			t.Fatalf("audit entry %d: %v, want %s by %s on %s", i, audit[i], e, reqs[i].Agent, reqs[i].Task)
		}
		if wants[i].reason != "" && audit[i]["details"].(map[string]any)["reason"] != wants[i].reason {
			t.Fatalf("audit entry %d: %v, want reason %s", i, audit[i], wants[i].reason)
		}
	}
	f.fsck()
	if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
		t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
	}
}

// TestPostBatchBadInputWritesNothing: bad input in any post of a batch
// refuses the whole batch before anything is written, naming the post and
// the field; so does a batch beyond the limits.
func TestPostBatchBadInputWritesNothing(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "B-1", "alice")
	good := bernstein.PostRequest{Task: "B-1", Key: "k", Agent: "alice", ClaimToken: tok, Payload: report("fine")}
	bigBody := strings.Repeat("x", artifact.MaxPayloadBytes-64)
	cases := []struct {
		name  string
		reqs  func() []bernstein.PostRequest
		index int
		field string
	}{
		{"bad key", func() []bernstein.PostRequest {
			bad := good
			bad.Key = "a key"
			return []bernstein.PostRequest{good, good, bad, good}
		}, 2, "key"},
		{"no claim token", func() []bernstein.PostRequest {
			bad := good
			bad.ClaimToken = ""
			return []bernstein.PostRequest{bad, good}
		}, 0, "claim_token"},
		{"bad payload", func() []bernstein.PostRequest {
			bad := good
			bad.Payload = artifact.Payload{Type: artifact.TypeLink, URL: "ftp://example.test", LinkKind: "preview"}
			return []bernstein.PostRequest{good, bad}
		}, 1, "url"},
		{"too many posts", func() []bernstein.PostRequest {
			out := make([]bernstein.PostRequest, bernstein.MaxBatchPosts+1)
			for i := range out {
				out[i] = good
			}
			return out
		}, bernstein.MaxBatchPosts, "batch"},
		{"too many bytes", func() []bernstein.PostRequest {
			var out []bernstein.PostRequest
			for i := 0; i <= bernstein.MaxBatchBytes/len(bigBody); i++ {
				big := good
				big.Payload = report(bigBody)
				out = append(out, big)
			}
			return out
		}, bernstein.MaxBatchBytes / len(bigBody), "batch"},
	}
	before := f.git("for-each-ref")
	for _, c := range cases {
		outs, err := s.PostBatch(c.reqs())
		var bad *bernstein.BatchInputError
		var in *artifact.InputError
		if !errors.As(err, &bad) || bad.Index != c.index || !errors.As(err, &in) || in.Field != c.field || outs != nil {
			t.Fatalf("%s: got %v (%T), want bad input in post %d, field %s", c.name, err, err, c.index, c.field)
		}
		if after := f.git("for-each-ref"); after != before {
			t.Fatalf("%s: a refused batch moved refs:\n%s\nwas\n%s", c.name, after, before)
		}
	}
	if outs, err := s.PostBatch(nil); err != nil || outs != nil {
		t.Fatalf("an empty batch: %v %v", outs, err)
	}
}

// TestPostBatchKilledAtEveryStep kills a process posting a batch (SIGKILL)
// right after each step of the write path: readers then see every post of
// the batch or none of them (its refusal too), never tampering; none was
// acknowledged; and the next writer finishes or discards the batch at once.
func TestPostBatchKilledAtEveryStep(t *testing.T) {
	for _, ws := range writeSteps {
		t.Run(ws.step, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.open()
			tok := f.claimed(s, "K-1", "agent")
			f.post(s, "K-1", "k", "agent", tok, report("version one"))
			auditBefore := len(f.chainRecords(refs.Audit("test-writer")))
			s.Close()

			// Four posts (v2 to v5) and a refusal.
			cmd := f.poster("K-1", "k", "agent", tok, 1)
			cmd.Env = append(cmd.Env, "BERNSTEIN_TEST_BATCH=4", "BERNSTEIN_TEST_INTRUDER=1", "BERNSTEIN_TEST_CRASH="+ws.step)
			out, _ := cmd.Output()
			st, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !st.Signaled() || st.Signal() != syscall.SIGKILL {
				t.Fatalf("the batch poster was not killed at %q (exit %d): %s", ws.step, cmd.ProcessState.ExitCode(), out)
			}
			if strings.Contains(string(out), "ok ") {
				t.Fatalf("the killed poster acknowledged a post: %s", out)
			}
			want, wantAudit := int64(1), 0
			if ws.committed {
				want, wantAudit = 5, 5
			}
			checkReaders(t, f, "K-1", "k", want)
			// The audit mirror read with plain git may lag behind a batch
			// committed but not finished (it moves after the spine, before
			// the journal); never ahead of one that was not committed.
			if got := len(f.chainRecords(refs.Audit("test-writer"))) - auditBefore; got != wantAudit && !(ws.committed && got == 0) {
				t.Fatalf("the audit mirror holds %d entries of the batch, want %d", got, wantAudit)
			}

			o := f.opts
			o.LockWait = 200 * time.Millisecond
			s2, err := bernstein.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s2.Post(bernstein.PostRequest{Task: "K-1", Key: "k", Agent: "agent", ClaimToken: tok, Payload: report("after the crash")})
			if err != nil {
				t.Fatalf("post after a crash at %q: %v", ws.step, err)
			}
			if res.Version != want+1 || res.JournalIndex != want {
				t.Fatalf("post after a crash at %q is v%d at index %d, want v%d at %d", ws.step, res.Version, res.JournalIndex, want+1, want)
			}
			checkVersionChain(t, s2, "K-1", "k", int(want+1))
			if got := len(f.chainRecords(refs.Audit("test-writer"))) - auditBefore; got != wantAudit+1 {
				t.Fatalf("after the next write the audit mirror holds %d entries of the batch and the post, want %d", got, wantAudit+1)
			}
			s2.Close()
			if left := leftovers(f); len(left) > 0 {
				t.Fatalf("left behind after the next write: %v", left)
			}
			f.fsck()
			if out, errOut, code := f.cli("", "audit", "verify"); code != 0 {
				t.Fatalf("audit verify: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}
