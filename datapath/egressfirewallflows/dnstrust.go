package egressfirewallflows

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// Whom the DNS learner trusts. An answer teaches the firewall of every
// namespace whose rules name what it answers, so an answer is learned only
// from the DNS servers the cluster's operator chose, and the reply must
// prove where it came from with what br0 knows of it when it reaches table
// 50, not with its source address alone (an address a tenant can make a
// reply carry is worth nothing):
//
//   - through a cluster DNS Service: its source is one of the Service's
//     ClusterIPs (table 25 has undone the DNAT, so it is a reply in the
//     service zone: ct_state +rpl+trk), and it was sent by a pod of the
//     Service's namespace (plan.NamespaceID: port security loads it for a
//     local pod, the VXLAN key carries it from another node). A tenant's
//     Service that claims the same address (an externalIP) is answered by
//     the tenant's pods, whose namespace id is the tenant's;
//   - straight from one of that Service's endpoints (a pod asked by its
//     address): its source is the endpoint's address and it was sent by a
//     pod of the same namespace. A tenant pod that inherits a dead
//     endpoint's address carries the tenant's namespace id;
//   - from a resolver outside the pod network (the node's own resolvers,
//     a node-local DNS cache, ones the operator names): its source is the
//     resolver's address, it entered br0 from the gateway or the host
//     (plan.FromGateway, plan.FromHost: never from a pod or the tunnel,
//     whose sources port security checks against pod addresses only), and
//     it is not the reply of a service connection (ct_state -snat: table
//     25 undid no DNAT), so a tenant's Service with an endpoint outside
//     the cluster that claims the resolver's address is not it.

// DNSSources are the sources whose DNS replies to pods the agent learns
// from. The flows (DNSFlows) and the agent's check of each reply it is
// sent (Trusts) read the same value, so they make the same decision.
type DNSSources struct {
	// Services are the cluster DNS Services.
	Services []DNSService
	// Resolvers are DNS servers outside the pod network, trusted from
	// the gateway and the host.
	Resolvers []netip.Prefix
}

// DNSService is one cluster DNS Service and what a reply from it carries.
type DNSService struct {
	// Name is "namespace/name", for messages.
	Name string
	// NamespaceID is the id of the Service's namespace (plan.NamespaceID).
	NamespaceID uint32
	// ClusterIPs are the Service's own ClusterIPs.
	ClusterIPs []netip.Addr
	// Endpoints are the addresses of the endpoints of the Service's
	// EndpointSlices that the EndpointSlice controller made for it.
	Endpoints []netip.Addr
}

// DNSReply is what br0 knows of a DNS reply in table 50, as its packet-in
// carries it (DNSReplyOf).
type DNSReply struct {
	// Src is the reply's source address, after table 25's un-DNAT.
	Src netip.Addr
	// NamespaceID is the value of plan.NamespaceID, PktSource that of
	// plan.PktSource.
	NamespaceID, PktSource uint32
	// CtState is the service zone's conntrack state.
	CtState uint32
}

// DNSReplyOf returns the attribution of a DNS reply whose frame has the
// source address src, from the metadata of its packet-in.
func DNSReplyOf(pin *openflow.PacketIn, src netip.Addr) DNSReply {
	field := func(f plan.Field) uint32 { return uint32(uint64(pin.Reg(f.Index())>>f.Start()) & f.Max()) }
	return DNSReply{Src: src.Unmap(), NamespaceID: field(plan.NamespaceID), PktSource: field(plan.PktSource), CtState: pin.CtState()}
}

// Trusts reports whether r is from one of the sources, by the same
// matches as DNSFlows' flows.
func (s DNSSources) Trusts(r DNSReply) bool {
	ms, err := s.matches()
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.admits(r) {
			return true
		}
	}
	return false
}

// Validate checks what the flows match: namespace ids in range, plain
// addresses, valid prefixes.
func (s DNSSources) Validate() error {
	_, err := s.matches()
	return err
}

// Equal reports whether s and o hold the same sources in the same order.
func (s DNSSources) Equal(o DNSSources) bool {
	return slices.EqualFunc(s.Services, o.Services, func(a, b DNSService) bool {
		return a.Name == b.Name && a.NamespaceID == b.NamespaceID && slices.Equal(a.ClusterIPs, b.ClusterIPs) && slices.Equal(a.Endpoints, b.Endpoints)
	}) && slices.Equal(s.Resolvers, o.Resolvers)
}

// Addresses returns the number of ClusterIPs, endpoint addresses and
// resolver prefixes.
func (s DNSSources) Addresses() (clusterIPs, endpoints, resolvers int) {
	for _, svc := range s.Services {
		clusterIPs += len(svc.ClusterIPs)
		endpoints += len(svc.Endpoints)
	}
	return clusterIPs, endpoints, len(s.Resolvers)
}

// sourceMatch is one trusted source as table 50 matches it: a DNS reply
// from prefix, with namespace id nsID (0: any), having entered br0 by one
// of from (none: any), whose ct_state has ctSet under ctMask.
type sourceMatch struct {
	prefix        netip.Prefix
	nsID          uint32
	from          []plan.Mark
	ctSet, ctMask uint32
}

// matches returns the sources' matches, sorted and without repeats.
func (s DNSSources) matches() ([]sourceMatch, error) {
	var out []sourceMatch
	for _, svc := range s.Services {
		if svc.NamespaceID == 0 || uint64(svc.NamespaceID) > plan.NamespaceID.Max() {
			return nil, fmt.Errorf("egressfw: dns: cluster DNS Service %s: namespace id %#x: want 1-%#x", svc.Name, svc.NamespaceID, plan.NamespaceID.Max())
		}
		for _, a := range svc.ClusterIPs {
			if !plainAddr(a) {
				return nil, fmt.Errorf("egressfw: dns: cluster DNS Service %s: ClusterIP %q: not a plain IPv4 or IPv6 address", svc.Name, a)
			}
			out = append(out, sourceMatch{prefix: netip.PrefixFrom(a, a.BitLen()), nsID: svc.NamespaceID,
				ctSet: openflow.CtRpl | openflow.CtTrk, ctMask: openflow.CtRpl | openflow.CtTrk})
		}
		for _, a := range svc.Endpoints {
			if !plainAddr(a) {
				return nil, fmt.Errorf("egressfw: dns: cluster DNS Service %s: endpoint %q: not a plain IPv4 or IPv6 address", svc.Name, a)
			}
			out = append(out, sourceMatch{prefix: netip.PrefixFrom(a, a.BitLen()), nsID: svc.NamespaceID})
		}
	}
	for _, p := range s.Resolvers {
		if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" || p != p.Masked() {
			return nil, fmt.Errorf("egressfw: dns: resolver %q: not a masked IPv4 or IPv6 prefix", p)
		}
		out = append(out, sourceMatch{prefix: p, from: []plan.Mark{plan.FromGateway, plan.FromHost},
			ctSet: openflow.CtTrk, ctMask: openflow.CtTrk | openflow.CtSNAT})
	}
	slices.SortFunc(out, func(a, b sourceMatch) int {
		return cmp.Or(a.prefix.Addr().Compare(b.prefix.Addr()), cmp.Compare(a.prefix.Bits(), b.prefix.Bits()),
			cmp.Compare(a.nsID, b.nsID), cmp.Compare(len(a.from), len(b.from)), cmp.Compare(a.ctMask, b.ctMask), cmp.Compare(a.ctSet, b.ctSet))
	})
	return slices.CompactFunc(out, func(a, b sourceMatch) bool {
		return a.prefix == b.prefix && a.nsID == b.nsID && len(a.from) == len(b.from) && a.ctSet == b.ctSet && a.ctMask == b.ctMask
	}), nil
}

// admits reports whether r matches m.
func (m sourceMatch) admits(r DNSReply) bool {
	if !m.prefix.Contains(r.Src.Unmap()) || (m.nsID != 0 && r.NamespaceID != m.nsID) || r.CtState&m.ctMask != m.ctSet {
		return false
	}
	if len(m.from) == 0 {
		return true
	}
	return slices.ContainsFunc(m.from, func(k plan.Mark) bool { return uint64(r.PktSource) == k.Value() })
}

// matchFields returns m's flow matches: one per mark in from (one when
// from is empty).
func (m sourceMatch) matchFields() []openflow.Match {
	f := famOf(m.prefix.Addr())
	base := []openflow.Field{f.eth, openflow.IPProto(17), f.srcNet(m.prefix), openflow.UDPSrc(DNSPort)}
	if m.nsID != 0 {
		ns, _ := plan.NamespaceID.MatchValue(uint64(m.nsID)) // checked by matches
		base = append(base, ns)
	}
	if m.ctMask != 0 {
		base = append(base, openflow.CtState(m.ctSet, m.ctMask))
	}
	if len(m.from) == 0 {
		return []openflow.Match{openflow.NewMatch(base...)}
	}
	out := make([]openflow.Match, len(m.from))
	for i, k := range m.from {
		out[i] = openflow.NewMatch(append(slices.Clone(base), k.Match())...)
	}
	return out
}
