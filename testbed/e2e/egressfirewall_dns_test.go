package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"nodeflow/testbed/nsutil"
)

// resolve asks the testbed's DNS server at server for name's records of
// type qtype from inside netns, over UDP, as a pod's resolver would, and
// returns the addresses of the answer.
func resolve(netns string, server netip.Addr, name string, qtype uint16) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := nsutil.Dial(ctx, netns, "udp", net.JoinHostPort(server.String(), "53"), 3*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	co := &dns.Conn{Conn: c}
	if err := co.WriteMsg(m); err != nil {
		return nil, err
	}
	r, err := co.ReadMsg()
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var out []netip.Addr
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			a, _ := netip.AddrFromSlice(rr.A)
			out = append(out, a.Unmap())
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(rr.AAAA)
			out = append(out, a)
		}
	}
	return out, nil
}

// TestEgressFirewallDNS: dnsName rules, exact and wildcard. An exact name
// follows its answers as the agent looks it up (an answer that changes, a
// TTL that expires). And a pod is never a step ahead of its firewall: it
// resolves a name no one has asked for before and connects at once, 120
// times in a row over both families, half the names allowed by a wildcard
// in front of a deny-all and half denied by a wildcard in front of an
// allow, and every verdict is right the first time (a connection gets one
// SYN and 900 ms, less than TCP's first retransmission).
func TestEgressFirewallDNS(t *testing.T) {
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	if len(g.e.state.DNSServers) < 2 {
		t.Fatalf("testbed DNS servers %v, want one of each family", g.e.state.DNSServers)
	}
	server4, server6 := netip.MustParseAddr(g.e.state.DNSServers[0]), netip.MustParseAddr(g.e.state.DNSServers[1])
	if server4.Is6() {
		server4, server6 = server6, server4
	}
	// The path out is warm (its next hop resolved) before any query, so
	// that a lost reply is the firewall's doing.
	for _, p := range g.pods {
		verdict(t, p, "tcp", ext(false, 130), true)
	}
	// The baseline: the same lookups in the namespace without dnsName
	// rules, so without DNS learning.
	var base []time.Duration
	for i := range 60 {
		p := g.pods[i%len(g.pods)]
		name := fmt.Sprintf("b%d.ok.egfw.test", i)
		if err := g.dns.Set(name, 60, ext(false, 200)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := resolve(p.netns, server4, name, dns.TypeA); err != nil {
			t.Fatalf("baseline lookup: %v", err)
		}
		base = append(base, time.Since(start))
	}
	exact1, exact2 := ext(false, 50), ext(false, 51)
	if err := g.dns.Set("exact.egfw.test", 2, exact1); err != nil {
		t.Fatal(err)
	}
	// Applied on both nodes means the agents resolved the exact name
	// through the testbed's server (a name that does not resolve is
	// reported instead).
	g.applyFirewall(t, rules(
		"Allow "+server4.String()+"/32 UDP/53",
		"Allow "+server6.String()+"/128 UDP/53",
		"Deny dns:*.no.egfw.test",
		"Allow 198.18.0.128/25",
		"Allow 2001:db8:e::80/121",
		"Allow dns:*.ok.egfw.test",
		"Allow dns:exact.egfw.test",
		"Deny 0.0.0.0/0",
		"Deny ::/0",
	))

	t.Run("exact name follows its answers", func(t *testing.T) {
		for _, p := range g.pods {
			verdict(t, p, "tcp", exact1, true)
			verdict(t, p, "tcp", exact2, false)
		}
		if err := g.dns.Set("exact.egfw.test", 2, exact2); err != nil {
			t.Fatal(err)
		}
		// The agents look the name up again after the TTL floor (5 s);
		// the old address goes once its own TTL has passed unseen.
		for _, p := range g.pods {
			eventually(t, 30*time.Second, p.node+": the new address allowed, the old one denied", func(context.Context) error {
				if _, err := extReach(p.netns, "tcp", exact2, time.Second); err != nil {
					return fmt.Errorf("new address %s: %v", exact2, err)
				}
				if got, err := extReach(p.netns, "tcp", exact1, time.Second); err == nil {
					return fmt.Errorf("old address %s still allowed (answered by %s)", exact1, got)
				}
				return nil
			})
		}
	})

	t.Run("resolve then connect", func(t *testing.T) {
		type try struct {
			name   string
			addr   netip.Addr
			server netip.Addr
			allow  bool
		}
		var tries []try
		for i := range 100 {
			tr := try{server: server4}
			if i%2 == 0 {
				tr.name, tr.addr, tr.allow = fmt.Sprintf("h%d.ok.egfw.test", i), ext(false, 60+i/2), true
			} else {
				tr.name, tr.addr = fmt.Sprintf("h%d.no.egfw.test", i), ext(false, 130+i/2)
			}
			tries = append(tries, tr)
		}
		for i := range 20 {
			tr := try{server: server6}
			if i%2 == 0 {
				tr.name, tr.addr, tr.allow = fmt.Sprintf("v%d.ok.egfw.test", i), ext(true, 0x10+i), true
			} else {
				tr.name, tr.addr = fmt.Sprintf("v%d.no.egfw.test", i), ext(true, 0x90+i)
			}
			tries = append(tries, tr)
		}
		var wrong []string
		var held []time.Duration
		start := time.Now()
		for i, tr := range tries {
			p := g.pods[i%len(g.pods)]
			if err := g.dns.Set(tr.name, 60, tr.addr); err != nil {
				t.Fatal(err)
			}
			qtype := dns.TypeA
			if tr.addr.Is6() {
				qtype = dns.TypeAAAA
			}
			rstart := time.Now()
			got, err := resolve(p.netns, tr.server, tr.name, qtype)
			if tr.server == server4 {
				held = append(held, time.Since(rstart))
			}
			if err != nil || !slices.Equal(got, []netip.Addr{tr.addr}) {
				t.Fatalf("%s: resolve %s: %v %v, want %s", p.node, tr.name, got, err, tr.addr)
			}
			ans, err := extReach(p.netns, "tcp", tr.addr, 900*time.Millisecond)
			var ne net.Error
			switch {
			case tr.allow && err != nil:
				wrong = append(wrong, fmt.Sprintf("%s %s (%s): denied: %v", p.node, tr.name, tr.addr, err))
			case !tr.allow && err == nil:
				wrong = append(wrong, fmt.Sprintf("%s %s (%s): allowed (answered by %s)", p.node, tr.name, tr.addr, ans))
			case !tr.allow && (!errors.As(err, &ne) || !ne.Timeout()):
				wrong = append(wrong, fmt.Sprintf("%s %s (%s): %v, want a drop", p.node, tr.name, tr.addr, err))
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%d wrong verdicts of %d:\n%s", len(wrong), len(tries), strings.Join(wrong, "\n"))
		}
		t.Logf("%d resolve-then-connect tries in %s, %d wrong", len(tries), time.Since(start).Round(time.Millisecond), len(wrong))
		// What the hold adds to a lookup as the pod sees it (the test's
		// own cost of entering the pod's namespace included on both sides).
		t.Logf("lookup from a pod, IPv4: without dnsName rules p50 %s p99 %s; held for learning p50 %s p99 %s",
			quantile(base, 0.5), quantile(base, 0.99), quantile(held, 0.5), quantile(held, 0.99))
		// A name no rule matches is released at once (passed), and the
		// held ones are counted with their hold time.
		if _, err := resolve(g.pods[0].netns, server4, "exact.egfw.test.other", dns.TypeA); err == nil || !strings.Contains(err.Error(), "NXDOMAIN") {
			t.Errorf("an unrelated name: %v, want NXDOMAIN", err)
		}
		for _, p := range g.pods {
			text, err := agentMetrics(member(t, g.e, p.node))
			if err != nil {
				t.Fatal(err)
			}
			learned := seriesValue(text, `nodeflow_egress_firewall_dns_replies_total{result="learned"}`)
			passed := seriesValue(text, `nodeflow_egress_firewall_dns_replies_total{result="passed"}`)
			count := seriesValue(text, `nodeflow_egress_firewall_dns_hold_seconds_count`)
			sum := seriesValue(text, `nodeflow_egress_firewall_dns_hold_seconds_sum`)
			if learned < 50 || count != learned {
				t.Errorf("%s: %v replies learned, %v hold times, want at least 50 and equal", p.node, learned, count)
			}
			if learned > 0 {
				t.Logf("%s: %v replies held, mean hold %.2f ms, p50 under %s, p99 under %s (the histogram's buckets); %v passed at once",
					p.node, learned, 1000*sum/count, bucketQuantile(text, "nodeflow_egress_firewall_dns_hold_seconds", 0.5),
					bucketQuantile(text, "nodeflow_egress_firewall_dns_hold_seconds", 0.99), passed)
			}
		}
	})
}

// bucketQuantile returns the upper bound of the first bucket of
// histogram name (in seconds) in the metrics text that holds the
// q-quantile of its observations, or "?" when the text has no such bucket.
func bucketQuantile(text, name string, q float64) string {
	count := seriesValue(text, name+"_count")
	for _, l := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(l, name+`_bucket{le="`)
		if !ok {
			continue
		}
		le, n, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err1 := strconv.ParseFloat(strings.TrimSpace(n), 64)
		bound, err2 := strconv.ParseFloat(le, 64)
		if err1 == nil && err2 == nil && count > 0 && v >= q*count {
			return time.Duration(bound * float64(time.Second)).String()
		}
	}
	return "?"
}

// quantile returns the q-quantile of ds, rounded to 10 us.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Microsecond)
}
