package dnsnames

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"nodeflow/internal/testutil/dnstest"
	"nodeflow/internal/testutil/waittest"
)

// TestLookupTimeline follows one exact name along a timeline of answers
// that change, with the fake clock. Each step says what the cache does.
func TestLookupTimeline(t *testing.T) {
	e := newEnv(t, nil)
	const name = "a.example.com"
	e.srv.Set(name, 60, addrs("192.0.2.1", "2001:db8::1")...)

	// t=0: Add (in any case, with the trailing dot) looks the name up at
	// once, A and AAAA; the next lookup is due after the TTL, at 60 s.
	if err := e.c.Add("A.Example.COM."); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	e.expectAddrs(name, "192.0.2.1", "2001:db8::1")
	e.expectChanged(name)
	st, ok := e.c.Status(name)
	if !ok || !st.NextLookup.Equal(at(60*time.Second)) || st.LastError != nil || st.Failures != 0 || !st.LastSuccess.Equal(epoch) {
		t.Fatalf("status %+v, want next lookup at 60s, no error", st)
	}
	if !slices.Equal(st.Expires, []time.Time{at(60 * time.Second), at(60 * time.Second)}) {
		t.Fatalf("expiries %v, want both at 60s", st.Expires)
	}
	e.waitPlanned(at(60 * time.Second))

	// The server's answer changes to 192.0.2.2 with TTL 10, and no AAAA.
	e.srv.Set(name, 10, addrs("192.0.2.2")...)
	// t=59.999: nothing yet; Run still sleeps towards 60 s.
	e.stepTo(at(60*time.Second - time.Millisecond))
	if !e.clk.HasWaiterAt(at(60*time.Second)) || e.c.m.lookups.Load() != 1 {
		t.Fatal("a lookup before the TTL ran out")
	}
	// t=60: the lookup brings 192.0.2.2; the old addresses expired at 60
	// and are not in the answer, so they go. Next lookup at 70.
	e.stepTo(at(60 * time.Second))
	e.waitLookups(2)
	e.expectAddrs(name, "192.0.2.2")
	e.expectChanged(name)
	e.waitPlanned(at(70 * time.Second))

	// t=65: a pod's answer shows 192.0.2.3 with TTL 100: it is added at
	// once and returned to the caller, not posted.
	e.stepTo(at(65 * time.Second))
	if got := e.c.Observe(name, addrs("192.0.2.3"), 100*time.Second); !slices.Equal(got, []string{name}) {
		t.Fatalf("Observe = %v, want [%s]", got, name)
	}
	if got := e.c.Observe(name, addrs("192.0.2.3"), 100*time.Second); got != nil {
		t.Fatalf("Observe of a known address = %v, want nil", got)
	}
	e.expectAddrs(name, "192.0.2.2", "192.0.2.3")
	e.expectChanged()

	// t=70..160: lookups every 10 s return 192.0.2.2 only; 192.0.2.3 is
	// kept until its own TTL ends at 165 and a lookup after that misses
	// it.
	n := uint64(2)
	for s := 70; s <= 160; s += 10 {
		e.waitPlanned(at(time.Duration(s) * time.Second))
		e.stepTo(at(time.Duration(s) * time.Second))
		n++
		e.waitLookups(n)
		e.expectAddrs(name, "192.0.2.2", "192.0.2.3")
	}
	e.expectChanged()
	// t=170: the first lookup after 165 drops it.
	e.waitPlanned(at(170 * time.Second))
	e.stepTo(at(170 * time.Second))
	e.waitLookups(n + 1)
	e.expectAddrs(name, "192.0.2.2")
	e.expectChanged(name)
	if got := e.srv.Queries(name, "A", "udp"); got != int(n+1) {
		t.Fatalf("%d A queries, want %d", got, n+1)
	}
}

// TestBackoff: a name whose lookups fail is kept, with its addresses,
// and retried after 1, 2, 4, 8, 8... seconds; a success resets that.
func TestBackoff(t *testing.T) {
	e := newEnv(t, nil) // MaxBackoff 8 s
	const name = "down.example.com"
	e.srv.SetMode(name, dnstest.ServFail)

	// t=0: the first lookup fails. The name stays registered (not dropped
	// for good as in ovn-kubernetes) and is retried at 1 s.
	if err := e.c.Add(name); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	st, _ := e.c.Status(name)
	if st.Failures != 1 || st.LastError == nil || !strings.Contains(st.LastError.Error(), "SERVFAIL") || !st.NextLookup.Equal(at(time.Second)) {
		t.Fatalf("status %+v, want 1 failure with SERVFAIL, next at 1s", st)
	}
	if !strings.Contains(st.LastError.Error(), "dnsnames: lookup down.example.com A: "+e.srv.Addr) {
		t.Fatalf("error %q does not name the lookup and the server", st.LastError)
	}
	// The first lookup's failure is posted, for the name's users to
	// report; the failures after it are not news.
	e.expectChanged(name)
	// t=1, 3, 7, 15, 23: failures; the wait doubles to the 8 s ceiling.
	n := uint64(1)
	for i, s := range []time.Duration{1, 3, 7, 15} {
		next := []time.Duration{3, 7, 15, 23}[i]
		e.waitPlanned(at(s * time.Second))
		e.stepTo(at(s * time.Second))
		n++
		e.waitLookups(n)
		st, _ := e.c.Status(name)
		if st.Failures != int(n) || !st.NextLookup.Equal(at(next*time.Second)) {
			t.Fatalf("t=%ds: %d failures, next %v; want %d, next %ds", s, st.Failures, st.NextLookup.Sub(epoch), n, next)
		}
	}
	// The server answers again: t=23 succeeds, failures reset, the next
	// lookup follows the TTL.
	e.srv.SetMode(name, dnstest.Answer)
	e.srv.Set(name, 30, addrs("192.0.2.9")...)
	e.waitPlanned(at(23 * time.Second))
	e.stepTo(at(23 * time.Second))
	n++
	e.waitLookups(n)
	e.expectAddrs(name, "192.0.2.9")
	e.expectChanged(name)
	if st, _ := e.c.Status(name); st.Failures != 0 || st.LastError != nil || !st.NextLookup.Equal(at(53*time.Second)) {
		t.Fatalf("status %+v after recovery", st)
	}
	// t=53: the server times out: the addresses stay, a retry at 54.
	e.srv.SetMode(name, dnstest.Silent)
	e.waitPlanned(at(53 * time.Second))
	e.stepTo(at(53 * time.Second))
	n++
	e.waitLookups(n)
	e.expectAddrs(name, "192.0.2.9")
	e.expectChanged(name) // it fails again
	if st, _ := e.c.Status(name); st.Failures != 1 || !strings.Contains(st.LastError.Error(), "no answer within 300ms") || !st.NextLookup.Equal(at(54*time.Second)) {
		t.Fatalf("status %+v, want a timeout and a retry at 54s", st)
	}
	if e.c.m.failures.Load() != 6 {
		t.Fatalf("%d failures counted, want 6", e.c.m.failures.Load())
	}
}

// TestFamilyFails: when only AAAA fails, the A answer applies, the
// IPv6 addresses are kept and the lookup counts as failed.
func TestFamilyFails(t *testing.T) {
	e := newEnv(t, nil)
	const name = "dual.example.com"
	e.srv.Set(name, 10, addrs("192.0.2.1", "2001:db8::1")...)
	if err := e.c.Add(name); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	e.expectChanged(name)
	// t=10: A now answers 192.0.2.2, AAAA fails.
	e.srv.Set(name, 10, addrs("192.0.2.2", "2001:db8::2")...)
	e.srv.SetTypeMode(name, "AAAA", dnstest.ServFail)
	e.waitPlanned(at(10 * time.Second))
	e.stepTo(at(10 * time.Second))
	e.waitLookups(2)
	e.expectAddrs(name, "192.0.2.2", "2001:db8::1")
	e.expectChanged(name)
	st, _ := e.c.Status(name)
	if st.Failures != 1 || !strings.Contains(st.LastError.Error(), "lookup dual.example.com AAAA") || strings.Contains(st.LastError.Error(), "dual.example.com A:") || !st.NextLookup.Equal(at(11*time.Second)) {
		t.Fatalf("status %+v, want an AAAA failure and a retry at 11s", st)
	}
	// t=11: AAAA works again.
	e.srv.SetTypeMode(name, "AAAA", dnstest.Answer)
	e.waitPlanned(at(11 * time.Second))
	e.stepTo(at(11 * time.Second))
	e.waitLookups(3)
	e.expectAddrs(name, "192.0.2.2", "2001:db8::2")
}

// TestTTLBounds: TTLs are honoured between the floor and the ceiling.
func TestTTLBounds(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetNegativeTTL(300)
	e.srv.Set("zero.example.com", 0, addrs("192.0.2.1", "2001:db8::1")...)
	e.srv.Set("mid.example.com", 240, addrs("192.0.2.2", "2001:db8::2")...)
	e.srv.Set("long.example.com", 2*86400, addrs("192.0.2.3", "2001:db8::3")...)
	e.srv.Set("v4only.example.com", 600, addrs("192.0.2.4")...)
	for _, tc := range []struct {
		name       string
		nextLookup time.Duration
		expires    time.Duration
		err        error
	}{
		{"zero.example.com", 5 * time.Second, 5 * time.Second, nil},       // TTL 0: the 5 s floor
		{"mid.example.com", 240 * time.Second, 240 * time.Second, nil},    // honoured as it is
		{"long.example.com", 30 * time.Minute, 24 * time.Hour, nil},       // lookups at most 30 min apart; addresses kept 24 h at most
		{"v4only.example.com", 300 * time.Second, 600 * time.Second, nil}, // the AAAA's negative TTL is the smallest in the answer
		{"nxdomain.example.com", 300 * time.Second, 0, ErrNoSuchName},     // negative TTL from the SOA
	} {
		n := e.c.m.lookups.Load()
		if err := e.c.Add(tc.name); err != nil {
			t.Fatal(err)
		}
		e.waitLookups(n + 1)
		st, _ := e.c.Status(tc.name)
		if !st.NextLookup.Equal(at(tc.nextLookup)) || !errors.Is(st.LastError, tc.err) || st.Failures != 0 {
			t.Fatalf("%s: next lookup %v, error %v; want %v, %v", tc.name, st.NextLookup.Sub(epoch), st.LastError, tc.nextLookup, tc.err)
		}
		for _, exp := range st.Expires {
			if !exp.Equal(at(tc.expires)) {
				t.Fatalf("%s: expiries %v, want all at %v", tc.name, st.Expires, tc.expires)
			}
		}
		if (len(st.Expires) == 0) != (tc.expires == 0) {
			t.Fatalf("%s: %d addresses", tc.name, len(st.Expires))
		}
	}
	// A name that did not exist is found after its negative TTL.
	e.srv.Set("nxdomain.example.com", 60, addrs("192.0.2.5")...)
	e.waitPlanned(at(5 * time.Second))
	e.stepTo(at(300 * time.Second)) // every name comes due on the way
	waittest.Eventually(t, "nxdomain.example.com found", func() bool { return len(e.c.Addrs("nxdomain.example.com")) == 1 })
	if st, _ := e.c.Status("nxdomain.example.com"); st.LastError != nil {
		t.Fatalf("error %v after the name appeared", st.LastError)
	}
}

// TestWildcard: a wildcard collects observed answers one label below it,
// and its addresses expire by their own TTLs.
func TestWildcard(t *testing.T) {
	e := newEnv(t, nil)
	const wc = "*.example.com"
	if err := e.c.Add("*.Example.com"); err != nil {
		t.Fatal(err)
	}
	if st, ok := e.c.Status(wc); !ok || !st.Wildcard || !st.NextLookup.IsZero() {
		t.Fatalf("status %+v, want a wildcard that is not looked up", st)
	}
	for name, want := range map[string]bool{
		"www.example.com": true, "WWW.example.com.": true,
		"example.com": false, "a.b.example.com": false, "wwwexample.com": false, ".example.com": false,
	} {
		if got := e.c.Matches(name); got != want {
			t.Fatalf("Matches(%q) = %v, want %v", name, got, want)
		}
	}

	// t=0: answers for names one label below are learned, others not.
	if got := e.c.Observe("WWW.example.com.", addrs("198.51.100.1"), 30*time.Second); !slices.Equal(got, []string{wc}) {
		t.Fatalf("Observe www = %v", got)
	}
	for _, n := range []string{"a.b.example.com", "example.com", "wwwexample.com"} {
		if got := e.c.Observe(n, addrs("198.51.100.99"), time.Minute); got != nil {
			t.Fatalf("Observe %s = %v, want nil", n, got)
		}
	}
	e.expectAddrs(wc, "198.51.100.1")
	e.waitPlanned(at(30 * time.Second))
	// t=10: another name, TTL 5: it expires first, at 15.
	e.stepTo(at(10 * time.Second))
	e.c.Observe("api.example.com", addrs("198.51.100.2"), 5*time.Second)
	e.waitPlanned(at(15 * time.Second))
	// t=15: 198.51.100.2 expires; the change is posted.
	e.stepTo(at(15 * time.Second))
	e.expectChanged(wc)
	e.expectAddrs(wc, "198.51.100.1")
	// t=20: seen again, 198.51.100.1 now lasts until 80.
	e.stepTo(at(20 * time.Second))
	if got := e.c.Observe("www.example.com", addrs("198.51.100.1"), time.Minute); got != nil {
		t.Fatalf("Observe of a known address = %v", got)
	}
	e.waitPlanned(at(30 * time.Second))
	e.stepTo(at(30 * time.Second))
	e.waitPlanned(at(80 * time.Second))
	e.expectAddrs(wc, "198.51.100.1")
	e.stepTo(at(80 * time.Second))
	e.expectChanged(wc)
	e.expectAddrs(wc)

	// Lookups of exact names feed the wildcard above them.
	e.srv.Set("shop.example.com", 60, addrs("198.51.100.7")...)
	if err := e.c.Add("shop.example.com"); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	e.expectAddrs(wc, "198.51.100.7")
	e.expectAddrs("shop.example.com", "198.51.100.7")
	e.expectChanged(wc, "shop.example.com")
}

// TestAliases: the addresses at the end of a CNAME chain belong to every
// name on it, for lookups and observed replies alike.
func TestAliases(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetCNAME("www.shop.io", "edge.cdn.net", 300)
	e.srv.Set("edge.cdn.net", 60, addrs("203.0.113.5")...)
	for _, n := range []string{"*.cdn.net", "edge.cdn.net", "www.shop.io"} {
		if err := e.c.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	e.waitLookups(2) // edge.cdn.net and www.shop.io
	for _, n := range []string{"*.cdn.net", "edge.cdn.net", "www.shop.io"} {
		e.expectAddrs(n, "203.0.113.5")
	}
	e.expectChanged("*.cdn.net", "edge.cdn.net", "www.shop.io")
}

// TestRefcount: shared names are one entry until the last release.
func TestRefcount(t *testing.T) {
	e := newEnv(t, nil)
	const name = "shared.example.com"
	e.srv.Set(name, 60, addrs("192.0.2.1")...)
	for range 2 {
		if err := e.c.Add(name); err != nil {
			t.Fatal(err)
		}
	}
	e.waitLookups(1)
	if st, _ := e.c.Status(name); st.Refs != 2 {
		t.Fatalf("refs %d, want 2", st.Refs)
	}
	e.c.Release(name)
	e.expectAddrs(name, "192.0.2.1")
	e.c.Release(name)
	if _, ok := e.c.Status(name); ok || e.c.Addrs(name) != nil || len(e.c.Names()) != 0 {
		t.Fatal("name still registered after its last release")
	}
	e.c.Release(name) // logged, harmless
	// Added again, it is looked up again.
	if err := e.c.Add(name); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(2)

	// Released while its lookup is in flight: the answer is dropped.
	const slow = "slow.example.com"
	e.srv.SetMode(slow, dnstest.Silent)
	if err := e.c.Add(slow); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, "the slow query", func() bool { return e.srv.Queries(slow, "A", "udp") == 1 })
	e.c.Release(slow)
	e.waitLookups(3)
	if _, ok := e.c.Status(slow); ok {
		t.Fatal("released name came back with its answer")
	}
	if got := e.c.Names(); !slices.Equal(got, []string{name}) {
		t.Fatalf("names %v", got)
	}
	e.expectChanged(name)

	for _, bad := range []string{"", ".", "*.", "a.*.com", "a..com", "*.*.com"} {
		if err := e.c.Add(bad); err == nil {
			t.Fatalf("Add(%q) accepted", bad)
		}
	}
}

// TestExclude: cluster addresses and unspecified ones are never added.
func TestExclude(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Exclude = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("fd00:10:128::/48")}
	})
	const name = "mixed.example.com"
	e.srv.Set(name, 60, addrs("10.128.3.4", "192.0.2.1", "fd00:10:128::9", "2001:db8::1", "0.0.0.0")...)
	if err := e.c.Add(name); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	e.expectAddrs(name, "192.0.2.1", "2001:db8::1")
	if got := e.c.Observe(name, addrs("10.129.0.1", "::ffff:192.0.2.5", "::"), time.Minute); !slices.Equal(got, []string{name}) {
		t.Fatalf("Observe = %v", got)
	}
	e.expectAddrs(name, "192.0.2.1", "192.0.2.5", "2001:db8::1")
	if n := e.c.m.excluded.Load(); n != 5 {
		t.Fatalf("%d addresses dropped, want 5", n)
	}
}

// TestMaxAddrs: a full name evicts the address that expires soonest.
func TestMaxAddrs(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxAddrs = 3 })
	if err := e.c.Add("*.example.com"); err != nil {
		t.Fatal(err)
	}
	e.c.Observe("a.example.com", addrs("192.0.2.1"), time.Hour)
	e.c.Observe("b.example.com", addrs("192.0.2.2"), time.Minute)
	e.c.Observe("c.example.com", addrs("192.0.2.3"), time.Hour)
	e.c.Observe("d.example.com", addrs("192.0.2.4"), time.Hour)
	e.expectAddrs("*.example.com", "192.0.2.1", "192.0.2.3", "192.0.2.4")
	if e.c.m.evicted.Load() != 1 {
		t.Fatalf("%d evicted, want 1", e.c.m.evicted.Load())
	}
}
