package dnsnames

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	clocktesting "k8s.io/utils/clock/testing"
	"nodeflow/internal/testutil/dnstest"
	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/dnsmsg"
)

// TestTruncatedRetriesOverTCP: a truncated UDP answer is asked again
// over TCP.
func TestTruncatedRetriesOverTCP(t *testing.T) {
	e := newEnv(t, nil)
	const name = "big.example.com"
	e.srv.Set(name, 60, addrs("192.0.2.1", "2001:db8::1")...)
	e.srv.SetMode(name, dnstest.Truncate)
	if err := e.c.Add(name); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	e.expectAddrs(name, "192.0.2.1", "2001:db8::1")
	for _, q := range []string{"A", "AAAA"} {
		if u, tc := e.srv.Queries(name, q, "udp"), e.srv.Queries(name, q, "tcp"); u != 1 || tc != 1 {
			t.Fatalf("%s: %d udp and %d tcp queries, want 1 and 1", q, u, tc)
		}
	}
}

// TestServersInOrder: a server that fails or is silent is passed over
// for the next; when all fail, the error names each.
func TestServersInOrder(t *testing.T) {
	bad, err := dnstest.Start("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bad.Close)
	var good *dnstest.Server
	e := newEnv(t, func(o *Options) { o.Servers = append([]string{bad.Addr}, o.Servers...) })
	good = e.srv
	good.Set("a.example.com", 60, addrs("192.0.2.1")...)
	good.Set("b.example.com", 60, addrs("192.0.2.2")...)
	bad.SetMode("a.example.com", dnstest.Refuse)
	bad.SetMode("b.example.com", dnstest.Silent)
	for _, n := range []string{"a.example.com", "b.example.com"} {
		if err := e.c.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	e.waitLookups(2)
	e.expectAddrs("a.example.com", "192.0.2.1")
	e.expectAddrs("b.example.com", "192.0.2.2")
	if bad.Queries("a.example.com", "A", "udp") != 1 || bad.Queries("b.example.com", "A", "udp") != 1 {
		t.Fatal("the first server was not asked first")
	}

	good.SetMode("c.example.com", dnstest.ServFail)
	bad.SetMode("c.example.com", dnstest.ServFail)
	if err := e.c.Add("c.example.com"); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(3)
	st, _ := e.c.Status("c.example.com")
	msg := st.LastError.Error()
	for _, want := range []string{bad.Addr + ": answer SERVFAIL", good.Addr + ": answer SERVFAIL", "lookup c.example.com AAAA"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q lacks %q", msg, want)
		}
	}
}

// TestIPv6Server: a server on ::1 works like one on 127.0.0.1.
func TestIPv6Server(t *testing.T) {
	srv, err := dnstest.Start("::1")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(srv.Close)
	e := newEnv(t, func(o *Options) { o.Servers = []string{srv.Addr} })
	srv.Set("v6.example.com", 60, addrs("2001:db8::6")...)
	if err := e.c.Add("v6.example.com"); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	e.expectAddrs("v6.example.com", "2001:db8::6")
}

// TestSlowDNSBlocksNobody: with every worker waiting on a silent server,
// the cache's methods still return at once, and lookups beyond the
// workers wait their turn.
func TestSlowDNSBlocksNobody(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Workers = 2; o.Timeout = 2 * time.Second })
	names := []string{"s1.example.com", "s2.example.com", "s3.example.com", "s4.example.com"}
	for _, n := range names {
		e.srv.SetMode(n, dnstest.Silent)
		e.srv.Set(n, 60, addrs("192.0.2.1")...)
		if err := e.c.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	asked := func() int {
		k := 0
		for _, n := range names {
			k += e.srv.Queries(n, "A", "udp")
		}
		return k
	}
	waittest.Eventually(t, "two lookups in flight", func() bool { return asked() == 2 })
	start := time.Now()
	e.c.mu.Lock()
	inflight, ready := e.c.inflight, len(e.c.ready)
	e.c.mu.Unlock()
	if err := e.c.Add("other.example.com"); err != nil {
		t.Fatal(err)
	}
	e.c.Observe("s1.example.com", addrs("192.0.2.7"), time.Minute)
	e.c.Addrs("s1.example.com")
	e.c.Status("s2.example.com")
	e.c.Release("other.example.com")
	if d := time.Since(start); d > time.Second || inflight != 2 || ready != 2 {
		t.Fatalf("calls took %v with %d lookups in flight and %d waiting; want immediate, 2 and 2", d, inflight, ready)
	}
	if asked() != 2 {
		t.Fatalf("%d names asked while two workers wait", asked())
	}
	// The silent server answers again: the lookups that timed out are
	// retried after their back-off, the waiting ones ran meanwhile.
	for _, n := range names {
		e.srv.SetMode(n, dnstest.Answer)
	}
	e.waitLookups(4)
	e.stepTo(at(time.Second))
	waittest.Eventually(t, "all names resolved", func() bool {
		for _, n := range names {
			if len(e.c.Addrs(n)) == 0 {
				return false
			}
		}
		return true
	})
}

// TestRunEndsPromptly: cancelling Run cuts a lookup short instead of
// waiting for its timeout, and does not count it as a failure.
func TestRunEndsPromptly(t *testing.T) {
	srv, err := dnstest.Start("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.SetMode("slow.example.com", dnstest.Silent)
	c, err := New(Options{Servers: []string{srv.Addr}, Timeout: time.Minute, Clock: clocktesting.NewFakeClock(epoch)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add("slow.example.com"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	waittest.Eventually(t, "the query", func() bool { return srv.Queries("slow.example.com", "A", "udp") == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run still waits for a lookup with a one-minute timeout")
	}
	if st, _ := c.Status("slow.example.com"); st.Failures != 0 {
		t.Fatalf("a cancelled lookup counted as a failure: %+v", st)
	}
	// Run started again picks the name up at once.
	srv.SetMode("slow.example.com", dnstest.Answer)
	srv.Set("slow.example.com", 60, addrs("192.0.2.1")...)
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waittest.Eventually(t, "the name resolved by the second Run", func() bool { return len(c.Addrs("slow.example.com")) == 1 })
}

// TestResolvConf: the servers come from the resolver configuration, and
// its search domains are not used.
func TestResolvConf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "search cluster.local svc.cluster.local\nnameserver 192.0.2.53\nnameserver fd00::53\noptions ndots:5\n")
	c, err := New(Options{ResolvConf: good})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Servers(), []string{"192.0.2.53:53", "[fd00::53]:53"}; !slices.Equal(got, want) {
		t.Fatalf("servers %v, want %v", got, want)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"no nameserver", write("empty", "search example.com\n"), "no nameserver"},
		{"missing file", filepath.Join(dir, "missing"), "resolver configuration"},
	} {
		if _, err := New(Options{ResolvConf: tc.path}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	// A lookup asks the name as it is, fully qualified.
	e := newEnv(t, nil)
	e.srv.Set("short", 60, addrs("192.0.2.1")...)
	if err := e.c.Add("short"); err != nil {
		t.Fatal(err)
	}
	e.waitLookups(1)
	e.expectAddrs("short", "192.0.2.1")
}

func TestOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"max ttl under min", Options{Servers: []string{"127.0.0.1:53"}, MinTTL: time.Minute, MaxTTL: time.Second}, "MaxTTL"},
		{"max addr ttl under min", Options{Servers: []string{"127.0.0.1:53"}, MinTTL: time.Minute, MaxTTL: time.Hour, MaxAddrTTL: time.Second}, "MaxAddrTTL"},
		{"backoff", Options{Servers: []string{"127.0.0.1:53"}, MinBackoff: time.Minute, MaxBackoff: time.Second}, "MaxBackoff"},
		{"server without port", Options{Servers: []string{"127.0.0.1"}}, `server 1 "127.0.0.1"`},
		{"server port 0", Options{Servers: []string{"127.0.0.1:0"}}, "bad port"},
		{"bad prefix", Options{Servers: []string{"127.0.0.1:53"}, Exclude: []netip.Prefix{{}}}, "exclude prefix 1"},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestObserveReply learns a parsed reply for its question and aliases.
func TestObserveReply(t *testing.T) {
	e := newEnv(t, nil)
	for _, n := range []string{"www.shop.io", "*.cdn.net"} {
		if err := e.c.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	e.srv.SetMode("www.shop.io", dnstest.Silent) // only the observed reply teaches
	m := new(dns.Msg)
	m.SetQuestion("www.shop.io.", dns.TypeA)
	m.Response = true
	for _, s := range []string{"www.shop.io. 300 IN CNAME edge.cdn.net.", "edge.cdn.net. 20 IN A 203.0.113.5"} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	r, err := dnsmsg.FromMsg(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.c.ObserveReply(r); !slices.Equal(got, []string{"www.shop.io", "*.cdn.net"}) {
		t.Fatalf("ObserveReply = %v", got)
	}
	st, _ := e.c.Status("*.cdn.net")
	if !slices.Equal(st.Expires, []time.Time{at(20 * time.Second)}) {
		t.Fatalf("expiry %v, want the record's TTL, 20s", st.Expires)
	}
	if got := e.c.ObserveReply(r); got != nil {
		t.Fatalf("second ObserveReply = %v", got)
	}
	r.RCode = dnsmsg.RcodeNXDomain
	if got := e.c.ObserveReply(r); got != nil {
		t.Fatalf("NXDOMAIN ObserveReply = %v", got)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Exclude = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
	e.srv.Set("a.example.com", 60, addrs("192.0.2.1", "10.1.1.1")...)
	e.srv.SetMode("b.example.com", dnstest.ServFail)
	for _, n := range []string{"a.example.com", "b.example.com", "*.example.org"} {
		if err := e.c.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	e.waitLookups(2)
	e.c.Observe("x.example.org", addrs("198.51.100.1"), time.Minute)
	e.c.Observe("x.example.org", addrs("198.51.100.1"), time.Minute)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(e.c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP nodeflow_egress_firewall_dns_addresses Addresses held for all registered dnsNames.
# TYPE nodeflow_egress_firewall_dns_addresses gauge
nodeflow_egress_firewall_dns_addresses 2
# HELP nodeflow_egress_firewall_dns_dropped_addresses_total Addresses not kept: in an excluded (cluster) prefix or unspecified, or evicted from a name at its address limit.
# TYPE nodeflow_egress_firewall_dns_dropped_addresses_total counter
nodeflow_egress_firewall_dns_dropped_addresses_total{reason="excluded"} 1
nodeflow_egress_firewall_dns_dropped_addresses_total{reason="limit"} 0
# HELP nodeflow_egress_firewall_dns_failing_names Exact dnsNames whose last lookup failed.
# TYPE nodeflow_egress_firewall_dns_failing_names gauge
nodeflow_egress_firewall_dns_failing_names 1
# HELP nodeflow_egress_firewall_dns_lookup_failures_total Lookups that got no answer from any server for A, AAAA or both (NXDOMAIN is an answer).
# TYPE nodeflow_egress_firewall_dns_lookup_failures_total counter
nodeflow_egress_firewall_dns_lookup_failures_total 1
# HELP nodeflow_egress_firewall_dns_lookups_total Lookups of exact dnsNames (A and AAAA together), answered or not.
# TYPE nodeflow_egress_firewall_dns_lookups_total counter
nodeflow_egress_firewall_dns_lookups_total 2
# HELP nodeflow_egress_firewall_dns_names Registered dnsNames, by kind (exact or wildcard).
# TYPE nodeflow_egress_firewall_dns_names gauge
nodeflow_egress_firewall_dns_names{kind="exact"} 2
nodeflow_egress_firewall_dns_names{kind="wildcard"} 1
# HELP nodeflow_egress_firewall_dns_observed_answers_total DNS answers seen on their way to pods and offered to the cache.
# TYPE nodeflow_egress_firewall_dns_observed_answers_total counter
nodeflow_egress_firewall_dns_observed_answers_total 2
# HELP nodeflow_egress_firewall_dns_observed_changes_total Observed DNS answers that brought an address new to a registered name.
# TYPE nodeflow_egress_firewall_dns_observed_changes_total counter
nodeflow_egress_firewall_dns_observed_changes_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"nodeflow_egress_firewall_dns_addresses", "nodeflow_egress_firewall_dns_dropped_addresses_total",
		"nodeflow_egress_firewall_dns_failing_names", "nodeflow_egress_firewall_dns_lookup_failures_total",
		"nodeflow_egress_firewall_dns_lookups_total", "nodeflow_egress_firewall_dns_names",
		"nodeflow_egress_firewall_dns_observed_answers_total", "nodeflow_egress_firewall_dns_observed_changes_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(e.c, "nodeflow_egress_firewall_dns_lookup_duration_seconds"); n != 1 {
		t.Fatalf("%d duration histograms", n)
	}
}
