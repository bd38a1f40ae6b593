package ledger

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/record"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current code")

const (
	goldenDir    = "testdata/golden"
	goldenHashes = goldenDir + "/hashes.txt"
)

// goldenLedger is one ledger that goes through every transition kind; each
// row's canonical bytes and hash are pinned in testdata/golden/<kind>.json.
func goldenLedger(t *testing.T) []record.Row {
	c := &chain{t: t, task: "proj:feature-42"}
	c.add(record.KindTaskCreated, "alice", Created{
		Title: "Parse \"quoted\" CSV — ünïcode ✓",
		Evidence: []Producer{
			{Name: "unit-tests", Kind: "test", Command: "go test ./...", Required: true},
			{Name: "coverage", Kind: "metric", Command: "go test -cover ./... | tail -1", Required: false},
		},
		Gates: []Gate{{Name: "vet", Command: "go vet ./..."}, {Name: "fmt", Command: "test -z \"$(gofmt -l .)\""}},
	})
	c.add(record.KindTaskClaimed, "bot-1", Claimed{Agent: "bot-1", ClaimID: "claim-0001", TokenSHA256: record.Sum([]byte("secret claim token"))})
	c.add(record.KindTaskStarted, "bot-1", Transition{Reason: ""})
	c.add(record.KindTaskSuspended, "bot-1", Transition{Reason: "waiting for\nreview"})
	c.add(record.KindTaskResumed, "bot-1", Transition{Reason: "review done"})
	c.add(record.KindTaskReleased, "bot-1", Transition{Reason: "handing over to bot-2"})
	c.add(record.KindTaskClaimed, "bot-2", Claimed{Agent: "bot-2", ClaimID: "claim-0002", TokenSHA256: record.Sum([]byte("another token"))})
	c.add(record.KindTaskFailed, "bot-2", Transition{Reason: "tests flaky: 3/10 failed"})
	c.add(record.KindTaskReopened, "alice", Transition{Reason: "flake fixed"})
	c.add(record.KindTaskAbandoned, "alice", Transition{Reason: "superseded by proj:feature-43"})
	c.add(record.KindTaskReopened, "alice", Transition{Reason: "needed after all"})
	c.add(record.KindTaskClaimed, "bot-3", Claimed{Agent: "bot-3", ClaimID: "claim-0003", TokenSHA256: record.Sum([]byte("third token"))})
	c.add(record.KindTaskStarted, "bot-3", Transition{})
	c.add(record.KindTaskCompleted, "bot-3", Transition{Reason: "all gates green"})
	return c.rows
}

func goldenName(i int, r record.Row) string {
	return fmt.Sprintf("%02d_%s", i, r.Kind)
}

func TestGoldenLedgerRows(t *testing.T) {
	rows := goldenLedger(t)
	// The golden ledger folds: every row is legal where it stands.
	var s State
	kinds := map[string]bool{}
	for _, r := range rows {
		if err := s.Apply(r); err != nil {
			t.Fatalf("golden ledger does not fold: %v", err)
		}
		kinds[r.Kind] = true
		// The claim token is never stored, only its sha256.
		if bytes.Contains(r.Bytes(), []byte("token\"")) || bytes.Contains(r.Bytes(), []byte("secret")) {
			t.Errorf("row %d carries a token: %s", r.Index, r.Bytes())
		}
	}
	if len(kinds) != len(allKinds) {
		t.Fatalf("golden ledger covers %d of %d kinds", len(kinds), len(allKinds))
	}
	if s.Phase != PhaseCompleted || s.Started != 2 || s.Claim != nil || s.Rows != int64(len(rows)) {
		t.Errorf("golden ledger folds to %+v", s)
	}
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for i, r := range rows {
			n := goldenName(i, r)
			if err := os.WriteFile(filepath.Join(goldenDir, n+".json"), r.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, n+" "+string(r.Hash()))
		}
		if err := os.WriteFile(goldenHashes, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(goldenHashes)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != len(rows) {
		t.Fatalf("%s has %d lines, the golden ledger %d rows", goldenHashes, len(lines), len(rows))
	}
	for i, r := range rows {
		n := goldenName(i, r)
		want, err := os.ReadFile(filepath.Join(goldenDir, n+".json"))
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if got := r.Bytes(); !bytes.Equal(got, want) {
			t.Errorf("%s: canonical bytes changed\n got: %s\nwant: %s", n, got, want)
		}
		if got := n + " " + string(record.Sum(want)); lines[i] != got || r.Hash() != record.Sum(want) {
			t.Errorf("hash line %d = %q, want %q", i, lines[i], got)
		}
		// Reading the golden back gives the same row and the same hash.
		p, err := record.ParseRow(want)
		if err != nil || p.Hash() != r.Hash() {
			t.Errorf("%s: ParseRow = %v", n, err)
		}
	}
}
