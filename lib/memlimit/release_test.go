package memlimit

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestReleaserTimeline follows a Releaser along a commented timeline: a
// large drop asks for a release after Delay; growth and small drops do
// not; a second drop soon after waits for MinInterval; drops in between
// merge.
func TestReleaserTimeline(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(0, 0))
	freed := make(chan time.Time, 10)
	r := NewReleaser(ReleaseOptions{MinDrop: 100, Delay: 2 * time.Second, MinInterval: 30 * time.Second, Clock: clock,
		Free: func() { freed <- clock.Now() }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	start := clock.Now()
	at := func(d time.Duration) time.Time { return start.Add(d) }
	// waitArmed waits until Run waits on the clock (it runs on its own
	// goroutine); the time it waits for shows when the release comes.
	waitArmed := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for clock.Waiters() != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("Run does not wait on the clock (%d waiters)", clock.Waiters())
			}
			time.Sleep(time.Millisecond)
		}
	}
	// stepNone steps the clock by d, short of the release: Step fires what
	// is due before it returns, so the waiter must still be there.
	stepNone := func(d time.Duration) {
		t.Helper()
		clock.Step(d)
		if clock.Waiters() != 1 {
			t.Fatalf("the release came before %s", clock.Now().Sub(start))
		}
	}
	expectFree := func(t0 time.Time) {
		t.Helper()
		select {
		case got := <-freed:
			if !got.Equal(t0) {
				t.Fatalf("released at %s, want %s", got.Sub(start), t0.Sub(start))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no release at %s", t0.Sub(start))
		}
	}
	noFree := func() {
		t.Helper()
		select {
		case got := <-freed:
			t.Fatalf("released at %s", got.Sub(start))
		default:
		}
	}

	// 0s: the state grows to 1,000; drops of 99 (under MinDrop) and then
	// to 800 (not a quarter) ask for nothing.
	r.Observe(1000)
	r.Observe(901)
	r.Observe(800)
	// 0s: down to 700 (a drop of 300 from the peak): a release 2s later.
	r.Observe(700)
	waitArmed()
	stepNone(2*time.Second - time.Nanosecond)
	clock.Step(time.Nanosecond)
	expectFree(at(2 * time.Second))
	// 2s: the peak restarted at 700. Growth to 2,000, then a drop to
	// 1,000 at 3s: the release waits for 30s after the last, 32s.
	r.Observe(2000)
	clock.Step(time.Second)
	r.Observe(1000)
	waitArmed()
	// 10s: another large drop merges into the pending release.
	stepNone(7 * time.Second)
	r.Observe(500)
	stepNone(22*time.Second - time.Nanosecond)
	noFree()
	clock.Step(time.Nanosecond)
	expectFree(at(32 * time.Second))
	// Nothing more is pending.
	clock.Step(time.Minute)
	noFree()
	if r.Releases() != 2 {
		t.Errorf("%d releases, want 2", r.Releases())
	}
}
