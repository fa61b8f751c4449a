package syncloop

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"nodeflow/internal/testutil/waittest"
)

type keyedPass struct {
	at   time.Duration
	keys []string
	full bool
}

// TestKeyedTimeline drives a keyed loop with a fake clock along a
// timeline: merged marks, MinInterval, a failed key's back-off (doubling,
// forgotten on success), MarkAll and the periodic full pass.
func TestKeyedTimeline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	passes := make(chan keyedPass, 16)
	var mu sync.Mutex
	failing := map[string]bool{}
	setFailing := func(keys ...string) {
		mu.Lock()
		defer mu.Unlock()
		clear(failing)
		for _, k := range keys {
			failing[k] = true
		}
	}
	k := NewKeyed(func(_ context.Context, keys []string, full bool) (failed []string) {
		slices.Sort(keys)
		passes <- keyedPass{at: clk.Now().Sub(start), keys: keys, full: full}
		mu.Lock()
		defer mu.Unlock()
		for _, key := range keys {
			if failing[key] {
				failed = append(failed, key)
			}
		}
		return failed
	}, KeyedOptions{MinInterval: time.Second, MaxInterval: 60 * time.Second,
		RetryInterval: 2 * time.Second, MaxRetryInterval: 8 * time.Second, Clock: clk})
	armed := waitersOf(t, clk)
	ran := ranOf(k.r)
	expect := func(at time.Duration, full bool, keys ...string) {
		t.Helper()
		select {
		case p := <-passes:
			if p.at != at || p.full != full || !slices.Equal(p.keys, keys) {
				t.Fatalf("pass at %v full=%v keys %q, want at %v full=%v keys %q", p.at, p.full, p.keys, at, full, keys)
			}
			ran(t)
		case <-time.After(5 * time.Second):
			t.Fatalf("no pass (want one at %v)", at)
		}
	}
	expectNone := func() {
		t.Helper()
		select {
		case p := <-passes:
			t.Fatalf("unexpected pass at %v: %q", p.at, p.keys)
		default:
		}
	}
	drained := func() { waittest.Eventually(t, "marks taken", func() bool { return len(k.r.req) == 0 }) }

	// Before the loop starts: two keys marked.
	k.Mark("a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// t=0: the first pass takes them at once; it is not full.
	expect(0, false, "a", "b")
	armed(1, "the periodic pass")
	// t=0.5: three marks merge into one pass at t=1 (MinInterval).
	clk.Step(500 * time.Millisecond)
	k.Mark("c")
	k.Mark("d")
	k.Mark("c")
	drained()
	armed(2, "the periodic pass and the pass at 1s")
	stepNone(t, clk, 499*time.Millisecond)
	expectNone()
	clk.Step(time.Millisecond)
	expect(time.Second, false, "c", "d")
	armed(1, "the periodic pass")

	// t=5: x fails; its retry is armed for t=7 (RetryInterval).
	setFailing("x")
	clk.Step(4 * time.Second)
	k.Mark("x", "y")
	expect(5*time.Second, false, "x", "y")
	armed(2, "the periodic pass and x's retry")
	// t=6: a new mark runs at once (it does not wait for the retry); x
	// rides along and fails again: its back-off doubles, to t=10.
	stepNone(t, clk, time.Second)
	k.Mark("z")
	expect(6*time.Second, false, "x", "z")
	armed(2, "the periodic pass and x's retry")
	stepNone(t, clk, 3999*time.Millisecond)
	expectNone()
	// t=10: the retry; x fails a third time: 8 s (the cap), to t=18.
	clk.Step(time.Millisecond)
	expect(10*time.Second, false, "x")
	armed(2, "the periodic pass and x's retry")
	setFailing()
	stepNone(t, clk, 7999*time.Millisecond)
	expectNone()
	// t=18: x succeeds: no retry stays armed.
	clk.Step(time.Millisecond)
	expect(18*time.Second, false, "x")
	armed(1, "the periodic pass")

	// t=20: x fails again: its back-off starts over at 2 s.
	setFailing("x")
	clk.Step(2 * time.Second)
	k.Mark("x")
	expect(20*time.Second, false, "x")
	armed(2, "the periodic pass and x's retry")
	// t=21: MarkAll: a full pass at once, with x in it; it succeeds.
	setFailing()
	stepNone(t, clk, time.Second)
	k.MarkAll()
	expect(21*time.Second, true, "x")
	armed(1, "the periodic pass")
	// t=81: no pass for MaxInterval: a periodic full pass.
	stepNone(t, clk, 59999*time.Millisecond)
	expectNone()
	clk.Step(time.Millisecond)
	expect(81*time.Second, true)
	expectNone()
}

// TestKeyedSyncNowAndReset checks a pass run outside the loop, and that
// Reset drops the marks.
func TestKeyedSyncNowAndReset(t *testing.T) {
	var got [][]string
	fail := true
	k := NewKeyed(func(_ context.Context, keys []string, full bool) []string {
		slices.Sort(keys)
		got = append(got, keys)
		if fail {
			return []string{"host"} // a key the function adds itself
		}
		return nil
	}, KeyedOptions{RetryInterval: time.Second, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	k.Mark("a")
	if !k.SyncNow(context.Background()) {
		t.Fatal("SyncNow reported no failure")
	}
	fail = false
	if k.SyncNow(context.Background()) {
		t.Fatal("SyncNow reported a failure")
	}
	k.Mark("b")
	k.MarkAll()
	k.Reset()
	k.SyncNow(context.Background())
	want := [][]string{{"a"}, {"host"}, {}}
	if len(got) != len(want) {
		t.Fatalf("passes %q, want %q", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("passes %q, want %q", got, want)
		}
	}
}

// TestRunnerRunAfter checks RunAfter: the earliest request stands, syncs
// meanwhile leave it pending, and it runs like Run when due.
func TestRunnerRunAfter(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	calls := make(chan time.Duration, 8)
	r := NewRunner(func(_ context.Context, full bool) error {
		if full {
			t.Error("full sync after SyncedFull")
		}
		calls <- clk.Now().Sub(start)
		return nil
	}, RunnerOptions{MinInterval: time.Second, Clock: clk})
	r.SyncedFull(start)
	ran := ranOf(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	expect := func(at time.Duration) {
		t.Helper()
		select {
		case c := <-calls:
			if c != at {
				t.Fatalf("sync at %v, want at %v", c, at)
			}
			ran(t)
		case <-time.After(5 * time.Second):
			t.Fatalf("no sync (want one at %v)", at)
		}
	}
	armed := waitersOf(t, clk)
	// t=0: the first sync, at once.
	expect(0)
	// RunAfter 5 s, then 10 s: the earlier stands.
	r.RunAfter(5 * time.Second)
	r.RunAfter(10 * time.Second)
	armed(1, "the later sync")
	// t=2: a sync on request; the later one stays armed.
	stepNone(t, clk, 2*time.Second)
	r.Run()
	expect(2 * time.Second)
	armed(1, "the later sync")
	stepNone(t, clk, 2999*time.Millisecond)
	// t=5: the later sync.
	clk.Step(time.Millisecond)
	expect(5 * time.Second)
	armed(0, "nothing")
	select {
	case c := <-calls:
		t.Fatalf("unexpected sync at %v", c)
	default:
	}
}
