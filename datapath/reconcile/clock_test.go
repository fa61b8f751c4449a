package reconcile

import (
	"fmt"
	"testing"
	"time"

	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

// reports collects a reconciler's sync reports.
type reports chan SyncReport

// next waits for the next report of kind ("" for any).
func (c reports) next(t *testing.T, kind SyncKind) SyncReport {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case rep := <-c:
			if kind == "" || rep.Kind == kind {
				return rep
			}
		case <-deadline:
			t.Fatalf("no %q sync within 20 s", kind)
		}
	}
}

// waitingAt waits until the reconciler's loop waits on the clock for t
// (it has finished what it was doing and armed its timer).
func waitingAt(t *testing.T, clk *waittest.WaitClock, at time.Time) {
	t.Helper()
	waittest.Poll(t, fmt.Sprintf("the reconciler waits for %s", at.Format("15:04:05.000")), 20*time.Second, func() error {
		if clk.HasWaiterAt(at) {
			return nil
		}
		return fmt.Errorf("waiting for %v", clk.Waiting())
	})
}

// TestClockTimeline runs a reconciler on a real switch with a manual
// clock, and checks its timing decisions along a timeline:
//
//	T0      start-up pass; the next audit is armed for T0+30s
//	T0+30s  the audit runs; the next is armed 30 s after it
//	+1s     an owner the switch refuses fails: retried 100 ms later,
//	        fails again and is retried 200 ms later (the back-off
//	        doubles); once fixed it is applied and no retry stays armed
func TestClockTimeline(t *testing.T) {
	_, addr := testBridge(t, ovs.Options{Dummy: true}, "br0")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := waittest.NewWaitClock(t0)
	reps := make(reports, 64)
	store := NewStore(StoreOptions{})
	run := start(t, addr, store, Options{Clock: clk, AuditInterval: 30 * time.Second,
		OnSync: func(r SyncReport) { reps <- r }})
	reps.next(t, SyncStartup)

	// T0: the audit is armed 30 s after the start-up pass.
	waitingAt(t, clk, t0.Add(30*time.Second))
	clk.Step(30 * time.Second)
	if rep := reps.next(t, SyncAudit); !rep.Start.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("audit at %s, want at T0+30s", rep.Start.Sub(t0))
	}
	t1 := clk.Now()
	waitingAt(t, clk, t1.Add(30*time.Second))

	// An owner the switch refuses (it sets tcp_dst on a flow that does not
	// match TCP): backed off 100 ms, then 200 ms.
	clk.Step(time.Second)
	bad := State{Flows: []openflow.Flow{dstFlow(10, 100, 1, openflow.SetField{Field: openflow.TCPDst(80)})}}
	if err := store.Set("pod/bad", bad); err != nil {
		t.Fatal(err)
	}
	if rep := reps.next(t, SyncIncremental); rep.Err == nil {
		t.Fatal("the refused owner's pass reported no error")
	}
	failedAt := clk.Now()
	if got := store.nextRetry().Sub(failedAt); got != 100*time.Millisecond {
		t.Fatalf("first back-off %s, want 100ms", got)
	}
	waitingAt(t, clk, failedAt.Add(100*time.Millisecond))
	// Passes before the retry leave the backed-off owner out.
	for {
		select {
		case rep := <-reps:
			if rep.Stats.Total() != 0 {
				t.Fatalf("a pass at +%s retried the owner before its back-off", rep.Start.Sub(failedAt))
			}
			continue
		default:
		}
		break
	}
	clk.Step(100 * time.Millisecond)
	for {
		rep := reps.next(t, SyncIncremental)
		if rep.Stats.Total() == 0 {
			continue
		}
		if rep.Err == nil || !rep.Start.Equal(failedAt.Add(100*time.Millisecond)) {
			t.Fatalf("retry at +%s (%v), want a failed retry at +100ms", rep.Start.Sub(failedAt), rep.Err)
		}
		break
	}
	second := clk.Now()
	if got := store.nextRetry().Sub(second); got != 200*time.Millisecond {
		t.Errorf("second back-off %s, want 200ms (doubled)", got)
	}
	waitingAt(t, clk, second.Add(200*time.Millisecond))

	// Fixed: the owner's new state applies, and no retry stays armed.
	if err := store.Set("pod/bad", State{Flows: []openflow.Flow{dstFlow(10, 100, 1)}}); err != nil {
		t.Fatal(err)
	}
	for {
		rep := reps.next(t, SyncIncremental)
		if rep.Err != nil {
			t.Fatalf("fixed owner: %v", rep.Err)
		}
		if rep.Stats.Total() > 0 {
			break
		}
	}
	if r := store.nextRetry(); !r.IsZero() {
		t.Errorf("a retry is still armed for %s", r.Sub(t0))
	}
	run.flush(t)
}

// TestClockMinInterval: with MinInterval 1 s, a change right after a pass
// waits on the clock until 1 s has passed since that pass, then runs.
func TestClockMinInterval(t *testing.T) {
	_, addr := testBridge(t, ovs.Options{Dummy: true}, "br0")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := waittest.NewWaitClock(t0)
	reps := make(reports, 64)
	store := NewStore(StoreOptions{})
	start(t, addr, store, Options{Clock: clk, AuditInterval: -1, MinInterval: time.Second,
		OnSync: func(r SyncReport) { reps <- r }})
	reps.next(t, SyncStartup)
	// Whatever the start-up queued runs once MinInterval has passed.
	waitingAt(t, clk, t0.Add(time.Second))
	clk.Step(time.Second)
	reps.next(t, SyncIncremental)
	last := clk.Now()

	if err := store.Set("pod/a", State{Flows: []openflow.Flow{dstFlow(10, 100, 2)}}); err != nil {
		t.Fatal(err)
	}
	waitingAt(t, clk, last.Add(time.Second))
	select {
	case rep := <-reps:
		t.Fatalf("a %s pass ran before MinInterval passed", rep.Kind)
	default:
	}
	clk.Step(time.Second)
	if rep := reps.next(t, SyncIncremental); !rep.Start.Equal(last.Add(time.Second)) || rep.Stats.Total() != 1 {
		t.Errorf("the change ran at +%s with %s, want at +1s with one add", rep.Start.Sub(last), rep.Stats)
	}
}
