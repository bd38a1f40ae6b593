package server

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadBatchesWholeOnly: a reader of the log (a follower, or a bus
// taking the lead) takes only whole batches: the entries of a batch whose
// closing line is not written yet, or is cut short, are left for later,
// and the offset stops after the last whole batch.
func TestReadBatchesWholeOnly(t *testing.T) {
	whole := `{"id":5,"type":"task.artifact","task":"T","chain":"journal","index":0,"commit":"c0"}` + "\n" +
		`{"id":6,"type":"task.progress","task":"T","vector":"v"}` + "\n" +
		`{"heads":{"T":{"journal_rows":1,"ledger_rows":2}},"vectors":{"T":"v"},"last":6,"end":true}` + "\n"
	for _, tail := range []string{
		"",
		`{"id":7,"type":"task.artifact","task":"T","chain":"journal","index":1,"commit":"c1"}` + "\n",
		`{"id":7,"type":"task.artifact","task":"T","chain":"journal","index":1,"commit":"c1"}` + "\n" + `{"last":7,"en`,
	} {
		p := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(p, []byte(whole+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		bs, off, maxID, err := readBatches(f, 0)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || len(bs[0].entries) != 2 || bs[0].last != 6 || bs[0].vectors["T"] != "v" || bs[0].heads["T"].JournalRows != 1 {
			t.Fatalf("tail %q: batches %+v", tail, bs)
		}
		if off != int64(len(whole)) {
			t.Fatalf("tail %q: offset %d, want %d", tail, off, len(whole))
		}
		if want := int64(6); tail != "" {
			want = 7
			if maxID != want {
				t.Fatalf("tail %q: largest id %d, want %d", tail, maxID, want)
			}
		}
	}
}
