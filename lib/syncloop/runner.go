package syncloop

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

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
	// Clock defaults to the wall clock.
	Clock clock.Clock
}

// Runner runs a SyncFunc when asked, at most once per MinInterval.
// Requests that arrive while a sync is due merge into it through a
// one-slot channel, so a burst of changes costs one sync.
type Runner struct {
	fn   SyncFunc
	opts RunnerOptions
	req  chan struct{}
	// later wakes the loop to (re)arm or stop its later timer at laterAt.
	later chan struct{}
	// fullOnError: a failed sync is retried after RetryInterval, full;
	// false for Keyed, which schedules its own retries through laterAt.
	fullOnError bool
	// ran, when set (by tests), is called after each of Loop's syncs, once
	// its timers are armed.
	ran func()

	mu       sync.Mutex
	lastErr  error
	lastRun  time.Time
	needFull bool
	laterAt  time.Time // zero: no later request
}

// NewRunner returns a runner of fn; start it with Loop.
func NewRunner(fn SyncFunc, opts RunnerOptions) *Runner {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.RetryInterval < opts.MinInterval {
		opts.RetryInterval = opts.MinInterval
	}
	return &Runner{fn: fn, opts: opts, req: make(chan struct{}, 1), later: make(chan struct{}, 1),
		fullOnError: true, needFull: true}
}

// Run asks for a sync. It never blocks; a request made while one is
// already waiting merges with it.
func (r *Runner) Run() {
	select {
	case r.req <- struct{}{}:
	default:
	}
}

// RunAfter asks for a sync d from now, as Run would then, unless such a
// request is already pending for an earlier time. It never blocks; syncs
// that run meanwhile leave it pending. A feature uses it to retry a part
// of its sync whose failure does not fail the sync.
func (r *Runner) RunAfter(d time.Duration) {
	at := r.opts.Clock.Now().Add(d)
	r.mu.Lock()
	if !r.laterAt.IsZero() && !at.Before(r.laterAt) {
		r.mu.Unlock()
		return
	}
	r.laterAt = at
	r.mu.Unlock()
	r.wakeLater()
}

// setLater replaces the later request: at zero cancels it.
func (r *Runner) setLater(at time.Time) {
	r.mu.Lock()
	if r.laterAt.Equal(at) {
		r.mu.Unlock()
		return
	}
	r.laterAt = at
	r.mu.Unlock()
	r.wakeLater()
}

func (r *Runner) wakeLater() {
	select {
	case r.later <- struct{}{}:
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

// Loop runs syncs until ctx is done. The first sync runs at once, full
// (unless SyncedFull said that one has run).
func (r *Runner) Loop(ctx context.Context) {
	clk := r.opts.Clock
	due := newAlarm(clk)      // a sync scheduled for later
	periodic := newAlarm(clk) // the full sync after MaxInterval
	later := newAlarm(clk)    // RunAfter's request
	defer due.stop()
	defer periodic.stop()
	defer later.stop()
	var laterFor time.Time // the time later is armed for
	var laterChanged func()
	run := func() {
		r.mu.Lock()
		full := r.needFull
		r.mu.Unlock()
		start := clk.Now()
		err := r.fn(ctx, full)
		r.mu.Lock()
		r.lastRun, r.lastErr = start, err
		r.needFull = err != nil && r.fullOnError
		r.mu.Unlock()
		due.stop()
		if err != nil && r.fullOnError {
			due.set(r.opts.RetryInterval)
		}
		if r.opts.MaxInterval > 0 {
			periodic.set(r.opts.MaxInterval)
		}
		// A later request the sync made (Keyed's retries) is armed now.
		select {
		case <-r.later:
			laterChanged()
		default:
		}
		if r.ran != nil {
			r.ran()
		}
	}
	laterChanged = func() {
		r.mu.Lock()
		at := r.laterAt
		r.mu.Unlock()
		switch wait := at.Sub(clk.Now()); {
		case at.IsZero():
			later.stop()
		case wait <= 0:
			later.stop()
			r.clearLater(at)
			r.Run() // through the loop, not from inside a sync
		default:
			later.set(wait)
			laterFor = at
		}
	}
	request := func() {
		if due.armed {
			return // merged into the sync already scheduled
		}
		wait := r.lastRun.Add(r.opts.MinInterval).Sub(clk.Now())
		if wait <= 0 {
			run()
		} else {
			due.set(wait)
		}
	}
	run()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.req:
			request()
		case <-r.later:
			laterChanged()
		case <-later.fired():
			later.armed = false
			r.clearLater(laterFor)
			request()
		case <-due.fired():
			due.armed = false
			run()
		case <-periodic.fired():
			periodic.armed = false
			r.mu.Lock()
			r.needFull = true
			r.mu.Unlock()
			run()
		}
	}
}

// clearLater drops the later request at, unless it was replaced meanwhile.
func (r *Runner) clearLater(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.laterAt.Equal(at) {
		r.laterAt = time.Time{}
	}
}

// alarm is a timer of the loop, armed or not. Only the loop's goroutine
// uses it.
type alarm struct {
	t     clock.Timer
	armed bool
}

func newAlarm(clk clock.Clock) *alarm {
	t := clk.NewTimer(time.Hour)
	t.Stop()
	return &alarm{t: t}
}

// set (re)arms the alarm d from now.
func (a *alarm) set(d time.Duration) {
	a.stop()
	a.t.Reset(d)
	a.armed = true
}

// stop disarms the alarm and drops a firing not yet taken.
func (a *alarm) stop() {
	if !a.t.Stop() {
		select {
		case <-a.t.C():
		default:
		}
	}
	a.armed = false
}

// fired returns the channel that fires when the armed alarm is due, nil
// (which never fires) when disarmed. Whoever takes the firing sets armed
// to false.
func (a *alarm) fired() <-chan time.Time {
	if !a.armed {
		return nil
	}
	return a.t.C()
}
