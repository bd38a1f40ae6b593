package wlog_test

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bernstein/bernstein/internal/wlog"
)

// TestRememberNeverMovesBack: of two checkpoints remembered in either
// order, the larger stays: a read that verified an older size after
// another read remembered a newer one does not undo it.
func TestRememberNeverMovesBack(t *testing.T) {
	h := wlog.Host{Home: t.TempDir(), ID: "0123456789abcdef0123456789abcdef"}
	origin := wlog.Origin(h.ID, "w")
	small := signWith(t, origin, 3, tlog.Hash{1})
	large := signWith(t, origin, 5, tlog.Hash{2})
	for _, order := range [][2][]byte{{small, large}, {large, small}} {
		if err := os.RemoveAll(h.Home); err != nil {
			t.Fatal(err)
		}
		for _, cp := range order {
			if err := h.Remember("w", cp); err != nil {
				t.Fatal(err)
			}
		}
		got, err := h.Seen("w")
		if err != nil || string(got) != string(large) {
			t.Fatalf("remembered %q (%v), want the checkpoint of size 5", got, err)
		}
	}
}

// TestUpdateConfigHoldsTheLock: an edit of the witness configuration runs
// holding the configuration's lock, so a second edit at once (another
// process) waits for it instead of writing over it.
func TestUpdateConfigHoldsTheLock(t *testing.T) {
	h := wlog.Host{Home: t.TempDir(), ID: "0123456789abcdef0123456789abcdef"}
	err := h.UpdateConfig(func(c *wlog.Config) error {
		f, err := os.OpenFile(h.ConfigPath()+".lock", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("another process could lock the configuration during an edit (%v)", err)
		}
		c.Quorum = 2
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.Config()
	if err != nil || c.Quorum != 2 {
		t.Fatalf("the edit did not land: %+v, %v", c, err)
	}
}
