package memlimit

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultStartupFloorMiB is the Go memory, in MiB, that the agent's
// start-up may use before the collector first runs (--gc-startup-floor).
// At 10,000 Services the start-up's live heap ends near 63 MiB, so the
// floor keeps the collector out of the start-up's first two thirds, where
// the heap is small and every collection is wasted work, and bounds the
// start-up's peak near it (docs/benchmarks.md).
const DefaultStartupFloorMiB = 80

// Startup sets the collector for the agent's start-up and returns the
// function that ends it (call it once, when the start-up is over) and a
// sentence for the log.
//
// A start-up builds the desired state of every object at once, and most of
// what it allocates on the way is garbage within milliseconds. Until the
// start-up ends, the collector does not run while the Go runtime's memory
// stays under floor bytes; above the floor it runs at half of percent (at
// least 10) of the live heap, so that the start-up's garbage does not set
// the process's peak resident memory. The runtime's memory limit enforces
// the floor: after each collection it is set to the larger of the floor and
// what that percent allows the live heap, never above the limit that was
// set before (the cgroup's, or GOMEMLIMIT). When the start-up ends, the
// collector runs at percent, under the limit of before.
//
// GOGC in the environment wins over both; a percent of 0 or less keeps
// Go's default target; a floor of 0 or less collects from the start at
// half of percent.
func Startup(percent int, floor int64) (func(), string) {
	if os.Getenv("GOGC") != "" || percent <= 0 {
		return func() {}, SetGCPercent(percent)
	}
	start := max(percent/2, 10)
	if floor <= 0 {
		debug.SetGCPercent(start)
		return func() { debug.SetGCPercent(percent) },
			fmt.Sprintf("garbage collector target %d%% (GOGC) during the start-up, then %d%%", start, percent)
	}
	ceiling := debug.SetMemoryLimit(-1)
	t := &tuner{floor: floor, ceiling: ceiling, percent: start, samples: newSamples()}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(min(floor, ceiling))
	t.arm()
	done := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.stopped {
			return
		}
		t.stopped = true
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(ceiling)
	}
	return done, fmt.Sprintf("garbage collector during the start-up: none under %d MiB of Go memory, then a target of %d%%; after it %d%% (GOGC)",
		floor>>20, start, percent)
}

// tuner moves the runtime's memory limit after each collection of the
// start-up.
type tuner struct {
	floor, ceiling int64
	percent        int

	mu      sync.Mutex
	stopped bool
	samples []metrics.Sample
}

// sentinel is an object that lives until the next collection: its
// finalizer tells the tuner that one ran. It is larger than the tiny
// allocator's blocks, whose objects may never be finalized.
type sentinel struct{ _ [64]byte }

// arm allocates a sentinel whose finalizer, run after the next
// collection, tunes the limit and arms the next one, until the start-up
// is over.
func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if t.tune() {
			t.arm()
		}
	})
}

// tune sets the limit for the live heap the last collection found. It
// returns false once the start-up is over.
func (t *tuner) tune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	debug.SetMemoryLimit(startupLimit(readSample(t.samples), t.floor, t.ceiling, t.percent))
	return true
}

// The runtime metrics the tuner reads, in sample order.
var sampleNames = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
}

func newSamples() []metrics.Sample {
	s := make([]metrics.Sample, len(sampleNames))
	for i, n := range sampleNames {
		s[i].Name = n
	}
	return s
}

// memSample is what the runtime reports after a collection, in bytes.
type memSample struct {
	live     int64 // the heap the last collection marked live
	total    int64 // all memory the runtime has mapped
	released int64 // mapped heap memory returned to the system
	objects  int64 // heap objects, live or not yet swept
	free     int64 // free heap memory not returned yet
}

func readSample(s []metrics.Sample) memSample {
	v := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(min(s[i].Value.Uint64(), math.MaxInt64))
	}
	return memSample{live: v(0), total: v(1), released: v(2), objects: v(3), free: v(4)}
}

// startupLimit is the memory limit after a collection that found s: the
// runtime's memory that is not heap objects (stacks, its own structures,
// the spans' unused parts), plus the live heap grown by percent; at least
// floor, at most ceiling.
func startupLimit(s memSample, floor, ceiling int64, percent int) int64 {
	other := max(s.total-s.released-s.objects-s.free, 0)
	goal := other + s.live + s.live*int64(percent)/100
	return min(ceiling, max(floor, goal))
}
