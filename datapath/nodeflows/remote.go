package nodeflows

import (
	"fmt"
	"net"
	"net/netip"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// Remote is another node of the cluster: where its pod subnets are.
type Remote struct {
	// Name is the Node's name.
	Name string
	// TunnelIP is the node's IPv4 address, the VXLAN endpoint.
	TunnelIP netip.Addr
	// PodCIDRs are its pod subnets.
	PodCIDRs []netip.Prefix
	// NodeIPs are its addresses (InternalIP, both families): the replies
	// of its host's connections that this node returns through the tunnel
	// (plan.ReturnByTunnel) go to it by them.
	NodeIPs []netip.Addr
	// ReturnsByTunnel says that its agent sends the replies of connections
	// from other nodes' hosts back through the tunnel (pipeline 4 and
	// later): the host's service connections to its pods can then keep
	// the node IP as their source.
	ReturnsByTunnel bool
}

// Validate reports the first problem of r, naming the node and the field.
func (r Remote) Validate() error {
	if !r.TunnelIP.IsValid() || !r.TunnelIP.Is4() {
		return fmt.Errorf("node: remote node %q: tunnel IP %q: want an IPv4 address", r.Name, r.TunnelIP)
	}
	if len(r.PodCIDRs) == 0 {
		return fmt.Errorf("node: remote node %q: no pod CIDR", r.Name)
	}
	for _, p := range r.PodCIDRs {
		if !p.IsValid() || p.Masked() != p || p.Addr().Is4In6() {
			return fmt.Errorf("node: remote node %q: pod CIDR %q: not a valid masked prefix", r.Name, p)
		}
	}
	for _, ip := range r.NodeIPs {
		if !ip.IsValid() || ip.Is4In6() {
			return fmt.Errorf("node: remote node %q: node IP %q: not a plain IPv4 or IPv6 address", r.Name, ip)
		}
	}
	return nil
}

// RemoteFlows returns the flows for one remote node (owner RemoteOwner):
//
//	table 15  VXLAN from its IP whose key is a namespace id (bit 23 clear,
//	          plan.TunnelKeyVNIBit): the key becomes the namespace id
//	table 40  with ReturnsByTunnel: the host's new service connections
//	          to its pods SNATed to the node IP (else table 40's default,
//	          the router address)
//	table 60  its pod subnets to the tunnel table; UDP to its addresses on
//	          the VXLAN port dropped (underlayGuard)
//	table 80  set tun_dst and the VNI, output to vxlan0: for its pod
//	          subnets, and for the replies to its node IPs of connections
//	          its host made through the tunnel (plan.ReturnByTunnel)
//
// A pod subnet that overlaps this node's own is refused, so that a bad Node
// object cannot steal local traffic.
func RemoteFlows(c Config, r Remote) ([]openflow.Flow, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	for _, p := range r.PodCIDRs {
		for _, own := range c.PodCIDRs {
			if p.Overlaps(own) {
				return nil, fmt.Errorf("node: remote node %q: pod CIDR %s overlaps this node's %s", r.Name, p, own)
			}
		}
		for _, ip := range c.NodeIPs {
			if p.Contains(ip) {
				return nil, fmt.Errorf("node: remote node %q: pod CIDR %s contains this node's IP %s", r.Name, p, ip)
			}
		}
	}
	fs := []openflow.Flow{
		flow(plan.PodTunnelIngress, plan.PriorityNormal,
			then([]openflow.Action{openflow.RegMove{Src: refTunID, Dst: plan.NamespaceID.Ref()}}, plan.PodUnSNAT),
			openflow.InPort(c.TunnelPort), openflow.TunIPv4Src(r.TunnelIP),
			// Namespace ids only: a key with plan.TunnelKeyVNIBit is a
			// virtual network's VNI, which never enters the pod pipeline.
			openflow.TunnelIDMasked(0, plan.TunnelKeyVNIBit)),
	}
	for _, p := range r.PodCIDRs {
		f := famOfPrefix(p)
		nodeIP, okNode := c.nodeIP(f.v6)
		masq, okMasq := c.masq(f.v6)
		if r.ReturnsByTunnel && okNode && okMasq {
			// The host through breth0's masquerade: the pod sees the node
			// IP, as it would a host-network client's; established
			// packets re-apply it by table 40's router-address flows,
			// whose ct(nat) applies whatever SNAT was committed.
			fs = append(fs, flow(plan.PodSNAT, PriorityHostToRemotePod, commitSNAT(nodeIP),
				f.eth(), plan.FromGateway.Match(), newDNAT, f.src(masq.Host), f.dstNet(p)))
		}
		fs = append(fs,
			flow(plan.PodRouting, plan.PriorityNormal, then(nil, plan.PodTunnelEgress), f.eth(), f.dstNet(p)),
			flow(plan.PodTunnelEgress, plan.PriorityNormal, apply(
				openflow.SetField{Field: openflow.TunIPv4Dst(r.TunnelIP)},
				openflow.RegMove{Src: plan.NamespaceID.Ref(), Dst: refTunID},
				setEthSrc(c.RouterMAC),
				out(c.TunnelPort),
			), f.eth(), f.dstNet(p)),
		)
	}
	toNode := apply(
		openflow.SetField{Field: openflow.TunIPv4Dst(r.TunnelIP)},
		openflow.RegMove{Src: plan.NamespaceID.Ref(), Dst: refTunID},
		setEthSrc(c.RouterMAC),
		out(c.TunnelPort),
	)
	for _, ip := range r.NodeIPs {
		f := famOf(ip)
		fs = append(fs, flow(plan.PodTunnelEgress, plan.PriorityNormal, toNode, f.eth(),
			openflow.CtState(openflow.CtRpl|openflow.CtTrk, openflow.CtRpl|openflow.CtTrk), plan.ReturnByTunnel.Match(), f.dst(ip)))
	}
	// No pod sends VXLAN to the node: it would come out of this node's
	// uplink as this node's tunnel traffic.
	guarded := map[netip.Addr]bool{}
	for _, ip := range append([]netip.Addr{r.TunnelIP}, r.NodeIPs...) {
		if !guarded[ip] {
			guarded[ip] = true
			fs = append(fs, underlayGuard(ip))
		}
	}
	return fs, nil
}

// Pod is one local pod's attachment to br0.
type Pod struct {
	Namespace, Name string
	// Port is the ofport of the pod's interface.
	Port uint32
	// MAC is the pod interface's MAC.
	MAC net.HardwareAddr
	// IPs are the pod's addresses.
	IPs []netip.Addr
	// NamespaceID is loaded into plan.NamespaceID for its traffic.
	NamespaceID uint32
}

// Validate reports the first problem of p, naming the pod and the field.
func (p Pod) Validate() error {
	if p.Port == 0 || p.Port >= openflow.PortMax {
		return fmt.Errorf("node: pod %s/%s: port %d: not a switch port", p.Namespace, p.Name, p.Port)
	}
	if len(p.MAC) != 6 {
		return fmt.Errorf("node: pod %s/%s: mac %q: want 6 bytes", p.Namespace, p.Name, p.MAC)
	}
	if len(p.IPs) == 0 {
		return fmt.Errorf("node: pod %s/%s: no IP", p.Namespace, p.Name)
	}
	for _, ip := range p.IPs {
		if !ip.IsValid() || ip.Is4In6() {
			return fmt.Errorf("node: pod %s/%s: ip %q: not a plain IPv4 or IPv6 address", p.Namespace, p.Name, ip)
		}
	}
	if err := plan.NamespaceID.Check(uint64(p.NamespaceID)); err != nil {
		return fmt.Errorf("node: pod %s/%s: namespace id: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// PodFlows returns one local pod's flows (owner PodOwner):
//
//	table 0   its port: FromPod, to port security; its ARP and ND to table 5
//	table 5   ARP for its IPv4 addresses
//	table 10  port security: in_port, dl_src and nw_src (ipv6_src) must be
//	          its own; load the namespace id
//	table 70  delivery to it (IN_PORT when it is also the sender)
func PodFlows(c Config, p Pod) ([]openflow.Flow, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	in := openflow.InPort(p.Port)
	fs := []openflow.Flow{
		flow(plan.PodClassifier, plan.PriorityNormal, then([]openflow.Action{plan.FromPod.Load()}, plan.PodPortSecurity), in),
		flow(plan.PodClassifier, PriorityARP, then(nil, plan.PodARP), ethTypeARP, in),
	}
	fs = append(fs, ndToARPTable(p.Port, p.MAC)...)
	nsLoad, err := plan.NamespaceID.LoadValue(uint64(p.NamespaceID))
	if err != nil {
		return nil, fmt.Errorf("node: pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	deliver := apply(setEthSrc(c.RouterMAC), setEthDst(p.MAC), out(p.Port))
	hairpin := apply(setEthSrc(c.RouterMAC), setEthDst(p.MAC), out(openflow.PortInPort))
	for _, ip := range p.IPs {
		f := famOf(ip)
		if ip.Is4() {
			fs = append(fs, flow(plan.PodARP, plan.PriorityNormal, ARPReply(ip, p.MAC), ethTypeARP, openflow.ARPOp(1), openflow.ARPTpa(ip)))
		}
		fs = append(fs,
			flow(plan.PodPortSecurity, plan.PriorityNormal, then([]openflow.Action{nsLoad}, plan.PodUnSNAT),
				f.eth(), in, openflow.EthSrc(p.MAC), f.src(ip)),
			flow(plan.PodLocalDelivery, plan.PriorityNormal, deliver, f.eth(), f.dst(ip)),
			flow(plan.PodLocalDelivery, PriorityHost, hairpin, f.eth(), in, f.dst(ip)),
		)
		if router, ok := c.router(f.v6); ok {
			// The pod reaching itself through a service (hairpin): the
			// source becomes the router address, or the pod would answer
			// itself directly.
			self := []openflow.Field{f.eth(), f.src(ip), f.dst(ip)}
			fs = append(fs,
				flow(plan.PodSNAT, plan.PriorityHigh, commitSNAT(router), append(self, newDNAT)...),
				flow(plan.PodSNAT, PrioritySNATEstablished, reapplySNAT(), append(self, estDNAT)...),
			)
		}
	}
	return fs, nil
}

// GatewayOutputFlows returns table 95 (owner OwnerNextHops): for each next
// hop (longest prefix first by priority), and for the masquerade subnet
// (the dummy next hop's MAC), set the MACs and output to the patch port,
// or IN_PORT when the packet came from it.
func GatewayOutputFlows(c Config, hops []plan.NextHop) ([]openflow.Flow, error) {
	var fs []openflow.Flow
	emit := func(prio plan.Priority, src, dst net.HardwareAddr, f family, match ...openflow.Field) {
		fromGateway := append([]openflow.Field{f.eth(), openflow.InPort(c.PatchPort)}, match...)
		fs = append(fs,
			flow(plan.PodGatewayOutput, prio+1, apply(setEthSrc(src), setEthDst(dst), out(openflow.PortInPort)), fromGateway...),
			flow(plan.PodGatewayOutput, prio, apply(setEthSrc(src), setEthDst(dst), out(c.PatchPort)), append([]openflow.Field{f.eth()}, match...)...),
		)
	}
	for _, v6 := range []bool{false, true} {
		if mq, ok := c.masq(v6); ok {
			f := famOf(mq.Subnet.Addr())
			emit(PriorityNextHopMasquerade, c.RouterMAC, macOf(mq.NextHop), f, f.dstNet(mq.Subnet))
		}
	}
	for _, h := range hops {
		if !h.Prefix.IsValid() || h.Prefix.Masked() != h.Prefix || h.Prefix.Addr().Is4In6() {
			return nil, fmt.Errorf("node: next hop %q: not a valid masked prefix", h.Prefix)
		}
		if len(h.MAC) != 6 {
			return nil, fmt.Errorf("node: next hop %s: mac %q: want 6 bytes", h.Prefix, h.MAC)
		}
		f := famOfPrefix(h.Prefix)
		prio := PriorityNextHopBase + 2*plan.Priority(h.Prefix.Bits())
		if h.Prefix.Bits() == 0 {
			emit(prio, c.HostMAC, h.MAC, f)
			continue
		}
		emit(prio, c.HostMAC, h.MAC, f, f.dstNet(h.Prefix))
	}
	return fs, nil
}
