package serviceflows

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"nodeflow/datapath/conntrack"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// StaleConntrack returns the conntrack flushes that move UDP clients off
// endpoints that a service port no longer uses: for each endpoint in old
// and not in current (by address and port), the entries of the service
// zone whose reply comes from that endpoint (the address the group DNATs
// to, so 169.254.169.2 for this node's IP). Without them a UDP client
// keeps sending to the dead endpoint until its entry times out.
//
// SCTP is flushed too, by address alone: Open vSwitch's userspace
// conntrack tracks it as a generic protocol, one entry per client and VIP
// whatever the ports, so every new association of a client would follow
// the entry to the dead endpoint. An endpoint address that the port still
// uses (with another port) is left alone. TCP returns nothing: its
// connections end on their own.
func StaleConntrack(node *Node, proto v1.Protocol, old, current []service.Endpoint) []*openflow.CtFlush {
	var ipProto uint8
	switch proto {
	case v1.ProtocolUDP:
		ipProto = 17
	case v1.ProtocolSCTP:
		ipProto = protoSCTP
	default:
		return nil
	}
	live := map[netip.AddrPort]bool{}
	liveAddr := map[netip.Addr]bool{}
	for _, e := range current {
		live[netip.AddrPortFrom(e.IP, e.Port)] = true
		liveAddr[e.IP] = true
	}
	seen := map[netip.AddrPort]bool{}
	var out []*openflow.CtFlush
	for _, e := range old {
		ap := netip.AddrPortFrom(e.IP, e.Port)
		if ipProto == protoSCTP {
			// Entries carry no ports: flush by address, once.
			ap = netip.AddrPortFrom(e.IP, 0)
			if liveAddr[e.IP] {
				continue
			}
		}
		if live[ap] || seen[ap] {
			continue
		}
		seen[ap] = true
		b := builder{node: node, fam: service.FamilyOf(e.IP)}
		addr := b.classify(e).addr
		zone := uint16(conntrack.ZoneService)
		out = append(out, &openflow.CtFlush{
			Zone: &zone, IPProto: ipProto,
			Reply: openflow.CtTuple{Src: addr, SrcPort: ap.Port()},
		})
	}
	return out
}
