package waittest

import (
	"testing"
	"time"
)

func TestWaitClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewWaitClock(t0)
	select {
	case <-c.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
	ch := c.After(2 * time.Second)
	c.After(time.Second)
	c.After(2 * time.Second)
	if !c.HasWaiterAt(t0.Add(2*time.Second)) || c.HasWaiterAt(t0.Add(3*time.Second)) {
		t.Fatal("HasWaiterAt does not match the waits")
	}
	if got := c.Waiting(); len(got) != 2 || !got[0].Equal(t0.Add(time.Second)) || !got[1].Equal(t0.Add(2*time.Second)) {
		t.Fatalf("Waiting() = %v", got)
	}
	c.Step(time.Second)
	if got := c.Waiting(); len(got) != 1 || c.HasWaiterAt(t0.Add(time.Second)) {
		t.Fatalf("after a step, Waiting() = %v", got)
	}
	c.Step(time.Second)
	Eventually(t, "the two-second timer", func() bool { return len(ch) == 1 })
}
