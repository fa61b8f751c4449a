package openflow

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Reserved values used by flow, group and packet messages.
const (
	// NoBuffer is OFP_NO_BUFFER: the packet is not buffered in the switch.
	// Open vSwitch never buffers, so every message uses it.
	NoBuffer uint32 = 0xffffffff
	// TableAll is OFPTT_ALL, "every table", valid only in deletes and
	// statistics requests.
	TableAll uint8 = 0xff
	// DefaultPriority is OFP_DEFAULT_PRIORITY, the priority ovs-ofctl uses
	// when a flow names none, and which dump-flows leaves out.
	DefaultPriority uint16 = 0x8000
	// GroupMax is OFPG_MAX, the largest group id a group mod may create.
	GroupMax uint32 = 0xffffff00
	// GroupAll is OFPG_ALL, "every group", valid in group deletes and group
	// statistics requests.
	GroupAll uint32 = 0xfffffffc
	// GroupAny is OFPG_ANY, "no group": the out_group wildcard of flow
	// deletes and statistics requests.
	GroupAny uint32 = 0xffffffff
)

// FlowModCommand is ofp_flow_mod_command.
type FlowModCommand uint8

// Flow mod commands.
const (
	FlowAdd          FlowModCommand = 0
	FlowModify       FlowModCommand = 1
	FlowModifyStrict FlowModCommand = 2
	FlowDelete       FlowModCommand = 3
	FlowDeleteStrict FlowModCommand = 4
)

// String returns the command as ovs-ofctl's ofp-print spells it.
func (c FlowModCommand) String() string {
	switch c {
	case FlowAdd:
		return "ADD"
	case FlowModify:
		return "MOD"
	case FlowModifyStrict:
		return "MOD_STRICT"
	case FlowDelete:
		return "DEL"
	case FlowDeleteStrict:
		return "DEL_STRICT"
	}
	return fmt.Sprintf("command(%d)", uint8(c))
}

// FlowModFlags is the OFPFF_* bit set of a flow.
type FlowModFlags uint16

// Flow flags.
const (
	FlowSendFlowRem    FlowModFlags = 1 << 0
	FlowCheckOverlap   FlowModFlags = 1 << 1
	FlowResetCounts    FlowModFlags = 1 << 2
	FlowNoPacketCounts FlowModFlags = 1 << 3
	FlowNoByteCounts   FlowModFlags = 1 << 4
)

var flowFlagNames = [...]string{"send_flow_rem", "check_overlap", "reset_counts", "no_packet_counts", "no_byte_counts"}

// String returns the flags as dump-flows prints them: each set flag's name
// followed by one space ("send_flow_rem check_overlap "), or "" for none.
// Unknown bits are printed as "flags:0x..".
func (f FlowModFlags) String() string {
	var sb strings.Builder
	for i, name := range flowFlagNames {
		if f&(1<<i) != 0 {
			sb.WriteString(name)
			sb.WriteByte(' ')
		}
	}
	if rest := f &^ (1<<len(flowFlagNames) - 1); rest != 0 {
		fmt.Fprintf(&sb, "flags:0x%x ", uint16(rest))
	}
	return sb.String()
}

// FlowMod is OFPT_FLOW_MOD (type 14). The layout is the same in OF1.3 and
// OF1.5, except that OF1.4 and later carry Importance where OF1.3 has padding.
//
// Use NewFlowMod, or Flow's AddMod, ModifyStrictMod and DeleteStrictMod,
// which fill BufferID, OutPort and OutGroup with their "none" values; a zero
// FlowMod literal sends buffer 0, port 0 and group 0, which Open vSwitch
// rejects or treats as filters.
type FlowMod struct {
	Cookie      uint64
	CookieMask  uint64 // for modifies and deletes: which cookie bits must match
	Table       uint8
	Command     FlowModCommand
	IdleTimeout uint16 // seconds; 0 = none
	HardTimeout uint16 // seconds; 0 = none
	Priority    uint16
	BufferID    uint32 // NoBuffer with Open vSwitch
	OutPort     uint32 // deletes: only flows that output to this port; PortAny = any
	OutGroup    uint32 // deletes: only flows that use this group; GroupAny = any
	Flags       FlowModFlags
	Importance  uint16 // OF1.4 and later
	Match       Match
	// Instructions are ignored by deletes.
	Instructions []Instruction
}

// NewFlowMod returns a flow mod with the given command, DefaultPriority and
// no buffer, out_port or out_group.
func NewFlowMod(cmd FlowModCommand) *FlowMod {
	return &FlowMod{Command: cmd, Priority: DefaultPriority, BufferID: NoBuffer, OutPort: PortAny, OutGroup: GroupAny}
}

// versionOK reports whether this package encodes messages for v (OF1.3,
// OF1.4 and OF1.5).
func versionOK(v Version) bool { return v >= Version13 && v <= Version15 }

// errVersion reports a version this package does not encode or decode.
func errVersion(v Version) error {
	return fmt.Errorf("version %s: %w", v, ErrUnsupported)
}

// flowModFixedLen is the size of ofp_flow_mod after the header, before the match.
const flowModFixedLen = 40

func (m *FlowMod) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b, err := m.appendFlowMod(b, v)
	return TypeFlowMod, b, err
}

// appendFlowMod appends the flow mod body (everything after the header).
//
//	8 bytes: cookie
//	8 bytes: cookie_mask
//	1 byte: table_id
//	1 byte: command
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	2 bytes: priority
//	4 bytes: buffer_id
//	4 bytes: out_port
//	4 bytes: out_group
//	2 bytes: flags
//	2 bytes: importance (OF1.4+), zero padding in OF1.3
//	ofp_match, padded to 8
//	instructions
func (m *FlowMod) appendFlowMod(b []byte, v Version) ([]byte, error) {
	if !versionOK(v) {
		return b, fmt.Errorf("flow mod: %w", errVersion(v))
	}
	if m.Importance != 0 && v < Version14 {
		return b, fmt.Errorf("flow mod: importance %d needs OF1.4 or later, not %s: %w", m.Importance, v, ErrUnsupported)
	}
	b = binary.BigEndian.AppendUint64(b, m.Cookie)
	b = binary.BigEndian.AppendUint64(b, m.CookieMask)
	b = append(b, m.Table, uint8(m.Command))
	b = binary.BigEndian.AppendUint16(b, m.IdleTimeout)
	b = binary.BigEndian.AppendUint16(b, m.HardTimeout)
	b = binary.BigEndian.AppendUint16(b, m.Priority)
	b = binary.BigEndian.AppendUint32(b, m.BufferID)
	b = binary.BigEndian.AppendUint32(b, m.OutPort)
	b = binary.BigEndian.AppendUint32(b, m.OutGroup)
	b = binary.BigEndian.AppendUint16(b, uint16(m.Flags))
	b = binary.BigEndian.AppendUint16(b, m.Importance)
	b, err := m.Match.AppendBinary(b)
	if err != nil {
		return b, fmt.Errorf("flow mod: match: %w", err)
	}
	b, err = AppendInstructions(b, v, m.Instructions)
	if err != nil {
		return b, fmt.Errorf("flow mod: instructions: %w", err)
	}
	return b, nil
}

func decodeFlowMod(h Header, body []byte) (Message, error) {
	m := new(FlowMod)
	if err := m.unmarshal(h.Version, body); err != nil {
		return nil, err
	}
	return m, nil
}

// unmarshal decodes a flow mod body of version v.
func (m *FlowMod) unmarshal(v Version, b []byte) error {
	if !versionOK(v) {
		return fmt.Errorf("flow mod: %w", errVersion(v))
	}
	if err := need(b, flowModFixedLen, "flow mod"); err != nil {
		return err
	}
	*m = FlowMod{
		Cookie:      binary.BigEndian.Uint64(b[0:8]),
		CookieMask:  binary.BigEndian.Uint64(b[8:16]),
		Table:       b[16],
		Command:     FlowModCommand(b[17]),
		IdleTimeout: binary.BigEndian.Uint16(b[18:20]),
		HardTimeout: binary.BigEndian.Uint16(b[20:22]),
		Priority:    binary.BigEndian.Uint16(b[22:24]),
		BufferID:    binary.BigEndian.Uint32(b[24:28]),
		OutPort:     binary.BigEndian.Uint32(b[28:32]),
		OutGroup:    binary.BigEndian.Uint32(b[32:36]),
		Flags:       FlowModFlags(binary.BigEndian.Uint16(b[36:38])),
	}
	if v >= Version14 {
		m.Importance = binary.BigEndian.Uint16(b[38:40])
	}
	match, n, err := UnmarshalMatch(b[flowModFixedLen:])
	if err != nil {
		return fmt.Errorf("flow mod: match: %w", err)
	}
	m.Match = match
	ins, err := UnmarshalInstructions(b[flowModFixedLen+n:], v)
	if err != nil {
		return fmt.Errorf("flow mod: instructions: %w", err)
	}
	m.Instructions = ins
	return nil
}

// Flow returns the flow a flow mod describes (its cookie, table, priority,
// match, instructions, timeouts, flags and importance).
func (m *FlowMod) Flow() Flow {
	return Flow{
		Table:        m.Table,
		Priority:     m.Priority,
		Cookie:       m.Cookie,
		Match:        m.Match,
		Instructions: m.Instructions,
		IdleTimeout:  m.IdleTimeout,
		HardTimeout:  m.HardTimeout,
		Flags:        m.Flags,
		Importance:   m.Importance,
	}
}

// String renders the flow mod roughly as ofp-print does, e.g.
// "ADD table:1 priority=100,ip actions=drop", for logs and errors.
func (m *FlowMod) String() string {
	var sb strings.Builder
	sb.WriteString(m.Command.String())
	if m.Table != 0 {
		fmt.Fprintf(&sb, " table:%d", m.Table)
	}
	if m.Cookie != 0 || m.CookieMask != 0 {
		fmt.Fprintf(&sb, " cookie:0x%x", m.Cookie)
		if m.CookieMask != 0 {
			fmt.Fprintf(&sb, "/0x%x", m.CookieMask)
		}
	}
	sb.WriteByte(' ')
	sb.WriteString(matchText(m.Priority, m.Match))
	if m.IdleTimeout != 0 {
		fmt.Fprintf(&sb, " idle:%d", m.IdleTimeout)
	}
	if m.HardTimeout != 0 {
		fmt.Fprintf(&sb, " hard:%d", m.HardTimeout)
	}
	if m.OutPort != PortAny {
		fmt.Fprintf(&sb, " out_port:%s", portString(m.OutPort))
	}
	if m.OutGroup != GroupAny {
		fmt.Fprintf(&sb, " out_group:%d", m.OutGroup)
	}
	if m.Flags != 0 {
		sb.WriteString(" flags:")
		sb.WriteString(strings.TrimSpace(m.Flags.String()))
	}
	if m.Importance != 0 {
		fmt.Fprintf(&sb, " importance:%d", m.Importance)
	}
	if m.Command != FlowDelete && m.Command != FlowDeleteStrict {
		sb.WriteString(" actions=")
		sb.WriteString(InstructionsString(m.Instructions))
	}
	return sb.String()
}

// matchText renders "priority=N,<match>" the way ovs-ofctl prints a flow's
// match: the priority is left out when it is DefaultPriority, and an empty
// result stays empty.
func matchText(priority uint16, m Match) string {
	s := m.String()
	if priority == DefaultPriority {
		return s
	}
	if s == "" {
		return fmt.Sprintf("priority=%d", priority)
	}
	return fmt.Sprintf("priority=%d,%s", priority, s)
}

// portString renders a 32-bit OpenFlow port number as ovs-ofctl does:
// reserved ports by name, others in decimal.
func portString(p uint32) string {
	if s, ok := reservedPortName32(p); ok {
		return s
	}
	if p == PortAny {
		return "ANY"
	}
	return fmt.Sprint(p)
}

func init() {
	registerType(TypeFlowMod, decodeFlowMod)
}
