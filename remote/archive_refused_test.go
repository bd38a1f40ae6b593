package remote

import "testing"

// TestArchiveUnknown: which refusals of a whole push are a guard's that
// predates storage format 3 (the lines as that guard prints them, written
// out by hand from its Problem format: "<ref>[ (<where>)]: <reason>
// [<check>]"), and which are not: push goes again without the archive only
// for the first kind.
func TestArchiveUnknown(t *testing.T) {
	const (
		archive  = "remote: bernstein guard: refused refs/bernstein/archive/host-a (writer host-a): bernstein writes no such ref (journal/, ledger/, spine/, audit/, writers/, anchors/, checkpoints/, forks/, keys or repository) [ref_name]"
		archive2 = "remote: bernstein guard: refused refs/bernstein/archive/host-b: bernstein writes no such ref (journal/, ledger/) [ref_name]"
		delJ     = "remote: bernstein guard: refused refs/bernstein/journal/OLD-1 (task OLD-1): push deletes refs/bernstein/journal/OLD-1 (at 0123456789ab): bernstein refs only grow and are never deleted [deletion]"
		delL     = "remote: bernstein guard: refused refs/bernstein/ledger/OLD-1 (task OLD-1): push deletes refs/bernstein/ledger/OLD-1 (at 0123456789ab): bernstein refs only grow and are never deleted [deletion]"
		summary  = "remote: bernstein guard: push refused: 3 problem(s); no ref was updated"
		why      = "refs/bernstein/archive/host-a: bernstein writes no such ref (journal/, ledger/, spine/, audit/, writers/, anchors/, checkpoints/, forks/, keys or repository) [ref_name]"
	)
	for _, c := range []struct {
		name string
		msgs []string
		want string
	}{
		{"the archive ref and its deletions", []string{archive, delJ, delL, summary}, why},
		{"the archive ref alone", []string{archive, summary}, why},
		{"two archive refs: the first named", []string{archive, archive2, summary}, why},
		{"deletions alone (an archive the guard knows, not covering them)", []string{delJ, delL, summary}, ""},
		{"an archive the guard knows and refuses", []string{"remote: bernstein guard: refused refs/bernstein/archive/host-a (archive seq 3, writer host-a): commit 0123456789ab: commit is not signed [archive_signature]", summary}, ""},
		{"another ref refused beside it", []string{archive, delJ, "remote: bernstein guard: refused refs/bernstein/spine/host-a (spine seq 4, writer host-a): commit 0123456789ab: commit is not signed [signature]", summary}, ""},
		{"an archive ref of a bad name", []string{"remote: bernstein guard: refused refs/bernstein/archive/a b: invalid writer name [ref_name]", delJ}, ""},
		{"a line of another shape", []string{archive, "remote: bernstein guard: refused: the witnesses are unreachable; no ref was updated"}, ""},
		{"another hook's refusal", []string{"remote: error: no pushes on Fridays"}, ""},
		{"nothing", nil, ""},
	} {
		if got := archiveUnknown(c.msgs); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
