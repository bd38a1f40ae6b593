package remote

import "testing"

// TestPackPrunedInFlight: the messages git gives when a concurrent 'git gc
// --prune=now' deleted a fetch's temporary pack (as git printed them in the
// chaos run) are fetched again; any other failure is reported.
func TestPackPrunedInFlight(t *testing.T) {
	for msg, want := range map[string]bool{
		"could not open '/tmp/x/repo/.git/objects/pack/tmp_pack_u3Q6FD' for reading: No such file or directory; fetch-pack: invalid index-pack output": true,
		"unable to rename temporary '.git/objects/pack/tmp_pack_AbCdEf' file to '.git/objects/pack/pack-1234.pack'":                                    true,
		"'origin' does not appear to be a git repository; Could not read from remote repository.":                                                      false,
		"fetch-pack: invalid index-pack output":                             false,
		"could not open 'notes.txt' for reading: No such file or directory": false,
	} {
		if got := packPrunedInFlight(msg); got != want {
			t.Errorf("packPrunedInFlight(%q) = %v, want %v", msg, got, want)
		}
	}
}
