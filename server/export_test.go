package server

import "time"

// SetHeartbeat sets the stream's heartbeat for a test and returns the undo.
func SetHeartbeat(d time.Duration) func() {
	old := heartbeat
	heartbeat = d
	return func() { heartbeat = old }
}

// SetRingSize sets how many events a bus keeps in memory, for a test, and
// returns the undo.
func SetRingSize(n int) func() {
	old := ringSize
	ringSize = n
	return func() { ringSize = old }
}
