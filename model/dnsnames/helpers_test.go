package dnsnames

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/internal/testutil/dnstest"
	"nodeflow/internal/testutil/waittest"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is a cache on a fake clock asking a test DNS server.
type env struct {
	t   *testing.T
	srv *dnstest.Server
	clk *waittest.WaitClock
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
	clk := waittest.NewWaitClock(epoch)
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
	waittest.Eventually(e.t, "lookup applied", func() bool { return e.c.m.lookups.Load() >= n })
	if got := e.c.m.lookups.Load(); got != n {
		e.t.Fatalf("%d lookups, want %d", got, n)
	}
}

// waitPlanned waits until Run sleeps towards a timer at t.
func (e *env) waitPlanned(t time.Time) {
	e.t.Helper()
	waittest.Eventually(e.t, "a timer at "+t.Sub(epoch).String(), func() bool { return e.clk.HasWaiterAt(t) })
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
