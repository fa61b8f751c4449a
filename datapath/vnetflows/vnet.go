// Package vnetflows builds br0's flows for virtual networks (the connection
// agent of docs/virtual-networks.md): pure functions from a model of the
// attachments to flows, with no I/O and no cookies (the reconciler stamps
// each owner's).
//
// A virtual network is a VNI (api.MinVNI..api.MaxVNI). Its packets never
// meet the pod network's: they enter by an attachment's port (table 0) or
// by vxlan0 with a key that has plan.TunnelKeyVNIBit (table 15), go through
// the virtual networks' own tables with the VNI in plan.NamespaceID, and
// leave by an attachment's port or vxlan0. The pod network's tables never
// go to tables 100-110, and these never go back to them.
//
//	table 0    in_port=<attachment>: VNetLocal=FromLocalAttachment, goto 100
//	table 15   in_port=vxlan0,tun_src=<node>,tun_id=<VNI>: the VNI, goto 110
//	           (one flow per VNI and node that hosts an attachment of it)
//	table 100  port security: IPv4 and ARP, or IPv6 and neighbour
//	           discovery, from the attachment's own MAC and address only;
//	           load the VNI, IPv4 and IPv6 to 110, ARP to 105
//	table 105  ARP requests for an address of the VNI: answered from the
//	           known mapping, IN_PORT; a request for the sender's own
//	           address, and all other ARP: dropped
//	table 110  VNI + dl_dst + nw_dst (ipv6_dst) of a local attachment:
//	           output to its port; of a remote one, only from a local
//	           attachment: tun_dst its node, tun_id the VNI, output to
//	           vxlan0; a neighbour solicitation to the solicited-node
//	           address of an IPv6 attachment's address, for that address:
//	           forwarded the same way, and the target answers itself; the
//	           rest (broadcast, multicast, unknown unicast): dropped
//
// br0 does not answer neighbour solicitations itself as it answers ARP:
// an advertisement differs from a solicitation in its flags (router,
// solicited, override) and in its option's type (target, not source
// link-layer address), and the openflow package writes neither field
// (Open vSwitch's nd_reserved and nd_options_type, an Ericsson
// experimenter's). So a solicitation is forwarded, eagerly from the known
// mappings like everything else, to its target's port or node, and the
// target's own stack answers.
//
// Owners: LocalOwner(namespace, name) for a local attachment (its port,
// port security, ARP answer and delivery), VNIOwner(vni) for the VNI's
// remote mappings (ARP answers, tunnel egress and ingress), so a change of
// one attachment rewrites only its own flows or its VNI's.
package vnetflows

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/model/vnet"
)

// LocalOwner is the owner of one local attachment's flows.
func LocalOwner(namespace, name string) string { return "vnet/" + namespace + "/" + name }

// VNIOwner is the owner of one VNI's remote mappings. "_vni" cannot be a
// namespace (an underscore is not allowed in one), so it never meets a
// LocalOwner.
func VNIOwner(vni uint32) string { return fmt.Sprintf("vnet/_vni/%d", vni) }

// VNIOwnerPrefix is the prefix of every VNIOwner.
const VNIOwnerPrefix = "vnet/_vni/"

// Priorities of the virtual networks' tables.
const (
	// PriorityPort is table 0's dispatch of an attachment's port, with
	// the pods' ports.
	PriorityPort = plan.PriorityNormal
	// PriorityAllow is the flows that let a packet on: port security,
	// ARP answers, delivery and tunnel egress.
	PriorityAllow = plan.PriorityNormal
	// PriorityOwnAddress drops an attachment's ARP request for its own
	// address (a gratuitous ARP or a duplicate-address probe) above the
	// answer, which would tell it that its own address is taken.
	PriorityOwnAddress plan.Priority = 110
	// PriorityNDChecked lets an IPv6 attachment's neighbour discovery on
	// (table 100) once its addresses are checked, above PriorityNDOther.
	PriorityNDChecked plan.Priority = 120
	// PriorityNDOther drops an IPv6 attachment's other neighbour
	// solicitations and advertisements (table 100) above its IPv6, which
	// would let them on with a link-layer address option that is not its
	// own.
	PriorityNDOther plan.Priority = 110
)

var (
	ethIPv4 = openflow.EthType(0x0800)
	ethARP  = openflow.EthType(0x0806)
	ethIPv6 = openflow.EthType(openflow.EthTypeIPv6)
	icmpv6  = openflow.IPProto(openflow.IPProtoICMPv6)
)

// ICMPv6 types of neighbour discovery (RFC 4861).
const (
	ndSolicit uint8 = 135
	ndAdvert  uint8 = 136
)

// noLinkAddr is how Open vSwitch shows a neighbour solicitation or
// advertisement without a link-layer address option: nd_sll or nd_tll
// zero.
var noLinkAddr = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// SolicitedNode returns the solicited-node multicast address of ip
// (RFC 4291 2.7.1): ff02::1:ff00:0/104 and ip's last 24 bits, where an
// IPv6 attachment's neighbours solicit it.
func SolicitedNode(ip netip.Addr) netip.Addr {
	b := ip.As16()
	return netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// Local is one attachment of this node, with its interface on br0.
type Local struct {
	// Namespace and Name name the NetworkAttachment.
	Namespace, Name string
	// VNI is its spec.vni.
	VNI uint32
	// Port is the ofport of its interface's host end.
	Port uint32
	// MAC and IP are its status.mac and status.ip, an IPv4 or an IPv6
	// address.
	MAC net.HardwareAddr
	IP  netip.Addr
}

// Remote is an attachment of the same VNI on another node.
type Remote struct {
	// Namespace and Name name the NetworkAttachment.
	Namespace, Name string
	// MAC and IP are its status.mac and status.ip.
	MAC net.HardwareAddr
	IP  netip.Addr
	// HostIP is its status.hostIP: the IPv4 tunnel endpoint of its node.
	HostIP netip.Addr
}

// Config is what the builder needs to know about this node.
type Config struct {
	// TunnelPort is vxlan0's ofport (remote_ip=flow, key=flow).
	TunnelPort uint32
	// HostIP is this node's tunnel endpoint: a remote attachment that
	// claims it is refused (this node would tunnel to itself).
	HostIP netip.Addr
}

// ErrInvalid marks an attachment the builder cannot program.
var ErrInvalid = errors.New("invalid attachment")

func checkAddr(what string, mac net.HardwareAddr, ip netip.Addr) error {
	if len(mac) != 6 {
		return fmt.Errorf("%s: status.mac %q: want 6 bytes: %w", what, mac, ErrInvalid)
	}
	if mac[0]&1 != 0 {
		return fmt.Errorf("%s: status.mac %s: a multicast MAC: %w", what, mac, ErrInvalid)
	}
	if !ip.IsValid() || ip.Zone() != "" {
		return fmt.Errorf("%s: status.ip %q: not an IP address: %w", what, ip, ErrInvalid)
	}
	if ip.Is4In6() {
		return fmt.Errorf("%s: status.ip %s: an IPv4-mapped IPv6 address: %w", what, ip, ErrInvalid)
	}
	if ip.IsMulticast() || ip.IsUnspecified() || ip.IsLoopback() && ip.Is6() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("%s: status.ip %s: not a unicast address: %w", what, ip, ErrInvalid)
	}
	return nil
}

// Validate reports the first problem of a, naming the attachment and the
// field.
func (a Local) Validate() error {
	what := fmt.Sprintf("vnet: attachment %s/%s", a.Namespace, a.Name)
	if !vnet.ValidVNI(a.VNI) {
		return fmt.Errorf("%s: spec.vni %d: not in %d..%d: %w", what, a.VNI, vnet.MinVNI, vnet.MaxVNI, ErrInvalid)
	}
	if a.Port == 0 || a.Port >= openflow.PortMax {
		return fmt.Errorf("%s: port %d: not a switch port: %w", what, a.Port, ErrInvalid)
	}
	return checkAddr(what, a.MAC, a.IP)
}

// Validate reports the first problem of r, naming the attachment and the
// field.
func (r Remote) Validate() error {
	what := fmt.Sprintf("vnet: attachment %s/%s", r.Namespace, r.Name)
	if !r.HostIP.IsValid() || !r.HostIP.Is4() || r.HostIP.IsUnspecified() || r.HostIP.IsMulticast() {
		return fmt.Errorf("%s: status.hostIP %q: want the IPv4 address of its node: %w", what, r.HostIP, ErrInvalid)
	}
	return checkAddr(what, r.MAC, r.IP)
}

func flow(table plan.TableID, prio plan.Priority, ins []openflow.Instruction, fields ...openflow.Field) openflow.Flow {
	return openflow.Flow{Table: uint8(table), Priority: uint16(prio), Match: openflow.NewMatch(fields...), Instructions: ins}
}

func then(table plan.TableID, acts ...openflow.Action) []openflow.Instruction {
	var ins []openflow.Instruction
	if len(acts) > 0 {
		ins = append(ins, openflow.ApplyActions{Actions: acts})
	}
	return append(ins, openflow.GotoTable{Table: uint8(table)})
}

func apply(acts ...openflow.Action) []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: acts}}
}

// vniMatch and vniLoad are plan.NamespaceID holding vni; vni is checked
// by the callers.
func vniMatch(vni uint32) openflow.Field {
	f, err := plan.NamespaceID.MatchValue(uint64(vni))
	if err != nil {
		panic(err) // api.ValidVNI passed: a broken invariant
	}
	return f
}

func vniLoad(vni uint32) openflow.Action {
	a, err := plan.NamespaceID.LoadValue(uint64(vni))
	if err != nil {
		panic(err)
	}
	return a
}

// arpAnswer is table 105's answer "ip is at mac" to the attachments of vni.
func arpAnswer(vni uint32, ip netip.Addr, mac net.HardwareAddr) openflow.Flow {
	return flow(plan.PodVNetARP, PriorityAllow, nodeflows.ARPReply(ip, mac),
		ethARP, vniMatch(vni), openflow.ARPOp(1), openflow.ARPTpa(ip))
}

// ndAnswer is table 105's pair of flows that answer the VNI's neighbour
// solicitations for ip with the advertisement "ip is at mac" (solicited,
// override), as arpAnswer does for ARP (node.NDAnswer): the first turns the
// solicitation into the advertisement and resubmits it to table 105, where
// the second writes its target link-layer address and sends it back. Port
// security sends only the attachments' solicitations from their own
// address to table 105 (their advertisements go to table 110), so an
// advertisement there is always br0's own.
func ndAnswer(vni uint32, ip netip.Addr, mac net.HardwareAddr) []openflow.Flow {
	solicit, advert := nodeflows.NDAnswer(ip, mac, openflow.NDSolicited|openflow.NDOverride, plan.PodVNetARP)
	return []openflow.Flow{
		flow(plan.PodVNetARP, PriorityAllow, solicit, ethIPv6, icmpv6, openflow.ICMPv6Type(ndSolicit), openflow.ICMPv6Code(0), vniMatch(vni), openflow.NDTarget(ip)),
		flow(plan.PodVNetARP, PriorityAllow, advert, ethIPv6, icmpv6, openflow.ICMPv6Type(ndAdvert), openflow.ICMPv6Code(0), vniMatch(vni), openflow.IPv6Src(ip), openflow.NDTarget(ip)),
	}
}

// LocalFlows returns one local attachment's flows (owner LocalOwner). For
// an IPv4 attachment:
//
//	table 0    its port: VNetLocal=FromLocalAttachment, goto 100
//	table 100  IPv4 from its MAC and address: the VNI, goto 110; ARP from
//	           them (Ethernet and ARP source): the VNI, goto 105
//	table 105  the VNI's ARP requests for its address: answered; its own
//	           request for its address: dropped
//	table 110  the VNI's IPv4 to its MAC and address: output to its port
//
// For an IPv6 attachment, tables 0 and 110 alike (ipv6_dst for nw_dst),
// and:
//
//	table 100  neighbour solicitations from its MAC and address with no
//	           source link-layer address or its MAC: the VNI, goto 105;
//	           from :: (a duplicate-address probe), and advertisements
//	           from its MAC and address for its address with no target
//	           link-layer address or its MAC: the VNI, goto 110; its other
//	           neighbour discovery: dropped; IPv6 from its MAC and
//	           address: the VNI, goto 110
//	table 105  the VNI's solicitations for its address: answered (two
//	           flows, ndAnswer); its own for its address: dropped
//	table 110  its own probe for its address: dropped; the VNI's probes
//	           to its solicited-node address for its address: output to
//	           its port
func LocalFlows(a Local) ([]openflow.Flow, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	in := openflow.InPort(a.Port)
	fs := []openflow.Flow{
		flow(plan.PodClassifier, PriorityPort, then(plan.PodVNetPortSecurity, plan.FromLocalAttachment.Load()), in),
	}
	if a.IP.Is6() {
		fs = append(fs, portSecurity6(a)...)
		fs = append(fs, flow(plan.PodVNetARP, PriorityOwnAddress, nil,
			ethIPv6, icmpv6, openflow.ICMPv6Type(ndSolicit), openflow.ICMPv6Code(0), in, openflow.NDTarget(a.IP)))
		fs = append(fs, ndAnswer(a.VNI, a.IP, a.MAC)...)
		fs = append(fs, flow(plan.PodVNetForward, PriorityOwnAddress, nil,
			ethIPv6, icmpv6, openflow.ICMPv6Type(ndSolicit), openflow.ICMPv6Code(0), in, openflow.NDTarget(a.IP)))
		return append(fs, forward6(a.VNI, a.MAC, a.IP, apply(openflow.OutputPort(a.Port)))...), nil
	}
	return append(fs,
		flow(plan.PodVNetPortSecurity, PriorityAllow, then(plan.PodVNetForward, vniLoad(a.VNI)),
			ethIPv4, in, openflow.EthSrc(a.MAC), openflow.IPv4Src(a.IP)),
		flow(plan.PodVNetPortSecurity, PriorityAllow, then(plan.PodVNetARP, vniLoad(a.VNI)),
			ethARP, in, openflow.EthSrc(a.MAC), openflow.ARPSpa(a.IP), openflow.ARPSha(a.MAC)),
		flow(plan.PodVNetARP, PriorityOwnAddress, nil, ethARP, in, openflow.ARPOp(1), openflow.ARPTpa(a.IP)),
		arpAnswer(a.VNI, a.IP, a.MAC),
		flow(plan.PodVNetForward, PriorityAllow, apply(openflow.OutputPort(a.Port)),
			ethIPv4, vniMatch(a.VNI), openflow.EthDst(a.MAC), openflow.IPv4Dst(a.IP)),
	), nil
}

// portSecurity6 is table 100's flows for an IPv6 attachment: what it may
// send, its neighbour discovery checked first.
func portSecurity6(a Local) []openflow.Flow {
	in, src := openflow.InPort(a.Port), openflow.EthSrc(a.MAC)
	on := then(plan.PodVNetForward, vniLoad(a.VNI))
	answered := then(plan.PodVNetARP, vniLoad(a.VNI))
	nd := func(typ uint8, to []openflow.Instruction, fields ...openflow.Field) openflow.Flow {
		return flow(plan.PodVNetPortSecurity, PriorityNDChecked, to,
			append([]openflow.Field{ethIPv6, icmpv6, openflow.ICMPv6Type(typ), openflow.ICMPv6Code(0), in, src}, fields...)...)
	}
	return []openflow.Flow{
		nd(ndSolicit, answered, openflow.IPv6Src(a.IP), openflow.NDSLL(a.MAC)),
		nd(ndSolicit, answered, openflow.IPv6Src(a.IP), openflow.NDSLL(noLinkAddr)),
		nd(ndSolicit, on, openflow.IPv6Src(netip.IPv6Unspecified()), openflow.NDSLL(noLinkAddr)),
		nd(ndAdvert, on, openflow.IPv6Src(a.IP), openflow.NDTarget(a.IP), openflow.NDTLL(a.MAC)),
		nd(ndAdvert, on, openflow.IPv6Src(a.IP), openflow.NDTarget(a.IP), openflow.NDTLL(noLinkAddr)),
		flow(plan.PodVNetPortSecurity, PriorityNDOther, nil, ethIPv6, icmpv6, openflow.ICMPv6Type(ndSolicit), in),
		flow(plan.PodVNetPortSecurity, PriorityNDOther, nil, ethIPv6, icmpv6, openflow.ICMPv6Type(ndAdvert), in),
		flow(plan.PodVNetPortSecurity, PriorityAllow, on, ethIPv6, in, src, openflow.IPv6Src(a.IP)),
	}
}

// forward6 is table 110's flows that take the VNI's IPv6 to (mac, ip) and
// its neighbour solicitations for ip to ins; extra narrows both (to what
// came from a local attachment, for a remote one).
func forward6(vni uint32, mac net.HardwareAddr, ip netip.Addr, ins []openflow.Instruction, extra ...openflow.Field) []openflow.Flow {
	match := func(fields ...openflow.Field) []openflow.Field {
		return append(append([]openflow.Field{vniMatch(vni)}, extra...), fields...)
	}
	return []openflow.Flow{
		flow(plan.PodVNetForward, PriorityAllow, ins, match(ethIPv6, openflow.EthDst(mac), openflow.IPv6Dst(ip))...),
		flow(plan.PodVNetForward, PriorityAllow, ins, match(ethIPv6, icmpv6, openflow.ICMPv6Type(ndSolicit), openflow.ICMPv6Code(0),
			openflow.IPv6Dst(SolicitedNode(ip)), openflow.NDTarget(ip))...),
	}
}

// VNIFlows returns the flows of one VNI's remote attachments (owner
// VNIOwner), sorted by the caller's order of remotes:
//
//	table 15   VXLAN with the VNI as key from the node of a remote
//	           attachment (each node once): the VNI, goto 110
//	table 105  the VNI's ARP requests (IPv4) or neighbour solicitations
//	           (IPv6) for its address: answered
//	table 110  the VNI's IPv4 (IPv6) to its MAC and address, and for an
//	           IPv6 one the VNI's duplicate-address probes to its
//	           solicited-node address for its address, from a local
//	           attachment only: tun_dst its node, tun_id the VNI, vxlan0
//
// A remote attachment that cannot be programmed (see Remote.Validate; its
// node is this node; its address is one an earlier remote, or a local
// attachment in taken, already has) is left out and reported in problems;
// the others are built. An invalid VNI or tunnel port is an error.
func VNIFlows(c Config, vni uint32, remotes []Remote, taken []netip.Addr) (fs []openflow.Flow, problems []error, err error) {
	if !vnet.ValidVNI(vni) {
		return nil, nil, fmt.Errorf("vnet: VNI %d: not in %d..%d: %w", vni, vnet.MinVNI, vnet.MaxVNI, ErrInvalid)
	}
	if c.TunnelPort == 0 || c.TunnelPort >= openflow.PortMax {
		return nil, nil, fmt.Errorf("vnet: VNI %d: tunnel port %d: not a switch port", vni, c.TunnelPort)
	}
	used := slices.Clone(taken)
	var hosts []netip.Addr
	for _, r := range remotes {
		if err := r.Validate(); err != nil {
			problems = append(problems, err)
			continue
		}
		if r.HostIP == c.HostIP {
			problems = append(problems, fmt.Errorf("vnet: attachment %s/%s: status.hostIP %s is this node's, but spec.node is another: %w", r.Namespace, r.Name, r.HostIP, ErrInvalid))
			continue
		}
		if slices.Contains(used, r.IP) {
			problems = append(problems, fmt.Errorf("vnet: attachment %s/%s: status.ip %s: another attachment of VNI %d has it: %w", r.Namespace, r.Name, r.IP, vni, ErrInvalid))
			continue
		}
		used = append(used, r.IP)
		if !slices.Contains(hosts, r.HostIP) {
			hosts = append(hosts, r.HostIP)
		}
		tunnel := apply(
			openflow.SetField{Field: openflow.TunIPv4Dst(r.HostIP)},
			openflow.SetField{Field: openflow.TunnelID(uint64(vni))},
			openflow.OutputPort(c.TunnelPort),
		)
		if r.IP.Is6() {
			fs = append(fs, ndAnswer(vni, r.IP, r.MAC)...)
			fs = append(fs, forward6(vni, r.MAC, r.IP, tunnel, plan.FromLocalAttachment.Match())...)
			continue
		}
		fs = append(fs,
			arpAnswer(vni, r.IP, r.MAC),
			flow(plan.PodVNetForward, PriorityAllow, tunnel,
				ethIPv4, vniMatch(vni), plan.FromLocalAttachment.Match(), openflow.EthDst(r.MAC), openflow.IPv4Dst(r.IP)),
		)
	}
	for _, h := range hosts {
		fs = append(fs, flow(plan.PodTunnelIngress, plan.PriorityVNetTunnel, then(plan.PodVNetForward, vniLoad(vni)),
			openflow.InPort(c.TunnelPort), openflow.TunIPv4Src(h), openflow.TunnelID(uint64(vni))))
	}
	return fs, problems, nil
}
