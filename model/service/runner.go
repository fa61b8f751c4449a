package service

import (
	"context"
	"sync"
	"time"
)

// Clock is the time source of a Runner.
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

// SyncFunc does one sync. full is true for the first sync, for the
// periodic full sync, and for the sync after a failed one; otherwise the
// sync may apply only what changed.
type SyncFunc func(ctx context.Context, full bool) error

// RunnerOptions configures a Runner.
type RunnerOptions struct {
	// MinInterval is the least time between the starts of two syncs
	// (kube-proxy's minSyncPeriod, 1 s by default there).
	MinInterval time.Duration
	// MaxInterval, when positive, runs a full sync when no sync has run
	// for that long (kube-proxy's syncPeriod).
	MaxInterval time.Duration
	// RetryInterval is the wait before retrying a failed sync; it is at
	// least MinInterval.
	RetryInterval time.Duration
	// Clock defaults to RealClock.
	Clock Clock
}

// Runner runs a SyncFunc when asked, at most once per MinInterval.
// Requests that arrive while a sync is due merge into it through a
// one-slot channel, so a burst of changes costs one sync.
type Runner struct {
	fn   SyncFunc
	opts RunnerOptions
	req  chan struct{}

	mu       sync.Mutex
	lastErr  error
	lastRun  time.Time
	needFull bool
}

// NewRunner returns a runner of fn; start it with Loop.
func NewRunner(fn SyncFunc, opts RunnerOptions) *Runner {
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.RetryInterval < opts.MinInterval {
		opts.RetryInterval = opts.MinInterval
	}
	return &Runner{fn: fn, opts: opts, req: make(chan struct{}, 1), needFull: true}
}

// Run asks for a sync. It never blocks; a request made while one is
// already waiting merges with it.
func (r *Runner) Run() {
	select {
	case r.req <- struct{}{}:
	default:
	}
}

// SyncedFull records a full sync of the runner's function that succeeded
// outside Loop, started at start (the one a feature runs before its loop
// starts): Loop's first sync then applies only what changed since, instead
// of doing everything again.
func (r *Runner) SyncedFull(start time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.needFull, r.lastRun, r.lastErr = false, start, nil
}

// LastError returns the error of the last sync, nil if it succeeded.
func (r *Runner) LastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Loop runs syncs until ctx is done. The first sync runs at once, full.
func (r *Runner) Loop(ctx context.Context) {
	clk := r.opts.Clock
	var due <-chan time.Time // a sync scheduled for later
	var periodic <-chan time.Time
	run := func() {
		r.mu.Lock()
		full := r.needFull
		r.mu.Unlock()
		start := clk.Now()
		err := r.fn(ctx, full)
		r.mu.Lock()
		r.lastRun, r.lastErr = start, err
		r.needFull = err != nil
		r.mu.Unlock()
		due = nil
		if err != nil {
			due = clk.After(r.opts.RetryInterval)
		}
		if r.opts.MaxInterval > 0 {
			periodic = clk.After(r.opts.MaxInterval)
		}
	}
	run()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.req:
			if due != nil {
				continue // merged into the sync already scheduled
			}
			wait := r.lastRun.Add(r.opts.MinInterval).Sub(clk.Now())
			if wait <= 0 {
				run()
			} else {
				due = clk.After(wait)
			}
		case <-due:
			run()
		case <-periodic:
			r.mu.Lock()
			r.needFull = true
			r.mu.Unlock()
			run()
		}
	}
}
