package service

import (
	"maps"
	"net/netip"
	"testing"
)

// TestEntryAddrs: each entry gives back the address it was set to, in
// order, and entries left unset (skipped) or of the other family give
// none.
func TestEntryAddrs(t *testing.T) {
	for _, tc := range []struct {
		f    Family
		addr []string // "" leaves the entry unset
	}{
		{IPv4, []string{"10.0.0.1", "", "10.0.0.3", "0.0.0.0", "fd00::1"}},
		{IPv6, []string{"fd00::1", "", "::", "10.0.0.1", "fe80::1"}},
		{IPv4, nil},
	} {
		e := newEntryAddrs(len(tc.addr), tc.f)
		want := map[int]netip.Addr{}
		for i, s := range tc.addr {
			if s == "" {
				continue
			}
			a := netip.MustParseAddr(s)
			e.set(i, a)
			if FamilyOf(a) == tc.f {
				want[i] = a
			}
		}
		got := map[int]netip.Addr{}
		e.each(func(i int, a netip.Addr) { got[i] = a })
		if !maps.Equal(got, want) {
			t.Errorf("family %v, entries %q: got %v, want %v", tc.f, tc.addr, got, want)
		}
	}
	var none entryAddrs
	none.each(func(int, netip.Addr) { t.Error("an empty entryAddrs gave an entry") })
}
