package openflow

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// PacketInReason is why the switch sent a packet-in.
type PacketInReason uint8

// Packet-in reasons. OF1.3 connections see only the first three; Open
// vSwitch maps the others to PacketInAction there.
const (
	PacketInNoMatch    PacketInReason = 0
	PacketInAction     PacketInReason = 1
	PacketInInvalidTTL PacketInReason = 2
	PacketInActionSet  PacketInReason = 3
	PacketInGroup      PacketInReason = 4
	PacketInPacketOut  PacketInReason = 5
)

// String returns the reason as ofp-print spells it.
func (r PacketInReason) String() string {
	switch r {
	case PacketInNoMatch:
		return "no_match"
	case PacketInAction:
		return "action"
	case PacketInInvalidTTL:
		return "invalid_ttl"
	case PacketInActionSet:
		return "action_set"
	case PacketInGroup:
		return "group"
	case PacketInPacketOut:
		return "packet_out"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// NXT_PACKET_IN2 experimenter subtype and property types.
const (
	nxtPacketIn2 = 30

	pin2Packet       = 0
	pin2FullLen      = 1
	pin2BufferID     = 2
	pin2TableID      = 3
	pin2Cookie       = 4
	pin2Reason       = 5
	pin2Metadata     = 6
	pin2Userdata     = 7
	pin2Continuation = 8
)

// noCookie is the cookie of a packet-in that no flow sent.
const noCookie uint64 = 0xffffffffffffffff

// PacketIn is a packet the switch sends to the controller, decoded from
// either OFPT_PACKET_IN (Format PacketInFormatStandard) or NXT_PACKET_IN2
// (PacketInFormatNXT2); NXSetPacketInFormat chooses which the switch sends. Its Match
// holds the packet's metadata, not its headers: in_port always, and the
// non-zero registers, tunnel and conntrack fields; the accessors read them.
// Decoded values do not reference the input buffer.
type PacketIn struct {
	Format   PacketInFormat
	BufferID uint32 // NoBuffer with Open vSwitch
	// TotalLen is the length of the whole frame; Data may hold less.
	TotalLen uint32
	Reason   PacketInReason
	Table    uint8
	// Cookie is the cookie of the flow that sent the packet, all ones for
	// none.
	Cookie uint64
	Match  Match
	Data   []byte
	// Userdata is the controller action's userdata (NXT_PACKET_IN2 only).
	Userdata []byte
	// Continuation is the opaque state of a paused pipeline (NXT_PACKET_IN2
	// only), to send back in NXT_RESUME.
	Continuation []byte
}

// packetInFixedLen is buffer_id, total_len, reason, table_id and cookie.
const packetInFixedLen = 16

// appendBody encodes the packet-in in its Format.
//
// OFPT_PACKET_IN (OF1.3 and OF1.5):
//
//	4 bytes: buffer_id
//	2 bytes: total_len
//	1 byte: reason
//	1 byte: table_id
//	8 bytes: cookie
//	ofp_match (padded to 8)
//	2 bytes: pad
//	frame
//
// NXT_PACKET_IN2, after the experimenter header: properties, each
// type(2) len(2) payload padded to 8: packet (0), full_len (1, u32, when the
// frame is truncated), buffer_id (2, u32, when not NoBuffer), table_id
// (3, u8), cookie (4, pad(4) u64, unless all ones), reason (5, u8),
// metadata (6, OXM fields), userdata (7), continuation (8).
func (m *PacketIn) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypePacketIn, b, fmt.Errorf("packet in: %w", errVersion(v))
	}
	switch m.Format {
	case PacketInFormatStandard:
		if m.TotalLen > 0xffff {
			return TypePacketIn, b, fmt.Errorf("packet in: total length %d needs NXT_PACKET_IN2: %w", m.TotalLen, ErrUnsupported)
		}
		if len(m.Userdata) > 0 || len(m.Continuation) > 0 {
			return TypePacketIn, b, fmt.Errorf("packet in: userdata and continuations need NXT_PACKET_IN2: %w", ErrUnsupported)
		}
		b = binary.BigEndian.AppendUint32(b, m.BufferID)
		b = binary.BigEndian.AppendUint16(b, uint16(m.TotalLen))
		b = append(b, uint8(m.Reason), m.Table)
		b = binary.BigEndian.AppendUint64(b, m.Cookie)
		b, err := m.Match.AppendBinary(b)
		if err != nil {
			return TypePacketIn, b, fmt.Errorf("packet in: match: %w", err)
		}
		b = append(b, 0, 0)
		return TypePacketIn, append(b, m.Data...), nil
	case PacketInFormatNXT2:
		b = appendExperimenterPrefix(b, ExperimenterNicira, nxtPacketIn2)
		b = appendBytesProp(b, pin2Packet, m.Data)
		if m.TotalLen != uint32(len(m.Data)) {
			b = appendU32Prop(b, pin2FullLen, m.TotalLen)
		}
		if m.BufferID != NoBuffer {
			b = appendU32Prop(b, pin2BufferID, m.BufferID)
		}
		b = appendBytesProp(b, pin2TableID, []byte{m.Table})
		if m.Cookie != noCookie {
			var c [12]byte
			binary.BigEndian.PutUint64(c[4:], m.Cookie)
			b = appendBytesProp(b, pin2Cookie, c[:])
		}
		b = appendBytesProp(b, pin2Reason, []byte{uint8(m.Reason)})
		if len(m.Match.Fields) > 0 {
			start := len(b)
			b = append(b, 0, pin2Metadata, 0, 0)
			for i, f := range m.Match.Fields {
				var err error
				if b, err = AppendOXM(b, f); err != nil {
					return TypeExperimenter, b, fmt.Errorf("packet in2: metadata: field %d: %w", i, err)
				}
			}
			if err := endProp(b, start); err != nil {
				return TypeExperimenter, b, fmt.Errorf("packet in2: metadata: %w", err)
			}
			b = appendZeros(b, pad8(len(b)-start))
		}
		if len(m.Userdata) > 0 {
			b = appendBytesProp(b, pin2Userdata, m.Userdata)
		}
		if len(m.Continuation) > 0 {
			b = appendBytesProp(b, pin2Continuation, m.Continuation)
		}
		return TypeExperimenter, b, nil
	}
	return TypePacketIn, b, fmt.Errorf("packet in: format %d: %w", m.Format, ErrUnsupported)
}

// appendBytesProp appends a property with payload p, padded to 8. A payload
// too long for the 16-bit length is cut; the message length check that
// follows rejects the message anyway.
func appendBytesProp(b []byte, typ uint16, p []byte) []byte {
	n := 4 + len(p)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(min(n, 0xffff)))
	b = append(b, p...)
	return appendZeros(b, pad8(n))
}

// appendU32Prop appends a property holding one 32-bit value.
func appendU32Prop(b []byte, typ uint16, x uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, typ)
	b = append(b, 0, 8)
	return binary.BigEndian.AppendUint32(b, x)
}

// endProp writes the length of the property that starts at start.
func endProp(b []byte, start int) error {
	n := len(b) - start
	if n > 0xffff {
		return fmt.Errorf("property of %d bytes: %w", n, ErrTooLong)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	return nil
}

func decodePacketIn(h Header, b []byte) (Message, error) {
	if !versionOK(h.Version) {
		return nil, fmt.Errorf("packet in: %w", errVersion(h.Version))
	}
	if err := need(b, packetInFixedLen, "packet in"); err != nil {
		return nil, err
	}
	m := &PacketIn{
		Format:   PacketInFormatStandard,
		BufferID: binary.BigEndian.Uint32(b[0:4]),
		TotalLen: uint32(binary.BigEndian.Uint16(b[4:6])),
		Reason:   PacketInReason(b[6]),
		Table:    b[7],
		Cookie:   binary.BigEndian.Uint64(b[8:16]),
	}
	match, n, err := UnmarshalMatch(b[packetInFixedLen:])
	if err != nil {
		return nil, fmt.Errorf("packet in: match: %w", err)
	}
	m.Match = match
	rest := b[packetInFixedLen+n:]
	if err := need(rest, 2, "packet in: pad"); err != nil {
		return nil, err
	}
	m.Data = clone(rest[2:])
	return m, nil
}

func decodePacketIn2(h Header, b []byte) (Message, error) {
	if !versionOK(h.Version) {
		return nil, fmt.Errorf("packet in2: %w", errVersion(h.Version))
	}
	m := &PacketIn{Format: PacketInFormatNXT2, BufferID: NoBuffer, Cookie: noCookie}
	haveFull := false
	err := forEachProp(b, func(typ uint16, p []byte) error {
		switch typ {
		case pin2Packet:
			m.Data = clone(p)
		case pin2FullLen, pin2BufferID:
			if len(p) != 4 {
				return fmt.Errorf("property %d: length %d, want 8: %w", typ, len(p)+4, ErrMalformed)
			}
			if typ == pin2FullLen {
				m.TotalLen, haveFull = binary.BigEndian.Uint32(p), true
			} else {
				m.BufferID = binary.BigEndian.Uint32(p)
			}
		case pin2TableID, pin2Reason:
			if len(p) != 1 {
				return fmt.Errorf("property %d: length %d, want 5: %w", typ, len(p)+4, ErrMalformed)
			}
			if typ == pin2TableID {
				m.Table = p[0]
			} else {
				m.Reason = PacketInReason(p[0])
			}
		case pin2Cookie:
			if len(p) != 12 {
				return fmt.Errorf("cookie property: length %d, want 16: %w", len(p)+4, ErrMalformed)
			}
			m.Cookie = binary.BigEndian.Uint64(p[4:12])
		case pin2Metadata:
			m.Match.Fields = nil
			for q := p; len(q) > 0; {
				f, n, err := UnmarshalOXM(q)
				if err != nil {
					return fmt.Errorf("metadata: field %d: %w", len(m.Match.Fields), err)
				}
				m.Match.Fields = append(m.Match.Fields, f)
				q = q[n:]
			}
		case pin2Userdata:
			m.Userdata = clone(p)
		case pin2Continuation:
			m.Continuation = clone(p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("packet in2: %w", err)
	}
	if !haveFull {
		m.TotalLen = uint32(len(m.Data))
	}
	return m, nil
}

// Field returns the first metadata field with the given class and field
// number (experimenter fields are not searched).
func (m *PacketIn) Field(class uint16, field uint8) (Field, bool) {
	for _, f := range m.Match.Fields {
		if f.Class == class && f.Field == field && f.Class != 0xffff {
			return f, true
		}
	}
	return Field{}, false
}

// uintField returns the value of a metadata field as an unsigned integer,
// or 0 when the field is absent (Open vSwitch leaves zero fields out) or
// not width bytes long.
func (m *PacketIn) uintField(class uint16, field uint8, width int) uint64 {
	f, ok := m.Field(class, field)
	if !ok || len(f.Value) != width {
		return 0
	}
	var x uint64
	for _, c := range f.Value {
		x = x<<8 | uint64(c)
	}
	return x
}

// Metadata field classes and numbers the accessors read.
const (
	pinClassNXM0   = 0x0000
	pinClassNXM1   = 0x0001
	pinClassOXM    = 0x8000
	pinClassXReg   = 0x8001
	oxmInPort      = 0
	oxmMetadata    = 2
	oxmTunnelID    = 38
	nxmInPort      = 0 // NXM_OF_IN_PORT, 16 bits
	nxmTunID       = 16
	nxmTunSrc      = 31
	nxmTunDst      = 32
	nxmPktMark     = 33
	nxmCtState     = 105
	nxmCtZone      = 106
	nxmCtMark      = 107
	nxmCtLabel     = 108
	nxmCtNwProto   = 119
	nxmCtNwSrc     = 120
	nxmCtNwDst     = 121
	nxmCtIPv6Src   = 122
	nxmCtIPv6Dst   = 123
	nxmCtTpSrc     = 124
	nxmCtTpDst     = 125
	nxmNumRegs     = 16
	oxmNumXRegs    = 8
	ofp10PortShift = 0xffff0000 // OF1.0 reserved ports 0xfff8.. map to 0xfffffff8..
)

// InPort returns the port the packet arrived on (32-bit numbering; a packet
// sent by a packet-out has the packet-out's in_port, e.g. PortController).
func (m *PacketIn) InPort() uint32 {
	if f, ok := m.Field(pinClassOXM, oxmInPort); ok && len(f.Value) == 4 {
		return binary.BigEndian.Uint32(f.Value)
	}
	if f, ok := m.Field(pinClassNXM0, nxmInPort); ok && len(f.Value) == 2 {
		p := uint32(binary.BigEndian.Uint16(f.Value))
		if p >= 0xff00 {
			p |= ofp10PortShift
		}
		return p
	}
	return 0
}

// Reg returns register i (0-15), or 0 if i is out of range or the register
// is zero. It reads NXM_NX_REG<i>, or the half of OXM xreg<i/2> that holds
// it.
func (m *PacketIn) Reg(i int) uint32 {
	if i < 0 || i >= nxmNumRegs {
		return 0
	}
	if f, ok := m.Field(pinClassNXM1, uint8(i)); ok && len(f.Value) == 4 {
		return binary.BigEndian.Uint32(f.Value)
	}
	x := m.uintField(pinClassXReg, uint8(i/2), 8)
	if i%2 == 0 {
		return uint32(x >> 32)
	}
	return uint32(x)
}

// Metadata returns the OpenFlow metadata field.
func (m *PacketIn) Metadata() uint64 { return m.uintField(pinClassOXM, oxmMetadata, 8) }

// TunID returns the tunnel id (tun_id, the VXLAN VNI).
func (m *PacketIn) TunID() uint64 {
	if _, ok := m.Field(pinClassOXM, oxmTunnelID); ok {
		return m.uintField(pinClassOXM, oxmTunnelID, 8)
	}
	return m.uintField(pinClassNXM1, nxmTunID, 8)
}

// TunSrc returns the outer IPv4 source of a tunnelled packet, or the zero
// Addr.
func (m *PacketIn) TunSrc() netip.Addr { return m.addrField(nxmTunSrc) }

// TunDst returns the outer IPv4 destination of a tunnelled packet, or the
// zero Addr.
func (m *PacketIn) TunDst() netip.Addr { return m.addrField(nxmTunDst) }

// PktMark returns pkt_mark (the skb mark).
func (m *PacketIn) PktMark() uint32 { return uint32(m.uintField(pinClassNXM1, nxmPktMark, 4)) }

// CtState returns the ct_state bits (see the ct_state constants of the
// match fields: new 0x01, est 0x02, rel 0x04, rpl 0x08, inv 0x10, trk 0x20,
// snat 0x40, dnat 0x80).
func (m *PacketIn) CtState() uint32 { return uint32(m.uintField(pinClassNXM1, nxmCtState, 4)) }

// CtZone returns the conntrack zone.
func (m *PacketIn) CtZone() uint16 { return uint16(m.uintField(pinClassNXM1, nxmCtZone, 2)) }

// CtMark returns ct_mark.
func (m *PacketIn) CtMark() uint32 { return uint32(m.uintField(pinClassNXM1, nxmCtMark, 4)) }

// CtLabel returns ct_label, big-endian.
func (m *PacketIn) CtLabel() [16]byte {
	var l [16]byte
	if f, ok := m.Field(pinClassNXM1, nxmCtLabel); ok && len(f.Value) == 16 {
		copy(l[:], f.Value)
	}
	return l
}

// CtNwProto returns the IP protocol of the conntrack entry's original
// direction.
func (m *PacketIn) CtNwProto() uint8 { return uint8(m.uintField(pinClassNXM1, nxmCtNwProto, 1)) }

// CtNwSrc returns the original-direction source address of the conntrack
// entry (IPv4 or IPv6), or the zero Addr.
func (m *PacketIn) CtNwSrc() netip.Addr {
	if a := m.addrField(nxmCtNwSrc); a.IsValid() {
		return a
	}
	return m.addrField(nxmCtIPv6Src)
}

// CtNwDst returns the original-direction destination address of the
// conntrack entry (IPv4 or IPv6), or the zero Addr.
func (m *PacketIn) CtNwDst() netip.Addr {
	if a := m.addrField(nxmCtNwDst); a.IsValid() {
		return a
	}
	return m.addrField(nxmCtIPv6Dst)
}

// CtTpSrc returns the original-direction source port of the conntrack
// entry.
func (m *PacketIn) CtTpSrc() uint16 { return uint16(m.uintField(pinClassNXM1, nxmCtTpSrc, 2)) }

// CtTpDst returns the original-direction destination port of the conntrack
// entry.
func (m *PacketIn) CtTpDst() uint16 { return uint16(m.uintField(pinClassNXM1, nxmCtTpDst, 2)) }

// addrField reads an NXM_1 field holding an IPv4 or IPv6 address.
func (m *PacketIn) addrField(field uint8) netip.Addr {
	f, ok := m.Field(pinClassNXM1, field)
	if !ok {
		return netip.Addr{}
	}
	a, _ := netip.AddrFromSlice(f.Value)
	return a
}

func init() {
	registerType(TypePacketIn, decodePacketIn)
	registerExperimenter(ExperimenterNicira, nxtPacketIn2, decodePacketIn2)
}
