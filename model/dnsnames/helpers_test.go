package dnsnames

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clocktesting "k8s.io/utils/clock/testing"

	"nodeflow/internal/testutil/dnstest"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}

// env is a cache on a fake clock asking a test DNS server.
type env struct {
	t   *testing.T
	srv *dnstest.Server
	clk *waitClock
	c   *Cache
}

// newEnv starts a DNS server on loopback and a running cache that asks
// it. edit may change the options first.
func newEnv(t *testing.T, edit func(*Options)) *env {
	t.Helper()
	srv, err := dnstest.Start("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	clk := newWaitClock(epoch)
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	o := Options{
		Servers:    []string{srv.Addr},
		Timeout:    300 * time.Millisecond,
		Clock:      clk,
		Log:        logrus.NewEntry(log),
		MaxBackoff: 8 * time.Second,
	}
	if edit != nil {
		edit(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{t: t, srv: srv, clk: clk, c: c}
}

// at returns the fake time offset d from the epoch.
func at(d time.Duration) time.Time { return epoch.Add(d) }

// waitLookups waits until n lookups have been applied in all.
func (e *env) waitLookups(n uint64) {
	e.t.Helper()
	eventually(e.t, "lookup applied", func() bool { return e.c.m.lookups.Load() >= n })
	if got := e.c.m.lookups.Load(); got != n {
		e.t.Fatalf("%d lookups, want %d", got, n)
	}
}

// waitPlanned waits until Run sleeps towards a timer at t.
func (e *env) waitPlanned(t time.Time) {
	e.t.Helper()
	eventually(e.t, "a timer at "+t.Sub(epoch).String(), func() bool { return e.clk.HasWaiterAt(t) })
}

// stepTo moves the fake clock to t.
func (e *env) stepTo(t time.Time) {
	e.t.Helper()
	d := t.Sub(e.clk.Now())
	if d < 0 {
		e.t.Fatalf("step back in time to %v", t.Sub(epoch))
	}
	e.clk.Step(d)
}

// expectAddrs checks a name's addresses.
func (e *env) expectAddrs(name string, want ...string) {
	e.t.Helper()
	got := e.c.Addrs(name)
	var w []netip.Addr
	for _, s := range want {
		w = append(w, netip.MustParseAddr(s))
	}
	slices.SortFunc(w, netip.Addr.Compare)
	if !slices.Equal(got, w) {
		e.t.Fatalf("%s: addresses %v, want %v", name, got, w)
	}
}

// expectChanged checks the posted changes and that Changes signalled
// them.
func (e *env) expectChanged(want ...string) {
	e.t.Helper()
	if len(want) > 0 {
		select {
		case <-e.c.Changes():
		case <-time.After(5 * time.Second):
			e.t.Fatalf("no change posted, want %v", want)
		}
	}
	if got := e.c.TakeChanged(); !slices.Equal(got, want) {
		e.t.Fatalf("changed %v, want %v", got, want)
	}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// waitClock is the library's fake clock, noting the times After is asked
// to wait for, so a test can wait until the code under test waits for a
// given time. Like time.After, After with d <= 0 fires at once.
type waitClock struct {
	*clocktesting.FakeClock
	mu sync.Mutex
	at []time.Time
}

func newWaitClock(t time.Time) *waitClock {
	return &waitClock{FakeClock: clocktesting.NewFakeClock(t)}
}

// After implements the Clock's After.
func (c *waitClock) After(d time.Duration) <-chan time.Time {
	if d <= 0 {
		ch := make(chan time.Time, 1)
		ch <- c.Now()
		return ch
	}
	c.mu.Lock()
	c.at = append(c.at, c.Now().Add(d))
	c.mu.Unlock()
	return c.FakeClock.After(d)
}

// HasWaiterAt reports whether someone waits for exactly t, still ahead.
func (c *waitClock) HasWaiterAt(t time.Time) bool {
	if !t.After(c.Now()) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.at, t.Equal)
}

// Waiting returns the times still ahead that were waited for, earliest
// first, once each.
func (c *waitClock) Waiting() []time.Time {
	now := c.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, a := range c.at {
		if a.After(now) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}
