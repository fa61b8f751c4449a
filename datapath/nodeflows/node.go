// Package nodeflows builds br0's node-wide, per-remote-node and per-pod flows:
// the classifier, ARP and IPv6 neighbour discovery, port security, routing,
// VXLAN to and from the other nodes, local delivery (pods and mp0), pod
// egress SNAT and the gateway output toward breth0.
//
// The builders are pure: a model in, []openflow.Flow out, no I/O and no
// cookies (the reconciler stamps each owner's).
package nodeflows

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// Owners of the flows this package builds.
const (
	// OwnerLocal owns the node-wide flows (NodeFlows).
	OwnerLocal = "node/local"
	// OwnerNextHops owns the gateway output flows (GatewayOutputFlows).
	OwnerNextHops = "node/nexthops"
	// OwnerND owns the IPv6 neighbour discovery flood (NDFlows).
	OwnerND = "node/nd"
)

// RemoteOwner is the owner of one remote node's flows.
func RemoteOwner(name string) string { return "node/remote/" + name }

// PodOwner is the owner of one local pod's flows.
func PodOwner(namespace, name string) string { return "pod/" + namespace + "/" + name }

// Priorities used on br0 beyond the plan's bands.
const (
	// PriorityARP sends ARP and neighbour discovery to the ARP table, above
	// the in_port dispatch.
	PriorityARP plan.Priority = 110
	// PriorityHost routes to the host's addresses (mp0, node IPs), above
	// the pod subnets.
	PriorityHost plan.Priority = 110
	// PriorityReply sends replies of connections that came from the
	// gateway back out to it, between the subnets and the default route.
	PriorityReply plan.Priority = 60
	// PrioritySNATDone sends original-direction packets that table 40 has
	// already SNATed (a service connection to a host-network endpoint
	// outside the pod subnets) out through the gateway, below the subnets
	// and the host, above the default route: no second SNAT, whatever the
	// source (a pod, the host, the uplink).
	PrioritySNATDone plan.Priority = 55
	// PrioritySNATEstablished re-applies the SNAT of established
	// original-direction packets of a connection that table 40 SNATed,
	// below the commit of new ones (plan.PriorityHigh).
	PrioritySNATEstablished plan.Priority = 150
	// PriorityGatewayToLocalPod lets a service connection from breth0 to a
	// pod on this node through table 40 without SNAT, above the two below.
	PriorityGatewayToLocalPod plan.Priority = 140
	// PriorityGatewayToPodNew commits the SNAT to the router address of a
	// new service connection from breth0 to a pod elsewhere in the cluster.
	PriorityGatewayToPodNew plan.Priority = 130
	// PriorityGatewayToPodEstablished re-applies that SNAT to the
	// connection's established original-direction packets.
	PriorityGatewayToPodEstablished plan.Priority = 120
	// PriorityHostToRemotePod commits the SNAT to the node IP of a new
	// service connection from the host (its masquerade address) to a pod
	// on a node that returns such connections' replies through the tunnel
	// (Remote.ReturnsByTunnel), between the local pod subnet and the
	// router-address SNAT.
	PriorityHostToRemotePod plan.Priority = 135
	// PriorityTunnelPodSource lets new connections from the tunnel whose
	// source is in the cluster's pod networks through routing untracked,
	// above PriorityTunnelPeer.
	PriorityTunnelPodSource plan.Priority = 106
	// PriorityTunnelPeer commits new connections from the tunnel to a
	// local pod from any other source (another node's host) with
	// plan.ReturnByTunnel, between the local subnet and the host's
	// addresses.
	PriorityTunnelPeer plan.Priority = 105
	// PriorityTunnelReturn routes the replies of those connections to the
	// tunnel table, above PriorityReply.
	PriorityTunnelReturn plan.Priority = 65
	// PriorityUnderlayGuard drops, in table 60, what br0 would route to a
	// node's address on the VXLAN port: above every other routing flow.
	PriorityUnderlayGuard plan.Priority = 250
	// PriorityNextHopBase is the priority of a /0 next hop; a /N adds N, so
	// that the longest prefix wins.
	PriorityNextHopBase plan.Priority = 100
	// PriorityNextHopMasquerade routes to the masquerade subnet, above any
	// next hop.
	PriorityNextHopMasquerade plan.Priority = 300
)

// Config is the node-wide model of br0.
type Config struct {
	// TunnelPort, PatchPort and MgmtPort are the ofports of vxlan0, the
	// patch port to breth0 and mp0.
	TunnelPort, PatchPort, MgmtPort uint32
	// RouterMAC is the virtual router's MAC: the source of every routed
	// packet and the answer to ARP for the router address.
	RouterMAC net.HardwareAddr
	// MgmtMAC is mp0's MAC.
	MgmtMAC net.HardwareAddr
	// HostMAC is breth0's MAC: the source of packets br0 sends out of the
	// uplink.
	HostMAC net.HardwareAddr
	// PodCIDRs are this node's pod subnets, at most one per family.
	PodCIDRs []netip.Prefix
	// ClusterCIDRs and ServiceCIDRs are the cluster's pod and service
	// networks.
	ClusterCIDRs, ServiceCIDRs []netip.Prefix
	// NodeIPs are the node's addresses (on breth0), at most one per family.
	NodeIPs []netip.Addr
	// Masquerade is the masquerade address plan.
	Masquerade conntrack.Plan
}

// Validate reports the first problem of c, naming the field.
func (c Config) Validate() error {
	if c.TunnelPort == 0 || c.PatchPort == 0 || c.MgmtPort == 0 {
		return fmt.Errorf("node: config: tunnel port %d, patch port %d and mgmt port %d must all be set", c.TunnelPort, c.PatchPort, c.MgmtPort)
	}
	for name, m := range map[string]net.HardwareAddr{"router MAC": c.RouterMAC, "mgmt MAC": c.MgmtMAC, "host MAC": c.HostMAC} {
		if len(m) != 6 {
			return fmt.Errorf("node: config: %s %q: want 6 bytes", name, m)
		}
	}
	if len(c.PodCIDRs) == 0 {
		return fmt.Errorf("node: config: no pod CIDR")
	}
	if err := onePerFamily("pod CIDR", c.PodCIDRs); err != nil {
		return err
	}
	for _, p := range c.PodCIDRs {
		if p.Addr().BitLen()-p.Bits() < 2 {
			return fmt.Errorf("node: config: pod CIDR %s: too small for a router and mp0", p)
		}
	}
	seen := map[bool]bool{}
	for _, ip := range c.NodeIPs {
		if !ip.IsValid() || ip.Is4In6() {
			return fmt.Errorf("node: config: node IP %q: not a plain IPv4 or IPv6 address", ip)
		}
		if seen[ip.Is6()] {
			return fmt.Errorf("node: config: node IP %s: two node IPs of one family", ip)
		}
		seen[ip.Is6()] = true
	}
	for _, list := range [][]netip.Prefix{c.ClusterCIDRs, c.ServiceCIDRs} {
		for _, p := range list {
			if !p.IsValid() || p.Masked() != p {
				return fmt.Errorf("node: config: cluster or service CIDR %q: not a valid masked prefix", p)
			}
		}
	}
	return nil
}

func onePerFamily(what string, ps []netip.Prefix) error {
	seen := map[bool]bool{}
	for _, p := range ps {
		if !p.IsValid() || p.Masked() != p || p.Addr().Is4In6() {
			return fmt.Errorf("node: config: %s %q: not a valid masked prefix", what, p)
		}
		if seen[p.Addr().Is6()] {
			return fmt.Errorf("node: config: %s %s: two of one family", what, p)
		}
		seen[p.Addr().Is6()] = true
	}
	return nil
}

// family holds the match constructors of one IP version.
type family struct {
	v6      bool
	ethType uint16
	src     func(netip.Addr) openflow.Field
	dst     func(netip.Addr) openflow.Field
	srcNet  func(netip.Prefix) openflow.Field
	dstNet  func(netip.Prefix) openflow.Field
}

var (
	fam4 = family{false, 0x0800, openflow.IPv4Src, openflow.IPv4Dst, openflow.IPv4SrcPrefix, openflow.IPv4DstPrefix}
	fam6 = family{true, 0x86dd, openflow.IPv6Src, openflow.IPv6Dst, openflow.IPv6SrcPrefix, openflow.IPv6DstPrefix}
)

func famOf(a netip.Addr) family {
	if a.Is4() {
		return fam4
	}
	return fam6
}

func famOfPrefix(p netip.Prefix) family { return famOf(p.Addr()) }

func (f family) eth() openflow.Field { return openflow.EthType(f.ethType) }

func apply(acts ...openflow.Action) []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: acts}}
}

func then(acts []openflow.Action, table plan.TableID) []openflow.Instruction {
	ins := []openflow.Instruction{}
	if len(acts) > 0 {
		ins = append(ins, openflow.ApplyActions{Actions: acts})
	}
	return append(ins, openflow.GotoTable{Table: uint8(table)})
}

// underlayGuard is table 60's drop of UDP to a node's address on the VXLAN
// port (VXLANPort), counted by the flow. The underlay between the nodes
// never crosses br0: a packet that does is a pod's (or a packet a Service
// sent to a node's 4789), and taken in by that node's breth0 as tunnel
// traffic from this node it would enter its br0 with any inner source and
// namespace id the pod wrote: port security and NetworkPolicy of another
// node forged.
func underlayGuard(ip netip.Addr) openflow.Flow {
	f := famOf(ip)
	return flow(plan.PodRouting, PriorityUnderlayGuard, nil, f.eth(), openflow.IPProto(17), f.dst(ip), openflow.UDPDst(plan.VXLANPort))
}

func flow(table plan.TableID, prio plan.Priority, ins []openflow.Instruction, fields ...openflow.Field) openflow.Flow {
	return openflow.Flow{Table: uint8(table), Priority: uint16(prio), Match: openflow.NewMatch(fields...), Instructions: ins}
}

func out(port uint32) openflow.Action { return openflow.OutputPort(port) }

func setEthSrc(m net.HardwareAddr) openflow.Action {
	return openflow.SetField{Field: openflow.EthSrc(m)}
}
func setEthDst(m net.HardwareAddr) openflow.Action {
	return openflow.SetField{Field: openflow.EthDst(m)}
}

func ctAct(commit bool, zone conntrack.Zone, table plan.TableID, acts ...openflow.Action) openflow.CT {
	return openflow.CT{Commit: commit, Zone: uint16(zone), RecircTable: uint8(table), Actions: acts}
}

var (
	refEthSrc  = openflow.MustParseFieldRef("NXM_OF_ETH_SRC[]")
	refEthDst  = openflow.MustParseFieldRef("NXM_OF_ETH_DST[]")
	refARPSha  = openflow.MustParseFieldRef("NXM_NX_ARP_SHA[]")
	refIPv6Src = openflow.MustParseFieldRef("NXM_NX_IPV6_SRC[]")
	refIPv6Dst = openflow.MustParseFieldRef("NXM_NX_IPV6_DST[]")
	refARPTha  = openflow.MustParseFieldRef("NXM_NX_ARP_THA[]")
	refARPSpa  = openflow.MustParseFieldRef("NXM_OF_ARP_SPA[]")
	refARPTpa  = openflow.MustParseFieldRef("NXM_OF_ARP_TPA[]")
	refTunID   = openflow.MustParseFieldRef("NXM_NX_TUN_ID[0..23]")
	ethTypeARP = openflow.EthType(0x0806)
)

// ARPReply returns the actions that turn an ARP request for ip into the
// reply "ip is at mac" and send it back out of the port it came from: the
// request's source becomes the reply's destination (Ethernet and ARP), and
// mac and ip its source. The virtual networks' ARP table (datapath/vnetflows)
// answers with it too.
func ARPReply(ip netip.Addr, mac net.HardwareAddr) []openflow.Instruction {
	return apply(
		openflow.RegMove{Src: refEthSrc, Dst: refEthDst},
		setEthSrc(mac),
		openflow.SetField{Field: openflow.ARPOp(2)},
		openflow.RegMove{Src: refARPSha, Dst: refARPTha},
		openflow.RegMove{Src: refARPSpa, Dst: refARPTpa},
		openflow.SetField{Field: openflow.ARPSha(mac)},
		openflow.SetField{Field: openflow.ARPSpa(ip)},
		out(openflow.PortInPort),
	)
}

// ipv6LinkLocal is fe80::/10: the source of most neighbour solicitations.
var ipv6LinkLocal = netip.MustParsePrefix("fe80::/10")

// NDAnswer returns the two flows' instructions that answer a neighbour
// solicitation for ip with the advertisement "ip is at mac" (flags:
// NDRouter, NDSolicited, NDOverride), sent back out of the port it came
// from, as ARPReply does for ARP, in table t: the first (for a flow that
// matches the solicitation) swaps the MACs and addresses, makes it an
// advertisement with flags and a target link-layer option, and resubmits
// it to t; the second (for a flow there that matches that advertisement)
// writes the option's address and sends it. Open vSwitch takes nd_tll only
// from a flow that matches an advertisement, and rewrites the option's type
// before its address, so one flow cannot do both.
func NDAnswer(ip netip.Addr, mac net.HardwareAddr, flags uint32, t plan.TableID) (solicit, advert []openflow.Instruction) {
	return apply(
			openflow.RegMove{Src: refEthSrc, Dst: refEthDst},
			setEthSrc(mac),
			openflow.RegMove{Src: refIPv6Src, Dst: refIPv6Dst},
			openflow.SetField{Field: openflow.IPv6Src(ip)},
			openflow.SetField{Field: openflow.ICMPv6Type(136)},
			openflow.SetField{Field: openflow.NDReserved(flags)},
			openflow.SetField{Field: openflow.NDOptionsType(2)},
			openflow.Resubmit{InPort: openflow.Port16InPort, Table: uint8(t)},
		),
		apply(openflow.SetField{Field: openflow.NDTLL(mac)}, out(openflow.PortInPort))
}

// RouterNDFlows answer a neighbour solicitation for the router address ip
// (MAC mac) in table 5 with the router's advertisement (NDAnswer); the
// second flow matches the advertisement from and for ip. Solicitations
// from an on-link source (from subnet, or link-local) are answered;
// duplicate address detection (from ::) is not.
func RouterNDFlows(ip netip.Addr, mac net.HardwareAddr, subnet netip.Prefix) []openflow.Flow {
	solicit, advert := NDAnswer(ip, mac, openflow.NDRouter|openflow.NDSolicited|openflow.NDOverride, plan.PodARP)
	nd := func(typ uint8, ins []openflow.Instruction, src openflow.Field) openflow.Flow {
		return flow(plan.PodARP, plan.PriorityOverride, ins, fam6.eth(), openflow.IPProto(58), openflow.ICMPv6Type(typ), openflow.ICMPv6Code(0), src, openflow.NDTarget(ip))
	}
	return []openflow.Flow{
		nd(135, solicit, openflow.IPv6SrcPrefix(subnet.Masked())),
		nd(135, solicit, openflow.IPv6SrcPrefix(ipv6LinkLocal)),
		nd(136, advert, openflow.IPv6Src(ip)),
	}
}

// NodeFlows returns br0's node-wide flows (owner OwnerLocal):
//
//	table 0   vxlan0, the patch port and mp0 by in_port; mp0's ARP and ND
//	table 5   ARP for the router and mp0 addresses of each IPv4 pod subnet,
//	          neighbour solicitations for the router of each IPv6 one
//	table 20  un-SNAT for packets to the node IPs and router addresses
//	table 25  every IP packet through the service zone
//	table 40  SNAT after DNAT, by ct_mark
//	table 50  cluster and service destinations bypass the egress firewall
//	table 60  local subnet, the host, replies to the gateway, default route;
//	          commit connections from other nodes' hosts through the tunnel,
//	          and send their replies to table 80 (RemoteFlows)
//	table 70  delivery to mp0
//	table 90  pod egress SNAT to the node IP
func NodeFlows(c Config) ([]openflow.Flow, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var fs []openflow.Flow
	for _, table := range []func(Config) []openflow.Flow{
		classifierFlows,    // table 0
		arpFlows,           // table 5
		unSNATFlows,        // table 20
		serviceZoneFlows,   // table 25
		snatFlows,          // table 40
		egressBypassFlows,  // table 50
		localRouteFlows,    // table 60
		tunnelPeerFlows,    // table 60
		gatewayRouteFlows,  // table 60
		localDeliveryFlows, // table 70
		egressSNATFlows,    // table 90
	} {
		fs = append(fs, table(c)...)
	}
	return fs, nil
}

// classifierFlows returns table 0's flows for vxlan0, the patch port and
// mp0, by in_port, and for mp0's ARP and neighbour discovery.
func classifierFlows(c Config) []openflow.Flow {
	fs := []openflow.Flow{
		flow(plan.PodClassifier, plan.PriorityNormal, then([]openflow.Action{plan.FromTunnel.Load()}, plan.PodTunnelIngress), openflow.InPort(c.TunnelPort)),
		flow(plan.PodClassifier, plan.PriorityNormal, then([]openflow.Action{plan.FromGateway.Load()}, plan.PodUnSNAT), openflow.InPort(c.PatchPort)),
		flow(plan.PodClassifier, plan.PriorityNormal, then([]openflow.Action{plan.FromHost.Load()}, plan.PodUnSNAT), openflow.InPort(c.MgmtPort)),
		flow(plan.PodClassifier, PriorityARP, then(nil, plan.PodARP), ethTypeARP, openflow.InPort(c.MgmtPort)),
	}
	return append(fs, ndToARPTable(c.MgmtPort, c.MgmtMAC)...)
}

// arpFlows returns table 5's answers: ARP for the router and mp0
// addresses of each IPv4 pod subnet, neighbour solicitations for the
// router of each IPv6 one.
func arpFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, p := range c.PodCIDRs {
		if !p.Addr().Is4() {
			fs = append(fs, RouterNDFlows(plan.RouterIP(p), c.RouterMAC, p)...)
			continue
		}
		fs = append(fs,
			flow(plan.PodARP, plan.PriorityOverride, ARPReply(plan.RouterIP(p), c.RouterMAC), ethTypeARP, openflow.ARPOp(1), openflow.ARPTpa(plan.RouterIP(p))),
			flow(plan.PodARP, plan.PriorityOverride, ARPReply(plan.MgmtIP(p), c.MgmtMAC), ethTypeARP, openflow.ARPOp(1), openflow.ARPTpa(plan.MgmtIP(p))),
		)
	}
	return fs
}

// unSNATFlows returns table 20's un-SNAT, only for packets to an address
// br0 SNATs to.
func unSNATFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, ip := range c.snatAddrs() {
		f := famOf(ip)
		fs = append(fs, flow(plan.PodUnSNAT, plan.PriorityOverride, apply(ctAct(false, conntrack.ZoneSNAT, plan.PodConntrack, openflow.NAT{})), f.eth(), f.dst(ip)))
	}
	return fs
}

// serviceZoneFlows returns table 25's flows: every IP packet through the
// service zone.
func serviceZoneFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, f := range c.families() {
		fs = append(fs, flow(plan.PodConntrack, plan.PriorityLow, apply(ctAct(false, conntrack.ZoneService, plan.PodServiceLB, openflow.NAT{})), f.eth()))
	}
	return fs
}

// snatFlows returns table 40's SNAT after DNAT, per family: to the node
// IP when the service flows ask for it by ct_mark, and to the router
// address for service connections from breth0 to a pod on another node.
func snatFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, f := range c.families() {
		nodeIP, okNode := c.nodeIP(f.v6)
		router, okRouter := c.router(f.v6)
		if okNode {
			fs = append(fs, flow(plan.PodSNAT, plan.PriorityHigh, commitSNAT(nodeIP), f.eth(), newTracked, plan.SNATToNodeIP.Match()))
		}
		fs = append(fs, flow(plan.PodSNAT, PrioritySNATEstablished, reapplySNAT(), f.eth(), establishedOriginal, plan.SNATToNodeIP.Match()))
		if !okRouter {
			continue
		}
		// A service connection from breth0 (the host through its
		// masquerade address, or the uplink) DNATed to a pod on another
		// node: the reply must come back through this node, so the source
		// becomes the router address. The DNAT says it is a service
		// connection; a pod on this node answers through br0 anyway.
		for _, p := range c.PodCIDRs {
			if famOfPrefix(p).v6 == f.v6 {
				fs = append(fs, flow(plan.PodSNAT, PriorityGatewayToLocalPod, then(nil, plan.PodEgressPolicy), f.eth(), plan.FromGateway.Match(), f.dstNet(p)))
			}
		}
		for _, d := range c.clusterNets(f) {
			fs = append(fs,
				flow(plan.PodSNAT, PriorityGatewayToPodNew, commitSNAT(router), append([]openflow.Field{f.eth(), plan.FromGateway.Match(), newDNAT}, d...)...),
				flow(plan.PodSNAT, PriorityGatewayToPodEstablished, reapplySNAT(), append([]openflow.Field{f.eth(), plan.FromGateway.Match(), estDNAT}, d...)...),
			)
		}
	}
	return fs
}

// egressBypassFlows returns table 50's flows: cluster and service
// destinations skip the egress firewall.
func egressBypassFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, p := range append(slices.Clone(c.ClusterCIDRs), c.ServiceCIDRs...) {
		f := famOfPrefix(p)
		fs = append(fs, flow(plan.PodEgressFirewall, plan.PriorityEgressFirewallBypass, then(nil, plan.PodRouting), f.eth(), f.dstNet(p)))
	}
	return fs
}

// localRouteFlows returns table 60's routes to this node: the local pod
// subnets, and the host's addresses (mp0's, the node IPs) with the guard
// against underlay traffic to a node IP.
func localRouteFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, p := range c.PodCIDRs {
		f := famOfPrefix(p)
		fs = append(fs,
			flow(plan.PodRouting, plan.PriorityNormal, then(nil, plan.PodIngressPolicy), f.eth(), f.dstNet(p)),
			flow(plan.PodRouting, PriorityHost, then(nil, plan.PodLocalDelivery), f.eth(), f.dst(plan.MgmtIP(p))),
		)
	}
	for _, ip := range c.NodeIPs {
		f := famOf(ip)
		fs = append(fs, flow(plan.PodRouting, PriorityHost, then(nil, plan.PodLocalDelivery), f.eth(), f.dst(ip)))
		fs = append(fs, underlayGuard(ip))
	}
	return fs
}

// tunnelPeerFlows returns table 60's flows for connections from another
// node's host (SNATed to its node IP) through the tunnel to a local pod:
// they are committed with the tunnel endpoint they came from, and their
// replies go back the same way: out of the uplink, they would reach a
// host that does not know them. Connections from the pod networks need no
// state for that.
func tunnelPeerFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, p := range c.PodCIDRs {
		f := famOfPrefix(p)
		for _, src := range c.ClusterCIDRs {
			if famOfPrefix(src).v6 == f.v6 {
				fs = append(fs, flow(plan.PodRouting, PriorityTunnelPodSource, then(nil, plan.PodIngressPolicy),
					f.eth(), plan.FromTunnel.Match(), newTracked, f.srcNet(src), f.dstNet(p)))
			}
		}
		fs = append(fs, flow(plan.PodRouting, PriorityTunnelPeer, []openflow.Instruction{
			openflow.ApplyActions{Actions: []openflow.Action{ctAct(true, conntrack.ZoneService, plan.TableID(openflow.CTNoRecirc),
				plan.ReturnByTunnel.Load(),
			)}},
			openflow.GotoTable{Table: uint8(plan.PodIngressPolicy)},
		}, f.eth(), plan.FromTunnel.Match(), newTracked, f.dstNet(p)))
	}
	for _, f := range c.families() {
		// Their replies, to the tunnel table, which sends them to the node
		// whose node IP they are for (RemoteFlows).
		fs = append(fs, flow(plan.PodRouting, PriorityTunnelReturn, then(nil, plan.PodTunnelEgress), f.eth(),
			openflow.CtState(openflow.CtRpl|openflow.CtTrk, openflow.CtRpl|openflow.CtTrk), plan.ReturnByTunnel.Match()))
	}
	return fs
}

// gatewayRouteFlows returns table 60's routes out through the gateway:
// replies to it, connections already SNATed, the masquerade subnet, and
// the default route for pods (through egress SNAT).
func gatewayRouteFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, f := range c.families() {
		// Replies of connections that came in from the gateway (a
		// NodePort client, the host through the masquerade) go back to it.
		fs = append(fs, flow(plan.PodRouting, PriorityReply, then(nil, plan.PodGatewayOutput), f.eth(),
			openflow.CtState(openflow.CtRpl|openflow.CtTrk, openflow.CtRpl|openflow.CtTrk)))
		// Outside the cluster, SNAT already done (a host endpoint): to the
		// gateway.
		fs = append(fs, flow(plan.PodRouting, PrioritySNATDone, then(nil, plan.PodGatewayOutput), f.eth(),
			openflow.CtState(openflow.CtSNAT|openflow.CtTrk, openflow.CtSNAT|openflow.CtRpl|openflow.CtTrk)))
		// The default route, only for pods: egress SNAT.
		fs = append(fs, flow(plan.PodRouting, plan.PriorityLow, then(nil, plan.PodEgressSNAT), f.eth(), plan.FromPod.Match()))
		if m, ok := c.masq(f.v6); ok {
			fs = append(fs, flow(plan.PodRouting, plan.PriorityHigh, then(nil, plan.PodGatewayOutput), f.eth(), f.dstNet(m.Subnet)))
		}
	}
	return fs
}

// localDeliveryFlows returns table 70's delivery to mp0 of packets for
// the host's addresses (the node IPs and mp0's), hairpinned when they
// come from mp0.
func localDeliveryFlows(c Config) []openflow.Flow {
	toHost := apply(setEthSrc(c.RouterMAC), setEthDst(c.MgmtMAC), out(c.MgmtPort))
	toHostHairpin := apply(setEthSrc(c.RouterMAC), setEthDst(c.MgmtMAC), out(openflow.PortInPort))
	hostIPs := slices.Clone(c.NodeIPs)
	for _, p := range c.PodCIDRs {
		hostIPs = append(hostIPs, plan.MgmtIP(p))
	}
	var fs []openflow.Flow
	for _, ip := range hostIPs {
		f := famOf(ip)
		fs = append(fs,
			flow(plan.PodLocalDelivery, plan.PriorityNormal, toHost, f.eth(), f.dst(ip)),
			flow(plan.PodLocalDelivery, PriorityHost, toHostHairpin, f.eth(), openflow.InPort(c.MgmtPort), f.dst(ip)),
		)
	}
	return fs
}

// egressSNATFlows returns table 90's pod egress SNAT to the node IP.
func egressSNATFlows(c Config) []openflow.Flow {
	var fs []openflow.Flow
	for _, ip := range c.NodeIPs {
		f := famOf(ip)
		fs = append(fs, flow(plan.PodEgressSNAT, plan.PriorityNormal,
			apply(ctAct(true, conntrack.ZoneSNAT, plan.PodGatewayOutput, openflow.NAT{Src: true, MinAddr: ip})), f.eth()))
	}
	return fs
}

// Conntrack states of new connections, and of established ones in the
// original direction.
var (
	newTracked          = openflow.CtState(openflow.CtNew|openflow.CtTrk, openflow.CtNew|openflow.CtTrk)
	establishedOriginal = openflow.CtState(openflow.CtEst|openflow.CtTrk, openflow.CtEst|openflow.CtRpl|openflow.CtTrk)
)

// Table 40's conntrack states of service connections (their destination
// NATed in the service zone): new, and established in the original
// direction.
var (
	newDNAT = openflow.CtState(openflow.CtNew|openflow.CtTrk|openflow.CtDNAT, openflow.CtNew|openflow.CtTrk|openflow.CtDNAT)
	estDNAT = openflow.CtState(openflow.CtEst|openflow.CtTrk|openflow.CtDNAT, openflow.CtEst|openflow.CtRpl|openflow.CtTrk|openflow.CtDNAT)
)

// commitSNAT commits a new connection's SNAT to src in the SNAT zone and
// goes on to table 45.
func commitSNAT(src netip.Addr) []openflow.Instruction {
	return apply(ctAct(true, conntrack.ZoneSNAT, plan.PodEgressPolicy, openflow.NAT{Src: true, MinAddr: src}))
}

// reapplySNAT applies an established connection's SNAT in the SNAT zone
// and goes on to table 45.
func reapplySNAT() []openflow.Instruction {
	return apply(ctAct(false, conntrack.ZoneSNAT, plan.PodEgressPolicy, openflow.NAT{}))
}

// clusterNets returns, for family f, one destination match per cluster
// network, or a single empty match (any destination) when the cluster's
// networks are not configured.
func (c Config) clusterNets(f family) [][]openflow.Field {
	var out [][]openflow.Field
	for _, p := range c.ClusterCIDRs {
		if famOfPrefix(p).v6 == f.v6 {
			out = append(out, []openflow.Field{f.dstNet(p)})
		}
	}
	if len(c.ClusterCIDRs) == 0 {
		out = append(out, nil)
	}
	return out
}

// snatAddrs returns the addresses br0 SNATs to: the node IPs and the router
// address of each pod subnet.
func (c Config) snatAddrs() []netip.Addr {
	out := slices.Clone(c.NodeIPs)
	for _, p := range c.PodCIDRs {
		out = append(out, plan.RouterIP(p))
	}
	return out
}

func (c Config) families() []family {
	var v4, v6 bool
	for _, p := range c.PodCIDRs {
		v4 = v4 || p.Addr().Is4()
		v6 = v6 || p.Addr().Is6()
	}
	var out []family
	if v4 {
		out = append(out, fam4)
	}
	if v6 {
		out = append(out, fam6)
	}
	return out
}

func (c Config) nodeIP(v6 bool) (netip.Addr, bool) {
	for _, ip := range c.NodeIPs {
		if ip.Is6() == v6 {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func (c Config) router(v6 bool) (netip.Addr, bool) {
	for _, p := range c.PodCIDRs {
		if p.Addr().Is6() == v6 {
			return plan.RouterIP(p), true
		}
	}
	return netip.Addr{}, false
}

func (c Config) masq(v6 bool) (conntrack.Masquerade, bool) {
	m := c.Masquerade.V4
	if v6 {
		m = c.Masquerade.V6
	}
	return m, m.Subnet.IsValid()
}

// ndToARPTable sends a port's IPv6 neighbour solicitations and
// advertisements (from its own MAC) to the ARP table, ahead of port
// security: they come from link-local addresses.
func ndToARPTable(port uint32, mac net.HardwareAddr) []openflow.Flow {
	var fs []openflow.Flow
	for _, typ := range []uint8{135, 136} {
		fs = append(fs, flow(plan.PodClassifier, PriorityARP, then(nil, plan.PodARP),
			fam6.eth(), openflow.IPProto(58), openflow.InPort(port), openflow.EthSrc(mac), openflow.ICMPv6Type(typ)))
	}
	return fs
}

// NDFlows floods IPv6 neighbour solicitations and advertisements among the
// local ports (pods and mp0) in the ARP table (owner OwnerND), below the
// router's answer (RouterNDFlows): the neighbours answer each other. ports
// is every local port, mp0 included.
func NDFlows(ports []uint32) []openflow.Flow {
	ports = slices.Clone(ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)
	var acts []openflow.Action
	for _, p := range ports {
		acts = append(acts, out(p))
	}
	var fs []openflow.Flow
	for _, typ := range []uint8{135, 136} {
		fs = append(fs, flow(plan.PodARP, plan.PriorityNormal, apply(acts...), fam6.eth(), openflow.IPProto(58), openflow.ICMPv6Type(typ)))
	}
	return fs
}

// macOf is the MAC the masquerade plan gives an address (0a:58 + its last
// four bytes).
func macOf(a netip.Addr) net.HardwareAddr { return conntrack.MAC(a) }
