package bernstein

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/record"
)

// TestArchiveCandidate: the one rule by which Store.Archive (every
// archivable task) and the automatic archive sort what Tx.Archivable says
// of a task, each case written out by hand: the automatic archive's keep
// (its seal is of the task's last ledger row) is the one difference.
func TestArchiveCandidate(t *testing.T) {
	e := record.ArchivedTask{TaskID: "T-1", LedgerRows: 4}
	lastRow := func(index int64) func(record.ArchivedTask) bool {
		return func(e record.ArchivedTask) bool { return e.LedgerRows-1 == index }
	}
	notArchivable := fmt.Errorf("task T-1 %w: no spine entry seals its journal", ErrNotArchivable)
	unproven := fmt.Errorf("%w: the ledger of T-1 holds a row no trusted writer signed", ErrUnproven)
	broken := errors.New("read objects: disk on fire")
	for _, c := range []struct {
		name   string
		err    error
		keep   func(record.ArchivedTask) bool
		ok     bool
		passed string
		stop   error
	}{
		{"archivable", nil, nil, true, "", nil},
		{"archivable, sealed at its last row", nil, lastRow(3), true, "", nil},
		{"archivable, sealed at an earlier row", nil, lastRow(1), false, "", nil},
		{"not ended", fmt.Errorf("task T-1 %w (it is claimed)", txn.ErrNotEnded), nil, false, "", nil},
		{"not ended, with keep", fmt.Errorf("task T-1 %w", txn.ErrNotEnded), lastRow(3), false, "", nil},
		{"unknown", fmt.Errorf("%w: T-1", ErrUnknownTask), nil, false, "", nil},
		{"not archivable", notArchivable, nil, false, notArchivable.Error(), nil},
		{"not archivable, with keep", notArchivable, lastRow(3), false, notArchivable.Error(), nil},
		{"unproven", unproven, nil, false, unproven.Error(), nil},
		{"another error", broken, nil, false, "", broken},
		{"another error, with keep", broken, lastRow(3), false, "", broken},
	} {
		ok, passed, stop := archiveCandidate(e, c.err, c.keep)
		if ok != c.ok || passed != c.passed || stop != c.stop {
			t.Errorf("%s: (%v, %q, %v), want (%v, %q, %v)", c.name, ok, passed, stop, c.ok, c.passed, c.stop)
		}
	}
}
