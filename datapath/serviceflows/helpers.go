package serviceflows

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// mustMatch and mustLoad unwrap plan values the builders compute from
// checked inputs (a group id in ServiceGroups, a 16-bit port); an error is
// a broken invariant.
func mustMatch(f openflow.Field, err error) openflow.Field {
	if err != nil {
		panic(err)
	}
	return f
}

func mustLoad(a openflow.Action, err error) openflow.Action {
	if err != nil {
		panic(err)
	}
	return a
}

func apply(acts ...openflow.Action) []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: acts}}
}

// withField returns a copy of m with f added.
func withField(m openflow.Match, f openflow.Field) openflow.Match {
	fs := make([]openflow.Field, 0, len(m.Fields)+1)
	fs = append(fs, m.Fields...)
	return openflow.NewMatch(append(fs, f)...)
}

// affinityBits matches AffinityChecked and EndpointSelected together (both
// in reg0) with the given values.
func affinityBits(checked, chosen bool) openflow.Field {
	c, e := plan.AffinityChecked, plan.EndpointSelected
	if c.Space() != plan.SpaceReg || e.Space() != plan.SpaceReg || c.Index() != e.Index() || c.Width() != 1 || e.Width() != 1 {
		panic("service: AffinityChecked and EndpointSelected are not bits of one register")
	}
	mask := uint32(1)<<c.Start() | uint32(1)<<e.Start()
	var v uint32
	if checked {
		v |= 1 << c.Start()
	}
	if chosen {
		v |= 1 << e.Start()
	}
	return openflow.Reg(c.Index(), v, mask)
}

// regPart is a value of one field of a 32-bit register.
type regPart struct {
	f plan.Field
	v uint64
}

// regMatch matches several fields of one 32-bit register together (an
// OpenFlow match holds each register once).
func regMatch(parts ...regPart) openflow.Field {
	var value, mask uint32
	for i, p := range parts {
		if p.f.Space() != plan.SpaceReg || p.f.Index() != parts[0].f.Index() {
			panic(fmt.Sprintf("service: field %d (%s) is not in the register of %s", i, p.f, parts[0].f))
		}
		v, m, err := p.f.Value32(uint32(p.v))
		if err != nil {
			panic(err)
		}
		value, mask = value|v, mask|m
	}
	return openflow.Reg(parts[0].f.Index(), value, mask)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// vipMatch matches a new connection to v. TCP and UDP match the
// connection's original tuple (ct_nw_dst, ct_tp_dst) rather than the
// packet's: with the userspace datapath, conntrack reassembles an IP
// datagram's fragments and gives every fragment the tuple of the whole
// datagram, while only the first fragment carries the L4 ports. Matching
// the tuple sends all fragments of a large UDP request through one group
// bucket, whose commit reassembles them again and NATs them alike. For a
// new connection the tuple is the packet's own, so nothing else changes.
// SCTP, which Open vSwitch 3.1's userspace conntrack tracks by addresses
// only, matches the packet.
func (b *builder) vipMatch(v vip) openflow.Match {
	newConn := openflow.CtState(openflow.CtNew|openflow.CtTrk, openflow.CtNew|openflow.CtTrk)
	if b.l4.proto == protoSCTP {
		return openflow.NewMatch(newConn,
			openflow.EthType(b.ethType()), openflow.IPProto(b.l4.proto), b.dstIP(v.addr), b.l4.dst(v.port))
	}
	return openflow.NewMatch(newConn,
		openflow.EthType(b.ethType()), openflow.CtNwProto(b.l4.proto), b.ctDstIP(v.addr), openflow.CtTpDst(v.port))
}

// hashFields are the select group's hash fields: addresses and ports of
// both directions, each field's value being its all-ones mask. Like
// vipMatch, TCP and UDP hash the connection's original tuple, which every
// fragment of a datagram shares, so that all of them pick one bucket.
func (b *builder) hashFields() []openflow.Field {
	if b.l4.proto == protoSCTP {
		if b.fam == service.IPv6 {
			all := allOnes16()
			return []openflow.Field{openflow.IPv6Src(all), openflow.IPv6Dst(all), b.l4.src(0xffff), b.l4.dst(0xffff)}
		}
		all := netip.AddrFrom4([4]byte{0xff, 0xff, 0xff, 0xff})
		return []openflow.Field{openflow.IPv4Src(all), openflow.IPv4Dst(all), b.l4.src(0xffff), b.l4.dst(0xffff)}
	}
	if b.fam == service.IPv6 {
		all := allOnes16()
		return []openflow.Field{openflow.CtIPv6Src(all), openflow.CtIPv6Dst(all), openflow.CtTpSrc(0xffff), openflow.CtTpDst(0xffff)}
	}
	all := netip.AddrFrom4([4]byte{0xff, 0xff, 0xff, 0xff})
	return []openflow.Field{openflow.CtNwSrc(all), openflow.CtNwDst(all), openflow.CtTpSrc(0xffff), openflow.CtTpDst(0xffff)}
}

func allOnes16() netip.Addr {
	return netip.AddrFrom16([16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
}

// learn returns the affinity learn action of an endpoint's DNAT flow: in
// table 31, for
// MaxAffinityTimeout at most, this client and this service (ServiceID)
// load the endpoint the bucket chose and EndpointChosen. Matching the
// ServiceID rather than a protocol's port field makes it work the same for
// TCP, UDP and SCTP, and across the service's VIPs. The learned flow's
// cookie names the endpoint (affinityCookie), so that the bindings to one
// endpoint can be deleted by cookie when it goes away.
func (b *builder) learn(ep netip.Addr, port uint16) openflow.Action {
	timeout := b.port.AffinityTimeout
	if timeout > MaxAffinityTimeout {
		timeout = MaxAffinityTimeout
	}
	ethType := openflow.MustParseFieldRef("NXM_OF_ETH_TYPE[]")
	src := openflow.MustParseFieldRef("NXM_OF_IP_SRC[]")
	var et [2]byte
	binary.BigEndian.PutUint16(et[:], b.ethType())
	if b.fam == service.IPv6 {
		src = openflow.MustParseFieldRef("NXM_NX_IPV6_SRC[]")
	}
	epRef := plan.EndpointIPv4.Ref()
	if b.fam == service.IPv6 {
		epRef = plan.EndpointIPv6.Ref()
	}
	return openflow.Learn{
		TableID:     uint8(plan.PodSessionAffinity),
		HardTimeout: uint16(timeout.Seconds()),
		Priority:    uint16(plan.PriorityNormal),
		Cookie:      uint64(affinityCookie(b.port.Name, ep, port)),
		Specs: []openflow.LearnSpec{
			openflow.LearnMatchValue(ethType, et[:]),
			openflow.LearnMatchField(src, src),
			openflow.LearnMatchField(plan.ServiceID.Ref(), plan.ServiceID.Ref()),
			openflow.LearnLoadField(epRef, epRef),
			openflow.LearnLoadField(plan.EndpointPort.Ref(), plan.EndpointPort.Ref()),
			openflow.LearnLoadValue([]byte{1}, plan.EndpointSelected.Ref()),
		},
	}
}

// RejectActions are the packet-in of a new connection to a service port
// without endpoints: through the punt stage (the meter of the connection's
// source, datapath/puntflows), then to nodeflow's controller id through the reject
// ceiling, with userdata = PacketInReject and the ServiceID (4 bytes,
// big-endian). The agent answers with TCP RST+ACK or ICMP port
// unreachable.
func RejectActions(gid uint32) []openflow.Action {
	ud := []byte{byte(plan.PacketInReject), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(ud[1:], gid)
	return append(puntflows.Actions(plan.PacketInReject), openflow.Controller2{
		MaxLen: openflow.ControllerMaxLenNoBuffer, ControllerID: plan.ControllerID,
		Reason: openflow.PacketInAction, Userdata: ud, MeterID: plan.MeterReject,
	})
}

// RejectMeter is the node-wide ceiling of every reject packet-in, behind
// the sources' own meters (punt.Rates). It is shared by all service
// ports, so one owner (RejectMeterOwner) holds it.
func RejectMeter() openflow.MeterEntry { return puntflows.CeilingMeter(plan.PacketInReject) }

// RejectMeterOwner is the reconciler owner of RejectMeter.
const RejectMeterOwner = "service/_meters"

// gateway adds breth0's table-0 flows for the external VIPs: from the
// uplink to br0, and the replies from br0 to the uplink.
func (b *builder) gateway(vips []vip) {
	st := &b.out.Gateway
	for _, v := range vips {
		st.Flows = append(st.Flows,
			openflow.Flow{
				Table: uint8(plan.GatewayClassifier), Priority: uint16(plan.PriorityServiceIngress),
				Match: openflow.NewMatch(openflow.InPort(b.node.UplinkPort), openflow.EthType(b.ethType()),
					openflow.IPProto(b.l4.proto), b.dstIP(v.addr), b.l4.dst(v.port)),
				Instructions: apply(openflow.OutputPort(b.node.PatchPort)),
			},
			openflow.Flow{
				Table: uint8(plan.GatewayClassifier), Priority: uint16(plan.PriorityServiceIngress),
				Match: openflow.NewMatch(openflow.InPort(b.node.PatchPort), openflow.EthType(b.ethType()),
					openflow.IPProto(b.l4.proto), b.srcIP(v.addr), b.l4.src(v.port)),
				Instructions: apply(openflow.OutputPort(b.node.UplinkPort)),
			})
	}
}

// affinityCookie is the cookie of the bindings learned for one endpoint of
// a service port: a FeatureLearned cookie (never touched by the
// reconciler) whose owner part hashes the port's owner and the endpoint.
func affinityCookie(n service.ServicePortName, ep netip.Addr, port uint16) plan.Cookie {
	return plan.LearnedCookie(Owner(n) + "@" + netip.AddrPortFrom(ep, port).String())
}
