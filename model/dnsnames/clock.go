package dnsnames

import "time"

// Clock is the cache's time source: TTL expiry, back-off and refresh all
// read it, so that tests move time by hand.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once, d after now.
	After(d time.Duration) <-chan time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
