package vnet

import (
	"math"
	"net/netip"
	"testing"
)

func TestAddressRange(t *testing.T) {
	for _, tc := range []struct {
		prefix      string
		first, last string
		size        uint64
	}{
		{"10.0.0.0/24", "10.0.0.1", "10.0.0.254", 254},
		{"10.0.0.0/30", "10.0.0.1", "10.0.0.2", 2},
		{"10.0.0.0/31", "10.0.0.0", "10.0.0.1", 2},
		{"10.0.0.7/32", "10.0.0.7", "10.0.0.7", 1},
		{"10.0.0.0/8", "10.0.0.1", "10.255.255.254", 1<<24 - 2},
		{"0.0.0.0/0", "0.0.0.1", "255.255.255.254", 1<<32 - 2},
		{"fd00::/120", "fd00::1", "fd00::ff", 255},
		{"fd00::/127", "fd00::", "fd00::1", 2},
		{"fd00::1/128", "fd00::1", "fd00::1", 1},
		{"fd00::/64", "fd00::1", "fd00::ffff:ffff:ffff:ffff", math.MaxUint64},
		{"fd00::/65", "fd00::1", "fd00::7fff:ffff:ffff:ffff", 1<<63 - 1},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			r := RangeOf(netip.MustParsePrefix(tc.prefix))
			if r.First.String() != tc.first || r.Last.String() != tc.last || r.Size() != tc.size {
				t.Fatalf("%s..%s (%d), want %s..%s (%d)", r.First, r.Last, r.Size(), tc.first, tc.last, tc.size)
			}
			if tc.size <= 1024 {
				n := uint64(0)
				prev := netip.Addr{}
				for a := range r.All() {
					if !r.Contains(a) || (prev.IsValid() && r.Next(prev) != a) {
						t.Fatalf("All yields %s after %s", a, prev)
					}
					prev = a
					n++
				}
				if n != tc.size || prev != r.Last {
					t.Fatalf("All yields %d addresses ending at %s", n, prev)
				}
			}
			if r.Next(r.Last) != r.First {
				t.Errorf("Next(%s) = %s, want the wrap to %s", r.Last, r.Next(r.Last), r.First)
			}
			if r.Contains(r.Prefix.Addr().Prev()) || (r.First != r.Prefix.Addr() && r.Contains(r.Prefix.Addr())) {
				t.Errorf("Contains the address before or the network address")
			}
		})
	}
	r := RangeOf(netip.MustParsePrefix("10.0.0.0/24"))
	if r.Contains(netip.MustParseAddr("10.0.0.255")) || r.Contains(netip.MustParseAddr("::ffff:10.0.0.3")) || !r.Contains(netip.MustParseAddr("10.0.0.3")) {
		t.Error("Contains: broadcast, IPv4-mapped or a member wrong")
	}
	// Early stop.
	n := 0
	for range r.All() {
		n++
		if n == 3 {
			break
		}
	}
	if var0 := (AddressRange{}); var0.Size() != 0 || var0.Contains(netip.MustParseAddr("10.0.0.1")) {
		t.Error("the zero range is not empty")
	}
}
