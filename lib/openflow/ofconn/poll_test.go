package ofconn

import (
	"context"
	"errors"
	"testing"
	"time"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// pollRead is one call of a Poller's Read, held until the test answers it.
type pollRead struct {
	c     *Conn
	reply chan error
}

func nextRead(t *testing.T, reads <-chan pollRead) pollRead {
	t.Helper()
	select {
	case r := <-reads:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no read within 20 s")
		return pollRead{}
	}
}

// TestPollerRedials runs a Poller against a switch whose bridge does not
// exist yet: the failed dial is reported; once the bridge exists, reads
// share one connection until a read fails, which closes it, and the next
// read comes over a new one; the last is closed when Run returns.
func TestPollerRedials(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	addr := "unix:" + sb.MgmtSock("br0")
	reads := make(chan pollRead)
	dialErrs := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	p := Poller{
		Addr:     func() string { return addr },
		Options:  Options{Logger: quietLogger(), ReconnectMin: 50 * time.Millisecond, ReconnectMax: 50 * time.Millisecond},
		Interval: 20 * time.Millisecond,
		DialWait: 200 * time.Millisecond,
		Read: func(ctx context.Context, c *Conn) error {
			r := pollRead{c: c, reply: make(chan error, 1)}
			select {
			case reads <- r:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case err := <-r.reply:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		DialFailed: func(err error) {
			select {
			case dialErrs <- err:
			default:
			}
		},
	}
	done := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()

	select {
	case err := <-dialErrs:
		var op *OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			t.Errorf("dial error %v, want an *OpError of dial", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no dial error reported while the bridge is missing")
	}
	ovstest.AddBridge(t, sb, "br0")

	first := nextRead(t, reads)
	if err := first.c.Barrier(testCtx(t)); err != nil {
		t.Fatalf("Barrier in the first read: %v", err)
	}
	first.reply <- nil
	second := nextRead(t, reads)
	if second.c != first.c {
		t.Error("a successful read's connection was not kept for the next")
	}
	second.reply <- errors.New("read failed")
	third := nextRead(t, reads)
	if third.c == first.c {
		t.Fatal("the connection of a failed read was used again")
	}
	if err := first.c.Barrier(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("Barrier over the failed read's connection: %v, want ErrClosed", err)
	}
	if err := third.c.Barrier(testCtx(t)); err != nil {
		t.Fatalf("Barrier over the new connection: %v", err)
	}
	third.reply <- nil

	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if err := third.c.Barrier(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("Barrier after Run returned: %v, want ErrClosed", err)
	}
}
