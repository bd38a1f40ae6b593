package heads

import (
	"strings"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// superseded reports whether this host's writer replaced the chain ref of
// kind (a task's journal or ledger) that ended at m by another (task
// adopt), which head contains: its spine holds a supersede entry of the
// task whose dropped chain ended at m and whose new head head reaches. The
// transaction that adopts moves the spine with the task's refs, and the
// remembered head only after them: a reader between the two, or after a
// crash between them, must not call the adopted chain rolled back.
func (k *Keeper) superseded(kind, ref, writer string, head gitstore.Oid, pos int64, m Mark) (bool, error) {
	prefix := refs.JournalPrefix
	if kind == "ledger" {
		prefix = refs.LedgerPrefix
	}
	name, ok := strings.CutPrefix(ref, prefix)
	if !ok || writer == "" {
		return false, nil
	}
	task, err := refs.UnescapeTask(name)
	if err != nil {
		return false, nil
	}
	id, err := k.c.Identity()
	if err != nil {
		return false, nil
	}
	pub := id.PublicKey()
	spine, err := k.c.Refs.ReadOptional(refs.Spine(writer))
	if err != nil || spine.IsZero() {
		return false, err
	}
	var next *Mark
	var werr error
	chain.Walk(k.c.Objects, spine, func(cc chain.Commit) bool {
		if cc.Err != nil {
			werr = cc.Err
			return false
		}
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil || e.Supersede == nil || e.Supersede.TaskID != task {
			return err == nil
		}
		if keys.VerifyCommit(cc.Payload, cc.Commit.Signature, pub) != nil {
			return true // only an entry this writer signed speaks for it
		}
		c := e.Supersede.Journal
		if kind == "ledger" {
			c = e.Supersede.Ledger
		}
		if c.DroppedRows-1 != m.Pos || len(c.Dropped) > 0 && string(c.Dropped[len(c.Dropped)-1]) != m.Link || c.Rows == 0 {
			return true
		}
		next = &Mark{Pos: c.Rows - 1, Link: string(c.Head)}
		return false
	})
	if werr != nil || next == nil {
		return false, werr
	}
	return k.reaches(kind, head, pos, *next)
}
