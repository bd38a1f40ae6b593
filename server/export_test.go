package server

import "time"

// SetHeartbeat sets the stream's heartbeat for a test and returns the undo.
func SetHeartbeat(d time.Duration) func() {
	old := heartbeat
	heartbeat = d
	return func() { heartbeat = old }
}
