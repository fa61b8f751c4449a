package memlimit

import (
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// keepGC restores the collector's target and the memory limit after t.
func keepGC(t *testing.T) {
	t.Helper()
	percent := debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
	t.Setenv("GOGC", "")
}

// gcPercent reads the collector's target.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestStartupWithoutFloor: half the target during the start-up (at least
// 10), the target after it; GOGC in the environment wins over both.
func TestStartupWithoutFloor(t *testing.T) {
	keepGC(t)
	for _, tc := range []struct{ percent, start, after int }{{50, 25, 50}, {12, 10, 12}, {200, 100, 200}} {
		done, note := Startup(tc.percent, 0)
		if got := gcPercent(); got != tc.start {
			t.Errorf("%d%%: %d%% during the start-up, want %d%% (%s)", tc.percent, got, tc.start, note)
		}
		done()
		if got := gcPercent(); got != tc.after {
			t.Errorf("%d%%: %d%% after the start-up, want %d%%", tc.percent, got, tc.after)
		}
	}
	t.Setenv("GOGC", "80")
	debug.SetGCPercent(100)
	done, note := Startup(50, 64<<20)
	done()
	if got := gcPercent(); got != 100 || !strings.Contains(note, "GOGC=80") {
		t.Errorf("with GOGC=80: target %d%%, note %q; want it left alone", got, note)
	}
}

// TestStartupFloor: no collection under the floor during the start-up; a
// live heap above it raises the limit to what half the target allows it;
// the end of the start-up gives back the target and the limit of before,
// and later collections leave them alone.
func TestStartupFloor(t *testing.T) {
	keepGC(t)
	const floor = 16 << 20
	before := debug.SetMemoryLimit(-1)
	done, note := Startup(50, floor)
	if got := gcPercent(); got != -1 {
		t.Errorf("target %d%% during the start-up, want off (%s)", got, note)
	}
	if got := debug.SetMemoryLimit(-1); got != floor {
		t.Errorf("limit %d during the start-up, want the floor %d", got, floor)
	}

	const live = 48 << 20
	held := make([]byte, live)
	for i := range held {
		held[i] = byte(i)
	}
	var limit int64
	deadline := time.Now().Add(10 * time.Second)
	for limit = debug.SetMemoryLimit(-1); limit == floor && time.Now().Before(deadline); limit = debug.SetMemoryLimit(-1) {
		runtime.GC()
		time.Sleep(time.Millisecond) // the finalizer runs on its own goroutine
	}
	// Half of 50 %: the live heap may grow by a quarter, beside what the
	// runtime holds that is not heap objects (a few MiB in a test).
	if lo, hi := int64(live)*125/100, int64(live)*125/100+32<<20; limit < lo || limit > hi {
		t.Errorf("with %d MiB live, limit %d MiB, want %d-%d MiB", live>>20, limit>>20, lo>>20, hi>>20)
	}
	runtime.KeepAlive(held)

	done()
	if got := gcPercent(); got != 50 {
		t.Errorf("target %d%% after the start-up, want 50%%", got)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit %d after the start-up, want %d as before", got, before)
	}
	held = nil
	for range 3 {
		runtime.GC()
		runtime.Gosched()
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit %d after later collections, want %d as before", got, before)
	}
}

// TestStartupLimit: the limit keeps what is not heap objects, lets the
// live heap grow by the percent, and stays between the floor and the
// ceiling.
func TestStartupLimit(t *testing.T) {
	const mib = 1 << 20
	s := memSample{live: 60 * mib, total: 120 * mib, released: 10 * mib, objects: 70 * mib, free: 30 * mib}
	// other: 120-10-70-30 = 10 MiB; goal 10 + 60*1.25 = 85 MiB.
	for _, tc := range []struct {
		name                  string
		s                     memSample
		floor, ceiling, limit int64
	}{
		{"above the floor", s, 80 * mib, math.MaxInt64, 85 * mib},
		{"under the floor", s, 96 * mib, math.MaxInt64, 96 * mib},
		{"over the ceiling", s, 80 * mib, 84 * mib, 84 * mib},
		{"floor over the ceiling", s, 96 * mib, 90 * mib, 90 * mib},
		{"nothing mapped but objects", memSample{live: 8 * mib, total: 8 * mib, objects: 8 * mib}, 0, math.MaxInt64, 10 * mib},
		{"a sample that does not add up", memSample{live: 8 * mib, total: 4 * mib, objects: 8 * mib}, 0, math.MaxInt64, 10 * mib},
	} {
		if got := startupLimit(tc.s, tc.floor, tc.ceiling, 25); got != tc.limit {
			t.Errorf("%s: limit %d MiB, want %d MiB", tc.name, got/mib, tc.limit/mib)
		}
	}
}
