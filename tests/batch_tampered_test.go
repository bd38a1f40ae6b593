package tests

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/refs"
)

// A batch post over the writer's own spine or audit mirror forged with
// plain git (docs/trust.md, Entries appended to the writer's own spine or
// audit mirror) reports it as a single post does: every receipt of a post
// the batch posted carries the warning in tampered, a refused post none,
// and a batch over the writer's own chains carries nothing.

// TestPostBatchResultNamesForgedOwnChain: the library's PostBatch.
func TestPostBatchResultNamesForgedOwnChain(t *testing.T) {
	f, tok := ownChainFixture(t)
	ref := refs.Spine("test-writer")
	honest, forged := appendForged(f, ref)
	s := f.open()
	defer s.Close()
	reqs := []bernstein.PostRequest{
		{Task: "OC-1", Key: "two", Agent: "agent", ClaimToken: tok, Payload: report("two")},
		{Task: "OC-1", Key: "two", Agent: "intruder", ClaimToken: "bct_intruder", Payload: report("no")},
		{Task: "OC-1", Key: "three", Agent: "agent", ClaimToken: tok, Payload: report("three")},
	}
	outs, err := s.PostBatch(reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := ref + " (at " + forged + ") was tampered with"
	for _, i := range []int{0, 2} {
		if outs[i].Err != nil {
			t.Fatalf("post %d: %v", i, outs[i].Err)
		}
		if tam := outs[i].Result.Tampered; len(tam) != 1 || !strings.HasPrefix(tam[0], want) {
			t.Fatalf("post %d: tampered %q, want the warning %q...", i, tam, want)
		}
	}
	var refused *bernstein.RefusedError
	if !errors.As(outs[1].Err, &refused) || outs[1].Result != nil {
		t.Fatalf("post 1: %+v, want refused with no receipt", outs[1])
	}
	// Two posts, two spine entries, on the writer's own head.
	if p := rev(f, ref+"~2"); p != honest {
		t.Fatalf("the batch's spine entries sit on %s, want %s", p, honest)
	}
	if f.isAncestor(forged, rev(f, ref)) {
		t.Fatalf("%s still holds the forged %s", ref, forged)
	}
	outs, err = s.PostBatch(reqs[2:])
	if err != nil || outs[0].Err != nil {
		t.Fatalf("the batch after the recovery: %v %v", err, outs)
	}
	if tam := outs[0].Result.Tampered; len(tam) != 0 {
		t.Fatalf("tampered after the recovery: %q", tam)
	}
}

// TestPostBatchCLINamesForgedOwnChain: artifact post --stdin prints
// tampered on every posted line, as artifact post --output-json does.
func TestPostBatchCLINamesForgedOwnChain(t *testing.T) {
	for _, kind := range []string{"spine", "audit"} {
		t.Run(kind, func(t *testing.T) {
			f, tok := ownChainFixture(t)
			ref := refs.Prefix + kind + "/test-writer"
			honest, forged := appendForged(f, ref)
			in := `{"task":"OC-1","key":"two","type":"report","body":"# two","agent":"agent","claim-token":"` + tok + `"}
{"task":"OC-1","key":"two","type":"report","body":"no","agent":"intruder","claim-token":"bct_intruder"}
{"task":"OC-1","key":"three","type":"report","body":"# three","agent":"agent","claim-token":"` + tok + `"}
`
			out, errOut, code := f.cli(in, "artifact", "post", "--stdin")
			if code != 3 {
				t.Fatalf("exit %d, want 3 (one refused)\n%s%s", code, out, errOut)
			}
			if n := strings.Count(errOut, "warning: "+ref+" (at "+forged+") was tampered with"); n != 1 {
				t.Errorf("stderr names the forged %s %d times, want once: %q", ref, n, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 {
				t.Fatalf("stdout: %q, want 3 lines", out)
			}
			want := ref + " (at " + forged + ") was tampered with"
			for i, l := range lines {
				var doc struct {
					Status   string   `json:"status"`
					Tampered []string `json:"tampered"`
				}
				if err := json.Unmarshal([]byte(l), &doc); err != nil {
					t.Fatal(err)
				}
				switch {
				case i == 1 && (doc.Status != "refused" || strings.Contains(l, "tampered")):
					t.Errorf("line %d: %s, want refused with no tampered", i+1, l)
				case i != 1 && (doc.Status != "posted" || len(doc.Tampered) != 1 || !strings.HasPrefix(doc.Tampered[0], want)):
					t.Errorf("line %d: %s, want posted with tampered %q...", i+1, l, want)
				}
			}
			if f.isAncestor(forged, rev(f, ref)) || !f.isAncestor(honest, rev(f, ref)) {
				t.Fatalf("%s at %s: want the writer's %s extended, without the forged %s", ref, rev(f, ref), honest, forged)
			}
			out, errOut, code = f.cli(`{"task":"OC-1","key":"four","type":"report","body":"# four","agent":"agent","claim-token":"`+tok+`"}`+"\n", "artifact", "post", "--stdin")
			if code != 0 || strings.Contains(out+errOut, "tamper") {
				t.Fatalf("the batch after the recovery: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}
