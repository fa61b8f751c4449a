package dnsnames

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"nodeflow/lib/dnsmsg"
)

// benchCache is a cache with n exact names and n wildcards, not running
// (no lookups), with four addresses each.
func benchCache(b *testing.B, n int) *Cache {
	c, err := New(Options{Servers: []string{"127.0.0.1:53"}, Clock: clocktesting.NewFakeClock(epoch)})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("host%d.example%d.com", i, i)
		if err := c.Add(name); err != nil {
			b.Fatal(err)
		}
		if err := c.Add("*." + fmt.Sprintf("example%d.com", i)); err != nil {
			b.Fatal(err)
		}
		c.Observe(name, benchAddrs(i), time.Hour)
	}
	return c
}

func benchAddrs(i int) []netip.Addr {
	return []netip.Addr{
		netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}),
		netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}),
		netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: byte(i >> 8), 15: byte(i)}),
		netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 1, 14: byte(i >> 8), 15: byte(i)}),
	}
}

// BenchmarkObserveKnown is the common case on the held-reply path: a
// registered name's answer with addresses already known (exact and
// wildcard both match).
func BenchmarkObserveKnown(b *testing.B) {
	c := benchCache(b, 1000)
	a := benchAddrs(500)
	b.ReportAllocs()
	for b.Loop() {
		if c.Observe("host500.example500.com", a, time.Hour) != nil {
			b.Fatal("changed")
		}
	}
}

// BenchmarkObserveUnregistered: an answer for a name no rule uses.
func BenchmarkObserveUnregistered(b *testing.B) {
	c := benchCache(b, 1000)
	a := benchAddrs(1)
	b.ReportAllocs()
	for b.Loop() {
		if c.Observe("www.elsewhere.net", a, time.Hour) != nil {
			b.Fatal("changed")
		}
	}
}

// BenchmarkObserveNew: an answer that brings a new address each time.
func BenchmarkObserveNew(b *testing.B) {
	c := benchCache(b, 10)
	b.ReportAllocs()
	i := 0
	a := make([]netip.Addr, 1)
	for b.Loop() {
		i++
		a[0] = netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)})
		if c.Observe("new.example1.com", a, time.Hour) == nil {
			b.Fatal("unchanged")
		}
		if i%200 == 0 { // keep the set under MaxAddrs
			c.Release("*.example1.com")
			_ = c.Add("*.example1.com")
		}
	}
}

// BenchmarkObserveReply: a parsed reply with a CNAME, both names known.
func BenchmarkObserveReply(b *testing.B) {
	c := benchCache(b, 1000)
	r := &dnsmsg.Reply{
		Names: []string{"host7.example7.com", "host8.example8.com"},
		Records: []dnsmsg.Record{
			{Addr: benchAddrs(8)[0], TTL: 60}, {Addr: benchAddrs(8)[1], TTL: 60},
		},
	}
	c.ObserveReply(r)
	b.ReportAllocs()
	for b.Loop() {
		if c.ObserveReply(r) != nil {
			b.Fatal("changed")
		}
	}
}

// BenchmarkMatches is the "is any rule interested" check.
func BenchmarkMatches(b *testing.B) {
	c := benchCache(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if !c.Matches("api.example500.com") {
			b.Fatal("no match")
		}
	}
}

// BenchmarkAddrs is a flow builder reading one name's addresses.
func BenchmarkAddrs(b *testing.B) {
	c := benchCache(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if len(c.Addrs("host500.example500.com")) != 4 {
			b.Fatal("addresses")
		}
	}
}
