package agent

import (
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSecondaryIPs(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	ex := secondaryExclusions{
		NodeIPs: []netip.Addr{a("172.30.0.11"), a("fd00:172:30::11")},
		Prefixes: []netip.Prefix{
			p("169.254.169.0/29"), p("fd69::/125"), // masquerade
			p("10.244.0.0/16"), p("fd00:10:244::/56"), // cluster (pod CIDRs inside)
			p("10.96.0.0/16"), p("fd00:10:96::/112"), // services
		},
		Links: []string{"mp0"},
	}
	global := func(link, ip string) hostAddr {
		return hostAddr{Link: link, Addr: a(ip), Scope: unix.RT_SCOPE_UNIVERSE}
	}
	withScope := func(h hostAddr, scope int) hostAddr { h.Scope = scope; return h }
	withFlags := func(h hostAddr, flags int) hostAddr { h.Flags = flags; return h }
	tests := []struct {
		name  string
		addrs []hostAddr
		noEx  bool // no exclusions at all
		want  []string
	}{
		{name: "nothing", want: nil},
		{
			name:  "secondary on lo, as in the seed",
			addrs: []hostAddr{global("lo", "172.20.0.2"), withScope(global("lo", "127.0.0.1"), unix.RT_SCOPE_HOST), withScope(global("lo", "::1"), unix.RT_SCOPE_HOST)},
			want:  []string{"172.20.0.2"},
		},
		{
			name:  "node IPs are primary, not secondary",
			addrs: []hostAddr{global("breth0", "172.30.0.11"), global("breth0", "fd00:172:30::11"), global("eth1", "192.168.5.7")},
			want:  []string{"192.168.5.7"},
		},
		{
			name:  "a second address on breth0 counts",
			addrs: []hostAddr{global("breth0", "172.30.0.11"), global("breth0", "172.30.0.50")},
			want:  []string{"172.30.0.50"},
		},
		{
			name: "masquerade addresses on breth0",
			addrs: []hostAddr{global("breth0", "169.254.169.2"), global("breth0", "fd69::2"),
				global("breth0", "169.254.169.7")},
			want: nil,
		},
		{
			name:  "link-local, whatever the scope says",
			addrs: []hostAddr{global("eth1", "169.254.10.1"), global("eth1", "fe80::1"), withScope(global("eth1", "fe80::2"), unix.RT_SCOPE_LINK)},
			want:  nil,
		},
		{
			name:  "loopback, even if marked global",
			addrs: []hostAddr{global("lo", "127.0.0.1"), global("lo", "127.3.4.5"), global("lo", "::1")},
			want:  nil,
		},
		{
			name:  "site and host scopes",
			addrs: []hostAddr{withScope(global("eth1", "10.1.2.3"), unix.RT_SCOPE_SITE), withScope(global("eth1", "10.1.2.4"), unix.RT_SCOPE_HOST)},
			want:  nil,
		},
		{
			name:  "pod, cluster and service networks",
			addrs: []hostAddr{global("eth1", "10.244.7.9"), global("eth1", "fd00:10:244::9"), global("kube-ipvs0", "10.96.0.10"), global("kube-ipvs0", "fd00:10:96::a")},
			want:  nil,
		},
		{
			name:  "the management port's addresses, even outside the networks",
			addrs: []hostAddr{global("mp0", "10.244.1.2"), global("mp0", "192.0.2.9")},
			want:  nil,
		},
		{
			name: "IPv6 not yet usable",
			addrs: []hostAddr{withFlags(global("eth1", "2001:db8::1"), unix.IFA_F_TENTATIVE), withFlags(global("eth1", "2001:db8::2"), unix.IFA_F_DADFAILED),
				withFlags(global("eth1", "2001:db8::3"), unix.IFA_F_NODAD|unix.IFA_F_PERMANENT)},
			want: []string{"2001:db8::3"},
		},
		{
			name:  "multicast and unspecified",
			addrs: []hostAddr{global("eth1", "224.0.0.1"), global("eth1", "ff02::1"), global("eth1", "0.0.0.0"), global("eth1", "::")},
			want:  nil,
		},
		{
			name:  "sorted, IPv4 first, no duplicates",
			addrs: []hostAddr{global("lo", "2001:db8::5"), global("lo", "172.20.0.3"), global("eth1", "172.20.0.2"), global("eth2", "172.20.0.2"), global("lo", "::ffff:172.20.0.1")},
			want:  []string{"172.20.0.1", "172.20.0.2", "172.20.0.3", "2001:db8::5"},
		},
		{
			name:  "without exclusions only the address rules apply",
			addrs: []hostAddr{global("mp0", "10.244.1.2"), global("breth0", "fd69::2"), global("lo", "127.0.0.1")},
			noEx:  true,
			want:  []string{"10.244.1.2", "fd69::2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := ex
			if tc.noEx {
				e = secondaryExclusions{}
			}
			got := secondaryIPs(tc.addrs, e)
			var want []netip.Addr
			for _, s := range tc.want {
				want = append(want, a(s))
			}
			if !slices.Equal(got, want) {
				t.Errorf("secondaryIPs = %v, want %v", got, want)
			}
		})
	}
}

func TestHostAddrSetReplace(t *testing.T) {
	var s hostAddrSet
	one := []netip.Addr{netip.MustParseAddr("172.20.0.2")}
	if s.replace(nil) {
		t.Error("replacing the empty set with nothing reported a change")
	}
	if !s.replace(one) {
		t.Error("adding an address reported no change")
	}
	if s.replace(slices.Clone(one)) {
		t.Error("the same addresses again reported a change")
	}
	got := s.get()
	got[0] = netip.MustParseAddr("10.0.0.1")
	if s.get()[0] != one[0] {
		t.Error("get returned the set's own slice")
	}
	if !s.replace(nil) || len(s.get()) != 0 {
		t.Error("removing the address was not a change, or left it")
	}
}

func TestListHostAddrs(t *testing.T) {
	// Every host has lo with 127.0.0.1 (host scope); the interfaces asked
	// for are named, a missing one is no error.
	all, err := listHostAddrs([]string{"lo", "no-such-link0"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range all {
		if !h.Addr.IsValid() {
			t.Errorf("address %+v: not valid", h)
		}
		if h.Addr == netip.MustParseAddr("127.0.0.1") {
			found = true
			if h.Link != "lo" || h.Scope != unix.RT_SCOPE_HOST {
				t.Errorf("127.0.0.1: link %q scope %d, want lo and host scope", h.Link, h.Scope)
			}
		}
	}
	if !found {
		t.Error("127.0.0.1 not listed")
	}
	if got := secondaryIPs(all, secondaryExclusions{}); slices.Contains(got, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("secondary addresses %v hold loopback", got)
	}
}
