package hooks_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/hooks"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// TestGuardReadsOnlyWhatIsAdded: the guard's cost follows the push, not the
// history. On a short and on a long history, the same push (3 posts and 2
// checkpoints) makes it read the same commits: per chain the new ones and
// the remote's head they extend. By the write path (docs/format.md), a post
// adds a journal row, a spine entry and an audit entry, a checkpoint a
// journal row and an audit entry: (5+1) journal + (3+1) spine + (5+1)
// audit = 16.
func TestGuardReadsOnlyWhatIsAdded(t *testing.T) {
	const want = 16
	for _, history := range []int{5, 400} {
		t.Run(fmt.Sprintf("%d posts before", history), func(t *testing.T) {
			h := newHost(t, "host-a")
			h.task("T-1")
			for i := 0; i < history; i++ {
				h.post("T-1", fmt.Sprintf("key-%d", i%7), fmt.Sprintf("post %d", i))
			}
			reader := refs.Reader{Dir: h.s.GitDir()}
			names := []string{refs.Journal("T-1"), refs.Ledger("T-1"), refs.Spine("host-a"), refs.Audit("host-a"), refs.Writer("host-a")}
			old := map[string]gitstore.Oid{}
			for _, n := range names {
				old[n], _ = reader.ReadOptional(n)
			}
			h.post("T-1", "key-1", "new 1")
			h.checkpoint("T-1")
			h.post("T-1", "key-2", "new 2")
			h.checkpoint("T-1")
			h.post("T-1", "fresh", "new 3")
			var updates []hooks.Update
			for _, n := range names {
				nw, _ := reader.ReadOptional(n)
				if nw != old[n] {
					updates = append(updates, hooks.Update{Ref: n, Old: old[n], New: nw})
				}
			}
			if len(updates) != 3 {
				t.Fatalf("updates: %+v", updates)
			}
			trust, err := h.s.Trust()
			if err != nil {
				t.Fatal(err)
			}
			res := (&hooks.Guard{Objects: h.s.Objects(), Refs: reader, Trust: trust}).Check(updates)
			if len(res.Problems) > 0 {
				t.Fatalf("refused: %v", res.Problems)
			}
			if res.Stats.Commits != want {
				t.Fatalf("the guard read %d commits on a history of %d posts, want %d", res.Stats.Commits, history, want)
			}
			// A forged row naming a spine entry nobody wrote: the guard does
			// not go looking for it in the history, since no pinned key
			// signed the row. It reads the row and the head it extends.
			id, err := keys.Load(h.home)
			if err != nil {
				t.Fatal(err)
			}
			l := &lab{t: t, h: h, id: id, writer: "host-a"}
			j := l.tip(refs.Journal("T-1"))
			l.push(j, l.row(record.KindArtifactPosted, "T-1", j.pos+1, j.prev(), record.ArtifactPosted{Key: "k", ArtifactType: "report", Version: 1,
				SpineEntryHash: record.Sum([]byte("nowhere")), Blob: gitstore.HashObject(gitstore.TypeBlob, nil).String(), ContentHash: record.Sum(nil)}),
				l.tree(map[string][]byte{record.ArtifactPath("k", 1): nil}), "host-a", nil)
			res = l.check(nil, j.update())
			if res.Stats.Commits != 2 {
				t.Fatalf("the guard read %d commits for one forged row on a history of %d posts, want 2: %v", res.Stats.Commits, history, res.Problems)
			}
			// Likewise a forged spine entry sealing the journal's first row.
			s := l.tip(refs.Spine("host-a"))
			e := record.SpineArtifactEntry{SpineHeader: record.SpineHeader{V: 1, Writer: "host-a", Seq: s.pos + 1, Prev: s.prev(), Kind: record.SpineArtifact},
				TaskID: "T-1", Key: "key-0", Version: 1, ContentHash: record.Sum(nil), JournalIndex: 0, Actor: "agent-1"}
			l.push(s, record.MustCanonical(e), l.tree(nil), "host-a", nil)
			res = l.check(nil, s.update())
			if res.Stats.Commits != 2 {
				t.Fatalf("the guard read %d commits for one forged spine entry on a history of %d posts, want 2: %v", res.Stats.Commits, history, res.Problems)
			}
			// A forced push is refused after reading the remote's head and
			// what the push puts where it stands, whatever lies under it:
			// another line of history one row longer, forked under the
			// remote's head and signed by the writer's own key, reads the
			// remote's head, the new head and the commit at the remote
			// head's index (new - old + 2 = 3); a rewind reads the two
			// heads.
			j = l.tip(refs.Journal("T-1"))
			head, err := chain.Read(h.s.Objects(), j.old)
			if err != nil {
				t.Fatal(err)
			}
			under, err := chain.Read(h.s.Objects(), head.Commit.Parents[0])
			if err != nil {
				t.Fatal(err)
			}
			fork := &tip{ref: j.ref, old: j.old, head: under.ID, rec: under.Record, pos: j.pos - 1}
			l.checkpointRow(fork, l.id)
			l.checkpointRow(fork, l.id)
			for _, tc := range []struct {
				name   string
				update hooks.Update
				reason string
				reads  int
			}{
				{"fork", fork.update(), "which does not contain the remote's head", 3},
				{"rewind", hooks.Update{Ref: j.ref, Old: j.old, New: under.ID}, "not after the remote's", 2},
			} {
				res = l.check(nil, tc.update)
				if len(res.Problems) != 1 || res.Problems[0].Check != "non_fast_forward" || !strings.Contains(res.Problems[0].Reason, tc.reason) {
					t.Fatalf("%s: want one non_fast_forward problem saying %q, got %v", tc.name, tc.reason, res.Problems)
				}
				if res.Stats.Commits != tc.reads {
					t.Fatalf("the guard read %d commits to refuse a %s on a history of %d posts, want %d", res.Stats.Commits, tc.name, history, tc.reads)
				}
			}
		})
	}
}
