package openflow

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
)

// This file renders matches and field values in ovs-ofctl's syntax. The
// order and spelling follow what `ovs-ofctl -O OpenFlow15 dump-flows`
// prints, as observed with Open vSwitch 3.1.

// Flag names by bit, as ovs-ofctl spells them.
var (
	mtCtStateNames = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}
	mtTCPFlagNames = []string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr", "ns"}
	mtTunFlagNames = []string{"oam"}
)

// The flag bits each flag field supports.
const (
	mtCtStateAll  uint32 = 0xff  // the ct_state bits Open vSwitch 3.1 knows
	mtTCPFlagsAll uint32 = 0xfff // the 12 TCP flag bits
	mtTunFlagsAll uint32 = 0x1   // oam
)

// mtMatchNameOver lists the fields whose name in match text differs from
// their set_field name.
var mtMatchNameOver = map[mfID]string{
	mfInPortOXM: "in_port", mfEthSrc: "dl_src", mfEthDst: "dl_dst", mfEthType: "dl_type",
	mfIPv4Src: "nw_src", mfIPv4Dst: "nw_dst", mfIPDSCP: "nw_tos", mfIPFrag: "nw_frag",
	mfTCPSrc: "tp_src", mfTCPDst: "tp_dst", mfUDPSrc: "tp_src", mfUDPDst: "tp_dst",
	mfSCTPSrc: "tp_src", mfSCTPDst: "tp_dst",
	mfICMPv6Type: "icmp_type", mfICMPv6Code: "icmp_code",
}

// mtMatchName is the name a field has in match text.
func mtMatchName(info *FieldInfo) string {
	if n, ok := mtMatchNameOver[info.id]; ok {
		return n
	}
	return info.Name
}

// mtVal is a field's value and mask cut down to its significant bits.
// exact reports a mask covering all of them.
type mtVal struct {
	v, m  []byte
	exact bool
	set   bool
}

// mtNorm normalises a registered field whose lengths are right. It returns
// set=false for a wildcard (all-zero mask).
func mtNorm(f *Field, info *FieldInfo) mtVal {
	n := info.Bytes
	v := make([]byte, n)
	m := make([]byte, n)
	exact, zero := true, true
	for i := 0; i < n; i++ {
		mm := info.valid[i]
		if f.Mask != nil {
			mm &= f.Mask[i]
		}
		m[i] = mm
		v[i] = f.Value[i] & mm
		if mm != info.valid[i] {
			exact = false
		}
		if mm != 0 {
			zero = false
		}
	}
	return mtVal{v: v, m: m, exact: exact, set: !zero}
}

// mtUint reads up to 8 big-endian bytes.
func mtUint(b []byte) uint64 {
	var x uint64
	for _, c := range b {
		x = x<<8 | uint64(c)
	}
	return x
}

// mtHex writes b as a C "%#x" number: "0" for zero, else "0x" and the
// digits without leading zeros.
func mtHex(b []byte) string {
	i := 0
	for i < len(b) && b[i] == 0 {
		i++
	}
	if i == len(b) {
		return "0"
	}
	s := hex.EncodeToString(b[i:])
	return "0x" + strings.TrimLeft(s, "0")
}

// mtHex0x writes b in hex with a "0x" prefix even for zero ("0x0").
func mtHex0x(b []byte) string {
	if s := mtHex(b); s != "0" {
		return s
	}
	return "0x0"
}

// mtPrefixLen returns the prefix length of a contiguous mask, or -1.
func mtPrefixLen(m []byte) int {
	n := 0
	for i, c := range m {
		if c == 0xff {
			n += 8
			continue
		}
		l := bits.LeadingZeros8(^c)
		if c != byte(0xff<<(8-l)) {
			return -1
		}
		n += l
		for _, d := range m[i+1:] {
			if d != 0 {
				return -1
			}
		}
		return n
	}
	return n
}

// mtIPv4 writes an address with an optional mask: CIDR when the mask is a
// prefix, dotted otherwise.
func mtIPv4(v, m []byte, exact bool) string {
	s := netip.AddrFrom4([4]byte(v)).String()
	if exact {
		return s
	}
	if n := mtPrefixLen(m); n >= 0 {
		return s + "/" + strconv.Itoa(n)
	}
	return s + "/" + netip.AddrFrom4([4]byte(m)).String()
}

// mtIPv6Addr writes an IPv6 address as inet_ntop does: like net/netip,
// except that an IPv4-compatible address (96 zero bits, then a non-zero
// 16-bit word) ends in dotted quad.
func mtIPv6Addr(b []byte) string {
	a := [16]byte(b)
	compat := a[12]|a[13] != 0
	for _, c := range a[:12] {
		if c != 0 {
			compat = false
		}
	}
	if compat {
		return "::" + netip.AddrFrom4([4]byte(a[12:])).String()
	}
	return netip.AddrFrom16(a).String()
}

// mtIPv6 writes an IPv6 address with an optional mask.
func mtIPv6(v, m []byte, exact bool) string {
	s := mtIPv6Addr(v)
	if exact {
		return s
	}
	if n := mtPrefixLen(m); n >= 0 {
		return s + "/" + strconv.Itoa(n)
	}
	return s + "/" + mtIPv6Addr(m)
}

// mtMAC writes an Ethernet address.
func mtMAC(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(':')
		}
		sb.WriteString(hex.EncodeToString([]byte{c}))
	}
	return sb.String()
}

// mtMACMasked writes an Ethernet address with an optional mask.
func mtMACMasked(v, m []byte, exact bool) string {
	if exact {
		return mtMAC(v)
	}
	return mtMAC(v) + "/" + mtMAC(m)
}

// mtPort16 writes an OpenFlow 1.0 port number: reserved ports by name.
func mtPort16(p uint16) string {
	switch p {
	case 0xfff7:
		return "UNSET"
	case 0xfff8:
		return "IN_PORT"
	case 0xfff9:
		return "TABLE"
	case 0xfffa:
		return "NORMAL"
	case 0xfffb:
		return "FLOOD"
	case 0xfffc:
		return "ALL"
	case 0xfffd:
		return "CONTROLLER"
	case 0xfffe:
		return "LOCAL"
	case 0xffff:
		return "ANY"
	}
	return strconv.Itoa(int(p))
}

// mtPort32 writes an OpenFlow 1.1+ port number the way Open vSwitch does,
// through its 16-bit equivalent (0xffffff00 and up map to 0xff00 and up).
func mtPort32(p uint32) string {
	if p >= 0xffffff00 {
		return mtPort16(uint16(p))
	}
	return strconv.FormatUint(uint64(p), 10)
}

// mtFlags writes flag bits. With mask covering every known bit, as the set bits joined by "|" ("syn|ack", "0" for none);
// otherwise, unless pipeForm is false, each masked bit as +name or -name in
// bit order. Bits without a name are written as [hex].
func mtFlags(v, m uint32, names []string, all uint32, pipeForm bool) string {
	name := func(bit int) string {
		if bit < len(names) {
			return names[bit]
		}
		return "[" + strconv.FormatUint(uint64(1)<<bit, 16) + "]"
	}
	var sb strings.Builder
	if pipeForm && m == all {
		if v == 0 {
			return "0"
		}
		for bit := 0; bit < 32; bit++ {
			if v&(1<<bit) != 0 {
				if sb.Len() > 0 {
					sb.WriteByte('|')
				}
				sb.WriteString(name(bit))
			}
		}
		return sb.String()
	}
	for bit := 0; bit < 32; bit++ {
		if m&(1<<bit) == 0 {
			continue
		}
		if v&(1<<bit) != 0 {
			sb.WriteByte('+')
		} else {
			sb.WriteByte('-')
		}
		sb.WriteString(name(bit))
	}
	return sb.String()
}

// mtFrag writes ip_frag bits as ovs-ofctl's fragment type names.
func mtFrag(v, m byte) string {
	switch {
	case m == 3 && v == 0, m == 1 && v == 0:
		return "no"
	case m == 1 && v == 1:
		return "yes"
	case m == 3 && v == 1:
		return "first"
	case m == 3 && v == 3, m == 2 && v == 2:
		return "later"
	case m == 2 && v == 0:
		return "not_later"
	}
	return "<error>"
}

// mtPacketType writes a packet type as (namespace,type).
func mtPacketType(v []byte) string {
	ns := binary.BigEndian.Uint16(v)
	t := binary.BigEndian.Uint16(v[2:])
	if ns == 1 {
		return fmt.Sprintf("(%d,%s)", ns, mtHex(v[2:]))
	}
	return fmt.Sprintf("(%d,%d)", ns, t)
}

// mtFlagArgs returns the flag table of a flag-formatted field.
func mtFlagArgs(id mfID) (names []string, all uint32) {
	switch id {
	case mfCtState:
		return mtCtStateNames, mtCtStateAll
	case mfTCPFlags:
		return mtTCPFlagNames, mtTCPFlagsAll
	}
	return mtTunFlagNames, mtTunFlagsAll
}

// mtValue writes a normalised value in set_field syntax.
func mtValue(info *FieldInfo, x mtVal) string {
	switch info.format {
	case fmtDec:
		if x.exact {
			return strconv.FormatUint(mtUint(x.v), 10)
		}
		return strconv.FormatUint(mtUint(x.v), 10) + "/" + mtHex(x.m)
	case fmtIPv4:
		return mtIPv4(x.v, x.m, x.exact)
	case fmtIPv6:
		return mtIPv6(x.v, x.m, x.exact)
	case fmtEthernet:
		return mtMACMasked(x.v, x.m, x.exact)
	case fmtPort16:
		return mtPort16(uint16(mtUint(x.v)))
	case fmtPort32:
		return mtPort32(uint32(mtUint(x.v)))
	case fmtCtState, fmtTCPFlags, fmtTunFlags:
		names, all := mtFlagArgs(info.id)
		m := uint32(mtUint(x.m))
		if x.exact {
			m = all
		}
		return mtFlags(uint32(mtUint(x.v)), m, names, all, true)
	case fmtFrag:
		return mtFrag(x.v[0], x.m[0])
	case fmtPacketType:
		return mtPacketType(x.v)
	}
	if x.exact {
		return mtHex(x.v)
	}
	return mtHex(x.v) + "/" + mtHex(x.m)
}

// mtRaw writes the bytes of a field the registry does not know (or whose
// lengths are wrong) in hex, mask included.
func mtRaw(f *Field) string {
	s := "0x" + hex.EncodeToString(f.Value)
	if f.Mask != nil {
		s += "/0x" + hex.EncodeToString(f.Mask)
	}
	return s
}

// mtRawName names a field the registry does not know as Open vSwitch does,
// "class:field" in decimal (with the experimenter id for class 0xffff).
func mtRawName(f *Field) string {
	if f.Class == ClassExperimenter {
		return fmt.Sprintf("%d:0x%08x:%d", f.Class, f.Experimenter, f.Field)
	}
	return fmt.Sprintf("%d:%d", f.Class, f.Field)
}

// mtKnown returns the registry entry of f if its value and mask have the
// field's width, else nil.
func mtKnown(f *Field) *FieldInfo {
	info := mfOf(f)
	if info == nil || len(f.Value) != info.Bytes || (f.Mask != nil && len(f.Mask) != info.Bytes) {
		return nil
	}
	return info
}

// FormatFieldValue returns f's value (and mask, if it is not exact) the way
// ovs-ofctl prints it in set_field and learn: "10.0.0.1", "10.0.0.0/8",
// "0a:58:0a:80:00:01", "0x2", "0x1/0x1", "fe80::1", "LOCAL". Value bits
// outside the mask are cleared first. A field the registry does not know is
// written as raw hex.
func FormatFieldValue(f Field) string {
	info := mtKnown(&f)
	if info == nil {
		return mtRaw(&f)
	}
	return mtValue(info, mtNorm(&f, info))
}

// String renders f as it appears in a match, "name=value[/mask]":
// "nw_dst=10.0.0.0/8", "reg0=0x5/0xff", "ct_state=+est+trk", "dl_type=0x0800".
// A field built from an invalid argument renders as "<invalid: reason>".
func (f Field) String() string {
	if f.err != nil {
		return "<invalid: " + f.err.Error() + ">"
	}
	info := mtKnown(&f)
	if info == nil {
		return mtRawName(&f) + "=" + mtRaw(&f)
	}
	x := mtNorm(&f, info)
	switch {
	case info.id == mfEthType:
		return "dl_type=0x" + hex.EncodeToString(x.v)
	case info.id == mfIPProto:
		return "nw_proto=" + strconv.Itoa(int(x.v[0]))
	case info.id >= mfXReg0 && info.id < mfPktMark:
		return info.Name + "=" + mtValue(info, x)
	}
	if s := (Match{Fields: []Field{f}}).String(); s != "" {
		return s
	}
	return mtMatchName(info) + "=" + mtValue(info, x)
}

// mtView gathers a match's fields by meaning, merging the fields that share
// one: registers with their xreg/xxreg overlays, vlan_tci with vlan_vid and
// vlan_pcp, nw_tos with ip_dscp, the 16- and 32-bit in_port.
type mtView struct {
	f       [mfCount]mtVal
	regs    [16]uint32
	regMask [16]uint32
	tci     uint16
	tciMask uint16
	tos     mtVal
	inPort  uint32
	hasPort bool
	unknown []int
}

func (w *mtView) load(fields []Field) {
	for i := range fields {
		f := &fields[i]
		info := mtKnown(f)
		if info == nil || f.err != nil {
			w.unknown = append(w.unknown, i)
			continue
		}
		x := mtNorm(f, info)
		if !x.set {
			continue
		}
		id := info.id
		switch {
		case id >= mfReg0 && id < mfXReg0:
			n := id - mfReg0
			w.regs[n] = w.regs[n]&^uint32(mtUint(x.m)) | uint32(mtUint(x.v))
			w.regMask[n] |= uint32(mtUint(x.m))
		case id >= mfXReg0 && id < mfPktMark:
			first, words := 2*int(id-mfXReg0), 2
			if id >= mfXXReg0 {
				first, words = 4*int(id-mfXXReg0), 4
			}
			for k := 0; k < words; k++ {
				n := first + k
				v := binary.BigEndian.Uint32(x.v[4*k:])
				m := binary.BigEndian.Uint32(x.m[4*k:])
				w.regs[n] = w.regs[n]&^m | v
				w.regMask[n] |= m
			}
		case id == mfVlanTCI:
			w.tci, w.tciMask = binary.BigEndian.Uint16(x.v), binary.BigEndian.Uint16(x.m)
		case id == mfVlanVID:
			m := binary.BigEndian.Uint16(x.m)
			w.tci = w.tci&^m | binary.BigEndian.Uint16(x.v)
			w.tciMask |= m
		case id == mfVlanPCP:
			w.tci = w.tci&^0xe000 | uint16(x.v[0])<<13 | 0x1000
			w.tciMask |= 0xf000
		case id == mfIPDSCP:
			w.tos = mtVal{v: []byte{x.v[0] << 2}, m: []byte{0xfc}, exact: true, set: true}
		case id == mfNwTOS:
			w.tos = x
		case id == mfInPort:
			p := uint32(binary.BigEndian.Uint16(x.v))
			if p >= 0xff00 {
				p += 0xffff0000
			}
			w.inPort, w.hasPort = p, true
		case id == mfInPortOXM:
			w.inPort, w.hasPort = binary.BigEndian.Uint32(x.v), true
		default:
			w.f[id] = x
		}
	}
}

// mtWriter joins "key=value" items with commas.
type mtWriter struct{ sb strings.Builder }

func (t *mtWriter) item(s string) {
	if t.sb.Len() > 0 {
		t.sb.WriteByte(',')
	}
	t.sb.WriteString(s)
}

func (t *mtWriter) kv(k, v string) { t.item(k + "=" + v) }

// String renders the match as ovs-ofctl prints it between "priority=N," and
// " actions=": fields in Open vSwitch's canonical order whatever their order
// in m.Fields, eth_type and ip_proto folded into shorthands (ip, tcp, udp6,
// arp, ...), prefixes in CIDR form. An empty match renders as "".
//
// Fields the registry does not know come last as "class:field=0xVALUE".
func (m Match) String() string {
	if len(m.Fields) == 0 {
		return ""
	}
	var r mtRender
	r.w.load(m.Fields)
	r.conntrack()
	protoDone, typeDone := r.packetType()
	r.registers()
	r.tunnel()
	r.ethernet(typeDone)
	r.network(protoDone)
	r.transport()
	for _, i := range r.w.unknown {
		r.t.item(m.Fields[i].String())
	}
	return r.t.sb.String()
}

// mtRender writes a match's fields, as its view holds them, in Open
// vSwitch's canonical order, one group of fields per method.
type mtRender struct {
	w mtView
	t mtWriter
}

// field writes a plain field by its match name, if present.
func (r *mtRender) field(id mfID) {
	x := r.w.f[id]
	if x.set {
		r.t.kv(mtMatchName(mfReg.infos[id]), mtValue(mfReg.infos[id], x))
	}
}

// fields writes the plain fields ids, in order.
func (r *mtRender) fields(ids ...mfID) {
	for _, id := range ids {
		r.field(id)
	}
}

// portField writes a decimal field, masks as 0xVALUE/0xMASK.
func (r *mtRender) portField(id mfID) {
	x := r.w.f[id]
	if !x.set {
		return
	}
	name := mtMatchName(mfReg.infos[id])
	if x.exact {
		r.t.kv(name, strconv.FormatUint(mtUint(x.v), 10))
	} else {
		r.t.kv(name, mtHex0x(x.v)+"/"+mtHex0x(x.m))
	}
}

// decField writes a field in decimal (ct_zone is hex in set_field).
func (r *mtRender) decField(id mfID) {
	if x := r.w.f[id]; x.set {
		r.t.kv(mtMatchName(mfReg.infos[id]), strconv.FormatUint(mtUint(x.v), 10))
	}
}

// conntrack writes the packet's metadata and conntrack fields.
func (r *mtRender) conntrack() {
	r.fields(mfPktMark, mfRecircID, mfDpHash, mfConjID, mfActsetOutput, mfCtState)
	r.decField(mfCtZone)
	r.fields(mfCtMark, mfCtLabel, mfCtNwSrc, mfCtNwDst, mfCtIPv6Src, mfCtIPv6Dst, mfCtNwProto)
	if r.w.f[mfCtNwProto].set {
		// Like ovs-ofctl, show the ports only with the protocol.
		r.portField(mfCtTpSrc)
		r.portField(mfCtTpDst)
	}
}

// packetType writes the packet type, then the protocol shorthand (ip,
// tcp6, arp, ...), and reports whether the shorthand stands for ip_proto
// (protoDone) and for eth_type (typeDone).
func (r *mtRender) packetType() (protoDone, typeDone bool) {
	w, t := &r.w, &r.t
	eth := w.hasEthernetField()
	if pt := w.f[mfPacketType]; pt.set {
		if binary.BigEndian.Uint32(pt.v) != 0 {
			t.kv("packet_type", mtPacketType(pt.v))
		} else {
			eth = true
		}
	}
	if eth && w.f[mfRecircID].set {
		t.item("eth")
	}
	if et := w.f[mfEthType]; et.set {
		proto := w.f[mfIPProto]
		short := mtShorthand(binary.BigEndian.Uint16(et.v), proto.set, proto.v)
		if short != "" {
			t.item(short)
			typeDone = true
			protoDone = proto.set && short != "ip" && short != "ipv6"
		}
	}
	return protoDone, typeDone
}

// registers writes reg0 to reg15, each with its mask unless it is exact.
func (r *mtRender) registers() {
	for n := 0; n < 16; n++ {
		if r.w.regMask[n] == 0 {
			continue
		}
		v := mtHex(binary.BigEndian.AppendUint32(nil, r.w.regs[n]))
		if r.w.regMask[n] != ^uint32(0) {
			v += "/" + mtHex(binary.BigEndian.AppendUint32(nil, r.w.regMask[n]))
		}
		r.t.kv("reg"+strconv.Itoa(n), v)
	}
}

// tunnel writes the tunnel fields, and the metadata after them.
func (r *mtRender) tunnel() {
	r.fields(mfTunID, mfTunSrc, mfTunDst, mfTunIPv6Src, mfTunIPv6Dst)
	r.portField(mfTunGBPID)
	if x := r.w.f[mfTunGBPFlags]; x.set {
		r.t.kv("tun_gbp_flags", mtHex0x(x.v))
	}
	if x := r.w.f[mfTunFlags]; x.set {
		r.t.kv("tun_flags", mtFlags(uint32(mtUint(x.v)), uint32(mtUint(x.m)), mtTunFlagNames, mtTunFlagsAll, false))
	}
	r.field(mfMetadata)
}

// ethernet writes in_port, the VLAN, the MACs, and dl_type unless the
// shorthand stood for it (typeDone).
func (r *mtRender) ethernet(typeDone bool) {
	if r.w.hasPort {
		r.t.kv("in_port", mtPort32(r.w.inPort))
	}
	r.w.writeVlan(&r.t)
	r.fields(mfEthSrc, mfEthDst)
	if x := r.w.f[mfEthType]; x.set && !typeDone {
		r.t.kv("dl_type", "0x"+hex.EncodeToString(x.v))
	}
}

// network writes the IP and ARP fields, with ip_proto unless the
// shorthand stood for it (protoDone), and the MPLS fields.
func (r *mtRender) network(protoDone bool) {
	r.fields(mfIPv6Src, mfIPv6Dst)
	if x := r.w.f[mfIPv6Label]; x.set {
		v := fmt.Sprintf("0x%05x", mtUint(x.v))
		if !x.exact {
			v += fmt.Sprintf("/0x%05x", mtUint(x.m))
		}
		r.t.kv("ipv6_label", v)
	}
	r.fields(mfIPv4Src, mfIPv4Dst, mfARPSpa, mfARPTpa)
	if !protoDone {
		r.field(mfIPProto)
	}
	r.field(mfARPOp)
	if r.w.tos.set {
		r.t.kv("nw_tos", strconv.Itoa(int(r.w.tos.v[0])))
	}
	r.fields(mfIPECN, mfNwTTL, mfIPFrag, mfMPLSLabel, mfMPLSTC, mfMPLSTTL, mfMPLSBOS)
}

// transport writes the ICMP types and codes, the ports, neighbour
// discovery and the ARP hardware addresses, and the TCP flags.
func (r *mtRender) transport() {
	r.fields(mfICMPv4Type, mfICMPv4Code, mfICMPv6Type, mfICMPv6Code)
	for _, id := range []mfID{mfTCPSrc, mfTCPDst, mfUDPSrc, mfUDPDst, mfSCTPSrc, mfSCTPDst} {
		r.portField(id)
	}
	r.fields(mfNDTarget, mfNDSLL, mfARPSha, mfNDTLL, mfARPTha, mfTCPFlags)
}

// hasEthernetField reports a field that implies an Ethernet packet type.
func (w *mtView) hasEthernetField() bool {
	if w.tciMask != 0 || w.tos.set {
		return true
	}
	for id := range w.f {
		if !w.f[id].set {
			continue
		}
		if p := mfReg.infos[id].Prerequisite; p != "" && p != "CT" {
			return true
		}
	}
	return false
}

// writeVlan writes the merged VLAN TCI match as dl_vlan/dl_vlan_pcp when
// it reads as "tagged with this VID and/or PCP", else as vlan_tci.
func (w *mtView) writeVlan(t *mtWriter) {
	if w.tciMask == 0 {
		return
	}
	vidMask := w.tciMask & 0x0fff
	pcpMask := w.tciMask & 0xe000
	if w.tciMask&0x1000 != 0 && w.tci&0x1000 != 0 &&
		(vidMask == 0 || vidMask == 0x0fff) && (pcpMask == 0 || pcpMask == 0xe000) && vidMask|pcpMask != 0 {
		if vidMask != 0 {
			t.kv("dl_vlan", strconv.Itoa(int(w.tci&0x0fff)))
		}
		if pcpMask != 0 {
			t.kv("dl_vlan_pcp", strconv.Itoa(int(w.tci>>13)))
		}
		return
	}
	if w.tciMask == 0xffff {
		t.kv("vlan_tci", fmt.Sprintf("0x%04x", w.tci))
		return
	}
	t.kv("vlan_tci", fmt.Sprintf("0x%04x/0x%04x", w.tci, w.tciMask))
}

// mtShorthand returns ovs-ofctl's protocol keyword for an Ethernet type and
// (if hasProto) IP protocol: "ip", "tcp", "udp6", "arp", ... or "" when there
// is none and dl_type must be written out.
func mtShorthand(ethType uint16, hasProto bool, proto []byte) string {
	p := -1
	if hasProto {
		p = int(proto[0])
	}
	switch ethType {
	case EthTypeIPv4:
		switch p {
		case 1:
			return "icmp"
		case 6:
			return "tcp"
		case 17:
			return "udp"
		case 132:
			return "sctp"
		}
		return "ip"
	case EthTypeIPv6:
		switch p {
		case 58:
			return "icmp6"
		case 6:
			return "tcp6"
		case 17:
			return "udp6"
		case 132:
			return "sctp6"
		}
		return "ipv6"
	case EthTypeARP:
		return "arp"
	case EthTypeRARP:
		return "rarp"
	case EthTypeMPLS:
		return "mpls"
	case 0x8848:
		return "mplsm"
	}
	return ""
}
