package openflow

import (
	"fmt"
	"strings"
)

// OXM classes.
const (
	// ClassNXM0 is NXM_0, the legacy "NXM_OF_*" fields.
	ClassNXM0 uint16 = 0x0000
	// ClassNXM1 is NXM_1, Open vSwitch's "NXM_NX_*" extension fields.
	ClassNXM1 uint16 = 0x0001
	// ClassOpenFlowBasic is OFPXMC_OPENFLOW_BASIC, the standard OXM fields.
	ClassOpenFlowBasic uint16 = 0x8000
	// ClassPacketRegs is OFPXMC_PACKET_REGS, the 64-bit xreg0-xreg7.
	ClassPacketRegs uint16 = 0x8001
	// ClassEricsson is the class of Open vSwitch's "ERICOXM_OF_*" fields
	// (the neighbour discovery message's reserved field and option type).
	ClassEricsson uint16 = 0x1000
	// ClassExperimenter marks an experimenter OXM: a 4-byte experimenter id
	// follows the header and counts in its length.
	ClassExperimenter uint16 = 0xffff
)

// FieldID is the wire identity of an OXM/NXM field: class, field number and,
// for class 0xffff only, the experimenter id.
type FieldID struct {
	Class        uint16
	Field        uint8
	Experimenter uint32
}

// String renders the id as "class 0x8000 field 4" (with the experimenter id
// for class 0xffff).
func (id FieldID) String() string {
	if id.Class == ClassExperimenter {
		return fmt.Sprintf("class 0x%04x experimenter 0x%08x field %d", id.Class, id.Experimenter, id.Field)
	}
	return fmt.Sprintf("class 0x%04x field %d", id.Class, id.Field)
}

// FieldInfo describes a match field that Open vSwitch 3.1 knows: its names,
// the headers that carry it, and its width.
//
// A field may travel under several headers (eth_src as OXM_OF_ETH_SRC or
// NXM_OF_ETH_SRC; tcp_flags as ONF experimenter, NXM_NX_TCP_FLAGS or, in
// OpenFlow 1.5, OXM_OF_TCP_FLAGS). LookupField maps each of them to the same
// FieldInfo. Class, Field and Experimenter hold the header Open vSwitch uses
// for the field in OpenFlow 1.3 matches and set_field actions; NXM holds the
// one it uses inside Nicira actions (reg_move, reg_load, learn, output_reg).
type FieldInfo struct {
	// Name is Open vSwitch's field name, as set_field prints it: "eth_src",
	// "ip_dst", "reg0", "ct_mark".
	Name string
	// NXMName is the name ovs-ofctl prints for the field inside brackets in
	// move, load, learn and output_reg: "NXM_OF_ETH_SRC", "NXM_NX_REG0",
	// "OXM_OF_METADATA".
	NXMName string

	Class        uint16
	Field        uint8
	Experimenter uint32

	// Bytes is the width of the value on the wire.
	Bytes int
	// Bits is the number of significant bits, as Open vSwitch counts them
	// for subfields (vlan_vid: 12, ip_dscp: 6, tcp_flags: 12).
	Bits int
	// Maskable reports whether the field accepts arbitrary bitwise masks.
	Maskable bool
	// Writable reports whether set_field, load and move may write the field
	// (ct_mark and ct_label only inside ct(commit,exec(...))).
	Writable bool
	// Prerequisite names what the match must establish before the field,
	// in Open vSwitch's terms: "", "Ethernet", "IPv4", "IPv4/IPv6", "TCP",
	// "ICMPv6", "ND solicit", "CT", ...
	Prerequisite string

	// NXM is the header used for the field inside Nicira actions.
	NXM FieldID
	// Headers lists every header that decodes to this field; the first is
	// the one in Class, Field and Experimenter. The slice is shared by every
	// copy of the FieldInfo: do not modify it.
	Headers []FieldID
	// Aliases lists other names FieldByName accepts: "dl_src", "nw_src",
	// "tp_src", OXM names. Shared like Headers.
	Aliases []string

	id      mfID
	format  mfFormat
	valid   []byte  // significant value bits (Bits of them, vlan_vid 0x1fff)
	keepFul bool    // keep a mask that covers every significant bit (flag fields)
	slots   mfSlots // the packet data the field matches on; see mfSlots
}

// mfSlots is a set of storage slots, one bit per mfID. Two fields that
// match on the same packet data (reg0 and xreg0, vlan_tci and vlan_vid,
// in_port and in_port_oxm, nw_tos and ip_dscp) share a slot, and a match
// may hold only one of them, as Open vSwitch requires.
type mfSlots [(mfCount + 63) / 64]uint64

func (s *mfSlots) add(id mfID) { s[id/64] |= 1 << (id % 64) }

// overlaps reports a slot in both sets.
func (s *mfSlots) overlaps(o *mfSlots) bool {
	for i := range s {
		if s[i]&o[i] != 0 {
			return true
		}
	}
	return false
}

// union adds o's slots to s.
func (s *mfSlots) union(o *mfSlots) {
	for i := range s {
		s[i] |= o[i]
	}
}

// ID returns the header in Class, Field and Experimenter.
func (i FieldInfo) ID() FieldID {
	return FieldID{Class: i.Class, Field: i.Field, Experimenter: i.Experimenter}
}

// Make returns a field under i's preferred header with the given value and
// mask; a nil mask asks for an exact match. The slices are copied. (The
// method cannot be called Field: that is the struct field holding the field
// number.)
func (i FieldInfo) Make(value, mask []byte) Field {
	f := Field{Class: i.Class, Field: i.Field, Experimenter: i.Experimenter, Value: clone(value)}
	if mask != nil {
		f.Mask = append([]byte{}, mask...)
	}
	return f
}

// mfID identifies a field independently of the header that carries it.
type mfID uint8

const (
	mfUnknown mfID = iota
	mfPacketType
	mfDpHash
	mfRecircID
	mfConjID
	mfInPort    // NXM_OF_IN_PORT, 16 bits
	mfInPortOXM // OXM_OF_IN_PORT, 32 bits
	mfActsetOutput
	mfEthSrc
	mfEthDst
	mfEthType
	mfVlanTCI
	mfVlanVID
	mfVlanPCP
	mfMPLSLabel
	mfMPLSTC
	mfMPLSBOS
	mfMPLSTTL
	mfIPv4Src
	mfIPv4Dst
	mfIPv6Src
	mfIPv6Dst
	mfIPFrag
	mfIPDSCP // OXM, 6 bits
	mfNwTOS  // NXM, 8 bits
	mfIPECN
	mfNwTTL
	mfIPv6Label
	mfIPProto
	mfTCPSrc
	mfTCPDst
	mfUDPSrc
	mfUDPDst
	mfSCTPSrc
	mfSCTPDst
	mfTCPFlags
	mfICMPv4Type
	mfICMPv4Code
	mfICMPv6Type
	mfICMPv6Code
	mfNDTarget
	mfNDSLL
	mfNDTLL
	mfNDReserved
	mfNDOptionsType
	mfARPOp
	mfARPSpa
	mfARPTpa
	mfARPSha
	mfARPTha
	mfTunID
	mfTunFlags
	mfTunSrc
	mfTunDst
	mfTunIPv6Src
	mfTunIPv6Dst
	mfTunGBPID
	mfTunGBPFlags
	mfReg0 // mfReg0 + n is reg<n>, n < 16
)

// The register overlays and the fields after the registers.
const (
	mfXReg0   = mfReg0 + 16  // mfXReg0 + n is xreg<n>, n < 8
	mfXXReg0  = mfXReg0 + 8  // mfXXReg0 + n is xxreg<n>, n < 4
	mfPktMark = mfXXReg0 + 4 // first field after the registers
)

const (
	mfCtState = mfPktMark + 1 + iota
	mfCtZone
	mfCtMark
	mfCtLabel
	mfCtNwSrc
	mfCtIPv6Src
	mfCtNwDst
	mfCtIPv6Dst
	mfCtNwProto
	mfCtTpSrc
	mfCtTpDst
	mfMetadata
	mfCount
)

// mfFormat says how a field's value is written in text.
type mfFormat uint8

const (
	fmtHex        mfFormat = iota // 0x1f, 0 for zero
	fmtDec                        // 31
	fmtIPv4                       // 10.0.0.1
	fmtIPv6                       // fe80::1
	fmtEthernet                   // 0a:58:0a:80:00:01
	fmtPort16                     // OpenFlow 1.0 port: 1, LOCAL
	fmtPort32                     // OpenFlow 1.1+ port: 1, LOCAL
	fmtCtState                    // +trk+est, new|trk
	fmtTCPFlags                   // +syn-ack, syn|ack
	fmtTunFlags                   // oam
	fmtFrag                       // no, yes, first, later, not_later
	fmtPacketType                 // (1,0x800)
)

// Header sets for the registry below.
func mfOXM(field uint8) FieldID  { return FieldID{Class: ClassOpenFlowBasic, Field: field} }
func mfNXM0(field uint8) FieldID { return FieldID{Class: ClassNXM0, Field: field} }
func mfNXM1(field uint8) FieldID { return FieldID{Class: ClassNXM1, Field: field} }
func mfONF(field uint8) FieldID {
	return FieldID{Class: ClassExperimenter, Field: field, Experimenter: ExperimenterONF}
}

// mfDef is one row of the field table; mfInit turns it into a FieldInfo.
type mfDef struct {
	id       mfID
	name     string
	nxmName  string
	headers  []FieldID // first: match/set_field header; NXM header chosen by nxm
	nxm      int       // index into headers of the Nicira-action header
	bytes    int
	bits     int
	maskable bool
	writable bool
	prereq   string
	format   mfFormat
	aliases  []string
}

// mfTable lists the fields. Facts from ovs-fields(7) of Open vSwitch 3.1 and
// checked with ovs-ofctl.
var mfTable = []mfDef{
	{id: mfPacketType, name: "packet_type", nxmName: "OXM_OF_PACKET_TYPE", headers: []FieldID{mfOXM(44)}, bytes: 4, bits: 32, format: fmtPacketType},
	{id: mfDpHash, name: "dp_hash", nxmName: "NXM_NX_DP_HASH", headers: []FieldID{mfNXM1(35), {Class: ClassExperimenter, Field: 0, Experimenter: ExperimenterNicira}}, bytes: 4, bits: 32, maskable: true, format: fmtHex},
	{id: mfRecircID, name: "recirc_id", nxmName: "NXM_NX_RECIRC_ID", headers: []FieldID{mfNXM1(36)}, bytes: 4, bits: 32, format: fmtHex},
	{id: mfConjID, name: "conj_id", nxmName: "NXM_NX_CONJ_ID", headers: []FieldID{mfNXM1(37)}, bytes: 4, bits: 32, format: fmtDec},
	{id: mfInPort, name: "in_port", nxmName: "NXM_OF_IN_PORT", headers: []FieldID{mfNXM0(0)}, bytes: 2, bits: 16, writable: true, format: fmtPort16},
	{id: mfInPortOXM, name: "in_port_oxm", nxmName: "OXM_OF_IN_PORT", headers: []FieldID{mfOXM(0)}, bytes: 4, bits: 32, writable: true, format: fmtPort32},
	{id: mfActsetOutput, name: "actset_output", nxmName: "ONFOXM_ET_ACTSET_OUTPUT", headers: []FieldID{mfONF(43), mfOXM(43)}, bytes: 4, bits: 32, format: fmtPort32, aliases: []string{"OXM_OF_ACTSET_OUTPUT"}},
	{id: mfEthSrc, name: "eth_src", nxmName: "NXM_OF_ETH_SRC", headers: []FieldID{mfOXM(4), mfNXM0(2)}, nxm: 1, bytes: 6, bits: 48, maskable: true, writable: true, prereq: "Ethernet", format: fmtEthernet, aliases: []string{"dl_src", "OXM_OF_ETH_SRC"}},
	{id: mfEthDst, name: "eth_dst", nxmName: "NXM_OF_ETH_DST", headers: []FieldID{mfOXM(3), mfNXM0(1)}, nxm: 1, bytes: 6, bits: 48, maskable: true, writable: true, prereq: "Ethernet", format: fmtEthernet, aliases: []string{"dl_dst", "OXM_OF_ETH_DST"}},
	{id: mfEthType, name: "eth_type", nxmName: "NXM_OF_ETH_TYPE", headers: []FieldID{mfOXM(5), mfNXM0(3)}, nxm: 1, bytes: 2, bits: 16, prereq: "Ethernet", format: fmtHex, aliases: []string{"dl_type", "OXM_OF_ETH_TYPE"}},
	{id: mfVlanTCI, name: "vlan_tci", nxmName: "NXM_OF_VLAN_TCI", headers: []FieldID{mfNXM0(4)}, bytes: 2, bits: 16, maskable: true, writable: true, prereq: "Ethernet", format: fmtHex},
	{id: mfVlanVID, name: "vlan_vid", nxmName: "OXM_OF_VLAN_VID", headers: []FieldID{mfOXM(6)}, bytes: 2, bits: 12, maskable: true, writable: true, prereq: "Ethernet", format: fmtDec},
	{id: mfVlanPCP, name: "vlan_pcp", nxmName: "OXM_OF_VLAN_PCP", headers: []FieldID{mfOXM(7)}, bytes: 1, bits: 3, writable: true, prereq: "VLAN VID", format: fmtDec},
	{id: mfMPLSLabel, name: "mpls_label", nxmName: "OXM_OF_MPLS_LABEL", headers: []FieldID{mfOXM(34)}, bytes: 4, bits: 20, writable: true, prereq: "MPLS", format: fmtDec},
	{id: mfMPLSTC, name: "mpls_tc", nxmName: "OXM_OF_MPLS_TC", headers: []FieldID{mfOXM(35)}, bytes: 1, bits: 3, writable: true, prereq: "MPLS", format: fmtDec},
	{id: mfMPLSBOS, name: "mpls_bos", nxmName: "OXM_OF_MPLS_BOS", headers: []FieldID{mfOXM(36)}, bytes: 1, bits: 1, prereq: "MPLS", format: fmtDec},
	{id: mfMPLSTTL, name: "mpls_ttl", nxmName: "NXM_NX_MPLS_TTL", headers: []FieldID{mfNXM1(30)}, bytes: 1, bits: 8, writable: true, prereq: "MPLS", format: fmtDec},
	{id: mfIPv4Src, name: "ip_src", nxmName: "NXM_OF_IP_SRC", headers: []FieldID{mfOXM(11), mfNXM0(7)}, nxm: 1, bytes: 4, bits: 32, maskable: true, writable: true, prereq: "IPv4", format: fmtIPv4, aliases: []string{"nw_src", "ipv4_src", "OXM_OF_IPV4_SRC"}},
	{id: mfIPv4Dst, name: "ip_dst", nxmName: "NXM_OF_IP_DST", headers: []FieldID{mfOXM(12), mfNXM0(8)}, nxm: 1, bytes: 4, bits: 32, maskable: true, writable: true, prereq: "IPv4", format: fmtIPv4, aliases: []string{"nw_dst", "ipv4_dst", "OXM_OF_IPV4_DST"}},
	{id: mfIPv6Src, name: "ipv6_src", nxmName: "NXM_NX_IPV6_SRC", headers: []FieldID{mfOXM(26), mfNXM1(19)}, nxm: 1, bytes: 16, bits: 128, maskable: true, writable: true, prereq: "IPv6", format: fmtIPv6, aliases: []string{"OXM_OF_IPV6_SRC"}},
	{id: mfIPv6Dst, name: "ipv6_dst", nxmName: "NXM_NX_IPV6_DST", headers: []FieldID{mfOXM(27), mfNXM1(20)}, nxm: 1, bytes: 16, bits: 128, maskable: true, writable: true, prereq: "IPv6", format: fmtIPv6, aliases: []string{"OXM_OF_IPV6_DST"}},
	{id: mfIPFrag, name: "ip_frag", nxmName: "NXM_NX_IP_FRAG", headers: []FieldID{mfNXM1(26)}, bytes: 1, bits: 2, maskable: true, prereq: "IPv4/IPv6", format: fmtFrag, aliases: []string{"nw_frag"}},
	{id: mfIPDSCP, name: "ip_dscp", nxmName: "OXM_OF_IP_DSCP", headers: []FieldID{mfOXM(8)}, bytes: 1, bits: 6, writable: true, prereq: "IPv4/IPv6", format: fmtDec},
	{id: mfNwTOS, name: "nw_tos", nxmName: "NXM_OF_IP_TOS", headers: []FieldID{mfNXM0(5)}, bytes: 1, bits: 8, writable: true, prereq: "IPv4/IPv6", format: fmtDec},
	{id: mfIPECN, name: "nw_ecn", nxmName: "NXM_NX_IP_ECN", headers: []FieldID{mfOXM(9), mfNXM1(28)}, nxm: 1, bytes: 1, bits: 2, writable: true, prereq: "IPv4/IPv6", format: fmtDec, aliases: []string{"ip_ecn", "OXM_OF_IP_ECN"}},
	{id: mfNwTTL, name: "nw_ttl", nxmName: "NXM_NX_IP_TTL", headers: []FieldID{mfNXM1(29)}, bytes: 1, bits: 8, writable: true, prereq: "IPv4/IPv6", format: fmtDec},
	{id: mfIPv6Label, name: "ipv6_label", nxmName: "NXM_NX_IPV6_LABEL", headers: []FieldID{mfOXM(28), mfNXM1(27)}, nxm: 1, bytes: 4, bits: 20, maskable: true, writable: true, prereq: "IPv6", format: fmtHex, aliases: []string{"OXM_OF_IPV6_FLABEL"}},
	{id: mfIPProto, name: "nw_proto", nxmName: "NXM_OF_IP_PROTO", headers: []FieldID{mfOXM(10), mfNXM0(6)}, nxm: 1, bytes: 1, bits: 8, prereq: "IPv4/IPv6", format: fmtDec, aliases: []string{"ip_proto", "OXM_OF_IP_PROTO"}},
	{id: mfTCPSrc, name: "tcp_src", nxmName: "NXM_OF_TCP_SRC", headers: []FieldID{mfOXM(13), mfNXM0(9)}, nxm: 1, bytes: 2, bits: 16, maskable: true, writable: true, prereq: "TCP", format: fmtDec, aliases: []string{"tp_src", "OXM_OF_TCP_SRC"}},
	{id: mfTCPDst, name: "tcp_dst", nxmName: "NXM_OF_TCP_DST", headers: []FieldID{mfOXM(14), mfNXM0(10)}, nxm: 1, bytes: 2, bits: 16, maskable: true, writable: true, prereq: "TCP", format: fmtDec, aliases: []string{"tp_dst", "OXM_OF_TCP_DST"}},
	{id: mfUDPSrc, name: "udp_src", nxmName: "NXM_OF_UDP_SRC", headers: []FieldID{mfOXM(15), mfNXM0(11)}, nxm: 1, bytes: 2, bits: 16, maskable: true, writable: true, prereq: "UDP", format: fmtDec, aliases: []string{"OXM_OF_UDP_SRC"}},
	{id: mfUDPDst, name: "udp_dst", nxmName: "NXM_OF_UDP_DST", headers: []FieldID{mfOXM(16), mfNXM0(12)}, nxm: 1, bytes: 2, bits: 16, maskable: true, writable: true, prereq: "UDP", format: fmtDec, aliases: []string{"OXM_OF_UDP_DST"}},
	{id: mfSCTPSrc, name: "sctp_src", nxmName: "OXM_OF_SCTP_SRC", headers: []FieldID{mfOXM(17)}, bytes: 2, bits: 16, maskable: true, writable: true, prereq: "SCTP", format: fmtDec},
	{id: mfSCTPDst, name: "sctp_dst", nxmName: "OXM_OF_SCTP_DST", headers: []FieldID{mfOXM(18)}, bytes: 2, bits: 16, maskable: true, writable: true, prereq: "SCTP", format: fmtDec},
	{id: mfTCPFlags, name: "tcp_flags", nxmName: "NXM_NX_TCP_FLAGS", headers: []FieldID{mfONF(42), mfNXM1(34), mfOXM(42)}, nxm: 1, bytes: 2, bits: 12, maskable: true, prereq: "TCP", format: fmtTCPFlags, aliases: []string{"ONFOXM_ET_TCP_FLAGS", "OXM_OF_TCP_FLAGS"}},
	{id: mfICMPv4Type, name: "icmp_type", nxmName: "NXM_OF_ICMP_TYPE", headers: []FieldID{mfOXM(19), mfNXM0(13)}, nxm: 1, bytes: 1, bits: 8, writable: true, prereq: "ICMPv4", format: fmtDec, aliases: []string{"icmpv4_type", "OXM_OF_ICMPV4_TYPE"}},
	{id: mfICMPv4Code, name: "icmp_code", nxmName: "NXM_OF_ICMP_CODE", headers: []FieldID{mfOXM(20), mfNXM0(14)}, nxm: 1, bytes: 1, bits: 8, writable: true, prereq: "ICMPv4", format: fmtDec, aliases: []string{"icmpv4_code", "OXM_OF_ICMPV4_CODE"}},
	{id: mfICMPv6Type, name: "icmpv6_type", nxmName: "NXM_NX_ICMPV6_TYPE", headers: []FieldID{mfOXM(29), mfNXM1(21)}, nxm: 1, bytes: 1, bits: 8, writable: true, prereq: "ICMPv6", format: fmtDec, aliases: []string{"OXM_OF_ICMPV6_TYPE"}},
	{id: mfICMPv6Code, name: "icmpv6_code", nxmName: "NXM_NX_ICMPV6_CODE", headers: []FieldID{mfOXM(30), mfNXM1(22)}, nxm: 1, bytes: 1, bits: 8, writable: true, prereq: "ICMPv6", format: fmtDec, aliases: []string{"OXM_OF_ICMPV6_CODE"}},
	{id: mfNDTarget, name: "nd_target", nxmName: "NXM_NX_ND_TARGET", headers: []FieldID{mfOXM(31), mfNXM1(23)}, nxm: 1, bytes: 16, bits: 128, maskable: true, writable: true, prereq: "ND", format: fmtIPv6, aliases: []string{"OXM_OF_IPV6_ND_TARGET"}},
	{id: mfNDSLL, name: "nd_sll", nxmName: "NXM_NX_ND_SLL", headers: []FieldID{mfOXM(32), mfNXM1(24)}, nxm: 1, bytes: 6, bits: 48, maskable: true, writable: true, prereq: "ND solicit", format: fmtEthernet, aliases: []string{"OXM_OF_IPV6_ND_SLL"}},
	{id: mfNDTLL, name: "nd_tll", nxmName: "NXM_NX_ND_TLL", headers: []FieldID{mfOXM(33), mfNXM1(25)}, nxm: 1, bytes: 6, bits: 48, maskable: true, writable: true, prereq: "ND advert", format: fmtEthernet, aliases: []string{"OXM_OF_IPV6_ND_TLL"}},
	{id: mfNDReserved, name: "nd_reserved", nxmName: "ERICOXM_OF_ICMPV6_ND_RESERVED", headers: []FieldID{{Class: ClassEricsson, Field: 1}}, bytes: 4, bits: 32, writable: true, prereq: "ND", format: fmtDec},
	{id: mfNDOptionsType, name: "nd_options_type", nxmName: "ERICOXM_OF_ICMPV6_ND_OPTIONS_TYPE", headers: []FieldID{{Class: ClassEricsson, Field: 2}}, bytes: 1, bits: 8, writable: true, prereq: "ND", format: fmtDec},
	{id: mfARPOp, name: "arp_op", nxmName: "NXM_OF_ARP_OP", headers: []FieldID{mfOXM(21), mfNXM0(15)}, nxm: 1, bytes: 2, bits: 16, writable: true, prereq: "ARP", format: fmtDec, aliases: []string{"OXM_OF_ARP_OP"}},
	{id: mfARPSpa, name: "arp_spa", nxmName: "NXM_OF_ARP_SPA", headers: []FieldID{mfOXM(22), mfNXM0(16)}, nxm: 1, bytes: 4, bits: 32, maskable: true, writable: true, prereq: "ARP", format: fmtIPv4, aliases: []string{"OXM_OF_ARP_SPA"}},
	{id: mfARPTpa, name: "arp_tpa", nxmName: "NXM_OF_ARP_TPA", headers: []FieldID{mfOXM(23), mfNXM0(17)}, nxm: 1, bytes: 4, bits: 32, maskable: true, writable: true, prereq: "ARP", format: fmtIPv4, aliases: []string{"OXM_OF_ARP_TPA"}},
	{id: mfARPSha, name: "arp_sha", nxmName: "NXM_NX_ARP_SHA", headers: []FieldID{mfOXM(24), mfNXM1(17)}, nxm: 1, bytes: 6, bits: 48, maskable: true, writable: true, prereq: "ARP", format: fmtEthernet, aliases: []string{"OXM_OF_ARP_SHA"}},
	{id: mfARPTha, name: "arp_tha", nxmName: "NXM_NX_ARP_THA", headers: []FieldID{mfOXM(25), mfNXM1(18)}, nxm: 1, bytes: 6, bits: 48, maskable: true, writable: true, prereq: "ARP", format: fmtEthernet, aliases: []string{"OXM_OF_ARP_THA"}},
	{id: mfTunID, name: "tun_id", nxmName: "NXM_NX_TUN_ID", headers: []FieldID{mfOXM(38), mfNXM1(16)}, nxm: 1, bytes: 8, bits: 64, maskable: true, writable: true, format: fmtHex, aliases: []string{"tunnel_id", "OXM_OF_TUNNEL_ID"}},
	{id: mfTunFlags, name: "tun_flags", nxmName: "NXM_NX_TUN_FLAGS", headers: []FieldID{mfNXM1(104)}, bytes: 2, bits: 1, maskable: true, writable: true, format: fmtTunFlags},
	{id: mfTunSrc, name: "tun_src", nxmName: "NXM_NX_TUN_IPV4_SRC", headers: []FieldID{mfNXM1(31)}, bytes: 4, bits: 32, maskable: true, writable: true, format: fmtIPv4},
	{id: mfTunDst, name: "tun_dst", nxmName: "NXM_NX_TUN_IPV4_DST", headers: []FieldID{mfNXM1(32)}, bytes: 4, bits: 32, maskable: true, writable: true, format: fmtIPv4},
	{id: mfTunIPv6Src, name: "tun_ipv6_src", nxmName: "NXM_NX_TUN_IPV6_SRC", headers: []FieldID{mfNXM1(109)}, bytes: 16, bits: 128, maskable: true, writable: true, format: fmtIPv6},
	{id: mfTunIPv6Dst, name: "tun_ipv6_dst", nxmName: "NXM_NX_TUN_IPV6_DST", headers: []FieldID{mfNXM1(110)}, bytes: 16, bits: 128, maskable: true, writable: true, format: fmtIPv6},
	{id: mfTunGBPID, name: "tun_gbp_id", nxmName: "NXM_NX_TUN_GBP_ID", headers: []FieldID{mfNXM1(38)}, bytes: 2, bits: 16, maskable: true, writable: true, format: fmtDec},
	{id: mfTunGBPFlags, name: "tun_gbp_flags", nxmName: "NXM_NX_TUN_GBP_FLAGS", headers: []FieldID{mfNXM1(39)}, bytes: 1, bits: 8, maskable: true, writable: true, format: fmtHex},
	{id: mfPktMark, name: "pkt_mark", nxmName: "NXM_NX_PKT_MARK", headers: []FieldID{mfNXM1(33)}, bytes: 4, bits: 32, maskable: true, writable: true, format: fmtHex},
	{id: mfCtState, name: "ct_state", nxmName: "NXM_NX_CT_STATE", headers: []FieldID{mfNXM1(105)}, bytes: 4, bits: 32, maskable: true, format: fmtCtState},
	{id: mfCtZone, name: "ct_zone", nxmName: "NXM_NX_CT_ZONE", headers: []FieldID{mfNXM1(106)}, bytes: 2, bits: 16, format: fmtHex},
	{id: mfCtMark, name: "ct_mark", nxmName: "NXM_NX_CT_MARK", headers: []FieldID{mfNXM1(107)}, bytes: 4, bits: 32, maskable: true, writable: true, format: fmtHex},
	{id: mfCtLabel, name: "ct_label", nxmName: "NXM_NX_CT_LABEL", headers: []FieldID{mfNXM1(108)}, bytes: 16, bits: 128, maskable: true, writable: true, format: fmtHex},
	{id: mfCtNwProto, name: "ct_nw_proto", nxmName: "NXM_NX_CT_NW_PROTO", headers: []FieldID{mfNXM1(119)}, bytes: 1, bits: 8, prereq: "CT", format: fmtDec},
	{id: mfCtNwSrc, name: "ct_nw_src", nxmName: "NXM_NX_CT_NW_SRC", headers: []FieldID{mfNXM1(120)}, bytes: 4, bits: 32, maskable: true, prereq: "CT", format: fmtIPv4},
	{id: mfCtNwDst, name: "ct_nw_dst", nxmName: "NXM_NX_CT_NW_DST", headers: []FieldID{mfNXM1(121)}, bytes: 4, bits: 32, maskable: true, prereq: "CT", format: fmtIPv4},
	{id: mfCtIPv6Src, name: "ct_ipv6_src", nxmName: "NXM_NX_CT_IPV6_SRC", headers: []FieldID{mfNXM1(122)}, bytes: 16, bits: 128, maskable: true, prereq: "CT", format: fmtIPv6},
	{id: mfCtIPv6Dst, name: "ct_ipv6_dst", nxmName: "NXM_NX_CT_IPV6_DST", headers: []FieldID{mfNXM1(123)}, bytes: 16, bits: 128, maskable: true, prereq: "CT", format: fmtIPv6},
	{id: mfCtTpSrc, name: "ct_tp_src", nxmName: "NXM_NX_CT_TP_SRC", headers: []FieldID{mfNXM1(124)}, bytes: 2, bits: 16, maskable: true, prereq: "CT", format: fmtDec},
	{id: mfCtTpDst, name: "ct_tp_dst", nxmName: "NXM_NX_CT_TP_DST", headers: []FieldID{mfNXM1(125)}, bytes: 2, bits: 16, maskable: true, prereq: "CT", format: fmtDec},
	{id: mfMetadata, name: "metadata", nxmName: "OXM_OF_METADATA", headers: []FieldID{mfOXM(2)}, bytes: 8, bits: 64, maskable: true, writable: true, format: fmtHex},
}

// mfRegistry holds the field table indexed three ways.
type mfRegistry struct {
	infos    [mfCount]*FieldInfo
	byHeader map[FieldID]*FieldInfo
	byName   map[string]*FieldInfo
	// direct holds the headers of classes 0x0000, 0x0001, 0x8000 and
	// 0x8001 by field number, sparing the map on the encoding path.
	direct [4][128]*FieldInfo
}

// mfDirectIndex maps a class to its row in mfRegistry.direct, or -1.
func mfDirectIndex(class uint16) int {
	switch class {
	case ClassNXM0:
		return 0
	case ClassNXM1:
		return 1
	case ClassOpenFlowBasic:
		return 2
	case ClassPacketRegs:
		return 3
	}
	return -1
}

// mfReg is built by a variable initializer, not an init function, so that
// package-level variables elsewhere may call the constructors.
var mfReg = mfBuild()

func mfBuild() *mfRegistry {
	r := &mfRegistry{byHeader: map[FieldID]*FieldInfo{}, byName: map[string]*FieldInfo{}}
	defs := append([]mfDef{}, mfTable...)
	for n := 0; n < 16; n++ {
		defs = append(defs, mfDef{id: mfReg0 + mfID(n), name: fmt.Sprintf("reg%d", n), nxmName: fmt.Sprintf("NXM_NX_REG%d", n),
			headers: []FieldID{mfNXM1(uint8(n))}, bytes: 4, bits: 32, maskable: true, writable: true, format: fmtHex})
	}
	for n := 0; n < 8; n++ {
		defs = append(defs, mfDef{id: mfXReg0 + mfID(n), name: fmt.Sprintf("xreg%d", n), nxmName: fmt.Sprintf("OXM_OF_PKT_REG%d", n),
			headers: []FieldID{{Class: ClassPacketRegs, Field: uint8(n)}}, bytes: 8, bits: 64, maskable: true, writable: true, format: fmtHex})
	}
	for n := 0; n < 4; n++ {
		defs = append(defs, mfDef{id: mfXXReg0 + mfID(n), name: fmt.Sprintf("xxreg%d", n), nxmName: fmt.Sprintf("NXM_NX_XXREG%d", n),
			headers: []FieldID{mfNXM1(uint8(111 + n))}, bytes: 16, bits: 128, maskable: true, writable: true, format: fmtHex})
	}
	for _, d := range defs {
		r.add(d)
	}
	return r
}

// add puts one field in the lookup tables. It panics on a duplicate, which
// would be a bug in the table.
func (r *mfRegistry) add(d mfDef) {
	h := d.headers[0]
	info := &FieldInfo{
		Name: d.name, NXMName: d.nxmName,
		Class: h.Class, Field: h.Field, Experimenter: h.Experimenter,
		Bytes: d.bytes, Bits: d.bits, Maskable: d.maskable, Writable: d.writable,
		Prerequisite: d.prereq,
		NXM:          d.headers[d.nxm],
		Headers:      d.headers,
		Aliases:      d.aliases,
		id:           d.id,
		format:       d.format,
	}
	info.valid = make([]byte, d.bytes)
	for bit := 0; bit < d.bits; bit++ {
		info.valid[d.bytes-1-bit/8] |= 1 << (bit % 8)
	}
	switch d.id {
	case mfVlanVID:
		info.valid[0] |= 0x10 // the OXM "VLAN present" bit
	case mfNwTOS:
		info.valid[0] = 0xfc // the DSCP bits of the ToS byte
	case mfTCPFlags, mfTunFlags:
		info.keepFul = true
	}
	switch {
	case d.id >= mfXReg0 && d.id < mfXXReg0:
		n := 2 * (d.id - mfXReg0)
		info.slots.add(mfReg0 + n)
		info.slots.add(mfReg0 + n + 1)
	case d.id >= mfXXReg0 && d.id < mfPktMark:
		for k := mfID(0); k < 4; k++ {
			info.slots.add(mfReg0 + 4*(d.id-mfXXReg0) + k)
		}
	case d.id == mfVlanTCI:
		info.slots.add(mfVlanVID)
		info.slots.add(mfVlanPCP)
	case d.id == mfInPort:
		info.slots.add(mfInPortOXM)
	case d.id == mfNwTOS:
		info.slots.add(mfIPDSCP)
	default:
		info.slots.add(d.id)
	}
	if r.infos[d.id] != nil {
		panic("openflow: duplicate field id for " + d.name)
	}
	r.infos[d.id] = info
	for _, hd := range d.headers {
		if _, dup := r.byHeader[hd]; dup {
			panic("openflow: duplicate field header " + hd.String())
		}
		r.byHeader[hd] = info
		if i := mfDirectIndex(hd.Class); i >= 0 {
			r.direct[i][hd.Field&0x7f] = info
		}
	}
	names := append([]string{d.name, d.nxmName}, d.aliases...)
	for _, n := range names {
		k := strings.ToLower(n)
		if prev, dup := r.byName[k]; dup && prev != info {
			panic("openflow: duplicate field name " + n)
		}
		r.byName[k] = info
	}
}

// LookupField returns the field carried by the given header. The
// experimenter id is only looked at for class 0xffff. The returned
// FieldInfo may name a different, preferred header for the same field.
func LookupField(class uint16, field uint8, experimenter uint32) (FieldInfo, bool) {
	if p := mfLookup(class, field, experimenter); p != nil {
		return *p, true
	}
	return FieldInfo{}, false
}

// mfLookup is LookupField without the copy.
func mfLookup(class uint16, field uint8, experimenter uint32) *FieldInfo {
	if i := mfDirectIndex(class); i >= 0 {
		if field > 0x7f {
			return nil
		}
		return mfReg.direct[i][field]
	}
	if class != ClassExperimenter {
		experimenter = 0
	}
	return mfReg.byHeader[FieldID{Class: class, Field: field, Experimenter: experimenter}]
}

// mfOf returns the registry entry for a field's header, or nil.
func mfOf(f *Field) *FieldInfo { return mfLookup(f.Class, f.Field, f.Experimenter) }

// FieldByName looks a field up by its Open vSwitch name ("reg0", "eth_src",
// "ip_dst", "ct_mark"), an alias ("dl_src", "nw_dst", "tp_dst") or its
// NXM/OXM name ("NXM_NX_REG0", "NXM_OF_ETH_SRC", "OXM_OF_IPV4_DST").
// Names are matched without regard to case.
func FieldByName(name string) (FieldInfo, bool) {
	if p := mfReg.byName[strings.ToLower(name)]; p != nil {
		return *p, true
	}
	return FieldInfo{}, false
}

// RegisteredFields returns every field in the registry, in no particular
// order.
func RegisteredFields() []FieldInfo {
	out := make([]FieldInfo, 0, mfCount)
	for _, p := range mfReg.infos {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}
