// Package waittest lets tests wait on conditions rather than sleep: a fake
// clock that notes what the code under test waits for, and pollers with a
// deadline.
package waittest

import (
	"slices"
	"sync"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// WaitClock is the library's fake clock, noting the times After is asked
// to wait for, so a test can wait until the code under test waits for a
// given time. Like time.After, After with d <= 0 fires at once.
type WaitClock struct {
	*clocktesting.FakeClock
	mu sync.Mutex
	at []time.Time
}

// NewWaitClock returns a WaitClock set to t.
func NewWaitClock(t time.Time) *WaitClock {
	return &WaitClock{FakeClock: clocktesting.NewFakeClock(t)}
}

// After implements the Clock's After.
func (c *WaitClock) After(d time.Duration) <-chan time.Time {
	if d <= 0 {
		ch := make(chan time.Time, 1)
		ch <- c.Now()
		return ch
	}
	c.mu.Lock()
	c.at = append(c.at, c.Now().Add(d))
	c.mu.Unlock()
	return c.FakeClock.After(d)
}

// HasWaiterAt reports whether someone waits for exactly t, still ahead.
func (c *WaitClock) HasWaiterAt(t time.Time) bool {
	if !t.After(c.Now()) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.at, t.Equal)
}

// Waiting returns the times still ahead that were waited for, earliest
// first, once each.
func (c *WaitClock) Waiting() []time.Time {
	now := c.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, a := range c.at {
		if a.After(now) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}
