package syncloop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodeflow/internal/testutil/waittest"
)

type syncCall struct {
	at   time.Time
	full bool
}

func TestRunnerTimeline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	calls := make(chan syncCall, 16)
	var fail sync.Map // time offset -> fail
	r := NewRunner(func(_ context.Context, full bool) error {
		now := clk.Now()
		calls <- syncCall{at: now, full: full}
		if _, ok := fail.Load(now.Sub(start)); ok {
			return errors.New("boom")
		}
		return nil
	}, RunnerOptions{MinInterval: time.Second, RetryInterval: 2 * time.Second, MaxInterval: 30 * time.Second, Clock: clk})
	ran := ranOf(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	expect := func(at time.Duration, full bool) {
		t.Helper()
		select {
		case c := <-calls:
			if c.at.Sub(start) != at || c.full != full {
				t.Fatalf("sync at %v full=%v, want at %v full=%v", c.at.Sub(start), c.full, at, full)
			}
			ran(t)
		case <-time.After(5 * time.Second):
			t.Fatalf("no sync (want one at %v)", at)
		}
	}
	expectNone := func() {
		t.Helper()
		select {
		case c := <-calls:
			t.Fatalf("unexpected sync at %v", c.at.Sub(start))
		default:
		}
	}
	// requestsDrained waits until the loop has taken every request.
	requestsDrained := func() { waittest.Eventually(t, "requests taken", func() bool { return len(r.req) == 0 }) }
	// armed waits until the loop has armed n timers.
	armed := waitersOf(t, clk)

	// t=0: Loop starts and runs the first sync at once, full; it arms the
	// periodic sync.
	expect(0, true)
	armed(1, "the periodic sync")
	// t=0.3: three requests. The loop schedules one sync at t=1.0
	// (MinInterval after the last start); the others merge into it.
	clk.Step(300 * time.Millisecond)
	r.Run()
	r.Run()
	r.Run()
	requestsDrained()
	armed(2, "the periodic sync and the sync at 1s")
	// t=0.999: not yet (no timer fired).
	stepNone(t, clk, 699*time.Millisecond)
	expectNone()
	// t=1.0: exactly one partial sync.
	clk.Step(time.Millisecond)
	expect(time.Second, false)
	armed(1, "the periodic sync")
	// t=5: a request long after the last sync runs at once. It fails.
	fail.Store(5*time.Second, true)
	clk.Step(4 * time.Second)
	r.Run()
	expect(5*time.Second, false)
	armed(2, "the periodic sync and the retry")
	if r.LastError() == nil {
		t.Fatal("LastError is nil after a failed sync")
	}
	// t=6: a request merges into the retry at t=7.
	stepNone(t, clk, time.Second)
	r.Run()
	requestsDrained()
	expectNone()
	// t=6.999: not yet.
	stepNone(t, clk, 999*time.Millisecond)
	expectNone()
	// t=7: the retry runs, full because the last sync failed.
	clk.Step(time.Millisecond)
	expect(7*time.Second, true)
	armed(1, "the periodic sync")
	if r.LastError() != nil {
		t.Fatalf("LastError after success: %v", r.LastError())
	}
	// t=36.999: no timer due yet.
	stepNone(t, clk, 29999*time.Millisecond)
	expectNone()
	// t=37: no request for MaxInterval: a periodic full sync.
	clk.Step(time.Millisecond)
	expect(37*time.Second, true)
	expectNone()
}

// ranOf makes r report each of its loop's syncs, once its timers are
// armed, and returns a function that waits for the next report.
func ranOf(r *Runner) func(t *testing.T) {
	ch := make(chan struct{}, 16)
	r.ran = func() { ch <- struct{}{} }
	return func(t *testing.T) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("the sync did not end")
		}
	}
}

// waitersOf returns a function that waits until clk has n timers armed.
func waitersOf(t *testing.T, clk *clocktesting.FakeClock) func(n int, what string) {
	return func(n int, what string) {
		t.Helper()
		waittest.Eventually(t, what+" armed", func() bool { return clk.Waiters() == n })
	}
}

// stepNone steps clk by d and fails if a timer fired: Step fires the due
// timers before it returns, so none fired when the count is unchanged.
func stepNone(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	n := clk.Waiters()
	clk.Step(d)
	if got := clk.Waiters(); got != n {
		t.Fatalf("a timer fired within %v (%d armed, then %d)", d, n, got)
	}
}

// TestRunnerSyncedFull checks that after a full sync run outside the loop
// (a feature's start-up sync), the loop's first sync is not full again.
func TestRunnerSyncedFull(t *testing.T) {
	calls := make(chan bool, 4)
	r := NewRunner(func(_ context.Context, full bool) error {
		calls <- full
		return nil
	}, RunnerOptions{MinInterval: time.Second})
	r.SyncedFull(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case full := <-calls:
		if full {
			t.Fatal("the loop's first sync is full after SyncedFull")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no first sync")
	}
}
