package ofconn

import (
	"context"
	"testing"
	"time"

	"nodeflow/internal/testutil/waittest"
	"nodeflow/testbed/ovs/ovstest"
)

// TestRedialAfterBridgeRecreated deletes the bridge under a live Conn
// whose back-off is long (a minute), recreates it, and checks that Redial
// reconnects at once instead of waiting out the back-off.
func TestRedialAfterBridgeRecreated(t *testing.T) {
	sb, addr := testBridge(t)
	events := make(chan ConnectEvent, 8)
	c := testDial(t, addr, Options{ReconnectMin: time.Minute, ReconnectMax: time.Minute,
		OnConnect: func(_ context.Context, _ *Conn, ev ConnectEvent) { events <- ev }})
	<-events
	if _, err := sb.Vsctl("del-br", "br0"); err != nil {
		t.Fatal(err)
	}
	waittest.Poll(t, "the Conn notices the bridge is gone", 10*time.Second, func() error {
		if c.Version() != 0 {
			return errStillConnected
		}
		return nil
	})
	ovstest.AddBridge(t, sb, "br0")
	start := time.Now()
	// Redial until it takes: the first attempts may come before
	// ovs-vswitchd has opened the new management socket.
	for {
		c.Redial()
		select {
		case ev := <-events:
			if took := time.Since(start); took > 20*time.Second {
				t.Fatalf("reconnected after %s, the back-off was not cut short", took)
			}
			if ev.Session < 2 {
				t.Errorf("event %+v, want a new session", ev)
			}
			if err := c.Barrier(testCtx(t)); err != nil {
				t.Fatalf("Barrier after Redial: %v", err)
			}
			return
		case <-time.After(100 * time.Millisecond): // the next Redial
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("no reconnection within 30 s of a one-minute back-off with Redial")
		}
	}
}

type stillConnected struct{}

func (stillConnected) Error() string { return "still connected" }

var errStillConnected error = stillConnected{}
