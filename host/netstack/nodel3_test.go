package netstack

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/datapath/conntrack"
)

func ka(s string) KeptAddr { return KeptAddr{Prefix: netip.MustParsePrefix(s)} }

// kr is a default route via gw (IPv6 with the kernel's default metric).
func kr(gw string) KeptRoute {
	g := netip.MustParseAddr(gw)
	if g.Is4() {
		return KeptRoute{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: g, Protocol: unix.RTPROT_BOOT}
	}
	return KeptRoute{Dst: netip.MustParsePrefix("::/0"), Gw: g, Metric: 1024, Protocol: unix.RTPROT_BOOT}
}

func l3(addrs []KeptAddr, routes ...KeptRoute) NodeL3 { return NodeL3{Addrs: addrs, Routes: routes} }

func addrsOf(ss ...string) []KeptAddr {
	var out []KeptAddr
	for _, s := range ss {
		out = append(out, ka(s))
	}
	return out
}

func TestNodeL3Of(t *testing.T) {
	nl := func(s string) netlink.Addr { a, _ := netlink.ParseAddr(s); return *a }
	_, svc, _ := net.ParseCIDR("10.96.0.0/16")
	_, masqRouter, _ := net.ParseCIDR("169.254.169.1/32")
	_, static, _ := net.ParseCIDR("192.168.7.0/24")
	c := L3Config{
		Addrs: []netlink.Addr{nl("172.30.0.11/24"), nl("169.254.169.2/29"), nl("fd00:172:30::11/64"), nl("fd69::2/125")},
		Routes: []netlink.Route{
			{Gw: net.ParseIP("172.30.0.1").To4(), Family: netlink.FAMILY_V4, Protocol: unix.RTPROT_BOOT, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST},
			{Dst: svc, Gw: net.ParseIP("169.254.169.4").To4(), MTU: 1400, Family: netlink.FAMILY_V4},
			{Dst: masqRouter, Src: net.ParseIP("172.30.0.11").To4(), Scope: netlink.SCOPE_LINK, Family: netlink.FAMILY_V4},
			{Dst: static, Gw: net.ParseIP("172.30.0.254").To4(), Priority: 10, Family: netlink.FAMILY_V4},
			{Family: netlink.FAMILY_V6, MultiPath: []*netlink.NexthopInfo{{Gw: net.ParseIP("fd00:172:30::1")}, {Gw: net.ParseIP("fd00:172:30::2")}}},
		},
	}
	got := NodeL3Of(c, conntrack.DefaultPlan())
	want := l3(addrsOf("172.30.0.11/24", "fd00:172:30::11/64"),
		KeptRoute{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("172.30.0.1"), Protocol: unix.RTPROT_BOOT},
		KeptRoute{Dst: netip.MustParsePrefix("192.168.7.0/24"), Gw: netip.MustParseAddr("172.30.0.254"), Metric: 10})
	if !got.Equal(want) {
		t.Errorf("NodeL3Of:\n got %+v\nwant %+v", got, want)
	}
	if ips := got.IPs(); len(ips) != 2 || ips[0].String() != "172.30.0.11/24" || ips[1].String() != "fd00:172:30::11/64" {
		t.Errorf("IPs = %v", ips)
	}
}

// TestNextNodeL3 is the decision of what the agent keeps at its start.
func TestNextNodeL3(t *testing.T) {
	node := l3(addrsOf("172.30.0.11/24", "fd00:172:30::11/64"), kr("172.30.0.1"), kr("fd00:172:30::1"))
	tests := []struct {
		name         string
		rec          *NodeL3
		found, moved NodeL3
		want         NodeL3
	}{
		{name: "first start: what was moved", found: NodeL3{}, moved: node, want: node},
		{name: "restart: the record, whatever the bridge holds now", rec: &node,
			found: l3(addrsOf("172.30.0.11/24", "172.30.0.99/24")), want: node},
		{name: "no record (an older agent ran): what the bridge holds", found: node, want: node},
		{name: "reboot, the same configuration on the uplink", rec: &node,
			moved: l3(addrsOf("172.30.0.11/24"), kr("172.30.0.1")), want: node},
		{name: "reboot with a new IPv4 address and gateway: they replace the family's", rec: &node,
			moved: l3(addrsOf("172.30.0.21/24"), kr("172.30.0.254")),
			want:  l3(addrsOf("172.30.0.21/24", "fd00:172:30::11/64"), kr("172.30.0.254"), kr("fd00:172:30::1"))},
		{name: "a new address without routes keeps the family's routes", rec: &node,
			moved: l3(addrsOf("172.30.0.21/24")),
			want:  l3(addrsOf("172.30.0.21/24", "fd00:172:30::11/64"), kr("172.30.0.1"), kr("fd00:172:30::1"))},
		{name: "the rest of a move an earlier agent did not finish", found: l3(addrsOf("172.30.0.11/24", "fd00:172:30::11/64")),
			moved: l3(addrsOf("fd00:172:30::11/64"), kr("fd00:172:30::1")),
			want:  l3(addrsOf("172.30.0.11/24", "fd00:172:30::11/64"), kr("fd00:172:30::1"))},
		{name: "a moved route replaces the kept one with its key", rec: &node,
			moved: l3(addrsOf("fd00:172:30::11/64"), kr("fd00:172:30::2")),
			want:  l3(addrsOf("172.30.0.11/24", "fd00:172:30::11/64"), kr("172.30.0.1"), kr("fd00:172:30::2"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NextNodeL3(tc.rec, tc.found, tc.moved)
			if !got.Equal(tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestMissing is the decision of what a check puts back: what was deleted,
// not what was changed.
func TestMissing(t *testing.T) {
	k := l3(addrsOf("172.30.0.11/24", "fd00:172:30::11/64"), kr("172.30.0.1"), kr("fd00:172:30::1"))
	all := L3State{Up: true, Addrs: []netip.Addr{netip.MustParseAddr("172.30.0.11"), netip.MustParseAddr("fd00:172:30::11"), netip.MustParseAddr("fe80::1")},
		Routes: []routeKey{kr("172.30.0.1").key(), kr("fd00:172:30::1").key()}}
	without := func(f func(*L3State)) L3State {
		st := all
		st.Addrs, st.Routes = slices.Clone(all.Addrs), slices.Clone(all.Routes)
		f(&st)
		return st
	}
	tests := []struct {
		name  string
		st    L3State
		addrs []string
		route []string
		down  bool
	}{
		{name: "everything there", st: all},
		{name: "the IPv4 address deleted (and the kernel took its default route)", st: without(func(s *L3State) {
			s.Addrs = s.Addrs[1:]
			s.Routes = s.Routes[1:]
		}), addrs: []string{"172.30.0.11/24"}, route: []string{"default via 172.30.0.1 metric 0"}},
		{name: "the IPv6 default route deleted", st: without(func(s *L3State) { s.Routes = s.Routes[:1] }),
			route: []string{"default via fd00:172:30::1 metric 1024"}},
		{name: "the bridge set down", st: without(func(s *L3State) { s.Up = false }), down: true},
		// The state holds IPs and route keys only: an address with another
		// prefix length, or a default route through another gateway or
		// interface, reads the same, and stays as the operator made it.
		{name: "a default route with another metric does not stand for the kept one", st: without(func(s *L3State) {
			s.Routes[0].metric = 100
		}), route: []string{"default via 172.30.0.1 metric 0"}},
		{name: "a route in another table does not either", st: without(func(s *L3State) {
			s.Routes[0].table = 100
		}), route: []string{"default via 172.30.0.1 metric 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := k.Missing(tc.st)
			var addrs, routes []string
			for _, a := range r.Addrs {
				addrs = append(addrs, a.Prefix.String())
			}
			for _, rt := range r.Routes {
				routes = append(routes, rt.String())
			}
			if !slices.Equal(addrs, tc.addrs) || !slices.Equal(routes, tc.route) || r.Down != tc.down {
				t.Errorf("missing addresses %q routes %q down %v; want %q %q %v", addrs, routes, r.Down, tc.addrs, tc.route, tc.down)
			}
			if r.Empty() != (len(tc.addrs)+len(tc.route) == 0 && !tc.down) {
				t.Errorf("Empty() = %v", r.Empty())
			}
		})
	}
}

func TestNodeL3Record(t *testing.T) {
	dir := t.TempDir()
	path := NodeL3Path(dir)
	if k, err := LoadNodeL3(path); k != nil || err != nil {
		t.Fatalf("no record: %v, %v", k, err)
	}
	want := l3(addrsOf("172.30.0.11/24", "fd00:172:30::11/64"), kr("172.30.0.1"), kr("fd00:172:30::1"))
	want.Addrs[0].Broadcast = netip.MustParseAddr("172.30.0.255")
	want.Uplink, want.Bridge, want.Recorded = "eth0", "breth0", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := SaveNodeL3(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadNodeL3(path)
	if err != nil || got == nil || !got.Equal(want) || got.Uplink != "eth0" || !got.Recorded.Equal(want.Recorded) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	b, _ := os.ReadFile(path)
	for _, s := range []string{`"prefix": "172.30.0.11/24"`, `"broadcast": "172.30.0.255"`, `"gw": "fd00:172:30::1"`, `"metric": 1024`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("record lacks %s:\n%s", s, b)
		}
	}
	if strings.Contains(string(b), `"src"`) {
		t.Errorf("record holds empty fields:\n%s", b)
	}
	for name, content := range map[string]string{
		"not JSON":         "{",
		"an address empty": `{"addresses": [{"prefix": "172.30.0.11/24"}, {}]}`,
		"a route empty":    `{"addresses": [], "routes": [{"gw": "172.30.0.1"}]}`,
	} {
		p := filepath.Join(dir, "bad")
		os.WriteFile(p, []byte(content), 0o644)
		if _, err := LoadNodeL3(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, p)
		}
	}
	if LoadNodeL3Path := NodeL3Path(""); LoadNodeL3Path != "" {
		t.Errorf("NodeL3Path(\"\") = %q", LoadNodeL3Path)
	}
}

// TestNodeL3Repair moves an uplink's configuration to a bridge in a network
// namespace, deletes parts of it, and puts them back; an operator's change
// (another prefix length) is left; an address that cannot come back (IPv6
// disabled on the bridge) fails alone.
func TestNodeL3Repair(t *testing.T) {
	inNetns(t, func() {
		eth0 := addLink(t, "eth0")
		addLink(t, "breth0")
		for _, a := range []string{"172.30.0.11/24", "fd00:172:30::11/64"} {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(eth0, addr); err != nil {
				t.Fatal(err)
			}
		}
		for _, gw := range []string{"172.30.0.1", "fd00:172:30::1"} {
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
				t.Fatal(err)
			}
		}
		log := logrus.New()
		log.SetOutput(os.Stderr)
		moved, err := MoveUplinkConfig(log, "eth0", "breth0")
		if err != nil {
			t.Fatal(err)
		}
		k := NextNodeL3(nil, NodeL3{}, NodeL3Of(moved, conntrack.DefaultPlan()))
		if len(k.Addrs) != 2 || len(k.Routes) != 2 {
			t.Fatalf("kept %+v", k)
		}
		check := func() L3Repair {
			t.Helper()
			st, err := ReadL3State("breth0", k)
			if err != nil {
				t.Fatal(err)
			}
			return k.Missing(st)
		}
		if r := check(); !r.Empty() {
			t.Fatalf("after the move, missing %+v", r)
		}
		br, _ := netlink.LinkByName("breth0")
		del := func(a string) {
			addr, _ := netlink.ParseAddr(a)
			if err := netlink.AddrDel(br, addr); err != nil {
				t.Fatal(err)
			}
		}
		del("172.30.0.11/24")
		if err := netlink.RouteDel(&netlink.Route{LinkIndex: br.Attrs().Index, Dst: nil, Gw: net.ParseIP("fd00:172:30::1"), Priority: 1024}); err != nil {
			t.Fatal(err)
		}
		r := check()
		if len(r.Addrs) != 1 || len(r.Routes) != 2 {
			t.Fatalf("missing %+v; want the IPv4 address, its default route (gone with it) and the IPv6 default route", r)
		}
		if got := RestoreL3(log, "breth0", r); got.AddrErr != nil || got.RouteErr != nil || got.Addrs != 1 || got.Routes != 2 {
			t.Fatalf("restore: %+v", got)
		}
		if r := check(); !r.Empty() {
			t.Fatalf("after the restore, missing %+v", r)
		}
		// The operator makes the IPv6 address a /80: that stays.
		del("fd00:172:30::11/64")
		a80, _ := netlink.ParseAddr("fd00:172:30::11/80")
		a80.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(br, a80); err != nil {
			t.Fatal(err)
		}
		if r := check(); len(r.Addrs) != 0 {
			t.Errorf("a changed prefix length counts as missing: %+v", r.Addrs)
		}
		// IPv6 disabled on the bridge takes its addresses and keeps them
		// away; the IPv4 address still comes back.
		if err := os.WriteFile(filepath.Join(ProcSysNet, "ipv6/conf/breth0/disable_ipv6"), []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		del("172.30.0.11/24")
		r = check()
		got := RestoreL3(log, "breth0", r)
		if got.AddrErr == nil || !strings.Contains(got.AddrErr.Error(), "fd00:172:30::11/64") || got.Addrs != 1 {
			t.Errorf("restore with IPv6 disabled: %+v; want the IPv4 address back and an error naming the IPv6 one", got)
		}
		if r := check(); len(r.Addrs) != 1 || r.Addrs[0].Prefix.Addr().Is4() {
			t.Errorf("still missing %+v; want the IPv6 address alone", r.Addrs)
		}
	})
}
