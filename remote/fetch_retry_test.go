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

// TestTrackingRaced: a fetch that found a remote-tracking ref moved or
// locked by another fetch of this host (as git printed it when two pushes
// raced in TestPushRaceSameHost) is made again; a lock on any other ref,
// or another failure, is reported.
func TestTrackingRaced(t *testing.T) {
	for msg, want := range map[string]bool{
		"cannot lock ref 'refs/bernstein-remotes/origin/audit/host-a': is at 7480a9d9156971615759a2c7a43a85b3ed6f867a but expected b2e48fc431d349fc24d709fae9c980a0b5429f1a": true,
		"cannot lock ref 'refs/bernstein-remotes/origin/spine/host-a': Unable to create '/r/.git/refs/bernstein-remotes/origin/spine/host-a.lock': File exists.":             true,
		"cannot lock ref 'refs/bernstein/audit/host-a': is at 7480a9d9156971615759a2c7a43a85b3ed6f867a but expected b2e48fc431d349fc24d709fae9c980a0b5429f1a":                false,
		"cannot lock ref 'refs/bernstein-remotes/origin/audit/host-a': unable to resolve reference 'refs/bernstein-remotes/origin/audit/host-a': reference broken":           false,
		"'origin' does not appear to be a git repository; Could not read from remote repository.":                                                                            false,
	} {
		if got := trackingRaced(msg); got != want {
			t.Errorf("trackingRaced(%q) = %v, want %v", msg, got, want)
		}
	}
}
