// Package hostportflows builds the OpenFlow state of one pod's hostPorts: pure
// functions from the pod's port mappings to flows, with no I/O.
//
// A container port with a hostPort is reached at the node's address and
// that port, as the portmap CNI plugin makes it with iptables. nodeflow
// does it in the datapath (owner "hostport/<namespace>/<pod>"):
//
//   - br0 table 30 (ServiceLB), priority plan.PriorityHostPort, for each
//     host address (the hostIP, or every node IP of the pod IP's family
//     when hostIP is empty or unspecified): a new connection to the
//     address and hostPort commits the DNAT to the pod's IP and container
//     port, ct(commit,zone=65000,nat(dst=pod:port),table=40), as a service
//     bucket does. Like the service flows, TCP and UDP match the
//     connection's tuple (ct_nw_dst, ct_tp_dst), which every fragment of a
//     datagram carries. Connections from local pods, from other nodes
//     (through the uplink) and from the outside world all take it; the
//     reply is undone by table 25's conntrack lookup.
//   - breth0 table 0, priority plan.PriorityServiceIngress: the hostPort
//     from the uplink goes to br0, and its replies from br0 to the uplink,
//     past the host, as a NodePort's do.
//
// SCTP is tracked by addresses only in Open vSwitch's userspace conntrack,
// whose NAT cannot rewrite its ports: an SCTP hostPort must equal its
// container port (Build says so otherwise). The node's own traffic to its
// hostPorts is DNATed by nftables (agent/features/hostportfeature), not here: the
// kernel delivers it locally and it never reaches the bridges.
package hostportflows

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
)

// Owner returns the reconciler owner of a pod's hostPort flows (on both
// bridges).
func Owner(namespace, pod string) string { return "hostport/" + namespace + "/" + pod }

// Node is what the builder needs to know about this node.
type Node struct {
	// IPs are the node's addresses, at most one per family first.
	IPs []netip.Addr
	// Secondary are the node's other addresses: a hostIP may name them
	// too.
	Secondary []netip.Addr
	// Reserved are the node's own TCP ports (the kubelet's API, the
	// agent's), which no hostPort may take.
	Reserved []uint16
	// Uplink and Patch are breth0's uplink and patch port.
	Uplink, Patch uint32
}

// ErrNotServed is wrapped by the errors of CheckOn for a mapping this node
// refuses: a hostIP that is not its own, a reserved port.
var ErrNotServed = errors.New("hostPort refused")

// CheckOn is Check, and what the node refuses a pod: a hostIP that is not
// one of its addresses (the portmap plugin DNATs only local destinations;
// anything else would take other people's traffic: a ClusterIP, another
// pod, a host outside), and a TCP hostPort the node itself listens on
// (Reserved).
func (m Mapping) CheckOn(n Node) error {
	if err := m.Check(); err != nil {
		return err
	}
	if h := m.HostIP.Unmap(); h.IsValid() && !h.IsUnspecified() && !h.IsLoopback() && !slices.Contains(n.IPs, h) && !slices.Contains(n.Secondary, h) {
		return fmt.Errorf("%w: %s: the hostIP %s is not an address of this node", ErrNotServed, m, h)
	}
	if p, _ := proto(m.Protocol); p == 6 && slices.Contains(n.Reserved, m.HostPort) {
		return fmt.Errorf("%w: %s: port %d/TCP is the node's own", ErrNotServed, m, m.HostPort)
	}
	return nil
}

// Mapping is one container port with a hostPort, for one pod IP.
type Mapping struct {
	// Protocol is TCP, UDP or SCTP.
	Protocol v1.Protocol
	// HostIP is the address the port is on; the zero Addr or an
	// unspecified one (0.0.0.0, ::) stands for every node IP of PodIP's
	// family.
	HostIP   netip.Addr
	HostPort uint16
	// PodIP and ContainerPort are where connections go.
	PodIP         netip.Addr
	ContainerPort uint16
}

// String names the mapping as an event would: "TCP 172.18.0.3:8080 ->
// 10.244.1.5:80".
func (m Mapping) String() string {
	host := "*"
	if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() {
		host = m.HostIP.String()
	}
	return fmt.Sprintf("%s %s:%d -> %s", m.Protocol, host, m.HostPort, netip.AddrPortFrom(m.PodIP, m.ContainerPort))
}

// Addrs returns the host addresses the mapping is on: its HostIP, or the
// node IPs of its pod IP's family.
func (m Mapping) Addrs(nodeIPs []netip.Addr) []netip.Addr {
	if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() {
		return []netip.Addr{m.HostIP.Unmap()}
	}
	var out []netip.Addr
	for _, ip := range nodeIPs {
		if ip.Is4() == m.PodIP.Is4() {
			out = append(out, ip)
		}
	}
	return out
}

// Output is one pod's desired state on both bridges.
type Output struct {
	Pod, Gateway reconcile.State
}

// proto returns a protocol's number.
func proto(p v1.Protocol) (uint8, error) {
	switch p {
	case v1.ProtocolTCP, "":
		return 6, nil
	case v1.ProtocolUDP:
		return 17, nil
	case v1.ProtocolSCTP:
		return 132, nil
	}
	return 0, fmt.Errorf("protocol %q: not TCP, UDP or SCTP", p)
}

// Check reports what is wrong with a mapping on this node, naming it: a
// protocol nodeflow does not know, a host or pod address of another
// family, a loopback hostIP (the host's own traffic only: nftables'
// business, so not an error, but no flows), an SCTP port translation.
func (m Mapping) Check() error {
	p, err := proto(m.Protocol)
	if err != nil {
		return fmt.Errorf("hostPort %s: %w", m, err)
	}
	if !m.PodIP.IsValid() || m.HostPort == 0 || m.ContainerPort == 0 {
		return fmt.Errorf("hostPort %s: no pod IP, hostPort or containerPort", m)
	}
	if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() && m.HostIP.Unmap().Is4() != m.PodIP.Is4() {
		return fmt.Errorf("hostPort %s: the hostIP and the pod IP are of different families", m)
	}
	if p == 132 && m.HostPort != m.ContainerPort {
		return fmt.Errorf("hostPort %s: SCTP hostPorts must equal their containerPort (Open vSwitch's userspace conntrack cannot translate SCTP ports)", m)
	}
	return nil
}

// Build returns the flows of one pod's mappings. A mapping that fails
// Check is an error; loopback host addresses get no flows (only the host
// reaches them).
func Build(node Node, ms []Mapping) (Output, error) {
	var out Output
	for _, m := range ms {
		if err := m.Check(); err != nil {
			return Output{}, err
		}
		p, _ := proto(m.Protocol)
		for _, a := range m.Addrs(node.IPs) {
			if a.IsLoopback() {
				continue
			}
			out.Pod.Flows = append(out.Pod.Flows, dnat(m, p, a))
			out.Gateway.Flows = append(out.Gateway.Flows, ingress(node, p, a, m.HostPort)...)
		}
	}
	// Two mappings of one pod may share a host address and port (one
	// container port, each of two pod IPs of one family cannot; a repeated
	// entry can): keep the first.
	out.Pod.Flows = dedup(out.Pod.Flows)
	out.Gateway.Flows = dedup(out.Gateway.Flows)
	return out, nil
}

func dedup(fs []openflow.Flow) []openflow.Flow {
	var out []openflow.Flow
	for _, f := range fs {
		if !slices.ContainsFunc(out, func(o openflow.Flow) bool { return o.Key() == f.Key() }) {
			out = append(out, f)
		}
	}
	return out
}

func ethType(a netip.Addr) uint16 {
	if a.Is4() {
		return 0x0800
	}
	return 0x86dd
}

func l4Dst(p uint8, port uint16) openflow.Field {
	switch p {
	case 6:
		return openflow.TCPDst(port)
	case 17:
		return openflow.UDPDst(port)
	}
	return openflow.SCTPDst(port)
}

func l4Src(p uint8, port uint16) openflow.Field {
	switch p {
	case 6:
		return openflow.TCPSrc(port)
	case 17:
		return openflow.UDPSrc(port)
	}
	return openflow.SCTPSrc(port)
}

// dnat is table 30's flow for one host address of m.
func dnat(m Mapping, p uint8, a netip.Addr) openflow.Flow {
	newConn := openflow.CtState(openflow.CtNew|openflow.CtTrk, openflow.CtNew|openflow.CtTrk)
	var match openflow.Match
	nat := openflow.NAT{Dst: true, MinAddr: m.PodIP, MinPort: m.ContainerPort}
	switch {
	case p == 132 && a.Is4():
		match = openflow.NewMatch(newConn, openflow.EthType(0x0800), openflow.IPProto(p), openflow.IPv4Dst(a), l4Dst(p, m.HostPort))
		nat.MinPort = 0
	case p == 132:
		match = openflow.NewMatch(newConn, openflow.EthType(0x86dd), openflow.IPProto(p), openflow.IPv6Dst(a), l4Dst(p, m.HostPort))
		nat.MinPort = 0
	case a.Is4():
		match = openflow.NewMatch(newConn, openflow.EthType(0x0800), openflow.CtNwProto(p), openflow.CtNwDst(a), openflow.CtTpDst(m.HostPort))
	default:
		match = openflow.NewMatch(newConn, openflow.EthType(0x86dd), openflow.CtNwProto(p), openflow.CtIPv6Dst(a), openflow.CtTpDst(m.HostPort))
	}
	return openflow.Flow{
		Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityHostPort), Match: match,
		Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
			openflow.CT{Commit: true, Zone: uint16(conntrack.ZoneService), RecircTable: uint8(plan.PodSNAT), Actions: []openflow.Action{nat}},
		}}},
	}
}

// ingress is breth0's pair of flows for one host address and port: from
// the uplink to br0, and the replies back, past the host and zone 64000.
func ingress(node Node, p uint8, a netip.Addr, port uint16) []openflow.Flow {
	dst, src := openflow.IPv4Dst(a), openflow.IPv4Src(a)
	if a.Is6() {
		dst, src = openflow.IPv6Dst(a), openflow.IPv6Src(a)
	}
	return []openflow.Flow{
		{
			Table: uint8(plan.GatewayClassifier), Priority: uint16(plan.PriorityServiceIngress),
			Match:        openflow.NewMatch(openflow.InPort(node.Uplink), openflow.EthType(ethType(a)), openflow.IPProto(p), dst, l4Dst(p, port)),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(node.Patch)}}},
		},
		{
			Table: uint8(plan.GatewayClassifier), Priority: uint16(plan.PriorityServiceIngress),
			Match:        openflow.NewMatch(openflow.InPort(node.Patch), openflow.EthType(ethType(a)), openflow.IPProto(p), src, l4Src(p, port)),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(node.Uplink)}}},
		},
	}
}
