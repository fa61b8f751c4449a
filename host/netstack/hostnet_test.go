package netstack

import (
	"net"
	"net/netip"
	"nodeflow/testbed/nsutil"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"nodeflow/datapath/conntrack"
)

func TestWriteCNIConfig(t *testing.T) {
	dir := t.TempDir()
	c := CNIConfig{ConfDir: filepath.Join(dir, "net.d"), DataDir: filepath.Join(dir, "ipam"), OVSDB: "unix:/x/db.sock",
		DatapathType: "netdev", MTU: 1400,
		Subnets:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")},
		Reserved: []netip.Addr{netip.MustParseAddr("10.244.0.2")}}
	changed, err := WriteCNIConfig(c)
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ipam", CNINetworkName, "10.244.0.2")); err != nil {
		t.Errorf("mp0 address not reserved: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "net.d", "10-nodeflow.conf"))
	if err != nil || !strings.Contains(string(b), `"10.244.0.0/24"`) || !strings.Contains(string(b), `"type": "nodeflow"`) {
		t.Errorf("conf = %s, %v", b, err)
	}
	if changed, err := WriteCNIConfig(c); err != nil || changed {
		t.Errorf("second write: changed %v, %v; want no change", changed, err)
	}
	// An address a pod already holds is not taken over.
	os.WriteFile(filepath.Join(dir, "ipam", CNINetworkName, "10.244.0.3"), []byte("abc\neth0\n"), 0o644)
	c.Reserved = []netip.Addr{netip.MustParseAddr("10.244.0.3")}
	if _, err := WriteCNIConfig(c); err == nil || !strings.Contains(err.Error(), "10.244.0.3") {
		t.Errorf("err = %v, want a conflict on 10.244.0.3", err)
	}
}

// inNetns runs fn in a fresh network namespace.
func inNetns(t *testing.T, fn func()) {
	t.Helper()
	nsutil.InNew(t, fn)
}

func addLink(t *testing.T, name string) netlink.Link {
	t.Helper()
	// A veth pair (this kernel may lack the dummy type); the peer is up
	// too, so that the link has carrier.
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		t.Fatal(err)
	}
	if peer, err := netlink.LinkByName(name + "p"); err == nil {
		_ = netlink.LinkSetUp(peer)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestHostSideIdempotent moves an uplink's addresses and default routes to
// the gateway bridge and configures the host side, twice: the second run
// changes nothing, and everything the design lists is there.
func TestHostSideIdempotent(t *testing.T) {
	inNetns(t, func() {
		eth0 := addLink(t, "eth0")
		addLink(t, "breth0")
		addLink(t, "mp0")
		for _, a := range []string{"172.30.0.11/24", "fd00:172:30::11/64"} {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = 0x80 // IFA_F_NODAD keeps the IPv6 address usable at once
			if err := netlink.AddrAdd(eth0, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipNet(netip.MustParsePrefix("0.0.0.0/0")), Gw: net.ParseIP("172.30.0.1").To4()}); err != nil {
			t.Fatal(err)
		}
		log := logrus.New()
		log.SetOutput(os.Stderr)
		for i := 0; i < 2; i++ {
			moved, err := MoveUplinkConfig(log, "eth0", "breth0")
			if err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
			// What the first run moved, the second finds gone.
			if want := map[int]int{0: 2, 1: 0}[i]; len(moved.Addrs) != want || (i == 0 && len(moved.Routes) != 1) {
				t.Errorf("run %d moved %d addresses and %d routes, want %d and 1", i, len(moved.Addrs), len(moved.Routes), want)
			}
		}
		ips, err := NodeIPs("eth0", "breth0", conntrack.DefaultPlan())
		if err != nil || len(ips) != 2 || ips[0].String() != "172.30.0.11/24" {
			t.Fatalf("NodeIPs = %v, %v", ips, err)
		}
		if left, _ := globalAddrs(eth0); len(left) != 0 {
			t.Errorf("eth0 still has %v", left)
		}
		br, _ := netlink.LinkByName("breth0")
		routes, _ := netlink.RouteList(br, netlink.FAMILY_V4)
		hasDefault := false
		for _, r := range routes {
			hasDefault = hasDefault || (r.Dst == nil || isDefault(r.Dst)) && r.Gw.Equal(net.ParseIP("172.30.0.1"))
		}
		if !hasDefault {
			t.Errorf("breth0 has no default route via 172.30.0.1: %v", routes)
		}

		p := HostPlan{Gateway: "breth0", Mgmt: "mp0",
			NodeIPs:      []netip.Addr{ips[0].Addr(), ips[1].Addr()},
			ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")},
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
			PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:10:244::/64")},
			Masquerade:   conntrack.DefaultPlan(),
			MgmtMAC:      conntrack.MAC(netip.MustParseAddr("10.244.0.2")),
			RouterMAC:    conntrack.MAC(netip.MustParseAddr("10.244.0.1")),
			MTU:          1400,
		}
		rep := EnsureHost(p)
		if rep.Err() != nil || rep.Changes() == 0 {
			t.Fatalf("first EnsureHost: %d changes, %v", rep.Changes(), rep.Err())
		}
		if rep := EnsureHost(p); rep.Err() != nil || rep.Changes() != 0 {
			t.Fatalf("second EnsureHost: %d changes, %v; want none", rep.Changes(), rep.Err())
		}
		// What the host-to-services design asks for.
		gw, _ := netlink.LinkByName("breth0")
		addrs, _ := netlink.AddrList(gw, netlink.FAMILY_ALL)
		var have []string
		for _, a := range addrs {
			have = append(have, a.IPNet.String())
			if a.IP.Equal(net.ParseIP("fd69::2")) && (a.PreferedLft != 0 || a.Flags&0x80 == 0) {
				t.Errorf("fd69::2 is not deprecated and nodad: flags %#x preferred %d", a.Flags, a.PreferedLft)
			}
		}
		for _, want := range []string{"169.254.169.2/29", "fd69::2/125"} {
			if !strings.Contains(strings.Join(have, " "), want) {
				t.Errorf("breth0 lacks %s (has %v)", want, have)
			}
		}
		svc, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: ipNet(netip.MustParsePrefix("10.96.0.0/16"))}, netlink.RT_FILTER_DST)
		if len(svc) != 1 || !svc[0].Gw.Equal(net.ParseIP("169.254.169.4")) || svc[0].MTU != 1400 {
			t.Errorf("service route = %v, want via 169.254.169.4 mtu 1400", svc)
		}
		masq, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: ipNet(netip.MustParsePrefix("169.254.169.1/32"))}, netlink.RT_FILTER_DST)
		if len(masq) != 1 || !masq[0].Src.Equal(net.ParseIP("172.30.0.11")) {
			t.Errorf("route to 169.254.169.1 = %v, want src 172.30.0.11", masq)
		}
		neighs, _ := netlink.NeighList(gw.Attrs().Index, netlink.FAMILY_V4)
		perm := 0
		for _, nb := range neighs {
			if nb.State&netlink.NUD_PERMANENT != 0 && (nb.IP.Equal(net.ParseIP("169.254.169.1")) || nb.IP.Equal(net.ParseIP("169.254.169.4"))) {
				perm++
			}
		}
		if perm != 2 {
			t.Errorf("permanent neighbours for .1 and .4: %d of 2 (%v)", perm, neighs)
		}
		// mp0 answers the pods' neighbour solicitations for the router
		// at once.
		for path, want := range map[string]string{"ipv6/conf/mp0/proxy_ndp": "1", "ipv6/neigh/mp0/proxy_delay": "0"} {
			if b, err := os.ReadFile(filepath.Join(ProcSysNet, path)); err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s = %q, %v; want %s", path, b, err, want)
			}
		}
		cl, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: ipNet(netip.MustParsePrefix("10.244.0.0/16"))}, netlink.RT_FILTER_DST)
		mp, _ := netlink.LinkByName("mp0")
		if len(cl) != 1 || cl[0].LinkIndex != mp.Attrs().Index {
			t.Errorf("cluster route = %v, want via mp0", cl)
		}
		// Next hops: the default gateway (as /0) and resolved neighbours (as
		// host prefixes) with their MACs; unresolved wanted ones to probe;
		// the masquerade neighbours are left out.
		gwMAC, _ := net.ParseMAC("02:00:00:00:00:01")
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: gw.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
			IP: net.ParseIP("172.30.0.1"), HardwareAddr: gwMAC}); err != nil {
			t.Fatal(err)
		}
		hops, missing, err := NextHops("breth0", []netip.Addr{netip.MustParseAddr("172.30.0.12")}, []netip.Prefix{conntrack.DefaultMasqueradeV4, conntrack.DefaultMasqueradeV6})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hops {
			got = append(got, h.Prefix.String()+"="+h.MAC.String())
		}
		if strings.Join(got, " ") != "0.0.0.0/0=02:00:00:00:00:01 172.30.0.1/32=02:00:00:00:00:01" {
			t.Errorf("next hops = %v", got)
		}
		if len(missing) != 1 || missing[0] != netip.MustParseAddr("172.30.0.12") {
			t.Errorf("missing = %v, want 172.30.0.12", missing)
		}

		// Something removes a route: the next check restores it.
		if err := netlink.RouteDel(&svc[0]); err != nil {
			t.Fatal(err)
		}
		rep = EnsureHost(p)
		if rep.Err() != nil || rep.Changes() != 1 || rep[2].What != RepairMasqueradeRoute || rep[2].Changes != 1 {
			t.Errorf("after deleting the service route: %+v; want one masquerade-route change", rep)
		}
	})
}
