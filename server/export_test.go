package server

import "time"

// WithHeartbeat returns o with the event stream's heartbeat set to d, for
// a test.
func WithHeartbeat(o Options, d time.Duration) Options {
	o.heartbeat = d
	return o
}

// WithRingSize returns o with the number of events its bus keeps in memory
// set to n, for a test.
func WithRingSize(o Options, n int) Options {
	o.ringSize = n
	return o
}

// WithClock returns o with the clock a new event log numbers its events
// from set to now, for a test.
func WithClock(o Options, now func() time.Time) Options {
	o.clock = now
	return o
}
