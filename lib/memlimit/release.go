package memlimit

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// The agent's heap is mostly its desired state; when a large part of it
// goes (a Service of 100 ports and 1,000 endpoints deleted), the garbage
// is not collected until something allocates enough to start a collection,
// or the runtime's forced collection every two minutes, and the runtime
// returns the freed pages to the system only after a collection: the
// process stays at its peak for minutes (measured: 2 to 3 minutes in the
// testbed). A Releaser collects and returns the memory soon after such a
// shrink, at most once per MinInterval.

// Default release settings (see ReleaseOptions).
const (
	DefaultReleaseMinDrop     = 4 << 20
	DefaultReleaseDelay       = 2 * time.Second
	DefaultReleaseMinInterval = 30 * time.Second
)

// Clock is the time a Releaser reads and waits on.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ReleaseOptions configure a Releaser; zero values take the defaults.
type ReleaseOptions struct {
	// MinDrop is the smallest drop below the peak, in bytes of the size
	// observed, that asks for a release; a drop must also be a quarter of
	// the peak.
	MinDrop int64
	// Delay is the wait between the drop and the release: what lets go
	// of the state after the observed one (informer caches, the models
	// the state is built from) has let go by then.
	Delay time.Duration
	// MinInterval spaces two releases: each costs a full collection.
	MinInterval time.Duration
	// Clock defaults to the system's; Free to debug.FreeOSMemory.
	Clock Clock
	Free  func()
}

// Releaser returns memory to the system after the size of what a process
// keeps (observed with Observe, in any unit that follows its memory)
// drops well below its peak. Run does the releasing.
type Releaser struct {
	opts ReleaseOptions
	want chan struct{}

	mu   sync.Mutex
	peak int64

	releases atomic.Uint64
}

// NewReleaser returns a Releaser with opts.
func NewReleaser(opts ReleaseOptions) *Releaser {
	if opts.MinDrop <= 0 {
		opts.MinDrop = DefaultReleaseMinDrop
	}
	if opts.Delay <= 0 {
		opts.Delay = DefaultReleaseDelay
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = DefaultReleaseMinInterval
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Free == nil {
		opts.Free = debug.FreeOSMemory
	}
	return &Releaser{opts: opts, want: make(chan struct{}, 1)}
}

// Observe records the size of what the process keeps now. A size at least
// MinDrop and a quarter below the peak since the last release asks Run
// for one, and starts the peak again from size.
func (r *Releaser) Observe(size int64) {
	r.mu.Lock()
	if size >= r.peak {
		r.peak = size
		r.mu.Unlock()
		return
	}
	drop := r.peak - size
	if drop < r.opts.MinDrop || drop < r.peak/4 {
		r.mu.Unlock()
		return
	}
	r.peak = size
	r.mu.Unlock()
	select {
	case r.want <- struct{}{}:
	default:
	}
}

// Releases returns how many releases Run has made.
func (r *Releaser) Releases() uint64 { return r.releases.Load() }

// Run releases memory when asked, Delay after the request and at least
// MinInterval after the previous release (requests in between merge), until
// ctx ends.
func (r *Releaser) Run(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.want:
		}
		wait := r.opts.Delay
		if !last.IsZero() {
			wait = max(wait, last.Add(r.opts.MinInterval).Sub(r.opts.Clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-r.opts.Clock.After(wait):
		}
		// What asked meanwhile is served by this release.
		select {
		case <-r.want:
		default:
		}
		r.opts.Free()
		last = r.opts.Clock.Now()
		r.releases.Add(1)
	}
}
