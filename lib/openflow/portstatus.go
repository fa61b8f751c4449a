package openflow

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"time"
)

// PortConfig is the OFPPC_* bit set of a port.
type PortConfig uint32

// Port config bits.
const (
	PortConfigDown       PortConfig = 1 << 0
	PortConfigNoRecv     PortConfig = 1 << 2
	PortConfigNoFwd      PortConfig = 1 << 5
	PortConfigNoPacketIn PortConfig = 1 << 6
)

// PortState is the OFPPS_* bit set of a port.
type PortState uint32

// Port state bits.
const (
	PortStateLinkDown PortState = 1 << 0
	PortStateBlocked  PortState = 1 << 1
	PortStateLive     PortState = 1 << 2
)

// Port is ofp_port: one switch port as a port desc reply or a port status
// message describes it.
type Port struct {
	No     uint32
	HWAddr net.HardwareAddr
	Name   string
	Config PortConfig
	State  PortState
	// Curr, Advertised, Supported and Peer are OFPPF_* feature bits.
	Curr, Advertised, Supported, Peer uint32
	// CurrSpeed and MaxSpeed are in kbit/s.
	CurrSpeed, MaxSpeed uint32
}

// String renders "NO(NAME): addr:MAC".
func (p Port) String() string {
	return fmt.Sprintf("%s(%s): addr:%s", portString(p.No), p.Name, p.HWAddr)
}

// Port layout sizes.
const (
	port13Len        = 64
	port14Len        = 40 // without properties
	portNameLen      = 16
	portPropEthernet = 0
	portPropEthLen   = 32
)

// unmarshalPort decodes one ofp_port at the start of b and returns its size.
//
// OF1.3 (64 bytes):
//
//	4 bytes: port_no
//	4 bytes: pad
//	6 bytes: hw_addr
//	2 bytes: pad
//	16 bytes: name, NUL-padded
//	4 bytes: config
//	4 bytes: state
//	4 bytes each: curr, advertised, supported, peer
//	4 bytes: curr_speed
//	4 bytes: max_speed
//
// OF1.4 and later (40 bytes and properties):
//
//	4 bytes: port_no
//	2 bytes: length
//	2 bytes: pad
//	6 bytes: hw_addr
//	2 bytes: pad
//	16 bytes: name
//	4 bytes: config
//	4 bytes: state
//	properties; the ethernet one (type 0, length 32) is pad(4), curr,
//	advertised, supported, peer, curr_speed, max_speed
func unmarshalPort(b []byte, v Version) (Port, int, error) {
	fixed := port13Len
	if v >= Version14 {
		fixed = port14Len
	}
	if err := need(b, fixed, "port"); err != nil {
		return Port{}, 0, err
	}
	p := Port{
		No:     binary.BigEndian.Uint32(b[0:4]),
		HWAddr: net.HardwareAddr(clone(b[8:14])),
		Name:   cString(b[16:32]),
		Config: PortConfig(binary.BigEndian.Uint32(b[32:36])),
		State:  PortState(binary.BigEndian.Uint32(b[36:40])),
	}
	if v < Version14 {
		p.setEthernet(b[40:64])
		return p, port13Len, nil
	}
	n := int(binary.BigEndian.Uint16(b[4:6]))
	if n < port14Len || n > len(b) {
		return Port{}, 0, fmt.Errorf("port %d: length %d of %d bytes: %w", p.No, n, len(b), ErrMalformed)
	}
	err := forEachProp(b[port14Len:n], func(typ uint16, pl []byte) error {
		if typ != portPropEthernet {
			return nil
		}
		if len(pl) != portPropEthLen-4 {
			return fmt.Errorf("ethernet property: length %d: %w", len(pl)+4, ErrMalformed)
		}
		p.setEthernet(pl[4:])
		return nil
	})
	if err != nil {
		return Port{}, 0, fmt.Errorf("port %d: %w", p.No, err)
	}
	return p, n, nil
}

// setEthernet reads curr, advertised, supported, peer, curr_speed and
// max_speed (24 bytes).
func (p *Port) setEthernet(b []byte) {
	p.Curr = binary.BigEndian.Uint32(b[0:4])
	p.Advertised = binary.BigEndian.Uint32(b[4:8])
	p.Supported = binary.BigEndian.Uint32(b[8:12])
	p.Peer = binary.BigEndian.Uint32(b[12:16])
	p.CurrSpeed = binary.BigEndian.Uint32(b[16:20])
	p.MaxSpeed = binary.BigEndian.Uint32(b[20:24])
}

func (p *Port) appendEthernet(b []byte) []byte {
	for _, x := range [...]uint32{p.Curr, p.Advertised, p.Supported, p.Peer, p.CurrSpeed, p.MaxSpeed} {
		b = binary.BigEndian.AppendUint32(b, x)
	}
	return b
}

// appendPort appends p in v's layout (OF1.4+ with an ethernet property).
func (p *Port) appendPort(b []byte, v Version) ([]byte, error) {
	if len(p.Name) > portNameLen {
		return b, fmt.Errorf("port %d: name %q longer than %d bytes: %w", p.No, p.Name, portNameLen, ErrMalformed)
	}
	if len(p.HWAddr) != 6 && len(p.HWAddr) != 0 {
		return b, fmt.Errorf("port %d: hardware address of %d bytes: %w", p.No, len(p.HWAddr), ErrMalformed)
	}
	b = binary.BigEndian.AppendUint32(b, p.No)
	if v >= Version14 {
		b = binary.BigEndian.AppendUint16(b, port14Len+portPropEthLen)
		b = append(b, 0, 0)
	} else {
		b = append(b, 0, 0, 0, 0)
	}
	if len(p.HWAddr) == 0 {
		b = append(b, 0, 0, 0, 0, 0, 0)
	} else {
		b = append(b, p.HWAddr...)
	}
	b = append(b, 0, 0)
	b = append(b, p.Name...)
	b = appendZeros(b, portNameLen-len(p.Name))
	b = binary.BigEndian.AppendUint32(b, uint32(p.Config))
	b = binary.BigEndian.AppendUint32(b, uint32(p.State))
	if v >= Version14 {
		b = append(b, 0, portPropEthernet, 0, portPropEthLen, 0, 0, 0, 0)
	}
	return p.appendEthernet(b), nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// PortReason is why a port status message was sent.
type PortReason uint8

// Port status reasons.
const (
	PortAdded    PortReason = 0
	PortDeleted  PortReason = 1
	PortModified PortReason = 2
)

// String returns "ADD", "DELETE" or "MODIFY", as ofp-print does.
func (r PortReason) String() string {
	switch r {
	case PortAdded:
		return "ADD"
	case PortDeleted:
		return "DELETE"
	case PortModified:
		return "MODIFY"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// PortStatus is OFPT_PORT_STATUS (type 12), sent by the switch when a port
// is added, removed or changes.
//
//	1 byte: reason
//	7 bytes: pad
//	ofp_port
type PortStatus struct {
	Reason PortReason
	Port   Port
}

func (m *PortStatus) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypePortStatus, b, fmt.Errorf("port status: %w", errVersion(v))
	}
	b = append(b, uint8(m.Reason), 0, 0, 0, 0, 0, 0, 0)
	b, err := m.Port.appendPort(b, v)
	if err != nil {
		return TypePortStatus, b, fmt.Errorf("port status: %w", err)
	}
	return TypePortStatus, b, nil
}

func decodePortStatus(h Header, body []byte) (Message, error) {
	if !versionOK(h.Version) {
		return nil, fmt.Errorf("port status: %w", errVersion(h.Version))
	}
	if err := need(body, 8, "port status"); err != nil {
		return nil, err
	}
	p, n, err := unmarshalPort(body[8:], h.Version)
	if err != nil {
		return nil, fmt.Errorf("port status: %w", err)
	}
	if 8+n != len(body) {
		return nil, fmt.Errorf("port status: %d trailing bytes: %w", len(body)-8-n, ErrMalformed)
	}
	return &PortStatus{Reason: PortReason(body[0]), Port: p}, nil
}

// FlowRemovedReason is why a flow was removed.
type FlowRemovedReason uint8

// Flow removed reasons.
const (
	FlowRemovedIdleTimeout FlowRemovedReason = 0
	FlowRemovedHardTimeout FlowRemovedReason = 1
	FlowRemovedDelete      FlowRemovedReason = 2
	FlowRemovedGroupDelete FlowRemovedReason = 3
	FlowRemovedMeterDelete FlowRemovedReason = 4
	FlowRemovedEviction    FlowRemovedReason = 5
)

// String returns the reason as ofp-print spells it ("idle", "hard", ...).
func (r FlowRemovedReason) String() string {
	switch r {
	case FlowRemovedIdleTimeout:
		return "idle"
	case FlowRemovedHardTimeout:
		return "hard"
	case FlowRemovedDelete:
		return "delete"
	case FlowRemovedGroupDelete:
		return "group_delete"
	case FlowRemovedMeterDelete:
		return "meter_delete"
	case FlowRemovedEviction:
		return "eviction"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// FlowRemoved is OFPT_FLOW_REMOVED (type 11), sent for flows installed with
// FlowSendFlowRem when they expire or are deleted.
type FlowRemoved struct {
	Table       uint8
	Priority    uint16
	Cookie      uint64
	Match       Match
	IdleTimeout uint16
	HardTimeout uint16
	Reason      FlowRemovedReason
	Duration    time.Duration
	// IdleTime is how long ago the flow last matched (OF1.5 only).
	IdleTime    time.Duration
	PacketCount uint64
	ByteCount   uint64
}

// Fixed parts of flow removed bodies.
const (
	flowRemoved13Len = 40
	flowRemoved15Len = 16
)

// appendBody encodes the flow removed message.
//
// OF1.3:
//
//	8 bytes: cookie
//	2 bytes: priority
//	1 byte: reason
//	1 byte: table_id
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	8 bytes: packet_count
//	8 bytes: byte_count
//	ofp_match
//
// OF1.5:
//
//	1 byte: table_id
//	1 byte: reason
//	2 bytes: priority
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	8 bytes: cookie
//	ofp_match
//	ofp_stats (OXS duration, idle_time, packet_count, byte_count)
func (m *FlowRemoved) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeFlowRemoved, b, fmt.Errorf("flow removed: %w", errVersion(v))
	}
	var err error
	if v >= Version15 {
		b = append(b, m.Table, uint8(m.Reason))
		b = binary.BigEndian.AppendUint16(b, m.Priority)
		b = binary.BigEndian.AppendUint16(b, m.IdleTimeout)
		b = binary.BigEndian.AppendUint16(b, m.HardTimeout)
		b = binary.BigEndian.AppendUint64(b, m.Cookie)
		if b, err = m.Match.AppendBinary(b); err != nil {
			return TypeFlowRemoved, b, fmt.Errorf("flow removed: match: %w", err)
		}
		c := oxsCounters{duration: m.Duration, idleTime: m.IdleTime, packets: m.PacketCount, bytes: m.ByteCount}
		return TypeFlowRemoved, c.append(b), nil
	}
	b = binary.BigEndian.AppendUint64(b, m.Cookie)
	b = binary.BigEndian.AppendUint16(b, m.Priority)
	b = append(b, uint8(m.Reason), m.Table)
	b = appendDuration(b, m.Duration)
	b = binary.BigEndian.AppendUint16(b, m.IdleTimeout)
	b = binary.BigEndian.AppendUint16(b, m.HardTimeout)
	b = binary.BigEndian.AppendUint64(b, m.PacketCount)
	b = binary.BigEndian.AppendUint64(b, m.ByteCount)
	if b, err = m.Match.AppendBinary(b); err != nil {
		return TypeFlowRemoved, b, fmt.Errorf("flow removed: match: %w", err)
	}
	return TypeFlowRemoved, b, nil
}

func decodeFlowRemoved(h Header, b []byte) (Message, error) {
	v := h.Version
	if !versionOK(v) {
		return nil, fmt.Errorf("flow removed: %w", errVersion(v))
	}
	m := new(FlowRemoved)
	fixed := flowRemoved13Len
	if v >= Version15 {
		fixed = flowRemoved15Len
	}
	if err := need(b, fixed, "flow removed"); err != nil {
		return nil, err
	}
	if v >= Version15 {
		m.Table = b[0]
		m.Reason = FlowRemovedReason(b[1])
		m.Priority = binary.BigEndian.Uint16(b[2:4])
		m.IdleTimeout = binary.BigEndian.Uint16(b[4:6])
		m.HardTimeout = binary.BigEndian.Uint16(b[6:8])
		m.Cookie = binary.BigEndian.Uint64(b[8:16])
	} else {
		m.Cookie = binary.BigEndian.Uint64(b[0:8])
		m.Priority = binary.BigEndian.Uint16(b[8:10])
		m.Reason = FlowRemovedReason(b[10])
		m.Table = b[11]
		m.Duration = duration(b[12:20])
		m.IdleTimeout = binary.BigEndian.Uint16(b[20:22])
		m.HardTimeout = binary.BigEndian.Uint16(b[22:24])
		m.PacketCount = binary.BigEndian.Uint64(b[24:32])
		m.ByteCount = binary.BigEndian.Uint64(b[32:40])
	}
	match, n, err := UnmarshalMatch(b[fixed:])
	if err != nil {
		return nil, fmt.Errorf("flow removed: match: %w", err)
	}
	m.Match = match
	rest := b[fixed+n:]
	if v >= Version15 {
		var c oxsCounters
		k, err := c.unmarshal(rest)
		if err != nil {
			return nil, fmt.Errorf("flow removed: stats: %w", err)
		}
		m.Duration, m.IdleTime, m.PacketCount, m.ByteCount = c.duration, c.idleTime, c.packets, c.bytes
		rest = rest[k:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("flow removed: %d trailing bytes: %w", len(rest), ErrMalformed)
	}
	return m, nil
}

// String renders the message roughly as ofp-print does, for logs.
func (m *FlowRemoved) String() string {
	var sb strings.Builder
	sb.WriteString(matchText(m.Priority, m.Match))
	fmt.Fprintf(&sb, " reason=%s", m.Reason)
	if m.Table != 0 {
		fmt.Fprintf(&sb, " table_id=%d", m.Table)
	}
	if m.Cookie != 0 {
		fmt.Fprintf(&sb, " cookie:0x%x", m.Cookie)
	}
	fmt.Fprintf(&sb, " duration%.3fs idle%d hard%d pkts%d bytes%d", m.Duration.Seconds(), m.IdleTimeout, m.HardTimeout, m.PacketCount, m.ByteCount)
	return sb.String()
}

func init() {
	registerType(TypePortStatus, decodePortStatus)
	registerType(TypeFlowRemoved, decodeFlowRemoved)
}
