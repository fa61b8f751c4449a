package netstack

import (
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"nodeflow/datapath/plan"
)

// usableNeigh reports whether a neighbour entry has a MAC worth using.
func usableNeigh(n netlink.Neigh) bool {
	if len(n.HardwareAddr) != 6 {
		return false
	}
	return n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0
}

// NextHops reads the next hops of traffic br0 sends out of the uplink from
// the host's neighbour table and routes on the gateway bridge: the default
// gateway of each family (as /0) and every resolved neighbour (as a host
// prefix), skipping addresses inside skip (the masquerade subnets, whose
// MACs br0 knows). It returns the addresses it wants but found unresolved,
// for the caller to probe.
func NextHops(gateway string, want []netip.Addr, skip []netip.Prefix) ([]plan.NextHop, []netip.Addr, error) {
	link, err := netlink.LinkByName(gateway)
	if err != nil {
		return nil, nil, err
	}
	macs := map[netip.Addr]net.HardwareAddr{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := netlink.NeighList(link.Attrs().Index, fam)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range ns {
			ip := toAddr(n.IP)
			if !usableNeigh(n) || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
				continue
			}
			inSkip := false
			for _, s := range skip {
				inSkip = inSkip || s.Contains(ip)
			}
			if !inSkip {
				macs[ip] = n.HardwareAddr
			}
		}
	}
	var hops []plan.NextHop
	var missing []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteList(link, fam)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rs {
			if r.Dst != nil && !isDefault(r.Dst) || r.Gw == nil {
				continue
			}
			gw := toAddr(r.Gw)
			prefix := netip.PrefixFrom(unspecified(gw), 0)
			if mac, ok := macs[gw]; ok {
				hops = append(hops, plan.NextHop{Prefix: prefix, MAC: mac})
			} else {
				missing = append(missing, gw)
			}
		}
	}
	for ip, mac := range macs {
		hops = append(hops, plan.NextHop{Prefix: hostPrefix(ip), MAC: mac})
	}
	for _, ip := range want {
		if _, ok := macs[ip]; !ok {
			missing = append(missing, ip)
		}
	}
	slices.SortFunc(hops, func(a, b plan.NextHop) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
	hops = slices.CompactFunc(hops, func(a, b plan.NextHop) bool { return a.Prefix == b.Prefix })
	return hops, missing, nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

func unspecified(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// Probe makes the kernel resolve ip's MAC, by sending one UDP datagram to
// the discard port: the neighbour entry appears once the target answers.
func Probe(ip netip.Addr) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 9)))
	if err != nil {
		return
	}
	_, _ = c.Write([]byte{0})
	_ = c.Close()
}
