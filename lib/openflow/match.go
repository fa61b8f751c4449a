package openflow

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Field is one OXM (or NXM) match entry: a field's value and optional mask.
//
// Standard fields use class 0x8000, Nicira extension fields class 0x0001
// (NXM_1) or 0x0000 (NXM_0); experimenter fields use class 0xffff and carry
// their experimenter id.
//
// The constructors below (InPort, EthSrc, IPv4DstPrefix, Reg, CtState, ...)
// build fields under the header Open vSwitch itself uses in OpenFlow 1.3. A
// constructor given an invalid argument returns a Field that fails to encode
// with an error naming the argument, and renders as "<invalid: ...>".
type Field struct {
	Class        uint16
	Field        uint8
	Experimenter uint32 // only for class 0xffff
	Value        []byte
	Mask         []byte // nil for an exact match

	err error // set by a constructor given an invalid argument
}

// Err returns the error of a Field built from an invalid argument, or nil.
func (f Field) Err() error { return f.err }

// Match is an ofp_match of type OXM: an ordered list of fields.
//
// The order of Fields does not matter: AppendBinary writes them in Open
// vSwitch's canonical order and String prints them in ovs-ofctl's.
type Match struct {
	Fields []Field
}

// NewMatch returns a Match of the given fields.
func NewMatch(fields ...Field) Match { return Match{Fields: fields} }

// Ethernet types and IP protocols for EthType and IPProto.
const (
	EthTypeIPv4 uint16 = 0x0800
	EthTypeARP  uint16 = 0x0806
	EthTypeRARP uint16 = 0x8035
	EthTypeIPv6 uint16 = 0x86dd
	EthTypeMPLS uint16 = 0x8847

	IPProtoICMP   uint8 = 1
	IPProtoTCP    uint8 = 6
	IPProtoUDP    uint8 = 17
	IPProtoICMPv6 uint8 = 58
	IPProtoSCTP   uint8 = 132
)

// Connection tracking state bits for CtState (NXM_NX_CT_STATE).
const (
	CtNew  uint32 = 1 << 0 // start of a new connection
	CtEst  uint32 = 1 << 1 // part of an established connection
	CtRel  uint32 = 1 << 2 // related to an established connection
	CtRpl  uint32 = 1 << 3 // in the reply direction
	CtInv  uint32 = 1 << 4 // invalid: conntrack could not make sense of it
	CtTrk  uint32 = 1 << 5 // has been through conntrack
	CtSNAT uint32 = 1 << 6 // source NAT applied
	CtDNAT uint32 = 1 << 7 // destination NAT applied
)

// TCP flag bits for TCPFlags.
const (
	TCPFlagFIN uint16 = 1 << 0
	TCPFlagSYN uint16 = 1 << 1
	TCPFlagRST uint16 = 1 << 2
	TCPFlagPSH uint16 = 1 << 3
	TCPFlagACK uint16 = 1 << 4
	TCPFlagURG uint16 = 1 << 5
	TCPFlagECE uint16 = 1 << 6
	TCPFlagCWR uint16 = 1 << 7
	TCPFlagNS  uint16 = 1 << 8
)

// IP fragment bits for IPFrag.
const (
	IPFragAny   uint8 = 1 << 0 // the packet is a fragment
	IPFragLater uint8 = 1 << 1 // the packet is a fragment other than the first
)

// mfField builds a field under the preferred header of id.
func mfField(id mfID, value, mask []byte) Field {
	info := mfReg.infos[id]
	return Field{Class: info.Class, Field: info.Field, Experimenter: info.Experimenter, Value: value, Mask: mask}
}

// mfBad returns a field (under id's header) that fails to encode with an
// error naming the constructor's field.
func mfBad(id mfID, name, format string, args ...any) Field {
	f := mfField(id, nil, nil)
	f.err = fmt.Errorf("%s: %s: %w", name, fmt.Sprintf(format, args...), ErrMalformed)
	return f
}

func mfBE16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func mfBE32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func mfBE64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func mfU8(id mfID, v uint8) Field               { return mfField(id, []byte{v}, nil) }
func mfU16(id mfID, v uint16) Field             { return mfField(id, mfBE16(v), nil) }
func mfU32(id mfID, v uint32) Field             { return mfField(id, mfBE32(v), nil) }
func mfU16Masked(id mfID, v, m uint16) Field    { return mfField(id, mfBE16(v), mfBE16(m)) }
func mfU32Masked(id mfID, v, m uint32) Field    { return mfField(id, mfBE32(v), mfBE32(m)) }
func mfU64Masked(id mfID, v, m uint64) Field    { return mfField(id, mfBE64(v), mfBE64(m)) }
func mfU128Masked(id mfID, v, m [16]byte) Field { return mfField(id, v[:], m[:]) }

// mfMAC builds an Ethernet address field.
func mfMAC(id mfID, mac, mask net.HardwareAddr) Field {
	if len(mac) != 6 {
		return mfBad(id, mfReg.infos[id].Name, "%d-byte hardware address %v, want 6 bytes", len(mac), mac)
	}
	if mask == nil {
		return mfField(id, clone(mac), nil)
	}
	if len(mask) != 6 {
		return mfBad(id, mfReg.infos[id].Name, "%d-byte mask %v, want 6 bytes", len(mask), mask)
	}
	return mfField(id, clone(mac), clone(mask))
}

// mfIPv4 builds an IPv4 address field; an IPv4-mapped IPv6 address counts.
func mfIPv4(id mfID, ip netip.Addr) Field {
	ip = ip.Unmap()
	if !ip.Is4() {
		return mfBad(id, mfReg.infos[id].Name, "%v is not an IPv4 address", ip)
	}
	a := ip.As4()
	return mfField(id, a[:], nil)
}

// mfIPv4Prefix builds a masked IPv4 field; a /32 is an exact match.
func mfIPv4Prefix(id mfID, p netip.Prefix) Field {
	if !p.IsValid() || !p.Addr().Is4() {
		return mfBad(id, mfReg.infos[id].Name, "%v is not an IPv4 prefix", p)
	}
	a := p.Masked().Addr().As4()
	return mfField(id, a[:], mfBE32(^uint32(0)<<(32-p.Bits())))
}

// mfIPv6 builds an IPv6 address field.
func mfIPv6(id mfID, ip netip.Addr) Field {
	if !ip.Is6() || ip.Zone() != "" {
		return mfBad(id, mfReg.infos[id].Name, "%v is not an IPv6 address", ip)
	}
	a := ip.As16()
	return mfField(id, a[:], nil)
}

// mfIPv6Prefix builds a masked IPv6 field.
func mfIPv6Prefix(id mfID, p netip.Prefix) Field {
	if !p.IsValid() || !p.Addr().Is6() || p.Addr().Zone() != "" {
		return mfBad(id, mfReg.infos[id].Name, "%v is not an IPv6 prefix", p)
	}
	a := p.Masked().Addr().As16()
	m := make([]byte, 16)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return mfField(id, a[:], m)
}

// InPort matches the ingress port (OXM_OF_IN_PORT, 32-bit OpenFlow 1.1+
// numbering: LOCAL is PortLocal).
func InPort(port uint32) Field { return mfU32(mfInPortOXM, port) }

// ActsetOutput matches the output port in the action set (OpenFlow 1.3:
// the ONF experimenter field).
func ActsetOutput(port uint32) Field { return mfU32(mfActsetOutput, port) }

// EthSrc matches the Ethernet source address.
func EthSrc(mac net.HardwareAddr) Field { return mfMAC(mfEthSrc, mac, nil) }

// EthDst matches the Ethernet destination address.
func EthDst(mac net.HardwareAddr) Field { return mfMAC(mfEthDst, mac, nil) }

// EthSrcMasked matches the Ethernet source address bits set in mask.
func EthSrcMasked(mac, mask net.HardwareAddr) Field { return mfMAC(mfEthSrc, mac, mask) }

// EthDstMasked matches the Ethernet destination address bits set in mask,
// e.g. 01:00:00:00:00:00/01:00:00:00:00:00 for multicast.
func EthDstMasked(mac, mask net.HardwareAddr) Field { return mfMAC(mfEthDst, mac, mask) }

// EthType matches the Ethernet type (EthTypeIPv4, EthTypeARP, ...).
func EthType(t uint16) Field { return mfU16(mfEthType, t) }

// VlanVID matches packets tagged with VLAN vid (0-4095); the "VLAN present"
// bit 0x1000 is added.
func VlanVID(vid uint16) Field {
	if vid > 0xfff {
		return mfBad(mfVlanVID, mfReg.infos[mfVlanVID].Name, "VLAN id %d exceeds 4095", vid)
	}
	return mfU16(mfVlanVID, 0x1000|vid)
}

// VlanNone matches packets without a VLAN tag.
func VlanNone() Field { return mfU16(mfVlanVID, 0) }

// VlanAny matches packets with any VLAN tag.
func VlanAny() Field { return mfU16Masked(mfVlanVID, 0x1000, 0x1000) }

// VlanPCP matches the VLAN priority (0-7); it needs a VLAN match.
func VlanPCP(pcp uint8) Field {
	if pcp > 7 {
		return mfBad(mfVlanPCP, mfReg.infos[mfVlanPCP].Name, "priority %d exceeds 7", pcp)
	}
	return mfU8(mfVlanPCP, pcp)
}

// IPProto matches the IP protocol (IPProtoTCP, ...); it needs EthType IPv4
// or IPv6.
func IPProto(p uint8) Field { return mfU8(mfIPProto, p) }

// IPDSCP matches the 6-bit DSCP of the IPv4/IPv6 traffic class.
func IPDSCP(dscp uint8) Field {
	if dscp > 63 {
		return mfBad(mfIPDSCP, mfReg.infos[mfIPDSCP].Name, "DSCP %d exceeds 63", dscp)
	}
	return mfU8(mfIPDSCP, dscp)
}

// IPECN matches the 2-bit ECN of the IPv4/IPv6 traffic class.
func IPECN(ecn uint8) Field {
	if ecn > 3 {
		return mfBad(mfIPECN, mfReg.infos[mfIPECN].Name, "ECN %d exceeds 3", ecn)
	}
	return mfU8(mfIPECN, ecn)
}

// IPTTL matches the IPv4 TTL or IPv6 hop limit.
func IPTTL(ttl uint8) Field { return mfU8(mfNwTTL, ttl) }

// IPFrag matches the fragment bits IPFragAny and IPFragLater selected by
// mask: IPFrag(0, IPFragAny) is "not a fragment", IPFrag(IPFragAny,
// IPFragAny|IPFragLater) "first fragment".
func IPFrag(value, mask uint8) Field {
	if value&^3 != 0 || mask&^3 != 0 {
		return mfBad(mfIPFrag, mfReg.infos[mfIPFrag].Name, "fragment bits 0x%x/0x%x outside 0x3", value, mask)
	}
	return mfField(mfIPFrag, []byte{value}, []byte{mask})
}

// IPv4Src matches the IPv4 source address.
func IPv4Src(ip netip.Addr) Field { return mfIPv4(mfIPv4Src, ip) }

// IPv4Dst matches the IPv4 destination address.
func IPv4Dst(ip netip.Addr) Field { return mfIPv4(mfIPv4Dst, ip) }

// IPv4SrcPrefix matches IPv4 source addresses in p (host bits ignored).
func IPv4SrcPrefix(p netip.Prefix) Field { return mfIPv4Prefix(mfIPv4Src, p) }

// IPv4DstPrefix matches IPv4 destination addresses in p.
func IPv4DstPrefix(p netip.Prefix) Field { return mfIPv4Prefix(mfIPv4Dst, p) }

// IPv6Src matches the IPv6 source address.
func IPv6Src(ip netip.Addr) Field { return mfIPv6(mfIPv6Src, ip) }

// IPv6Dst matches the IPv6 destination address.
func IPv6Dst(ip netip.Addr) Field { return mfIPv6(mfIPv6Dst, ip) }

// IPv6SrcPrefix matches IPv6 source addresses in p.
func IPv6SrcPrefix(p netip.Prefix) Field { return mfIPv6Prefix(mfIPv6Src, p) }

// IPv6DstPrefix matches IPv6 destination addresses in p.
func IPv6DstPrefix(p netip.Prefix) Field { return mfIPv6Prefix(mfIPv6Dst, p) }

// IPv6FlowLabel matches the 20-bit IPv6 flow label.
func IPv6FlowLabel(label uint32) Field {
	if label > 0xfffff {
		return mfBad(mfIPv6Label, mfReg.infos[mfIPv6Label].Name, "flow label 0x%x exceeds 20 bits", label)
	}
	return mfU32(mfIPv6Label, label)
}

// TCPSrc matches the TCP source port.
func TCPSrc(port uint16) Field { return mfU16(mfTCPSrc, port) }

// TCPDst matches the TCP destination port.
func TCPDst(port uint16) Field { return mfU16(mfTCPDst, port) }

// TCPSrcMasked matches the TCP source port bits set in mask.
func TCPSrcMasked(port, mask uint16) Field { return mfU16Masked(mfTCPSrc, port, mask) }

// TCPDstMasked matches the TCP destination port bits set in mask, e.g.
// 0x1000/0xf000 for ports 4096-8191.
func TCPDstMasked(port, mask uint16) Field { return mfU16Masked(mfTCPDst, port, mask) }

// UDPSrc matches the UDP source port.
func UDPSrc(port uint16) Field { return mfU16(mfUDPSrc, port) }

// UDPDst matches the UDP destination port.
func UDPDst(port uint16) Field { return mfU16(mfUDPDst, port) }

// UDPSrcMasked matches the UDP source port bits set in mask.
func UDPSrcMasked(port, mask uint16) Field { return mfU16Masked(mfUDPSrc, port, mask) }

// UDPDstMasked matches the UDP destination port bits set in mask.
func UDPDstMasked(port, mask uint16) Field { return mfU16Masked(mfUDPDst, port, mask) }

// SCTPSrc matches the SCTP source port.
func SCTPSrc(port uint16) Field { return mfU16(mfSCTPSrc, port) }

// SCTPDst matches the SCTP destination port.
func SCTPDst(port uint16) Field { return mfU16(mfSCTPDst, port) }

// SCTPSrcMasked matches the SCTP source port bits set in mask.
func SCTPSrcMasked(port, mask uint16) Field { return mfU16Masked(mfSCTPSrc, port, mask) }

// SCTPDstMasked matches the SCTP destination port bits set in mask.
func SCTPDstMasked(port, mask uint16) Field { return mfU16Masked(mfSCTPDst, port, mask) }

// TCPFlags matches the TCP flag bits (TCPFlagSYN, ...) set in mask:
// TCPFlags(TCPFlagSYN, TCPFlagSYN|TCPFlagACK) is "+syn-ack".
func TCPFlags(value, mask uint16) Field {
	if value&^0xfff != 0 || (mask&^0xfff != 0 && mask != 0xffff) {
		return mfBad(mfTCPFlags, mfReg.infos[mfTCPFlags].Name, "flags 0x%x/0x%x outside 0xfff", value, mask)
	}
	return mfU16Masked(mfTCPFlags, value, mask)
}

// ICMPv4Type matches the ICMP type.
func ICMPv4Type(t uint8) Field { return mfU8(mfICMPv4Type, t) }

// ICMPv4Code matches the ICMP code.
func ICMPv4Code(c uint8) Field { return mfU8(mfICMPv4Code, c) }

// ICMPv6Type matches the ICMPv6 type.
func ICMPv6Type(t uint8) Field { return mfU8(mfICMPv6Type, t) }

// ICMPv6Code matches the ICMPv6 code.
func ICMPv6Code(c uint8) Field { return mfU8(mfICMPv6Code, c) }

// NDTarget matches the target address of an IPv6 neighbour solicitation or
// advertisement.
func NDTarget(ip netip.Addr) Field { return mfIPv6(mfNDTarget, ip) }

// NDSLL matches the source link-layer address option of a neighbour
// solicitation.
func NDSLL(mac net.HardwareAddr) Field { return mfMAC(mfNDSLL, mac, nil) }

// NDTLL matches the target link-layer address option of a neighbour
// advertisement.
func NDTLL(mac net.HardwareAddr) Field { return mfMAC(mfNDTLL, mac, nil) }

// NDReserved is the 32 bits after the target of a neighbour discovery
// message's header: in an advertisement, its flags (NDRouter, NDSolicited,
// NDOverride) and reserved bits. Open vSwitch sets it, it matches nothing.
func NDReserved(v uint32) Field { return mfU32(mfNDReserved, v) }

// The flags of a neighbour advertisement (RFC 4861), in NDReserved.
const (
	NDRouter    uint32 = 0x80000000
	NDSolicited uint32 = 0x40000000
	NDOverride  uint32 = 0x20000000
)

// NDOptionsType is the type of a neighbour discovery message's link-layer
// address option: 1 source (a solicitation's), 2 target (an
// advertisement's). Setting it to 2 makes a solicitation's option an
// advertisement's, whose address NDTLL then sets.
func NDOptionsType(t uint8) Field { return mfU8(mfNDOptionsType, t) }

// ARPOp matches the ARP opcode (1 request, 2 reply).
func ARPOp(op uint16) Field { return mfU16(mfARPOp, op) }

// ARPSpa matches the ARP sender protocol address.
func ARPSpa(ip netip.Addr) Field { return mfIPv4(mfARPSpa, ip) }

// ARPTpa matches the ARP target protocol address.
func ARPTpa(ip netip.Addr) Field { return mfIPv4(mfARPTpa, ip) }

// ARPSpaPrefix matches ARP sender protocol addresses in p.
func ARPSpaPrefix(p netip.Prefix) Field { return mfIPv4Prefix(mfARPSpa, p) }

// ARPTpaPrefix matches ARP target protocol addresses in p.
func ARPTpaPrefix(p netip.Prefix) Field { return mfIPv4Prefix(mfARPTpa, p) }

// ARPSha matches the ARP sender hardware address.
func ARPSha(mac net.HardwareAddr) Field { return mfMAC(mfARPSha, mac, nil) }

// ARPTha matches the ARP target hardware address.
func ARPTha(mac net.HardwareAddr) Field { return mfMAC(mfARPTha, mac, nil) }

// MPLSLabel matches the 20-bit label of the outermost MPLS entry.
func MPLSLabel(label uint32) Field {
	if label > 0xfffff {
		return mfBad(mfMPLSLabel, mfReg.infos[mfMPLSLabel].Name, "label 0x%x exceeds 20 bits", label)
	}
	return mfU32(mfMPLSLabel, label)
}

// TunnelID matches the tunnel id (VXLAN VNI, Geneve VNI, GRE key).
func TunnelID(id uint64) Field { return mfField(mfTunID, mfBE64(id), nil) }

// TunnelIDMasked matches the tunnel id bits set in mask.
func TunnelIDMasked(id, mask uint64) Field { return mfU64Masked(mfTunID, id, mask) }

// TunIPv4Src matches the outer IPv4 source of a received tunnel packet.
func TunIPv4Src(ip netip.Addr) Field { return mfIPv4(mfTunSrc, ip) }

// TunIPv4Dst matches the outer IPv4 destination of a received tunnel packet.
func TunIPv4Dst(ip netip.Addr) Field { return mfIPv4(mfTunDst, ip) }

// TunIPv6Src matches the outer IPv6 source of a received tunnel packet.
func TunIPv6Src(ip netip.Addr) Field { return mfIPv6(mfTunIPv6Src, ip) }

// TunIPv6Dst matches the outer IPv6 destination of a received tunnel packet.
func TunIPv6Dst(ip netip.Addr) Field { return mfIPv6(mfTunIPv6Dst, ip) }

// Reg matches the bits of register i (0-15) set in mask. A mask of
// 0xffffffff is an exact match; a mask of 0 matches anything and the field
// is left out when encoding.
func Reg(i int, value, mask uint32) Field {
	if i < 0 || i > 15 {
		return mfBad(mfReg0, "reg", "register index %d outside 0..15", i)
	}
	return mfU32Masked(mfReg0+mfID(i), value, mask)
}

// XReg matches the bits of 64-bit register xreg i (0-7; reg 2i in the high
// half, reg 2i+1 in the low half) set in mask.
func XReg(i int, value, mask uint64) Field {
	if i < 0 || i > 7 {
		return mfBad(mfXReg0, "xreg", "register index %d outside 0..7", i)
	}
	return mfU64Masked(mfXReg0+mfID(i), value, mask)
}

// XXReg matches the bits of 128-bit register xxreg i (0-3; reg 4i most
// significant) set in mask. Value and mask are big-endian.
func XXReg(i int, value, mask [16]byte) Field {
	if i < 0 || i > 3 {
		return mfBad(mfXXReg0, "xxreg", "register index %d outside 0..3", i)
	}
	return mfU128Masked(mfXXReg0+mfID(i), value, mask)
}

// Metadata matches the bits of the OpenFlow metadata register set in mask.
func Metadata(value, mask uint64) Field { return mfU64Masked(mfMetadata, value, mask) }

// PktMark matches the bits of the packet mark (skb mark) set in mask.
func PktMark(value, mask uint32) Field { return mfU32Masked(mfPktMark, value, mask) }

// ConjID matches packets whose conjunctive match with this id succeeded.
func ConjID(id uint32) Field { return mfU32(mfConjID, id) }

// CtState matches the connection tracking state: bits in mask must equal
// their value in set. CtState(CtTrk|CtEst, CtTrk|CtEst|CtNew) is
// "+est+trk-new" (printed in bit order as "-new+est+trk").
func CtState(set, mask uint32) Field { return mfU32Masked(mfCtState, set, mask) }

// CtZone matches the conntrack zone of the last ct action.
func CtZone(zone uint16) Field { return mfU16(mfCtZone, zone) }

// CtMark matches the bits of the connection's mark set in mask.
func CtMark(value, mask uint32) Field { return mfU32Masked(mfCtMark, value, mask) }

// CtLabel matches the bits of the connection's 128-bit label set in mask.
// Value and mask are big-endian.
func CtLabel(value, mask [16]byte) Field { return mfU128Masked(mfCtLabel, value, mask) }

// CtNwSrc matches the IPv4 source of the connection's original direction.
func CtNwSrc(ip netip.Addr) Field { return mfIPv4(mfCtNwSrc, ip) }

// CtNwDst matches the IPv4 destination of the connection's original
// direction.
func CtNwDst(ip netip.Addr) Field { return mfIPv4(mfCtNwDst, ip) }

// CtNwSrcPrefix matches original-direction IPv4 sources in p.
func CtNwSrcPrefix(p netip.Prefix) Field { return mfIPv4Prefix(mfCtNwSrc, p) }

// CtNwDstPrefix matches original-direction IPv4 destinations in p.
func CtNwDstPrefix(p netip.Prefix) Field { return mfIPv4Prefix(mfCtNwDst, p) }

// CtIPv6Src matches the IPv6 source of the connection's original direction.
func CtIPv6Src(ip netip.Addr) Field { return mfIPv6(mfCtIPv6Src, ip) }

// CtIPv6Dst matches the IPv6 destination of the connection's original
// direction.
func CtIPv6Dst(ip netip.Addr) Field { return mfIPv6(mfCtIPv6Dst, ip) }

// CtNwProto matches the IP protocol of the connection.
func CtNwProto(p uint8) Field { return mfU8(mfCtNwProto, p) }

// CtTpSrc matches the transport source port of the connection's original
// direction.
func CtTpSrc(port uint16) Field { return mfU16(mfCtTpSrc, port) }

// CtTpDst matches the transport destination port of the connection's
// original direction.
func CtTpDst(port uint16) Field { return mfU16(mfCtTpDst, port) }

// CtTpDstMasked matches the bits of mask of the transport destination port
// of the connection's original direction.
func CtTpDstMasked(port, mask uint16) Field { return mfU16Masked(mfCtTpDst, port, mask) }
