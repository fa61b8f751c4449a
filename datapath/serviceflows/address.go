package serviceflows

import (
	"fmt"
	"net/netip"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
)

// No service address leaks. A packet addressed to a service CIDR that no
// service port's flow took in table 30 would otherwise fall through to
// the routing table, be SNATed to the node IP and leave by the uplink. Two
// kinds of flows stop it, below every per-port flow:
//
//   - per ClusterIP (AddressFlows, one owner per address): a new
//     connection to the address on a port no Service serves gets the
//     metered reject packet-in, answered with a TCP RST or an ICMP
//     unreachable (kube-proxy's cluster-ips-check);
//   - per node (CIDRFlows): everything else addressed to a service CIDR is
//     dropped and counted: an address no Service holds, and packets to a
//     ClusterIP that are not new (invalid, or never translated).
//
// Host traffic to a service CIDR takes the same path: breth0 sends it to
// br0 (masqueraded), where these flows judge it.

// AddressOwner returns the reconciler owner of a ClusterIP's reject flow.
// Service port owners are "service/<namespace>/...": a namespace never
// starts with "_".
func AddressOwner(a netip.Addr) string { return "service/_address/" + a.String() }

// CIDROwner is the reconciler owner of the service CIDRs' drop flows.
const CIDROwner = "service/_cidrs"

// AddressFlows returns br0's reject flow of ClusterIP a: new connections
// to a on a port that no service port of a serves.
func AddressFlows(a netip.Addr) (reconcile.State, error) {
	if !a.IsValid() || a.Is4In6() {
		return reconcile.State{}, fmt.Errorf("service: address %q: not a plain IPv4 or IPv6 address", a)
	}
	eth, dst := uint16(0x0800), openflow.IPv4Dst(a)
	if a.Is6() {
		eth, dst = 0x86dd, openflow.IPv6Dst(a)
	}
	return reconcile.State{Flows: []openflow.Flow{{
		Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityServiceAddress),
		Match: openflow.NewMatch(openflow.CtState(openflow.CtNew|openflow.CtTrk, openflow.CtNew|openflow.CtTrk),
			openflow.EthType(eth), dst),
		Instructions: apply(RejectActions(0)...),
	}}}, nil
}

// CIDRFlows returns br0's drop flows of the service CIDRs.
func CIDRFlows(cidrs []netip.Prefix) (reconcile.State, error) {
	var st reconcile.State
	for _, p := range cidrs {
		if !p.IsValid() || p.Masked() != p || p.Addr().Is4In6() {
			return reconcile.State{}, fmt.Errorf("service: service CIDR %q: not a masked IPv4 or IPv6 prefix", p)
		}
		eth, dst := uint16(0x0800), openflow.IPv4DstPrefix(p)
		if p.Addr().Is6() {
			eth, dst = 0x86dd, openflow.IPv6DstPrefix(p)
		}
		st.Flows = append(st.Flows, openflow.Flow{
			Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityServiceCIDR),
			Match: openflow.NewMatch(openflow.EthType(eth), dst),
			// No instructions: drop, counted by the flow.
		})
	}
	return st, nil
}
