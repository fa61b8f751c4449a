package syncloop

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// KeyedFunc does one pass over keys, the keys marked since the last pass
// (in no particular order, each once; the keys that failed last time are
// among them). full is true when MarkAll or the periodic full pass asked
// for everything: the function then syncs every key it knows of, keys
// included. It returns the keys it could not sync, to be retried.
type KeyedFunc[K comparable] func(ctx context.Context, keys []K, full bool) (failed []K)

// KeyedOptions configures a Keyed loop.
type KeyedOptions struct {
	// MinInterval is the least time between the starts of two passes.
	MinInterval time.Duration
	// MaxInterval, when positive, runs a full pass when no pass has run
	// for that long.
	MaxInterval time.Duration
	// RetryInterval is the wait before a failed key's first retry.
	RetryInterval time.Duration
	// MaxRetryInterval caps a key's back-off, which doubles with each
	// failure in a row; at most RetryInterval (the default), every retry
	// waits RetryInterval.
	MaxRetryInterval time.Duration
	// Clock defaults to the wall clock.
	Clock clock.Clock
}

// Keyed is a sync loop over a set of dirty keys: Mark adds keys and wakes
// the loop, whose passes take every key marked since the last one. Keys
// that fail are marked again and retried after their back-off.
//
// Unlike Runner, Loop's first pass is not full: a user does its full sync
// itself before the loop starts (MarkAll then SyncNow, say), and the first
// pass takes what was marked since.
type Keyed[K comparable] struct {
	fn      KeyedFunc[K]
	r       *Runner
	clk     clock.Clock
	backoff workqueue.TypedRateLimiter[K]

	// passMu makes passes one at a time (Loop's and SyncNow's).
	passMu sync.Mutex

	mu    sync.Mutex
	dirty map[K]struct{}
	all   bool
}

// NewKeyed returns a keyed loop of fn; start it with Loop.
func NewKeyed[K comparable](fn KeyedFunc[K], opts KeyedOptions) *Keyed[K] {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxRetryInterval < opts.RetryInterval {
		opts.MaxRetryInterval = opts.RetryInterval
	}
	k := &Keyed[K]{fn: fn, clk: opts.Clock, dirty: map[K]struct{}{},
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[K](opts.RetryInterval, opts.MaxRetryInterval)}
	k.r = NewRunner(func(ctx context.Context, full bool) error {
		k.pass(ctx, full)
		return nil
	}, RunnerOptions{MinInterval: opts.MinInterval, MaxInterval: opts.MaxInterval, Clock: opts.Clock})
	k.r.fullOnError, k.r.needFull = false, false
	return k
}

// Mark marks keys dirty and wakes the loop. It never blocks. Mark with no
// keys only wakes the loop, for a pass whose function finds its work
// elsewhere.
func (k *Keyed[K]) Mark(keys ...K) {
	if len(keys) > 0 {
		k.mu.Lock()
		for _, key := range keys {
			k.dirty[key] = struct{}{}
		}
		k.mu.Unlock()
	}
	k.r.Run()
}

// MarkAll asks for a full pass and wakes the loop. It never blocks.
func (k *Keyed[K]) MarkAll() {
	k.mu.Lock()
	k.all = true
	k.mu.Unlock()
	k.r.Run()
}

// Reset drops every mark. A feature calls it just before a full sync that
// reads all its sources outside the loop: what changes from then on is
// marked again.
func (k *Keyed[K]) Reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.dirty)
	k.all = false
}

// Loop runs passes until ctx is done. The first runs at once.
func (k *Keyed[K]) Loop(ctx context.Context) { k.r.Loop(ctx) }

// SyncNow runs a pass in the caller's goroutine, after the one running
// (if any), and reports whether some key failed (its retry is scheduled
// as in the loop's passes).
func (k *Keyed[K]) SyncNow(ctx context.Context) (failed bool) {
	return k.pass(ctx, false)
}

// pass takes the marks, calls the function, marks the failed keys again
// and arms their retry, or disarms it when none failed.
func (k *Keyed[K]) pass(ctx context.Context, full bool) bool {
	k.passMu.Lock()
	defer k.passMu.Unlock()
	// This pass takes every mark made so far: a wake-up they left would
	// only cost an empty pass. Marks made from now on wake the loop again.
	select {
	case <-k.r.req:
	default:
	}
	k.mu.Lock()
	keys := make([]K, 0, len(k.dirty))
	for key := range k.dirty {
		keys = append(keys, key)
	}
	clear(k.dirty)
	full = full || k.all
	k.all = false
	k.mu.Unlock()

	failed := k.fn(ctx, keys, full)

	bad := make(map[K]struct{}, len(failed))
	for _, key := range failed {
		bad[key] = struct{}{}
	}
	for _, key := range keys {
		if _, ok := bad[key]; !ok {
			k.backoff.Forget(key)
		}
	}
	if len(bad) == 0 {
		k.r.setLater(time.Time{})
		return false
	}
	wait := time.Duration(-1)
	k.mu.Lock()
	for key := range bad {
		k.dirty[key] = struct{}{}
		if d := k.backoff.When(key); wait < 0 || d < wait {
			wait = d
		}
	}
	k.mu.Unlock()
	k.r.setLater(k.clk.Now().Add(wait))
	return true
}
