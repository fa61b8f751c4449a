package openflow

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Nicira experimenter subtypes of the conntrack flush messages.
const (
	nxtCtFlushZone = 29
	nxtCtFlush     = 32
)

// CtFlushZone is NXT_CT_FLUSH_ZONE: delete every conntrack entry of one
// zone in the bridge's datapath. The switch sends no reply on success;
// follow it with a barrier.
//
//	6 bytes: zero
//	2 bytes: zone_id
type CtFlushZone struct {
	Zone uint16
}

func (m *CtFlushZone) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendExperimenterPrefix(b, ExperimenterNicira, nxtCtFlushZone)
	b = append(b, 0, 0, 0, 0, 0, 0)
	return TypeExperimenter, binary.BigEndian.AppendUint16(b, m.Zone), nil
}

func decodeCtFlushZone(h Header, b []byte) (Message, error) {
	if len(b) != 8 {
		return nil, fmt.Errorf("ct flush zone: length %d, want 8: %w", len(b), ErrMalformed)
	}
	for _, c := range b[:6] {
		if c != 0 {
			return nil, fmt.Errorf("ct flush zone: non-zero padding: %w", ErrMalformed)
		}
	}
	return &CtFlushZone{Zone: binary.BigEndian.Uint16(b[6:8])}, nil
}

// CtTuple selects conntrack entries by one direction's 5-tuple. Zero fields
// (and invalid or unspecified addresses) are wildcards.
type CtTuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	ICMPID           uint16
	ICMPType         uint8
	ICMPCode         uint8
}

// CtFlush is NXT_CT_FLUSH (Open vSwitch 3.1 and later): delete the
// conntrack entries that match a protocol, original and reply tuples and a
// zone. The zero value flushes every entry of the datapath. The switch sends
// no reply on success.
//
//	1 byte: ip_proto (0 = any)
//	7 bytes: zero
//	properties: orig tuple (0), reply tuple (1), zone (2, u16 + 2 zero bytes)
//
// Tuple properties nest: 4 zero bytes, then src (0) and dst (1), each a
// 16-byte IPv6 or IPv4-mapped address; src_port (2), dst_port (3) and
// icmp_id (4), each u16 + 2 zero bytes; icmp_type (5) and icmp_code (6),
// each u8.
type CtFlush struct {
	// Zone limits the flush to one zone; nil means every zone.
	Zone    *uint16
	IPProto uint8
	Orig    CtTuple
	Reply   CtTuple
}

// CT flush property types.
const (
	ctFlushOrig  = 0
	ctFlushReply = 1
	ctFlushZone  = 2

	ctTupleSrc      = 0
	ctTupleDst      = 1
	ctTupleSrcPort  = 2
	ctTupleDstPort  = 3
	ctTupleICMPID   = 4
	ctTupleICMPType = 5
	ctTupleICMPCode = 6
)

// isICMP reports whether proto is ICMP or ICMPv6, for which Open vSwitch
// always sends the ICMP id, type and code.
func isICMP(proto uint8) bool { return proto == 1 || proto == 58 }

func (m *CtFlush) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendExperimenterPrefix(b, ExperimenterNicira, nxtCtFlush)
	b = append(b, m.IPProto, 0, 0, 0, 0, 0, 0, 0)
	var err error
	if b, err = m.Orig.appendProp(b, ctFlushOrig, m.IPProto); err != nil {
		return TypeExperimenter, b, fmt.Errorf("ct flush: orig tuple: %w", err)
	}
	if b, err = m.Reply.appendProp(b, ctFlushReply, m.IPProto); err != nil {
		return TypeExperimenter, b, fmt.Errorf("ct flush: reply tuple: %w", err)
	}
	if m.Zone != nil {
		b = append(b, 0, ctFlushZone, 0, 8)
		b = binary.BigEndian.AppendUint16(b, *m.Zone)
		b = append(b, 0, 0)
	}
	return TypeExperimenter, b, nil
}

func (t *CtTuple) empty(proto uint8) bool {
	return !addrSet(t.Src) && !addrSet(t.Dst) && t.SrcPort == 0 && t.DstPort == 0 && !t.hasICMP(proto)
}

func (t *CtTuple) hasICMP(proto uint8) bool {
	return isICMP(proto) || t.ICMPID != 0 || t.ICMPType != 0 || t.ICMPCode != 0
}

func addrSet(a netip.Addr) bool { return a.IsValid() && !a.IsUnspecified() }

// appendProp appends the tuple as a nested property of type typ, or nothing
// when every field is a wildcard.
func (t *CtTuple) appendProp(b []byte, typ uint16, proto uint8) ([]byte, error) {
	if t.empty(proto) {
		return b, nil
	}
	start := len(b)
	b = append(b, 0, byte(typ), 0, 0, 0, 0, 0, 0)
	for _, a := range [...]struct {
		typ  uint16
		addr netip.Addr
	}{{ctTupleSrc, t.Src}, {ctTupleDst, t.Dst}} {
		if !addrSet(a.addr) {
			continue
		}
		ip := a.addr.As16()
		b = appendBytesProp(b, a.typ, ip[:])
	}
	for _, p := range [...]struct {
		typ uint16
		val uint16
	}{{ctTupleSrcPort, t.SrcPort}, {ctTupleDstPort, t.DstPort}} {
		if p.val != 0 {
			b = appendBytesProp(b, p.typ, []byte{byte(p.val >> 8), byte(p.val), 0, 0})
		}
	}
	if t.hasICMP(proto) {
		b = appendBytesProp(b, ctTupleICMPID, []byte{byte(t.ICMPID >> 8), byte(t.ICMPID), 0, 0})
		b = appendBytesProp(b, ctTupleICMPType, []byte{t.ICMPType})
		b = appendBytesProp(b, ctTupleICMPCode, []byte{t.ICMPCode})
	}
	return b, endProp(b, start)
}

func decodeCtFlush(h Header, b []byte) (Message, error) {
	if err := need(b, 8, "ct flush"); err != nil {
		return nil, err
	}
	for _, c := range b[1:8] {
		if c != 0 {
			return nil, fmt.Errorf("ct flush: non-zero padding: %w", ErrMalformed)
		}
	}
	m := &CtFlush{IPProto: b[0]}
	err := forEachProp(b[8:], func(typ uint16, p []byte) error {
		switch typ {
		case ctFlushOrig, ctFlushReply:
			t := &m.Orig
			what := "orig tuple"
			if typ == ctFlushReply {
				t, what = &m.Reply, "reply tuple"
			}
			if len(p) < 4 {
				return fmt.Errorf("%s: length %d: %w", what, len(p)+4, ErrMalformed)
			}
			if err := t.unmarshal(p[4:]); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		case ctFlushZone:
			if len(p) != 4 {
				return fmt.Errorf("zone: length %d, want 8: %w", len(p)+4, ErrMalformed)
			}
			z := binary.BigEndian.Uint16(p)
			m.Zone = &z
		default:
			return fmt.Errorf("property type %d: %w", typ, ErrMalformed)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ct flush: %w", err)
	}
	return m, nil
}

func (t *CtTuple) unmarshal(b []byte) error {
	*t = CtTuple{}
	return forEachProp(b, func(typ uint16, p []byte) error {
		want := map[uint16]int{
			ctTupleSrc: 16, ctTupleDst: 16, ctTupleSrcPort: 4, ctTupleDstPort: 4,
			ctTupleICMPID: 4, ctTupleICMPType: 1, ctTupleICMPCode: 1,
		}[typ]
		if want == 0 {
			return fmt.Errorf("property type %d: %w", typ, ErrMalformed)
		}
		if len(p) != want && !(want == 4 && len(p) == 2) {
			return fmt.Errorf("property type %d: length %d: %w", typ, len(p)+4, ErrMalformed)
		}
		switch typ {
		case ctTupleSrc, ctTupleDst:
			a := netip.AddrFrom16([16]byte(p)).Unmap()
			if a.IsUnspecified() {
				a = netip.Addr{}
			}
			if typ == ctTupleSrc {
				t.Src = a
			} else {
				t.Dst = a
			}
		case ctTupleSrcPort:
			t.SrcPort = binary.BigEndian.Uint16(p)
		case ctTupleDstPort:
			t.DstPort = binary.BigEndian.Uint16(p)
		case ctTupleICMPID:
			t.ICMPID = binary.BigEndian.Uint16(p)
		case ctTupleICMPType:
			t.ICMPType = p[0]
		case ctTupleICMPCode:
			t.ICMPCode = p[0]
		}
		return nil
	})
}

func init() {
	registerExperimenter(ExperimenterNicira, nxtCtFlushZone, decodeCtFlushZone)
	registerExperimenter(ExperimenterNicira, nxtCtFlush, decodeCtFlush)
}
