package service

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"nodeflow/conntrack"
	"nodeflow/openflow"
	"nodeflow/proxy"
)

// StaleConntrack returns the conntrack flushes that move UDP clients off
// endpoints that a service port no longer uses: for each endpoint in old
// and not in current (by address and port), the entries of the service
// zone whose reply comes from that endpoint (the address the group DNATs
// to, so 169.254.169.2 for this node's IP). Without them a UDP client
// keeps sending to the dead endpoint until its entry times out. Other
// protocols return nothing: TCP and SCTP connections end on their own.
func StaleConntrack(node *Node, proto v1.Protocol, old, current []proxy.Endpoint) []*openflow.CtFlush {
	if proto != v1.ProtocolUDP {
		return nil
	}
	live := map[netip.AddrPort]bool{}
	for _, e := range current {
		live[netip.AddrPortFrom(e.IP, e.Port)] = true
	}
	seen := map[netip.AddrPort]bool{}
	var out []*openflow.CtFlush
	for _, e := range old {
		ap := netip.AddrPortFrom(e.IP, e.Port)
		if live[ap] || seen[ap] {
			continue
		}
		seen[ap] = true
		b := builder{node: node, fam: proxy.FamilyOf(e.IP)}
		addr := b.classify(e).addr
		zone := uint16(conntrack.ZoneService)
		out = append(out, &openflow.CtFlush{
			Zone: &zone, IPProto: 17,
			Reply: openflow.CtTuple{Src: addr, SrcPort: e.Port},
		})
	}
	return out
}
