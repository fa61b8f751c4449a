package vnetipam

import (
	"net/netip"
	"testing"
	"time"

	"nodeflow/model/vnet"
)

// A commented timeline of one Subnet's searches.
func TestStatePick(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newState(time.Minute)
	r := vnet.RangeOf(netip.MustParsePrefix("10.0.0.0/29")) // .1 .. .6
	pick := func(at time.Time, want string) {
		t.Helper()
		ip, ok := s.pick(vniA, "subnet-1", r, at)
		if want == "full" {
			if ok {
				t.Fatalf("picked %s, want full", ip)
			}
			return
		}
		if !ok || ip.String() != want {
			t.Fatalf("picked %s %v, want %s", ip, ok, want)
		}
	}
	a := netip.MustParseAddr
	// The first search starts at the first address; .2 has a lock in the
	// cache.
	s.lockAdded(vniA, a("10.0.0.2"))
	pick(t0, "10.0.0.1")
	// Next-fit: on from .1, past the locked .2.
	pick(t0, "10.0.0.3")
	// A lock on another VNI takes nothing here.
	s.lockAdded(vniB, a("10.0.0.4"))
	pick(t0, "10.0.0.4")
	pick(t0, "10.0.0.5")
	pick(t0, "10.0.0.6")
	// .1, .3, .4, .5, .6 are claimed, .2 locked: full.
	pick(t0, "full")
	// .3's create failed: its claim goes, and the search wraps to it.
	s.unclaim(vniA, a("10.0.0.3"))
	pick(t0, "10.0.0.3")
	// Claims expire: a minute later the cache has shown none of them
	// (their creates all failed silently), so they are free again,
	// from where the search stopped.
	pick(t0.Add(2*time.Minute), "10.0.0.4")
	// The lock of .2 goes; waiting attachments are returned once.
	s.wait(vniA, key{name: "w"})
	if w := s.lockDeleted(vniA, a("10.0.0.2")); len(w) != 1 || w[0].name != "w" {
		t.Fatalf("waiting %v", w)
	}
	if w := s.lockDeleted(vniA, a("10.0.0.9")); len(w) != 0 {
		t.Fatalf("waiting again %v", w)
	}
}

// IPv6: an address whose MAC (its last 32 bits) another address of the
// VNI has is skipped.
func TestStatePickIPv6MAC(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newState(time.Minute)
	a := netip.MustParseAddr
	s.lockAdded(vniA, a("fd00:1::1")) // in another Subnet of the VNI
	s.claim(vniA, a("fd00:1::2"), "", t0)
	r := vnet.RangeOf(netip.MustParsePrefix("fd00:2::/64"))
	ip, ok := s.pick(vniA, "subnet-2", r, t0)
	if !ok || ip != a("fd00:2::3") {
		t.Fatalf("picked %s %v, want fd00:2::3 (::1 and ::2 have the MACs of fd00:1::1 and ::2)", ip, ok)
	}
	// On another VNI, the MACs differ.
	ip, ok = s.pick(vniB, "subnet-3", r, t0)
	if !ok || ip != a("fd00:2::1") {
		t.Fatalf("picked %s %v on VNI B, want fd00:2::1", ip, ok)
	}
}

// A huge range with few locks is searched in a few steps, and a full
// small one is recognised.
func TestStatePickBounds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newState(time.Minute)
	big := vnet.RangeOf(netip.MustParsePrefix("10.0.0.0/8"))
	for i := range 1000 {
		ip, ok := s.pick(vniA, "big", big, t0)
		if !ok {
			t.Fatalf("pick %d: full", i)
		}
		s.lockAdded(vniA, ip)
	}
	one := vnet.RangeOf(netip.MustParsePrefix("10.9.9.9/32"))
	if ip, ok := s.pick(vniB, "one", one, t0); !ok || ip.String() != "10.9.9.9" {
		t.Fatalf("/32: %s %v", ip, ok)
	}
	if ip, ok := s.pick(vniB, "one", one, t0); ok {
		t.Fatalf("/32 twice: %s", ip)
	}
}
