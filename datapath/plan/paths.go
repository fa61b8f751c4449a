package plan

import "fmt"

// MaxRecirculations is the userspace datapath's limit: it drops a packet
// after this many recirculations, counted across bridges joined by patch
// ports ("Max recirculation depth exceeded").
const MaxRecirculations = 6

// Step is one table visit on a packet's path.
type Step struct {
	Bridge Bridge
	Table  TableID
	// Does is what the matching flow does, in short ovs-ofctl syntax.
	Does string
	// Recirc is set when the step costs a datapath recirculation: a
	// ct(..., table=N), or the tunnel pop before br0's in_port=vxlan0 flow.
	// It is a claim about the built flows, not their source: the path test
	// of datapath/sample fails when a real packet's recirculations disagree.
	Recirc bool
}

// Path is the journey of one packet (the first of a connection in one
// direction, its reply, or a later packet) through both bridges, as a
// model of the built flows: datapath/sample drives it with real packets and
// fails when the tables visited or the recirculations differ from Steps
// (in any order).
type Path struct {
	// Name is "source -> destination -> endpoint (direction)".
	Name  string
	Steps []Step
}

// Recirculations counts the recirculations on p.
func (p Path) Recirculations() int {
	n := 0
	for _, s := range p.Steps {
		if s.Recirc {
			n++
		}
	}
	return n
}

func st(b Bridge, t TableID, does string) Step { return Step{b, t, does, false} }
func rc(b Bridge, t TableID, does string) Step { return Step{b, t, does, true} }
func pod(t TableID, does string) Step          { return st(Pod, t, does) }
func podRecirc(t TableID, does string) Step    { return rc(Pod, t, does) }
func gw(t TableID, does string) Step           { return st(Gateway, t, does) }
func gwRecirc(t TableID, does string) Step     { return rc(Gateway, t, does) }
func steps(groups ...[]Step) []Step {
	var out []Step
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
func seq(s ...Step) []Step { return s }

// Shared segments.
var (
	podIngress = seq(
		pod(PodClassifier, "in_port=pod: FromPod, goto 10"),
		pod(PodPortSecurity, "dl_src,nw_src of the pod: NamespaceID, goto 20"),
	)
	svcLookup = seq(
		pod(PodUnSNAT, "not to a SNAT address: goto 25"),
		podRecirc(PodConntrack, "ct(zone=65000,nat,table=30)"),
	)
	unSNAT = seq(
		podRecirc(PodUnSNAT, "nw_dst=SNAT address: ct(zone=65001,nat,table=25)"),
		podRecirc(PodConntrack, "ct(zone=65000,nat,table=30)"),
	)
	svcNew = seq(
		podRecirc(PodServiceLB, "+new, VIP:port: group:N; its bucket: ct(commit,zone=65000,nat(dst=ep),exec(SNATKind),table=40)"),
	)
	ingressPol = pod(PodIngressPolicy, "established, the node's host, hairpin, or allowed by the destination pod's policies: goto 70 (new: committed in zone 65000)")
	egressPol  = pod(PodEgressPolicy, "established, or allowed by the source pod's policies: goto 50 (new: committed in zone 65000 unless to a local pod)")
	svcEst     = seq(pod(PodServiceLB, "not new: goto 40"), pod(PodSNAT, "no SNAT needed: goto 45"), egressPol)
	noSNAT     = seq(pod(PodSNAT, "no SNAT needed: goto 45"), egressPol)
	noBypass   = seq(pod(PodEgressFirewall, "not a cluster destination: goto 60"))
	judged     = seq(pod(PodEgressFirewall, "the namespace's rules, the first match: Allow goto 55 (Deny: drop)"),
		pod(PodEgressFirewallFragments, "not a first fragment: goto 60"))
	toOutside = seq(pod(PodRouting, "FromPod, default route: goto 90"),
		podRecirc(PodEgressSNAT, "ct(commit,zone=65001,nat(src=node IP),table=95)"),
		pod(PodGatewayOutput, "default gateway's MAC, output:patch"),
		gw(GatewayClassifier, "p100 in_port=patch: ct(commit,zone=64000,exec(ct_mark=0x1)),output:eth0"))
	toLocal = seq(
		pod(PodEgressFirewall, "cluster destination: goto 60"),
		pod(PodRouting, "local pod subnet: goto 65"),
		ingressPol,
		pod(PodLocalDelivery, "set MACs, output:pod (IN_PORT to the sender)"),
	)
	toTunnel = seq(
		pod(PodEgressFirewall, "cluster destination: goto 60"),
		pod(PodRouting, "remote node subnet: goto 80"),
		pod(PodTunnelEgress, "set tun_dst, tun_id; output:vxlan0, tunnel push"),
		gw(GatewayClassifier, "p600 in_port=LOCAL, VXLAN from the node IP: output:eth0"),
	)
	fromTunnel = seq(
		gw(GatewayClassifier, "p600 in_port=eth0, VXLAN to the node IP: output:LOCAL"),
		rc(Pod, PodClassifier, "tunnel pop, in_port=vxlan0: FromTunnel, goto 15"),
		pod(PodTunnelIngress, "tun_src of a node: NamespaceID from tun_id, goto 20"),
	)
	toHost = seq(
		pod(PodRouting, "mp0's address or a node IP: goto 70"),
		pod(PodLocalDelivery, "set MACs, output:mp0"),
	)
	fromHost  = seq(pod(PodClassifier, "in_port=mp0: FromHost, goto 20"))
	hostToSvc = seq(
		gwRecirc(GatewayClassifier, "p500 in_port=LOCAL,nw_dst=svc CIDR: ct(commit,zone=64001,nat(src=169.254.169.2),table=2)"),
		gw(GatewayToRouter, "set router MAC, output:patch"),
		pod(PodClassifier, "in_port=patch: FromGateway, goto 20"),
	)
	toHostMasq = seq(
		pod(PodRouting, "nw_dst=169.254.169.0/29: goto 95"),
		pod(PodGatewayOutput, "set MACs, output:patch"),
		gwRecirc(GatewayClassifier, "p500 in_port=patch,nw_src=svc CIDR,nw_dst=169.254.169.2: ct(zone=64001,nat,table=3)"),
		gw(GatewayToHost, "swap MACs, output:LOCAL"),
	)
	hostHairpin = seq(
		pod(PodRouting, "nw_dst=169.254.169.0/29: goto 95"),
		pod(PodGatewayOutput, "set MACs, IN_PORT (or output:patch from a pod)"),
		gwRecirc(GatewayClassifier, "p500 in_port=patch,nw_src=node IP,nw_dst=169.254.169.2: ct(commit,zone=64001,nat(dst=node IP),table=4)"),
		gwRecirc(GatewayHostHairpin, "ct(commit,zone=64002,nat(src=169.254.169.1),table=3)"),
		gw(GatewayToHost, "swap MACs, output:LOCAL"),
	)
	hostHairpinReply = seq(
		gwRecirc(GatewayClassifier, "p500 in_port=LOCAL,nw_dst=169.254.169.1: ct(zone=64002,nat,table=5)"),
		gwRecirc(GatewayHairpinReturn, "ct(commit,zone=64001,nat,table=2)"),
		gw(GatewayToRouter, "set router MAC, output:patch"),
		pod(PodClassifier, "in_port=patch: FromGateway, goto 20"),
		podRecirc(PodUnSNAT, "nw_dst=node IP: ct(zone=65001,nat,table=25)"),
		podRecirc(PodConntrack, "ct(zone=65000,nat,table=30)"),
	)
	snatNodeIP  = seq(podRecirc(PodSNAT, "+new, SNATToNodeIP: ct(commit,zone=65001,nat(src=node IP),table=45)"), egressPol)
	snatGateway = seq(podRecirc(PodSNAT, "+new+dnat, from the uplink to a remote pod, or from a pod to itself: ct(commit,zone=65001,nat(src=gateway),table=45)"), egressPol)
	snatHostIP  = seq(podRecirc(PodSNAT, "+new+dnat, from the host masquerade address to a remote pod (its node returns by tunnel): ct(commit,zone=65001,nat(src=node IP),table=45)"), egressPol)
	toUplink    = seq(
		pod(PodRouting, "ct_state=+snat-rpl (SNAT done): goto 95"),
		pod(PodGatewayOutput, "next hop's MAC, IN_PORT or output:patch"),
		gw(GatewayClassifier, "p100 in_port=patch: ct(commit,zone=64000,exec(ct_mark=0x1)),output:eth0"),
	)
	fromUplinkToBr0 = seq(
		gwRecirc(GatewayClassifier, "p50 in_port=eth0: ct(zone=64000,nat,table=1)"),
		gw(GatewayUplinkReturn, "+est, ct_mark=0x1: output:patch"),
		pod(PodClassifier, "in_port=patch: FromGateway, goto 20"),
		podRecirc(PodUnSNAT, "nw_dst=node IP: ct(zone=65001,nat,table=25)"),
		podRecirc(PodConntrack, "ct(zone=65000,nat,table=30)"),
	)
	nodePortIn = seq(
		gw(GatewayClassifier, "p110 in_port=eth0,tcp,nw_dst=node IP,tp_dst=nodePort: output:patch"),
		pod(PodClassifier, "in_port=patch: FromGateway, goto 20"),
		podRecirc(PodUnSNAT, "nw_dst=node IP: ct(zone=65001,nat,table=25)"),
		podRecirc(PodConntrack, "ct(zone=65000,nat,table=30)"),
	)
	replyToUplink = seq(
		pod(PodRouting, "ct_state=+rpl: goto 95"),
		pod(PodGatewayOutput, "next hop's MAC, output:patch"),
		gw(GatewayClassifier, "p110 in_port=patch,tcp,nw_src=node IP,tp_src=nodePort: output:eth0"),
	)
	replyToHostMasq = steps(svcEst, noBypass, toHostMasq)
)

// paths lists the paths that matter for the recirculation budget: every
// cell of the traffic matrix, in both directions, and the established
// packets of the longest. Each path is driven with real packets through
// the flows the builders produce, and checked step for step, by the
// recirculation test of datapath/sample: a path added here needs a probe
// there.
var paths = []Path{
	{"pod -> pod, same node", steps(podIngress, svcLookup, svcEst, toLocal)},
	{"pod -> pod, other node (sending node)", steps(podIngress, svcLookup, svcEst, toTunnel)},
	{"pod -> pod, other node (receiving node)", steps(fromTunnel, svcLookup, svcEst, toLocal)},
	{"pod -> host by mp0's address", steps(podIngress, svcLookup, svcEst,
		seq(pod(PodEgressFirewall, "cluster destination: goto 60")), toHost)},
	{"pod -> host by mp0's address (reply)", steps(fromHost, svcLookup, svcEst, toLocal)},
	{"pod -> host by the node IP", steps(podIngress, unSNAT, svcEst, noBypass, toHost)},
	{"pod -> host by the node IP (reply)", steps(fromHost, svcLookup, svcEst, toLocal)},
	{"pod -> ClusterIP -> local pod", steps(podIngress, svcLookup, svcNew, noSNAT, toLocal)},
	{"pod -> ClusterIP -> local pod (reply)", steps(podIngress, svcLookup, svcEst, toLocal)},
	{"pod -> ClusterIP -> remote pod", steps(podIngress, svcLookup, svcNew, noSNAT, toTunnel)},
	{"pod -> ClusterIP -> remote pod (reply)", steps(fromTunnel, svcLookup, svcEst, toLocal)},
	{"pod -> ClusterIP -> itself (hairpin)", steps(podIngress, svcLookup, svcNew, snatGateway, toLocal)},
	{"pod -> ClusterIP -> itself (hairpin reply)", steps(podIngress, unSNAT, svcEst, toLocal)},
	{"pod -> ClusterIP -> host endpoint, this node", steps(podIngress, svcLookup, svcNew, snatNodeIP, noBypass, hostHairpin)},
	{"pod -> ClusterIP -> host endpoint, this node (reply)", steps(hostHairpinReply, svcEst, toLocal)},
	{"pod -> ClusterIP -> host endpoint, other node", steps(podIngress, svcLookup, svcNew, snatNodeIP, noBypass, toUplink)},
	{"pod -> ClusterIP -> host endpoint, other node (reply)", steps(fromUplinkToBr0, svcEst, toLocal)},
	{"pod -> outside", steps(podIngress, svcLookup, svcEst, noBypass, toOutside)},
	{"pod -> outside (reply)", steps(fromUplinkToBr0, svcEst, toLocal)},
	{"pod -> outside, judged by an egress firewall", steps(podIngress, svcLookup, svcEst, judged, toOutside)},
	{"pod -> ClusterIP -> outside endpoint, judged by an egress firewall", steps(podIngress, svcLookup, svcNew, snatNodeIP, judged, toUplink)},
	{"host -> ClusterIP -> local pod", steps(hostToSvc, svcLookup, svcNew, noSNAT, toLocal)},
	{"host -> ClusterIP -> local pod (reply)", steps(podIngress, svcLookup, replyToHostMasq)},
	{"host -> ClusterIP -> remote pod", steps(hostToSvc, svcLookup, svcNew, snatHostIP, toTunnel)},
	{"host -> ClusterIP -> remote pod (reply)", steps(fromTunnel, unSNAT, replyToHostMasq)},
	{"host -> ClusterIP -> host endpoint, this node (the longest)", steps(hostToSvc, svcLookup, svcNew, snatNodeIP, noBypass, hostHairpin)},
	{"host -> ClusterIP -> host endpoint, this node (reply)", steps(hostHairpinReply, replyToHostMasq)},
	{"host -> ClusterIP -> host endpoint, this node (established)", steps(hostToSvc, svcLookup,
		seq(pod(PodServiceLB, "not new: goto 40"),
			podRecirc(PodSNAT, "+est-rpl, SNATToNodeIP: ct(zone=65001,nat,table=45)"), egressPol),
		noBypass, hostHairpin)},
	{"host -> ClusterIP -> secondary IP of this node", steps(hostToSvc, svcLookup, svcNew, snatNodeIP, noBypass,
		seq(pod(PodRouting, "ct_state=+snat-rpl (SNAT done): goto 95"), pod(PodGatewayOutput, "next hop's MAC, IN_PORT"),
			gwRecirc(GatewayClassifier, "p500 in_port=patch,nw_src=node IP,nw_dst=secondary IP: ct(commit,zone=64001,table=4)"),
			gwRecirc(GatewayHostHairpin, "ct(commit,zone=64002,nat(src=169.254.169.1),table=3)"),
			gw(GatewayToHost, "swap MACs, output:LOCAL")))},
	{"host -> ClusterIP -> secondary IP of this node (reply)", steps(hostHairpinReply, replyToHostMasq)},
	{"host -> ClusterIP -> host endpoint, other node", steps(hostToSvc, svcLookup, svcNew, snatNodeIP, noBypass, toUplink)},
	{"host -> ClusterIP -> host endpoint, other node (reply)", steps(fromUplinkToBr0, replyToHostMasq)},
	{"host -> ClusterIP -> remote pod (receiving node)", steps(fromTunnel, svcLookup, svcEst,
		seq(pod(PodEgressFirewall, "cluster destination: goto 60"),
			pod(PodRouting, "FromTunnel, +new, source outside the pod networks: ct(commit,zone=65000,exec(ReturnByTunnel)), goto 65"),
			ingressPol,
			pod(PodLocalDelivery, "set MACs, output:pod")))},
	{"host -> ClusterIP -> remote pod (receiving node, reply)", steps(podIngress, svcLookup, svcEst,
		seq(pod(PodEgressFirewall, "+rpl: goto 60"),
			pod(PodRouting, "+rpl, ReturnByTunnel: goto 80"),
			pod(PodTunnelEgress, "+rpl, ReturnByTunnel, to the node IP of a node: its tun_dst, tun_id; output:vxlan0, tunnel push"),
			gw(GatewayClassifier, "p600 in_port=LOCAL, VXLAN from the node IP: output:eth0")))},
	{"outside -> NodePort -> local pod", steps(nodePortIn, svcNew, noSNAT, toLocal)},
	{"outside -> NodePort -> local pod (reply)", steps(podIngress, svcLookup, svcEst, noBypass, replyToUplink)},
	{"outside -> NodePort -> remote pod", steps(nodePortIn, svcNew, snatGateway, toTunnel)},
	{"outside -> NodePort -> remote pod (reply)", steps(fromTunnel, unSNAT, svcEst, noBypass, replyToUplink)},
	{"outside -> NodePort -> host endpoint, this node", steps(nodePortIn, svcNew, snatNodeIP, noBypass, hostHairpin)},
	{"outside -> NodePort -> host endpoint, this node (reply)", steps(hostHairpinReply, svcEst, noBypass, replyToUplink)},
}

// Paths returns the documented paths.
func Paths() []Path { return append([]Path(nil), paths...) }

// CheckPaths verifies that every step names a declared table and that no
// path exceeds MaxRecirculations.
func CheckPaths() error {
	for _, p := range paths {
		for i, s := range p.Steps {
			if _, ok := LookupTable(s.Bridge, s.Table); !ok {
				return fmt.Errorf("plan: path %q step %d: %s has no table %d", p.Name, i, s.Bridge, s.Table)
			}
		}
		if n := p.Recirculations(); n > MaxRecirculations {
			return fmt.Errorf("plan: path %q: %d recirculations, the datapath allows %d", p.Name, n, MaxRecirculations)
		}
	}
	return nil
}
