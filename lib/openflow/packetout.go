package openflow

import (
	"encoding/binary"
	"fmt"
)

// PacketOut is OFPT_PACKET_OUT (type 13): the controller sends Data through
// Actions, as if it had arrived on InPort. Open vSwitch keeps no buffers, so
// buffer_id is always NoBuffer and Data carries the whole frame.
//
// InPort has no default: use PortController for a packet the controller
// injects (flows can match in_port=CONTROLLER), a real port to pretend the
// packet arrived there, or PortAny for none. To run the packet through the
// flow tables, output it to PortTable.
type PacketOut struct {
	InPort uint32
	// Match is further pipeline metadata to start with (OF1.5 only), e.g.
	// registers or tun_id. It must not hold in_port.
	Match   Match
	Actions []Action
	Data    []byte
}

// Fixed parts of the packet-out body.
const (
	packetOut13Len = 16
	packetOut15Len = 8
)

// appendBody encodes the packet-out.
//
// OF1.3:
//
//	4 bytes: buffer_id = NoBuffer
//	4 bytes: in_port
//	2 bytes: actions_len
//	6 bytes: pad
//	actions
//	frame
//
// OF1.5:
//
//	4 bytes: buffer_id = NoBuffer
//	2 bytes: actions_len
//	2 bytes: pad
//	ofp_match: OXM in_port first, then Match's fields
//	actions
//	frame
func (m *PacketOut) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypePacketOut, b, fmt.Errorf("packet out: %w", errVersion(v))
	}
	b = binary.BigEndian.AppendUint32(b, NoBuffer)
	var lenAt int
	if v >= Version15 {
		lenAt = len(b)
		b = append(b, 0, 0, 0, 0)
		fields := make([]Field, 0, 1+len(m.Match.Fields))
		var port [4]byte
		binary.BigEndian.PutUint32(port[:], m.InPort)
		fields = append(fields, Field{Class: pinClassOXM, Field: oxmInPort, Value: port[:]})
		for i, f := range m.Match.Fields {
			if f.Class == pinClassOXM && f.Field == oxmInPort {
				return TypePacketOut, b, fmt.Errorf("packet out: match field %d: in_port belongs in InPort: %w", i, ErrMalformed)
			}
			fields = append(fields, f)
		}
		var err error
		if b, err = (Match{Fields: fields}).AppendBinary(b); err != nil {
			return TypePacketOut, b, fmt.Errorf("packet out: match: %w", err)
		}
	} else {
		if len(m.Match.Fields) > 0 {
			return TypePacketOut, b, fmt.Errorf("packet out: a match needs OF1.5: %w", ErrUnsupported)
		}
		b = binary.BigEndian.AppendUint32(b, m.InPort)
		lenAt = len(b)
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	start := len(b)
	b, err := AppendActions(b, v, m.Actions)
	if err != nil {
		return TypePacketOut, b, fmt.Errorf("packet out: actions: %w", err)
	}
	if len(b)-start > 0xffff {
		return TypePacketOut, b, fmt.Errorf("packet out: actions: %w", ErrTooLong)
	}
	binary.BigEndian.PutUint16(b[lenAt:], uint16(len(b)-start))
	return TypePacketOut, append(b, m.Data...), nil
}

func decodePacketOut(h Header, b []byte) (Message, error) {
	v := h.Version
	if !versionOK(v) {
		return nil, fmt.Errorf("packet out: %w", errVersion(v))
	}
	fixed := packetOut13Len
	if v >= Version15 {
		fixed = packetOut15Len
	}
	if err := need(b, fixed, "packet out"); err != nil {
		return nil, err
	}
	if id := binary.BigEndian.Uint32(b[0:4]); id != NoBuffer {
		return nil, fmt.Errorf("packet out: buffer id 0x%x: buffered packets: %w", id, ErrUnsupported)
	}
	m := new(PacketOut)
	var actLen int
	rest := b[fixed:]
	if v >= Version15 {
		actLen = int(binary.BigEndian.Uint16(b[4:6]))
		match, n, err := UnmarshalMatch(rest)
		if err != nil {
			return nil, fmt.Errorf("packet out: match: %w", err)
		}
		m.InPort = PortAny
		for _, f := range match.Fields {
			if f.Class == pinClassOXM && f.Field == oxmInPort && f.Mask == nil && len(f.Value) == 4 {
				m.InPort = binary.BigEndian.Uint32(f.Value)
				continue
			}
			m.Match.Fields = append(m.Match.Fields, f)
		}
		rest = rest[n:]
	} else {
		m.InPort = binary.BigEndian.Uint32(b[4:8])
		actLen = int(binary.BigEndian.Uint16(b[8:10]))
	}
	if err := need(rest, actLen, "packet out: actions"); err != nil {
		return nil, err
	}
	var err error
	if m.Actions, err = UnmarshalActions(rest[:actLen], v); err != nil {
		return nil, fmt.Errorf("packet out: actions: %w", err)
	}
	m.Data = clone(rest[actLen:])
	return m, nil
}

func init() {
	registerType(TypePacketOut, decodePacketOut)
}
