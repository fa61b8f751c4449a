// Package clocktest is a manual clock for tests of code that takes a
// Clock (Now and After), such as proxy.Runner and the reconciler: time
// moves only when the test steps it, so a test reads as a timeline.
package clocktest

import (
	"sync"
	"time"
)

// Fake is a manual clock. The zero value is not usable; use New.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// New returns a clock reading start.
func New(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the clock's time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once it has been
// stepped d past now; at once when d <= 0.
func (c *Fake) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Step moves the clock forward by d and fires every waiter that is due.
func (c *Fake) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// HasWaiterAt reports whether someone waits for exactly t.
func (c *Fake) HasWaiterAt(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.at.Equal(t) {
			return true
		}
	}
	return false
}

// Waiting returns the times waited for, earliest first, once each.
func (c *Fake) Waiting() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, w := range c.waiters {
		dup := false
		for _, o := range out {
			dup = dup || o.Equal(w.at)
		}
		if !dup {
			out = append(out, w.at)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Before(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
