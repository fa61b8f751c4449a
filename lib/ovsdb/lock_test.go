package ovsdb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// closed reports whether ch is closed now.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitClosed fails the test unless ch closes within 10 s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

// TestIntegrationLock: a real ovsdb-server grants a named lock to one
// client and queues the next, which gets it when the first closes; a
// third client's steal takes it, and the holder learns it lost it.
func TestIntegrationLock(t *testing.T) {
	sb, a := sandbox(t)
	ctx := testCtx(t)
	dial := func() *Client {
		c, err := Dial(ctx, "unix:"+sb.DBSock(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	b, thief := dial(), dial()

	la, err := a.Lock(ctx, "nodeflow_test")
	if err != nil {
		t.Fatal(err)
	}
	if !closed(la.Held()) || closed(la.Lost()) {
		t.Fatal("the first client was not granted the free lock at once")
	}
	lb, err := b.Lock(ctx, "nodeflow_test")
	if err != nil {
		t.Fatal(err)
	}
	if closed(lb.Held()) {
		t.Fatal("the second client holds the lock the first holds")
	}
	if _, err := b.Lock(ctx, "nodeflow_test"); !errors.Is(err, ErrLockRequested) || !strings.Contains(err.Error(), `"nodeflow_test"`) {
		t.Fatalf("a second request by the same client: %v", err)
	}
	// Another name is another lock.
	if lo, err := b.Lock(ctx, "nodeflow_other"); err != nil || !closed(lo.Held()) {
		t.Fatalf("another lock: %v", err)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(la.Lost()) || !errors.Is(la.Err(), ErrClosed) {
		t.Fatalf("the closed client's lock: lost %v, %v", closed(la.Lost()), la.Err())
	}
	waitClosed(t, lb.Held(), "the waiting client granted the lock the closed client gave back")

	if _, err := thief.rawCall(ctx, "steal", []byte(`["nodeflow_test"]`)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, lb.Lost(), "the holder told the lock was stolen")
	if err := lb.Err(); err == nil || !strings.Contains(err.Error(), "stolen") {
		t.Fatalf("why the lock was lost: %v", err)
	}
}

// TestLockAfterReconnect: after a lost connection the client asks again
// for its locks. One the server grants again stays held; one it does not
// grant at once is lost, and the client leaves the server's queue for it.
func TestLockAfterReconnect(t *testing.T) {
	s := newFakeServer(t)
	unlocked := make(chan string, 4)
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		switch m.Method {
		case "lock":
			// The first connection gets both; the next ones "kept" only.
			fc.reply(m.ID, map[bool]string{true: `{"locked":true}`, false: `{"locked":false}`}[fc.n == 1 || strings.Contains(string(m.Params), "kept")])
		case "unlock":
			unlocked <- string(m.Params)
			fc.reply(m.ID, `{}`)
		default:
			return false
		}
		return true
	})
	c := dialFake(t, s, fastOptions())
	ctx := testCtx(t)
	kept, err := c.Lock(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	taken, err := c.Lock(ctx, "taken")
	if err != nil {
		t.Fatal(err)
	}
	if !closed(kept.Held()) || !closed(taken.Held()) {
		t.Fatal("locks not held on the first connection")
	}
	s.stop()
	s.start()
	waitClosed(t, taken.Lost(), "the lock another client took during the reconnection")
	if err := taken.Err(); err == nil || !strings.Contains(err.Error(), "after a reconnection") {
		t.Fatalf("why the lock was lost: %v", err)
	}
	select {
	case p := <-unlocked:
		if p != `["taken"]` {
			t.Fatalf("unlock %s, want [\"taken\"]", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client stayed in the server's queue for the lost lock")
	}
	if _, err := c.ListDBs(ctx); err != nil {
		t.Fatal(err)
	}
	if closed(kept.Lost()) {
		t.Fatalf("the lock granted again was lost: %v", kept.Err())
	}
	// A malformed lock reply is an error that names the lock.
	s.setHandler(func(fc *fakeConn, m fakeMsg) bool {
		if m.Method == "lock" {
			fc.reply(m.ID, `{"held":true}`)
			return true
		}
		return false
	})
	if _, err := c.Lock(context.Background(), "odd"); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `"odd"`) {
		t.Fatalf("a lock reply without \"locked\": %v", err)
	}
}
