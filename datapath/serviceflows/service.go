package serviceflows

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// Node is what the builders need to know about this node.
type Node struct {
	// Name is the node's name, compared with endpoints' nodeName.
	Name string
	// Zone is the node's topology.kubernetes.io/zone label ("" for none),
	// compared with endpoints' zone hints.
	Zone string
	// IPs holds the node IP of each family (the address on breth0's LOCAL
	// port).
	IPs []netip.Addr
	// NodePortAddrs are the addresses NodePorts answer on: the node's
	// addresses in the operator's nodePortAddresses. Nil means IPs (an
	// empty, non-nil list: none).
	NodePortAddrs []netip.Addr
	// Secondary holds the node's other addresses. An endpoint on one of
	// them takes the seed's secondary-IP path.
	Secondary []netip.Addr
	// ClusterCIDRs are the pod networks. An endpoint outside them is a
	// host-network endpoint.
	ClusterCIDRs []netip.Prefix
	// Masquerade is the masquerade address plan.
	Masquerade conntrack.Plan
	// UplinkPort and PatchPort are breth0's ofports of the uplink and of
	// the patch port to br0.
	UplinkPort, PatchPort uint32
}

func (n *Node) nodeIP(f service.Family) (netip.Addr, bool) {
	for _, a := range n.IPs {
		if service.FamilyOf(a) == f {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (n *Node) nodePortAddrs() []netip.Addr {
	if n.NodePortAddrs == nil {
		return n.IPs
	}
	return n.NodePortAddrs
}

// GroupIDs returns the group id of a key; a *plan.IDAllocator's Get is
// one. Keys are stable per service port, family and traffic kind, so
// groups keep their ids across restarts.
type GroupIDs func(key string) (uint32, error)

// Input is one service port and all of its endpoints (both families, any
// condition), as the trackers hold them.
type Input struct {
	Port      *service.ServicePort
	Endpoints []service.Endpoint
	// WasIdled says that the port's last build was idled. It stays idled
	// until every family has an endpoint, even once its Service lost the
	// idling annotations: the unidler removes them as soon as it has
	// scaled the target up, before any pod is ready, and the connections
	// held meanwhile must wait for the pods, not meet a reject.
	WasIdled bool
}

// Output is what one service port wants.
type Output struct {
	// Owner and GatewayOwner are the reconciler owners of Pod and Gateway.
	Owner, GatewayOwner string
	Pod                 reconcile.State // br0
	Gateway             reconcile.State // breth0
	// Idled is set when the service is idled and has no endpoints: its
	// table-30 flows drop (and count) new connections instead of rejecting
	// them, and the unidling hook takes the port over.
	Idled bool
	// GroupIDs lists the ids of the groups used (and of the ServiceIDs of
	// reject flows), by key.
	GroupIDs map[string]uint32
}

// Owner returns the reconciler owner of a service port's br0 state.
func Owner(n service.ServicePortName) string { return "service/" + n.String() }

// GatewayOwner returns the reconciler owner of its breth0 state.
func GatewayOwner(n service.ServicePortName) string { return "service-gateway/" + n.String() }

// GroupKey returns the GroupIDs key of a service port's group for family
// f; external is the group of external traffic when it differs.
func GroupKey(n service.ServicePortName, f service.Family, external bool) string {
	k := Owner(n) + "/" + f.String()
	if external {
		k += "/external"
	}
	return k
}

// MaxAffinityTimeout is the longest affinity a learned flow can hold (its
// hard_timeout is 16 bits).
const MaxAffinityTimeout = 65535 * time.Second

// Build returns the flows, groups and meters of one service port.
func Build(node *Node, in Input, ids GroupIDs) (Output, error) {
	p := in.Port
	if p == nil {
		return Output{}, fmt.Errorf("service: build: no service port")
	}
	out := Output{Owner: Owner(p.Name), GatewayOwner: GatewayOwner(p.Name), GroupIDs: map[string]uint32{}}
	l4, err := l4For(p.Protocol)
	if err != nil {
		return Output{}, fmt.Errorf("service: %s: %w", p.Name, err)
	}
	// An idled port stays idled until every family has an endpoint: the
	// families' EndpointSlices turn ready one after the other, and a
	// connection held for the family still without one must not be
	// released to a reject.
	allEndpoints := true
	eps := make([]service.Endpoint, 0, len(in.Endpoints))
	for _, f := range p.Families() {
		eps = eps[:0]
		for _, e := range in.Endpoints {
			if service.FamilyOf(e.IP) == f {
				eps = append(eps, e)
			}
		}
		if !service.HasEndpoints(eps) {
			allEndpoints = false
		}
	}
	if (p.Idled || in.WasIdled) && !allEndpoints {
		out.Idled = true
	}
	for _, f := range p.Families() {
		b := builder{node: node, port: p, fam: f, l4: l4, ids: ids, out: &out}
		if err := b.family(in.Endpoints); err != nil {
			return Output{}, fmt.Errorf("service: %s: %s: %w", p.Name, f, err)
		}
	}
	return out, nil
}

// l4 names one protocol's match fields.
type l4 struct {
	proto    uint8
	dst, src func(uint16) openflow.Field
}

func l4For(p v1.Protocol) (l4, error) {
	switch p {
	case v1.ProtocolTCP:
		return l4{6, openflow.TCPDst, openflow.TCPSrc}, nil
	case v1.ProtocolUDP:
		return l4{17, openflow.UDPDst, openflow.UDPSrc}, nil
	case v1.ProtocolSCTP:
		return l4{132, openflow.SCTPDst, openflow.SCTPSrc}, nil
	}
	return l4{}, fmt.Errorf("protocol %q: not TCP, UDP or SCTP", p)
}

// builder builds one family of one service port.
type builder struct {
	node *Node
	port *service.ServicePort
	fam  service.Family
	l4   l4
	ids  GroupIDs
	out  *Output
}

func (b *builder) ethType() uint16 {
	if b.fam == service.IPv6 {
		return 0x86dd
	}
	return 0x0800
}

func (b *builder) dstIP(a netip.Addr) openflow.Field {
	if b.fam == service.IPv6 {
		return openflow.IPv6Dst(a)
	}
	return openflow.IPv4Dst(a)
}

func (b *builder) srcIP(a netip.Addr) openflow.Field {
	if b.fam == service.IPv6 {
		return openflow.IPv6Src(a)
	}
	return openflow.IPv4Src(a)
}

// vip is one address and port a service answers on.
type vip struct {
	addr netip.Addr
	port uint16
	// restricted: only new connections from sources (of the vip's
	// family) reach it, the others are dropped (a LoadBalancer's ingress
	// IP with spec.loadBalancerSourceRanges).
	restricted bool
	sources    []netip.Prefix
}

func (b *builder) family(all []service.Endpoint) error {
	p := b.port
	eps := make([]service.Endpoint, 0, len(all))
	for _, e := range all {
		if service.FamilyOf(e.IP) == b.fam {
			eps = append(eps, e)
		}
	}
	// Buckets in address order, whatever order the caller holds them in.
	slices.SortFunc(eps, func(x, y service.Endpoint) int {
		if c := x.IP.Compare(y.IP); c != 0 {
			return c
		}
		return int(x.Port) - int(y.Port)
	})
	internal, external := service.Categorize(p, eps, b.node.Name, b.node.Zone)
	cip, _ := p.ClusterIP(b.fam)
	internalVIPs := []vip{{addr: cip, port: p.Port}}
	var externalVIPs []vip
	if p.NodePort != 0 {
		for _, ip := range b.node.nodePortAddrs() {
			if service.FamilyOf(ip) == b.fam {
				externalVIPs = append(externalVIPs, vip{addr: ip, port: p.NodePort})
			}
		}
	}
	for _, a := range p.ExternalIPs {
		if service.FamilyOf(a) == b.fam {
			externalVIPs = append(externalVIPs, vip{addr: a, port: p.Port})
		}
	}
	var sources []netip.Prefix
	for _, r := range p.SourceRanges {
		if service.FamilyOf(r.Addr()) == b.fam {
			sources = append(sources, r)
		}
	}
	for _, a := range p.LoadBalancerIPs {
		if service.FamilyOf(a) == b.fam {
			v := vip{addr: a, port: p.Port, restricted: p.SourcesRestricted, sources: sources}
			externalVIPs = append(externalVIPs, v)
			if v.restricted {
				b.out.Pod.Flows = append(b.out.Pod.Flows, b.sourceDrop(v))
			}
		}
	}
	anyEps := service.HasEndpoints(eps)
	if slices.Equal(internal, external) {
		if err := b.lb(GroupKey(p.Name, b.fam, false), slices.Concat(internalVIPs, externalVIPs), internal, anyEps); err != nil {
			return err
		}
	} else {
		if err := b.lb(GroupKey(p.Name, b.fam, false), internalVIPs, internal, anyEps); err != nil {
			return err
		}
		if len(externalVIPs) > 0 {
			if err := b.lb(GroupKey(p.Name, b.fam, true), externalVIPs, external, anyEps); err != nil {
				return err
			}
			// Like kube-proxy, a pod's own traffic to an external VIP of an
			// externalTrafficPolicy=Local service is not external: it goes
			// to the cluster-wide endpoints, which the internal group holds
			// when internalTrafficPolicy is Cluster.
			if p.ExternalPolicyLocal && !p.InternalPolicyLocal && len(internal) > 0 {
				gid := b.out.GroupIDs[GroupKey(p.Name, b.fam, false)]
				b.out.Pod.Flows = append(b.out.Pod.Flows, b.vipFlows(externalVIPs, gid, &plan.FromPod, plan.PriorityOverride)...)
			}
		}
	}
	b.gateway(externalVIPs)
	return nil
}

// lb builds one group's worth: the table-30 flows of vips, the group and
// the table-35 flows of eps; or, without endpoints, the reject (any is
// false: the port has none at all) or drop (a Local policy leaves none).
func (b *builder) lb(key string, vips []vip, eps []service.Endpoint, anyEps bool) error {
	gid, err := b.ids(key)
	if err != nil {
		return fmt.Errorf("group id of %s: %w", key, err)
	}
	if !plan.ServiceGroups.Contains(gid) {
		return fmt.Errorf("group id of %s: %d outside %s", key, gid, plan.ServiceGroups.Name)
	}
	b.out.GroupIDs[key] = gid
	st := &b.out.Pod
	if len(eps) == 0 {
		// Idled: held back, dropped and counted by the flow, until
		// unidling takes the port over. Otherwise the reject (no endpoint
		// at all) or a drop (a Local policy leaves none here).
		var acts []openflow.Action
		if !anyEps && !b.out.Idled {
			acts = append([]openflow.Action{mustLoad(plan.ServiceID.LoadValue(uint64(gid)))}, RejectActions(gid)...)
		}
		for _, v := range vips {
			for _, m := range b.vipMatches(v) {
				st.Flows = append(st.Flows, openflow.Flow{
					Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityServiceNoEndpoints),
					Match: m, Instructions: apply(acts...),
				})
			}
		}
		return nil
	}
	st.Flows = append(st.Flows, b.vipFlows(vips, gid, nil, plan.PriorityHigh)...)
	g := openflow.GroupEntry{ID: gid, Type: openflow.GroupTypeSelect, SelectionMethod: "hash", SelectionFields: b.hashFields(),
		Buckets: make([]openflow.Bucket, 0, len(eps))}
	for i, e := range eps {
		ep := b.classify(e)
		var acts []openflow.Action
		if b.port.AffinityTimeout > 0 {
			// Affinity learns the binding, which a bucket cannot: the
			// bucket names the endpoint and table 35 commits the DNAT.
			acts = []openflow.Action{b.loadEndpoint(ep.addr), mustLoad(plan.EndpointPort.LoadValue(uint64(e.Port))),
				openflow.ResubmitTable(uint8(plan.PodEndpointDNAT))}
			st.Flows = append(st.Flows, b.dnat(gid, ep, e.Port))
		} else {
			// The bucket commits the DNAT itself: no flow per endpoint.
			acts = b.commitDNAT(ep, e.Port, false)
		}
		g.Buckets = append(g.Buckets, openflow.Bucket{ID: uint32(i), Weight: 1, Actions: acts})
	}
	st.Groups = append(st.Groups, g)
	if b.l4.proto == protoSCTP {
		st.Flows = append(st.Flows, b.sctpPorts(vips, eps)...)
	}
	return nil
}

// protoSCTP is SCTP's IP protocol number.
const protoSCTP = 132

// sctpPorts returns the table-30 flows that translate SCTP ports, which
// Open vSwitch's userspace conntrack does not: it tracks SCTP as a generic
// protocol, by addresses only, and its NAT rewrites only addresses. The
// DNAT flow of table 35 sets the endpoint's port on the first packet
// (set_field, after which Open vSwitch recomputes the SCTP CRC32c); these
// do it statelessly for the rest of the association:
//
//   - original direction, established (ct(nat) in table 25 has restored
//     the endpoint address; until the first reply, packets are +new and
//     take table 35 again): for a connection whose original destination
//     was the VIP, still addressed to the VIP's port, set the endpoint's
//     port;
//   - reply direction (ct(nat) has put the VIP back as the source): from
//     the endpoint's port, set the VIP's port.
//
// Both then go on to table 40, as the table's miss would. A VIP whose port
// equals the endpoint's needs neither.
func (b *builder) sctpPorts(vips []vip, eps []service.Endpoint) []openflow.Flow {
	var out []openflow.Flow
	next := openflow.GotoTable{Table: uint8(plan.PodSNAT)}
	for _, v := range vips {
		replied := map[uint16]bool{}
		for _, e := range eps {
			if e.Port == v.port {
				continue
			}
			ep := b.classify(e)
			out = append(out, openflow.Flow{
				Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityHigh),
				Match: openflow.NewMatch(
					openflow.CtState(openflow.CtEst|openflow.CtTrk, openflow.CtEst|openflow.CtRpl|openflow.CtTrk),
					openflow.EthType(b.ethType()), openflow.IPProto(b.l4.proto), b.ctDstIP(v.addr),
					b.dstIP(ep.addr), b.l4.dst(v.port)),
				Instructions: []openflow.Instruction{
					openflow.ApplyActions{Actions: []openflow.Action{openflow.SetField{Field: b.l4.dst(e.Port)}}}, next},
			})
			if replied[e.Port] {
				continue
			}
			replied[e.Port] = true
			out = append(out, openflow.Flow{
				Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityHigh),
				Match: openflow.NewMatch(
					openflow.CtState(openflow.CtRpl|openflow.CtTrk, openflow.CtRpl|openflow.CtTrk),
					openflow.EthType(b.ethType()), openflow.IPProto(b.l4.proto), b.srcIP(v.addr), b.l4.src(e.Port)),
				Instructions: []openflow.Instruction{
					openflow.ApplyActions{Actions: []openflow.Action{openflow.SetField{Field: b.l4.src(v.port)}}}, next},
			})
		}
	}
	return out
}

// ctDstIP matches the original destination of the connection.
func (b *builder) ctDstIP(a netip.Addr) openflow.Field {
	if b.fam == service.IPv6 {
		return openflow.CtIPv6Dst(a)
	}
	return openflow.CtNwDst(a)
}

// vipFlows returns the table-30 flows that send new connections to vips
// to group gid, at priority prio; with source set, only packets that
// entered br0 from there (plan.PktSource).
func (b *builder) vipFlows(vips []vip, gid uint32, source *plan.Mark, prio plan.Priority) []openflow.Flow {
	var out []openflow.Flow
	// bits matches reg0's affinity bits, and the source when set (a match
	// holds each register once).
	bits := func(checked, chosen bool, chosenOnly bool) openflow.Field {
		if source == nil {
			if chosenOnly {
				return plan.EndpointChosen.Match()
			}
			return affinityBits(checked, chosen)
		}
		parts := []regPart{{source.Field(), source.Value()}, {plan.EndpointSelected, b2u(chosen)}}
		if !chosenOnly {
			parts = append(parts, regPart{plan.AffinityChecked, b2u(checked)})
		}
		return regMatch(parts...)
	}
	for _, v := range vips {
		for _, m := range b.vipMatches(v) {
			out = append(out, b.vipFlowsOf(m, gid, source, prio, bits)...)
		}
	}
	return out
}

// vipFlowsOf returns vipFlows' flows for one match m of a VIP.
func (b *builder) vipFlowsOf(m openflow.Match, gid uint32, source *plan.Mark, prio plan.Priority, bits func(checked, chosen, chosenOnly bool) openflow.Field) []openflow.Flow {
	if b.port.AffinityTimeout <= 0 {
		if source != nil {
			m = withField(m, source.Match())
		}
		return []openflow.Flow{{
			Table: uint8(plan.PodServiceLB), Priority: uint16(prio), Match: m,
			Instructions: apply(mustLoad(plan.ServiceID.LoadValue(uint64(gid))), openflow.Group{ID: gid}),
		}}
	}
	// Affinity: look up table 31 once (bits 00), then either the learned
	// endpoint (EndpointChosen) or the group (looked up, not chosen).
	return []openflow.Flow{
		{
			Table: uint8(plan.PodServiceLB), Priority: uint16(prio),
			Match: withField(m, bits(false, false, false)),
			Instructions: apply(mustLoad(plan.ServiceID.LoadValue(uint64(gid))),
				openflow.ResubmitTable(uint8(plan.PodSessionAffinity)),
				plan.AffinityLookedUp.Load(),
				openflow.ResubmitTable(uint8(plan.PodServiceLB))),
		},
		{
			Table: uint8(plan.PodServiceLB), Priority: uint16(prio),
			Match:        withField(m, bits(false, true, true)),
			Instructions: apply(openflow.ResubmitTable(uint8(plan.PodEndpointDNAT))),
		},
		{
			Table: uint8(plan.PodServiceLB), Priority: uint16(prio),
			Match:        withField(m, bits(true, false, false)),
			Instructions: apply(openflow.Group{ID: gid}),
		},
	}
}

// vipMatches returns the matches of new connections to v: one, or for a
// restricted VIP one per allowed source range (none when no range of its
// family is allowed: sourceDrop then drops them all).
func (b *builder) vipMatches(v vip) []openflow.Match {
	m := b.vipMatch(v)
	if !v.restricted {
		return []openflow.Match{m}
	}
	out := make([]openflow.Match, 0, len(v.sources))
	for _, r := range v.sources {
		out = append(out, withField(m, b.srcPrefix(r)))
	}
	return out
}

// srcPrefix matches the packet's source in r.
func (b *builder) srcPrefix(r netip.Prefix) openflow.Field {
	if b.fam == service.IPv6 {
		return openflow.IPv6SrcPrefix(r)
	}
	return openflow.IPv4SrcPrefix(r)
}

// sourceDrop returns the table-30 flow that drops, and counts, the new
// connections to a restricted VIP from a source outside its ranges: below
// every flow of the VIP (which match the allowed sources), above the
// ClusterIP's reject and the service CIDRs' drop.
func (b *builder) sourceDrop(v vip) openflow.Flow {
	return openflow.Flow{Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityServiceSourceDrop), Match: b.vipMatch(v)}
}

// epKind is how an endpoint is reached.
type epKind uint8

const (
	podLocal      epKind = iota // a pod on this node
	podRemote                   // a pod on another node
	hostSelf                    // this node's IP: the host masquerade address
	hostSecondary               // another address of this node
	hostRemote                  // a host-network address elsewhere
)

type classified struct {
	kind epKind
	addr netip.Addr // the address in the group and the DNAT
}

func (b *builder) classify(e service.Endpoint) classified {
	if ip, ok := b.node.nodeIP(b.fam); ok && ip == e.IP {
		if m, ok := b.node.Masquerade.For(e.IP); ok {
			return classified{hostSelf, m.Host}
		}
	}
	if slices.Contains(b.node.Secondary, e.IP) {
		return classified{hostSecondary, e.IP}
	}
	inCluster := len(b.node.ClusterCIDRs) == 0
	for _, c := range b.node.ClusterCIDRs {
		if c.Contains(e.IP) {
			inCluster = true
		}
	}
	switch {
	case !inCluster:
		return classified{hostRemote, e.IP}
	case e.NodeName == b.node.Name:
		return classified{podLocal, e.IP}
	}
	return classified{podRemote, e.IP}
}

// dnat returns the table-35 flow of one endpoint of group gid, for a
// service with ClientIP affinity: it matches the endpoint the bucket or
// the learned binding loaded, learns the binding and commits the DNAT.
func (b *builder) dnat(gid uint32, ep classified, port uint16) openflow.Flow {
	m := openflow.Match{Fields: []openflow.Field{openflow.EthType(b.ethType()), openflow.IPProto(b.l4.proto),
		mustMatch(plan.ServiceID.MatchValue(uint64(gid))), b.matchEndpoint(ep.addr),
		mustMatch(plan.EndpointPort.MatchValue(uint64(port)))}}
	return openflow.Flow{Table: uint8(plan.PodEndpointDNAT), Priority: uint16(plan.PriorityNormal), Match: m,
		Instructions: apply(b.commitDNAT(ep, port, true)...)}
}

// commitDNAT returns the actions that commit a new connection's DNAT to
// the endpoint ep, port, in the service zone and go on to table 40: in a
// group bucket (Open vSwitch runs a bucket's actions as an action set,
// which keeps its set_fields and one ct), or, with learn set, in table 35
// after the affinity binding is learned. A host-network endpoint marks
// SNATToNodeIP in ct_mark; the other SNAT needs (a pod reaching itself, a
// remote pod reached from breth0) are decided by table 40 from the packet
// itself, so that an endpoint costs no flow of its own.
func (b *builder) commitDNAT(ep classified, port uint16, learn bool) []openflow.Action {
	nat := openflow.NAT{Dst: true, MinAddr: ep.addr, MinPort: port}
	var acts []openflow.Action
	if b.l4.proto == protoSCTP {
		// Open vSwitch's userspace conntrack translates only the
		// addresses of SCTP: the port is set here, and by table 30's
		// flows for the rest of the association (sctpPorts).
		nat.MinPort = 0
		acts = append(acts, openflow.SetField{Field: b.l4.dst(port)})
	}
	nested := []openflow.Action{nat}
	switch ep.kind {
	case hostSelf, hostSecondary, hostRemote:
		nested = append(nested, plan.SNATToNodeIP.Load())
	}
	if learn {
		// Open vSwitch's action set cannot hold learn: the binding is
		// learned here, on every new connection, which also restarts its
		// timeout as kube-proxy's does.
		acts = append(acts, b.learn(ep.addr, port))
	}
	return append(acts, openflow.CT{Commit: true, Zone: uint16(conntrack.ZoneService), RecircTable: uint8(plan.PodSNAT), Actions: nested})
}

// loadEndpoint loads the endpoint address into EndpointIPv4 or
// EndpointIPv6.
func (b *builder) loadEndpoint(a netip.Addr) openflow.Action {
	return openflow.SetField{Field: b.matchEndpoint(a)}
}

// matchEndpoint matches the endpoint address in EndpointIPv4 or
// EndpointIPv6.
func (b *builder) matchEndpoint(a netip.Addr) openflow.Field {
	if b.fam == service.IPv6 {
		f := plan.EndpointIPv6
		if f.Space() != plan.SpaceXXReg || f.Width() != 128 {
			panic("service: EndpointIPv6 is not a whole xxreg")
		}
		var ones [16]byte
		for i := range ones {
			ones[i] = 0xff
		}
		return openflow.XXReg(f.Index(), a.As16(), ones)
	}
	return mustMatch(plan.EndpointIPv4.MatchValue(uint64(binary.BigEndian.Uint32(a.AsSlice()))))
}
